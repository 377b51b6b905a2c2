// The receive state machine of a PlanRank destination: one object per Receive, living on the loop
// thread. Order of events: mirror the root sources' hash areas (retried until they show this
// version); then every chunk of a direct step is ready at once, and a relayed step's chunks become
// ready as polls of the relay's counter show them verified there; ready chunks are fetched, at most
// a congestion window at a time (PlanRankOptions::window; retries first, then the lowest chunk index over all
// steps, so every step advances together), verified and, where others relay from them, counted.
//
// Its parts, one file each: receive_run.cc (start, finish, failure, shared helpers),
// receive_fetch.cc (mirrors, fetch and verify), receive_relay.cc (polls of relays, detours around
// lost ones), receive_replica.cc (a lost source's steps read from its replicas), receive_delta.cc (chunks
// kept from the live copy), receive_device.cc (the device sink).
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <queue>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "plan_rank_impl.h"
#include "weightport/core/congestion_window.h"
#include "weightport/core/fetch_pacer.h"

namespace weightport {
namespace plan_rank_internal {

// Whether a failed Get means the rank read from is gone (or the request cannot succeed), rather
// than an error worth a retry.
bool Fatal(const Status& s, const Connection& c);

// A chunk of a step converted at this rank, verified in its landing area: into the shard of `copy`.
void ConvertChunk(PlanRank::Impl& r, size_t c, int copy);

// Delta: a chunk unchanged since the live copy's version, and whether the staging copy's version
// has it too.
struct KeptChunk {
  size_t chunk = 0;
  uint64_t expected = 0;
  bool in_staging = false;
};

class ReceiveRun : public std::enable_shared_from_this<ReceiveRun> {
 public:
  ReceiveRun(PlanRank::Impl& r, uint64_t version, std::function<void(Result<ReceiveStats>)> done);
  void Start();

 private:
  using Clock = std::chrono::steady_clock;

  // receive_run.cc: where things are read from, the expected hashes, the end of the receive.
  Connection& Conn(Endpoint ep);
  std::string Waiting() const;
  // Where step st is read from now: its sender (level 0), or detour level l (1-based); for a root
  // step, level l is its alternate l (a replica of its lost source).
  Endpoint CurrentFrom(size_t st) const;
  Endpoint LevelFrom(size_t st, uint32_t level) const;
  const DetourLevel& DetourAt(size_t st, uint32_t level) const;
  // Where chunk c is read from: the rank its step read from when the chunk was fetched.
  Endpoint From(size_t c) const;
  // The chunk's entry in the mirrored hash area of its root: {hash, compressed length}.
  const std::byte* Entry(size_t c) const;
  uint64_t ExpectedHash(size_t c) const;
  // The size of the chunk's zstd frame, or 0 when it travels as is.
  uint64_t FrameBytes(size_t c) const;
  void Fail(Status s);
  void MaybeFinish();

  // receive_fetch.cc: mirrors of the roots' hash areas, chunks fetched and verified.
  void FetchMirror(size_t i);
  void OnMirror(size_t i, const Status& s);
  void Issue();
  // PlanRankOptions::max_bytes_per_s: whether chunk c may go now; if not, Issue runs again once it
  // may (one wait posted at a time).
  bool WithinCap(size_t c);
  void FetchChunk(size_t c);
  void OnRun(size_t c, const Status& s);
  // A chunk the transport wrote into the device's staging copy: hashed there, on the rank's
  // verifier thread (a GPU's hash waits for its kernel; the loop keeps serving the transport), then
  // back on the loop. Nothing writes the chunk's bytes meanwhile: a refetch comes after the result.
  void OnDirectRun(size_t c, std::string what);
  void OnDirectHashed(size_t c, const std::string& what, const Result<uint64_t>& got);
  // A fetched chunk that verified, in the stats: its bytes, from a peer, from a source's replica.
  void CountFetched(size_t c);
  void Verified(size_t c);
  void Retry(size_t c, const Status& why, const std::string& what);

  // receive_relay.cc: the relays' counters polled, detours around lost or failed relays.
  // Routes step st around the rank it reads from now: to the nearest rank upstream that is not lost
  // (its verified chunks, as its counter shows them), else the root source (every chunk at once).
  // Chunks already released stay released: a rank verified a chunk only after the ranks upstream
  // of it did. False when no level is left (or the step's chain has another shape).
  bool Detour(size_t st);
  void Unpark(size_t st);
  // The rank step st reads from failed or is gone: around it if the step allows, else the receive
  // fails with `why`.
  void DetourOrFail(size_t st, Status why);
  // The coordinator lost `peer`: the steps that read it go upstream of it. Before the mirrors are
  // in, nothing is released yet; the loop over the steps then sees it in lost_peers.
  void OnPeerLost(Endpoint peer);
  // Chunks [released, upto) of step st may go.
  void Release(size_t st, uint32_t upto);
  // Reads the counter of the rank step st reads from now (its relay, or a relay upstream of it).
  void Poll(size_t st);
  void OnPoll(size_t st, uint32_t level, const Status& s);

