// PlanRank's state: its compiled tables (compiled_rank.h) and what runs, shared by plan_rank.cc
// (create, publish, commit), the device files, and the per-version receive state machine
// (receive_run.h, receive_*.cc). plan_rank_impl.cc defines HashRuns and CloseConnections; the rest
// is defined in the file of the part it serves.
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

#include "arena_layout.h"
#include "compiled_rank.h"
#include "weightport/core/hash.h"
#include "weightport/core/thread_role.h"
#include "weightport/engine/common/worker_pool.h"
#include "weightport/engine/rank/plan_rank.h"

namespace weightport {

namespace plan_rank_internal {

// Words other ranks read one-sidedly (counters, hash headers): stored with release order.
inline uint64_t LoadWord(const std::byte* at) {
  uint64_t v;
  std::memcpy(&v, at, 8);
  return v;
}
inline void StoreWord(std::byte* at, uint64_t value) {
  std::atomic_ref<uint64_t>(*reinterpret_cast<uint64_t*>(at)).store(value, std::memory_order_release);
}
// A counter slot (arena_layout::kCounterBytes): the word, then its check.
inline void StoreCounter(std::byte* at, uint64_t word) {
  StoreWord(at + 8, arena_layout::CounterCheck(word));
  StoreWord(at, word);
}
// The check word of a hash area (its header's second word): covers the version too, so a corrupt
// read of an older header cannot pass as this version's hashes.
inline uint64_t HashAreaCheck(uint64_t version, const std::byte* header, uint64_t hash_bytes) {
  return Xxh3(header + arena_layout::kHashHeaderBytes, hash_bytes - arena_layout::kHashHeaderBytes) ^
         arena_layout::CounterCheck(version);
}
// The word of a counter slot read from a peer, or nullopt when its check fails.
inline std::optional<uint64_t> LoadCounter(const std::byte* at) {
  const uint64_t word = LoadWord(at);
  if (LoadWord(at + 8) != arena_layout::CounterCheck(word)) return std::nullopt;
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

// Runs `jobs` on the copy of the arena at `base`, shared among `pool`'s threads (nullptr: on the
// calling thread, which must not be one of the pool's); returns when all are done.
void RunQuantizeJobs(std::byte* base, const std::vector<QuantizeJob>& jobs, const std::vector<Run>& gathers,
                     WorkerPool* pool);
// A quantised band's output (e4m3 bytes, scales) in the copy at `base`, hashed: tells whether it is
// still what was quantised there.
uint64_t BandOutputHash(const std::byte* base, const QuantizeJob& q);

}  // namespace plan_rank_internal

struct PlanRank::Impl {
  // Everything the plan, the rank and the options that shape its tables decide (CompileRank).
  std::shared_ptr<const plan_rank_internal::CompiledRank> c;
  ProgressLoop* loop = nullptr;
  PlanRankOptions options;
  std::shared_ptr<void> own_memory;     // the arena's memory when the transport did not allocate it
  std::unique_ptr<MemoryRegion> arena;  // declared after own_memory: deregistered before unmapping
  std::byte* base = nullptr;            // the arena's memory: stays where it is across Rekey

  // Per copy, a BandOutputHash of each in_quantize band as made there (valid while copy_version
  // says the copy holds its version).
  std::array<std::vector<uint64_t>, 2> band_hashes;

  // The loop thread's role: what is GUARDED_BY it is touched only in tasks run on `loop`, which
  // say so first (OnLoopThread()), and in functions that REQUIRE it.
  ThreadRole loop_thread;
  void OnLoopThread() const ASSERT_CAPABILITY(loop_thread) {}

  std::map<Endpoint, std::shared_ptr<Connection>> connections GUARDED_BY(loop_thread);
  std::map<Endpoint, RemoteKey> keys GUARDED_BY(loop_thread);
  // Each connection's peer address: Connect keeps what still reaches it.
  std::map<Endpoint, Bytes> addresses GUARDED_BY(loop_thread);

  // Cancels the receive in progress.
  std::function<void(const std::string&)> cancel_receive GUARDED_BY(loop_thread);
  std::atomic<uint64_t> cancelled_version{0};  // a Receive of this version fails at once
  // Ranks the coordinator declared lost, and the receive in progress's reaction to one.
  std::set<Endpoint> lost_peers GUARDED_BY(loop_thread);
  std::function<void(Endpoint)> peer_lost_receive GUARDED_BY(loop_thread);

