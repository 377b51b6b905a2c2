// RankPlanCutter and the binary form of a part (rank_plan.h).
#include "weightport/engine/rank/rank_plan.h"

#include <algorithm>
#include <atomic>
#include <map>
#include <mutex>
#include <thread>

#include "compiled_rank.h"
#include "rank_plan_tables.h"
#include "weightport/engine/rank/source_replicas.h"
#include "weightport/plan/plan_binary.h"

namespace weightport {

using arena_layout::ArenaLayout;
using plan_rank_internal::PartDevice;
using plan_rank_internal::PartTables;

namespace {
Endpoint DestinationOf(const PlanStep& s) { return {PlanSide::kDestination, s.to_rank}; }

// Local index of `global` in the sorted `ids`.
Result<uint32_t> LocalOf(const std::vector<uint32_t>& ids, uint64_t global, const char* what) {
  auto it = std::lower_bound(ids.begin(), ids.end(), global);
  if (it == ids.end() || *it != global)
    return Internal(std::string("rank plan: ") + what + " " + std::to_string(global) + " is not in the part");
  return static_cast<uint32_t>(it - ids.begin());
}
}  // namespace

std::vector<Endpoint> RankPlan::peers() const {
  std::vector<Endpoint> out;
  for (const auto* side : {&plan->sources, &plan->destinations})
    for (const RankBuffer& b : *side)
      if (b.endpoint != me) out.push_back(b.endpoint);
  return out;
}

struct RankPlanCutter::Index {
  std::shared_ptr<const Plan> whole;
  uint64_t digest = 0;
  std::map<Endpoint, ArenaLayout> layouts;
  std::map<Endpoint, std::vector<uint32_t>> steps_of;    // steps each rank sends or receives, ascending
  std::map<Endpoint, PartDevice> devices;                // sources: the whole device copy's offsets
  std::map<Endpoint, std::vector<uint32_t>> replicated;  // sources: shards another source holds too
  // (source, shard) -> every holder of that slice (source_replicas.h): a destination's part carries
  // them all, so the rank can read a lost source's steps from a replica (CompileAlternates).
  std::map<std::pair<Endpoint, uint32_t>, std::vector<std::pair<Endpoint, uint32_t>>> holders;
};

RankPlanCutter::RankPlanCutter(std::shared_ptr<const Plan> whole) : index_(std::make_unique<Index>()) {
  Index& x = *index_;
  x.whole = std::move(whole);
  x.digest = x.whole->Digest();
  x.layouts = arena_layout::ComputeLayouts(*x.whole);
  for (const SourceReplicaGroup& g : SourceReplicaGroups(*x.whole))
    for (const auto& [ep, shard] : g.holders) {
      x.replicated[ep].push_back(shard);
      x.holders[{ep, shard}] = g.holders;
    }
  for (auto& [ep, shards] : x.replicated) std::sort(shards.begin(), shards.end());
  for (const PlanStep& s : x.whole->steps) {
    x.steps_of[s.from].push_back(s.id);
    x.steps_of[DestinationOf(s)].push_back(s.id);
  }
  for (const RankBuffer& b : x.whole->sources) {
    const plan_rank_internal::DeviceLayout d = plan_rank_internal::DeviceLayout::Of(b);
    x.devices[b.endpoint] = PartDevice{d.offsets, d.bytes};
  }
}

RankPlanCutter::~RankPlanCutter() = default;

uint64_t RankPlanCutter::digest() const { return index_->digest; }

Result<RankPlan> RankPlanCutter::Cut(Endpoint me) const {
  const Index& x = *index_;
  const Plan& whole = *x.whole;
  const RankBuffer* mine = whole.Buffer(me);
  if (mine == nullptr) return NotFound(me.ToString() + " is not a rank of the plan");
  // The steps: this rank's, and every step upstream of one it receives.
  std::vector<uint32_t> ids;
  if (auto it = x.steps_of.find(me); it != x.steps_of.end()) ids = it->second;
  const size_t own = ids.size();
  for (size_t i = 0; i < own; ++i) {
    const PlanStep& s = whole.steps[ids[i]];
    if (DestinationOf(s) != me) continue;
    for (int64_t a = s.after; a >= 0; a = whole.steps[static_cast<size_t>(a)].after)
      ids.push_back(static_cast<uint32_t>(a));
  }
  std::sort(ids.begin(), ids.end());
  ids.erase(std::unique(ids.begin(), ids.end()), ids.end());

  // Tensors, and per rank the shards the part keeps (all of this rank's own).
  std::vector<uint32_t> tensors;
  std::map<Endpoint, std::vector<uint32_t>> shards;
  for (const PlannedShard& s : mine->shards) tensors.push_back(s.tensor);
  std::vector<uint32_t>& own_shards = shards[me];
  for (uint32_t i = 0; i < mine->shards.size(); ++i) own_shards.push_back(i);
  for (uint32_t id : ids) {
    const PlanStep& s = whole.steps[id];
    tensors.push_back(s.tensor);
    if (s.from != me) shards[s.from].push_back(s.from_shard);
    if (DestinationOf(s) != me) shards[DestinationOf(s)].push_back(s.to_shard);
    if (DestinationOf(s) == me && s.after < 0)  // the replicas of its sender's shard, offsets kept
      if (auto h = x.holders.find({s.from, s.from_shard}); h != x.holders.end())
        for (const auto& [ep, shard] : h->second) shards[ep].push_back(shard);
  }
  std::sort(tensors.begin(), tensors.end());
  tensors.erase(std::unique(tensors.begin(), tensors.end()), tensors.end());
  for (auto& [ep, list] : shards) {
    std::sort(list.begin(), list.end());
    list.erase(std::unique(list.begin(), list.end()), list.end());
  }

  auto part = std::make_shared<Plan>();
  part->options = whole.options;
  for (uint32_t t : tensors) {
    part->tensors.push_back(whole.tensors[t]);
    part->destination_dtypes.push_back(whole.destination_dtypes[t]);
    if (!whole.destination_scaling.empty()) part->destination_scaling.push_back(whole.destination_scaling[t]);
  }
  // destination_scaling is written only when some tensor has one scale (plan.h): keep it so.
  if (std::none_of(part->destination_scaling.begin(), part->destination_scaling.end(),
                   [](kernels::Fp8Scaling s) { return s == kernels::Fp8Scaling::kPerTensor; }))
    part->destination_scaling.clear();

  // Buffers and hosts.
  std::map<int, int> host_index;  // whole -> part
  std::vector<HostSpec> hosts;
  for (const auto& [ep, list] : shards) {
    const RankBuffer* b = whole.Buffer(ep);
    if (b == nullptr) return Internal("rank plan: " + ep.ToString() + " has no buffer");
    RankBuffer out;
    out.endpoint = ep;
    out.bytes = b->bytes;
    auto [h, fresh] = host_index.emplace(b->host, static_cast<int>(hosts.size()));
    if (fresh) {
      const HostSpec& spec = whole.topology.hosts().at(static_cast<size_t>(b->host));
      hosts.push_back(HostSpec{spec.name, spec.nic_gbps, {}, {}});
    }
    out.host = h->second;
    (ep.side == PlanSide::kSource ? hosts[h->second].src_ranks : hosts[h->second].dst_ranks)
        .push_back(ep.rank);
    for (uint32_t i : list) {
      PlannedShard s = b->shards.at(i);
      WP_ASSIGN_OR_RETURN(s.tensor, LocalOf(tensors, s.tensor, "tensor"));
      out.shards.push_back(std::move(s));
    }
    (ep.side == PlanSide::kSource ? part->sources : part->destinations).push_back(std::move(out));
  }
  WP_ASSIGN_OR_RETURN(part->topology, Topology::Make(std::move(hosts), whole.topology.default_nic_gbps(),
                                                     whole.topology.intra_host_gbps()));

  // Steps, renumbered; their layout entries on both ends, translated.
  auto tables = std::make_shared<PartTables>();
  for (const auto& [ep, list] : shards) {
    const ArenaLayout& whole_layout = x.layouts.at(ep);
    ArenaLayout l;  // its scalars; the entries of the part's steps follow
    l.endpoint = ep;
    l.data_bytes = whole_layout.data_bytes;
    l.copies = whole_layout.copies;
    l.hash_offset = whole_layout.hash_offset;
    l.hash_bytes = whole_layout.hash_bytes;
    l.counter_offset = whole_layout.counter_offset;
    l.public_bytes = whole_layout.public_bytes;
    tables->layouts.emplace(ep, std::move(l));
    if (auto d = x.devices.find(ep); d != x.devices.end()) {
      PartDevice& pd = tables->devices[ep];
      pd.bytes = d->second.bytes;
      for (uint32_t i : list) pd.offsets.push_back(d->second.offsets.at(i));
    }
  }
  part->steps.reserve(ids.size());
  for (uint32_t local = 0; local < ids.size(); ++local) {
    PlanStep s = whole.steps[ids[local]];
    const uint32_t global = s.id;
    s.id = local;
    WP_ASSIGN_OR_RETURN(s.tensor, LocalOf(tensors, s.tensor, "tensor"));
    WP_ASSIGN_OR_RETURN(s.from_shard, LocalOf(shards.at(s.from), s.from_shard, "shard"));
    WP_ASSIGN_OR_RETURN(s.to_shard, LocalOf(shards.at(DestinationOf(s)), s.to_shard, "shard"));
    if (s.after >= 0) {
      WP_ASSIGN_OR_RETURN(s.after, LocalOf(ids, static_cast<uint64_t>(s.after), "step"));
    }
    WP_ASSIGN_OR_RETURN(s.root, LocalOf(ids, s.root, "step"));
    for (const Endpoint& ep : {s.from, DestinationOf(s)}) {
      const ArenaLayout& from = x.layouts.at(ep);
      ArenaLayout& to = tables->layouts.at(ep);
      auto copy = [&](const arena_layout::StepMap& in, arena_layout::StepMap& out) {
        if (const uint64_t* v = in.Find(global)) out.Set(local, *v);  // local ids ascend: appended
      };
      copy(from.area_offset, to.area_offset);
      copy(from.slot_offset, to.slot_offset);
      copy(from.hash_slot, to.hash_slot);
      copy(from.counter_slot, to.counter_slot);
    }
    part->steps.push_back(std::move(s));
  }
  // Not Validate()d here: the rank does it on DecodeRankPlan, on its own cores.
  RankPlan out;
  out.me = me;
  out.digest = x.digest;
  out.whole_steps = whole.steps.size();
  out.plan = std::move(part);
  out.step_ids = std::move(ids);
  out.tables = std::move(tables);
  if (auto r = x.replicated.find(me); r != x.replicated.end()) out.replicated_shards = r->second;
  return out;
}

Status RankPlanCutter::CutEach(const std::vector<Endpoint>& ranks, size_t threads,
                               const std::function<Status(size_t, RankPlan&&, std::string&&)>& done) const {
  std::atomic<size_t> next{0};
  std::mutex mu;
  Status first;
  auto work = [&] {
    for (size_t i = next++; i < ranks.size(); i = next++) {
      Result<RankPlan> part = Cut(ranks[i]);
      Status s = part.status();
      if (s.ok()) {
        std::string encoded = EncodeRankPlan(*part);
        s = done(i, std::move(*part), std::move(encoded));
      }
      if (!s.ok()) {
        std::lock_guard<std::mutex> lock(mu);
        if (first.ok()) first = s;
        next = ranks.size();  // the others stop after their current rank
      }
    }
  };
  std::vector<std::thread> pool;
  for (size_t t = 1; t < std::clamp<size_t>(threads, 1, ranks.size()); ++t) pool.emplace_back(work);
  work();
  for (std::thread& t : pool) t.join();
  return first;
}

Result<uint64_t> DryCompile(const RankPlan& part) {
  WP_ASSIGN_OR_RETURN(auto compiled, plan_rank_internal::CompileRank(part, {}));
  return compiled->arena_bytes;
}

Result<uint64_t> DryCompile(std::shared_ptr<const Plan> whole, Endpoint me) {
  WP_ASSIGN_OR_RETURN(auto compiled, plan_rank_internal::CompileRank(std::move(whole), me, {}));
  return compiled->arena_bytes;
}

}  // namespace weightport
