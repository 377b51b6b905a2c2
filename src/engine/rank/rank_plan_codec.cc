// The binary form of a RankPlan (rank_plan.h): the part's Plan (plan_binary.h), then the whole
// plan's step ids of its steps, then every rank's layout and a source's device offsets.
#include <algorithm>

#include "rank_plan_tables.h"
#include "weightport/engine/rank/rank_plan.h"
#include "weightport/plan/plan_binary.h"

namespace weightport {

using arena_layout::ArenaLayout;
using plan_rank_internal::PartDevice;
using plan_rank_internal::PartTables;
using namespace plan_binary;

namespace {
constexpr std::string_view kMagic = "WPRANK1";

uint64_t PackEndpoint(Endpoint e) {
  return (static_cast<uint64_t>(e.rank) << 1) | (e.side == PlanSide::kSource ? 0 : 1);
}
Result<Endpoint> GetEndpoint(std::string_view& in, const char* what) {
  WP_ASSIGN_OR_RETURN(uint64_t v, GetVarint(in, what));
  if ((v >> 1) > INT32_MAX) return InvalidArgument(std::string("rank plan: ") + what + " is out of range");
  return Endpoint{(v & 1) ? PlanSide::kDestination : PlanSide::kSource, static_cast<int>(v >> 1)};
}

void PutMap(std::string& out, const arena_layout::StepMap& m) {
  PutVarint(out, m.size());
  for (const auto& [k, v] : m) {
    PutVarint(out, k);
    PutVarint(out, v);
  }
}
Result<arena_layout::StepMap> GetMap(std::string_view& in, size_t steps, const char* what) {
  WP_ASSIGN_OR_RETURN(size_t n, GetCount(in, 2, what));
  arena_layout::StepMap m;
  m.reserve(n);
  for (size_t i = 0; i < n; ++i) {
    WP_ASSIGN_OR_RETURN(uint64_t k, GetVarint(in, what));
    WP_ASSIGN_OR_RETURN(uint64_t v, GetVarint(in, what));
    if (k >= steps)
      return InvalidArgument(std::string("rank plan: ") + what + " names step " + std::to_string(k));
    if (!m.empty() && k <= (m.end() - 1)->first)  // written in step order, each once
      return InvalidArgument(std::string("rank plan: ") + what + " out of step order at step " +
                             std::to_string(k));
    m.Set(static_cast<uint32_t>(k), v);
  }
  return m;
}
}  // namespace

std::string EncodeRankPlan(const RankPlan& part) {
  std::string out(kMagic);
  PutVarint(out, PackEndpoint(part.me));
  PutVarint(out, part.digest);
  PutVarint(out, part.whole_steps);
  EncodePlanBinary(*part.plan, out);
  uint64_t last = 0;
  for (uint32_t id : part.step_ids) {  // ascending: deltas are small
    PutVarint(out, id - last);
    last = id;
  }
  PutVarint(out, part.tables->layouts.size());
  for (const auto& [ep, l] : part.tables->layouts) {
    PutVarint(out, PackEndpoint(ep));
    for (uint64_t v : {l.data_bytes, static_cast<uint64_t>(l.copies), l.hash_offset, l.hash_bytes,
                       l.counter_offset, l.public_bytes})
      PutVarint(out, v);
    for (const auto* m : {&l.area_offset, &l.slot_offset, &l.hash_slot, &l.counter_slot}) PutMap(out, *m);
  }
  PutVarint(out, part.tables->devices.size());
  for (const auto& [ep, d] : part.tables->devices) {
    PutVarint(out, PackEndpoint(ep));
    PutVarint(out, d.bytes);
    PutVarint(out, d.offsets.size());
    for (uint64_t o : d.offsets) PutVarint(out, o);
  }
  PutVarint(out, part.replicated_shards.size());
  for (uint32_t shard : part.replicated_shards) PutVarint(out, shard);
  return out;
}

Result<RankPlan> DecodeRankPlan(std::string_view in) {
  if (in.substr(0, kMagic.size()) != kMagic) return InvalidArgument("not a weightport rank plan");
  in.remove_prefix(kMagic.size());
  RankPlan part;
  WP_ASSIGN_OR_RETURN(part.me, GetEndpoint(in, "rank"));
  WP_ASSIGN_OR_RETURN(part.digest, GetVarint(in, "digest"));
  WP_ASSIGN_OR_RETURN(part.whole_steps, GetVarint(in, "step count"));
  auto plan = DecodePlanBinary(in);
  if (!plan.ok()) return plan.status().WithContext("the part of " + part.me.ToString());
  const size_t steps = plan->steps.size();
  if (plan->Buffer(part.me) == nullptr) return InvalidArgument("rank plan: no buffer of its own rank");
  uint64_t id = 0;
  for (size_t i = 0; i < steps; ++i) {
    WP_ASSIGN_OR_RETURN(uint64_t delta, GetVarint(in, "step ids"));
    if ((i > 0 && delta == 0) || id + delta >= part.whole_steps || id + delta < id)
      return InvalidArgument("rank plan: step ids are not ascending within the plan");
    id += delta;
    part.step_ids.push_back(static_cast<uint32_t>(id));
  }
  auto tables = std::make_shared<PartTables>();
  WP_ASSIGN_OR_RETURN(size_t layouts, GetCount(in, 11, "layouts"));
  for (size_t i = 0; i < layouts; ++i) {
    ArenaLayout l;
    WP_ASSIGN_OR_RETURN(l.endpoint, GetEndpoint(in, "layout rank"));
    uint64_t copies = 0;
    for (uint64_t* v :
         {&l.data_bytes, &copies, &l.hash_offset, &l.hash_bytes, &l.counter_offset, &l.public_bytes}) {
      WP_ASSIGN_OR_RETURN(*v, GetVarint(in, "layout"));
    }
    if (copies < 1 || copies > 2)
      return InvalidArgument("rank plan: a layout with " + std::to_string(copies) + " copies");
    l.copies = static_cast<int>(copies);
    for (auto* m : {&l.area_offset, &l.slot_offset, &l.hash_slot, &l.counter_slot}) {
      WP_ASSIGN_OR_RETURN(*m, GetMap(in, steps, "layout entries"));
    }
    if (plan->Buffer(l.endpoint) == nullptr || !tables->layouts.emplace(l.endpoint, l).second)
      return InvalidArgument("rank plan: a layout for " + l.endpoint.ToString() + ", not a rank of the part");
  }
  if (tables->layouts.size() != plan->sources.size() + plan->destinations.size())
    return InvalidArgument("rank plan: not every rank of the part has a layout");
  WP_ASSIGN_OR_RETURN(size_t devices, GetCount(in, 3, "device layouts"));
  for (size_t i = 0; i < devices; ++i) {
    WP_ASSIGN_OR_RETURN(Endpoint ep, GetEndpoint(in, "device rank"));
    PartDevice d;
    WP_ASSIGN_OR_RETURN(d.bytes, GetVarint(in, "device bytes"));
    WP_ASSIGN_OR_RETURN(size_t n, GetCount(in, 1, "device offsets"));
    d.offsets.resize(n);
    for (uint64_t& o : d.offsets) {
      WP_ASSIGN_OR_RETURN(o, GetVarint(in, "device offsets"));
    }
    const RankBuffer* b = plan->Buffer(ep);
    if (ep.side != PlanSide::kSource || b == nullptr || b->shards.size() != n ||
        !tables->devices.emplace(ep, std::move(d)).second)
      return InvalidArgument("rank plan: device offsets for " + ep.ToString() + " do not match its shards");
  }
  const size_t own_shards = plan->Buffer(part.me)->shards.size();
  WP_ASSIGN_OR_RETURN(size_t replicated, GetCount(in, 1, "replicated shards"));
  for (size_t i = 0; i < replicated; ++i) {
    WP_ASSIGN_OR_RETURN(uint64_t shard, GetVarint(in, "replicated shards"));
    if (shard >= own_shards || (i > 0 && shard <= part.replicated_shards.back()))
      return InvalidArgument("rank plan: replicated shard " + std::to_string(shard) + " is not one of " +
                             std::to_string(own_shards) + " in ascending order");
    part.replicated_shards.push_back(static_cast<uint32_t>(shard));
  }
  if (!in.empty()) return InvalidArgument("rank plan: " + std::to_string(in.size()) + " bytes after its end");
  part.plan = std::make_shared<const Plan>(std::move(*plan));
  part.tables = std::move(tables);
  return part;
}

}  // namespace weightport
