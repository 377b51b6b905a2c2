// weightport demo: the main job on one host. This process publishes (with the embedded
// coordinator); N subscriber processes (`weightport subscribe`) receive a synthetic model and two
// more versions of it; each version is reported with its bytes, copy time, bandwidth, pause and
// verdict, and each process's peak memory is checked against the budget.
#include <fcntl.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>
#include <thread>

#include "cli/cli_common.h"
#include "cli/pubsub/publish_loop.h"
#include "cli/pubsub/pubsub_common.h"
#include "demo_children.h"
#include "demo_membership.h"
#include "demo_reshard.h"
#include "weightport/engine/pubsub/versioned_store.h"

namespace weightport::cli {
namespace {

namespace fs = std::filesystem;
using std::chrono::milliseconds;

struct DemoOptions {
  ModelSource source;
  size_t subscribers = 3;
  uint64_t versions = 3;
  double perturb = 0.01;
  std::string mode = "live";
  std::string swap_mode = "double-buffer";
  std::string transport = "shm";
  bool keep = false;
  bool no_verify = false;
  bool no_delta = false;
  bool rotate_keys = false;
  bool json = false;
  std::string scenario = "publish";
  int fanout = 1;
};

Result<uint64_t> PrivatePeakFromSummary(const std::string& log) {
  std::ifstream in(log);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const size_t start = text.rfind("\n{") == std::string::npos ? text.find('{') : text.rfind("\n{") + 1;
  nlohmann::json j = start == std::string::npos ? nlohmann::json()
                                                : nlohmann::json::parse(text.substr(start), nullptr, false);
  if (!j.is_object() || !j.contains("peak_private_rss") || !j["peak_private_rss"].is_number_unsigned())
    return Internal(log + ": no summary with peak_private_rss at its end");
  return j["peak_private_rss"].get<uint64_t>();
}

Result<nlohmann::ordered_json> Demo(const DemoOptions& o, const fs::path& dir, std::vector<Child>& children) {
  if (o.scenario == "membership")
    return MembershipDemo({.source = o.source, .transport = o.transport, .json = o.json}, dir, children);
  if (o.scenario == "reshard")
    return ReshardDemo({.source = o.source,
                        .versions = o.versions,
                        .transport = o.transport,
                        .fanout = o.fanout,
                        .json = o.json},
                       dir, children);
  auto say = [&](const std::string& line) {
    if (!o.json) std::cout << line << std::endl;
  };
  WP_ASSIGN_OR_RETURN(PublishMode mode, ParsePublishMode(o.mode));
  WP_ASSIGN_OR_RETURN(SwapMode swap, ParseSwapMode(o.swap_mode));
  WP_ASSIGN_OR_RETURN(TransportFactory factory, MakeTransportFactory(o.transport));
  const std::string secret_path = (dir / "secret").string();
  WP_ASSIGN_OR_RETURN(Secret secret, LoadSecret(secret_path, /*create_if_missing=*/true));
  WP_ASSIGN_OR_RETURN(std::vector<TensorMeta> layout, ModelLayout(o.source));

  WholePublisherOptions po;
  po.make_transport = factory;
  po.rotate_keys = o.rotate_keys;
  po.log = [&](std::string line) {
    if (!o.json) std::cerr << "  coordinator: " << line << std::endl;
  };
  WP_ASSIGN_OR_RETURN(std::unique_ptr<WholePublisher> publisher, WholePublisher::Create(layout, secret, po));
  WholePublisher& pub = *publisher;
  say("[1/3] " + o.source.Describe() + ": " + std::to_string(layout.size()) + " tensors, " +
      HumanBytes(pub.model_bytes()) + " in one registered arena; coordinator at " +
      pub.coordinator_address());
  ProgressPrinter progress("      filling the weights", o.json);
  WP_RETURN_IF_ERROR(LoadWeights(o.source, layout, pub.weights(), std::ref(progress)));

  say("[2/3] starting " + std::to_string(o.subscribers) + " subscriber processes (" + o.swap_mode + ", " +
      o.transport + ")");
  for (size_t i = 0; i < o.subscribers; ++i) {
    Child c{.name = "sub-" + std::to_string(i),
            .log = (dir / ("sub-" + std::to_string(i) + ".log")).string()};
    std::vector<std::string> args = {"weightport",    "subscribe", "--connect",   pub.coordinator_address(),
                                     "--secret-file", secret_path, "--name",      c.name,
                                     "--swap-mode",   o.swap_mode, "--transport", o.transport,
                                     "--json",        "--quiet"};
    if (o.no_verify) args.push_back("--no-verify");
    if (o.no_delta) args.push_back("--no-delta");
    WP_ASSIGN_OR_RETURN(c.pid, Spawn(args, c.log));
    children.push_back(std::move(c));
  }
  for (int waited = 0; pub.coordinator()->Subscribers().size() < o.subscribers; ++waited) {
    for (Child& c : children) {
      int status = 0;
      if (waitpid(c.pid, &status, WNOHANG) == c.pid) {
        c.pid = -1;
        return Unavailable("subscriber " + c.name + " exited before joining:\n" + Tail(c.log));
      }
    }
    if (waited > 600)  // 60 s
      return Timeout(std::to_string(pub.coordinator()->Subscribers().size()) + " of " +
                     std::to_string(o.subscribers) + " subscribers joined within 60 s");
    std::this_thread::sleep_for(milliseconds(100));
  }

  say("[3/3] publishing " + std::to_string(o.versions) + " versions (" + o.mode + " mode; " +
      Percent(o.perturb) + " of elements change between versions)");
  WP_ASSIGN_OR_RETURN(nlohmann::ordered_json versions, PublishVersions(pub, {.versions = o.versions,
                                                                             .perturb = o.perturb,
                                                                             .seed = o.source.seed,
                                                                             .mode = mode,
                                                                             .quiet = o.json,
                                                                             .subscribers = o.subscribers}));
  const uint64_t bytes = pub.model_bytes();
  const uint64_t publisher_rss = PeakRssBytes();
  pub.Close();  // says Bye: the subscribers exit
  for (Child& c : children) Reap(c, milliseconds(30'000));
  for (Child& c : children) {
    if (c.exit_code != 0)
      return Internal("subscriber " + c.name + " exited with " + std::to_string(c.exit_code) + ":\n" +
                      Tail(c.log));
    WP_ASSIGN_OR_RETURN(c.peak_private_rss, PrivatePeakFromSummary(c.log));
  }

  const uint64_t copies = swap == SwapMode::kInPlace ? 1 : 2;
  const uint64_t pub_budget = bytes * (mode == PublishMode::kSnapshot ? 2 : 1) + MemoryOverheadBudget(bytes);
  const uint64_t sub_budget = bytes * copies + MemoryOverheadBudget(bytes);
  nlohmann::ordered_json subs = nlohmann::ordered_json::array();
  bool within = publisher_rss <= pub_budget;
  for (const Child& c : children) {
    subs.push_back({{"name", c.name}, {"peak_rss", c.peak_rss}, {"peak_private_rss", c.peak_private_rss}});
    within = within && c.peak_private_rss <= sub_budget;
  }
  auto mib = [](uint64_t b) { return std::to_string(b >> 20) + " MiB"; };
  std::string rss_line = "peak memory: publisher " + mib(publisher_rss) + " (budget " + mib(pub_budget) + ")";
  for (size_t i = 0; i < children.size(); ++i)
    rss_line += (i == 0 ? "; subscribers " : ", ") + mib(children[i].peak_private_rss);
  say(rss_line + " private (budget " + mib(sub_budget) + " each)" +
      (within ? ", within budget" : "  OVER BUDGET"));

  return nlohmann::ordered_json{{"model", o.source.Describe()},
                                {"tensors", layout.size()},
                                {"bytes", bytes},
                                {"subscribers", o.subscribers},
                                {"mode", o.mode},
                                {"swap_mode", o.swap_mode},
                                {"transport", o.transport},
                                {"verified_chunks", !o.no_verify},
                                {"versions", versions},
                                {"peak_rss", {{"publisher", publisher_rss}, {"subscribers", subs}}},
                                {"budget_bytes", {{"publisher", pub_budget}, {"subscriber", sub_budget}}},
                                {"within_budget", within}};
}

// The options each scenario ignores: given explicitly, they are refused instead.
Status CheckScenarioOptions(const CLI::App& sub, const std::string& scenario) {
  static const std::vector<std::string> kPlanIgnores = {"--subscribers", "--perturb",    "--mode",
                                                        "--swap-mode",   "--no-delta",   "--rotate-keys",
                                                        "--no-verify",   "--model-bytes"};
  std::vector<std::string> ignored;
  if (scenario == "publish") ignored = {"--relay-fanout"};
  if (scenario == "reshard") ignored = kPlanIgnores;
  if (scenario == "membership") {
    ignored = kPlanIgnores;
    ignored.insert(ignored.end(), {"--versions", "--relay-fanout"});
  }
  for (const std::string& name : ignored) {
    if (sub.count(name) == 0) continue;
    std::string why =
        name == "--model-bytes" ? " (its plan places a model's named tensors: use --preset or --model)" : "";
    return InvalidArgument(name + " does nothing in --scenario " + scenario + why);
  }
  return Status::Ok();
}

// Removes the work directory unless --keep; after a failure only the secret goes, and the logs stay
// when there are any. Returns where the logs are ("" when none were kept).
std::string CleanUp(const fs::path& dir, bool keep, bool failed) {
  std::error_code ec;
  if (keep) return dir.string();
  if (failed) fs::remove(dir / "secret", ec);  // the logs may explain a failure; the secret goes
  if (!failed || fs::is_empty(dir, ec)) {
    fs::remove_all(dir, ec);
    return "";
  }
  return dir.string();
}

int RunDemo(const DemoOptions& o) {
  std::string tmpl = (fs::temp_directory_path() / "weightport-demo-XXXXXX").string();
  // SIGINT and SIGTERM go to a watcher that stops the children and removes the work directory
  // (which holds the secret); blocked before any thread or child starts (children unblock them).
  BlockShutdownSignals();
  if (!mkdtemp(tmpl.data())) return Fail("demo", ErrnoError("cannot create a temporary directory", errno));
  const fs::path dir = tmpl;
  std::atomic<bool> finished{false};
  std::thread watcher([&] {
    while (!finished.load()) {
      const int sig = WaitForShutdownSignal(200);
      if (sig == 0) continue;
      StopLiveChildren(milliseconds(3000));
      const std::string kept = CleanUp(dir, o.keep, /*failed=*/false);  // interrupted: nothing to explain
      std::cerr << "weightport demo: stopped by " << ShutdownSignalName(sig)
                << (kept.empty() ? "; work directory removed" : "; logs kept in " + kept) << std::endl;
      std::_Exit(128 + sig);
    }
  });
  std::vector<Child> children;
  auto result = Demo(o, dir, children);
  for (Child& c : children)  // on failure: stop whatever still runs
    if (c.pid > 0) {
      kill(c.pid, SIGTERM);
      Reap(c, milliseconds(5000));
    }
  finished = true;
  watcher.join();
  const std::string kept = CleanUp(dir, o.keep, !result.ok());
  if (!result.ok())
    return Fail("demo", kept.empty() ? result.status() : result.status().WithContext("logs in " + kept));
  if (o.json)
    std::cout << result->dump(2) << std::endl;
  else
    std::cout << "demo finished" << (o.keep ? "; logs kept in " + dir.string() : "") << std::endl;
  return kExitOk;
}

}  // namespace

Command AddDemoCommand(CLI::App& app) {
  auto o = std::make_shared<DemoOptions>();
  auto* sub = app.add_subcommand(
      "demo",
      "The main job on this host: a publisher and --subscribers subscriber processes; push a synthetic\n"
      "model, then more versions of it, and report bytes, copy time, GB/s, pause and verification per "
      "version");
  o->source.AddOptions(*sub);
  sub->add_option("--subscribers", o->subscribers, "Subscriber processes")
      ->check(CLI::Range(1, 64))
      ->capture_default_str();
  sub->add_option("--versions", o->versions, "Versions to publish")
      ->check(CLI::Range(1, 10000))
      ->capture_default_str();
  sub->add_option("--perturb", o->perturb, "Fraction of elements changed between versions")
      ->check(CLI::Range(0.0, 1.0))
      ->capture_default_str();
  sub->add_option("--mode", o->mode, "Publish mode: live or snapshot")
      ->check(CLI::IsMember({"live", "snapshot"}))
      ->capture_default_str();
  sub->add_option("--swap-mode", o->swap_mode,
                  "Subscribers' swap mode: double-buffer, stage-copy or in-place")
      ->check(CLI::IsMember({"double-buffer", "stage-copy", "in-place"}))
      ->capture_default_str();
  sub->add_option("--transport", o->transport, "shm, tcp or auto")
      ->check(CLI::IsMember(kTransportChoices))
      ->capture_default_str();
  sub->add_flag("--no-delta", o->no_delta,
                "Subscribers fetch every chunk of every version (measures full transfers; default: only what "
                "changed)");
  sub->add_flag("--rotate-keys", o->rotate_keys,
                "The publisher serves each version from memory and a transport of its own, retired once "
                "decided (keys revoked per version)");
  sub->add_flag("--no-verify", o->no_verify,
                "Subscribers skip the hash check of each chunk (measures the transport alone)");
  sub->add_option("--scenario", o->scenario,
                  "publish: one publisher, --subscribers subscribers; reshard: 4 FSDP source ranks feed 2\n"
                  "replicas x TP 2 destination ranks, each its own process, through a plan; membership: 2\n"
                  "trainer replicas x TP 2 feed 3 replicas down a relay chain while a replica is killed and\n"
                  "joins again, a source is killed and replaced, then all roll back from version 4 to 3")
      ->check(CLI::IsMember({"publish", "reshard", "membership"}))
      ->capture_default_str();
  sub->add_option("--relay-fanout", o->fanout,
                  "reshard: 0 every destination from the sources, 1 relay chain, k tree")
      ->check(CLI::Range(0, 8))
      ->capture_default_str();
  sub->add_flag("--keep", o->keep, "Keep the work directory (secret, subscriber logs)");
  sub->add_flag("--json", o->json, "Print a machine-readable summary");
  return {sub, [o, sub] {
            if (Status s = CheckScenarioOptions(*sub, o->scenario); !s.ok()) {
              std::cerr << "weightport demo: " << s.message() << std::endl;
              return kExitUsage;
            }
            return RunDemo(*o);
          }};
}

}  // namespace weightport::cli
