// VersionedStore: the bytes of one model version that readers use, and the place the next version
// lands, such that no reader ever sees a mix of two versions.
//
// Readers Acquire() a Pin: a view of one committed version, valid until the Pin is destroyed.
// The writer (the engine) calls BeginUpdate(version), receives the buffer chunks must land in,
// then Commit() or Abort(). What Commit does depends on the swap mode, chosen per subscriber by its
// memory budget:
//
//   kDoubleBuffer   two buffers; Commit swaps a pointer (pause ~0, readers never blocked). Readers
//                   pinned to the old version keep reading it; the next BeginUpdate waits until
//                   they have released it, since it becomes the next staging buffer.
//   kStageThenCopy  a separate staging buffer; Commit blocks new readers, waits for pins on the
//                   live buffer to drain, copies staging -> live and unblocks (pause = one local
//                   copy). The live buffer's address never changes: what CUDA-graph-captured
//                   inference engines need.
//   kInPlace        one buffer; BeginUpdate blocks new readers and waits for pins to drain, the
//                   update writes the live buffer, Commit unblocks (readers wait for the whole
//                   update). An aborted in-place update leaves NO valid version: Acquire fails
//                   until the next Commit (there is no copy to fall back on).
//
// Abort in the other modes leaves the previous version live and bit-exact, and the staging buffer
// reusable. Every wait has a timeout.
//
// Thread-safety: Acquire, Pin, stats and live_version from any thread, concurrently. BeginUpdate,
// Commit and Abort from one writer thread at a time.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <string_view>
#include <vector>

#include "weightport/core/status.h"
#include "weightport/core/thread_annotations.h"

namespace weightport {

enum class SwapMode { kDoubleBuffer, kStageThenCopy, kInPlace };
std::string_view SwapModeName(SwapMode mode);
Result<SwapMode> ParseSwapMode(std::string_view name);  // "double-buffer", "stage-copy", "in-place"

struct SwapStats {
  uint64_t commits = 0;
  uint64_t aborts = 0;
  std::chrono::nanoseconds last_pause{0};  // how long new readers were blocked by the last swap
  std::chrono::nanoseconds max_pause{0};
  std::chrono::nanoseconds last_commit{0};  // the writer's time inside Commit
};

class VersionedStore {
 public:
  struct Options {
    uint64_t bytes = 0;
    SwapMode mode = SwapMode::kDoubleBuffer;
    std::chrono::milliseconds wait_timeout{10'000};  // for draining pins and for blocked readers
    // Fault every page in at Create, so that the first updates into each buffer do
    // not pay a page fault per 4 KiB in the middle of a transfer.
    bool prefault = true;
  };

  // A reader's view of one committed version. Move-only; releases on destruction.
  class Pin {
   public:
    Pin() = default;
    Pin(Pin&& other) noexcept;
    Pin& operator=(Pin&& other) noexcept;
    Pin(const Pin&) = delete;
    Pin& operator=(const Pin&) = delete;
    ~Pin();
    std::span<const std::byte> bytes() const { return bytes_; }
    uint64_t version() const { return version_; }

   private:
    friend class VersionedStore;
    void Release();
    std::atomic<int64_t>* count_ = nullptr;
    VersionedStore* store_ = nullptr;
    std::span<const std::byte> bytes_;
    uint64_t version_ = 0;
  };

  // Maps the buffers its mode needs (zero-filled, page-aligned) with no version committed yet.
  static Result<std::unique_ptr<VersionedStore>> Create(const Options& options);
  ~VersionedStore();

  // Pins the live version. FailedPrecondition when none is committed (or after an aborted in-place
  // update); Timeout when blocked longer than wait_timeout by a swap or an in-place update.
  Result<Pin> Acquire();

  // Starts writing `version` (must exceed the live one); returns the buffer it must land in.
  Result<std::span<std::byte>> BeginUpdate(uint64_t version);
  // Makes the version being written the live one (see the modes above).
  Status Commit();
  // Abandons the version being written.
  Status Abort();

  // Version of the live copy, 0 when none.
  uint64_t live_version() const;
  bool updating() const;
  SwapMode mode() const { return options_.mode; }
  uint64_t size() const { return options_.bytes; }
  SwapStats stats() const;

  // Memory the store allocated beyond one copy of the weights (for the memory budget).
  uint64_t extra_bytes() const;

  // Every buffer an update may land in (one or two), e.g. to register them with a transport before
  // the first update. Their addresses never change.
  std::vector<std::span<std::byte>> buffers() const;

 private:
  struct Buffer {
    std::byte* data = nullptr;  // page-aligned anonymous mapping (registers well, zero until touched)
    std::atomic<int64_t> pins{0};
    uint64_t version = 0;
  };

  explicit VersionedStore(const Options& options) : options_(options) {}
  Status WaitForNoPins(Buffer& buffer, MutexLock& lock) REQUIRES(mu_);

  const Options options_;
  Buffer buffers_[2];  // [0] live at start; [1] staging (double-buffer, stage-copy)
  mutable Mutex mu_;
  std::condition_variable cv_;    // pins released, readers unblocked
  int live_ GUARDED_BY(mu_) = 0;  // index of the live buffer
  bool have_live_ GUARDED_BY(mu_) = false;
  bool readers_blocked_ GUARDED_BY(mu_) = false;
  bool updating_ GUARDED_BY(mu_) = false;
  uint64_t pending_version_ GUARDED_BY(mu_) = 0;
  int pending_target_ GUARDED_BY(mu_) = 0;  // buffer the pending version is written to
  std::chrono::steady_clock::time_point blocked_since_ GUARDED_BY(mu_);
  SwapStats stats_ GUARDED_BY(mu_);
};

}  // namespace weightport
