// PlanRankOptions::device_direct: a destination's chunks that land in a shard as sent are fetched by
// the transport straight into the device's staging copy (one registration per copy) and verified
// there, instead of landing in the arena and being copied over by the device copier. A GPU's
// memory needs a transport that takes it (a CUDA-aware UCX: cuda_copy, cuda_ipc, GPUDirect RDMA);
// the host stand-in's is host memory, which every transport takes, so the path runs everywhere.
//
// A chunk qualifies when nothing on this rank reads it from the arena afterwards: no conversion or
// quantisation here (they read landing areas), no zstd frame (decompressed on the host), and no
// rank relaying from this one (they read its arena).
#include <algorithm>

#include "plan_rank_impl.h"
#include "weightport/engine/arena.h"

namespace weightport {

using namespace plan_rank_internal;

Result<std::array<std::unique_ptr<MemoryRegion>, 2>> plan_rank_internal::RegisterDeviceCopies(
    const PlanRank::Impl& r, Transport& t) {
  const std::string type = r.options.device->memory_type();
  if (!t.TakesMemory(type))
    return FailedPrecondition(r.me.ToString() + ": device_direct: transport '" + t.name() + "' cannot take " +
                              type + " memory (" + r.options.device->name() +
                              "); without device_direct the shards are staged through the host");
  std::array<std::unique_ptr<MemoryRegion>, 2> regions;
  for (int c = 0; c < 2; ++c) {
    auto region = RegisterArena(t, r.device_shards[c].empty() ? nullptr : r.device_shards[c][0].get(),
                                r.device_bytes, "device copy");
    if (!region.ok()) return region.status().WithContext(r.me.ToString() + " on " + r.options.device->name());
    regions[c] = *std::move(region);
  }
  return regions;
}

std::optional<uint64_t> plan_rank_internal::DeviceOffsetOf(const PlanRank::Impl& r, uint64_t to,
                                                           uint64_t length) {
  const std::vector<PlannedShard>& shards = r.buffer->shards;
  // The last shard that starts at or before `to`.
  auto it = std::partition_point(r.shards_by_offset.begin(), r.shards_by_offset.end(),
                                 [&](uint32_t i) { return shards[i].offset <= to; });
  if (it == r.shards_by_offset.begin()) return std::nullopt;
  const uint32_t i = *std::prev(it);
  if (to + length > shards[i].offset + shards[i].bytes) return std::nullopt;
  return r.device_offsets[i] + (to - shards[i].offset);
}

void plan_rank_internal::MapDirectChunks(PlanRank::Impl& r) {
  r.direct_chunks.assign(r.in_chunks.size(), 0);
  if (!r.device_regions[0]) return;
  r.shards_by_offset = ShardsByOffset(*r.buffer);
  std::vector<uint8_t> quantised_here(r.in_chunks.size(), 0);  // a band gathers from it
  for (uint32_t c : r.band_chunks) quantised_here[c] = 1;
  auto in_shards = [&](const std::vector<Run>& runs, uint32_t begin, uint32_t end) {
    for (uint32_t i = begin; i < end; ++i)
      if (!DeviceOffsetOf(r, runs[i].to, runs[i].length)) return false;
    return true;
  };
  for (size_t c = 0; c < r.in_chunks.size(); ++c) {
    const InChunk& chunk = r.in_chunks[c];
    const InStep& step = r.in_steps[chunk.in_step];
    bool direct = chunk.bytes > 0 && !step.compressed && step.my_counter < 0 &&
                  chunk.convert_begin == chunk.convert_end && !quantised_here[c] &&
                  in_shards(r.in_runs, chunk.run_begin, chunk.run_end);
    // Fetched around a lost relay, the chunk's runs come from elsewhere and land in the same bytes.
    for (uint32_t level = 0; direct && level < step.detour_levels; ++level) {
      const RunRange range = r.detour_ranges[chunk.detour_ranges + level];
      direct = in_shards(r.detour_runs, range.begin, range.end);
    }
    r.direct_chunks[c] = direct;
  }
  if (std::find(r.direct_chunks.begin(), r.direct_chunks.end(), 1) != r.direct_chunks.end())
    r.direct_verifier = std::make_unique<WorkerPool>(1);
}

Result<uint64_t> plan_rank_internal::HashOnDevice(PlanRank::Impl& r, int copy, size_t c) {
  const InChunk& chunk = r.in_chunks[c];
  const auto* block = static_cast<const std::byte*>(r.device_regions[copy]->data());
  // The runs in piece order, those adjacent on the device as one part (a row-split shard's rows
  // are): the device hashes one part where it is.
  std::vector<DeviceBytes> parts;
  for (uint32_t i = chunk.run_begin; i < chunk.run_end; ++i) {
    const Run& run = r.in_runs[i];
    const std::byte* at = block + *DeviceOffsetOf(r, run.to, run.length);  // MapDirectChunks checked
    if (!parts.empty() && static_cast<const std::byte*>(parts.back().data) + parts.back().size == at)
      parts.back().size += run.length;
    else
      parts.push_back({at, run.length});
  }
  return r.options.device->HashConcatenated(parts);
}

}  // namespace weightport
