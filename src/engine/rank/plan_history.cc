// Kept versions of a destination (PlanRankOptions::keep_versions) and Restore: a rollback is a
// local copy back into the staging copy, checked block by block, then the usual Commit.
#include <algorithm>
#include <chrono>
#include <cstring>
#include <string>

#include "plan_rank_impl.h"

namespace weightport {
namespace plan_rank_internal {
namespace {

struct NoScratch {};

size_t Blocks(uint64_t bytes) { return static_cast<size_t>((bytes + kKeptBlockBytes - 1) / kKeptBlockBytes); }

// The pool to share a whole-copy pass among: no receive runs while one does.
WorkerPool* CopyPool(PlanRank::Impl& r) { return r.workers ? r.workers.get() : r.keepers.get(); }

}  // namespace

void KeepVersion(PlanRank::Impl& r, int copy, uint64_t version) {
  // Already kept (a rollback to it is being committed): the bytes are the same; it becomes newest.
  for (size_t i = 0; i < r.kept.size(); ++i) {
    if (r.kept[i].version != version) continue;
    std::rotate(r.kept.begin() + static_cast<std::ptrdiff_t>(i),
                r.kept.begin() + static_cast<std::ptrdiff_t>(i) + 1, r.kept.end());
    return;
  }
  const uint64_t size = r.c->mine->data_bytes;
  PlanRank::Impl::KeptVersion slot;
  if (r.kept.size() >= r.options.keep_versions) {  // the oldest's memory is reused
    slot = std::move(r.kept.front());
    r.kept.erase(r.kept.begin());
  } else {
    slot.bytes = std::make_unique<std::byte[]>(size);
  }
  slot.version = version;
  slot.block_hashes.resize(Blocks(size));
  const std::byte* from = r.at(r.c->mine->CopyOffset(copy));
  std::byte* to = slot.bytes.get();
  // Each block copied, then hashed while it is still in cache.
  ForEachIndex<NoScratch>(CopyPool(r), slot.block_hashes.size(), [&](size_t b, NoScratch&) {
    const uint64_t at = b * kKeptBlockBytes, n = std::min(kKeptBlockBytes, size - at);
    std::memcpy(to + at, from + at, n);
    slot.block_hashes[b] = Xxh3(to + at, n);
  });
  slot.copy_hashes = r.copy_hashes[copy];
  slot.band_hashes = r.band_hashes[copy];
  r.kept.push_back(std::move(slot));
}

}  // namespace plan_rank_internal

using namespace plan_rank_internal;

Result<ReceiveStats> PlanRank::Restore(uint64_t version) {
  Impl& r = *impl_;
  if (r.is_source()) return FailedPrecondition(r.c->me.ToString() + ": Restore on a source");
  auto it = std::find_if(r.kept.begin(), r.kept.end(), [&](const auto& k) { return k.version == version; });
  if (it == r.kept.end()) {
    std::string held;
    for (const auto& k : r.kept) held += (held.empty() ? "" : ", ") + std::to_string(k.version);
    return NotFound(r.c->me.ToString() + " does not keep version " + std::to_string(version) + " (it keeps " +
                    (held.empty() ? std::string("none") : held) + "; keep_versions " +
                    std::to_string(r.options.keep_versions) + ")");
  }
  const auto start = std::chrono::steady_clock::now();
  r.received_version = 0;
  const int staging = r.live ^ 1;
  r.copy_version[staging] = 0;  // written from now on
  const uint64_t size = r.c->mine->data_bytes;
  std::byte* to = r.at(r.c->mine->CopyOffset(staging));
  const std::byte* from = it->bytes.get();
  std::atomic<size_t> bad{SIZE_MAX};
  ForEachIndex<NoScratch>(CopyPool(r), it->block_hashes.size(), [&](size_t b, NoScratch&) {
    const uint64_t at = b * kKeptBlockBytes, n = std::min(kKeptBlockBytes, size - at);
    std::memcpy(to + at, from + at, n);
    if (Xxh3(to + at, n) != it->block_hashes[b]) {
      size_t none = SIZE_MAX;
      bad.compare_exchange_strong(none, b);
    }
  });
  if (bad.load() != SIZE_MAX)
    return DataLoss(r.c->me.ToString() + ": kept version " + std::to_string(version) + " block " +
                    std::to_string(bad.load()) + " (bytes " + std::to_string(bad.load() * kKeptBlockBytes) +
                    "..) no longer hashes as it did when kept");
  r.copy_hashes[staging] = it->copy_hashes;
  r.band_hashes[staging] = it->band_hashes;
  r.copy_version[staging] = version;
  r.received_version = version;
  ReceiveStats stats;
  stats.version = version;
  stats.restored_bytes = size;
  stats.elapsed = std::chrono::steady_clock::now() - start;
  return stats;
}

std::vector<uint64_t> PlanRank::kept_versions() const {
  std::vector<uint64_t> out;
  for (const auto& k : impl_->kept) out.push_back(k.version);
  return out;
}

uint64_t PlanRank::kept_bytes() const { return impl_->is_source() ? 0 : impl_->c->mine->data_bytes; }

}  // namespace weightport
