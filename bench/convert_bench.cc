// bench_convert: one thread's bandwidth of each dtype conversion kernel against memcpy of the same
// source bytes, measured in the same run (runs alternate: memcpy, conversion, memcpy, ...). The
// figure of merit is the ratio (conversion GB/s over memcpy GB/s, both counted in source bytes);
// the goal is >= 0.5. Buffers are written in full before timing; the source holds normal weights
// (sd 0.02). GB = 1e9 bytes.
#include <cstdio>
#include <cstring>
#include <iostream>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "bench_util.h"
#include "weightport/kernels/convert.h"

namespace weightport::bench {
namespace {

struct Case {
  std::string name;
  DType from, to;
  bool fp8 = false;  // to e4m3fn, with `scaling`'s scales
  kernels::Fp8Scaling scaling = kernels::Fp8Scaling::kBlock128;
};

struct CaseResult {
  Stats convert_gbps, memcpy_gbps;
  double ratio = 0;  // median conversion / median memcpy
};

Result<CaseResult> Measure(const Case& c, uint64_t src_bytes, int runs) {
  const size_t count = src_bytes / DTypeSize(c.from);
  const size_t dst_bytes = c.fp8 ? count : count * DTypeSize(c.to);
  WP_ASSIGN_OR_RETURN(Buffer src, Buffer::Allocate(src_bytes, "source"));
  WP_ASSIGN_OR_RETURN(Buffer dst, Buffer::Allocate(std::max<size_t>(dst_bytes, src_bytes), "destination"));
  src.Touch(1);
  dst.Touch(2);
  // Weights as a model has them: normal, sd 0.02 (no NaN, inf or subnormal inputs, which would
  // make the FPU take microcode assists on the subnormal paths), made in f32 and converted.
  {
    std::vector<float> f32(count);
    std::mt19937 rng(1);
    std::normal_distribution<float> normal(0.0f, 0.02f);
    for (float& x : f32) x = normal(rng);
    if (c.from == DType::kF32)
      std::memcpy(src.data(), f32.data(), src_bytes);
    else
      WP_RETURN_IF_ERROR(kernels::Convert(DType::kF32, c.from, f32.data(), src.data(), count));
  }
  const int64_t cols = 4096, rows = static_cast<int64_t>(count) / cols;
  std::vector<float> scales(kernels::Fp8ScaleCount(rows, cols, c.scaling));
  std::vector<double> conv, copy;
  for (int run = 0; run < runs; ++run) {
    auto start = Clock::now();
    std::memcpy(dst.data(), src.data(), src_bytes);
    copy.push_back(static_cast<double>(src_bytes) / Seconds(Clock::now() - start) / 1e9);
    start = Clock::now();
    Status st = c.fp8 ? kernels::QuantizeE4m3(c.from, src.data(), rows, cols, c.scaling,
                                              reinterpret_cast<uint8_t*>(dst.data()), scales.data())
                      : kernels::Convert(c.from, c.to, src.data(), dst.data(), count);
    const double s = Seconds(Clock::now() - start);
    WP_RETURN_IF_ERROR(st);
    conv.push_back(static_cast<double>(src_bytes) / s / 1e9);
  }
  CaseResult r;
  r.convert_gbps = Summarize(conv);
  r.memcpy_gbps = Summarize(copy);
  r.ratio = r.convert_gbps.median / r.memcpy_gbps.median;
  return r;
}

int Main(int argc, char** argv) {
  CLI::App app{
      "bench_convert: dtype conversion kernels (one thread) against memcpy of the same source bytes, in\n"
      "the same run. Prints median GB/s of each (source bytes, GB = 1e9) and their ratio (goal >= 0.5).",
      "bench_convert"};
  std::string size_text = "256M";
  int runs = 7;
  bool json = false;
  app.add_option("--size", size_text, "Source bytes per conversion (K, M, G suffixes are binary)")
      ->capture_default_str();
  app.add_option("--runs", runs, "Timed runs of each")->capture_default_str()->check(CLI::Range(1, 1000));
  app.add_flag("--json", json, "Print one JSON object on stdout instead of a table");
  if (const int rc = ParseArgs(app, argc, argv); rc >= 0) return rc;
  auto size = ParseSize(size_text, "--size");
  if (!size.ok()) {
    std::cerr << "bench_convert: " << size.status().message() << "\n";
    return 2;
  }
  const std::vector<Case> cases = {
      {"f32->bf16", DType::kF32, DType::kBF16},
      {"bf16->f32", DType::kBF16, DType::kF32},
      {"f32->f16", DType::kF32, DType::kF16},
      {"f16->f32", DType::kF16, DType::kF32},
      {"f16->bf16", DType::kF16, DType::kBF16},
      {"bf16->f16", DType::kBF16, DType::kF16},
      {"bf16->e4m3 (128x128)", DType::kBF16, DType::kF8E4M3, true},
      {"f32->e4m3 (128x128)", DType::kF32, DType::kF8E4M3, true},
      {"bf16->e4m3 (tensor)", DType::kBF16, DType::kF8E4M3, true, kernels::Fp8Scaling::kPerTensor},
      {"f32->e4m3 (tensor)", DType::kF32, DType::kF8E4M3, true, kernels::Fp8Scaling::kPerTensor},
  };
  nlohmann::ordered_json results = nlohmann::ordered_json::array();
  if (!json) std::printf("%-22s %14s %14s %7s\n", "conversion", "convert GB/s", "memcpy GB/s", "ratio");
  for (const Case& c : cases) {
    auto r = Measure(c, *size, runs);
    if (!r.ok()) {
      std::cerr << "bench_convert: " << c.name << ": " << r.status().ToString() << "\n";
      return 1;
    }
    if (json) {
      results.push_back({{"conversion", c.name},
                         {"convert_gbps_median", r->convert_gbps.median},
                         {"convert_gbps_min", r->convert_gbps.min},
                         {"memcpy_gbps_median", r->memcpy_gbps.median},
                         {"ratio", r->ratio}});
    } else {
      std::printf("%-22s %14.2f %14.2f %7.2f\n", c.name.c_str(), r->convert_gbps.median,
                  r->memcpy_gbps.median, r->ratio);
      std::fflush(stdout);
    }
  }
  if (json)
    std::cout << nlohmann::ordered_json{{"benchmark", "convert"},
                                        {"threads", 1},
                                        {"runs", runs},
                                        {"source_bytes", *size},
                                        {"results", results}}
                     .dump(2)
              << std::endl;
  return 0;
}

}  // namespace
}  // namespace weightport::bench

int main(int argc, char** argv) { return weightport::bench::Main(argc, argv); }
