// weightport serve: the coordinator as a standalone daemon, with Prometheus metrics.
#include <ctime>
#include <iostream>
#include <mutex>

#include <nlohmann/json.hpp>

#include "cli/cli_common.h"
#include "cli/option_checks.h"
#include "pubsub_common.h"
#include "weightport/control/metrics.h"
#include "weightport/control/metrics_server.h"
#include "weightport/core/json_util.h"
#include "weightport/engine/pubsub/coordinator.h"

namespace weightport::cli {
namespace {

struct ServeOptions {
  std::string listen = "127.0.0.1:7878";
  std::string secret_file;
  bool new_secret = false;
  std::string metrics;
  double peer_timeout_s = 10;
  double update_timeout_s = 300;
  double run_for_s = 0;
  size_t quorum = 0;
  bool json = false;
};

std::string Now() {
  std::time_t t = std::time(nullptr);
  char buf[32];
  std::strftime(buf, sizeof(buf), "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&t));
  return buf;
}

int RunServe(const ServeOptions& o) {
  auto fail = [](const Status& s) { return Fail("serve", s); };
  auto secret = LoadSecret(o.secret_file, o.new_secret);
  if (!secret.ok()) return fail(secret.status());
  auto listen = ParseHostPort(o.listen, "127.0.0.1");
  if (!listen.ok()) return fail(listen.status().WithContext("--listen"));
  BlockShutdownSignals();  // before any thread starts, so that only sigwait below sees them

  std::mutex log_mu;
  Metrics metrics;
  WholeCoordinatorOptions co;
  co.peer_timeout = std::chrono::milliseconds(static_cast<int64_t>(o.peer_timeout_s * 1e3));
  co.update_timeout = std::chrono::milliseconds(static_cast<int64_t>(o.update_timeout_s * 1e3));
  co.quorum = o.quorum;
  co.metrics = &metrics;
  co.log = [&](std::string line) {
    std::lock_guard<std::mutex> lock(log_mu);
    if (o.json)
      std::cout << json_util::Dump({{"time", Now()}, {"event", line}}) << std::endl;
    else
      std::cout << Now() << " " << line << std::endl;
  };
  auto server = StartMetricsServer(o.metrics, metrics);
  if (!server.ok()) return fail(server.status());
  std::unique_ptr<MetricsServer> metrics_server = std::move(*server);
  auto coordinator = WholeCoordinator::Start(listen->first, listen->second, *secret, co);
  if (!coordinator.ok()) return fail(NameTakenListenPort(coordinator.status(), o.listen, o.metrics));
  co.log("coordinator listening on " + (*coordinator)->address() +
         (metrics_server ? ", metrics at http://" + metrics_server->address() + "/metrics" : ""));
  const int sig = WaitForShutdownSignal(static_cast<int64_t>(o.run_for_s * 1e3));
  co.log(sig != 0 ? "stopping on signal " + std::to_string(sig) : "stopping after --run-for");
  (*coordinator)->Stop();
  if (metrics_server) metrics_server->Stop();
  return kExitOk;
}

}  // namespace

Command AddServeCommand(CLI::App& app) {
  auto o = std::make_shared<ServeOptions>();
  auto* sub =
      app.add_subcommand("serve",
                         "Run the coordinator as a standalone daemon: publishers and subscribers join it\n"
                         "(publish --coordinator, subscribe --connect). Stops on SIGINT or SIGTERM.");
  sub->add_option("--listen", o->listen, "HOST:PORT to listen on")->capture_default_str();
  sub->add_option("--secret-file", o->secret_file, "Shared secret (mode 600)")->required();
  sub->add_flag("--new-secret", o->new_secret,
                "Create --secret-file with a random secret if it does not exist");
  sub->add_option("--metrics", o->metrics, "Serve Prometheus metrics at [HOST:]PORT/metrics");
  sub->add_option("--peer-timeout", o->peer_timeout_s, "Seconds of silence after which a peer is lost")
      ->check(FiniteRange(0.5, 3600.0))
      ->capture_default_str();
  sub->add_option("--update-timeout", o->update_timeout_s, "Seconds a version may take to be verified")
      ->check(Bounded(kSessionTimeoutBound))
      ->capture_default_str();
  sub->add_option("--quorum", o->quorum,
                  "Commit to the subscribers that verified when at least this many remain; 0: all or nothing")
      ->check(Bounded(kQuorumBound))
      ->capture_default_str();
  sub->add_option("--run-for", o->run_for_s, "Stop after this many seconds (0: until a signal)")
      ->check(FiniteRange(0, 86400 * 365));
  sub->add_flag("--json", o->json, "Log events as JSON lines");
  return {sub, [o] { return RunServe(*o); }};
}

}  // namespace weightport::cli
