#include "weightport/control/metrics.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <optional>

namespace weightport {
namespace {

bool IsAlpha(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
bool IsDigit(char c) { return c >= '0' && c <= '9'; }

// The series key: labels sorted by name, so the same pairs in another order are the same series.
// nullopt when the metric name or a label name is invalid, or a label name repeats.
std::optional<MetricLabels> SeriesKey(std::string_view name, const MetricLabels& labels) {
  if (!IsValidMetricName(name)) return std::nullopt;
  for (const auto& label : labels) {
    if (!IsValidMetricLabelName(label.first)) return std::nullopt;
  }
  MetricLabels key = labels;
  std::sort(key.begin(), key.end());
  for (size_t i = 1; i < key.size(); ++i) {
    if (key[i].first == key[i - 1].first) return std::nullopt;
  }
  return key;
}

void AppendEscaped(std::string& out, std::string_view text, bool escape_quote) {
  for (char c : text) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '"' && escape_quote) {
      out += "\\\"";
    } else {
      out += c;
    }
  }
}

}  // namespace

bool IsValidMetricName(std::string_view name) {
  if (name.empty() || !(IsAlpha(name[0]) || name[0] == ':')) return false;
  return std::all_of(name.begin(), name.end(), [](char c) { return IsAlpha(c) || IsDigit(c) || c == ':'; });
}

bool IsValidMetricLabelName(std::string_view name) {
  if (name.empty() || !IsAlpha(name[0])) return false;
  return std::all_of(name.begin(), name.end(), [](char c) { return IsAlpha(c) || IsDigit(c); });
}

std::string FormatMetricValue(double value) {
  if (std::isnan(value)) return "NaN";
  if (std::isinf(value)) return value > 0 ? "+Inf" : "-Inf";
  if (value == 0) return "0";  // also for -0
  char buf[64];
  std::to_chars_result r;
  // Integral values print as plain digits (fixed notation, shortest round-trip, so no ".0");
  // beyond 1e21 plain digits grow long for no precision, so those use the shortest form too.
  if (value == std::trunc(value) && std::fabs(value) < 1e21) {
    r = std::to_chars(buf, buf + sizeof(buf), value, std::chars_format::fixed);
  } else {
    r = std::to_chars(buf, buf + sizeof(buf), value);
  }
  return std::string(buf, r.ptr);
}

Status Metrics::Describe(std::string_view name, MetricType type, std::string_view help) {
  if (!IsValidMetricName(name)) {
    return InvalidArgument("metric name '" + std::string(name) + "' does not match [a-zA-Z_:][a-zA-Z0-9_:]*");
  }
  MutexLock lock(mu_);
  auto it = families_.find(name);
  if (it == families_.end()) {
    families_.emplace(std::string(name), Family{type, std::string(help), {}});
    return Status::Ok();
  }
  if (it->second.type != type) {
    auto type_name = [](MetricType t) { return t == MetricType::kCounter ? "counter" : "gauge"; };
    return InvalidArgument("metric '" + std::string(name) + "' is a " + type_name(it->second.type) +
                           "; cannot describe it as a " + type_name(type));
  }
  if (it->second.help.empty()) it->second.help = std::string(help);
  return Status::Ok();
}

void Metrics::Add(std::string_view name, const MetricLabels& labels, double delta) {
  std::optional<MetricLabels> key = SeriesKey(name, labels);  // outside the lock: it allocates
  MutexLock lock(mu_);
  if (!key) return CountInvalidLocked();
  auto it = families_.find(name);
  const MetricType type = it == families_.end() ? MetricType::kCounter : it->second.type;
  const bool valid = type == MetricType::kCounter ? std::isfinite(delta) && delta >= 0 : std::isfinite(delta);
  if (!valid) return CountInvalidLocked();
  if (it == families_.end()) it = families_.emplace(std::string(name), Family{type, "", {}}).first;
  auto [series, inserted] = it->second.series.try_emplace(std::move(*key));
  if (inserted) series->second.labels = labels;
  series->second.value += delta;
}

void Metrics::Set(std::string_view name, const MetricLabels& labels, double value) {
  std::optional<MetricLabels> key = SeriesKey(name, labels);
  MutexLock lock(mu_);
  if (!key) return CountInvalidLocked();
  auto it = families_.find(name);
  if (it == families_.end()) {
    it = families_.emplace(std::string(name), Family{MetricType::kGauge, "", {}}).first;
  } else if (it->second.type != MetricType::kGauge) {
    return CountInvalidLocked();  // a counter only goes up, by Add
  }
  auto [series, inserted] = it->second.series.try_emplace(std::move(*key));
  if (inserted) series->second.labels = labels;
  series->second.value = value;
}

double Metrics::Value(std::string_view name, const MetricLabels& labels) const {
  std::optional<MetricLabels> key = SeriesKey(name, labels);
  if (!key) return 0;
  MutexLock lock(mu_);
  auto it = families_.find(name);
  if (it == families_.end()) return 0;
  auto series = it->second.series.find(*key);
  return series == it->second.series.end() ? 0 : series->second.value;
}

void Metrics::CountInvalidLocked() {
  auto it = families_.find(kMetricsInvalidTotal);
  if (it == families_.end()) {
    Family family{
        MetricType::kCounter, "Metric updates dropped for an invalid name, label, type or value.", {}};
    it = families_.emplace(std::string(kMetricsInvalidTotal), std::move(family)).first;
  }
  if (it->second.type != MetricType::kCounter) return;  // someone made it a gauge; nothing to count in
  it->second.series[MetricLabels{}].value += 1;
}

std::string Metrics::RenderPrometheus() const {
  std::string out;
  MutexLock lock(mu_);
  for (const auto& [name, family] : families_) {
    if (!family.help.empty()) {
      out += "# HELP " + name + " ";
      AppendEscaped(out, family.help, /*escape_quote=*/false);
      out += '\n';
    }
    out += "# TYPE " + name + (family.type == MetricType::kCounter ? " counter\n" : " gauge\n");
    for (const auto& [key, series] : family.series) {
      out += name;
      if (!series.labels.empty()) {
        out += '{';
        for (size_t i = 0; i < series.labels.size(); ++i) {
          if (i > 0) out += ',';
          out += series.labels[i].first + "=\"";
          AppendEscaped(out, series.labels[i].second, /*escape_quote=*/true);
          out += '"';
        }
        out += '}';
      }
      out += ' ';
      out += FormatMetricValue(series.value);
      out += '\n';
    }
  }
  return out;
}

}  // namespace weightport
