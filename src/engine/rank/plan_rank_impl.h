// PlanRank's compiled state, shared by plan_rank.cc (compile, publish, commit) and the
// per-version receive state machine (receive_run.h, receive_*.cc).
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <functional>
#include <latch>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <span>
#include <vector>

#include "plan_layout.h"
#include "weightport/core/hash.h"
#include "weightport/engine/common/worker_pool.h"
#include "weightport/engine/rank/plan_rank.h"

namespace weightport {

namespace plan_rank_internal {

// One contiguous copy: offsets relative to the start of a copy of the sender's and the receiver's
// buffers.
struct Run {
  uint64_t from = 0;
  uint64_t to = 0;
  uint64_t length = 0;
};

// Words other ranks read one-sidedly (counters, hash headers): stored with release order.
inline uint64_t LoadWord(const std::byte* at) {
  uint64_t v;
  std::memcpy(&v, at, 8);
  return v;
}
inline void StoreWord(std::byte* at, uint64_t value) {
  std::atomic_ref<uint64_t>(*reinterpret_cast<uint64_t*>(at)).store(value, std::memory_order_release);
}
// A counter slot (plan_layout::kCounterBytes): the word, then its check.
inline void StoreCounter(std::byte* at, uint64_t word) {
  StoreWord(at + 8, plan_layout::CounterCheck(word));
  StoreWord(at, word);
}
// The check word of a hash area (its header's second word): covers the version too, so a corrupt
// read of an older header cannot pass as this version's hashes.
inline uint64_t HashAreaCheck(uint64_t version, const std::byte* header, uint64_t hash_bytes) {
  return Xxh3(header + plan_layout::kHashHeaderBytes, hash_bytes - plan_layout::kHashHeaderBytes) ^
         plan_layout::CounterCheck(version);
}
// The word of a counter slot read from a peer, or nullopt when its check fails.
inline std::optional<uint64_t> LoadCounter(const std::byte* at) {
  const uint64_t word = LoadWord(at);
  if (LoadWord(at + 8) != plan_layout::CounterCheck(word)) return std::nullopt;
  return word;
}

// Calls body(i, scratch) for every i in [0, n), the pool's threads (nullptr: the calling thread,
// which must not be one of the pool's) each taking the next i in turn, so that cheap and costly
// items spread evenly, each thread with a Scratch of its own; returns when all are done.
template <typename Scratch, typename Body>
void ForEachIndex(WorkerPool* pool, size_t n, const Body& body) {
  std::atomic<size_t> next{0};
  auto work = [&] {
    Scratch scratch;
    for (size_t i = next++; i < n; i = next++) body(i, scratch);
  };
  const size_t parts = pool ? std::min(pool->size(), n) : 1;
  if (parts <= 1) return work();
  std::latch done(static_cast<std::ptrdiff_t>(parts));
  for (size_t p = 0; p < parts; ++p)
    pool->Submit([&work, &done] {
      work();
      done.count_down();
    });
  done.wait();
}

// xxh3-64 of runs [begin, end) read at base + (run.*offset): a chunk's bytes in piece order, on the
// sender's side (&Run::from) or the receiver's (&Run::to).
uint64_t HashRuns(const std::byte* base, const std::vector<Run>& runs, uint32_t begin, uint32_t end,
                  uint64_t Run::*offset);

// `count` elements converted from `from` to `to` (offsets within a copy of this rank's arena).
struct ConvertSpan {
  uint64_t from = 0, to = 0, count = 0;
  DType from_dtype = DType::kF32, to_dtype = DType::kF32;
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
};
// Runs `jobs` on the copy of the arena at `base`, shared among `pool`'s threads (nullptr: on the
// calling thread, which must not be one of the pool's); returns when all are done.
void RunQuantizeJobs(std::byte* base, const std::vector<QuantizeJob>& jobs, const std::vector<Run>& gathers,
                     WorkerPool* pool);
// Cuts each job into bands of whole block rows of about `band_bytes` of input, so that the threads
// quantising share a large shard; gathers are cut at the bands' edges and rebased into their band.
// A job with one scale per tensor is one band: its scale needs all of it.
void SplitIntoBands(std::vector<QuantizeJob>& jobs, std::vector<Run>& gathers, uint64_t band_bytes);
// A quantised band's output (e4m3 bytes, scales) in the copy at `base`, hashed: tells whether it is
// still what was quantised there.
uint64_t BandOutputHash(const std::byte* base, const QuantizeJob& q);

// A chunk this source hashes on Publish.
struct OutChunk {
  uint64_t hash_offset = 0;  // in this rank's arena: its {hash, compressed length} entry
  uint32_t run_begin = 0, run_end = 0;
  int64_t slot = -1;         // a compressed step's: where its frame goes, in this rank's arena
  uint32_t step = 0, k = 0;  // its step's id and its index in the step: errors name them
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
};

// One place a relayed step can be read from instead of its relay.
struct DetourLevel {
  Endpoint from;
  int64_t counter = -1;  // offset of `from`'s counter to poll for verified chunks; -1: a source, ready
};

struct RunRange {
  uint32_t begin = 0, end = 0;
};

struct InChunk {
  uint32_t in_step = 0;  // index into in_steps
  uint32_t k = 0;
  uint32_t run_begin = 0, run_end = 0;
  uint64_t bytes = 0;
  uint32_t convert_begin = 0, convert_end = 0;  // into in_converts: landing area -> shard, once verified
  uint32_t detour_ranges = 0;  // into detour_ranges: per detour level, the chunk's runs in detour_runs
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
};

// Bytes of shard `shard` (RankBuffer order) from `offset` within it: what a destination copies to
// its device copy of that shard.
struct DeviceSpan {
  uint32_t shard = 0;
  uint64_t offset = 0, length = 0;
};

// A source whose hash area this destination mirrors.
struct RootSource {
  Endpoint endpoint;
  uint64_t remote_offset = 0;  // its hash area
  uint64_t bytes = 0;
  uint64_t mirror = 0;  // in my arena
};

}  // namespace plan_rank_internal

struct PlanRank::Impl {
  std::shared_ptr<const Plan> plan;
  Endpoint me;
  ProgressLoop* loop = nullptr;
  PlanRankOptions options;
  std::map<Endpoint, plan_layout::PlanLayout> layouts;
  const plan_layout::PlanLayout* mine = nullptr;
  const RankBuffer* buffer = nullptr;
  std::shared_ptr<void> own_memory;     // the arena's memory when the transport did not allocate it
  std::unique_ptr<MemoryRegion> arena;  // declared after own_memory: deregistered before unmapping
  std::byte* base = nullptr;            // the arena's memory: stays where it is across Rekey

