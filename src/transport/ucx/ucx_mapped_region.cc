// A same-host peer's region read in place (UcxConnection::Map), and the page population that makes
// a first read of a new mapping run at memory speed (for Map's readers and for UCX's own Gets).
#include <sys/mman.h>

#include "transport/ucx/ucx_internal.h"

namespace weightport::ucx {
namespace {

constexpr int kMadvPopulateRead = 22;  // MADV_POPULATE_READ (Linux 5.14), not in every libc

}  // namespace

PagePopulator::PagePopulator(const std::byte* base, uint64_t size)
    : base_(base), size_(size), done_(std::make_unique<std::atomic<bool>[]>((size + kBlock - 1) / kBlock)) {}

void PagePopulator::Prepare(uint64_t offset, uint64_t length) const {
  if (length == 0 || offset >= size_) return;
  length = std::min(length, size_ - offset);
  for (uint64_t b = offset / kBlock; b <= (offset + length - 1) / kBlock; ++b) {
    if (done_[b].load(std::memory_order_relaxed)) continue;
    const uint64_t from = b * kBlock;
    const uintptr_t p = reinterpret_cast<uintptr_t>(base_ + from), begin = p & ~uintptr_t{4095};
    // Advice only: a kernel without MADV_POPULATE_READ (before 5.14) refuses it and the copy faults.
    madvise(reinterpret_cast<void*>(begin), p + std::min(kBlock, size_ - from) - begin, kMadvPopulateRead);
    done_[b].store(true, std::memory_order_relaxed);
  }
}

UcxMappedPeerRegion::UcxMappedPeerRegion(std::shared_ptr<Context> context, ucp_rkey_h rkey,
                                         const std::byte* base, uint64_t size)
    : context_(std::move(context)), rkey_(rkey), pages_(base, size) {}

UcxMappedPeerRegion::~UcxMappedPeerRegion() {
  MutexLock lock(context_->mu);
  if (context_->worker_alive) ucp_rkey_destroy(rkey_);
}

std::shared_ptr<const MappedPeerRegion> UcxConnection::Map(const RemoteKey& key) {
  if (!Usable().ok() || PeerClosed()) return nullptr;
  const std::optional<WireKey> wire = DecodeKey(key.packed);
  if (!wire || wire->owner_id != peer_id_ || wire->ucp_rkey.empty()) return nullptr;
  if (auto it = mapped_.find(wire->region_id); it != mapped_.end()) return it->second;
  ucp_rkey_h rkey = nullptr;
  if (ucp_ep_rkey_unpack(ep_, wire->ucp_rkey.data(), &rkey) != UCS_OK) return nullptr;
  void* base = nullptr;
  // Only a transport that mapped the peer's memory here (POSIX or SysV shared memory) answers; the
  // answer is kept either way, so that a peer on another host is asked once.
  if (ucp_rkey_ptr(rkey, key.address, &base) != UCS_OK || base == nullptr) {
    ucp_rkey_destroy(rkey);
    mapped_.emplace(wire->region_id, nullptr);
    return nullptr;
  }
  auto mapped = std::make_shared<UcxMappedPeerRegion>(transport_->shared_context(), rkey,
                                                      static_cast<const std::byte*>(base), key.length);
  mapped_.emplace(wire->region_id, mapped);
  return mapped;
}

}  // namespace weightport::ucx
