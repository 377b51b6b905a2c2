#include "arena_layout.h"

#include "weightport/kernels/compress.h"

namespace weightport::arena_layout {
namespace {
uint64_t Align64(uint64_t n) { return (n + 63) & ~uint64_t{63}; }
}  // namespace

uint64_t SlotBytes(const Plan& plan) { return Align64(kernels::ZstdBound(plan.options.chunk_bytes)); }

std::map<Endpoint, ArenaLayout> ComputeLayouts(const Plan& plan) {
  std::map<Endpoint, ArenaLayout> out;
  auto add = [&](const RankBuffer& b, int copies) {
    ArenaLayout& l = out[b.endpoint];
    l.endpoint = b.endpoint;
    l.data_bytes = Align64(b.bytes);
    l.copies = copies;
  };
  for (const RankBuffer& b : plan.sources) add(b, 1);
  for (const RankBuffer& b : plan.destinations) add(b, 2);

  std::map<Endpoint, uint64_t> hashes;  // chunks so far, per source
  // Packed areas after the shards, in step order.
  auto area = [](ArenaLayout& l, const PlanStep& s) {
    l.area_offset[s.id] = l.data_bytes;
    l.data_bytes = Align64(l.data_bytes + s.bytes);
  };
  const uint64_t slot = SlotBytes(plan);
  auto slots = [slot](ArenaLayout& l, const PlanStep& s) {
    l.slot_offset[s.id] = l.data_bytes;
    l.data_bytes += slot * s.chunks;
  };
  for (const PlanStep& s : plan.steps) {
    if (s.transform == TransformKind::kConvertAtSender) area(out[s.from], s);
    if (ReceiverEndPacked(s)) area(out[Endpoint{PlanSide::kDestination, s.to_rank}], s);
    if (!s.compress) continue;
    if (s.from.side == PlanSide::kSource) slots(out[s.from], s);
    slots(out[Endpoint{PlanSide::kDestination, s.to_rank}], s);
  }
  for (const PlanStep& s : plan.steps) {
    if (s.from.side == PlanSide::kSource) {
      uint64_t& n = hashes[s.from];
      out[s.from].hash_slot[s.id] = n;
      n += s.chunks;
    }
    if (s.after >= 0) {
      const PlanStep& a = plan.steps[static_cast<size_t>(s.after)];
      ArenaLayout& l = out[Endpoint{PlanSide::kDestination, a.to_rank}];
      if (!l.counter_slot.count(a.id)) l.counter_slot.emplace(a.id, l.counter_slot.size());
    }
  }
  for (auto& [ep, l] : out) {
    l.hash_offset = l.data_bytes * static_cast<uint64_t>(l.copies);
    auto it = hashes.find(ep);
    l.hash_bytes = it == hashes.end() ? 0 : kHashHeaderBytes + kHashEntryBytes * it->second;
    l.counter_offset = Align64(l.hash_offset + l.hash_bytes);
    l.public_bytes = Align64(l.counter_offset + kCounterBytes * l.counter_slot.size());
  }
  return out;
}

}  // namespace weightport::arena_layout
