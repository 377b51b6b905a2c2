#include "reshard_run.h"

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <mutex>
#include <optional>

#include <signal.h>

#include "cli/cli_common.h"
#include "weightport/control/channel.h"
#include "weightport/core/json_util.h"
#include "weightport/cuda/device_memory.h"
#include "weightport/engine/rank/source_replicas.h"
#include "weightport/engine/session/plan_control.h"
#include "weightport/engine/session/plan_coordinator.h"
#include "weightport/engine/session/plan_destination.h"
#include "weightport/engine/session/plan_source.h"
#include "weightport/transport/progress_loop.h"

namespace weightport::cli {
namespace {

using std::chrono::milliseconds;

double Gbps(uint64_t bytes, double seconds) { return seconds > 0 ? bytes / seconds / 1e9 : 0; }

// --device: nullptr for none.
Result<std::shared_ptr<DeviceMemory>> DeviceOf(const std::string& name) {
  if (name == "none") return std::shared_ptr<DeviceMemory>();
  if (name == "stand-in") return HostStandInMemory();
  auto cuda = CudaDeviceMemory();
  if (!cuda.ok()) return cuda.status().WithContext("--device cuda");
  return cuda;
}

Result<std::shared_ptr<const Plan>> PlanOf(const ReshardOptions& o) {
  ReshardPlanInputs in = o.plan;
  in.chunk_bytes = o.chunk_kb << 10;
  return BuildReshardPlan(in, o.source);
}

// --rotate-keys: the coordinator's Rekey moves the rank to a fresh transport (the old keys stop
// working); the new keys are sent by the caller.
using MoveRank = std::function<Status()>;

Status NoRekeyAfter(const PlanControl::Event& verdict) {
  return FailedPrecondition("the coordinator sent no Rekey after version " + std::to_string(verdict.version) +
                            ": with --rotate-keys, give --rotate-keys to the coordinator too");
}

// --refill: a source started in place of a lost one takes its shards from its data-parallel peers
// (they hold the version before --first-version still: the coordinator lets it in only then), and
// checks them against that version of the model.
Status RefillFromPeers(const ReshardOptions& o, const Plan& plan, PlanRank& rank, PlanControl& member,
                       nlohmann::ordered_json& report) {
  WP_ASSIGN_OR_RETURN(RefillStats r, rank.Refill(member.joined_peers()));
  WP_ASSIGN_OR_RETURN(LoadedModel model, LoadModelFor(o.source, plan));
  const RankBuffer& buffer = *plan.Buffer(rank.endpoint());
  Status check;
  for (size_t i = 0; i < buffer.shards.size() && check.ok(); ++i)
    check = CheckShardVersion(plan, buffer.shards[i], model, o.first_version, {o.versions, o.perturb},
                              rank.shard_bytes(i));
  nlohmann::ordered_json from = nlohmann::json::object();
  for (const auto& [ep, bytes] : r.bytes_from) from[ep.ToString()] = bytes;
  const double s = std::chrono::duration<double>(r.elapsed).count();
  report["refill"] = {{"bytes", r.bytes},
                      {"shards", r.shards},
                      {"not_refilled", r.not_refilled},
                      {"seconds", s},
                      {"gbps", Gbps(r.bytes, s)},
                      {"bytes_from", from},
                      {"version", o.first_version},
                      {"verified", check.ok()}};
  return check.WithContext(rank.endpoint().ToString() + ": the shards refilled from its peers");
}

// A source: writes and publishes each version, then waits for the coordinator's verdict.
Status RunSource(const ReshardOptions& o, const Plan& plan, PlanRank& rank, PlanControl& member,
                 const MoveRank& move, DeviceMemory* device, nlohmann::ordered_json& report) {
  std::vector<std::byte> staged;  // a shard on its way to the device
  const RankBuffer& buffer = *plan.Buffer(rank.endpoint());
  if (o.refill) WP_RETURN_IF_ERROR(RefillFromPeers(o, plan, rank, member, report));
  WP_ASSIGN_OR_RETURN(LoadedModel model, LoadModelFor(o.source, plan));
  // The coordinator's verdicts (SourceFollower). With --rotate-keys each is held for the Rekey after
  // it: a second verdict, or a Bye, before that Rekey means the coordinator does not rotate keys.
  std::optional<PlanControl::Event> holding;
  SourceHooks hooks;
  hooks.rekey = [&](uint64_t) { return move(); };
  hooks.held = [&](const PlanControl::Event& verdict) {
    if (holding) return NoRekeyAfter(*holding);
    holding = verdict;
    return Status::Ok();
  };
  SourceFollower follower(rank, member, o.rotate_keys, hooks);
  const milliseconds wait(o.timeout_s * 1000LL);
  // The next verdict or Bye.
  auto next = [&]() -> Result<PlanControl::Event> {
    WP_ASSIGN_OR_RETURN(PlanControl::Event e, follower.Next(wait));
    if (e.kind == PlanControl::Event::kBye && holding) return NoRekeyAfter(*holding);
    holding.reset();
    return e;
  };
  uint64_t committed = 0;
  for (uint64_t v = o.first_version; v <= o.versions; ++v) {
    for (size_t i = 0; i < buffer.shards.size(); ++i) {
      std::span<std::byte> into = rank.shard_bytes(i);
      if (device != nullptr) {  // the trainer writes the device; Publish reads it from there
        staged.resize(into.size());
        into = staged;
      }
      WriteShardVersion(plan, buffer.shards[i], model, v, {o.versions, o.perturb}, into);
      if (device != nullptr) WP_RETURN_IF_ERROR(device->ToDevice(staged, rank.device_shard(i)));
    }
    const auto t0 = std::chrono::steady_clock::now();
    WP_RETURN_IF_ERROR(rank.Publish(v));
    // Publish converts, hashes and compresses what the plan asks of this source.
    const double publish_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    WP_RETURN_IF_ERROR(member.Ready(v, rank.replica_digests()));
    if (v == o.crash_at_version) raise(SIGKILL);  // announced, then gone: its replicas stand in
    WP_ASSIGN_OR_RETURN(PlanControl::Event e, next());
    if (e.kind == PlanControl::Event::kBye) return Cancelled("the coordinator ended the run early");
    const bool ok = e.kind == PlanControl::Event::kCommit;
    committed += ok;
    report["versions"].push_back({{"version", v},
                                  {"publish_s", publish_s},
                                  {"from_device_bytes", rank.published_from_device()},
                                  {"on_device_bytes", rank.published_on_device()},
                                  {"committed", ok},
                                  {"reason", e.reason}});
  }
  // Until Bye: a rollback the coordinator runs after the last version ends with a verdict here too.
  for (int verdicts = 0; verdicts < 64; ++verdicts) {
    WP_ASSIGN_OR_RETURN(PlanControl::Event e, next());
    if (e.kind == PlanControl::Event::kBye) break;
  }
  const uint64_t ran = o.versions + 1 - std::min(o.first_version, o.versions + 1);
  if (committed != ran) return Unavailable(std::to_string(ran - committed) + " version(s) aborted");
  return Status::Ok();
}

// A destination: receives each version it is told to, commits or aborts as told
// (FollowAsDestination), checks each committed version with --verify, writes --out at the end.
Status RunDestination(const ReshardOptions& o, const Plan& plan, PlanRank& rank, PlanControl& member,
                      const MoveRank& move, DeviceMemory* device, nlohmann::ordered_json& report) {
  std::vector<std::byte> scratch;  // a device shard read back for --verify
  const RankBuffer& buffer = *plan.Buffer(rank.endpoint());
  LoadedModel model;
  if (o.verify) {
    WP_ASSIGN_OR_RETURN(model, LoadModelFor(o.source, plan));
  }
  std::mutex mu;  // `received` runs on the receiving thread
  uint64_t committed = 0;
  Status aborted;
  DestinationHooks hooks;
  hooks.received = [&](uint64_t v, const Result<ReceiveStats>& r) {
    std::lock_guard<std::mutex> lock(mu);
    if (!r.ok()) {
      report["versions"].push_back({{"version", v}, {"error", r.status().message()}});
      return;
    }
    const double s = std::chrono::duration<double>(r->elapsed).count();
    report["versions"].push_back({{"version", v},
                                  {"bytes", r->bytes},
                                  {"peer_bytes", r->peer_bytes},
                                  {"restored_bytes", r->restored_bytes},
                                  {"chunks", r->chunks},
                                  {"kept_bytes", r->kept_bytes},
                                  {"frame_bytes", r->frame_bytes},
                                  {"bands_quantized", r->bands_quantized},
                                  {"bands_reused", r->bands_reused},
                                  {"rerouted_steps", r->rerouted_steps},
                                  {"rerouted_via_relay", r->rerouted_via_relay},
                                  {"refetched_from_replica", r->refetched_from_replica},
                                  {"refetched_replica_bytes", r->refetched_replica_bytes},
                                  {"capped_waits", r->capped_waits},
                                  {"yields", r->yields},
                                  {"polls", r->polls},
                                  {"congestion_events", r->congestion_events},
                                  {"delay_backoffs", r->delay_backoffs},
                                  {"min_window", r->min_window},
                                  {"seconds", s},
                                  {"device_bytes", r->device_bytes},
                                  {"device_kept_bytes", r->device_kept_bytes},
                                  {"device_direct_bytes", r->device_direct_bytes},
                                  {"source_device_bytes", r->source_device_bytes},
                                  {"device_copy_s", std::chrono::duration<double>(r->device_copy).count()},
                                  {"to_device_s", std::chrono::duration<double>(r->to_device).count()},
                                  {"gbps", Gbps(r->bytes, s)},
                                  {"retries", r->corrupt_refetched + r->errors_retried}});
  };
  hooks.committed = [&](uint64_t v) -> Status {
    std::lock_guard<std::mutex> lock(mu);
    ++committed;
    if (!o.verify) return Status::Ok();
    Status check;
    for (size_t i = 0; i < buffer.shards.size() && check.ok(); ++i) {
      // With --device-direct the host arena does not hold what landed on the device.
      if (!o.device_direct)
        check =
            CheckShardVersion(plan, buffer.shards[i], model, v, {o.versions, o.perturb}, rank.shard_bytes(i));
      if (check.ok() && device != nullptr) {  // the copy the device's users read
        scratch.resize(buffer.shards[i].bytes);
        check = device->ToHost(rank.device_shard(i), scratch);
        if (check.ok())
          check = CheckShardVersion(plan, buffer.shards[i], model, v, {o.versions, o.perturb}, scratch)
                      .WithContext("on " + device->name());
      }
    }
    if (!report["versions"].empty()) report["versions"].back()["verified"] = check.ok();
    return check;
  };
  hooks.aborted = [&](uint64_t v, const std::string& why) {
    std::lock_guard<std::mutex> lock(mu);
    if (aborted.ok()) aborted = Unavailable("version " + std::to_string(v) + " aborted: " + why);
  };
  if (o.rotate_keys) hooks.rekey = [&](uint64_t) { return move(); };
  if (o.crash_at_version > 0)
    hooks.before_receive = [&](uint64_t v) {
      if (v == o.crash_at_version) raise(SIGKILL);  // the version began and this rank is gone
      return Status::Ok();
    };
  Status s = FollowAsDestination(rank, member, milliseconds(o.timeout_s * 1000LL), hooks);
  report["committed"] = committed;
  report["live_version"] = rank.live_version();
  if (!o.out.empty()) {
    // With --device-direct the shards are on the device only: each read back as the file asks for
    // it (its scales come right after it, from the same read). A failed read leaves no file.
    const bool from_device = o.device_direct && device != nullptr;
    size_t held = buffer.shards.size();  // the shard in `scratch`
    Status read;
    Status wrote = WriteShardsFile(o.out, plan, buffer, [&](size_t i) {
      auto b = rank.shard_bytes(i);
      if (!from_device) return std::span<const std::byte>(b.data(), b.size());
      if (held != i && read.ok()) {
        scratch.resize(b.size());
        read =
            device->ToHost(rank.device_shard(i), scratch)
                .WithContext("--out " + o.out + ": shard " + std::to_string(i) + " from " + device->name());
        held = i;
      }
      return std::span<const std::byte>(scratch);
    });
    if (!read.ok()) std::filesystem::remove(o.out);
    if (s.ok()) s = !read.ok() ? read : wrote;
  }
  return s.ok() ? aborted : s;
}

}  // namespace

Status RunReshardRank(const ReshardOptions& o) {
  WP_ASSIGN_OR_RETURN(std::shared_ptr<const Plan> plan, PlanOf(o));
  const Endpoint me{o.role == "src" ? PlanSide::kSource : PlanSide::kDestination, o.rank};
  WP_ASSIGN_OR_RETURN(TransportFactory factory, MakeTransportFactory(o.transport));
  WP_ASSIGN_OR_RETURN(std::unique_ptr<Transport> transport, factory(RankControlName(me)));
  auto loop = std::make_unique<ProgressLoop>(std::move(transport));
  PlanRankOptions ro;
  ro.timeout = milliseconds(o.timeout_s * 1000LL);
  ro.delta = !o.no_delta;
  ro.rotate_keys = o.rotate_keys;
  WP_ASSIGN_OR_RETURN(ro.device, DeviceOf(o.device));
  ro.device_direct = o.device_direct;
  ro.keep_versions = o.keep_versions;
  ro.max_bytes_per_s = o.max_gbps * 1e9 / 8;
  if (me.side == PlanSide::kDestination) {
    WP_ASSIGN_OR_RETURN(const double relay_cap, RelayInboundCap(*plan, me, o.relay_headroom));
    if (relay_cap > 0 && (ro.max_bytes_per_s == 0 || relay_cap < ro.max_bytes_per_s))
      ro.max_bytes_per_s = relay_cap;
    ro.background = BackgroundFor(o.priority);
  }
  ro.delay_factor = o.delay_backoff;
  if (o.device_direct && !ro.device)
    return InvalidArgument("--device-direct needs --device cuda or stand-in");
  WP_ASSIGN_OR_RETURN(std::unique_ptr<PlanRank> rank, PlanRank::Create(plan, me, *loop, ro));
  WP_ASSIGN_OR_RETURN(Secret secret, LoadSecret(o.secret_file, false));
  // The coordinator may not listen yet: retry a refused or failed connection until the timeout; a
  // refusal by the coordinator itself (wrong secret, different plan) is final.
  const auto deadline = std::chrono::steady_clock::now() + milliseconds(o.timeout_s * 1000LL);
  auto member = RetryWhileUnreachable(deadline, milliseconds(200), [&](milliseconds) {
    return PlanControl::Join(o.coordinator, secret, *rank, milliseconds(o.timeout_s * 1000LL));
  });
  if (!member.ok()) return member.status();
  nlohmann::ordered_json report = {{"role", o.role}, {"rank", o.rank}, {"versions", nlohmann::json::array()}};
  const MoveRank move = [&] { return MoveToFreshTransport(*rank, loop, factory); };
  Status s = me.side == PlanSide::kSource
                 ? RunSource(o, *plan, *rank, **member, move, ro.device.get(), report)
                 : RunDestination(o, *plan, *rank, **member, move, ro.device.get(), report);
  report["ok"] = s.ok();
  if (!s.ok()) report["error"] = s.message();
  if (o.json) {
    std::cout << json_util::Dump(report) << std::endl;
  } else {
    for (const auto& v : report["versions"])
      std::cout << me.ToString() << ": " << json_util::Dump(v) << std::endl;
  }
  member = Status(Cancelled("done"));  // closes the control connection before the rank goes
  rank.reset();
  loop->Stop();
  return s;
}

Result<nlohmann::ordered_json> CoordinateVersions(PlanCoordinator& coordinator, uint64_t versions,
                                                  const std::function<void(const std::string&)>& say,
                                                  bool& all_committed, uint64_t rollback_to) {
  nlohmann::ordered_json out = nlohmann::json::array();
  all_committed = true;
  for (uint64_t step = 1; step <= versions + (rollback_to > 0); ++step) {
    const bool rollback = step > versions;
    const uint64_t v = rollback ? rollback_to : step;
    WP_ASSIGN_OR_RETURN(PlanVersionReport r,
                        rollback ? coordinator.RunRollback(v) : coordinator.RunVersion(v));
    all_committed = all_committed && r.committed;
    std::vector<std::string> rejoined, joined, replaced;
    for (const Endpoint& ep : r.rejoined) rejoined.push_back(ep.ToString());
    for (const Endpoint& ep : r.joined) joined.push_back(ep.ToString());
    for (const Endpoint& ep : r.replaced_sources) replaced.push_back(ep.ToString());
    nlohmann::ordered_json j = {
        {"version", v},     {"rollback", rollback}, {"committed", r.committed},
        {"bytes", r.bytes}, {"seconds", r.seconds}, {"gbps", Gbps(r.bytes, r.seconds)}};
    if (!r.committed) j["reason"] = r.reason;
    j["rekey_s"] = r.rekey_seconds;
    j["dropped"] = r.dropped;
    j["rejoined"] = rejoined;
    j["joined"] = joined;
    j["replaced_sources"] = replaced;
    uint64_t retries = 0;
    nlohmann::ordered_json dsts = nlohmann::json::array();
    for (const auto& d : r.destinations) {
      retries += d.retries;
      dsts.push_back({{"rank", d.endpoint.rank},
                      {"ok", d.ok},
                      {"bytes", d.bytes},
                      {"seconds", d.seconds},
                      {"gbps", Gbps(d.bytes, d.seconds)},
                      {"retries", d.retries}});
    }
    j["retries"] = retries;
    j["destinations"] = dsts;
    char line[256];
    std::snprintf(line, sizeof line,
                  "%sversion %llu: %s, %s in %.3f s, %.2f GB/s over %zu destinations, %llu retries",
                  rollback ? "rollback to " : "", static_cast<unsigned long long>(v),
                  r.committed ? "committed" : "ABORTED", HumanBytes(r.bytes).c_str(), r.seconds,
                  Gbps(r.bytes, r.seconds), r.destinations.size(), static_cast<unsigned long long>(retries));
    std::string text = std::string(line) + (r.committed ? "" : ": " + r.reason);
    if (r.rekey_seconds > 0) {
      std::snprintf(line, sizeof line, "; keys rotated in %.1f ms", r.rekey_seconds * 1e3);
      text += line;
    }
    for (const std::string& d : r.dropped) text += "; dropped " + d;
    for (const std::string& ep : rejoined) text += "; " + ep + " back in";
    for (const std::string& ep : joined) text += "; " + ep + " joined";
    for (const std::string& ep : replaced) text += "; " + ep + " lost, read from its replicas";
    say(text);
    out.push_back(std::move(j));
  }
  coordinator.Finish();
  return out;
}

Status RunReshardCoordinator(const ReshardOptions& o) {
  WP_ASSIGN_OR_RETURN(std::shared_ptr<const Plan> plan, PlanOf(o));
  WP_ASSIGN_OR_RETURN(Secret secret, LoadSecret(o.secret_file, false));
  WP_ASSIGN_OR_RETURN(auto hp, ParseHostPort(o.coordinator, "127.0.0.1"));
  WP_ASSIGN_OR_RETURN(auto listener,
                      ControlListener::Listen(hp.first, hp.second, "reshard-coordinator", secret));
  PlanCoordinatorOptions co;
  co.plan_digest = plan->Digest();
  co.ranks = PlanRanks(*plan);
  co.join_timeout = co.update_timeout = milliseconds(o.timeout_s * 1000LL);
  co.quorum = o.quorum;
  co.rotate_keys = o.rotate_keys;
  co.rejoin = o.rejoin;
  for (int rank : o.late) co.late.push_back({PlanSide::kDestination, rank});
  co.replicas = SourceReplicaGroups(*plan);
  for (const RankBuffer& b : plan->sources) co.source_shards[b.endpoint] = b.shards.size();
  co.log = [&](std::string line) {
    if (!o.json) std::cerr << line << std::endl;
  };
  PlanCoordinator coordinator(std::move(listener), co);
  if (!o.json)
    std::cout << "coordinator at " << coordinator.address() << ": " << plan->sources.size() << " source and "
              << plan->destinations.size() << " destination ranks, " << plan->steps.size() << " steps, "
              << HumanBytes(plan->TotalBytes()) << " per version" << std::endl;
  WP_RETURN_IF_ERROR(coordinator.WaitForJoins());
  bool all = false;
  WP_ASSIGN_OR_RETURN(auto versions, CoordinateVersions(
                                         coordinator, o.versions,
                                         [&](const std::string& l) {
                                           if (!o.json) std::cout << l << std::endl;
                                         },
                                         all, o.rollback_to));
  if (o.json)
    std::cout << nlohmann::ordered_json{{"plan_digest", plan->Digest()},
                                        {"steps", plan->steps.size()},
                                        {"lower_bound_s", plan->estimate.lower_bound_s},
                                        {"predicted_s", plan->estimate.predicted_s},
                                        {"versions", versions},
                                        {"ok", all}}
                     .dump()
              << std::endl;
  if (!all) return Unavailable("some versions were aborted");
  return Status::Ok();
}

}  // namespace weightport::cli
