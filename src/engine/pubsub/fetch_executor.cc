#include "weightport/engine/pubsub/fetch_executor.h"

#include <algorithm>

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
      cap_(options.max_bytes_per_s, start_) {
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
  self->keep_alive_ = self;
  // Watchdog for the whole fetch: a peer that stops answering must not hang the update.
  std::weak_ptr<FetchExecutor> weak = self;
  loop.PostAfter(options.timeout, [weak](Transport&) {
    if (auto s = weak.lock(); s && !s->reported_)
      s->Fail(Timeout("fetch from " + s->connection_->peer() + " did not finish within " +
                      std::to_string(s->options_.timeout.count()) + " ms (" + std::to_string(s->verified_) +
                      " of " + std::to_string(s->chunks_.size()) + " chunks verified)"));
  });
  self->Issue();
  self->MaybeFinish();  // an empty list finishes at once
  return self;
}

void FetchExecutor::Cancel(const std::string& reason) { Fail(Cancelled("fetch cancelled: " + reason)); }

void FetchExecutor::Issue() {
  while (!failed_ && in_flight_ < window_.size() && !queue_.empty()) {
    const size_t index = queue_.front();
    const ChunkFetch& c = chunks_[index];
    const auto now = std::chrono::steady_clock::now();
    if (const auto wait = cap_.Admit(c.length, now)) {
      if (cap_timer_) return;
      cap_timer_ = true;
      ++stats_.capped_waits;
      loop_.PostAfter(*wait, [self = shared_from_this()](Transport&) {
        self->cap_timer_ = false;
        self->Issue();
        self->MaybeFinish();
      });
      return;
    }
    queue_.pop_front();
    issued_at_[index] = now;
    ++in_flight_;
    ++attempts_[index];
    auto self = shared_from_this();
    connection_->Get(local_, c.local_offset, remote_, c.remote_offset, c.length,
                     [self, index](const Status& s) { self->OnComplete(index, s); });
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
  const auto took = std::chrono::steady_clock::now() - issued_at_[index];
  window_.OnCompleted(took);
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
  if (options_.verify && options_.verifier) --hashing_;
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
  DoneFn done = std::move(done_);
  auto keep = std::move(keep_alive_);  // released when this returns
  done(failed_ ? failure_ : Status::Ok(), stats_);
}

}  // namespace weightport
