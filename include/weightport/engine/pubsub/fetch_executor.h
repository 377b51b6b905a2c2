// FetchExecutor: pulls a list of chunks from one peer's registered memory into local registered
// memory with one-sided Gets, verifies each chunk's xxh3-64 against the manifest, and fetches a
// corrupt chunk again.
//
// Flow control: at most `window` Gets in flight on the connection. The window halves, at most once
// per window of completions, on a sign of congestion: a Get that failed and is retried (loss, or
// the transport's kResourceExhausted), or, with delay_factor, one whose completion took that many
// times the fastest seen this fetch (queueing on the path); it grows back by one per window of Gets that
// complete without one (additive increase, multiplicative decrease). With max_bytes_per_s a token bucket
// holds the fetch to that rate, so that a weight sync can leave a shared link to a training job's
// traffic; with `background` it yields only while other traffic is there. A failed or corrupt chunk is
// retried after an exponential backoff, up to max_attempts; a lost peer fails the whole fetch at once. Errors
// name the chunk (tensor and index) and the peer.
//
// Verification runs on options.verifier's threads when given, overlapped with the next Gets.
//
// A peer whose region the connection maps into this process (a same-host peer: Connection::Map) is
// not read with Gets: options.verifier's threads copy each chunk from the mapping, hashing each
// piece of it just written while the piece is still in cache, so that a chunk crosses memory once
// and verification costs no pass of its own. Chunks go to the threads in batches of a few MiB, at
// most two batches per thread at once.
//
// The executor reports exactly once, through `done`, and only after no Get it started is still in
// flight and no hash check is pending — so the caller may reuse or free the local memory as soon as `done`
// runs.
//
// Thread-safety: Start, Cancel and every callback run on the ProgressLoop thread that owns the
// connection's transport (use loop.Post to start from elsewhere).
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "weightport/core/background_yield.h"
#include "weightport/core/congestion_window.h"
#include "weightport/core/fetch_pacer.h"
#include "weightport/core/status.h"
#include "weightport/engine/common/worker_pool.h"
#include "weightport/transport/progress_loop.h"
#include "weightport/transport/transport.h"

namespace weightport {

struct ChunkFetch {
  uint64_t remote_offset = 0;  // in the peer's region
  uint64_t local_offset = 0;   // in the local region
  uint64_t length = 0;
  uint64_t xxh3 = 0;  // expected hash of the bytes
  std::string what;   // "tensor 'model.norm.weight' chunk 0", for errors
};

struct FetchOptions {
  size_t window = 32;    // max Gets in flight
  int max_attempts = 4;  // per chunk: the first try and three more
  std::chrono::milliseconds backoff_initial{2};
  std::chrono::milliseconds backoff_max{500};
  std::chrono::milliseconds timeout{60'000};  // for the whole fetch
  bool verify = true;
  // Threads that verify hashes while the loop thread keeps copying, so that verification overlaps
  // the next chunks' transfer instead of following each one. Null: verify on the loop thread. The
  // caller keeps the pool alive beyond the executor (it is shared by successive fetches).
  std::shared_ptr<WorkerPool> verifier;
  // A cap on this fetch's rate, bytes per second; 0: none. A Get waits until the bytes issued stay
  // within max_bytes_per_s x the time since the start plus one chunk.
  double max_bytes_per_s = 0;
  // A Get completing after more than delay_factor x the fastest Get of this fetch, and at least
  // delay_floor later than it, counts as congestion. 0 (the default): delay is not watched. Off by
  // default because a full window's own Gets queue behind each other on a fast path, which reads
  // as delay too; meant for a slow, shared link.
  double delay_factor = 0;
  std::chrono::microseconds delay_floor{2000};
  // Copy from a mapped peer region on the verifier's threads (above) when the connection maps it and
  // a verifier is given; false: always Get.
  bool direct_reads = true;
  // Background priority (core/background_yield.h): non-null, the fetch keeps in flight only the
  // Gets that keep the path busy, and while other traffic shares the path it holds to a small
  // share of it, running free again once the others have gone. Shared by successive fetches from
  // the same peer, so that what it learnt of the path carries over. Copies from a mapped peer do
  // not use it: they share no network path.
  std::shared_ptr<BackgroundYield> background;
};

struct FetchStats {
  uint64_t chunks = 0;
  uint64_t bytes = 0;
  uint64_t corrupt_refetched = 0;  // chunks whose hash did not match, fetched again
  uint64_t errors_retried = 0;     // Gets that failed and were retried
  uint64_t congestion_events = 0;  // window cuts: loss or the transport's backpressure
  uint64_t delay_backoffs = 0;     // window cuts: a Get slow against the fastest one
  uint64_t capped_waits = 0;       // times max_bytes_per_s held the next Get back
  uint64_t yields = 0;             // background: times it began to yield to other traffic
  size_t min_window = 0;
  uint64_t direct_chunks = 0;  // chunks copied from the peer's mapped region, not Got
  std::chrono::nanoseconds elapsed{0};
};

class FetchExecutor : public std::enable_shared_from_this<FetchExecutor> {
 public:
  using DoneFn = std::function<void(const Status&, const FetchStats&)>;

