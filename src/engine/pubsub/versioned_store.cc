#include "weightport/engine/pubsub/versioned_store.h"
#include "weightport/core/memory_check.h"

#include <sys/mman.h>

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace weightport {
namespace {

using Clock = std::chrono::steady_clock;

// Faults every page of [p, p + bytes) in, a slice at a time. Not MAP_POPULATE: that holds the
// process's memory-map lock for the whole buffer (seconds for gigabytes), stalling every other thread
// that maps memory meanwhile (a heartbeat thread allocating, a new thread's stack).
void Prefault(std::byte* p, uint64_t bytes) {
  constexpr uint64_t kSlice = 64ull << 20;
  const long page = sysconf(_SC_PAGESIZE);
  for (uint64_t off = 0; off < bytes; off += kSlice) {
    const uint64_t n = std::min(kSlice, bytes - off);
    if (madvise(p + off, n, MADV_POPULATE_WRITE) == 0) continue;
    for (uint64_t i = 0; i < n; i += static_cast<uint64_t>(page)) p[off + i] = std::byte{0};  // older kernels
  }
}

Result<std::byte*> MapBuffer(uint64_t bytes, bool prefault) {
  if (bytes == 0) return static_cast<std::byte*>(nullptr);
  WP_RETURN_IF_ERROR(CheckMemoryFits(bytes, false, "versioned store"));
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED)
    return ErrnoError("versioned store: cannot map " + std::to_string(bytes) + " bytes", errno);
  if (prefault) Prefault(static_cast<std::byte*>(p), bytes);
  return static_cast<std::byte*>(p);
}

}  // namespace

std::string_view SwapModeName(SwapMode mode) {
  switch (mode) {
    case SwapMode::kDoubleBuffer:
      return "double-buffer";
    case SwapMode::kStageThenCopy:
      return "stage-copy";
    case SwapMode::kInPlace:
      return "in-place";
  }
  return "unknown";
}

Result<SwapMode> ParseSwapMode(std::string_view name) {
  for (SwapMode m : {SwapMode::kDoubleBuffer, SwapMode::kStageThenCopy, SwapMode::kInPlace})
    if (SwapModeName(m) == name) return m;
  return InvalidArgument("unknown swap mode '" + std::string(name) +
                         "' (expected double-buffer, stage-copy or in-place)");
}

// ---- Pin ---------------------------------------------------------------------------------------

VersionedStore::Pin::Pin(Pin&& other) noexcept { *this = std::move(other); }

VersionedStore::Pin& VersionedStore::Pin::operator=(Pin&& other) noexcept {
  if (this != &other) {
    Release();
    count_ = std::exchange(other.count_, nullptr);
    store_ = std::exchange(other.store_, nullptr);
    bytes_ = std::exchange(other.bytes_, {});
    version_ = std::exchange(other.version_, 0);
  }
  return *this;
}

VersionedStore::Pin::~Pin() { Release(); }

void VersionedStore::Pin::Release() {
  if (!count_) return;
  {
    MutexLock lock(store_->mu_);
    count_->fetch_sub(1, std::memory_order_relaxed);
  }
  store_->cv_.notify_all();
  count_ = nullptr;
  store_ = nullptr;
}

// ---- store -------------------------------------------------------------------------------------

Result<std::unique_ptr<VersionedStore>> VersionedStore::Create(const Options& options) {
  std::unique_ptr<VersionedStore> store(new VersionedStore(options));
  WP_ASSIGN_OR_RETURN(store->buffers_[0].data, MapBuffer(options.bytes, options.prefault));
  if (options.mode != SwapMode::kInPlace) {
    WP_ASSIGN_OR_RETURN(store->buffers_[1].data, MapBuffer(options.bytes, options.prefault));
  }
  return store;
}

VersionedStore::~VersionedStore() {
  for (Buffer& b : buffers_)
    if (b.data) munmap(b.data, options_.bytes);
}

uint64_t VersionedStore::extra_bytes() const {
  return options_.mode == SwapMode::kInPlace ? 0 : options_.bytes;
}

std::vector<std::span<std::byte>> VersionedStore::buffers() const {
  std::vector<std::span<std::byte>> out;
  for (const Buffer& b : buffers_)
    if (b.data != nullptr) out.emplace_back(b.data, options_.bytes);
  return out;
}

uint64_t VersionedStore::live_version() const {
  MutexLock lock(mu_);
  return have_live_ ? buffers_[live_].version : 0;
}

bool VersionedStore::updating() const {
  MutexLock lock(mu_);
  return updating_;
}

SwapStats VersionedStore::stats() const {
  MutexLock lock(mu_);
  return stats_;
}

