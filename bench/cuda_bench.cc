// bench_cuda: on the GPU, in one run,
//   - the conversion kernels against a device-to-device copy of the same source bytes (runs
//     alternate: copy, kernel, copy, ...; bandwidth is bytes read plus written per second, GB =
//     1e9; goal >= 0.8x);
//   - the chunk hashes (xxh3-64 of 4 MiB chunks; bytes read per second) against the same copy;
//   - the staging pipeline (CudaStager, 8 MiB pinned chunks, both ways) against one cudaMemcpy of
//     the whole buffer to or from pinned memory (goal >= 0.85x);
//   - CUDA IPC: a second process (this program again, --ipc-peer) maps the source buffer and copies
//     it into its own memory, against a device copy within that process (goal >= 0.9x);
//   - UCX: with a CUDA-aware UCX (scripts/setup --ucx-cuda), a Put of the source buffer from one UCX
//     transport's registration into another's, device memory handed to UCX as it is, against a
//     device copy (cuda_bench_ucx.h).
// Needs a GPU; says why and exits 77 (skip) without one.
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <iostream>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "bench_util.h"
#include "cuda_bench_ucx.h"
#include "cuda_bench_util.h"
#include "weightport/cuda/convert.h"
#include "weightport/cuda/device_buffer.h"
#include "weightport/cuda/device_query.h"
#include "weightport/cuda/hash.h"
#include "weightport/cuda/ipc.h"
#include "weightport/cuda/staging.h"

