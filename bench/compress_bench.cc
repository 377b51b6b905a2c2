// bench_compress: zstd on the data weightport moves (bf16 weights, the XOR delta of a dense
// training step, a sparse 1% delta, random bytes): ratio, compress and decompress rate of one
// thread at each level, and what the rule in kernels/compress.h decides for links from 100 Mbit/s
// to 100 Gbit/s (the source-byte rate of a long transfer, compressed and plain).
#include <cstdio>
#include <cstring>
#include <iostream>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "bench_util.h"
#include "weightport/kernels/compress.h"
#include "weightport/kernels/convert.h"

namespace weightport::bench {
namespace {

constexpr size_t kChunk = 4u << 20;  // the default chunk size of a plan

struct Data {
  std::string name;
  std::vector<std::byte> bytes;
};

std::vector<std::byte> Bf16(const std::vector<float>& f32) {
  std::vector<std::byte> out(f32.size() * 2);
  Status st = kernels::Convert(DType::kF32, DType::kBF16, f32.data(), out.data(), f32.size());
  if (!st.ok()) std::abort();
  return out;
}

std::vector<Data> MakeData(size_t bytes) {
  const size_t n = bytes / 2;
  std::mt19937 rng(1);
  std::normal_distribution<float> weight(0.0f, 0.02f), step(0.0f, 2e-5f);
  std::vector<float> w(n), dense(n), sparse;
  for (float& x : w) x = weight(rng);
  for (size_t i = 0; i < n; ++i) dense[i] = w[i] + step(rng);
  sparse = w;
  for (size_t i = 0; i < n / 100; ++i) sparse[rng() % n] += 1e-3f;
  const std::vector<std::byte> a = Bf16(w), b = Bf16(dense), c = Bf16(sparse);
  std::vector<std::byte> xd(a.size()), xs(a.size()), random(a.size());
  for (size_t i = 0; i < a.size(); ++i) {
    xd[i] = a[i] ^ b[i];
    xs[i] = a[i] ^ c[i];
    random[i] = static_cast<std::byte>(rng());
  }
  return {{"bf16 weights (sd 0.02)", a},
          {"dense step delta (xor)", xd},
          {"1% sparse delta (xor)", xs},
          {"random bytes", random}};
}

struct Rates {
  double ratio = 0, compress = 0, decompress = 0;  // source bytes per second
};

Result<Rates> Measure(const std::vector<std::byte>& data, int level, int runs) {
  std::vector<double> ct, dt;
  uint64_t compressed = 0;
  std::vector<std::byte> frame, back(kChunk);
  for (int r = 0; r < runs; ++r) {
    double c = 0, d = 0;
    compressed = 0;
    for (size_t off = 0; off + kChunk <= data.size(); off += kChunk) {
      std::span<const std::byte> chunk(data.data() + off, kChunk);
      auto t = Clock::now();
      WP_RETURN_IF_ERROR(kernels::ZstdCompress(chunk, level, frame));
      c += Seconds(Clock::now() - t);
      compressed += frame.size();
      t = Clock::now();
      WP_RETURN_IF_ERROR(kernels::ZstdDecompress(frame, back));
      d += Seconds(Clock::now() - t);
      if (std::memcmp(back.data(), chunk.data(), kChunk) != 0) return Internal("zstd round trip differs");
    }
    const double total = static_cast<double>(data.size() / kChunk * kChunk);
    ct.push_back(total / c);
    dt.push_back(total / d);
  }
  return Rates{static_cast<double>(data.size() / kChunk * kChunk) / static_cast<double>(compressed),
               Summarize(ct).median, Summarize(dt).median};
}

int Main(int argc, char** argv) {
  CLI::App app{
      "bench_compress: zstd per 4 MiB chunk on weights and deltas, one thread, and the compress-or-not\n"
      "rule for links of 0.1-100 Gbit/s. GB = 1e9 bytes.",
      "bench_compress"};
  std::string size_text = "64M";
  int runs = 3;
  bool json = false;
  app.add_option("--size", size_text, "Bytes of each data set")->capture_default_str();
  app.add_option("--runs", runs, "Timed passes")->capture_default_str()->check(CLI::Range(1, 100));
  app.add_flag("--json", json, "Print JSON");
  if (const int rc = ParseArgs(app, argc, argv); rc >= 0) return rc;
  auto size = ParseSize(size_text, "--size");
  if (!size.ok() || *size < kChunk) {
    std::cerr << "bench_compress: --size must be at least 4M\n";
    return 2;
  }
  const std::vector<double> links_gbit = {0.1, 1, 10, 100};
  nlohmann::ordered_json results = nlohmann::ordered_json::array();
  if (!json)
    std::printf("%-24s %5s %7s %12s %14s   compressed / plain MB/s at 0.1, 1, 10, 100 Gbit/s\n", "data",
                "level", "ratio", "compress GB/s", "decompress GB/s");
  for (const Data& d : MakeData(*size)) {
    for (int level : {1, 3}) {
      auto r = Measure(d.bytes, level, runs);
      if (!r.ok()) {
        std::cerr << "bench_compress: " << d.name << ": " << r.status().ToString() << "\n";
        return 1;
      }
      nlohmann::ordered_json links = nlohmann::ordered_json::array();
      std::string line;
      for (double g : links_gbit) {
        const kernels::CompressionRates rates{g * 1e9 / 8, r->compress, r->decompress};
        const double rate = kernels::CompressedRate(rates, r->ratio);
        const bool worth = kernels::WorthCompressing(rates, r->ratio);
        links.push_back({{"link_gbit", g}, {"compressed_bytes_per_s", rate}, {"compress", worth}});
        char buf[64];
        std::snprintf(buf, sizeof buf, " %.0f/%.0f%s", rate / 1e6, rates.link_bytes_per_s / 1e6,
                      worth ? "*" : "");
        line += buf;
      }
      if (json) {
        results.push_back({{"data", d.name},
                           {"level", level},
                           {"ratio", r->ratio},
                           {"compress_gbps", r->compress / 1e9},
                           {"decompress_gbps", r->decompress / 1e9},
                           {"links", links}});
      } else {
        std::printf("%-24s %5d %7.2f %12.2f %14.2f  %s\n", d.name.c_str(), level, r->ratio, r->compress / 1e9,
                    r->decompress / 1e9, line.c_str());
        std::fflush(stdout);
      }
    }
  }
  if (json)
    std::cout << nlohmann::ordered_json{{"benchmark", "compress"}, {"results", results}}.dump(2) << "\n";
  if (!json) std::printf("(* = the rule in kernels/compress.h compresses on that link)\n");
  return 0;
}

}  // namespace
}  // namespace weightport::bench

int main(int argc, char** argv) { return weightport::bench::Main(argc, argv); }
