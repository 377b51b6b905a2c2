#include "demo_membership.h"

#include <sys/wait.h>

#include <signal.h>

#include <fstream>
#include <functional>
#include <iostream>
#include <map>
#include <thread>

#include "cli/cli_common.h"
#include "demo_reshard.h"
#include "weightport/core/placement_builders.h"
#include "weightport/engine/rank/source_replicas.h"
#include "weightport/engine/session/plan_coordinator.h"

namespace weightport::cli {
namespace {

namespace fs = std::filesystem;
using std::chrono::milliseconds;

constexpr int kTrainerReplicas = 2;
constexpr int kTrainerTp = 2;
constexpr int kMembershipReplicas = 4;  // places in the plan: 3 replicas at first, one joins after version 2
constexpr uint64_t kVersions = 4;
constexpr milliseconds kRejoinTimeout(120'000);
// How long after version 3 began the source is killed: after the replicas read its chunk hashes
// (their first Gets), before they read all its chunks.
constexpr milliseconds kSourceKillDelay(20);

// The destination that reads the largest share of its bytes from its peers (the relayed steps),
// other than `except`; where shares tie, one that relays to others (`relay`) or one that relays to
// nobody (!`relay`).
Endpoint MostRelayedReplica(const Plan& plan, bool relay, int except = -1) {
  std::map<int, uint64_t> all, relayed, sent;
  for (const PlanStep& s : plan.steps) {
    all[s.to_rank] += s.bytes;
    if (s.from.side == PlanSide::kDestination) {
      relayed[s.to_rank] += s.bytes;
      sent[s.from.rank] += s.bytes;
    }
  }
  int best = -1;
  double best_share = -1;
  for (const auto& [rank, bytes] : all) {
    if (rank == except) continue;
    const double tie = (sent[rank] > 0) == relay ? 1e-9 : 0;
    const double share = static_cast<double>(relayed[rank]) / bytes + tie;
    if (share > best_share) best = rank, best_share = share;
  }
  return {PlanSide::kDestination, best};
}

// The replica to kill: the most relayed (where its bytes came from after it is back then shows),
// a relay itself where there is a tie (so its downstream has to read around it).
Endpoint ReplicaToKill(const Plan& plan) { return MostRelayedReplica(plan, /*relay=*/true); }

// The replica that joins late (a scale-out): of the others, the most relayed, one that relays to
// nobody where there is a tie, so that nobody reads around it meanwhile.
Endpoint LateReplica(const Plan& plan, const Endpoint& killed) {
  return MostRelayedReplica(plan, /*relay=*/false, killed.rank);
}

// The source to kill: the one the destinations read the most from.
Endpoint SourceToKill(const Plan& plan) {
  std::map<int, uint64_t> sent;
  for (const PlanStep& s : plan.steps)
    if (s.from.side == PlanSide::kSource) sent[s.from.rank] += s.bytes;
  int best = 0;
  for (const auto& [rank, bytes] : sent)
    if (bytes > sent[best]) best = rank;
  return {PlanSide::kSource, best};
}

// The JSON summary a rank process prints last (--json), or null (a killed process prints none).
nlohmann::json RankSummary(const std::string& log) {
  std::ifstream in(log);
  std::string line, last;
  while (std::getline(in, line))
    if (!line.empty() && line.front() == '{') last = line;
  return last.empty() ? nlohmann::json() : nlohmann::json::parse(last, nullptr, false);
}

nlohmann::ordered_json VersionJson(const PlanVersionReport& r) {
  std::vector<std::string> rejoined, joined, replaced;
  for (const Endpoint& ep : r.rejoined) rejoined.push_back(ep.ToString());
  for (const Endpoint& ep : r.joined) joined.push_back(ep.ToString());
  for (const Endpoint& ep : r.replaced_sources) replaced.push_back(ep.ToString());
  return {{"version", r.version},        {"rollback", r.rollback}, {"committed", r.committed},
          {"reason", r.reason},          {"bytes", r.bytes},       {"seconds", r.seconds},
          {"dropped", r.dropped},        {"rejoined", rejoined},   {"joined", joined},
          {"replaced_sources", replaced}};
}

// The replacement source's refill from its peers, from its summary; DataLoss saying why if it did
// not refill and check its shards.
Result<nlohmann::json> ReplacementRefill(const Endpoint& trainer, const fs::path& dir,
                                         const std::vector<Child>& children) {
  const nlohmann::json replaced = RankSummary((dir / (RankControlName(trainer) + ".again.log")).string());
  const nlohmann::json refill =
      replaced.is_object() ? replaced.value("refill", nlohmann::json()) : nlohmann::json();
  if (!refill.is_object() || !refill.value("verified", false)) {
    // Say why: the refill's own report, else the process's exit and the end of its log.
    std::string why = refill.is_object() ? refill.dump() : "no refill report";
    for (const Child& c : children)
      if (c.name == RankControlName(trainer) + ".again")
        why += "; the process exited with " + std::to_string(c.exit_code) + ", log " + c.log + ":\n" +
               Tail(c.log);
    return DataLoss(trainer.ToString() + "'s replacement did not refill its shards from its peers: " + why);
  }
  return refill;
}

// Where a rank's first version came from.
nlohmann::ordered_json FirstVersionJson(const Endpoint& ep, const nlohmann::ordered_json& rv) {
  const auto& first = rv.front();
  const uint64_t bytes = first["bytes"].get<uint64_t>(), peer = first["bytes_from_peers"].get<uint64_t>();
  return {{"rank", ep.ToString()},
          {"version", first["version"]},
          {"bytes", bytes},
          {"bytes_from_peers", peer},
          {"share_from_peers", bytes > 0 ? static_cast<double>(peer) / bytes : 0.0},
          {"seconds", first["seconds"]}};
}

// What the replicas' summaries say they received.
struct ReplicaOutcomes {
  nlohmann::ordered_json ranks = nlohmann::json::array();
  nlohmann::ordered_json newcomer, returned;  // the late replica's first version; the killed one's
  bool verified = true;                       // every version each made live matched
  bool live3 = true;                          // each holds version 3 (after the rollback)
};

Result<ReplicaOutcomes> ReadReplicaOutcomes(const std::vector<Child>& children, const Endpoint& replica,
                                            const Endpoint& trainer, const Endpoint& late,
                                            const std::function<void(const std::string&)>& say) {
  ReplicaOutcomes out;
  for (const Child& c : children) {
    const bool killed = (c.name == RankControlName(replica) || c.name == RankControlName(trainer));
    if (!killed && c.exit_code != 0)
      return Internal(c.name + " exited with " + std::to_string(c.exit_code) + ":\n" + Tail(c.log));
    const nlohmann::json summary = RankSummary(c.log);
    if (!summary.is_object() || summary.value("role", "") != "dst") continue;
    nlohmann::ordered_json rv = nlohmann::json::array();
    for (const auto& v : summary["versions"]) {
      const uint64_t bytes = v.value("bytes", uint64_t{0}), peer = v.value("peer_bytes", uint64_t{0});
      const bool restored = v.value("restored_bytes", uint64_t{0}) > 0;
      const bool ok = v.value("verified", false);
      out.verified = out.verified && ok;
      rv.push_back({{"version", v.value("version", uint64_t{0})},
                    {"rollback", restored},
                    {"verified", ok},
                    {"bytes", bytes},
                    {"bytes_from_peers", peer},
                    {"bytes_from_sources", bytes - peer},
                    {"restored_bytes", v.value("restored_bytes", uint64_t{0})},
                    {"bytes_from_source_replicas", v.value("refetched_replica_bytes", uint64_t{0})},
                    {"seconds", v.value("seconds", 0.0)}});
    }
    const uint64_t live = summary.value("live_version", uint64_t{0});
    out.live3 = out.live3 && live == 3;
    out.ranks.push_back({{"process", c.name}, {"live_version", live}, {"versions", rv}});
    if (c.name == RankControlName(late) && !rv.empty()) out.newcomer = FirstVersionJson(late, rv);
    if (c.name == RankControlName(replica) + ".again" && !rv.empty())
      out.returned = FirstVersionJson(replica, rv);
    for (const auto& v : rv)
      say("      " + c.name + " version " + std::to_string(v["version"].get<uint64_t>()) +
          (v["rollback"].get<bool>() ? " (rollback)" : "") + ": " +
          (v["verified"].get<bool>() ? "verified" : "NOT VERIFIED") + ", " +
          HumanBytes(v["bytes"].get<uint64_t>()) + " fetched, " +
          HumanBytes(v["bytes_from_peers"].get<uint64_t>()) + " of it from peers");
  }
  return out;
}

}  // namespace

Result<nlohmann::ordered_json> MembershipDemo(const MembershipDemoOptions& o, const fs::path& dir,
                                              std::vector<Child>& children) {
  auto say = [&](const std::string& line) {
    if (!o.json) std::cout << line << std::endl;
  };
  WP_ASSIGN_OR_RETURN(std::vector<TensorMeta> layout, ModelLayout(o.source));
  const std::vector<MeshAxis> trainer_axes = {ReplicaAxis("dp", kTrainerReplicas),
                                              TensorParallelAxis("tp", kTrainerTp)};
  const std::vector<MeshAxis> replicas = {ReplicaAxis("dp", kMembershipReplicas)};
  WP_ASSIGN_OR_RETURN(Placement src, BuildMesh(layout, trainer_axes));
  WP_ASSIGN_OR_RETURN(Placement dst, BuildMesh(layout, replicas));
  WP_ASSIGN_OR_RETURN(ReshardDemoSetup setup, SetUpReshardDemo(src, dst, /*fanout=*/1, o.source, dir));
  const ReshardPlanInputs& in = setup.in;
  const std::shared_ptr<const Plan> plan = setup.plan;
  const std::string& secret_path = setup.secret_path;
  PlanCoordinatorOptions co = setup.options;
  co.quorum = kMembershipReplicas - 2;  // the late one is not here, and one is killed
  co.rejoin = true;
  co.replicas = SourceReplicaGroups(*plan);
  for (const RankBuffer& b : plan->sources) co.source_shards[b.endpoint] = b.shards.size();
  co.log = [&](std::string line) {
    if (!o.json && line.find("joined") == std::string::npos)
      std::cerr << "  coordinator: " << line << std::endl;
  };
  const Endpoint replica = ReplicaToKill(*plan);
  const Endpoint late = LateReplica(*plan, replica);
  co.late = {late};
  const Endpoint trainer = SourceToKill(*plan);
  // The source is killed mid-version 3, from here: the version began, so the replicas have what they
  // need to read its chunks from its data-parallel peer instead.
  std::thread killer;
  pid_t trainer_pid = -1;
  co.on_begin = [&](uint64_t v) {
    if (v != 3 || trainer_pid <= 0) return;
    killer = std::thread([pid = trainer_pid] {
      std::this_thread::sleep_for(kSourceKillDelay);
      kill(pid, SIGKILL);
    });
  };
  PlanCoordinator coordinator(std::move(setup.listener), co);
  say("[1/4] " + o.source.Describe() + ": " + std::to_string(layout.size()) + " tensors, " +
      HumanBytes(plan->DestinationBytes()) + " to deliver per version; " + std::to_string(kTrainerReplicas) +
      " trainer replicas x TP " + std::to_string(kTrainerTp) + " -> " + std::to_string(kMembershipReplicas) +
      " inference replicas down a relay chain (" + late.ToString() + " joins later); " +
      std::to_string(plan->steps.size()) + " steps");

  // Starts `ep`'s process; `extra` are its fault drill's flags. `again`: a second process of a rank.
  auto start = [&](const Endpoint& ep, std::vector<std::string> extra, bool again) -> Status {
    const std::string name = RankControlName(ep) + (again ? ".again" : "");
    Child c{.name = name, .log = (dir / (name + ".log")).string()};
    std::vector<std::string> args =
        ReshardRankArgs(ep, in, coordinator.address(), secret_path, kVersions, o.transport, o.source);
    if (ep.side == PlanSide::kDestination) args.insert(args.end(), {"--keep-versions", "2"});
    args.insert(args.end(), extra.begin(), extra.end());
    WP_ASSIGN_OR_RETURN(c.pid, Spawn(args, c.log));
    children.push_back(std::move(c));
    return Status::Ok();
  };
  // Waits for a child killed by its drill, then starts its rank again and lets it back in.
  auto restart = [&](const Endpoint& ep, std::vector<std::string> extra) -> Status {
    for (Child& c : children)
      if (c.name == RankControlName(ep)) Reap(c, milliseconds(30'000));
    WP_RETURN_IF_ERROR(start(ep, std::move(extra), true));
    return coordinator.AwaitRejoins({ep}, kRejoinTimeout);
  };
  say("[2/4] starting " + std::to_string(co.ranks.size()) + " rank processes (" + o.transport +
      "); coordinator at " + coordinator.address());
  for (const Endpoint& ep : co.ranks) {
    if (ep == late) continue;
    std::vector<std::string> drill;
    if (ep == replica) drill = {"--crash-at-version", "2"};
    WP_RETURN_IF_ERROR(start(ep, drill, false));
    if (ep == trainer) trainer_pid = children.back().pid;
  }
  WP_RETURN_IF_ERROR(coordinator.WaitForJoins());

  say("[3/4] versions 1-4 with " + replica.ToString() + " killed in version 2 and back after it, " +
      late.ToString() + " new after it, " + trainer.ToString() +
      " killed in version 3 and replaced after it; then a rollback to 3");
  nlohmann::ordered_json versions = nlohmann::json::array();
  nlohmann::ordered_json events = nlohmann::json::array();
  bool all = true;
  auto run = [&](uint64_t v, bool rollback) -> Status {
    WP_ASSIGN_OR_RETURN(PlanVersionReport r,
                        rollback ? coordinator.RunRollback(v) : coordinator.RunVersion(v));
    all = all && r.committed;
    std::string line = std::string(rollback ? "      rollback to version " : "      version ") +
                       std::to_string(v) + ": " + (r.committed ? "committed" : "ABORTED: " + r.reason);
    for (const Endpoint& ep : r.rejoined) line += "; " + ep.ToString() + " back in";
    for (const Endpoint& ep : r.joined) line += "; " + ep.ToString() + " joined";
    for (const std::string& d : r.dropped) line += "; dropped " + d;
    for (const Endpoint& ep : r.replaced_sources)
      line += "; " + ep.ToString() + " lost, read from its replica";
    say(line);
    versions.push_back(VersionJson(r));
    return Status::Ok();
  };
  WP_RETURN_IF_ERROR(run(1, false));
  WP_RETURN_IF_ERROR(run(2, false));
  events.push_back({{"version", 2}, {"event", "replica killed"}, {"rank", replica.ToString()}});
  WP_RETURN_IF_ERROR(restart(replica, {}));
  events.push_back({{"after_version", 2}, {"event", "replica joined again"}, {"rank", replica.ToString()}});
  // A replica the service scales out to: its place in the plan was reserved, nobody read through it.
  WP_RETURN_IF_ERROR(start(late, {}, false));
  WP_RETURN_IF_ERROR(coordinator.AwaitRejoins({late}, kRejoinTimeout));
  events.push_back({{"after_version", 2}, {"event", "new replica joined"}, {"rank", late.ToString()}});
  Status third = run(3, false);
  if (killer.joinable()) killer.join();
  WP_RETURN_IF_ERROR(third);
  events.push_back({{"version", 3}, {"event", "source killed"}, {"rank", trainer.ToString()}});
  // It refills its shards from its data-parallel peer, which holds version 4 still (the coordinator
  // lets it in only once the other sources announced 4), then publishes 4 itself.
  WP_RETURN_IF_ERROR(restart(trainer, {"--first-version", "4", "--refill"}));
  events.push_back(
      {{"after_version", 3}, {"event", "replacement source joined"}, {"rank", trainer.ToString()}});
  WP_RETURN_IF_ERROR(run(4, false));
  WP_RETURN_IF_ERROR(run(3, true));
  events.push_back({{"event", "rollback"}, {"from", 4}, {"to", 3}});
  coordinator.Finish();
  for (Child& c : children) Reap(c, milliseconds(60'000));

  say("[4/4] what each replica received");
  WP_ASSIGN_OR_RETURN(const nlohmann::json refill, ReplacementRefill(trainer, dir, children));
  events.back()["refill"] = refill;
  say("      " + trainer.ToString() + "'s replacement refilled " +
      HumanBytes(refill.value("bytes", uint64_t{0})) + " from its peers in " +
      std::to_string(refill.value("seconds", 0.0)) + " s, checked against version 4");
  WP_ASSIGN_OR_RETURN(ReplicaOutcomes out, ReadReplicaOutcomes(children, replica, trainer, late, say));
  const bool verified = out.verified;
  if (!all) return Unavailable("a version or the rollback was aborted");
  if (!verified) return DataLoss("a replica committed a version that did not match the source model");
  if (!out.live3) return Internal("not every replica holds version 3 after the rollback");
  say("every replica verified every version it made live, and holds version 3 after the rollback");
  return nlohmann::ordered_json{{"scenario", "membership"},
                                {"model", o.source.Describe()},
                                {"sources", kTrainerReplicas * kTrainerTp},
                                {"destinations", kMembershipReplicas},
                                {"source_layout", "2 replicas x tp 2"},
                                {"destination_layout", "4 replicas (one late), relay chain"},
                                {"transport", o.transport},
                                {"events", events},
                                {"versions", versions},
                                {"ranks", out.ranks},
                                {"newcomer", out.newcomer},
                                {"returned", out.returned},
                                {"live_version", 3},
                                {"verified", verified}};
}

}  // namespace weightport::cli