namespace weightport::bench {
namespace {

struct Case {
  std::string name;
  DType from, to;
  bool fp8 = false;   // e4m3 with 128x128 block scales
  bool hash = false;  // chunk hashes, not a conversion
};

constexpr uint64_t kHashChunk = 4 << 20;

// The second process of the IPC case: maps the buffer behind `hex` and times copying it into its
// own memory, alternating with a copy between two buffers of its own; prints one JSON line.
int IpcPeer(const std::string& hex, int runs) {
  auto handle = CudaIpcHandle::FromHex(hex);
  auto mapping = handle.ok() ? CudaIpcMapping::Open(*handle) : Result<CudaIpcMapping>(handle.status());
  if (!mapping.ok()) {
    std::cerr << "bench_cuda --ipc-peer: " << mapping.status().ToString() << "\n";
    return 1;
  }
  const size_t n = mapping->size();
  auto mine = DeviceBuffer::Allocate(n);
  auto other = DeviceBuffer::Allocate(n);
  if (!mine.ok() || !other.ok()) {
    std::cerr << "bench_cuda --ipc-peer: " << (mine.ok() ? other.status() : mine.status()).ToString() << "\n";
    return 1;
  }
  std::vector<double> ipc, local;
  for (int r = 0; r < runs + 1; ++r) {
    auto i = Timed([&] { return CudaConvert(DType::kU8, DType::kU8, mapping->data(), mine->data(), n); });
    auto l = Timed([&] { return CudaConvert(DType::kU8, DType::kU8, other->data(), mine->data(), n); });
    if (!i.ok() || !l.ok()) {
      std::cerr << "bench_cuda --ipc-peer: " << (i.ok() ? l.status() : i.status()).ToString() << "\n";
      return 1;
    }
    if (r == 0) continue;
    ipc.push_back(2.0 * n / *i / 1e9);
    local.push_back(2.0 * n / *l / 1e9);
  }
  std::cout
      << nlohmann::json{{"ipc_gbps", Summarize(ipc).median}, {"copy_gbps", Summarize(local).median}}.dump()
      << "\n";
  return 0;
}

// Runs IpcPeer in a second process on `buffer`; its figures.
Result<nlohmann::json> MeasureIpc(const DeviceBuffer& buffer, int runs) {
  WP_ASSIGN_OR_RETURN(CudaIpcHandle handle, ExportCudaIpc(buffer));
  char self[4096];
  const ssize_t len = readlink("/proc/self/exe", self, sizeof self - 1);
  if (len <= 0) return Unavailable("IPC: cannot find this program to start the peer");
  self[len] = '\0';
  const std::string cmd =
      "'" + std::string(self) + "' --ipc-peer " + handle.ToHex() + " --runs " + std::to_string(runs);
  FILE* p = popen(cmd.c_str(), "r");
  if (p == nullptr) return Unavailable("IPC: cannot start the peer process");
  std::string out;
  char buf[512];
  while (std::fgets(buf, sizeof buf, p) != nullptr) out += buf;
  if (const int rc = pclose(p); rc != 0)
    return Unavailable("IPC: the peer process failed (status " + std::to_string(rc) + "): " + out);
  auto parsed = nlohmann::json::parse(out, nullptr, false);
  if (parsed.is_discarded()) return Unavailable("IPC: the peer printed no figures: " + out);
  return parsed;
}

int Run(uint64_t src_bytes, int runs, bool json) {
  auto devices = CudaDevices();
  if (!devices.ok()) {
    std::cerr << "bench_cuda: " << devices.status().message() << "\n";
    return 77;
  }
  const std::vector<Case> cases = {{"f32 -> bf16", DType::kF32, DType::kBF16},
                                   {"bf16 -> f32", DType::kBF16, DType::kF32},
                                   {"f32 -> f16", DType::kF32, DType::kF16},
                                   {"f16 -> f32", DType::kF16, DType::kF32},
                                   {"bf16 -> f16", DType::kBF16, DType::kF16},
                                   {"bf16 -> e4m3 (blocks)", DType::kBF16, DType::kF8E4M3, true},
                                   {"f32 -> e4m3 (blocks)", DType::kF32, DType::kF8E4M3, true},
                                   {"xxh3 chunk hashes (4 MiB)", DType::kU8, DType::kU8, false, true}};
  auto src = DeviceBuffer::Allocate(src_bytes);
  auto dst = DeviceBuffer::Allocate(2 * src_bytes);
  auto scales = DeviceBuffer::Allocate(  // also the hashes' scratch
      std::max(src_bytes / (128 * 128) * 4 + 4096, CudaChunkHashScratchBytes(src_bytes, kHashChunk)));
  if (!src.ok() || !dst.ok() || !scales.ok()) {
    std::cerr << "bench_cuda: "
              << (src.ok() ? dst.ok() ? scales.status() : dst.status() : src.status()).ToString() << "\n";
    return 1;
  }
  std::vector<std::byte> host(src_bytes, std::byte{0x3c});  // every element a normal number
  if (!src->CopyFrom(host).ok()) return 1;
  nlohmann::ordered_json report = {{"device", (*devices)[0].name},
                                   {"source_bytes", src_bytes},
                                   {"runs", runs},
                                   {"cases", nlohmann::json::array()}};
  if (!json) std::printf("%-22s %12s %12s %8s\n", "kernel", "kernel GB/s", "copy GB/s", "ratio");
  for (const Case& c : cases) {
    const size_t count = src_bytes / DTypeSize(c.from);
    const size_t dst_bytes = c.hash  ? (src_bytes + kHashChunk - 1) / kHashChunk * 8
                             : c.fp8 ? count
                                     : count * DTypeSize(c.to);
    const int64_t cols = 4096, rows = static_cast<int64_t>(count) / cols;
    std::vector<double> kernel, copy;
    for (int r = 0; r < runs + 1; ++r) {
      auto cp = Timed([&] { return CudaConvert(c.from, c.from, src->data(), dst->data(), count); });
      auto k = Timed([&] {
        if (c.hash)
          return CudaChunkHashes(src->data(), src_bytes, kHashChunk, static_cast<uint64_t*>(dst->data()),
                                 nullptr, scales->data());
        return c.fp8
                   ? CudaQuantizeE4m3(c.from, src->data(), rows, cols, kernels::Fp8Scaling::kBlock128,
                                      static_cast<uint8_t*>(dst->data()), static_cast<float*>(scales->data()))
                   : CudaConvert(c.from, c.to, src->data(), dst->data(), count);
      });
      if (!cp.ok() || !k.ok()) {
        std::cerr << c.name << ": " << (cp.ok() ? k.status() : cp.status()).ToString() << "\n";
        return 1;
      }
      if (r == 0) continue;  // warm-up
      copy.push_back(2.0 * src_bytes / *cp / 1e9);
      kernel.push_back(static_cast<double>(src_bytes + dst_bytes) / *k / 1e9);
    }
    const Stats ks = Summarize(kernel), cs = Summarize(copy);
    const double ratio = ks.median / cs.median;
    report["cases"].push_back(
        {{"kernel", c.name}, {"kernel_gbps", ks.median}, {"copy_gbps", cs.median}, {"ratio", ratio}});
    if (!json) std::printf("%-22s %12.1f %12.1f %8.2f\n", c.name.c_str(), ks.median, cs.median, ratio);
  }
  // Staging: 8 MiB chunks against one copy of everything (a stager whose chunk is the whole buffer).
  auto piped = CudaStager::Create(8 << 20);
  auto whole = CudaStager::Create(src_bytes);
  if (!piped.ok() || !whole.ok()) {
    std::cerr << "staging: " << (piped.ok() ? whole.status() : piped.status()).ToString() << "\n";
    return 1;
  }
  auto none = [](uint64_t, auto) { return Status::Ok(); };
  for (bool to_device : {false, true}) {
    std::vector<double> pipe_gbps, whole_gbps;
    for (int r = 0; r < runs + 1; ++r) {
      auto once = [&](CudaStager& s) {
        return Timed([&] {
          return to_device ? s.ToDevice(src->data(), src_bytes, CudaStager::Produce(none))
                           : s.FromDevice(src->data(), src_bytes, CudaStager::Consume(none));
        });
      };
      auto w = once(**whole);
      auto p = once(**piped);
      if (!w.ok() || !p.ok()) {
        std::cerr << "staging: " << (w.ok() ? p.status() : w.status()).ToString() << "\n";
        return 1;
      }
      if (r == 0) continue;
      whole_gbps.push_back(src_bytes / *w / 1e9);
      pipe_gbps.push_back(src_bytes / *p / 1e9);
    }
    const Stats ps = Summarize(pipe_gbps), ws = Summarize(whole_gbps);
    const std::string name = to_device ? "staging host -> device" : "staging device -> host";
    report["staging"].push_back({{"direction", name},
                                 {"pipeline_gbps", ps.median},
                                 {"pinned_copy_gbps", ws.median},
                                 {"ratio", ps.median / ws.median}});
    if (!json)
      std::printf("%-22s %12.1f %12.1f %8.2f\n", name.c_str(), ps.median, ws.median, ps.median / ws.median);
  }
  // IPC may be refused where the others ran (exclusive-process compute mode, MIG): say so in the
  // report instead of losing the figures above.
  auto ipc = MeasureIpc(*src, runs);
  if (!ipc.ok()) {
    std::cerr << "ipc: " << ipc.status().ToString() << "\n";
    report["ipc"] = {{"error", ipc.status().ToString()}};
  } else {
    const double ipc_ratio = (*ipc)["ipc_gbps"].get<double>() / (*ipc)["copy_gbps"].get<double>();
    report["ipc"] = {
        {"ipc_gbps", (*ipc)["ipc_gbps"]}, {"copy_gbps", (*ipc)["copy_gbps"]}, {"ratio", ipc_ratio}};
    if (!json)
      std::printf("%-22s %12.1f %12.1f %8.2f\n", "CUDA IPC (2 processes)", (*ipc)["ipc_gbps"].get<double>(),
                  (*ipc)["copy_gbps"].get<double>(), ipc_ratio);
  }
  auto ucx = MeasureUcxPut(*src, *dst, runs);
  if (!ucx.ok()) {
    std::cerr << "ucx: " << ucx.status().ToString() << "\n";
    report["ucx"] = {{"error", ucx.status().ToString()}};
  } else {
    report["ucx"] = *ucx;
    if (!json)
      std::printf("%-22s %12.1f %12.1f %8.2f\n", "UCX put (device)", (*ucx)["put_gbps"].get<double>(),
                  (*ucx)["copy_gbps"].get<double>(), (*ucx)["ratio"].get<double>());
  }
  if (json) std::cout << report.dump(2) << "\n";
  return 0;
}

}  // namespace
}  // namespace weightport::bench

int main(int argc, char** argv) {
  using namespace weightport::bench;
  CLI::App app{
      "bench_cuda: GPU conversion and hash kernels against a device copy, the staging pipeline against a "
      "pinned copy, CUDA IPC between two processes against a device copy",
      "bench_cuda"};
  std::string size_text = "1G";
  int runs = 10;
  bool json = false;
  app.add_option("--size", size_text, "Source bytes per case (K, M, G suffixes are binary)")
      ->capture_default_str();
  app.add_option("--runs", runs, "Timed runs per case, after a warm-up")
      ->capture_default_str()
      ->check(CLI::Range(1, 1000));
  app.add_flag("--json", json, "Print JSON");
  std::string ipc_peer;
  app.add_option("--ipc-peer", ipc_peer, "(internal) be the second process of the IPC case for this handle");
  if (const int rc = ParseArgs(app, argc, argv); rc >= 0) return rc;
  if (!ipc_peer.empty()) return IpcPeer(ipc_peer, runs);
  auto size = ParseSize(size_text, "--size");
  if (!size.ok()) {
    std::cerr << "bench_cuda: " << size.status().message() << "\n";
    return 2;
  }
  return Run(*size, runs, json);
}
