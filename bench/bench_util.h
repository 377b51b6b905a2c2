// Small helpers shared by the benchmark programs: sizes with suffixes, statistics, timing, memory.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <CLI/CLI.hpp>

#include "weightport/core/status.h"
#include "weightport/transport/testing/fake_transport.h"

namespace weightport::bench {

using Clock = std::chrono::steady_clock;

inline double Seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

// Parses "4096", "64K", "256M", "1G", "2GiB", "1.5G" (K/M/G/T are binary: KiB, MiB, GiB, TiB).
// `what` names the option in errors. Zero and values above 2^50 are rejected.
Result<uint64_t> ParseSize(std::string_view text, std::string_view what);
// Parses a comma-separated list of sizes ("64M,256M,1G").
Result<std::vector<uint64_t>> ParseSizeList(std::string_view text, std::string_view what);
// "64M", "1G", "1536M", "4096" — the shortest exact binary form.
std::string FormatSize(uint64_t bytes);
// "256 B", "100.3 KiB", "19.3 MiB", "1.00 GiB" — for reading, not exact.
std::string HumanSize(uint64_t bytes);

struct Stats {
  double median = 0;
  double min = 0;
  double max = 0;
};
// Median (mean of the two middle values for an even count), min and max; zeros when empty.
Stats Summarize(std::vector<double> values);

// Page-aligned heap memory from mmap (anonymous, private), unmapped on destruction.
class Buffer {
 public:
  static Result<Buffer> Allocate(size_t size, std::string_view what);
  Buffer() = default;
  Buffer(Buffer&& other) noexcept;
  Buffer& operator=(Buffer&& other) noexcept;
  ~Buffer();
  std::byte* data() const { return data_; }
  size_t size() const { return size_; }
  // Writes every byte (so every page is faulted in and backed) with a pattern derived from `seed`.
  void Touch(unsigned seed);

 private:
  std::byte* data_ = nullptr;
  size_t size_ = 0;
};

// A rank's transport in a benchmark that runs every rank in one process: "fake" (the in-process
// memcpy fabric `fabric`) or "shm" (UCX shared memory, CMA and self), named `name`.
Result<std::unique_ptr<Transport>> RankTransport(const std::string& kind,
                                                 const std::shared_ptr<FakeFabric>& fabric,
                                                 const std::string& name);

// Parses argv with CLI11; returns -1 to go on, otherwise the exit code (0 for --help, 2 for a usage
// error, after CLI11 printed the message).
inline int ParseArgs(CLI::App& app, int argc, char** argv) {
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int rc = app.exit(e);
    return rc == 0 ? 0 : 2;
  }
  return -1;
}

}  // namespace weightport::bench
