#include "demo_reshard.h"

#include <iostream>

#include "cli/cli_common.h"
#include "cli/reshard/reshard_run.h"
#include "weightport/control/channel.h"
#include "weightport/core/json_util.h"
#include "weightport/core/placement_builders.h"
#include "weightport/engine/session/plan_coordinator.h"

namespace weightport::cli {
namespace {

namespace fs = std::filesystem;
using std::chrono::milliseconds;

constexpr int kReshardSources = 4;
constexpr int kReshardReplicas = 2;
constexpr int kReshardTp = 2;

}  // namespace

std::vector<std::string> ReshardRankArgs(const Endpoint& ep, const ReshardPlanInputs& in,
                                         const std::string& coordinator, const std::string& secret_path,
                                         uint64_t versions, const std::string& transport,
                                         const ModelSource& source) {
  const bool is_src = ep.side == PlanSide::kSource;
  std::vector<std::string> args = {"weightport",     "reshard",
                                   "--role",         is_src ? "src" : "dst",
                                   "--rank",         std::to_string(ep.rank),
                                   "--src",          in.src_json,
                                   "--dst",          in.dst_json,
                                   "--relay-fanout", std::to_string(in.relay_fanout),
                                   "--coordinator",  coordinator,
                                   "--secret-file",  secret_path,
                                   "--versions",     std::to_string(versions),
                                   "--transport",    transport,
                                   "--timeout-s",    "300",
                                   "--json"};
  if (!source.model_dir.empty()) {
    args.insert(args.end(), {"--model", source.model_dir});
  } else {
    args.insert(args.end(),
                {"--preset", source.preset, "--arch", source.arch, "--seed", std::to_string(source.seed)});
    if (source.model_bytes > 0)
      args.insert(args.end(), {"--model-bytes", std::to_string(source.model_bytes)});
  }
  if (!is_src) args.push_back("--verify");
  return args;
}

Result<ReshardDemoSetup> SetUpReshardDemo(const Placement& src, const Placement& dst, int fanout,
                                          const ModelSource& source, const fs::path& dir) {
  WP_RETURN_IF_ERROR(json_util::WriteTextFile((dir / "src.json").string(), src.ToJson().dump()));
  WP_RETURN_IF_ERROR(json_util::WriteTextFile((dir / "dst.json").string(), dst.ToJson().dump()));
  ReshardDemoSetup setup;
  setup.in = {(dir / "src.json").string(), (dir / "dst.json").string(), "", 4ull << 20, fanout};
  WP_ASSIGN_OR_RETURN(setup.plan, BuildReshardPlan(setup.in, source));
  setup.secret_path = (dir / "secret").string();
  WP_ASSIGN_OR_RETURN(Secret secret, LoadSecret(setup.secret_path, /*create_if_missing=*/true));
  WP_ASSIGN_OR_RETURN(setup.listener, ControlListener::Listen("127.0.0.1", 0, "reshard-coordinator", secret));
  setup.options.plan_digest = setup.plan->Digest();
  setup.options.ranks = PlanRanks(*setup.plan);
  setup.options.join_timeout = milliseconds(120'000);
  setup.options.update_timeout = milliseconds(300'000);
  return setup;
}

Result<nlohmann::ordered_json> ReshardDemo(const ReshardDemoOptions& o, const fs::path& dir,
                                           std::vector<Child>& children) {
  auto say = [&](const std::string& line) {
    if (!o.json) std::cout << line << std::endl;
  };
  WP_ASSIGN_OR_RETURN(std::vector<TensorMeta> layout, ModelLayout(o.source));
  WP_ASSIGN_OR_RETURN(Placement src, FsdpFlat(layout, kReshardSources));
  std::vector<MeshAxis> axes = {ReplicaAxis("dp", kReshardReplicas), TensorParallelAxis("tp", kReshardTp)};
  WP_ASSIGN_OR_RETURN(Placement dst, BuildMesh(layout, axes));
  WP_ASSIGN_OR_RETURN(ReshardDemoSetup setup, SetUpReshardDemo(src, dst, o.fanout, o.source, dir));
  const ReshardPlanInputs& in = setup.in;
  const std::shared_ptr<const Plan> plan = setup.plan;
  const std::string& secret_path = setup.secret_path;
  PlanCoordinatorOptions co = setup.options;
  co.log = [&](std::string line) {
    if (!o.json && line.find("joined") == std::string::npos)
      std::cerr << "  coordinator: " << line << std::endl;
  };
  PlanCoordinator coordinator(std::move(setup.listener), co);
  say("[1/3] " + o.source.Describe() + ": " + std::to_string(layout.size()) + " tensors, " +
      HumanBytes(plan->DestinationBytes()) + " to deliver per version; FSDP flat over " +
      std::to_string(kReshardSources) + " source ranks -> " + std::to_string(kReshardReplicas) +
      " replicas x TP " + std::to_string(kReshardTp) + "; " + std::to_string(plan->steps.size()) +
      " steps, relay fan-out " + std::to_string(o.fanout));

  say("[2/3] starting " + std::to_string(co.ranks.size()) + " rank processes (" + o.transport +
      "); coordinator at " + coordinator.address());
  for (const Endpoint& ep : co.ranks) {
    Child c{.name = RankControlName(ep), .log = (dir / (RankControlName(ep) + ".log")).string()};
    const std::vector<std::string> args =
        ReshardRankArgs(ep, in, coordinator.address(), secret_path, o.versions, o.transport, o.source);
    WP_ASSIGN_OR_RETURN(c.pid, Spawn(args, c.log));
    children.push_back(std::move(c));
  }
  Status joined = coordinator.WaitForJoins();
  if (!joined.ok()) {
    for (Child& c : children) Reap(c, milliseconds(1));
    std::string logs;
    for (const Child& c : children)
      if (c.exit_code != 0) logs += "\n" + c.name + ":\n" + Tail(c.log);
    return joined.WithContext(logs);
  }

  say("[3/3] moving " + std::to_string(o.versions) + " versions; each destination checks every byte of each");
  bool all = false;
  WP_ASSIGN_OR_RETURN(nlohmann::ordered_json versions,
                      CoordinateVersions(
                          coordinator, o.versions, [&](const std::string& l) { say("      " + l); }, all));
  for (Child& c : children) Reap(c, milliseconds(60'000));
  for (const Child& c : children)
    if (c.exit_code != 0)
      return Internal(c.name + " exited with " + std::to_string(c.exit_code) + ":\n" + Tail(c.log));
  if (!all) return Unavailable("some versions were aborted");
  say("every destination byte of every version matched the source model");
  return nlohmann::ordered_json{{"scenario", "reshard"},
                                {"model", o.source.Describe()},
                                {"sources", kReshardSources},
                                {"destinations", kReshardReplicas * kReshardTp},
                                {"source_layout", "fsdp-flat 4"},
                                {"destination_layout", "2 replicas x tp 2"},
                                {"fanout", o.fanout},
                                {"transport", o.transport},
                                {"plan_steps", plan->steps.size()},
                                {"bytes_per_version", plan->TotalBytes()},
                                {"verified", true},
                                {"versions", versions}};
}

}  // namespace weightport::cli
