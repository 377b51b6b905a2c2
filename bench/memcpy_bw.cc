// bench_memcpy: memcpy bandwidth between two buffers of each size, the reference figure the transfer
// benchmarks are compared with: one thread, or --threads copying at once, each its own pair of
// buffers (as a publisher's subscribers each copy the whole model). Every buffer is written in full
// before timing, so page faults are not part of the figure. GB/s with GB = 1e9 bytes, in all.
#include <cstdio>
#include <cstring>
#include <iostream>
#include <string>
#include <thread>
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

Result<SizeResult> MeasureSize(uint64_t bytes, int runs, int threads) {
  SizeResult result;
  result.bytes = bytes;
  std::vector<Buffer> src, dst;
  for (int t = 0; t < threads; ++t) {
    WP_ASSIGN_OR_RETURN(Buffer s, Buffer::Allocate(bytes, "memcpy source"));
    WP_ASSIGN_OR_RETURN(Buffer d, Buffer::Allocate(bytes, "memcpy destination"));
    s.Touch(1);
    d.Touch(2);
    src.push_back(std::move(s));
    dst.push_back(std::move(d));
  }
  for (int run = 0; run < runs; ++run) {
    // A different first byte each run, so every copy is checked to have happened.
    for (Buffer& s : src) s.data()[0] = static_cast<std::byte>(run + 3);
    const auto start = Clock::now();
    std::vector<std::thread> copiers;
    for (int t = 1; t < threads; ++t)
      copiers.emplace_back([&, t] { std::memcpy(dst[t].data(), src[t].data(), bytes); });
    std::memcpy(dst[0].data(), src[0].data(), bytes);
    for (std::thread& c : copiers) c.join();
    const double s = Seconds(Clock::now() - start);
    for (int t = 0; t < threads; ++t)
      if (dst[t].data()[0] != src[t].data()[0] || dst[t].data()[bytes - 1] != src[t].data()[bytes - 1])
        return Internal("memcpy of " + FormatSize(bytes) + " did not copy");
    result.seconds.push_back(s);
    result.gbps.push_back(static_cast<double>(bytes) * threads / s / 1e9);
  }
  result.stats = Summarize(result.gbps);
  return result;
}

int Main(int argc, char** argv) {
  CLI::App app{
      "bench_memcpy: memcpy bandwidth for each size, one thread or --threads at once (each copying its\n"
      "own buffers). Source and destination are allocated with mmap and written in full before timing,\n"
      "so page faults are excluded; each size is then copied --runs times. Prints the median, min and\n"
      "max in GB/s in all (GB = 1e9 bytes).",
      "bench_memcpy"};
  std::string sizes_text = "64M,256M,1G,2G";
  int runs = 5;
  int threads = 1;
  bool json = false;
  app.add_option("--sizes", sizes_text,
                 "Comma-separated sizes; K, M, G, T suffixes are binary (64M = 64 MiB), plain numbers are "
                 "bytes")
      ->capture_default_str();
  app.add_option("--runs", runs, "Timed copies per size")
      ->capture_default_str()
      ->check(CLI::Range(1, 100000));
  app.add_option("--threads", threads, "Threads copying at once, each its own source and destination")
      ->capture_default_str()
      ->check(CLI::Range(1, 64));
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
    std::printf(
        "memcpy, %d thread(s) at once, %d runs per size, buffers touched before timing (GB = 1e9 "
        "bytes, in all)\n",
        threads, runs);
    std::printf("%-8s %12s %10s %10s\n", "size", "median GB/s", "min GB/s", "max GB/s");
    std::fflush(stdout);
  }
  for (uint64_t bytes : *sizes) {
    auto r = MeasureSize(bytes, runs, threads);
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
        {"benchmark", "memcpy"}, {"threads", threads}, {"runs", runs}, {"gb", 1e9}, {"results", results}};
    std::cout << out.dump(2) << std::endl;
  }
  return 0;
}

}  // namespace
}  // namespace weightport::bench

int main(int argc, char** argv) { return weightport::bench::Main(argc, argv); }
