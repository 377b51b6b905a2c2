// weightport coordinator: a plan session's coordinator as a process of its own. With
// --rendezvous etcd://HOST:PORT it campaigns for the session in etcd and serves only while it
// leads; start two or more for a coordinator that survives one being killed (PlanServiceOptions::store).
#include <ctime>
#include <iostream>
#include <mutex>

#include <nlohmann/json.hpp>

#include "cli/cli_common.h"
#include "cli/option_checks.h"
#include "cli/pubsub/pubsub_common.h"
#include "weightport/core/json_util.h"
#include "weightport/engine/session/plan_service.h"

namespace weightport::cli {
namespace {

struct CoordinatorCliOptions {
  std::string listen = "127.0.0.1:0";
  std::string rendezvous;
  std::string session = "default";
  std::string secret_file;
  double timeout_s = 120;
  int64_t lease_ttl_s = 3;
  uint64_t chunk_bytes = 4ull << 20;
  int relay_fanout = 1;
  size_t quorum = 0;
  double run_for_s = 0;
  std::string metrics;
  bool json = false;
};

int RunCoordinator(const CoordinatorCliOptions& o) {
  auto fail = [](const Status& s) { return Fail("coordinator", s); };
  auto secret = LoadSecret(o.secret_file, false);
  if (!secret.ok()) return fail(secret.status());
  auto listen = ParseHostPort(o.listen, "127.0.0.1");
  if (!listen.ok()) return fail(listen.status().WithContext("--listen"));
  BlockShutdownSignals();  // before any thread starts, so that only the wait below sees them

  std::mutex log_mu;
  auto log = [&](const std::string& event, nlohmann::json fields = nlohmann::json::object()) {
    std::lock_guard<std::mutex> lock(log_mu);
    if (o.json) {
      fields["event"] = event;
      std::cout << json_util::Dump(fields) << std::endl;
    } else {
      std::cout << event << (fields.empty() ? "" : " " + json_util::Dump(fields)) << std::endl;
    }
  };
  PlanServiceOptions so;
  so.listen_host = listen->first;
  so.listen_port = listen->second;
  so.store = o.rendezvous;
  so.session = o.session;
  so.lease_ttl = std::chrono::seconds(o.lease_ttl_s);
  Metrics metrics;
  so.metrics = &metrics;
  auto metrics_server = StartMetricsServer(o.metrics, metrics);
  if (!metrics_server.ok()) return fail(metrics_server.status());
  so.quorum = o.quorum;
  if (o.chunk_bytes != 0) so.rendezvous.plan.chunk_bytes = o.chunk_bytes;  // 0: the plan's default
  so.rendezvous.plan.relay_fanout = o.relay_fanout;
  so.rendezvous.timeout = so.join_timeout = so.update_timeout =
      std::chrono::milliseconds(static_cast<int64_t>(o.timeout_s * 1e3));
  so.log = [&](std::string line) { log(line); };
  auto service = PlanService::Start(*secret, so);
  if (!service.ok()) return fail(service.status());
  nlohmann::json listening = {{"address", (*service)->address()},
                              {"session", o.session},
                              {"rendezvous", o.rendezvous.empty() ? "embedded" : o.rendezvous}};
  if (*metrics_server) listening["metrics"] = (*metrics_server)->address();
  log("listening", std::move(listening));
  // Report each version as it is decided; stop on a signal, --run-for, or the service's end.
  size_t reported = 0;
  auto report_decided = [&] {
    const auto outcomes = (*service)->outcomes();
    for (; reported < outcomes.size(); ++reported) {
      const PlanVersionOutcome& v = outcomes[reported];
      log("version", {{"version", v.version},
                      {"committed", v.committed},
                      {"reason", v.reason},
                      {"bytes", v.bytes},
                      {"seconds", v.seconds}});
    }
  };
  const auto start = std::chrono::steady_clock::now();
  int sig = 0;
  while (true) {
    sig = WaitForShutdownSignal(200);
    report_decided();  // on a signal too: versions decided since the last look are not dropped
    if (sig != 0) break;
    if (!(*service)->error().ok()) return fail((*service)->error());
    if (o.run_for_s > 0 && std::chrono::steady_clock::now() - start >
                               std::chrono::milliseconds(static_cast<int64_t>(o.run_for_s * 1e3)))
      break;
  }
  log(sig != 0 ? std::string("stopping on ") + ShutdownSignalName(sig) : "stopping after --run-for");
  (*service)->Stop();
  report_decided();  // what the service decided while it stopped
  return kExitOk;
}

}  // namespace

Command AddCoordinatorCommand(CLI::App& app) {
  auto o = std::make_shared<CoordinatorCliOptions>();
  auto* sub = app.add_subcommand(
      "coordinator",
      "Run a plan session's coordinator as its own process: the ranks (the Python package's\n"
      "Publisher and Subscriber) offer their layouts to it, it plans once and runs every version.\n"
      "With --rendezvous etcd://HOST:PORT it campaigns for --session in etcd and serves only while\n"
      "it leads: run two or more, and when the leader dies another takes over and completes or\n"
      "aborts the version in flight as recorded in etcd. Stops on SIGINT or SIGTERM.");
  sub->add_option("--listen", o->listen, "HOST:PORT to listen on (port 0: any free one)")
      ->capture_default_str();
  sub->add_option(
      "--rendezvous", o->rendezvous,
      "etcd://HOST:PORT: where the ranks find the coordinator and the record of every version lives; "
      "empty: this process only (the ranks are given --listen's address)");
  sub->add_option("--session", o->session, "The session's name in etcd ([A-Za-z0-9._-], up to 128)")
      ->capture_default_str();
  sub->add_option("--secret-file", o->secret_file, "Shared secret (mode 600)")->required();
  sub->add_option("--timeout", o->timeout_s, "Seconds for every rank to offer and join, and for each version")
      ->check(Bounded(kSessionTimeoutBound))
      ->capture_default_str();
  sub->add_option("--lease-ttl", o->lease_ttl_s,
                  "Whole seconds after a leader dies before another takes over")
      ->check(Bounded(kLeaseTtlBound))
      ->capture_default_str();
  sub->add_option("--chunk-bytes", o->chunk_bytes, "Chunk size of the plan")
      ->check(Bounded(kChunkBytesBound))
      ->capture_default_str();
  sub->add_option("--relay-fanout", o->relay_fanout,
                  "0: sources feed every replica; 1: a chain; k: a k-ary tree")
      ->check(Bounded(kRelayFanoutBound))
      ->capture_default_str();
  sub->add_option(
         "--quorum", o->quorum,
         "Commit to the destinations that verified when at least this many remain; 0: all or nothing")
      ->check(Bounded(kQuorumBound))
      ->capture_default_str();
  sub->add_option("--run-for", o->run_for_s, "Stop after this many seconds (0: until a signal)")
      ->check(FiniteRange(0, 86400 * 365));
  sub->add_option("--metrics", o->metrics,
                  "Serve Prometheus metrics at [HOST:]PORT/metrics: the store's health, whether this "
                  "coordinator leads");
  sub->add_flag("--json", o->json, "Log events as JSON lines");
  return {sub, [o] { return RunCoordinator(*o); }};
}

}  // namespace weightport::cli
