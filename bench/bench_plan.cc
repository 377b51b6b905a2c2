// bench_plan: how long MakePlan takes on a trillion-parameter MoE.
//
// The tensor table (no weight bytes) has the shapes of a DeepSeek-V3 / Kimi-K2 class model: 61
// layers of 384 routed experts (3 matrices of 2048 x 7168 each) plus one shared expert, attention,
// norms and the router, vocabulary 163840, bf16: ~71k tensors, ~1.05T parameters (attention in
// Llama naming stands in for MLA). Layouts:
//   source      = a trainer on 256 ranks: pipeline 8 x expert parallel 32; the tensors outside the
//                 experts (attention, norms, router, shared expert) replicated over the 32 ranks of a
//                 stage (DeepSeek-style: experts EP, the rest data parallel);
//   destination = inference on 128 ranks: 16 replicas x expert parallel 8, attention tensor
//                 parallel over the same 8 ranks (vLLM-style EP; one 8-GPU node per replica).
// Topology: 8 ranks per host, 3.2 Tb/s per host NIC (8 x 400G), 7.2 Tb/s inside a host.
// Every size is an option, so smaller cases run in seconds.
#include <sys/resource.h>

#include <algorithm>
#include <cstdio>
#include <iostream>

#include <nlohmann/json.hpp>

#include "bench_util.h"
#include "weightport/core/placement_builders.h"
#include "weightport/format/synthetic_model.h"
#include "weightport/plan/planner.h"