Result<VersionedStore::Pin> VersionedStore::Acquire() {
  MutexLock lock(mu_);
  if (!cv_.wait_for(lock.native(), options_.wait_timeout, [&]() REQUIRES(mu_) { return !readers_blocked_; }))
    return Timeout("versioned store: reader blocked by a swap for more than " +
                   std::to_string(options_.wait_timeout.count()) + " ms");
  if (!have_live_)
    return FailedPrecondition(stats_.aborts && options_.mode == SwapMode::kInPlace
                                  ? "versioned store: no valid version (an in-place update was aborted)"
                                  : "versioned store: no version committed yet");
  Buffer& b = buffers_[live_];
  b.pins.fetch_add(1, std::memory_order_relaxed);
  Pin pin;
  pin.count_ = &b.pins;
  pin.store_ = this;
  pin.bytes_ = {b.data, options_.bytes};
  pin.version_ = b.version;
  return pin;
}

Status VersionedStore::WaitForNoPins(Buffer& buffer, MutexLock& lock) {
  if (!cv_.wait_for(lock.native(), options_.wait_timeout,
                    [&] { return buffer.pins.load(std::memory_order_relaxed) == 0; }))
    return Timeout("versioned store: " + std::to_string(buffer.pins.load()) +
                   " reader(s) still hold version " + std::to_string(buffer.version) + " after " +
                   std::to_string(options_.wait_timeout.count()) + " ms");
  return Status::Ok();
}

Result<std::span<std::byte>> VersionedStore::BeginUpdate(uint64_t version) {
  MutexLock lock(mu_);
  if (updating_)
    return FailedPrecondition("versioned store: version " + std::to_string(pending_version_) +
                              " is still being written");
  if (have_live_ && version <= buffers_[live_].version)
    return InvalidArgument("versioned store: version " + std::to_string(version) +
                           " is not newer than the live " + std::to_string(buffers_[live_].version));
  int target = 0;
  switch (options_.mode) {
    case SwapMode::kDoubleBuffer:
      target = have_live_ ? 1 - live_ : 0;
      // Readers of the version before the live one may still hold this buffer.
      WP_RETURN_IF_ERROR(WaitForNoPins(buffers_[target], lock));
      break;
    case SwapMode::kStageThenCopy:
      target = 1;
      break;
    case SwapMode::kInPlace: {
      readers_blocked_ = true;
      blocked_since_ = Clock::now();
      Status s = WaitForNoPins(buffers_[0], lock);
      if (!s.ok()) {
        readers_blocked_ = false;
        cv_.notify_all();
        return s;
      }
      have_live_ = false;  // its bytes are about to change
      break;
    }
  }
  updating_ = true;
  pending_version_ = version;
  pending_target_ = target;
  return std::span<std::byte>(buffers_[target].data, options_.bytes);
}

Status VersionedStore::Commit() {
  MutexLock lock(mu_);
  if (!updating_) return FailedPrecondition("versioned store: Commit without BeginUpdate");
  const auto start = Clock::now();
  std::chrono::nanoseconds pause{0};
  switch (options_.mode) {
    case SwapMode::kDoubleBuffer:
      // Readers wait only for this lock: the pause is the swap itself.
      buffers_[pending_target_].version = pending_version_;
      live_ = pending_target_;
      pause = Clock::now() - start;
      break;
    case SwapMode::kStageThenCopy: {
      readers_blocked_ = true;
      if (Status s = WaitForNoPins(buffers_[0], lock); !s.ok()) {
        readers_blocked_ = false;
        cv_.notify_all();
        return s;  // still updating: the writer may Commit again or Abort
      }
      // Readers are held off by the flag, so the copy runs without the lock.
      lock.Unlock();
      if (options_.bytes) std::memcpy(buffers_[0].data, buffers_[1].data, options_.bytes);
      lock.Lock();
      buffers_[0].version = pending_version_;
      live_ = 0;
      pause = Clock::now() - start;
      break;
    }
    case SwapMode::kInPlace:
      buffers_[0].version = pending_version_;
      live_ = 0;
      pause = Clock::now() - blocked_since_;
      break;
  }
  have_live_ = true;
  readers_blocked_ = false;
  updating_ = false;
  ++stats_.commits;
  stats_.last_pause = pause;
  stats_.max_pause = std::max(stats_.max_pause, pause);
  stats_.last_commit = Clock::now() - start;
  lock.Unlock();
  cv_.notify_all();
  return Status::Ok();
}

Status VersionedStore::Abort() {
  MutexLock lock(mu_);
  if (!updating_) return FailedPrecondition("versioned store: Abort without BeginUpdate");
  updating_ = false;
  ++stats_.aborts;
  if (options_.mode == SwapMode::kInPlace) {
    have_live_ = false;
    readers_blocked_ = false;
  }
  lock.Unlock();
  cv_.notify_all();
  return Status::Ok();
}

}  // namespace weightport