  // receive_replica.cc: a lost source's steps read from its replicas.
  // Moves root step st to its next alternate that is not lost, checked against the hashes mirrored
  // from its source (every chunk was released at once). False when none is left.
  bool ToReplica(size_t st);
  // The root steps read from `peer`, lost: to a replica, else the receive fails naming the step.
  void RootSourceLost(Endpoint peer);
  // Where chunk c's runs lie at the rank it is read from, relative to where its step's runs say.
  int64_t Shift(size_t c) const;

  // receive_delta.cc: chunks kept from the live copy.
  // Delta: the chunks whose hash is the one they had in the live copy's version are copied from
  // there on the keeper threads, in batches, and hashed again; they are not fetched unless that
  // hash differs (someone wrote to the live copy).
  void StartKeeping();
  // On a keeper thread: touches only the staging copy's bytes of these chunks.
  void Keep(const std::vector<KeptChunk>& batch);
  void OnKept(const std::vector<std::pair<size_t, bool>>& kept);

  // receive_device.cc: verified bytes to the device's staging copy.
  // PlanRankOptions::device: `copy` (ChunksToDevice, BandToDevice, TailToDevice) on the device
  // copier's thread; back on the loop, what it copied is counted or the receive fails.
  void OnDeviceCopier(std::function<Result<DeviceCopied>()> copy);
  // Verified chunks: fetched (from the staging copy) or kept (from the live device copy). Their
  // bytes in the staging copy no longer change in this receive.
  void ToDevice(std::vector<size_t> chunks, bool kept);
  // A band quantised here (or reused: from the live device copy), once its output is final.
  void BandToDevice(size_t band, bool reused);

  PlanRank::Impl& r_;
  const uint64_t v_;
  const int staging_;
  std::function<void(Result<ReceiveStats>)> done_;
  Clock::time_point start_;
  ReceiveStats stats_;
  std::vector<int> attempts_;
  std::vector<uint32_t> pending_runs_;
  std::vector<uint64_t> from_source_device_;  // per chunk: bytes its last fetch read from a source's device
  std::vector<Status> run_error_;
  std::vector<uint8_t> verified_;
  std::vector<uint8_t> keeping_;          // delta: being copied from the live copy
  std::vector<uint8_t> kept_;             // delta: copied from the live copy, unchanged
  std::vector<std::byte> frame_scratch_;  // a decompressed chunk on its way into its runs
  std::vector<uint64_t> staging_had_;     // hashes of the version the staging copy held, or empty
  std::vector<uint32_t> prefix_;
  std::vector<uint32_t> released_;
  std::vector<int> sender_copy_;
  std::vector<std::chrono::milliseconds> poll_backoff_;
  std::vector<int> mirror_attempts_;
  std::vector<uint32_t> level_;              // per step: 0 its sender, l its detour level (or alternate) l
  std::vector<uint8_t> level_ready_;         // per step: the copy of the rank read from now is known
  std::vector<std::vector<size_t>> parked_;  // per step: released chunks waiting for level_ready_
  std::vector<uint32_t> via_;                // per chunk: the level it was last fetched from
  // Chunks that may be fetched, least first: (0 a retry | 1, index within its step, nobody relays
  // from its step, chunk). By index, not by release order: a direct step releases all its chunks at
  // once, and in FIFO order they filled the window ahead of the relayed steps' chunks, so the ranks
  // downstream of this one waited (a 7-hop chain ran 1.5x slower with 1 MiB chunks than with 2 MiB).
  using ReadyChunk = std::tuple<int, uint32_t, bool, size_t>;
  std::priority_queue<ReadyChunk, std::vector<ReadyChunk>, std::greater<>> ready_;
  size_t mirrors_left_ = 0;
  size_t chunks_in_flight_ = 0;
  size_t in_flight_ = 0;     // Gets issued and not completed
  FetchPacer pacer_;         // PlanRankOptions::max_bytes_per_s and ::background, from the start
  CongestionWindow window_;  // chunks in flight at most (PlanRankOptions::window)
  std::vector<Clock::time_point> issued_at_;  // per chunk: when its last fetch was issued
  bool cap_wait_posted_ = false;              // an Issue waits for the cap on the loop
  size_t verified_count_ = 0;
  bool failed_ = false;
  bool quantized_ = false;              // the shards quantised here are (in_quantize)
  size_t device_in_flight_ = 0;         // device copier tasks not yet back on the loop
  std::atomic<bool> abandoned_{false};  // failed: device copier tasks not yet started do nothing
  bool device_tail_ = false;            // the copy of what no chunk fills is submitted
  Clock::time_point host_done_;         // every chunk verified (and quantised) in the staging copy
  bool reported_ = false;
  Status failure_;
  std::shared_ptr<ReceiveRun> keep_;
};

}  // namespace plan_rank_internal
}  // namespace weightport