  int live = 0;  // the live copy of a destination
  uint64_t live_version = 0;
  uint64_t received_version = 0;  // verified in staging, not committed

  // Delta: per copy, each incoming chunk's root hash in the version the copy holds, and that
  // version (0: none, or a receive is writing it). Set when a receive succeeds.
  std::array<std::vector<uint64_t>, 2> copy_hashes;
  // PlanRankOptions::device: each shard on the device, per copy, all of a copy in one allocation
  // laid out by c->device_layout. A destination's copies are its live and staging ones; a source's
  // copy 0 is the trainer's, and with device_direct copy 1 is what it published, read by peers.
  std::array<std::vector<std::shared_ptr<void>>, 2> device_shards;
  // PlanRankOptions::device_direct: the device copies the transport reads or writes, registered
  // with it (both of a destination's, a source's copy 1; declared after device_shards: released
  // before the memory).
  std::array<std::unique_ptr<MemoryRegion>, 2> device_regions;
  uint64_t published_on_device = 0;  // bytes the last Publish copied on the device
  // A destination's: the sources that publish a device copy, its key and where their shards are in it.
  struct SourceDevice {
    RemoteKey key;
    plan_rank_internal::DeviceLayout layout;
  };
  std::map<Endpoint, SourceDevice> source_devices GUARDED_BY(loop_thread);  // like `keys`: set by Connect
  std::array<uint64_t, 2> copy_version{0, 0};
  // PlanRankOptions::keep_versions: committed versions kept for Restore, oldest first (plan_history.cc).
  struct KeptVersion {
    uint64_t version = 0;
    std::unique_ptr<std::byte[]> bytes;  // one copy (mine->data_bytes)
    std::vector<uint64_t> block_hashes;  // xxh3-64 per kKeptBlockBytes of `bytes`
    std::vector<uint64_t> copy_hashes;   // as copy_hashes[] of the copy it was taken from
    std::vector<uint64_t> band_hashes;
  };
  std::vector<KeptVersion> kept;
  // A source's shards that other sources hold too, and their digests at the last Publish.
  std::vector<uint32_t> replicated;
  std::vector<std::pair<uint32_t, uint64_t>> replica_digests;
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

  bool is_source() const { return c->is_source(); }
  std::byte* at(uint64_t offset) const { return base + offset; }
  std::string StepName(uint32_t step) const { return c->StepName(step); }  // "tensor 'w' step 4"
  void CloseConnections() REQUIRES(loop_thread);
};

namespace plan_rank_internal {
// PlanRankOptions::keep_versions: keeps copy `copy` (holding `version`, verified) for Restore, in
// place of the oldest kept when there are keep_versions already (plan_history.cc).
inline constexpr uint64_t kKeptBlockBytes = 4ull << 20;
void KeepVersion(PlanRank::Impl& r, int copy, uint64_t version);

// A source's digests of its replicated shards (source_replicas.h) into r.replica_digests, on the
// workers (replica_digest.cc).
void DigestReplicas(PlanRank::Impl& r);

// On a keeper thread, once every piece of a receive into copy `staging` is verified: quantises each
// in_quantize band, except that a band whose chunks were all kept from the live copy (kept[chunk])
// is copied from there when the live copy holds the version before and that band's output there
// still hashes as it did when it was made. Records the staging copy's band hashes. Per band, 1
// where it was copied (reused), 0 where it was quantised. `band_done(j, reused)`, when given, is
// called on the thread that finished band j as soon as its output is in the staging copy.
std::vector<uint8_t> QuantizeLanded(PlanRank::Impl& r, int staging, const std::vector<uint8_t>& kept,
                                    const std::function<void(size_t band, bool reused)>& band_done = {});
// PlanRankOptions::device: every shard's device memory (per copy at a destination), laid out by
// c->device_layout.
Status AllocateDeviceShards(PlanRank::Impl& r);
// PlanRankOptions::device_direct: registers the device copies the transport reads or writes (a
// destination's two, a source's published one) with `t` (the loop's transport, on its thread; again
// on a fresh one at Rekey), which must take the device's memory.
Result<std::array<std::unique_ptr<MemoryRegion>, 2>> RegisterDeviceCopies(const PlanRank::Impl& r,
                                                                          Transport& t);
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
