// Shared pieces of the weightport command line: exit codes, error printing, progress, sizes.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include <CLI/CLI.hpp>

#include "weightport/core/status.h"

namespace weightport::cli {

// A duration in seconds, for reports.
inline double Secs(std::chrono::nanoseconds d) { return std::chrono::duration<double>(d).count(); }

inline constexpr int kExitOk = 0;
inline constexpr int kExitFailure = 1;
inline constexpr int kExitUsage = 2;

// A subcommand registers itself and its options on the app and returns itself with the function
// that runs it.
struct Command {
  CLI::App* sub;
  std::function<int()> run;
};

// Prints "weightport <command>: <status>" to stderr and returns kExitFailure.
int Fail(std::string_view command, const Status& status);

// "a,b,,c" -> {"a", "b", "", "c"}; "" -> {}. A trailing separator adds nothing.
std::vector<std::string> SplitList(const std::string& text, char separator = ',');

// The numbers of a comma-separated option ("0.01,0.02"; "inf" parses as infinity), each one that
// `valid` accepts; the first that is not a number, or not valid, is refused as
// "<option>: '<item>' is <not_what>" (not_what: "not a ratio in [0, 1)").
Result<std::vector<double>> ParseNumberList(const std::string& text, std::string_view option,
                                            std::string_view not_what,
                                            const std::function<bool(double)>& valid);
// The same for whole decimal numbers in [lo, hi].
Result<std::vector<long>> ParseIntegerList(const std::string& text, std::string_view option,
                                           std::string_view not_what, long lo, long hi);

// "1.50 GiB", "512 B"
std::string HumanBytes(uint64_t bytes);
// "1.25%" for 0.0125
std::string Percent(double fraction);
// "[4096, 11008]"
std::string FormatShape(const std::vector<int64_t>& shape);

// Prints "<label> 42% (1.2 GiB / 2.5 GiB)" to stderr at most every 0.5 s and at the end; silent
// when quiet. Call with (done, total).
class ProgressPrinter {
 public:
  ProgressPrinter(std::string label, bool quiet) : label_(std::move(label)), quiet_(quiet) {}
  void operator()(uint64_t done, uint64_t total);

 private:
  std::string label_;
  bool quiet_;
  std::chrono::steady_clock::time_point last_{};
};

Command AddInspectCommand(CLI::App& app);
Command AddGenModelCommand(CLI::App& app);
Command AddConvertCommand(CLI::App& app);
Command AddManifestCommand(CLI::App& app);
Command AddInfoCommand(CLI::App& app);
Command AddDemoCommand(CLI::App& app);
Command AddPublishCommand(CLI::App& app);
Command AddSubscribeCommand(CLI::App& app);
Command AddServeCommand(CLI::App& app);
Command AddCoordinatorCommand(CLI::App& app);
Command AddPlanCommand(CLI::App& app);
Command AddReshardCommand(CLI::App& app);
Command AddTopologyCommand(CLI::App& app);
Command AddSimCommand(CLI::App& app);
Command AddHbdCommand(CLI::App& app);
Command AddFedCommand(CLI::App& app);

}  // namespace weightport::cli
