// PlanRank: one rank's part of a Plan, compiled once and replayed for every version, with no
// re-planning and no re-registration.
//
// Create compiles the rank's work from the plan (a destination: its incoming steps' runs, grouped
// by chunk; every rank: the slots of the chunk hashes it originates and of the "chunk verified"
// counters of the steps others relay from it), allocates ONE arena and registers it once. Every rank
// derives every other rank's arena layout from the same plan (src/engine/rank/arena_layout.h), so peers
// exchange only a transport address and one RemoteKey each (PlanPeer; a source publishing on its
// device, PlanRankOptions::device_direct, a second for that copy), once, before Connect.
//
// Per version v:
//   source       the trainer writes the rank's shards (shard_bytes, or with a device device_shard),
//                then Publish(v) hashes every chunk of every step sent from this source (xxh3-64
//                over the step's runs in piece order) into its hash area and marks it as v. The
//                bytes published (the arena's, or a device's published copy) must not change until
//                every destination committed or aborted v; with a device, the trainer's own copy
//                may change as soon as Publish returns.
//   destination  Receive(v) pulls its incoming steps with receiver-driven one-sided Gets (bounded
//                window, retries with backoff, corrupt chunks fetched again), checking each chunk
//                against the hash published by the step's root source. A relayed step's chunk k is
//                fetched only once the relay's counter says chunk k of the step that delivered it is
//                verified there (polled with backoff; a blocked chunk never stalls the others). After
//                verifying a chunk of a step others relay from, it advances that step's counter.
//                A relay that fails (its counter says so, or its connection is lost) or that the
//                coordinator declares lost (PeerLost) is routed around: the steps it fed are fetched
//                from their root source instead, the same chunks against the same hashes. A source
//                lost the same way after its hashes were mirrored is replaced by another source
//                holding the same slice (source_replicas.h) for the plain steps read from its shards.
//                Commit(v) then swaps staging to live; Abort(v) (or no commit) keeps the old live.
//
// Thread-safety: Create, Connect, Publish, Receive, Commit and Abort from one thread at a time (not
// the loop's); Cancel and PeerLost from any thread; the data they touch is not shared with the loop except
// during Receive. shard_bytes may be read from any thread between versions.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "weightport/core/background_yield.h"
#include "weightport/core/device_memory.h"
#include "weightport/core/status.h"
#include "weightport/engine/rank/rank_plan.h"
#include "weightport/plan/plan.h"
#include "weightport/transport/progress_loop.h"
#include "weightport/transport/transport.h"

