// A byte-rate cap over one transfer, as a token bucket: by time t after the start, at most
// rate * t bytes, plus one request of burst, have been issued. A transfer asks before each request
// and, when told to wait, asks again after the wait (from a timer on its loop, not by blocking).
//
// Thread-safety: none; one owner (the loop thread of the transfer).
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>

namespace weightport {

class RateCap {
 public:
  using Clock = std::chrono::steady_clock;

  RateCap() = default;  // no cap
  // bytes_per_s <= 0: no cap.
  RateCap(double bytes_per_s, Clock::time_point start) : rate_(bytes_per_s), start_(start) {}

  bool capped() const { return rate_ > 0; }

  // Whether a request of `bytes` may go at `now`: nullopt when it may (its bytes now count as
  // issued), else how long to wait before asking again (at least 1 ms; nothing counted).
  std::optional<std::chrono::milliseconds> Admit(uint64_t bytes, Clock::time_point now) {
    auto wait = Wait(bytes, now);
    if (!wait) Count(bytes);
    return wait;
  }
  // Admit in two steps, for a request that must pass more than one cap: how long it would wait
  // (nothing counted), then, once it goes, its bytes counted.
  std::optional<std::chrono::milliseconds> Wait(uint64_t bytes, Clock::time_point now) const {
    if (rate_ <= 0) return std::nullopt;
    const double request = static_cast<double>(bytes);
    const double allowed = rate_ * std::chrono::duration<double>(now - start_).count() + request;
    const double after = static_cast<double>(issued_) + request;
    if (after <= allowed) return std::nullopt;
    return std::chrono::milliseconds(static_cast<int64_t>((after - allowed) / rate_ * 1e3) + 1);
  }
  void Count(uint64_t bytes) { issued_ += bytes; }

 private:
  double rate_ = 0;
  Clock::time_point start_{};
  uint64_t issued_ = 0;
};

}  // namespace weightport
