// A fault trace's own statistics, to check a trace against the figures published with it.
//
// Over the trace's span (day 0 to its last event) a server is faulty on [start, end) of each of
// its faults (a zero-length fault never; overlapping faults of one server count once). The
// concurrent faulty servers form a step function of time: its time-weighted mean, the count it is
// at or below 99% of the time (p99), and its maximum over a stretch of non-zero length.
#pragma once

#include <cstdint>

#include "weightport/core/status.h"
#include "weightport/sim/hbd/fault_trace.h"

namespace weightport::sim::hbd {

struct TraceStats {
  int servers = 0;         // servers the trace covers, faulty or not
  int servers_listed = 0;  // servers with at least one event
  int64_t faults = 0;
  int64_t zero_length_faults = 0;  // a start and an end at the same time
  int64_t overlapping_faults = 0;  // starting while their server is down from another fault
  int64_t open_at_start = 0;       // an end with no start: faulty from day 0
  int64_t open_at_end = 0;         // a start with no end: faulty to the last event
  double span_days = 0;
  double mean_faulty = 0;  // concurrent faulty servers
  int p99_faulty = 0, max_faulty = 0;
};

// Errors: `servers` smaller than the servers the trace lists.
Result<TraceStats> ComputeTraceStats(const FaultTrace& trace, int servers);

}  // namespace weightport::sim::hbd