namespace weightport {
namespace plan_rank_internal {
struct CompiledRank;
}

struct PlanRankOptions {
  // Chunks in flight at once, at most: the receive's congestion window (congestion_window.h) starts
  // here, halves on a Get that failed and is retried (and, with delay_factor, on a chunk slow
  // against the fastest), at most once per window of chunks, and grows back by one per window.
  size_t window = 32;
  // A chunk whose Gets took more than delay_factor x the fastest chunk of the receive, and at least
  // delay_floor more, counts as congestion. 0 (the default): delay is not watched (on a fast path
  // a full window's own Gets queue behind each other); meant for a slow, shared link.
  double delay_factor = 0;
  std::chrono::microseconds delay_floor{2000};
  int max_attempts = 4;  // per chunk: the first try and three more
  std::chrono::milliseconds backoff_initial{1};
  std::chrono::milliseconds backoff_max{50};
  // A relay's "chunk verified" counter that has not moved is read again after a pause that doubles
  // up to this. Small: along a relay chain every hop waits up to this long for each chunk it has
  // caught up with, so the chain's pipeline fill grows by about this per hop (at 50 ms a 7-hop
  // chain at 500 Mbit/s ran 1.3x its line-rate bound). A read is one 16-byte Get.
  std::chrono::milliseconds relay_poll_max{2};
  // Bounds one Receive (hash headers not yet published and relay counters that never advance
  // included).
  std::chrono::milliseconds timeout{60'000};
  // Delta: a chunk whose hash equals its hash in the version the live copy holds is copied from the
  // live copy and hashed again (one that no longer matches is fetched after all) instead of fetched.
  bool delta = true;
  // The arena lives in memory of the rank's own rather than memory its transport allocated, so
  // that Rekey can move the rank to a fresh transport without moving the shards. Same-host peers
  // then read it through CMA instead of a shared mapping.
  bool rotate_keys = false;
  // Threads a rank's CPU work per version is shared among: a source's Publish quantising to e4m3
  // (bands of whole block rows), hashing and compressing its chunks; a destination copying and
  // hashing the chunks delta keeps, and quantising its shards once landed. 0: the hardware threads,
  // at most 8; at most 64 when given.
  size_t worker_threads = 0;
  // Shards also on a device (core/device_memory.h): a source's trainer writes device_shard(i) and
  // Publish copies it into the arena first (with device_direct into a published device copy). A
  // destination's Receive copies each chunk's shard bytes
  // to a second device copy as soon as the chunk is verified (with device_direct some chunks are
  // written there by the transport instead), on a thread of its own, so the copies overlap the
  // transfer of later chunks; it returns once the device copy is whole, and Commit makes it live.
  // nullptr: host only.
  std::shared_ptr<DeviceMemory> device;
  // With `device`, at a destination: the chunks that land in a shard as they are sent (not
  // converted or quantised here, not of a step that may travel compressed, and not relayed from
  // here to other ranks) are fetched by the transport straight into the device's staging copy and
  // verified there (DeviceMemory::HashConcatenated, on a thread of the rank's), not staged in the
  // arena and copied over; the rest go the staged way. The arena's copy of those bytes is not
  // written: the device copy is the rank's copy (shard_bytes does not hold them).
  // At a source: Publish copies what changed on the device into a second device copy (the
  // trainer may write its own as soon as Publish returns, as before) and hashes there the chunks
  // sent as they are; destinations read them from there (PlanPeer::device_key, whose memory their
  // transports must read, else their Connect fails). Only shards that host work reads (converted,
  // quantised or compressed at the source) are copied to the arena too. It costs the source a
  // second device copy of its shards.
  // Either side: the transport must take the device's memory (Transport::TakesMemory: a
  // CUDA-aware UCX for a GPU), else Create fails.
  bool device_direct = false;
  // Rollback, at a destination: how many committed versions it keeps beside the live one, each a
  // copy of the rank's arena copy (shards and packed areas: PlanRank::kept_bytes() each), made by
  // Commit from the staging copy before the swap (so a reader's writes to the live copy are not
  // kept) with a hash per 4 MiB block. Restore(v) makes one the staging copy again. Not with
  // `device` yet (Create refuses it). Ignored at a source.
  size_t keep_versions = 0;
  // A destination's cap on the bytes it fetches per second (0: none), so that a weight sync leaves
  // a shared link to the training job's own traffic: a token bucket over each Receive (the rate
  // since it began, plus one chunk of burst); a chunk over it waits on the loop, not in a Get.
  // Retries count again; chunks delta keeps do not cross the link and do not count.
  double max_bytes_per_s = 0;
  // A destination's background priority (core/background_yield.h): non-null, it keeps in flight
  // only the chunks that keep its inbound path busy and, while other traffic shares that path (all
  // its sources' chunks are measured together: the link in front of it is what they share), holds
  // to a small share of it, running free again once the others have gone. Kept across versions.
  std::shared_ptr<BackgroundYield> background;
};

// What a peer needs to reach a rank: its transport address and its arena's key, and a source's
// published device copy's key when it has one (PlanRankOptions::device_direct).
struct PlanPeer {
  Bytes address;
  RemoteKey key;
  std::optional<RemoteKey> device_key;
  std::string device_memory;  // with device_key: the copy's memory type (DeviceMemory::memory_type)
};

struct ReceiveStats {
  uint64_t version = 0;
  uint64_t chunks = 0;             // fetched and verified
  uint64_t bytes = 0;              // of those chunks
  uint64_t peer_bytes = 0;         // of those, read from other destinations (relays), not from sources
  uint64_t corrupt_refetched = 0;  // chunks whose hash did not match, fetched again
  uint64_t errors_retried = 0;     // Gets that failed and were tried again
  uint64_t polls = 0;              // relay counters and hash headers read
  uint64_t kept_chunks = 0;        // delta: unchanged chunks copied from the live copy, not fetched
  uint64_t kept_bytes = 0;
  uint64_t bands_quantized = 0;         // e4m3 at this rank: bands of whole block rows quantised
  uint64_t bands_reused = 0;            // and bands copied from the live copy (delta: their inputs were kept)
  uint64_t frames = 0;                  // chunks fetched as zstd frames (PlanStep::compress)
  uint64_t frame_bytes = 0;             // their compressed size: what crossed the link for them
  uint64_t rerouted_steps = 0;          // relayed steps fetched from upstream of their relay: it was lost
  uint64_t rerouted_via_relay = 0;      // times such a step went to a relay upstream, not the source
  uint64_t refetched_from_replica = 0;  // steps from a source that was lost, read from a replica of it
  uint64_t refetched_replica_bytes = 0;  // bytes of their chunks verified from the replica
  uint64_t capped_waits = 0;             // times the rate cap (max_bytes_per_s) held the next chunk back
  uint64_t yields = 0;                   // background: times it began to yield to other traffic
  uint64_t congestion_events = 0;        // window cuts: a Get failed and was retried
  uint64_t delay_backoffs = 0;           // window cuts: a chunk slow against the fastest (delay_factor)
  size_t min_window = 0;                 // the smallest the window was
  std::chrono::nanoseconds elapsed{0};   // the whole receive, the copies to the device included
  // PlanRankOptions::device: bytes copied to the device, the time its copier spent on them (most of
  // it while chunks were still arriving), and how long the receive waited for the device after the
  // host had every chunk (and its quantised shards): what the copies added to `elapsed`.
  uint64_t device_bytes = 0;
  uint64_t device_kept_bytes = 0;  // of them, kept by delta: copied on the device from its live copy
  // PlanRankOptions::device_direct: bytes the transport wrote straight into the device (not in
  // device_bytes, which counts copies).
  uint64_t device_direct_bytes = 0;
  // Bytes of verified chunks read from a source's published device copy (its device_direct).
  uint64_t source_device_bytes = 0;
  std::chrono::nanoseconds device_copy{0};
  std::chrono::nanoseconds to_device{0};
  // Restore: bytes copied from the kept version into the staging copy and checked there.
  uint64_t restored_bytes = 0;
};

// What a source's Refill did.
struct RefillStats {
  uint64_t bytes = 0;                       // read from the other holders
  size_t shards = 0;                        // refilled
  size_t not_refilled = 0;                  // shards no other source holds: left as they were
  std::map<Endpoint, uint64_t> bytes_from;  // per holder read from
  // (shard, digest) of each refilled shard, as replica_digests() gives them: equal to the holders'
  // digests of the version they hold.
  std::vector<std::pair<uint32_t, uint64_t>> digests;
  std::chrono::nanoseconds elapsed{0};
};

class PlanRank {
 public:
  // Compiles `me`'s part of `plan` and allocates and registers its arena on `loop`'s transport.
  // Errors: `me` is not a rank of the plan; a step's runs do not fit its buffers; allocation.
  static Result<std::unique_ptr<PlanRank>> Create(std::shared_ptr<const Plan> plan, Endpoint me,
                                                  ProgressLoop& loop, PlanRankOptions options = {});
  // The same from the rank's part of a plan (rank_plan.h): what a plan session's ranks get.
  static Result<std::unique_ptr<PlanRank>> Create(const RankPlan& part, ProgressLoop& loop,
                                                  PlanRankOptions options = {});
  ~PlanRank();
  PlanRank(const PlanRank&) = delete;
  PlanRank& operator=(const PlanRank&) = delete;

