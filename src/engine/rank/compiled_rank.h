// A rank's part of a Plan, compiled: every table that depends only on the plan, the rank and the
// options that shape them (a device, device_direct), made once by CompileRank with no transport,
// no memory of the rank's and no threads, and never changed after. PlanRank::Impl
// (plan_rank_impl.h) holds it beside what runs (connections, keys, copies, versions, pools).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "arena_layout.h"
#include "rank_plan_tables.h"
#include "weightport/engine/rank/plan_rank.h"
#include "weightport/engine/rank/rank_plan.h"

namespace weightport {
namespace plan_rank_internal {

// One contiguous copy: offsets relative to the start of a copy of the sender's and the receiver's
// buffers.
struct Run {
  uint64_t from = 0;
  uint64_t to = 0;
  uint64_t length = 0;

  friend bool operator==(const Run&, const Run&) = default;
};

// `count` elements converted from `from` to `to` (offsets within a copy of this rank's arena).
struct ConvertSpan {
  uint64_t from = 0, to = 0, count = 0;
  DType from_dtype = DType::kF32, to_dtype = DType::kF32;

  friend bool operator==(const ConvertSpan&, const ConvertSpan&) = default;
};

// A matrix quantised to e4m3 in blocks (quantized.h): a piece a source quantises on Publish, from
// its shard into its wire area, or a shard a destination quantises once every piece of it landed,
// from its landing areas. Gathered by `gathers` [begin, end) (Run::from: within a copy of the arena;
// Run::to: the byte in the gathered matrix), quantised as rows x cols into `out`, the scales at
// `scales_at` (offsets within a copy).
struct QuantizeJob {
  uint64_t out = 0, scales_at = 0;
  int64_t rows = 0, cols = 0, scales = 0;
  DType from = DType::kBF16;
  kernels::Fp8Scaling scaling = kernels::Fp8Scaling::kBlock128;
  uint32_t gather_begin = 0, gather_end = 0;

  friend bool operator==(const QuantizeJob&, const QuantizeJob&) = default;
};

// A chunk this source hashes on Publish.
struct OutChunk {
  uint64_t hash_offset = 0;  // in this rank's arena: its {hash, compressed length} entry
  uint32_t run_begin = 0, run_end = 0;
  int64_t slot = -1;         // a compressed step's: where its frame goes, in this rank's arena
  uint32_t step = 0, k = 0;  // its step's id and its index in the step: errors name them

  friend bool operator==(const OutChunk&, const OutChunk&) = default;
};

// An incoming step of a destination.
struct InStep {
  uint32_t step = 0;
  Endpoint sender;
  Endpoint root_source;
  uint32_t first_chunk = 0;  // into InChunk list
  uint32_t chunks = 0;
  int64_t after = -1;            // the step whose chunk k must be verified at the sender first
  uint64_t sender_counter = 0;   // offset of that step's counter in the sender's arena
  uint64_t poll_scratch = 0;     // where its counter lands here
  int64_t my_counter = -1;       // offset of this step's counter in my arena, or -1
  uint64_t expected_hashes = 0;  // offset, in my arena, of the mirrored entry of chunk 0
  bool compressed = false;       // chunks with a compressed length travel as frames, slot to slot
  uint64_t sender_slots = 0;     // within a copy of the sender's arena
  uint64_t my_slots = 0;         // within a copy of mine
  // A relayed step whose relay is lost is fetched from the nearest rank upstream that is not: the
  // ranks that relay the piece before it, nearest first, then its root source (DetourLevel). A
  // compressed step goes straight to the root source, from its compressed slots there.
  uint32_t detour_first = 0;   // into detour_levels
  uint32_t detour_levels = 0;  // 0: the step cannot be routed around its relay
  uint64_t root_slots = 0;     // within copy 0 of the root source's arena
  // A plain root step (read from its sender's shard: not converted, quantised or compressed there)
  // whose source is lost is read from another source holding the same slice (a replica):
  // alternates [alt_first, alt_first + alt_count), tried in order.
  uint32_t alt_first = 0;
  uint32_t alt_count = 0;

  friend bool operator==(const InStep&, const InStep&) = default;
};

// One place a relayed step can be read from instead of its relay.
struct DetourLevel {
  Endpoint from;
  int64_t counter = -1;  // offset of `from`'s counter to poll for verified chunks; -1: a source, ready

  friend bool operator==(const DetourLevel&, const DetourLevel&) = default;
};

// Another source holding the shard a root step reads (source_replicas.h): the step's runs are read
// there with `from` moved by `shift`, the difference between the two shards' offsets.
struct Alternate {
  Endpoint from;
  int64_t shift = 0;

