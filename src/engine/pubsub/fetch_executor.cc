#include "weightport/engine/pubsub/fetch_executor.h"

#include <algorithm>
#include <cstring>

#include "weightport/core/hash.h"

namespace weightport {

FetchExecutor::FetchExecutor(ProgressLoop& loop, std::shared_ptr<Connection> connection,
                             const MemoryRegion& local, RemoteKey remote, std::vector<ChunkFetch> chunks,
                             FetchOptions options, DoneFn done)
    : loop_(loop),
      connection_(std::move(connection)),
      local_(local),
      remote_(std::move(remote)),
      chunks_(std::move(chunks)),
      options_(options),
      done_(std::move(done)),
      attempts_(chunks_.size(), 0),
      window_(
          {.max = options.window, .delay_factor = options.delay_factor, .delay_floor = options.delay_floor}),
      issued_at_(chunks_.size()),
      start_(std::chrono::steady_clock::now()),
      pacer_(options.max_bytes_per_s, start_, options.background) {
  stats_.min_window = window_.size();
}

std::shared_ptr<FetchExecutor> FetchExecutor::Start(ProgressLoop& loop,
                                                    std::shared_ptr<Connection> connection,
                                                    const MemoryRegion& local, RemoteKey remote,
                                                    std::vector<ChunkFetch> chunks, FetchOptions options,
                                                    DoneFn done) {
  std::shared_ptr<FetchExecutor> self(new FetchExecutor(loop, std::move(connection), local, std::move(remote),
                                                        std::move(chunks), options, std::move(done)));
  for (size_t i = 0; i < self->chunks_.size(); ++i) self->queue_.push_back(i);
  if (options.direct_reads && options.verifier && !self->chunks_.empty())
    self->mapped_ = self->connection_->Map(self->remote_);
  self->direct_ = self->mapped_ != nullptr;
  // Copies from a mapped peer share no network path: background priority does not pace them.
  if (self->direct_) self->pacer_ = FetchPacer(options.max_bytes_per_s, self->start_, nullptr);
  self->keep_alive_ = self;
  // Watchdog for the whole fetch: a peer that stops answering must not hang the update.
  std::weak_ptr<FetchExecutor> weak = self;
  loop.PostAfter(options.timeout, [weak](Transport&) {
    if (auto s = weak.lock(); s && !s->reported_)
      s->Fail(Timeout("fetch from " + s->connection_->peer() + " did not finish within " +
                      std::to_string(s->options_.timeout.count()) + " ms (" + std::to_string(s->verified_) +
                      " of " + std::to_string(s->chunks_.size()) + " chunks verified)"));
  });
  // Copies are bounds-checked here, once: a Get checks its own bounds in the transport.
  if (self->direct_) {
    const uint64_t theirs = self->mapped_->size(), ours = local.size();
    auto outside = std::find_if(self->chunks_.begin(), self->chunks_.end(), [&](const ChunkFetch& c) {
      return c.remote_offset > theirs || c.length > theirs - c.remote_offset || c.local_offset > ours ||
             c.length > ours - c.local_offset;
    });
    if (outside != self->chunks_.end())
      self->Fail(OutOfRange(outside->what + " from " + self->connection_->peer() + ": [" +
                            std::to_string(outside->remote_offset) + ", +" + std::to_string(outside->length) +
                            ") lies outside the peer's region or ours"));
  }
  self->Issue();
  self->MaybeFinish();  // an empty list finishes at once
  return self;
}

void FetchExecutor::Cancel(const std::string& reason) { Fail(Cancelled("fetch cancelled: " + reason)); }

namespace {

// Copies [src, +length) to dst in pieces, hashing each piece just written while it is in cache:
// one pass over memory for the copy and its verification. True when the hash matches (or !verify).
bool CopyAndVerify(std::byte* dst, const std::byte* src, uint64_t length, bool verify, uint64_t expected) {
  constexpr uint64_t kPiece = 256 << 10;  // well inside a core's L2
  if (!verify) {
    std::memcpy(dst, src, length);
    return true;
  }
  Xxh3Stream hash;
  for (uint64_t at = 0; at < length; at += kPiece) {
    const uint64_t n = std::min(kPiece, length - at);
    std::memcpy(dst + at, src + at, n);
    hash.Update(dst + at, n);
  }
  return hash.Digest() == expected;
}

}  // namespace

bool FetchExecutor::HeldByCap(uint64_t bytes, std::chrono::steady_clock::time_point now) {
  const auto wait = pacer_.Admit(bytes, now);
  if (!wait) return false;
  if (cap_timer_) return true;
  cap_timer_ = true;
  ++stats_.capped_waits;
  loop_.PostAfter(*wait, [self = shared_from_this()](Transport&) {
    self->cap_timer_ = false;
    self->Issue();
    self->MaybeFinish();
  });
  return true;
}

void FetchExecutor::Issue() {
  if (direct_) return IssueDirect();
  const size_t window = pacer_.Window(window_.size());
  while (!failed_ && in_flight_ < window && !queue_.empty()) {
    const size_t index = queue_.front();
    const ChunkFetch& c = chunks_[index];
    const auto now = std::chrono::steady_clock::now();
    if (HeldByCap(c.length, now)) return;
    queue_.pop_front();
    issued_at_[index] = now;
    ++in_flight_;
    ++attempts_[index];
    auto self = shared_from_this();
    connection_->Get(local_, c.local_offset, remote_, c.remote_offset, c.length,
                     [self, index](const Status& s) { self->OnComplete(index, s); });
  }
}

// The mapped path: the verifier's threads take the chunks a batch at a time (a few MiB: one task
// and one report to the loop per batch, not per chunk, which on a busy machine kept the loop thread
// waking thousands of times a second beside the copies); each copies and hashes its chunks and posts
// the verdicts back. A chunk that does not match is copied again after a backoff, like a corrupt
// Get. No transport op is involved, so there is no window to adapt: the threads are the limit.
void FetchExecutor::IssueDirect() {
  constexpr size_t kBatchChunks = 64;
  constexpr uint64_t kBatchBytes = 8 << 20;
  const size_t depth = 2 * options_.verifier->size();
  // Under a cap each chunk is admitted on its own, as a Get is: a batch would pass in one go.
  const size_t most = options_.max_bytes_per_s > 0 ? 1 : kBatchChunks;
  while (!failed_ && in_flight_ < depth && !queue_.empty()) {
    if (!connection_->healthy())
      return Fail(Unavailable("fetch from " + connection_->peer() + ": the peer was lost"));
    size_t count = 0;
    uint64_t bytes = 0;
    while (count < queue_.size() && count < most && bytes < kBatchBytes)
      bytes += chunks_[queue_[count++]].length;
    if (HeldByCap(bytes, std::chrono::steady_clock::now())) return;
    std::vector<size_t> batch(queue_.begin(), queue_.begin() + static_cast<std::ptrdiff_t>(count));
    queue_.erase(queue_.begin(), queue_.begin() + static_cast<std::ptrdiff_t>(count));
    for (size_t index : batch) ++attempts_[index];
    ++in_flight_;
    stats_.direct_chunks += batch.size();
    options_.verifier->Submit([self = shared_from_this(), batch = std::move(batch), mapped = mapped_.get(),
                               local = local_.data()]() mutable {
      std::vector<char> match(batch.size());
      for (size_t k = 0; k < batch.size(); ++k) {
        const ChunkFetch& c = self->chunks_[batch[k]];
        mapped->Prepare(c.remote_offset, c.length);
        match[k] = CopyAndVerify(local + c.local_offset, mapped->data() + c.remote_offset, c.length,
                                 self->options_.verify, c.xxh3);
      }
      ProgressLoop& loop = self->loop_;
      loop.Post([self = std::move(self), batch = std::move(batch), match = std::move(match)](Transport&) {
        --self->in_flight_;
        for (size_t k = 0; k < batch.size(); ++k) self->OnVerified(batch[k], match[k] != 0);
      });
    });
  }
}

void FetchExecutor::OnComplete(size_t index, const Status& status) {
  --in_flight_;
  const ChunkFetch& c = chunks_[index];
  if (failed_) return MaybeFinish();
  if (!status.ok()) {
    // A lost or closed peer will not come back within this fetch: fail now, naming it.
    if (status.code() == StatusCode::kUnavailable || status.code() == StatusCode::kCancelled ||
        status.code() == StatusCode::kFailedPrecondition || status.code() == StatusCode::kInvalidArgument ||
        status.code() == StatusCode::kOutOfRange || !connection_->healthy())
      return Fail(status.WithContext(c.what + " from " + connection_->peer()));
    ++stats_.errors_retried;
    window_.OnLost();  // a lost or refused Get: the path is full
    return Retry(index, status);
  }
  const auto now = std::chrono::steady_clock::now();
  window_.OnCompleted(now - issued_at_[index]);
  stats_.yields += pacer_.OnCompleted(c.length, issued_at_[index], now) ? 1 : 0;
  if (options_.verify && options_.verifier) {
    ++hashing_;
    // The task hands its reference on to the loop, which normally drops the last one.
    options_.verifier->Submit([self = shared_from_this(), index, data = local_.data() + c.local_offset,
                               length = c.length, expected = c.xxh3]() mutable {
      const bool match = Xxh3(data, length) == expected;
      ProgressLoop& loop = self->loop_;
      loop.Post([self = std::move(self), index, match](Transport&) { self->OnVerified(index, match); });
    });
    return Issue();
  }
  OnVerified(index, !options_.verify || Xxh3(local_.data() + c.local_offset, c.length) == c.xxh3);
}

void FetchExecutor::OnVerified(size_t index, bool match) {
  if (options_.verify && options_.verifier && !direct_) --hashing_;
  const ChunkFetch& c = chunks_[index];
  if (failed_) return MaybeFinish();
  if (!match) {
    ++stats_.corrupt_refetched;
    return Retry(index, DataLoss("hash mismatch"));
  }
  ++verified_;
  ++stats_.chunks;
  stats_.bytes += c.length;
  if (verified_ == chunks_.size()) return MaybeFinish();
  Issue();
}

void FetchExecutor::Retry(size_t index, const Status& why) {
  const ChunkFetch& c = chunks_[index];
  if (attempts_[index] >= options_.max_attempts)
    return Fail(Status(why.code() == StatusCode::kDataLoss ? StatusCode::kDataLoss : why.code(),
                       c.what + " from " + connection_->peer() + ": " + why.message() + " after " +
                           std::to_string(attempts_[index]) + " attempts"));
  auto delay = options_.backoff_initial * (1 << std::min(attempts_[index] - 1, 16));
  delay = std::min(delay, options_.backoff_max);
  loop_.PostAfter(delay, [self = shared_from_this(), index](Transport&) {
    if (self->failed_) return;
    self->queue_.push_back(index);
    self->Issue();
  });
  Issue();  // other chunks keep flowing meanwhile
}

void FetchExecutor::Fail(Status status) {
  if (failed_) return;
  failed_ = true;
  failure_ = std::move(status);
  queue_.clear();
  MaybeFinish();
}

void FetchExecutor::MaybeFinish() {
  if (reported_ || in_flight_ > 0 || hashing_ > 0) return;
  if (!failed_ && verified_ < chunks_.size()) return;
  reported_ = true;
  stats_.elapsed = std::chrono::steady_clock::now() - start_;
  stats_.congestion_events = window_.loss_cuts();
  stats_.delay_backoffs = window_.delay_cuts();
  stats_.min_window = window_.min_size();
  mapped_.reset();
  DoneFn done = std::move(done_);
  auto keep = std::move(keep_alive_);  // released when this returns
  done(failed_ ? failure_ : Status::Ok(), stats_);
}

}  // namespace weightport