  // The plan it runs: the whole plan, or its part (whose step ids are its own).
  const Plan& plan() const;
  // The whole plan's Digest(), for a part too: what ranks compare with the coordinator.
  uint64_t plan_digest() const;
  Endpoint endpoint() const;
  // This rank's entry of the peer table.
  PlanPeer peer_info() const;
  // The ranks this one reads from (the senders of its steps and their roots' sources).
  std::vector<Endpoint> peers_needed() const;
  // Connects to every rank in peers_needed(); each must be in `peers`. Again after Rekey, or with a
  // table in which some entries changed (a rank came back): a connection to a peer whose address
  // and key are as before is kept, the others are closed and dialled again. With `unreachable`, a destination
  // (a relay) that cannot be dialled (Unavailable, IoError) is no error: it is listed there and routed around
  // from now on, as if the coordinator had lost it (PeerLost). A source that cannot be is an error.
  Status Connect(const std::map<Endpoint, PlanPeer>& peers, std::vector<Endpoint>* unreachable = nullptr);
  // Moves the rank to `fresh`'s transport (created with rotate_keys): registers the same arena
  // (and with device_direct its device copies, which `fresh` must take) there and releases its connections
  // and registration on the old transport, which the caller then closes; that revokes every key peers hold
  // for it. peer_info() then names the new transport; Connect again before the next Receive. Not while a
  // Receive runs; from the thread that calls PeerLost and Cancel.
  Status Rekey(ProgressLoop& fresh);

