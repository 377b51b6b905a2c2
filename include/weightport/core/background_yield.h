// Background priority for a transfer: it runs free while it has its path to itself and, while other
// traffic shares the path, holds itself to a small share of the path's rate. A weight sync then
// yields to a training job's traffic only while that traffic is there; a fixed cap (RateCap) yields
// all the time, and costs the sync its speed when the link is idle.
//
// The sign of other traffic is how fast the transfer's own bytes are served. A request queued
// behind the previous one (FIFO on one connection) is served from that one's completion, otherwise
// from its issue; with the path to itself the transfer's bytes leave at the path's rate, and when
// other flows share the bottleneck they leave at a share of it (TCP's fair share: half, or less).
// The median service time per byte of its last three queued requests is compared with the least
// such median seen (the base); so the transfer needs two requests in flight to see anything:
//   - free: a median above `slowdown` x the base (two slow requests of three): it yields, holding
//     to `share` of the base rate (one request at a time on a slow link);
//   - yielding: each request now goes alone, so its time from issue is its service time; one served
//     within `resume` x the least time of a request that went alone (whose time holds the round
//     trip too: the first of each window is one) says the others have gone: it runs free again.
// It keeps only as many requests in flight as keep the path busy (window()), since those in flight
// when other traffic starts cannot be called back.
// Like LEDBAT (RFC 6817) it measures against the best it has seen, so a path that is busy from the
// first request on looks idle: it yields to traffic that starts after it, not to traffic it finds.
// A request whose service includes its own issue delay (a slow receiver) reads as slow too, so
// background priority is meant for paths where the network, not the host, is the limit.
//
// Thread-safety: none; one owner (the loop thread of the transfer). Successive transfers over the
// same path may share one, so that the base carries over.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>

namespace weightport {

class BackgroundYield {
 public:
  using Clock = std::chrono::steady_clock;

  struct Options {
    double slowdown = 1.5;  // free -> yielding: the median of three above this x the base
    double resume = 1.25;   // yielding -> free: a request served within this x the base
    double share = 0.05;    // while yielding: this fraction of the base rate
  };

  BackgroundYield() : BackgroundYield(Options{}) {}
  explicit BackgroundYield(Options options) : options_(options) {}

  // A request of `bytes` issued at `issued` completed at `now`.
  void OnCompleted(uint64_t bytes, Clock::time_point issued, Clock::time_point now);

  // The requests to keep in flight (at most `most`): enough to keep the path busy, and no more, so
  // that what is in flight when other traffic starts is little (it cannot be called back). Before
  // it knows the path: kFirstWindow.
  size_t window(size_t most) const;
  static constexpr size_t kFirstWindow = 4;

  bool yielding() const { return yielding_; }
  // While yielding: the rate to hold to, bytes per second; 0 otherwise.
  double rate() const;
  // The best rate its requests were served at, bytes per second (0 before the first).
  double base_rate() const { return base_ > 0 ? 1.0 / base_ : 0.0; }
  uint64_t yields() const { return yields_; }  // times it began to yield

 private:
  Options options_;
  bool yielding_ = false;
  Clock::time_point last_done_{};
  double recent_[3] = {};      // the last queued requests' service times, seconds per byte
  uint64_t recent_count_ = 0;  // queued requests seen since the start, or since it last resumed
  double base_ = 0;            // the least median of three seen, seconds per byte
  double alone_base_ = 0;      // the least time per byte of a request not queued behind another
  uint64_t yields_ = 0;
};

}  // namespace weightport
