#include "weightport/engine/session/store_health.h"

#include "weightport/core/printable.h"

namespace weightport {

StoreHealth::StoreHealth(std::string store, Metrics* metrics, std::function<void(std::string)> log,
                         std::chrono::milliseconds log_interval)
    : store_(std::move(store)), metrics_(metrics), log_(std::move(log)), log_interval_(log_interval) {
  if (metrics_ == nullptr) return;
  metrics_
      ->Describe(kStoreReachableMetric, MetricType::kGauge,
                 "1 when the store's last answer came, 0 after a failure")
      .IgnoreError();  // constant, valid names
  metrics_->Describe(kStoreErrorsMetric, MetricType::kCounter, "Calls to the store that failed")
      .IgnoreError();
  metrics_->Describe(kLeadingMetric, MetricType::kGauge, "1 while this coordinator leads its session")
      .IgnoreError();
  metrics_->Set(kStoreReachableMetric, {}, 0);
  metrics_->Add(kStoreErrorsMetric, {}, 0);
  metrics_->Set(kLeadingMetric, {}, 0);
}

void StoreHealth::Failed(std::string_view what, const Status& why) {
  std::string line;
  {
    MutexLock lock(mu_);
    state_.reachable = false;
    ++state_.errors;
    state_.last_error = why.ToString();
    ++unlogged_;
    const auto now = Clock::now();
    if (now >= next_log_) {
      line = "coordinator: store " + store_ + " " + std::string(what) + ": " + Printable(why.ToString(), 300);
      if (unlogged_ > 1) line += " (" + std::to_string(unlogged_) + " failures since the last report)";
      line += "; retrying";
      unlogged_ = 0;
      next_log_ = now + log_interval_;
    }
  }
  if (metrics_ != nullptr) {
    metrics_->Set(kStoreReachableMetric, {}, 0);
    metrics_->Add(kStoreErrorsMetric, {}, 1);
  }
  if (!line.empty() && log_) log_(line);
}

void StoreHealth::Answered() {
  bool recovered = false;
  {
    MutexLock lock(mu_);
    recovered = !state_.reachable && state_.errors > 0;
    state_.reachable = true;
    unlogged_ = 0;
    next_log_ = {};  // the next failure is news
  }
  if (metrics_ != nullptr) metrics_->Set(kStoreReachableMetric, {}, 1);
  if (recovered && log_) log_("coordinator: store " + store_ + " answers again");
}

void StoreHealth::SetLeading(bool leading) {
  if (metrics_ != nullptr) metrics_->Set(kLeadingMetric, {}, leading ? 1 : 0);
}

StoreHealthState StoreHealth::state() const {
  MutexLock lock(mu_);
  return state_;
}

}  // namespace weightport