namespace weightport::bench {
namespace {

struct Args {
  int layers = 61, experts = 384, hidden = 7168, moe_intermediate = 2048, vocab = 163840;
  int src_pp = 8, src_ep = 32;
  int dst_replicas = 16, dst_ep = 8;
  int gpus_per_host = 8;
  double nic_gbps = 3200, intra_host_gbps = 7200;
  int relay_fanout = 1;
  std::string chunk_bytes = "4M";
  int runs = 5;
  bool json = false;
};

uint64_t PeakRssBytes() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<uint64_t>(u.ru_maxrss) * 1024;
}

ModelSpec MoeSpec(const Args& a) {
  ModelSpec s;
  s.preset = "custom";
  s.arch = ModelArch::kMoe;
  s.layers = a.layers;
  s.hidden = a.hidden;
  s.heads = 64;
  s.kv_heads = 64;
  s.head_dim = 128;
  s.vocab = a.vocab;
  s.experts = a.experts;
  s.moe_intermediate = a.moe_intermediate;
  s.shared_experts = 1;
  s.dtype = DType::kBF16;
  return s;
}

Result<Topology> HostsOf(const Args& a, int src_ranks, int dst_ranks) {
  std::vector<HostSpec> hosts;
  if (a.gpus_per_host < 1) return Topology::Make({}, a.nic_gbps, a.intra_host_gbps);
  for (int r = 0; r < src_ranks; r += a.gpus_per_host) {
    HostSpec h{"train" + std::to_string(r / a.gpus_per_host), a.nic_gbps, {}, {}};
    for (int i = r; i < std::min(src_ranks, r + a.gpus_per_host); ++i) h.src_ranks.push_back(i);
    hosts.push_back(std::move(h));
  }
  for (int r = 0; r < dst_ranks; r += a.gpus_per_host) {
    HostSpec h{"infer" + std::to_string(r / a.gpus_per_host), a.nic_gbps, {}, {}};
    for (int i = r; i < std::min(dst_ranks, r + a.gpus_per_host); ++i) h.dst_ranks.push_back(i);
    hosts.push_back(std::move(h));
  }
  return Topology::Make(std::move(hosts), a.nic_gbps, a.intra_host_gbps);
}

size_t CountShards(const Placement& p) {
  size_t n = 0;
  for (int r : p.ranks()) n += p.shards(r).size();
  return n;
}

int Run(const Args& a) {
  auto chunk = ParseSize(a.chunk_bytes, "--chunk-bytes");
  if (!chunk.ok()) return std::cerr << "bench_plan: " << chunk.status().ToString() << "\n", 2;
  const ModelSpec spec = MoeSpec(a);
  std::vector<TensorMeta> tensors = ModelTensors(spec);
  uint64_t model_bytes = 0;
  for (const TensorMeta& t : tensors) model_bytes += t.bytes;

  auto t0 = Clock::now();
  const std::vector<MeshAxis> src_axes = {PipelineAxis("pp", a.src_pp), ExpertParallelAxis("ep", a.src_ep)};
  auto src = BuildMesh(tensors, src_axes);
  if (!src.ok()) return std::cerr << "bench_plan: source: " << src.status().ToString() << "\n", 1;
  const double src_build_s = Seconds(Clock::now() - t0);
  ExpertOptions serve;
  serve.non_expert_tp = LlamaTpRules();
  t0 = Clock::now();
  const std::vector<MeshAxis> dst_axes = {ReplicaAxis("dp", a.dst_replicas),
                                          ExpertParallelAxis("ep", a.dst_ep, serve)};
  auto dst = BuildMesh(tensors, dst_axes);
  if (!dst.ok()) return std::cerr << "bench_plan: destination: " << dst.status().ToString() << "\n", 1;
  const double dst_build_s = Seconds(Clock::now() - t0);
  auto topology = HostsOf(a, static_cast<int>(src->num_ranks()), static_cast<int>(dst->num_ranks()));
  if (!topology.ok()) return std::cerr << "bench_plan: topology: " << topology.status().ToString() << "\n", 1;

  PlanOptions options;
  options.chunk_bytes = *chunk;
  options.relay_fanout = a.relay_fanout;
  std::vector<double> times;
  Plan plan;
  for (int i = 0; i < a.runs; ++i) {
    t0 = Clock::now();
    auto p = MakePlan(*src, *dst, *topology, options);
    times.push_back(Seconds(Clock::now() - t0));
    if (!p.ok()) return std::cerr << "bench_plan: MakePlan: " << p.status().ToString() << "\n", 1;
    if (i + 1 == a.runs) plan = std::move(p).value();
  }
  const Stats st = Summarize(times);
  uint64_t relayed = 0, chunks = 0;
  for (const PlanStep& s : plan.steps) relayed += s.from.side == PlanSide::kDestination, chunks += s.chunks;
  const uint64_t peak_rss = PeakRssBytes();

  if (a.json) {
    nlohmann::ordered_json j = {
        {"model",
         {{"tensors", tensors.size()}, {"bytes", model_bytes}, {"layers", a.layers}, {"experts", a.experts}}},
        {"src",
         {{"layout", "pp" + std::to_string(a.src_pp) + " x ep" + std::to_string(a.src_ep)},
          {"ranks", src->num_ranks()},
          {"shards", CountShards(*src)},
          {"build_s", src_build_s}}},
        {"dst",
         {{"layout",
           std::to_string(a.dst_replicas) + " replicas x ep" + std::to_string(a.dst_ep) + " (attention tp)"},
          {"ranks", dst->num_ranks()},
          {"shards", CountShards(*dst)},
          {"build_s", dst_build_s}}},
        {"hosts", topology->hosts().size()},
        {"runs", a.runs},
        {"make_plan_s", {{"median", st.median}, {"min", st.min}, {"max", st.max}}},
        {"steps", plan.steps.size()},
        {"relayed_steps", relayed},
        {"chunks", chunks},
        {"bytes", plan.TotalBytes()},
        {"destination_bytes", plan.DestinationBytes()},
        {"lower_bound_s", plan.estimate.lower_bound_s},
        {"predicted_s", plan.estimate.predicted_s},
        {"peak_rss_bytes", peak_rss}};
    std::cout << j.dump(2) << "\n";
    return 0;
  }
  std::printf("model        %zu tensors, %s (%d layers x %d experts, bf16)\n", tensors.size(),
              HumanSize(model_bytes).c_str(), a.layers, a.experts);
  std::printf("source       pp %d x ep %d: %zu ranks, %zu shards (built in %.3f s)\n", a.src_pp, a.src_ep,
              src->num_ranks(), CountShards(*src), src_build_s);
  std::printf("destination  %d replicas x ep %d: %zu ranks, %zu shards (built in %.3f s)\n", a.dst_replicas,
              a.dst_ep, dst->num_ranks(), CountShards(*dst), dst_build_s);
  std::printf("MakePlan     median %.3f s (min %.3f, max %.3f, %d runs)\n", st.median, st.min, st.max,
              a.runs);
  std::printf("plan         %zu steps (%llu relayed), %llu chunks, %s moved, destination holds %s\n",
              plan.steps.size(), static_cast<unsigned long long>(relayed),
              static_cast<unsigned long long>(chunks), HumanSize(plan.TotalBytes()).c_str(),
              HumanSize(plan.DestinationBytes()).c_str());
  std::printf("estimate     lower bound %.3f s, predicted %.3f s (%zu hosts)\n", plan.estimate.lower_bound_s,
              plan.estimate.predicted_s, topology->hosts().size());
  std::printf("peak RSS     %s\n", HumanSize(peak_rss).c_str());
  return 0;
}

}  // namespace
}  // namespace weightport::bench

