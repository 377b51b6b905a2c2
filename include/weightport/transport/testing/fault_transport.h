// Fault injection: a Transport decorator that drops, delays, corrupts and fails operations, and
// loses peers, on purpose, as a FaultPlan says. It wraps any Transport (fake or UCX) and its
// Connections; regions and keys are the inner transport's own.
//
// Faults (each applies to the operation kinds its trigger names; Flush only to "kill peer"):
//   drop     the operation completes OK but moves nothing (Put: not performed; Get: destination
//            untouched; Send: never delivered). Bounds are not checked for a dropped operation.
//   delay    the completion is reported D ms after it was issued (or when the inner operation
//            completes, if later), from a later Progress().
//   corrupt  one byte is flipped (one bit of it): Put: the inner put is performed, flushed, then that
//            byte is overwritten at the peer from a 1-byte scratch region the decorator registers;
//            Get: the local destination byte is flipped after the inner get completes; Send: one
//            byte of the message is flipped before sending. Zero-length operations are not corrupted.
//   fail     operations beyond the first N fail with kIoError naming the peer; nothing moves.
//   kill     connections to the peer behave as lost: pending and new operations (Flush included)
//            fail with kUnavailable naming the peer, and healthy() turns false.
// A Flush on a decorated connection waits until every operation issued before it on that
// connection has completed (delayed and corrupted puts included), then flushes the inner one.
//
// Thread-safety: FaultPlan is thread-safe and may be shared by several decorated transports and
// changed by a test while they run (a kill takes effect at the owner's next Progress() or
// operation). The decorated Transport follows the Transport threading model of transport.h.
// Determinism: with a fixed seed, the same sequence of operations draws the same faults.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <random>
#include <set>
#include <string>

#include "weightport/core/status.h"
#include "weightport/core/thread_annotations.h"
#include "weightport/transport/transport.h"

namespace weightport {

// Operation kinds, as a bit mask.
enum FaultOps : uint32_t { kFaultPut = 1, kFaultGet = 2, kFaultSend = 4, kFaultData = kFaultPut | kFaultGet };

// When a fault fires: on the nth matching operation counted from when the trigger was set, and/or
// independently on each matching operation with a probability.
struct FaultTrigger {
  uint64_t nth = 0;           // 1-based; 0: not by count
  double probability = 0.0;   // 0: never by chance; 1: always
  uint32_t ops = kFaultData;  // FaultOps the trigger applies to
};

// Faults that fired, by kind.
struct FaultStats {
  uint64_t ops = 0;  // Put, Get and Send operations the plan was asked about
  uint64_t dropped = 0;
  uint64_t delayed = 0;
  uint64_t corrupted = 0;
  uint64_t failed = 0;  // by fail-after-N
  uint64_t killed = 0;  // operations failed because their peer was killed
};

class FaultPlan {
 public:
  explicit FaultPlan(uint64_t seed = 1) : rng_(seed) {}

  void set_drop(FaultTrigger trigger);
  void set_delay(FaultTrigger trigger, std::chrono::milliseconds delay);
  void set_corrupt(FaultTrigger trigger);
  // Operations beyond the next `n` fail with kIoError (counted from this call, over every
  // transport sharing the plan).
  void set_fail_after(uint64_t n);
  // Connections to the peer of this name (as given to Connect) behave as lost, for good.
  void KillPeer(const std::string& peer);
  void KillAllPeers();
  // No more faults from now on: triggers off, fail-after off. Kills stand; stats are kept.
  void Clear();
  FaultStats stats() const;

  // For the decorator: the faults for the next operation of kind `op` (one FaultOps bit) moving
  // `length` bytes; counted as fired.
  struct Decision {
    bool fail = false;
    bool drop = false;
    bool corrupt = false;
    std::chrono::milliseconds delay{0};
    uint64_t draw = 0;  // random bits to choose the corrupted byte and bit
  };
  Decision Next(uint32_t op, uint64_t length);
  bool killed(const std::string& peer) const;
  void CountKilled(uint64_t n);

 private:
  struct Rule {
    FaultTrigger trigger;
    uint64_t seen = 0;
  };
  bool Fires(Rule& rule, uint32_t op) REQUIRES(mu_);

  mutable Mutex mu_;
  std::mt19937_64 rng_ GUARDED_BY(mu_);
  Rule drop_ GUARDED_BY(mu_), delay_ GUARDED_BY(mu_), corrupt_ GUARDED_BY(mu_);
  std::chrono::milliseconds delay_by_ GUARDED_BY(mu_){0};
  uint64_t fail_budget_ GUARDED_BY(mu_) = UINT64_MAX;  // operations left before failures start
  std::set<std::string> killed_ GUARDED_BY(mu_);
  bool kill_all_ GUARDED_BY(mu_) = false;
  FaultStats stats_ GUARDED_BY(mu_);
};

// Wraps `inner`; every connection it makes consults `plan`.
Result<std::unique_ptr<Transport>> MakeFaultInjectingTransport(std::unique_ptr<Transport> inner,
                                                               std::shared_ptr<FaultPlan> plan);

}  // namespace weightport