  friend bool operator==(const Alternate&, const Alternate&) = default;
};

struct RunRange {
  uint32_t begin = 0, end = 0;

  friend bool operator==(const RunRange&, const RunRange&) = default;
};

struct InChunk {
  uint32_t in_step = 0;  // index into in_steps
  uint32_t k = 0;
  uint32_t run_begin = 0, run_end = 0;
  uint64_t bytes = 0;
  uint32_t convert_begin = 0, convert_end = 0;  // into in_converts: landing area -> shard, once verified
  uint32_t detour_ranges = 0;  // into detour_ranges: per detour level, the chunk's runs in detour_runs

  friend bool operator==(const InChunk&, const InChunk&) = default;
};

// Where a rank's shards lie in a device copy of them: one allocation per copy, each shard at a
// 256-byte boundary (as cudaMalloc would give it), in RankBuffer order. Every rank derives it from
// the plan alone, so a destination finds a source's bytes in the source's published device copy
// (PlanRankOptions::device_direct) from the source's RankBuffer.
struct DeviceLayout {
  const RankBuffer* buffer = nullptr;
  std::vector<uint64_t> offsets;    // per shard: where it starts in the allocation
  std::vector<uint32_t> by_offset;  // the shards that hold bytes, in arena order
  uint64_t bytes = 0;               // the allocation's size

  static DeviceLayout Of(const RankBuffer& buffer);
  // A peer's from its part (rank_plan.h): only some of its shards, at the whole plan's offsets.
  static DeviceLayout OfPart(const RankBuffer& buffer, const PartDevice& device);
  // Where [at, at + length) of a copy of the rank's arena lies in the device allocation, when it is
  // within one shard.
  std::optional<uint64_t> OffsetOf(uint64_t at, uint64_t length) const;
};

// Where a source's Publish hashes an out chunk.
enum class OutHash : uint8_t {
  kArena,        // in the arena (no device_direct; converted, quantised or compressed)
  kDevice,       // in the published device copy, alone
  kDeviceBatch,  // in the published device copy, with its neighbours (DeviceHashBatch)
};

// Consecutive chunks of one step that lie one after the other in a source's published device copy,
// all but the last of one size: hashed in one DeviceMemory::ChunkHashes call (one kernel on a GPU)
// instead of one call each.
struct DeviceHashBatch {
  uint32_t first_chunk = 0, chunks = 0;  // out_chunks [first_chunk, first_chunk + chunks)
  uint64_t offset = 0, bytes = 0;        // in the published copy
  uint64_t chunk_bytes = 0;

  friend bool operator==(const DeviceHashBatch&, const DeviceHashBatch&) = default;
};

// Bytes of shard `shard` (RankBuffer order) from `offset` within it: what a destination copies to
// its device copy of that shard.
struct DeviceSpan {
  uint32_t shard = 0;
  uint64_t offset = 0, length = 0;

  friend bool operator==(const DeviceSpan&, const DeviceSpan&) = default;
};

// A source whose hash area this destination mirrors.
struct RootSource {
  Endpoint endpoint;
  uint64_t remote_offset = 0;  // its hash area
  uint64_t bytes = 0;
  uint64_t mirror = 0;  // in my arena

  friend bool operator==(const RootSource&, const RootSource&) = default;
};

// What of PlanRankOptions shapes the compiled tables.
struct CompileOptions {
  bool device = false;         // PlanRankOptions::device is set: the device layout and spans
  bool device_direct = false;  // PlanRankOptions::device_direct (refused without a device)

  static CompileOptions Of(const PlanRankOptions& options) {
    return {options.device != nullptr, options.device_direct};
  }
};

struct CompiledRank {
  CompiledRank() = default;
  CompiledRank(const CompiledRank&) = delete;  // `mine` points into `layouts`
  CompiledRank& operator=(const CompiledRank&) = delete;

  std::shared_ptr<const Plan> plan;
  Endpoint me;
  CompileOptions options;
  // Compiled from a part (rank_plan.h): the whole plan's digest, its ids of the part's steps, and
  // the peers' layouts and device offsets as the whole plan gives them. Unset for a whole plan.
  std::optional<uint64_t> plan_digest;
  std::vector<uint32_t> step_ids;
  std::shared_ptr<const PartTables> part;
  // Every rank's arena layout, from the plan alone: peers exchange only an address and a key.
  std::map<Endpoint, arena_layout::ArenaLayout> layouts;
  const arena_layout::ArenaLayout* mine = nullptr;
  const RankBuffer* buffer = nullptr;
  uint64_t slot_bytes = 0;   // of one compressed chunk (arena_layout::SlotBytes)
  uint64_t arena_bytes = 0;  // the public part, the poll scratch and the roots' mirrors

