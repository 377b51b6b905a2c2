#include "arena_layout.h"

#include <algorithm>
#include <stdexcept>
#include <string>

#include "weightport/kernels/compress.h"

namespace weightport::arena_layout {

namespace {
bool EntryBefore(const StepMap::value_type& entry, uint32_t step) { return entry.first < step; }
}  // namespace

void StepMap::Set(uint32_t step, uint64_t value) {
  if (entries_.empty() || entries_.back().first < step) {
    entries_.emplace_back(step, value);
    return;
  }
  auto it = std::lower_bound(entries_.begin(), entries_.end(), step, EntryBefore);
  if (it != entries_.end() && it->first == step)
    it->second = value;
  else
    entries_.insert(it, {step, value});
}

const uint64_t* StepMap::Find(uint32_t step) const {
  auto it = std::lower_bound(entries_.begin(), entries_.end(), step, EntryBefore);
  return it != entries_.end() && it->first == step ? &it->second : nullptr;
}

uint64_t StepMap::at(uint32_t step) const {
  const uint64_t* v = Find(step);
  if (v == nullptr) throw std::out_of_range("arena layout: no entry for step " + std::to_string(step));
  return *v;
}
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

  std::map<Endpoint, uint64_t> hashes;                        // chunks so far, per source
  std::map<Endpoint, std::map<uint32_t, uint64_t>> counters;  // relayed step -> slot, per destination
  // Packed areas after the shards, in step order.
  auto area = [](ArenaLayout& l, const PlanStep& s) {
    l.area_offset.Set(s.id, l.data_bytes);
    l.data_bytes = Align64(l.data_bytes + s.bytes);
  };
  const uint64_t slot = SlotBytes(plan);
  auto slots = [slot](ArenaLayout& l, const PlanStep& s) {
    l.slot_offset.Set(s.id, l.data_bytes);
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
      out[s.from].hash_slot.Set(s.id, n);
      n += s.chunks;
    }
    if (s.after >= 0) {
      const PlanStep& a = plan.steps[static_cast<size_t>(s.after)];
      // Slots are numbered in order of first use; the table is kept in step order.
      auto& slots = counters[Endpoint{PlanSide::kDestination, a.to_rank}];
      slots.emplace(a.id, slots.size());
    }
  }
  for (auto& [ep, slots] : counters) {
    StepMap& m = out[ep].counter_slot;
    m.reserve(slots.size());
    for (const auto& [step, slot] : slots) m.Set(step, slot);
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