  std::vector<plan_rank_internal::Run> out_runs;
  std::vector<plan_rank_internal::OutChunk> out_chunks;
  std::vector<plan_rank_internal::ConvertSpan> out_converts;  // shard -> wire areas, on Publish
  std::vector<plan_rank_internal::QuantizeJob> out_quantize;  // shard -> wire areas, on Publish
  std::vector<plan_rank_internal::Run> out_gathers;

  std::vector<plan_rank_internal::Run> in_runs;
  std::vector<plan_rank_internal::InChunk> in_chunks;
  std::vector<plan_rank_internal::InStep> in_steps;
  std::vector<plan_rank_internal::ConvertSpan> in_converts;
  // Shards quantised here once a receive has every piece (on a keeper thread, before it reports).
  std::vector<plan_rank_internal::QuantizeJob> in_quantize;
  std::vector<plan_rank_internal::Run> in_gathers;
  // Per in_quantize band, the incoming chunks it reads (band_chunks[band_chunk_begin[j] ..
  // band_chunk_begin[j + 1])), and per copy a BandOutputHash of each band as made there (valid
  // while copy_version says the copy holds its version).
  std::vector<uint32_t> band_chunk_begin, band_chunks;
  std::array<std::vector<uint64_t>, 2> band_hashes;
  std::vector<plan_rank_internal::RootSource> roots;
  std::vector<plan_rank_internal::DetourLevel> detour_levels;
  std::vector<plan_rank_internal::RunRange> detour_ranges;
  std::vector<plan_rank_internal::Run> detour_runs;  // relayed steps' chunks, from upstream of their relay

  std::map<Endpoint, std::shared_ptr<Connection>> connections;  // used on the loop thread only
  std::map<Endpoint, RemoteKey> keys;

