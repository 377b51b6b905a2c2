// bench_memcpy: single-threaded memcpy bandwidth between two buffers of each size, the reference
// figure the transfer benchmarks are compared with. Both buffers are written in full before timing,
// so page faults are not part of the figure. GB/s with GB = 1e9 bytes.
#include <cstdio>
#include <cstring>
#include <iostream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "bench_util.h"

namespace weightport::bench {
namespace {

struct SizeResult {
  uint64_t bytes = 0;
  std::vector<double> seconds;
  std::vector<double> gbps;
  Stats stats;
};

Result<SizeResult> MeasureSize(uint64_t bytes, int runs) {
  SizeResult result;
  result.bytes = bytes;
  WP_ASSIGN_OR_RETURN(Buffer src, Buffer::Allocate(bytes, "memcpy source"));
  WP_ASSIGN_OR_RETURN(Buffer dst, Buffer::Allocate(bytes, "memcpy destination"));
  src.Touch(1);
  dst.Touch(2);
  for (int run = 0; run < runs; ++run) {
    // A different first byte each run, so every copy is checked to have happened.
    src.data()[0] = static_cast<std::byte>(run + 3);
    const auto start = Clock::now();
    std::memcpy(dst.data(), src.data(), bytes);
    const double s = Seconds(Clock::now() - start);
    if (dst.data()[0] != src.data()[0] || dst.data()[bytes - 1] != src.data()[bytes - 1])
      return Internal("memcpy of " + FormatSize(bytes) + " did not copy");
    result.seconds.push_back(s);
    result.gbps.push_back(static_cast<double>(bytes) / s / 1e9);
  }
  result.stats = Summarize(result.gbps);
  return result;
}

int Main(int argc, char** argv) {
  CLI::App app{
      "bench_memcpy: memcpy bandwidth (one thread) for each size. Source and destination are allocated\n"
      "with mmap and written in full before timing, so page faults are excluded; each size is then\n"
      "copied --runs times. Prints the median, min and max in GB/s (GB = 1e9 bytes).",
      "bench_memcpy"};
  std::string sizes_text = "64M,256M,1G,2G";
  int runs = 5;
  bool json = false;
  app.add_option("--sizes", sizes_text,
                 "Comma-separated sizes; K, M, G, T suffixes are binary (64M = 64 MiB), plain numbers are "
                 "bytes")
      ->capture_default_str();
  app.add_option("--runs", runs, "Timed copies per size")
      ->capture_default_str()
      ->check(CLI::Range(1, 100000));
  app.add_flag("--json", json, "Print one JSON object on stdout instead of a table");
  app.footer("Exit codes: 0 success, 1 failure (e.g. out of memory), 2 usage error.");
  if (const int rc = ParseArgs(app, argc, argv); rc >= 0) return rc;

  auto sizes = ParseSizeList(sizes_text, "--sizes");
  if (!sizes.ok()) {
    std::cerr << "bench_memcpy: " << sizes.status().message() << "\n";
    return 2;
  }

  nlohmann::ordered_json results = nlohmann::ordered_json::array();
  if (!json) {
    std::printf("memcpy, one thread, %d runs per size, buffers touched before timing (GB = 1e9 bytes)\n",
                runs);
    std::printf("%-8s %12s %10s %10s\n", "size", "median GB/s", "min GB/s", "max GB/s");
    std::fflush(stdout);
  }
  for (uint64_t bytes : *sizes) {
    auto r = MeasureSize(bytes, runs);
    if (!r.ok()) {
      std::cerr << "bench_memcpy: " << FormatSize(bytes) << ": " << r.status().ToString() << "\n";
      return 1;
    }
    if (json) {
      results.push_back({{"size", FormatSize(bytes)},
                         {"bytes", bytes},
                         {"median_gbps", r->stats.median},
                         {"min_gbps", r->stats.min},
                         {"max_gbps", r->stats.max},
                         {"gbps", r->gbps},
                         {"seconds", r->seconds}});
    } else {
      std::printf("%-8s %12.2f %10.2f %10.2f\n", FormatSize(bytes).c_str(), r->stats.median, r->stats.min,
                  r->stats.max);
      std::fflush(stdout);
    }
  }
  if (json) {
    nlohmann::ordered_json out = {
        {"benchmark", "memcpy"}, {"threads", 1}, {"runs", runs}, {"gb", 1e9}, {"results", results}};
    std::cout << out.dump(2) << std::endl;
  }
  return 0;
}

}  // namespace
}  // namespace weightport::bench

int main(int argc, char** argv) { return weightport::bench::Main(argc, argv); }
