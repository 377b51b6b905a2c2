// bench_header: how long opening a safetensors file takes in-process (open, mmap, header parse and
// validation: SafetensorsFile::Open), per file, median of --runs. bench/run-header-bench drives it
// on headers of 10,000 to 70,886 tensors against the reference package reading the same files.
#include <cstdio>
#include <iostream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "bench_util.h"
#include "weightport/format/safetensors_reader.h"

namespace weightport::bench {
namespace {

int Main(int argc, char** argv) {
  CLI::App app{"bench_header: in-process SafetensorsFile::Open time per file (median of --runs)",
               "bench_header"};
  std::vector<std::string> files;
  int runs = 5;
  app.add_option("files", files, "safetensors files")->required();
  app.add_option("--runs", runs, "Timed opens per file")->capture_default_str()->check(CLI::Range(1, 1000));
  if (const int rc = ParseArgs(app, argc, argv); rc >= 0) return rc;
  nlohmann::ordered_json out = nlohmann::ordered_json::array();
  for (const auto& path : files) {
    std::vector<double> times;
    size_t tensors = 0;
    for (int i = 0; i < runs; ++i) {
      const auto start = Clock::now();
      auto file = SafetensorsFile::Open(path);
      if (!file.ok()) {
        std::cerr << "bench_header: " << file.status().ToString() << "\n";
        return 1;
      }
      tensors = file->tensors().size();
      times.push_back(Seconds(Clock::now() - start));  // the file is closed after the timing
    }
    const Stats s = Summarize(times);
    out.push_back(
        {{"file", path}, {"tensors", tensors}, {"median_s", s.median}, {"min_s", s.min}, {"max_s", s.max}});
  }
  std::cout << out.dump(2) << "\n";
  return 0;
}

}  // namespace
}  // namespace weightport::bench

int main(int argc, char** argv) { return weightport::bench::Main(argc, argv); }