  // Cancels the receive in progress; set and cleared on the loop thread.
  std::function<void(const std::string&)> cancel_receive;
  std::atomic<uint64_t> cancelled_version{0};  // a Receive of this version fails at once
  // Ranks the coordinator declared lost, and the receive in progress's reaction to one; both on
  // the loop thread.
  std::set<Endpoint> lost_peers;
  std::function<void(Endpoint)> peer_lost_receive;

  int live = 0;  // the live copy of a destination
  uint64_t live_version = 0;
  uint64_t received_version = 0;  // verified in staging, not committed

  // Delta: per copy, each incoming chunk's root hash in the version the copy holds, and that
  // version (0: none, or a receive is writing it). Set when a receive succeeds.
  std::array<std::vector<uint64_t>, 2> copy_hashes;
  // PlanRankOptions::device: each shard on the device, per copy, all of a copy in one allocation
  // laid out by device_layout. A destination's copies are its live and staging ones; a source's
  // copy 0 is the trainer's, and with device_direct copy 1 is what it published, read by peers.
  std::array<std::vector<std::shared_ptr<void>>, 2> device_shards;
  plan_rank_internal::DeviceLayout device_layout;
  // PlanRankOptions::device_direct: the device copies the transport reads or writes, registered
  // with it (both of a destination's, a source's copy 1; declared after device_shards: released
  // before the memory), and per incoming chunk, 1 where it lands there.
  std::array<std::unique_ptr<MemoryRegion>, 2> device_regions;
  std::vector<uint8_t> direct_chunks;
  // A source's device_direct: per out chunk, where Publish hashes it (on the device where its runs
  // are in shards as they are and it is not compressed); per shard, 1 where host work reads it
  // from the arena (a conversion, a quantised band, a compressed chunk), so Publish copies it
  // there too.
  std::vector<plan_rank_internal::OutHash> out_hash;
  std::vector<uint8_t> host_shards;
  std::vector<plan_rank_internal::DeviceHashBatch> out_device_batches;
  uint64_t published_on_device = 0;  // bytes the last Publish copied on the device
  // A destination's: the sources that publish a device copy, its key and where their shards are in it.
  struct SourceDevice {
    RemoteKey key;
    plan_rank_internal::DeviceLayout layout;
  };
  std::map<Endpoint, SourceDevice> source_devices;  // like `keys`: set by Connect
  // A destination's shard bytes per incoming chunk (chunk c: device_spans[chunk_device_begin[c] ..
  // chunk_device_begin[c + 1])), copied to the device as soon as the chunk is verified; per
  // in_quantize band (band_device_begin, likewise) and the rest (padding), copied once every chunk is.
  std::vector<uint32_t> chunk_device_begin, band_device_begin;
  std::vector<plan_rank_internal::DeviceSpan> device_spans, device_tail_spans;
  std::array<uint64_t, 2> copy_version{0, 0};
  // A source with a device: per shard, the device hash of each kDeviceBlockBytes block as the arena
  // holds it (empty: nothing known), and what the last Publish copied from the device.
  std::vector<std::vector<uint64_t>> device_block_hashes;
  uint64_t published_from_device = 0;
  // Share the bands of out_quantize / in_quantize and Publish's chunks (PlanRankOptions::
  // worker_threads); Publish's caller or a keeper waits for them. Declared before `keepers`:
  // outlives their tasks.
  std::unique_ptr<WorkerPool> workers;
  // Copies and hashes of kept chunks (batches, several at once), and a receive's quantising, off
  // the loop thread.
  std::unique_ptr<WorkerPool> keepers;
  // A destination's copies to its device, one at a time in order (a device has one copy engine
  // each way). Declared after the arena and device_shards: its tasks read them.
  std::unique_ptr<WorkerPool> device_copier;
  // PlanRankOptions::device_direct: hashes the chunks the transport wrote to the device, off the
  // loop thread. Declared after device_regions: its tasks read them.
  std::unique_ptr<WorkerPool> direct_verifier;
  uint64_t slot_bytes = 0;  // of one compressed chunk (plan_layout::SlotBytes)

