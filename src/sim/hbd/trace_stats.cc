#include "weightport/sim/hbd/trace_stats.h"

#include <algorithm>
#include <map>
#include <string>
#include <utility>
#include <vector>

namespace weightport::sim::hbd {

Result<TraceStats> ComputeTraceStats(const FaultTrace& trace, int servers) {
  TraceStats s;
  s.servers = servers;
  s.servers_listed = static_cast<int>(trace.node_ids.size());
  if (servers < s.servers_listed)
    return InvalidArgument("the trace lists " + std::to_string(s.servers_listed) +
                           " servers with faults, more than the " + std::to_string(servers) +
                           " it is said to cover");
  s.span_days = trace.days;
  s.faults = static_cast<int64_t>(trace.faults.size());
  // Each server's faults merged into disjoint stretches, clipped to the span; +1 / -1 at their ends.
  std::vector<std::vector<const Fault*>> by_server(s.servers_listed);
  for (const Fault& f : trace.faults) {
    by_server[f.node].push_back(&f);
    s.zero_length_faults += f.has_start && f.has_end && f.start == f.end;
    s.open_at_start += !f.has_start;
    s.open_at_end += !f.has_end;
  }
  std::vector<std::pair<double, int>> steps;
  for (std::vector<const Fault*>& faults : by_server) {
    std::sort(faults.begin(), faults.end(),
              [](const Fault* a, const Fault* b) { return a->start < b->start; });
    double begin = 0, end = -1;  // the current stretch; none while end < begin
    const auto close = [&] {
      const double b = std::max(begin, 0.0), e = std::min(end, s.span_days);
      if (e > b) steps.push_back({b, +1}), steps.push_back({e, -1});
    };
    for (const Fault* f : faults) {
      if (f->start < end) {
        ++s.overlapping_faults;
        end = std::max(end, f->end);
        continue;
      }
      close();
      begin = f->start, end = f->end;
    }
    close();
  }
  if (!(s.span_days > 0)) return s;
  std::sort(steps.begin(), steps.end());
  std::map<int, double> time_at;  // concurrent faulty servers -> days spent at that count
  double at = 0;
  int faulty = 0;
  for (const auto& [day, step] : steps) {
    if (day > at) time_at[faulty] += day - at;
    at = day;
    faulty += step;
  }
  if (s.span_days > at) time_at[faulty] += s.span_days - at;
  double weighted = 0, cumulative = 0;
  bool p99_found = false;
  for (const auto& [count, days] : time_at) {
    weighted += count * days;
    cumulative += days;
    if (!p99_found && cumulative >= 0.99 * s.span_days) s.p99_faulty = count, p99_found = true;
    if (days > 0) s.max_faulty = count;
  }
  if (!p99_found) s.p99_faulty = s.max_faulty;  // rounding left the sum a hair under 99%
  s.mean_faulty = weighted / s.span_days;
  return s;
}

}  // namespace weightport::sim::hbd
