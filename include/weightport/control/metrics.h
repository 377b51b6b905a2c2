// Engine metrics: a registry of counters and gauges, rendered in the Prometheus text exposition
// format 0.0.4 (metrics_server.h serves it on GET /metrics).
//
// Thread-safety: every Metrics method may be called from any thread at any time; one mutex guards
// the registry (the engine updates metrics per chunk or per request, not per byte).
//
// Invalid updates never fail loudly: an Add or Set whose metric name or label names do not match
// the Prometheus grammar, that repeats a label name, that conflicts with the family's type, or that
// adds a negative or NaN delta to a counter is dropped and counted in the counter
// `weightport_metrics_invalid_total` (created on the first such update).
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "weightport/core/status.h"
#include "weightport/core/thread_annotations.h"

namespace weightport {

// Label (name, value) pairs. The order given is the order rendered; two label lists with the same
// pairs in a different order name the same series (the first order seen is kept).
using MetricLabels = std::vector<std::pair<std::string, std::string>>;

enum class MetricType { kCounter, kGauge };

inline constexpr std::string_view kMetricsInvalidTotal = "weightport_metrics_invalid_total";

// [a-zA-Z_:][a-zA-Z0-9_:]*
bool IsValidMetricName(std::string_view name);
// [a-zA-Z_][a-zA-Z0-9_]*
bool IsValidMetricLabelName(std::string_view name);
// A sample value as rendered: integers without exponent or decimals (12345678901), other finite
// values in the shortest form that round-trips, NaN, +Inf, -Inf.
std::string FormatMetricValue(double value);

class Metrics {
 public:
  Metrics() = default;
  Metrics(const Metrics&) = delete;
  Metrics& operator=(const Metrics&) = delete;

  // Declares a metric family (counters should end in _total; not enforced). Re-describing with the
  // same type is a no-op, except that it fills in the help of a family first created by Add/Set.
  // InvalidArgument for a bad name or a different type.
  Status Describe(std::string_view name, MetricType type, std::string_view help);

  // Counter: adds delta (>= 0) to the series (name, labels). An undescribed name becomes a counter
  // with empty help. On a gauge, Add adds any finite delta (in-flight counts go up and down).
  void Add(std::string_view name, const MetricLabels& labels, double delta = 1);
  // Gauge: sets the series' value (any value, NaN and infinities included). An undescribed name
  // becomes a gauge. Set on a counter is an invalid update.
  void Set(std::string_view name, const MetricLabels& labels, double value);
  // Current value; 0 when the series (or family) does not exist.
  double Value(std::string_view name, const MetricLabels& labels) const;

  // Text exposition format 0.0.4. Families sorted by name, each with "# HELP" (omitted when the help
  // is empty) and "# TYPE", then its series sorted by label (name, value) pairs. Label values escape
  // backslash, double quote and newline; help escapes backslash and newline. A described family
  // without series renders its HELP/TYPE lines only.
  std::string RenderPrometheus() const;

 private:
  struct Series {
    MetricLabels labels;  // as first given
    double value = 0;
  };
  struct Family {
    MetricType type;
    std::string help;
    std::map<MetricLabels, Series> series;  // keyed by labels sorted by name
  };
  // Finds or creates the series for an update; nullptr (after counting) when the update is invalid.
  Series* SeriesForUpdateLocked(std::string_view name, const MetricLabels& labels, MetricType type,
                                bool type_must_match) REQUIRES(mu_);
  void CountInvalidLocked() REQUIRES(mu_);

  mutable Mutex mu_;
  std::map<std::string, Family, std::less<>> families_ GUARDED_BY(mu_);
};

}  // namespace weightport