  bool is_source() const { return me.side == PlanSide::kSource; }
  std::byte* at(uint64_t offset) const { return base + offset; }
  std::string StepName(uint32_t step) const;  // "tensor 'w' step 4"
  void CloseConnections();                    // on the loop thread
};

namespace plan_rank_internal {
// Fills band_chunk_begin / band_chunks: the incoming chunks whose runs land in what each
// in_quantize band gathers.
void MapBandsToChunks(PlanRank::Impl& r);
// On a keeper thread, once every piece of a receive into copy `staging` is verified: quantises each
// in_quantize band, except that a band whose chunks were all kept from the live copy (kept[chunk])
// is copied from there when the live copy holds the version before and that band's output there
// still hashes as it did when it was made. Records the staging copy's band hashes. Per band, 1
// where it was copied (reused), 0 where it was quantised. `band_done(j, reused)`, when given, is
// called on the thread that finished band j as soon as its output is in the staging copy.
std::vector<uint8_t> QuantizeLanded(PlanRank::Impl& r, int staging, const std::vector<uint8_t>& kept,
                                    const std::function<void(size_t band, bool reused)>& band_done = {});
// PlanRankOptions::device: every shard's device memory (per copy at a destination); at a
// destination, the spans of each shard that each incoming chunk fills once verified (converted),
// and the rest, so that every byte of every shard is in exactly one span; and its device copier.
Status AllocateDeviceShards(PlanRank::Impl& r);
// The indices of `buffer`'s shards that hold bytes, in arena order.
std::vector<uint32_t> ShardsByOffset(const RankBuffer& buffer);
void MapDeviceSpans(PlanRank::Impl& r);
// PlanRankOptions::device_direct: registers the device copies the transport reads or writes (a
// destination's two, a source's published one) with `t` (the loop's transport, on its thread; again
// on a fresh one at Rekey), which must take the device's memory.
Result<std::array<std::unique_ptr<MemoryRegion>, 2>> RegisterDeviceCopies(const PlanRank::Impl& r,
                                                                          Transport& t);
// Marks the incoming chunks fetched straight into the device copy (direct_chunks), once the
// device copies are registered and the bands mapped to their chunks; starts the verifier.
void MapDirectChunks(PlanRank::Impl& r);
// A source's device_direct: which out chunks Publish hashes on the device and which shards it copies
// to the arena as well (out_hash, host_shards).
void MapPublishedOnDevice(PlanRank::Impl& r);
// A source's device_direct, in Publish once the device copy holds the version: the hash of out
// chunk i there (OutHash::kDevice), or of each chunk of batch b, written to their entries.
Result<uint64_t> HashPublishedOnDevice(PlanRank::Impl& r, size_t i);
Status HashPublishedBatch(PlanRank::Impl& r, size_t b);
// xxh3-64 of direct chunk c as it landed in device copy `copy`, computed on the device.
Result<uint64_t> HashOnDevice(PlanRank::Impl& r, int copy, size_t c);
// A source's shards from the trainer's device copy into its arena (Publish): the blocks whose hash
// on the device changed since the arena got them. With device_direct, into the published device
// copy instead (on the device), and into the arena too only for host_shards.
inline constexpr uint64_t kDeviceBlockBytes = 1ull << 20;
Status ReadDeviceShards(PlanRank::Impl& r);
// On the device copier's thread, into the device's copy `staging`: the shard bytes of verified
// `chunks`, from the arena's copy `staging`, or, kept by delta, from the live device copy (the
// device's copies are written by the engine only: the live one still holds what it was given);
// an in_quantize band as soon as it is quantised (`reused` from the live copy: from the live device
// copy); and, once every chunk and band is in, the bytes no chunk or band fills. The bytes copied,
// of them on the device; or the error naming the rank, shard, tensor and device.
struct DeviceCopied {
  uint64_t bytes = 0, on_device = 0;
};
Result<DeviceCopied> ChunksToDevice(PlanRank::Impl& r, int staging, const std::vector<size_t>& chunks,
                                    bool kept);
Result<DeviceCopied> BandToDevice(PlanRank::Impl& r, int staging, size_t band, bool reused);
Result<DeviceCopied> TailToDevice(PlanRank::Impl& r, int staging);
}  // namespace plan_rank_internal

// Runs one Receive on the loop thread; calls `done` there exactly once, after nothing it started
// is in flight.
void StartReceive(PlanRank::Impl& rank, uint64_t version, std::function<void(Result<ReceiveStats>)> done);

}  // namespace weightport