  // The bytes of shard i of this rank (RankBuffer order): a source's, written by the trainer (with
  // PlanRankOptions::device, the engine's: the trainer writes device_shard(i), and Publish copies
  // only what changed there, so writes here would be published mixed in; with device_direct it
  // copies only the shards host work reads, the others stay as they were); a destination's live
  // committed copy (with PlanRankOptions::device_direct, without what landed on the device).
  std::span<std::byte> shard_bytes(size_t shard);
  // With PlanRankOptions::device, shard i on the device (a source's, which Publish reads; a
  // destination's live copy, which Receive leaves alone); nullptr without. A destination's is
  // read-only to its users: a later Receive copies what a delta kept from it, unchecked (on the
  // device, unlike shard_bytes, which is hashed before anything is carried forward from it).
  void* device_shard(size_t shard) const;
  size_t num_shards() const;
  // The version live at a destination (0 before the first commit).
  uint64_t live_version() const;

  // Source: hashes this version's chunks into the hash area. Version >= 1. With
  // PlanRankOptions::device it first copies from the device the 1 MiB blocks of each shard whose
  // hash there changed since the last Publish (the arena's shards are then the engine's: the
  // trainer writes device_shard(i), and not while Publish runs); with device_direct it copies them
  // on the device into the copy peers read, and to the host only what host work needs.
  Status Publish(uint64_t version);
  // Bytes the last Publish copied from the device to the host (the arena).
  uint64_t published_from_device() const;
  // Source: (shard, digest) of each shard another source holds with the same slice
  // (source_replicas.h), as the last Publish read it; the coordinator compares them across the
  // replicas. Empty when no shard is replicated, and with device_direct (the shards are not on the
  // host).
  std::vector<std::pair<uint32_t, uint64_t>> replica_digests() const;
  // Source, created from the whole plan (not a part): fills every shard another source holds with
  // the same slice (source_replicas.h) from those holders in `peers` (the session's peer table),
  // with one-sided Gets of 4 MiB blocks dealt round-robin over the holders, 8 in flight. For a
  // source started in place of a lost one (node replacement), before its trainer resumes from the
  // state its data-parallel peers hold: they must not write their shards meanwhile, as a
  // data-parallel job waits while a rank is replaced (a torn read shows as replicas that differ at
  // the next Publish, which the coordinator aborts naming the ranks). Shards no other source holds
  // are left as they are. Not with PlanRankOptions::device. Errors name the holder and the shard.
  Result<RefillStats> Refill(const std::map<Endpoint, PlanPeer>& peers);
  // Bytes the last Publish copied on the device into the published copy (device_direct).
  uint64_t published_on_device() const;
  // Destination: fetches and verifies every incoming chunk into the staging copy.
  Result<ReceiveStats> Receive(uint64_t version);
  // Destination: makes Receive(version), in progress on another thread or about to start, fail with
  // Cancelled soon, marking this rank's relay counters failed. Any thread.
  void Cancel(uint64_t version, const std::string& reason);
  // Destination: `peer` is gone (the coordinator lost it). The steps relayed through it are fetched
  // from their root source, in the receive in progress and in every later one; a source's plain
  // steps are fetched from a replica of its shard (another source holding the same slice), checked
  // against the hashes mirrored from it, or the receive fails naming the step. Any thread.
  void PeerLost(Endpoint peer);
  // Destination: makes the received version live (it must be the last one received in full).
  Status Commit(uint64_t version);
  // Destination: forgets a received or failed version; the live one stays.
  void Abort(uint64_t version);
  // Destination with PlanRankOptions::keep_versions: makes the kept `version` the staging copy again,
  // each block checked against the hash taken when it was kept, as if Receive(version) had just
  // verified it; Commit(version) then makes it live (rollback), Abort forgets it. Delta after it
  // works from that version's chunk hashes. NotFound naming the versions kept when `version` is not
  // one of them; DataLoss naming the block when a kept copy no longer hashes as it did. Not while
  // a Receive runs; the caller makes sure no reader holds the staging copy, as before a Receive.
  Result<ReceiveStats> Restore(uint64_t version);
  // The versions a destination keeps for Restore, oldest first (PlanRankOptions::keep_versions).
  std::vector<uint64_t> kept_versions() const;
  // The bytes one kept version takes: the rank's copy with its packed areas (0 at a source).
  uint64_t kept_bytes() const;

  struct Impl;

 private:
  explicit PlanRank(std::unique_ptr<Impl> impl);
  static Result<std::unique_ptr<PlanRank>> CreateCompiled(
      std::shared_ptr<const plan_rank_internal::CompiledRank> compiled, ProgressLoop& loop,
      PlanRankOptions options);
  std::unique_ptr<Impl> impl_;
};

}  // namespace weightport
