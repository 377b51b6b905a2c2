// Internals of the fake transport shared by its source files: the cross-thread half of each
// transport (Endpoint), registrations (Region), the fabric's tables, and the wire forms of fake
// addresses and keys. Not a public header.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <span>
#include <string>
#include <unordered_map>
#include <utility>

#include "weightport/core/thread_annotations.h"
#include "weightport/transport/testing/fake_transport.h"

namespace weightport {
namespace fake_internal {

using Clock = std::chrono::steady_clock;

// The half of a transport that its peers touch, from their own threads.
struct Endpoint {
  Endpoint(uint64_t id, std::string name) : id(id), name(std::move(name)) {}
  const uint64_t id;
  const std::string name;

  Mutex mu;
  std::condition_variable cv;
  bool woken GUARDED_BY(mu) = false;   // sticky until the next WaitForEvent returns
  bool closed GUARDED_BY(mu) = false;  // Close()d or destroyed: peers see it as lost
  std::deque<std::pair<std::string, Bytes>> inbox GUARDED_BY(mu);

  bool is_closed() {
    MutexLock lock(mu);
    return closed;
  }
  void Wake() {
    {
      MutexLock lock(mu);
      woken = true;
    }
    cv.notify_all();
  }
  bool Deliver(const std::string& from, Bytes message) {
    {
      MutexLock lock(mu);
      if (closed) return false;
      inbox.emplace_back(from, std::move(message));
    }
    cv.notify_all();
    return true;
  }
};

// One registration. Peers copy to or from its memory only while holding a pin; deregistration
// waits for pins to drop, so a peer's memcpy never overlaps the owner freeing the memory. Pinning
// never waits, so pinning two regions cannot deadlock.
struct Region {
  Region(uint64_t id, uint64_t owner, std::byte* data, size_t size)
      : id(id), owner(owner), data(data), size(size) {}
  const uint64_t id;
  const uint64_t owner;  // endpoint id
  std::byte* const data;
  const size_t size;

  Mutex mu;
  std::condition_variable unpinned;
  bool alive GUARDED_BY(mu) = true;
  int pins GUARDED_BY(mu) = 0;

  bool Pin() {
    MutexLock lock(mu);
    if (!alive) return false;
    ++pins;
    return true;
  }
  void Unpin() {
    MutexLock lock(mu);
    if (--pins == 0) unpinned.notify_all();
  }
  void Retire() {
    MutexLock lock(mu);
    alive = false;
    unpinned.wait(lock.native(), [&]() REQUIRES(mu) { return pins == 0; });
  }
};

inline constexpr uint64_t kAddressMagic = 0x3130'454b'4146'5057;  // "WPFAKE01"

}  // namespace fake_internal

struct FakeFabric::State {
  explicit State(uint64_t id) : fabric_id(id) {}
  const uint64_t fabric_id;
  mutable Mutex mu;
  uint64_t next_id GUARDED_BY(mu) = 1;
  std::unordered_map<uint64_t, std::shared_ptr<fake_internal::Endpoint>> endpoints GUARDED_BY(mu);
  std::unordered_map<uint64_t, std::shared_ptr<fake_internal::Region>> regions GUARDED_BY(mu);
};

namespace fake_internal {

class FakeRegion final : public MemoryRegion {
 public:
  FakeRegion(std::shared_ptr<FakeFabric::State> fabric, std::shared_ptr<Region> region, RemoteKey key)
      : fabric_(std::move(fabric)), region_(std::move(region)), key_(std::move(key)) {}
  ~FakeRegion() override {
    {
      MutexLock lock(fabric_->mu);
      fabric_->regions.erase(region_->id);
    }
    region_->Retire();
  }
  std::byte* data() const override { return region_->data; }
  size_t size() const override { return region_->size; }
  const RemoteKey& remote_key() const override { return key_; }
  const std::shared_ptr<Region>& region() const { return region_; }

 private:
  std::shared_ptr<FakeFabric::State> fabric_;
  std::shared_ptr<Region> region_;
  RemoteKey key_;
};

}  // namespace fake_internal
}  // namespace weightport
