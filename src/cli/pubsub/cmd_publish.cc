// weightport publish: load or generate a model, wait for subscribers, publish versions of it.
#include <iostream>

#include "cli/cli_common.h"
#include "cli/option_checks.h"
#include "publish_loop.h"
#include "pubsub_common.h"
#include "weightport/control/metrics.h"
#include "weightport/control/metrics_server.h"

namespace weightport::cli {
namespace {

struct PublishOptions {
  ModelSource source;
  std::string listen = "127.0.0.1:7878";
  std::string coordinator;
  std::string secret_file;
  bool new_secret = false;
  size_t subscribers = 1;
  uint64_t versions = 1;
  uint64_t first_version = 1;
  double perturb = 0.01;
  std::string mode = "live";
  std::string transport = "shm";
  uint64_t chunk_size = kDefaultChunkSize;
  std::string metrics;
  double wait_s = 120;
  size_t quorum = 0;
  double update_timeout_s = 300;
  bool keep_going = false;
  bool rotate_keys = false;
  bool wait_each = false;
  bool json = false;
  bool quiet = false;
};

int RunPublish(const PublishOptions& o) {
  auto fail = [](const Status& s) { return Fail("publish", s); };
  auto mode = ParsePublishMode(o.mode);
  if (!mode.ok()) return fail(mode.status());
  auto secret = LoadSecret(o.secret_file, o.new_secret);
  if (!secret.ok()) return fail(secret.status());
  auto factory = MakeTransportFactory(o.transport);
  if (!factory.ok()) return fail(factory.status());
  auto layout = ModelLayout(o.source);
  if (!layout.ok()) return fail(layout.status());
  uint64_t model_bytes = 0;
  for (const TensorMeta& t : *layout) model_bytes += t.bytes;
  const uint64_t copies = 1 + (*mode == PublishMode::kSnapshot ? 1 : 0) + (o.rotate_keys ? 1 : 0);
  if (Status s = CheckModelFits(model_bytes, copies, o.transport); !s.ok()) return fail(s);

  Metrics metrics;
  std::unique_ptr<MetricsServer> metrics_server;
  WholePublisherOptions po;
  po.make_transport = *factory;
  po.chunk_size = o.chunk_size;
  po.coordinator = o.coordinator;
  if (o.coordinator.empty()) {
    auto listen = ParseHostPort(o.listen, "127.0.0.1");
    if (!listen.ok()) return fail(listen.status().WithContext("--listen"));
    po.listen_host = listen->first;
    po.listen_port = listen->second;
  }
  po.rotate_keys = o.rotate_keys;
  po.coordinator_options.metrics = &metrics;
  po.coordinator_options.quorum = o.quorum;
  po.coordinator_options.update_timeout =
      std::chrono::milliseconds(static_cast<int64_t>(o.update_timeout_s * 1e3));
  po.log = [quiet = o.quiet](std::string line) {
    if (!quiet) std::cerr << "weightport publish: " << line << std::endl;
  };
  auto server = StartMetricsServer(o.metrics, metrics);
  if (!server.ok()) return fail(server.status());
  metrics_server = std::move(*server);
  if (metrics_server && !o.quiet)
    std::cerr << "metrics at http://" << metrics_server->address() << "/metrics" << std::endl;
  auto publisher = WholePublisher::Create(*layout, *secret, po);
  if (!publisher.ok())
    return fail(o.coordinator.empty() ? NameTakenListenPort(publisher.status(), o.listen, o.metrics)
                                      : publisher.status());
  WholePublisher& pub = **publisher;

  ProgressPrinter progress("loading " + o.source.Describe(), o.quiet || o.json);
  if (Status s = LoadWeights(o.source, *layout, pub.weights(), std::ref(progress)); !s.ok()) return fail(s);
  if (!o.quiet && !o.json)
    std::cout << "publishing " << o.source.Describe() << " (" << layout->size() << " tensors, "
              << HumanBytes(pub.model_bytes()) << ") at " << pub.coordinator_address() << std::endl;
  if (WholeCoordinator* c = pub.coordinator()) {
    if (!o.quiet && !o.json) std::cout << "waiting for " << o.subscribers << " subscriber(s)" << std::endl;
    Status joined =
        c->WaitForSubscribers(o.subscribers, std::chrono::milliseconds(static_cast<int64_t>(o.wait_s * 1e3)));
    if (!joined.ok()) return fail(joined);
  }
  auto versions = PublishVersions(
      pub, {.versions = o.versions,
            .first_version = o.first_version,
            .perturb = o.perturb,
            .seed = o.source.seed,
            .mode = *mode,
            .quiet = o.quiet || o.json,
            .keep_going = o.keep_going,
            .subscribers = o.subscribers,
            .wait_each = o.wait_each,
            .subscriber_timeout = std::chrono::milliseconds(static_cast<int64_t>(o.wait_s * 1e3))});
  const uint64_t bytes = pub.model_bytes();
  pub.Close();
  if (!versions.ok()) return fail(versions.status());
  if (o.json) {
    nlohmann::ordered_json j = {
        {"model", o.source.Describe()},
        {"tensors", layout->size()},
        {"bytes", bytes},
        {"mode", o.mode},
        {"transport", o.transport},
        {"versions", *versions},
        {"peak_rss", PeakRssBytes()},
        {"budget_bytes", bytes * (*mode == PublishMode::kSnapshot ? 2 : 1) + MemoryOverheadBudget(bytes)}};
    std::cout << j.dump(2) << std::endl;
  }
  size_t aborted = 0;
  for (const auto& v : *versions) aborted += v["verified"].get<bool>() ? 0 : 1;
  if (aborted > 0) {
    std::cerr << "weightport publish: " << aborted << " of " << versions->size() << " version(s) aborted"
              << std::endl;
    return kExitFailure;
  }
  return kExitOk;
}

}  // namespace

Command AddPublishCommand(CLI::App& app) {
  auto o = std::make_shared<PublishOptions>();
  auto* sub = app.add_subcommand(
      "publish",
      "Publish a model to subscribers: wait for them, push version 1, then --versions - 1\n"
      "more (each a stand-in training step changing --perturb of the elements)");
  o->source.AddOptions(*sub);
  auto* listen = sub->add_option("--listen", o->listen, "Where the embedded coordinator listens, HOST:PORT")
                     ->capture_default_str();
  auto* coord = sub->add_option("--coordinator", o->coordinator,
                                "Join a standalone coordinator (weightport serve) at HOST:PORT instead");
  listen->excludes(coord);
  sub->add_option("--secret-file", o->secret_file, "Shared secret (mode 600)")->required();
  sub->add_flag("--new-secret", o->new_secret,
                "Create --secret-file with a random secret if it does not exist");
  sub->add_option("--subscribers", o->subscribers,
                  "Subscribers to wait for (up to --wait) before version 1; also with --coordinator")
      ->check(CLI::Range(size_t{1}, size_t{1} << 20))
      ->capture_default_str();
  sub->add_option("--versions", o->versions, "Versions to publish")
      ->check(CLI::Range(1, 1000000))
      ->capture_default_str();
  sub->add_option("--first-version", o->first_version,
                  "Number of the first version (a restarted publisher goes on where it stopped)")
      ->check(CLI::Range(uint64_t{1}, uint64_t{1} << 40))
      ->capture_default_str();
  sub->add_option("--perturb", o->perturb, "Fraction of elements each training step changes")
      ->check(FiniteRange(0.0, 1.0))
      ->capture_default_str();
  sub->add_option("--mode", o->mode, "live (trainer held until committed) or snapshot (one local copy)")
      ->check(CLI::IsMember({"live", "snapshot"}))
      ->capture_default_str();
  sub->add_option("--transport", o->transport, "shm (one host), tcp (across hosts) or auto")
      ->check(CLI::IsMember(kTransportChoices))
      ->capture_default_str();
  sub->add_option("--chunk-size", o->chunk_size, "Bytes per verified chunk")
      ->transform(ByteSize(4096, uint64_t{1} << 30))
      ->capture_default_str();
  sub->add_option("--metrics", o->metrics, "Serve Prometheus metrics at [HOST:]PORT/metrics");
  sub->add_option("--wait", o->wait_s, "Seconds to wait for the subscribers")
      ->check(FiniteRange(0, 86400 * 365))
      ->capture_default_str();
  sub->add_flag("--json", o->json, "Print a machine-readable summary");
  sub->add_option("--quorum", o->quorum,
                  "Commit a version to the subscribers that verified it when at least this many remain "
                  "(a lost or failing one is dropped from that version); 0: all or nothing")
      ->check(Bounded(kQuorumBound))
      ->capture_default_str();
  sub->add_option("--update-timeout", o->update_timeout_s,
                  "Seconds from a version's start to every subscriber verified; a subscriber still "
                  "fetching then fails the version (all or nothing) or is dropped from it (--quorum)")
      ->capture_default_str()
      ->check(FiniteRange(0.001, 86400 * 365));
  sub->add_flag("--rotate-keys", o->rotate_keys,
                "Serve each version from memory and a transport of its own, retired (keys revoked) once "
                "the version is decided; costs a copy and a transport start per version");
  sub->add_flag("--keep-going", o->keep_going, "Report an aborted version and publish the next one");
  sub->add_flag("--wait-each", o->wait_each,
                "Before every version, wait for --subscribers subscribers (a restarted one rejoins)");
  sub->add_flag("--quiet,-q", o->quiet, "No progress or log output");
  return {sub, [o] { return RunPublish(*o); }};
}

}  // namespace weightport::cli
