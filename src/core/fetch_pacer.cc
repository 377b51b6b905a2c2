#include "weightport/core/fetch_pacer.h"

namespace weightport {

std::optional<std::chrono::milliseconds> FetchPacer::Admit(uint64_t bytes, Clock::time_point now) {
  if (background_ && !background_->yielding())
    yield_cap_ = RateCap();
  else if (background_ && !yield_cap_.capped())
    yield_cap_ = RateCap(background_->rate(), now);
  auto wait = cap_.Wait(bytes, now);
  if (const auto yield_wait = yield_cap_.Wait(bytes, now); yield_wait && (!wait || *yield_wait > *wait))
    wait = yield_wait;
  if (!wait) {
    cap_.Count(bytes);
    yield_cap_.Count(bytes);
  }
  return wait;
}

bool FetchPacer::OnCompleted(uint64_t bytes, Clock::time_point issued, Clock::time_point now) {
  if (!background_) return false;
  const bool was = background_->yielding();
  background_->OnCompleted(bytes, issued, now);
  return !was && background_->yielding();
}

}  // namespace weightport
