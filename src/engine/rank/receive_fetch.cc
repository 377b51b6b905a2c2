// Fetch and verify, a part of the receive (receive_run.h): the root sources' hash areas mirrored,
// ready chunks fetched within the window (into the arena, or straight into the device's staging
// copy), unpacked from their frames, hashed against their root's entry, retried or verified.
#include <algorithm>
#include <cstring>
#include <optional>
#include <span>
#include <string>
#include <utility>

#include "receive_run.h"
#include "weightport/kernels/compress.h"

namespace weightport {
namespace plan_rank_internal {

using namespace arena_layout;

void ReceiveRun::FetchMirror(size_t i) {
  r_.OnLoopThread();  // a task of the loop thread
  const RootSource& root = r_.c->roots[i];
  if (!r_.connections.count(root.endpoint))
    return Fail(FailedPrecondition(r_.c->me.ToString() + ": not connected to " + root.endpoint.ToString()));
  ++mirror_attempts_[i];
  ++in_flight_;
  ++stats_.polls;
  auto self = shared_from_this();
  Conn(root.endpoint)
      .Get(*r_.arena, root.mirror, r_.keys.at(root.endpoint), root.remote_offset, root.bytes,
           [self, i](const Status& s) { self->OnMirror(i, s); });
}

void ReceiveRun::OnMirror(size_t i, const Status& s) {
  r_.OnLoopThread();  // a task of the loop thread
  --in_flight_;
  if (failed_) return MaybeFinish();
  const RootSource& root = r_.c->roots[i];
  if (!s.ok() && Fatal(s, Conn(root.endpoint)))
    return Fail(s.WithContext(r_.c->me.ToString() + ": chunk hashes of " + root.endpoint.ToString()));
  const std::byte* m = r_.at(root.mirror);
  const uint64_t version = s.ok() ? LoadWord(m) : 0;
  if (version > v_)
    return Fail(FailedPrecondition(root.endpoint.ToString() + " published version " +
                                   std::to_string(version) + " while " + r_.c->me.ToString() + " receives " +
                                   std::to_string(v_)));
  const bool good = version == v_ && LoadWord(m + 8) == HashAreaCheck(version, m, root.bytes);
  if (!good) {  // not yet published, or a torn or corrupt read: read again after a pause
    auto self = shared_from_this();
    const auto delay = std::min(r_.options.backoff_max,
                                r_.options.backoff_initial * (1 << std::min(mirror_attempts_[i], 6)));
    r_.loop->PostAfter(delay, [self, i](Transport&) {
      if (!self->failed_) self->FetchMirror(i);
      self->MaybeFinish();
    });
    return;
  }
  if (--mirrors_left_ > 0) return;
  StartKeeping();
  for (const Endpoint& lost : r_.lost_peers)  // sources lost before their hashes were in
    if (lost.side == PlanSide::kSource) RootSourceLost(lost);
  if (failed_) return MaybeFinish();
  for (size_t st = 0; st < r_.c->in_steps.size(); ++st) {
    const InStep& step = r_.c->in_steps[st];
    if (step.after < 0) {
      Release(st, step.chunks);
    } else if (!r_.lost_peers.count(step.sender) || !Detour(st)) {
      Poll(st);
    }
  }
  Issue();
}

void ReceiveRun::Issue() {
  const size_t window = pacer_.Window(window_.size());
  while (!failed_ && chunks_in_flight_ < window && !ready_.empty()) {
    const size_t c = std::get<3>(ready_.top());
    if (keeping_[c] || verified_[c]) {  // kept from the live copy, or being kept
      ready_.pop();
      continue;
    }
    const size_t st = r_.c->in_chunks[c].in_step;
    if (!level_ready_[st]) {  // its step waits for the first poll of the rank it now reads from
      ready_.pop();
      parked_[st].push_back(c);
      continue;
    }
    if (!WithinCap(c)) return;  // it stays first in line
    ready_.pop();
    FetchChunk(c);
  }
}

bool ReceiveRun::WithinCap(size_t c) {
  const uint64_t frame = FrameBytes(c);
  const uint64_t bytes = frame > 0 ? frame : r_.c->in_chunks[c].bytes;
  const auto wait = pacer_.Admit(bytes, Clock::now());
  if (!wait) return true;
  if (cap_wait_posted_) return false;
  cap_wait_posted_ = true;
  ++stats_.capped_waits;
  r_.loop->PostAfter(*wait, [self = shared_from_this()](Transport&) {
    self->cap_wait_posted_ = false;
    if (!self->failed_) self->Issue();
  });
  return false;
}

void ReceiveRun::FetchChunk(size_t c) {
  r_.OnLoopThread();  // a task of the loop thread
  const InChunk& chunk = r_.c->in_chunks[c];
  const InStep& s = r_.c->in_steps[chunk.in_step];
  const uint32_t level = level_[chunk.in_step];
  const bool detoured = level != 0 && s.after >= 0;  // a root step's levels are replicas: its own runs
  via_[c] = level;
  const Endpoint from = From(c);
  const uint64_t remote_base =
      r_.c->layouts.at(from).CopyOffset(from.side == PlanSide::kSource ? 0 : sender_copy_[chunk.in_step]);
  const uint64_t local_base = r_.c->mine->CopyOffset(staging_);
  const int64_t shift = Shift(c);
  ++chunks_in_flight_;
  ++attempts_[c];
  issued_at_[c] = Clock::now();
  run_error_[c] = Status::Ok();
  Connection& conn = Conn(from);
  const RemoteKey& key = r_.keys.at(from);
  auto self = shared_from_this();
  if (const uint64_t frame = FrameBytes(c); frame > 0) {  // one Get, slot to slot
    pending_runs_[c] = 1;
    ++in_flight_;
    const uint64_t slot = chunk.k * r_.c->slot_bytes;
    conn.Get(*r_.arena, local_base + s.my_slots + slot, key,
             remote_base + (detoured ? s.root_slots : s.sender_slots) + slot, frame,
             [self, c](const Status& status) { self->OnRun(c, status); });
    return;
  }
  const std::vector<Run>& runs = detoured ? r_.c->detour_runs : r_.c->in_runs;
  const RunRange range = detoured ? r_.c->detour_ranges[chunk.detour_ranges + level - 1]
                                  : RunRange{chunk.run_begin, chunk.run_end};
  const uint32_t begin = range.begin, end = range.end;
  pending_runs_[c] = end - begin;
  const bool direct = r_.c->direct_chunks[c];  // straight into the device's staging copy
  // A source that publishes on its device: what lies within its shards is read from there.
  auto device = r_.source_devices.find(from);
  const PlanRank::Impl::SourceDevice* source = device == r_.source_devices.end() ? nullptr : &device->second;
  from_source_device_[c] = 0;
  for (uint32_t i = begin; i < end; ++i) {
    Run run = runs[i];
    run.from += static_cast<uint64_t>(shift);  // at a replica of the step's source: its shard
    const std::optional<uint64_t> at_source =
        source ? source->layout.OffsetOf(run.from, run.length) : std::nullopt;
    if (at_source) from_source_device_[c] += run.length;
    ++in_flight_;
    conn.Get(direct ? *r_.device_regions[staging_] : *r_.arena,
             direct ? *r_.c->device_layout.OffsetOf(run.to, run.length) : local_base + run.to,
             at_source ? source->key : key, at_source ? *at_source : remote_base + run.from, run.length,
             [self, c](const Status& status) { self->OnRun(c, status); });
  }
}

void ReceiveRun::OnRun(size_t c, const Status& s) {
  --in_flight_;
  if (!s.ok() && run_error_[c].ok()) run_error_[c] = s;
  if (--pending_runs_[c] > 0) return;
  --chunks_in_flight_;
  if (failed_) return MaybeFinish();
  const InChunk& chunk = r_.c->in_chunks[c];
  const InStep& step = r_.c->in_steps[chunk.in_step];
  const std::string what =
      r_.StepName(step.step) + " chunk " + std::to_string(chunk.k) + " from " + From(c).ToString();
  if (!run_error_[c].ok()) {
    if (Fatal(run_error_[c], Conn(From(c)))) {
      // The rank read from lost mid-chunk: the chunk and the rest of its step come from upstream
      // of it (unless the step went there already).
      if (via_[c] < level_[chunk.in_step] || Detour(chunk.in_step)) {
        --attempts_[c];
        ready_.push({0, 0, false, c});
        Issue();
        return MaybeFinish();
      }
      return Fail(run_error_[c].WithContext(what));
    }
    ++stats_.errors_retried;
    window_.OnLost();  // a lost or refused Get: the path is full
    return Retry(c, run_error_[c], what);
  }
  const auto now = Clock::now();
  window_.OnCompleted(now - issued_at_[c]);
  const uint64_t frame = FrameBytes(c);
  stats_.yields += pacer_.OnCompleted(frame > 0 ? frame : chunk.bytes, issued_at_[c], now) ? 1 : 0;
  std::byte* copy = r_.at(r_.c->mine->CopyOffset(staging_));
  if (frame > 0) {  // into the chunk's runs, in piece order
    frame_scratch_.resize(chunk.bytes);
    Status unpacked = kernels::ZstdDecompress(
        std::span<const std::byte>(copy + step.my_slots + chunk.k * r_.c->slot_bytes, frame), frame_scratch_);
    if (!unpacked.ok()) {
      ++stats_.corrupt_refetched;
      return Retry(c, unpacked, what);
    }
    uint64_t at = 0;
    for (uint32_t i = chunk.run_begin; i < chunk.run_end; ++i) {
      const Run& run = r_.c->in_runs[i];
      std::memcpy(copy + run.to, frame_scratch_.data() + at, run.length);
      at += run.length;
    }
  }
  if (r_.c->direct_chunks[c]) return OnDirectRun(c, what);
  const uint64_t got = HashRuns(copy, r_.c->in_runs, chunk.run_begin, chunk.run_end, &Run::to);
  if (got != ExpectedHash(c)) {
    ++stats_.corrupt_refetched;
    return Retry(c, DataLoss("hash mismatch"), what);
  }
  ConvertChunk(r_, c, staging_);  // a chunk landed unconverted: into the shard, checked bytes only
  stats_.frames += frame > 0;
  stats_.frame_bytes += frame;
  CountFetched(c);
  Verified(c);
  ToDevice({c}, /*kept=*/false);
  Issue();
  MaybeFinish();
}

void ReceiveRun::OnDirectRun(size_t c, std::string what) {
  ++in_flight_;
  auto self = shared_from_this();
  r_.direct_verifier->Submit([self, c, what = std::move(what)]() mutable {
    Result<uint64_t> got = self->abandoned_.load(std::memory_order_acquire)
                               ? Result<uint64_t>(uint64_t{0})
                               : HashOnDevice(self->r_, self->staging_, c);
    self->r_.loop->Post([self, c, what = std::move(what), got = std::move(got)](Transport&) {
      --self->in_flight_;
      self->OnDirectHashed(c, what, got);
    });
  });
}

void ReceiveRun::OnDirectHashed(size_t c, const std::string& what, const Result<uint64_t>& got) {
  if (failed_) return MaybeFinish();
  if (!got.ok())
    return Fail(got.status().WithContext("verifying " + what + " on " + r_.options.device->name()));
  if (*got != ExpectedHash(c)) {
    ++stats_.corrupt_refetched;
    return Retry(c, DataLoss("hash mismatch on " + r_.options.device->name()), what);
  }
  stats_.device_direct_bytes += r_.c->in_chunks[c].bytes;
  CountFetched(c);
  Verified(c);
  Issue();
  MaybeFinish();
}

void ReceiveRun::CountFetched(size_t c) {
  const InChunk& chunk = r_.c->in_chunks[c];
  ++stats_.chunks;
  stats_.bytes += chunk.bytes;
  if (From(c).side == PlanSide::kDestination) stats_.peer_bytes += chunk.bytes;
  // A root step read at a replica level: its source was lost.
  if (r_.c->in_steps[chunk.in_step].after < 0 && via_[c] > 0) stats_.refetched_replica_bytes += chunk.bytes;
}

void ReceiveRun::Verified(size_t c) {
  const InChunk& chunk = r_.c->in_chunks[c];
  const InStep& step = r_.c->in_steps[chunk.in_step];
  verified_[c] = 1;
  ++verified_count_;
  stats_.source_device_bytes += from_source_device_[c];
  if (step.my_counter >= 0) {  // advance the verified prefix others poll
    uint32_t& p = prefix_[chunk.in_step];
    while (p < step.chunks && verified_[step.first_chunk + p]) ++p;
    StoreCounter(r_.at(static_cast<uint64_t>(step.my_counter)), EncodeCounter(v_, staging_, p));
  }
}

void ReceiveRun::Retry(size_t c, const Status& why, const std::string& what) {
  if (attempts_[c] >= r_.options.max_attempts)
    return Fail(Status(why.code(),
                       what + ": " + why.message() + " after " + std::to_string(attempts_[c]) + " attempts"));
  auto delay =
      std::min(r_.options.backoff_max, r_.options.backoff_initial * (1 << std::min(attempts_[c] - 1, 16)));
  auto self = shared_from_this();
  r_.loop->PostAfter(delay, [self, c](Transport&) {
    if (self->failed_) return self->MaybeFinish();
    self->ready_.push({0, 0, false, c});
    self->Issue();
  });
  Issue();
}

}  // namespace plan_rank_internal

}  // namespace weightport
