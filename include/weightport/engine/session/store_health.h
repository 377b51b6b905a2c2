// What a coordinator tells of its store (etcd): a failed call is logged at once, then at most once
// per interval with the failures in between counted (a standby may wait out an outage of hours),
// and the store's state is kept in the metrics, so an unreachable or broken store is never silent.
//
// Metrics (when a registry is given): weightport_coordinator_store_reachable (gauge, 1 after an
// answer, 0 after a failure), weightport_coordinator_store_errors_total (counter),
// weightport_coordinator_leading (gauge).
//
// Thread-safety: every method may be called from any thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <string>

#include "weightport/control/metrics.h"
#include "weightport/core/status.h"
#include "weightport/core/thread_annotations.h"

namespace weightport {

inline constexpr std::string_view kStoreReachableMetric = "weightport_coordinator_store_reachable";
inline constexpr std::string_view kStoreErrorsMetric = "weightport_coordinator_store_errors_total";
inline constexpr std::string_view kLeadingMetric = "weightport_coordinator_leading";

struct StoreHealthState {
  bool reachable = false;  // the last call was answered
  uint64_t errors = 0;     // failed calls so far
  std::string last_error;  // the last failure's message
};

class StoreHealth {
 public:
  // `store` names it in log lines; `metrics` and `log` may be null.
  StoreHealth(std::string store, Metrics* metrics, std::function<void(std::string)> log,
              std::chrono::milliseconds log_interval = std::chrono::seconds(5));

  // A call to the store failed with `why` (`what`: what was being done, "campaigning").
  void Failed(std::string_view what, const Status& why) EXCLUDES(mu_);
  // A call was answered; after failures, logs that the store answers again.
  void Answered() EXCLUDES(mu_);
  void SetLeading(bool leading);
  StoreHealthState state() const EXCLUDES(mu_);

 private:
  using Clock = std::chrono::steady_clock;
  const std::string store_;
  Metrics* const metrics_;
  const std::function<void(std::string)> log_;
  const std::chrono::milliseconds log_interval_;
  mutable Mutex mu_;
  StoreHealthState state_ GUARDED_BY(mu_);
  Clock::time_point next_log_ GUARDED_BY(mu_){};
  uint64_t unlogged_ GUARDED_BY(mu_) = 0;  // failures since the last line
};

}  // namespace weightport
