// PlanRankOptions::device_direct: the transport reads and writes device memory itself.
//
// A destination's chunks that land in a shard as sent are fetched straight into the device's
// staging copy (one registration per copy) and verified there, instead of landing in the arena and
// being copied over by the device copier. A chunk qualifies when nothing on this rank reads it from
// the arena afterwards: no conversion or quantisation here (they read landing areas), no zstd frame
// (decompressed on the host), and no rank relaying from this one (they read its arena).
//
// A source publishes into a device copy of its own (copy 1: the trainer goes on writing copy 0 as
// soon as Publish returns), copying there on the device what changed, and hashes there the chunks
// sent as they are; peers read those from it (their Gets go to its device key wherever a run is
// within one of its shards). Only the shards that host work reads (conversions, quantised bands,
// compressed chunks) still cross to the arena.
//
// A GPU's memory needs a transport that takes it (a CUDA-aware UCX: cuda_copy, cuda_ipc,
// GPUDirect RDMA); the host stand-in's is host memory, which every transport takes, so the path
// runs everywhere.
#include <algorithm>
#include <cstring>

#include "plan_rank_impl.h"
#include "weightport/engine/common/arena.h"

namespace weightport {

using namespace plan_rank_internal;

Result<std::array<std::unique_ptr<MemoryRegion>, 2>> plan_rank_internal::RegisterDeviceCopies(
    const PlanRank::Impl& r, Transport& t) {
  const std::string type = r.options.device->memory_type();
  if (!t.TakesMemory(type))
    return FailedPrecondition(r.c->me.ToString() + ": device_direct: transport '" + t.name() +
                              "' cannot take " + type + " memory (" + r.options.device->name() +
                              "); without device_direct the shards are staged through the host");
  std::array<std::unique_ptr<MemoryRegion>, 2> regions;
  for (int c = r.is_source() ? 1 : 0; c < 2; ++c) {  // a source's copy 0 is the trainer's
    auto region = RegisterArena(t, r.device_shards[c].empty() ? nullptr : r.device_shards[c][0].get(),
                                r.c->device_layout.bytes, "device copy");
    if (!region.ok())
      return region.status().WithContext(r.c->me.ToString() + " on " + r.options.device->name());
    regions[c] = *std::move(region);
  }
  return regions;
}

DeviceLayout DeviceLayout::Of(const RankBuffer& buffer) {
  DeviceLayout l;
  l.buffer = &buffer;
  for (const PlannedShard& s : buffer.shards) {
    l.offsets.push_back(l.bytes);
    l.bytes += (s.bytes + 255) & ~uint64_t{255};
  }
  l.by_offset = ShardsByOffset(buffer);
  return l;
}

DeviceLayout DeviceLayout::OfPart(const RankBuffer& buffer, const PartDevice& device) {
  DeviceLayout l;
  l.buffer = &buffer;
  l.offsets = device.offsets;
  l.bytes = device.bytes;
  l.by_offset = ShardsByOffset(buffer);
  return l;
}

std::optional<uint64_t> DeviceLayout::OffsetOf(uint64_t at, uint64_t length) const {
  const std::vector<PlannedShard>& shards = buffer->shards;
  // The last shard that starts at or before `at`.
  auto it = std::partition_point(by_offset.begin(), by_offset.end(),
                                 [&](uint32_t i) { return shards[i].offset <= at; });
  if (it == by_offset.begin()) return std::nullopt;
  const uint32_t i = *std::prev(it);
  if (at + length > shards[i].offset + shards[i].bytes) return std::nullopt;
  return offsets[i] + (at - shards[i].offset);
}

namespace {
// Whether every run of [begin, end) lies within one shard of `layout`'s, at its end `offset`
// (&Run::from: the sender's, &Run::to: the receiver's).
bool InShards(const DeviceLayout& layout, const std::vector<Run>& runs, uint32_t begin, uint32_t end,
              uint64_t Run::*offset) {
  for (uint32_t i = begin; i < end; ++i)
    if (!layout.OffsetOf(runs[i].*offset, runs[i].length)) return false;
  return true;
}

// One contiguous range of a device copy: its offset in the allocation and its size.
struct DeviceRange {
  uint64_t offset = 0, size = 0;
};

// `runs` [begin, end) in a device copy laid out by `layout`, in piece order, those adjacent on the
// device as one range (a row-split shard's rows are): the device hashes one range where it is.
std::vector<DeviceRange> DeviceRanges(const DeviceLayout& layout, const std::vector<Run>& runs,
                                      uint32_t begin, uint32_t end, uint64_t Run::*offset) {
  std::vector<DeviceRange> ranges;
  for (uint32_t i = begin; i < end; ++i) {
    const Run& run = runs[i];
    const uint64_t at = *layout.OffsetOf(run.*offset, run.length);  // the caller checked
    if (!ranges.empty() && ranges.back().offset + ranges.back().size == at)
      ranges.back().size += run.length;
    else
      ranges.push_back({at, run.length});
  }
  return ranges;
}

// Those ranges of the device copy at `block`, hashed there as one.
Result<uint64_t> HashRanges(DeviceMemory& device, const std::byte* block,
                            const std::vector<DeviceRange>& ranges) {
  std::vector<DeviceBytes> parts;
  for (const DeviceRange& d : ranges) parts.push_back({block + d.offset, d.size});
  return device.HashConcatenated(parts);
}

// Shards of `layout` that [at, at + length) of a copy of the arena overlaps, marked in `marks`.
void MarkShards(const DeviceLayout& layout, uint64_t at, uint64_t length, std::vector<uint8_t>& marks) {
  const std::vector<PlannedShard>& shards = layout.buffer->shards;
  // The first shard that ends after `at`: shards do not overlap, so they end in offset order.
  auto it = std::partition_point(layout.by_offset.begin(), layout.by_offset.end(),
                                 [&](uint32_t i) { return shards[i].offset + shards[i].bytes <= at; });
  for (; it != layout.by_offset.end() && shards[*it].offset < at + length; ++it) marks[*it] = 1;
}

// Groups the device-hashed chunks of each step that follow one another on the device, each one
// range there, all but the last of one size (a step's piece contiguous in its shard: a whole
// shard, whole rows), into DeviceHashBatch.
void BatchPublishedHashes(CompiledRank& r) {
  auto range = [&](size_t i) -> std::optional<DeviceRange> {
    if (r.out_hash[i] != OutHash::kDevice) return std::nullopt;
    const OutChunk& c = r.out_chunks[i];
    std::vector<DeviceRange> ranges =
        DeviceRanges(r.device_layout, r.out_runs, c.run_begin, c.run_end, &Run::from);
    if (ranges.size() != 1) return std::nullopt;
    return ranges[0];
  };
  for (size_t i = 0; i < r.out_chunks.size();) {
    const std::optional<DeviceRange> first = range(i);
    size_t end = i + 1;
    if (first) {
      uint64_t next = first->offset + first->size, last_size = first->size;
      for (; end < r.out_chunks.size() && r.out_chunks[end].step == r.out_chunks[i].step; ++end) {
        const std::optional<DeviceRange> d = range(end);
        // Only the last chunk may be short.
        if (!d || d->offset != next || last_size != first->size || d->size > first->size) break;
        next += d->size;
        last_size = d->size;
      }
      if (end - i >= 2) {
        r.out_device_batches.push_back({static_cast<uint32_t>(i), static_cast<uint32_t>(end - i),
                                        first->offset, next - first->offset, first->size});
        std::fill(r.out_hash.begin() + i, r.out_hash.begin() + end, OutHash::kDeviceBatch);
      }
    }
    i = end;
  }
}
}  // namespace

void plan_rank_internal::MapPublishedOnDevice(CompiledRank& r) {
  r.out_hash.assign(r.out_chunks.size(), OutHash::kArena);
  r.host_shards.assign(r.buffer->shards.size(), 1);
  if (!r.is_source() || !r.options.device_direct) return;
  std::fill(r.host_shards.begin(), r.host_shards.end(), 0);
  for (size_t i = 0; i < r.out_chunks.size(); ++i) {
    const OutChunk& c = r.out_chunks[i];
    if (c.slot < 0 && InShards(r.device_layout, r.out_runs, c.run_begin, c.run_end, &Run::from))
      r.out_hash[i] = OutHash::kDevice;
    else
      for (uint32_t j = c.run_begin; j < c.run_end; ++j)
        MarkShards(r.device_layout, r.out_runs[j].from, r.out_runs[j].length, r.host_shards);
  }
  for (const ConvertSpan& c : r.out_converts)
    MarkShards(r.device_layout, c.from, c.count * DTypeSize(c.from_dtype), r.host_shards);
  for (const Run& g : r.out_gathers) MarkShards(r.device_layout, g.from, g.length, r.host_shards);
  BatchPublishedHashes(r);
}

Result<uint64_t> plan_rank_internal::HashPublishedOnDevice(PlanRank::Impl& r, size_t i) {
  const OutChunk& c = r.c->out_chunks[i];
  // The published copy's allocation: shard 0 starts it (a chunk hashed there: there are shards).
  const auto* block = static_cast<const std::byte*>(r.device_shards[1][0].get());
  return HashRanges(*r.options.device, block,
                    DeviceRanges(r.c->device_layout, r.c->out_runs, c.run_begin, c.run_end, &Run::from));
}

Status plan_rank_internal::HashPublishedBatch(PlanRank::Impl& r, size_t b) {
  const DeviceHashBatch& batch = r.c->out_device_batches[b];
  const auto* block = static_cast<const std::byte*>(r.device_shards[1][0].get());
  WP_ASSIGN_OR_RETURN(std::vector<uint64_t> hashes,
                      r.options.device->ChunkHashes(block + batch.offset, batch.bytes, batch.chunk_bytes));
  if (hashes.size() != batch.chunks)
    return Internal(r.options.device->name() + " gave " + std::to_string(hashes.size()) + " hashes for " +
                    std::to_string(batch.chunks) + " chunks");
  const uint64_t as_is = 0;  // not compressed: the chunks travel as they are
  for (uint32_t k = 0; k < batch.chunks; ++k) {
    const OutChunk& c = r.c->out_chunks[batch.first_chunk + k];
    std::memcpy(r.at(c.hash_offset), &hashes[k], 8);
    std::memcpy(r.at(c.hash_offset + 8), &as_is, 8);
  }
  return Status::Ok();
}

void plan_rank_internal::MapDirectChunks(CompiledRank& r) {
  r.direct_chunks.assign(r.in_chunks.size(), 0);
  if (!r.options.device_direct || r.is_source()) return;
  std::vector<uint8_t> quantised_here(r.in_chunks.size(), 0);  // a band gathers from it
  for (uint32_t c : r.band_chunks) quantised_here[c] = 1;
  auto in_shards = [&](const std::vector<Run>& runs, uint32_t begin, uint32_t end) {
    return InShards(r.device_layout, runs, begin, end, &Run::to);
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
}

Result<uint64_t> plan_rank_internal::HashOnDevice(PlanRank::Impl& r, int copy, size_t c) {
  const InChunk& chunk = r.c->in_chunks[c];
  const auto* block = static_cast<const std::byte*>(r.device_regions[copy]->data());
  return HashRanges(*r.options.device, block,
                    DeviceRanges(r.c->device_layout, r.c->in_runs, chunk.run_begin, chunk.run_end, &Run::to));
}

}  // namespace weightport
