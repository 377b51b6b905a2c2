// Delta keep, a part of the receive (receive_run.h): chunks whose hash is the one they had in the
// live copy's version are copied from there on the keeper threads and hashed again, not fetched.
#include <cstring>
#include <utility>
#include <vector>

#include "receive_run.h"

namespace weightport {
namespace plan_rank_internal {

using namespace arena_layout;

void ReceiveRun::StartKeeping() {
  const int live = staging_ ^ 1;
  const std::vector<uint64_t>& live_hashes = r_.copy_hashes[live];
  if (!r_.options.delta || !r_.keepers || r_.live_version == 0 || r_.copy_version[live] != r_.live_version ||
      live_hashes.size() != r_.c->in_chunks.size())
    return;
  const bool staging_known = staging_had_.size() == r_.c->in_chunks.size();
  constexpr uint64_t kBatchBytes = 8ull << 20;  // several per keeper thread on a large model
  std::vector<KeptChunk> batch;
  uint64_t bytes = 0;
  auto submit = [&] {
    if (batch.empty()) return;
    ++in_flight_;
    auto self = shared_from_this();
    r_.keepers->Submit([self, batch = std::move(batch)] { self->Keep(batch); });
    batch.clear();
    bytes = 0;
  };
  for (size_t c = 0; c < r_.c->in_chunks.size(); ++c) {
    const uint64_t expected = ExpectedHash(c);
    if (expected != live_hashes[c]) continue;
    keeping_[c] = 1;
    batch.push_back({c, expected, staging_known && staging_had_[c] == expected});
    bytes += r_.c->in_chunks[c].bytes;
    if (bytes >= kBatchBytes) submit();
  }
  submit();
}

void ReceiveRun::Keep(const std::vector<KeptChunk>& batch) {
  const std::byte* live = r_.at(r_.c->mine->CopyOffset(staging_ ^ 1));
  std::byte* staging = r_.at(r_.c->mine->CopyOffset(staging_));
  std::vector<std::pair<size_t, bool>> kept;
  for (auto [c, expected, in_staging] : batch) {
    const InChunk& chunk = r_.c->in_chunks[c];
    if (r_.c->direct_chunks[c]) {  // on the device only: copied there from its live copy (ToDevice)
      kept.emplace_back(c, true);
      continue;
    }
    // Already there since the version the staging copy held, converted and with its frame: hashed,
    // not copied. Hashed all the same: that copy was the live one before, which readers may
    // have written to (shard_bytes).
    if (in_staging) {
      const bool same =
          HashRuns(staging, r_.c->in_runs, chunk.run_begin, chunk.run_end, &Run::to) == expected;
      if (same) {
        // The hash covers the landing area, not what a conversion wrote from it into the shard,
        // which a reader may have written to: converted again.
        ConvertChunk(r_, c, staging_);
        kept.emplace_back(c, true);
        continue;
      }
    }
    for (uint32_t i = chunk.run_begin; i < chunk.run_end; ++i) {
      const Run& run = r_.c->in_runs[i];
      std::memcpy(staging + run.to, live + run.to, run.length);
    }
    // The frame too (zstd is deterministic: the same bytes, the same frame): ranks relaying from
    // this one read it here.
    if (const uint64_t frame = FrameBytes(c); frame > 0) {
      const uint64_t slot = r_.c->in_steps[chunk.in_step].my_slots + chunk.k * r_.c->slot_bytes;
      std::memcpy(staging + slot, live + slot, frame);
    }
    const bool same = HashRuns(staging, r_.c->in_runs, chunk.run_begin, chunk.run_end, &Run::to) == expected;
    if (same) ConvertChunk(r_, c, staging_);
    kept.emplace_back(c, same);
  }
  auto self = shared_from_this();
  r_.loop->Post([self, kept = std::move(kept)](Transport&) { self->OnKept(kept); });
}

void ReceiveRun::OnKept(const std::vector<std::pair<size_t, bool>>& kept) {
  --in_flight_;
  std::vector<size_t> to_device;
  for (auto [c, same] : kept) {
    keeping_[c] = 0;
    const InChunk& chunk = r_.c->in_chunks[c];
    if (same) {
      kept_[c] = 1;
      ++stats_.kept_chunks;
      stats_.kept_bytes += chunk.bytes;
      Verified(c);
      to_device.push_back(c);
    } else if (chunk.k < released_[chunk.in_step]) {  // else it is fetched once released
      ready_.push({0, chunk.k, false, c});
    }
  }
  if (failed_) return MaybeFinish();
  ToDevice(std::move(to_device), /*kept=*/true);
  Issue();
  MaybeFinish();
}

}  // namespace plan_rank_internal

}  // namespace weightport
