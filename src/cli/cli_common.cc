#include "cli/cli_common.h"

#include <unistd.h>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <sstream>

namespace weightport::cli {

int Fail(std::string_view command, const Status& status) {
  std::cerr << "weightport " << command << ": " << status.ToString() << "\n";
  return kExitFailure;
}

std::string HumanBytes(uint64_t bytes) {
  static const char* kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
  double v = static_cast<double>(bytes);
  int u = 0;
  while (v >= 1024.0 && u < 5) v /= 1024.0, ++u;
  char buf[32];
  if (u == 0)
    std::snprintf(buf, sizeof buf, "%llu B", static_cast<unsigned long long>(bytes));
  else
    std::snprintf(buf, sizeof buf, "%.2f %s", v, kUnits[u]);
  return buf;
}

std::string Percent(double fraction) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f%%", fraction * 100.0);
  return buf;
}

std::string FormatShape(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

void ProgressPrinter::operator()(uint64_t done, uint64_t total) {
  if (quiet_) return;
  const auto now = std::chrono::steady_clock::now();
  const bool finished = done >= total;
  if (!finished && now - last_ < std::chrono::milliseconds(500)) return;
  last_ = now;
  const double pct = total ? 100.0 * static_cast<double>(done) / static_cast<double>(total) : 100.0;
  const bool tty = isatty(STDERR_FILENO);
  std::fprintf(stderr, "%s%s %3.0f%% (%s / %s)%s", tty ? "\r" : "", label_.c_str(), pct,
               HumanBytes(done).c_str(), HumanBytes(total).c_str(), (finished || !tty) ? "\n" : "");
  std::fflush(stderr);
}

std::vector<std::string> SplitList(const std::string& text, char separator) {
  std::vector<std::string> items;
  std::stringstream in(text);
  for (std::string item; std::getline(in, item, separator);) items.push_back(std::move(item));
  return items;
}

namespace {

Status NotA(std::string_view option, const std::string& item, std::string_view not_what) {
  return InvalidArgument(std::string(option) + ": '" + item + "' is " + std::string(not_what));
}

}  // namespace

Result<std::vector<double>> ParseNumberList(const std::string& text, std::string_view option,
                                            std::string_view not_what,
                                            const std::function<bool(double)>& valid) {
  std::vector<double> out;
  for (const std::string& item : SplitList(text)) {
    char* end = nullptr;
    const double v = std::strtod(item.c_str(), &end);
    if (item.empty() || *end != '\0' || !valid(v)) return NotA(option, item, not_what);
    out.push_back(v);
  }
  return out;
}

Result<std::vector<long>> ParseIntegerList(const std::string& text, std::string_view option,
                                           std::string_view not_what, long lo, long hi) {
  std::vector<long> out;
  for (const std::string& item : SplitList(text)) {
    char* end = nullptr;
    const long v = std::strtol(item.c_str(), &end, 10);
    if (item.empty() || *end != '\0' || v < lo || v > hi) return NotA(option, item, not_what);
    out.push_back(v);
  }
  return out;
}

}  // namespace weightport::cli