int main(int argc, char** argv) {
  weightport::bench::Args a;
  CLI::App app{
      "Times the planner on a 1T-parameter MoE: a 256-rank trainer layout to a 128-rank inference layout"};
  app.add_option("--layers", a.layers, "Decoder layers")->check(CLI::Range(1, 1024))->capture_default_str();
  app.add_option("--experts", a.experts, "Routed experts per layer")
      ->check(CLI::Range(1, 4096))
      ->capture_default_str();
  app.add_option("--hidden", a.hidden, "Hidden size")->check(CLI::Range(64, 65536))->capture_default_str();
  app.add_option("--moe-intermediate", a.moe_intermediate, "Width of each expert")
      ->check(CLI::Range(1, 65536))
      ->capture_default_str();
  app.add_option("--src-pp", a.src_pp, "Source pipeline stages")
      ->check(CLI::Range(1, 1024))
      ->capture_default_str();
  app.add_option("--src-ep", a.src_ep, "Source expert parallel ranks per stage")
      ->check(CLI::Range(1, 4096))
      ->capture_default_str();
  app.add_option("--dst-replicas", a.dst_replicas, "Destination replicas")
      ->check(CLI::Range(1, 4096))
      ->capture_default_str();
  app.add_option("--dst-ep", a.dst_ep, "Destination expert parallel ranks per replica")
      ->check(CLI::Range(1, 4096))
      ->capture_default_str();
  app.add_option("--gpus-per-host", a.gpus_per_host, "Ranks per host (0: every rank a host of its own)")
      ->check(CLI::Range(0, 1024))
      ->capture_default_str();
  app.add_option("--nic-gbps", a.nic_gbps, "NIC bandwidth per host, Gb/s each way")->capture_default_str();
  app.add_option("--intra-host-gbps", a.intra_host_gbps, "Bandwidth inside a host, Gb/s")
      ->capture_default_str();
  app.add_option("--relay-fanout", a.relay_fanout, "0 direct, 1 chain, K tree")
      ->check(CLI::Range(0, 1024))
      ->capture_default_str();
  app.add_option("--chunk-bytes", a.chunk_bytes, "Chunk size (4M, 16M, ...)")->capture_default_str();
  app.add_option("--runs", a.runs, "MakePlan runs; the median is reported")
      ->check(CLI::Range(1, 100))
      ->capture_default_str();
  app.add_flag("--json", a.json, "Print JSON");
  if (int rc = weightport::bench::ParseArgs(app, argc, argv); rc >= 0) return rc;
  return weightport::bench::Run(a);
}
