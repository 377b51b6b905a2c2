// Child processes of `weightport demo` (subscribers, reshard ranks): started as this same binary,
// output into a log file, reaped with a bound.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "weightport/core/status.h"

namespace weightport::cli {

struct Child {
  std::string name;
  pid_t pid = -1;
  std::string log;
  int exit_code = -1;
  uint64_t peak_rss = 0;          // from wait4: includes the publisher's shared pages it read
  uint64_t peak_private_rss = 0;  // its own memory, from its --json summary
};

// Starts this binary with `args` (args[0] is its name), stdout and stderr into `log`, with no
// signal blocked (the demo blocks SIGINT and SIGTERM for its own watcher; see StopLiveChildren).
Result<pid_t> Spawn(const std::vector<std::string>& args, const std::string& log);
// Waits for a child up to `timeout`, then kills it. Records its exit code and peak RSS.
void Reap(Child& c, std::chrono::milliseconds timeout);
// Every child Spawn started that Reap has not reaped yet gets SIGTERM, then SIGKILL if it has not
// ended within `grace`. For a demo stopped by a signal; safe to call from any thread.
void StopLiveChildren(std::chrono::milliseconds grace);
// The last 2000 characters of a log.
std::string Tail(const std::string& path);
// A subscriber's peak private memory, from the --json summary at the end of its log.
Result<uint64_t> PrivatePeakFromSummary(const std::string& log);

}  // namespace weightport::cli