  std::vector<Run> out_runs;
  std::vector<OutChunk> out_chunks;
  std::vector<ConvertSpan> out_converts;  // shard -> wire areas, on Publish
  std::vector<QuantizeJob> out_quantize;  // shard -> wire areas, on Publish
  std::vector<Run> out_gathers;

  std::vector<Run> in_runs;
  std::vector<InChunk> in_chunks;
  std::vector<InStep> in_steps;
  std::vector<ConvertSpan> in_converts;
  // Shards quantised here once a receive has every piece (on a keeper thread, before it reports).
  std::vector<QuantizeJob> in_quantize;
  std::vector<Run> in_gathers;
  // Per in_quantize band, the incoming chunks it reads (band_chunks[band_chunk_begin[j] ..
  // band_chunk_begin[j + 1])).
  std::vector<uint32_t> band_chunk_begin, band_chunks;
  std::vector<RootSource> roots;
  std::vector<DetourLevel> detour_levels;
  std::vector<RunRange> detour_ranges;
  std::vector<Run> detour_runs;       // relayed steps' chunks, from upstream of their relay
  std::vector<Alternate> alternates;  // root steps' replicas of their sender, by InStep::alt_first

  // options.device: where each shard lies in a device copy of the rank's shards.
  DeviceLayout device_layout;
  // options.device_direct at a destination: per incoming chunk, 1 where it lands in the device's
  // staging copy.
  std::vector<uint8_t> direct_chunks;
  // A source's device_direct: per out chunk, where Publish hashes it (on the device where its runs
  // are in shards as they are and it is not compressed); per shard, 1 where host work reads it
  // from the arena (a conversion, a quantised band, a compressed chunk), so Publish copies it
  // there too.
  std::vector<OutHash> out_hash;
  std::vector<uint8_t> host_shards;
  std::vector<DeviceHashBatch> out_device_batches;
  // A destination's shard bytes per incoming chunk (chunk c: device_spans[chunk_device_begin[c] ..
  // chunk_device_begin[c + 1])), copied to the device as soon as the chunk is verified; per
  // in_quantize band (band_device_begin, likewise) and the rest (padding), copied once every chunk is.
  std::vector<uint32_t> chunk_device_begin, band_device_begin;
  std::vector<DeviceSpan> device_spans, device_tail_spans;

  bool is_source() const { return me.side == PlanSide::kSource; }
  std::string StepName(uint32_t step) const;  // "tensor 'w' step 4", the whole plan's id
  // Where a source peer's shards lie in its published device copy.
  DeviceLayout PeerDeviceLayout(Endpoint source) const;
};

// Compiles `me`'s part of `plan`: NotFound when `me` is not one of its ranks, InvalidArgument for
// a plan without chunks or device_direct without a device, Internal for a plan whose steps do not
// fit its buffers.
Result<std::shared_ptr<const CompiledRank>> CompileRank(std::shared_ptr<const Plan> plan, Endpoint me,
                                                        const CompileOptions& options);
// The same from a rank's part of a plan: its peers' layouts come with it (rank_plan.h).
Result<std::shared_ptr<const CompiledRank>> CompileRank(const RankPlan& part, const CompileOptions& options);

// Parts of the compile, defined beside what they serve.
// Cuts each job into bands of whole block rows of about `band_bytes` of input, so that the threads
// quantising share a large shard; gathers are cut at the bands' edges and rebased into their band.
// A job with one scale per tensor is one band: its scale needs all of it (plan_quantize.cc).
void SplitIntoBands(std::vector<QuantizeJob>& jobs, std::vector<Run>& gathers, uint64_t band_bytes);
// Fills band_chunk_begin / band_chunks: the incoming chunks whose runs land in what each
// in_quantize band gathers (plan_quantize.cc).
void MapBandsToChunks(CompiledRank& r);
// The indices of `buffer`'s shards that hold bytes, in arena order (plan_device.cc).
std::vector<uint32_t> ShardsByOffset(const RankBuffer& buffer);
// options.device at a destination: the spans of each shard that each incoming chunk and in_quantize
// band fills once verified (converted, quantised), and the rest, so that every byte of every shard
// is in exactly one span (plan_device.cc).
void MapDeviceSpans(CompiledRank& r);
// options.device_direct at a destination: marks the incoming chunks fetched straight into the
// device copy (direct_chunks), once the bands are mapped to their chunks (plan_device_direct.cc).
void MapDirectChunks(CompiledRank& r);
// A source's device_direct: which out chunks Publish hashes on the device and which shards it copies
// to the arena as well (out_hash, host_shards, out_device_batches; plan_device_direct.cc).
void MapPublishedOnDevice(CompiledRank& r);

}  // namespace plan_rank_internal
}  // namespace weightport