  // Starts fetching; must be called on `loop`'s thread. `local` must stay registered until done.
  static std::shared_ptr<FetchExecutor> Start(ProgressLoop& loop, std::shared_ptr<Connection> connection,
                                              const MemoryRegion& local, RemoteKey remote,
                                              std::vector<ChunkFetch> chunks, FetchOptions options,
                                              DoneFn done);

  // Stops issuing Gets and reports kCancelled once those in flight have completed.
  void Cancel(const std::string& reason);

 private:
  FetchExecutor(ProgressLoop& loop, std::shared_ptr<Connection> connection, const MemoryRegion& local,
                RemoteKey remote, std::vector<ChunkFetch> chunks, FetchOptions options, DoneFn done);
  // Whether the pacer (max_bytes_per_s, and background priority while it yields) holds `bytes`
  // back now; if so, an Issue is posted for when it may go (one at a time).
  bool HeldByCap(uint64_t bytes, std::chrono::steady_clock::time_point now);
  void Issue();
  void IssueDirect();
  void OnComplete(size_t index, const Status& status);
  void OnVerified(size_t index, bool match);
  void Retry(size_t index, const Status& why);
  void Fail(Status status);
  void MaybeFinish();

  ProgressLoop& loop_;
  std::shared_ptr<Connection> connection_;
  const MemoryRegion& local_;
  const RemoteKey remote_;
  const std::vector<ChunkFetch> chunks_;
  const FetchOptions options_;
  DoneFn done_;
  // The peer's region mapped here: chunks are copied from it on the verifier's threads. Released
  // on the loop thread when the fetch reports.
  std::shared_ptr<const MappedPeerRegion> mapped_;
  bool direct_ = false;  // mapped_ was given: chunks are copied, not Got

  std::deque<size_t> queue_;  // chunks waiting to be issued
  std::vector<int> attempts_;
  size_t in_flight_ = 0;     // Gets issued and not completed
  size_t hashing_ = 0;       // chunks landed whose hash the pool is checking
  CongestionWindow window_;  // Gets in flight at most: options.window, cut on loss and delay
  std::vector<std::chrono::steady_clock::time_point> issued_at_;
  bool cap_timer_ = false;  // an Issue is scheduled for when the cap allows the next Get
  size_t verified_ = 0;
  Status failure_;  // first failure; once set nothing new is issued
  bool failed_ = false;
  bool reported_ = false;
  std::chrono::steady_clock::time_point start_;
  FetchPacer pacer_;  // options.max_bytes_per_s and options.background
  FetchStats stats_;
  std::shared_ptr<FetchExecutor> keep_alive_;  // set from Start until the report: callers may drop theirs
};

}  // namespace weightport
