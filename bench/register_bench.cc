// bench_register: what registering a model's weights with UCX costs. The engine registers its weights
// as ONE arena (one registration per arena, never per tensor, transport.h); this measures why:
//   (a) one Transport::Register() of an arena holding every tensor back to back,
//   (b) one Register() per tensor (the same bytes as (a), one call per tensor's range),
//   (c) UcxAllocate() of an arena of the same size (UCX allocates; what peers on the host map),
// and the time to deregister each (destroying the regions). The arena is written in full before any
// timing, so page faults are not measured in (a) and (b); (c) allocates fresh memory, whose first
// touch is reported separately. Each UCX transport runs in its own ProgressLoop and every call is
// made (and timed) on the loop thread.
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "bench_util.h"
#include "weightport/transport/progress_loop.h"
#include "weightport/transport/ucx_transport.h"

namespace weightport::bench {
namespace {

constexpr uint64_t kAlign = 256;  // tensors start on 256-byte boundaries, as frameworks allocate them

uint64_t RoundUp(uint64_t v, uint64_t a) { return (v + a - 1) / a * a; }

struct Tensor {
  uint64_t offset = 0;
  uint64_t bytes = 0;
};

// The tensors of a Qwen3-MoE-like model (hidden 2048, 128 experts of intermediate 768, 32 query and
// 4 key/value heads of 128, vocab 151936, bf16): embedding, then layers of norms, attention
// projections, q/k norms, router and 3 x 128 expert matrices, then the final norm and lm_head —
// many equal mid-sized tensors, a few large ones, many tiny ones. The shape pattern is cut to
// `count` tensors and every size scaled so that the arena is about `model_bytes`.
std::vector<uint64_t> MixSizes(uint64_t count, uint64_t model_bytes) {
  const uint64_t h = 2048, experts = 128, inter = 768, q = 32 * 128, kv = 4 * 128, vocab = 151936, b = 2;
  std::vector<uint64_t> layer = {h * b,   q * h * b,         kv * h * b,     kv * h * b,     q * h * b /*o*/,
                                 128 * b, 128 * b /*norms*/, h * b /*post*/, experts * h * b /*router*/};
  for (uint64_t e = 0; e < experts; ++e)
    for (int m = 0; m < 3; ++m) layer.push_back(h * inter * b);
  std::vector<double> raw;
  raw.push_back(static_cast<double>(vocab * h * b));  // embed_tokens
  const uint64_t tail = count >= 3 ? 2 : 0;           // final norm, lm_head
  for (uint64_t i = 0; raw.size() + tail < count; ++i)
    raw.push_back(static_cast<double>(layer[i % layer.size()]));
  if (tail) {
    raw.push_back(static_cast<double>(h * b));
    raw.push_back(static_cast<double>(vocab * h * b));
  }
  raw.resize(count);
  double total = 0;
  for (double r : raw) total += r;
  const double scale = static_cast<double>(model_bytes) / total;
  std::vector<uint64_t> sizes;
  for (double r : raw) sizes.push_back(std::max(kAlign, RoundUp(static_cast<uint64_t>(r * scale), kAlign)));
  return sizes;
}

struct RunTimes {
  double register_arena = 0, deregister_arena = 0;
  double register_each = 0, deregister_each = 0;
  double allocate = 0, touch_allocated = 0, free_allocated = 0;
};

// One run of (a), (b), (c), every call made and timed on the loop thread.
Result<RunTimes> RunOnce(ProgressLoop& loop, const Buffer& arena, const std::vector<Tensor>& tensors) {
  RunTimes t;
  WP_RETURN_IF_ERROR(loop.Call([&](Transport& transport) -> Status {
    const auto start = Clock::now();
    auto region = transport.Register(arena.data(), arena.size());
    const auto registered = Clock::now();
    if (!region.ok()) return region.status().WithContext("Register of the arena");
    region->reset();
    const auto done = Clock::now();
    t.register_arena = Seconds(registered - start);
    t.deregister_arena = Seconds(done - registered);
    return Status::Ok();
  }));
  WP_RETURN_IF_ERROR(loop.Call([&](Transport& transport) -> Status {
    std::vector<std::unique_ptr<MemoryRegion>> regions;
    regions.reserve(tensors.size());
    const auto start = Clock::now();
    for (size_t i = 0; i < tensors.size(); ++i) {
      auto region = transport.Register(arena.data() + tensors[i].offset, tensors[i].bytes);
      if (!region.ok()) return region.status().WithContext("Register of tensor " + std::to_string(i));
      regions.push_back(std::move(region).value());
    }
    const auto registered = Clock::now();
    regions.clear();
    const auto done = Clock::now();
    t.register_each = Seconds(registered - start);
    t.deregister_each = Seconds(done - registered);
    return Status::Ok();
  }));
  WP_RETURN_IF_ERROR(loop.Call([&](Transport& transport) -> Status {
    const auto start = Clock::now();
    auto region = UcxAllocate(transport, arena.size());
    const auto allocated = Clock::now();
    if (!region.ok()) return region.status().WithContext("UcxAllocate of the arena size");
    std::memset((*region)->data(), 0x5a, (*region)->size());
    const auto touched = Clock::now();
    region->reset();
    const auto done = Clock::now();
    t.allocate = Seconds(allocated - start);
    t.touch_allocated = Seconds(touched - allocated);
    t.free_allocated = Seconds(done - touched);
    return Status::Ok();
  }));
  return t;
}

struct TransportSpec {
  std::string name;
  std::vector<std::string> tls;
};

Result<TransportSpec> ParseTransport(const std::string& name) {
  if (name == "shm") return TransportSpec{name, {"posix", "sysv", "cma", "self"}};
  if (name == "tcp") return TransportSpec{name, {"tcp"}};
  return InvalidArgument("--transports: unknown transport '" + name + "' (known: shm, tcp)");
}

nlohmann::ordered_json StatsJson(const std::vector<double>& values) {
  const Stats s = Summarize(values);
  return {{"median", s.median}, {"min", s.min}, {"max", s.max}, {"values", values}};
}

std::string Ms(double seconds) {
  char text[32];
  std::snprintf(text, sizeof text, seconds < 0.01 ? "%.4f" : "%.2f", seconds * 1e3);
  return text;
}

int Main(int argc, char** argv) {
  CLI::App app{
      "bench_register: the cost of registering a model's weights with UCX. For each transport, times\n"
      "  (a) one Register() of an arena holding all tensors back to back,\n"
      "  (b) one Register() per tensor (the same bytes, --tensors calls),\n"
      "  (c) one UcxAllocate() of the arena size,\n"
      "and destroying (deregistering) the regions of each; prints medians over --runs and the ratio b/a.\n"
      "The arena is written in full before timing. Times are in milliseconds.",
      "bench_register"};
  uint64_t count = 10000;
  std::string tensor_bytes_text = "64K";
  std::string model_bytes_text = "1G";
  int runs = 5;
  std::string transports_text = "shm,tcp";
  bool json = false;
  app.add_option("--tensors", count, "Number of tensors")
      ->capture_default_str()
      ->check(CLI::Range(1, 10000000));
  app.add_option("--tensor-bytes", tensor_bytes_text,
                 "Bytes of every tensor (K, M, G suffixes are binary), or 'mix': the size mix of a "
                 "Qwen3-MoE-like model (tiny norms, 128 equal experts per layer, large embedding and "
                 "lm_head) scaled to --model-bytes")
      ->capture_default_str();
  app.add_option("--model-bytes", model_bytes_text, "Arena size for --tensor-bytes mix")
      ->capture_default_str();
  app.add_option("--runs", runs, "Runs of (a), (b) and (c)")
      ->capture_default_str()
      ->check(CLI::Range(1, 1000));
  app.add_option("--transports", transports_text,
                 "Comma-separated: shm (UCX posix,sysv,cma,self) and/or tcp (UCX tcp)")
      ->capture_default_str();
  app.add_flag("--json", json, "Print one JSON object on stdout instead of a table");
  app.footer("Exit codes: 0 success, 1 failure (e.g. a UCX error), 2 usage error.");
  if (const int rc = ParseArgs(app, argc, argv); rc >= 0) return rc;

  auto usage = [](const Status& s) {
    std::cerr << "bench_register: " << s.message() << "\n";
    return 2;
  };
  std::vector<uint64_t> sizes;
  const bool mix = tensor_bytes_text == "mix";
  if (mix) {
    auto model_bytes = ParseSize(model_bytes_text, "--model-bytes");
    if (!model_bytes.ok()) return usage(model_bytes.status());
    sizes = MixSizes(count, *model_bytes);
  } else {
    auto each = ParseSize(tensor_bytes_text, "--tensor-bytes");
    if (!each.ok()) return usage(each.status());
    sizes.assign(count, *each);
  }
  std::vector<TransportSpec> specs;
  for (size_t start = 0;;) {
    const size_t comma = transports_text.find(',', start);
    auto spec =
        ParseTransport(transports_text.substr(start, comma == std::string::npos ? comma : comma - start));
    if (!spec.ok()) return usage(spec.status());
    specs.push_back(*spec);
    if (comma == std::string::npos) break;
    start = comma + 1;
  }

  std::vector<Tensor> tensors;
  uint64_t arena_bytes = 0;
  for (uint64_t s : sizes) {
    tensors.push_back({arena_bytes, s});
    arena_bytes += RoundUp(s, kAlign);
  }
  std::vector<uint64_t> sorted = sizes;
  std::sort(sorted.begin(), sorted.end());
  const std::string mix_text = mix ? "mix: " + HumanSize(sorted.front()) + " .. " + HumanSize(sorted.back()) +
                                         ", median " + HumanSize(sorted[sorted.size() / 2])
                                   : HumanSize(sorted.front()) + " each";

  auto arena = Buffer::Allocate(arena_bytes, "the arena");
  if (!arena.ok()) {
    std::cerr << "bench_register: " << arena.status().ToString() << "\n";
    return 1;
  }
  arena->Touch(1);

  nlohmann::ordered_json out = {{"benchmark", "register"},
                                {"tensors", count},
                                {"tensor_bytes", tensor_bytes_text},
                                {"arena_bytes", arena_bytes},
                                {"tensor_bytes_min", sorted.front()},
                                {"tensor_bytes_median", sorted[sorted.size() / 2]},
                                {"tensor_bytes_max", sorted.back()},
                                {"runs", runs},
                                {"transports", nlohmann::ordered_json::array()}};
  if (!json) {
    std::printf("UCX registration: %llu tensors (%s), arena %s (%llu bytes), %d runs, medians in ms\n",
                static_cast<unsigned long long>(count), mix_text.c_str(), HumanSize(arena_bytes).c_str(),
                static_cast<unsigned long long>(arena_bytes), runs);
    std::printf("%-5s %11s %14s %11s %9s %11s %13s %11s %11s %11s\n", "tls", "(a) arena", "(b) per-tensor",
                "per call", "b/a", "dereg (a)", "dereg (b)", "(c) alloc", "free (c)", "touch (c)");
    std::fflush(stdout);
  }
  int rc = 0;
  for (const TransportSpec& spec : specs) {
    UcxOptions options;
    options.name = "bench-" + spec.name;
    options.transports = spec.tls;
    auto transport = MakeUcxTransport(options);
    if (!transport.ok()) {
      std::cerr << "bench_register: " << spec.name << ": " << transport.status().ToString() << "\n";
      rc = 1;
      continue;
    }
    ProgressLoop loop(std::move(transport).value());
    std::vector<RunTimes> times;
    Status failed;
    for (int run = 0; run < runs; ++run) {
      auto t = RunOnce(loop, *arena, tensors);
      if (!t.ok()) {
        failed = t.status();
        break;
      }
      times.push_back(*t);
    }
    loop.Stop();
    if (!failed.ok()) {
      std::cerr << "bench_register: " << spec.name << ": " << failed.ToString() << "\n";
      rc = 1;
      continue;
    }
    auto column = [&](double RunTimes::*field) {
      std::vector<double> v;
      for (const RunTimes& t : times) v.push_back(t.*field);
      return v;
    };
    const double a = Summarize(column(&RunTimes::register_arena)).median;
    const double b = Summarize(column(&RunTimes::register_each)).median;
    const double ratio = a > 0 ? b / a : 0;
    if (json) {
      out["transports"].push_back(
          {{"name", spec.name},
           {"ucx_tls", spec.tls},
           {"register_arena_s", StatsJson(column(&RunTimes::register_arena))},
           {"register_per_tensor_s", StatsJson(column(&RunTimes::register_each))},
           {"register_per_tensor_call_s", b / static_cast<double>(count)},
           {"ratio_per_tensor_over_arena", ratio},
           {"deregister_arena_s", StatsJson(column(&RunTimes::deregister_arena))},
           {"deregister_per_tensor_s", StatsJson(column(&RunTimes::deregister_each))},
           {"ucx_allocate_s", StatsJson(column(&RunTimes::allocate))},
           {"ucx_allocate_free_s", StatsJson(column(&RunTimes::free_allocated))},
           {"ucx_allocate_first_touch_s", StatsJson(column(&RunTimes::touch_allocated))}});
    } else {
      char ratio_text[32];
      std::snprintf(ratio_text, sizeof ratio_text, "%.0fx", ratio);
      std::printf("%-5s %11s %14s %9.2fus %9s %11s %13s %11s %11s %11s\n", spec.name.c_str(), Ms(a).c_str(),
                  Ms(b).c_str(), b / static_cast<double>(count) * 1e6, ratio_text,
                  Ms(Summarize(column(&RunTimes::deregister_arena)).median).c_str(),
                  Ms(Summarize(column(&RunTimes::deregister_each)).median).c_str(),
                  Ms(Summarize(column(&RunTimes::allocate)).median).c_str(),
                  Ms(Summarize(column(&RunTimes::free_allocated)).median).c_str(),
                  Ms(Summarize(column(&RunTimes::touch_allocated)).median).c_str());
      std::fflush(stdout);
    }
  }
  if (json) std::cout << out.dump(2) << std::endl;
  return rc;
}

}  // namespace
}  // namespace weightport::bench

int main(int argc, char** argv) { return weightport::bench::Main(argc, argv); }
