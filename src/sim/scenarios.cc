#include "weightport/sim/scenarios.h"

#include <algorithm>
#include <chrono>

#include "sim/scenario_build.h"
#include "sim/scenario_models.h"
#include "weightport/core/placement_builders.h"
#include "weightport/plan/graph_topology.h"
#include "weightport/plan/planner.h"
#include "weightport/topology/preset_params.h"
#include "weightport/topology/presets.h"

namespace weightport::sim {
namespace {

using nlohmann::json;
using topology::Graph;
using topology::internal::PresetParams;

constexpr const char* kKimi = "kimi-k2-update";
constexpr const char* kDense = "dense-50b-sync";
constexpr const char* kReplace = "node-replacement";
constexpr const char* kFanout = "fanout-16k";
constexpr const char* kTestbed = "testbed";

json Defaults(std::string_view name) {
  if (name == kKimi)
    return {{"layers", 61}, {"experts", 384},  {"src_pp", 8},    {"src_ep", 32},     {"dst_replicas", 8},
            {"dst_ep", 16}, {"nic_gbps", 400}, {"chunk_mib", 4}, {"relay_fanout", 1}};
  if (name == kDense)
    return {{"topology", "dgx-h100"}, {"gpus", 1024},   {"tp", 8},
            {"layers", 56},           {"chunk_mib", 4}, {"relay_fanout", 1}};
  if (name == kReplace)
    return {{"topology", "dgx-h100"}, {"gpus", 256},    {"tp", 8},       {"failed_host", 5},
            {"layers", 56},           {"optimizer", 0}, {"chunk_mib", 4}};
  if (name == kFanout)
    return {{"topology", "dgx-h100"}, {"gpus", 16384},  {"model_gb", 16},
            {"buckets", 64},          {"chunk_mib", 4}, {"relay_fanout", 1}};
  if (name == kTestbed) return TestbedDefaults();
  return nullptr;
}

// A preset with at least `gpus` endpoints: sized by its own unit (node, rack, cube).
Result<Graph> GraphWithGpus(const std::string& preset, int gpus) {
  json params = json::object();
  if (preset == "dgx-h100" || preset == "dgx-h200") {
    params["nodes"] = (gpus + 7) / 8;
  } else if (preset == "gb200-nvl72") {
    params["racks"] = (gpus + 71) / 72;
  } else if (preset == "tpuv4") {
    params["cubes"] = (gpus + 63) / 64;
  } else if (preset == "infinitehbd") {
    params["nodes"] = (gpus + 3) / 4;
  } else if (preset == "fat-tree") {
    params["hosts"] = gpus;
  } else {
    return InvalidArgument("unknown topology preset '" + preset + "'");
  }
  WP_ASSIGN_OR_RETURN(Graph g, topology::MakePreset(preset, params));
  if (static_cast<int>(g.Endpoints().size()) < gpus)
    return InvalidArgument("preset '" + preset + "' sized for " + std::to_string(gpus) + " GPUs has only " +
                           std::to_string(g.Endpoints().size()));
  return g;
}

// The largest model a scenario moves, in GB: 1 PB, far above any model and far below the 2^64
// bytes a byte count holds.
constexpr double kMaxModelGb = 1e6;

// Shards the layouts of a scenario hold (`estimate`, counted from its parameters) against the
// mesh limit, before the topology and layouts are built; the error names `param` and its value.
Status CheckShards(const PresetParams& p, const char* param, int64_t estimate, const std::string& how) {
  if (estimate <= kMaxMeshShards) return Status::Ok();
  return p.Error(param, "= " + p.merged().at(param).dump() + " makes " + how + " = " +
                            std::to_string(estimate) + " shards, over the limit of " +
                            std::to_string(kMaxMeshShards));
}

Status BuildKimi(Scenario& s, const PresetParams& p) {
  WP_ASSIGN_OR_RETURN(int layers, p.Int("layers", 1, 1024));
  WP_ASSIGN_OR_RETURN(int experts, p.Int("experts", 1, 4096));
  WP_ASSIGN_OR_RETURN(int src_pp, p.Int("src_pp", 1, 1024));
  WP_ASSIGN_OR_RETURN(int src_ep, p.Int("src_ep", 1, 4096));
  WP_ASSIGN_OR_RETURN(int dst_replicas, p.Int("dst_replicas", 1, 4096));
  WP_ASSIGN_OR_RETURN(int dst_ep, p.Int("dst_ep", 1, 4096));
  WP_ASSIGN_OR_RETURN(double nic_gbps, p.Number("nic_gbps"));
  WP_ASSIGN_OR_RETURN(int chunk_mib, p.Int("chunk_mib", 1, 1024));
  WP_ASSIGN_OR_RETURN(int fanout, p.Int("relay_fanout", 0, 1024));
  const int src_ranks = src_pp * src_ep, dst_ranks = dst_replicas * dst_ep;
  const std::vector<TensorMeta> tensors = ModelTensors(KimiK2LikeSpec(layers, experts, DType::kF8E4M3));
  // Each expert tensor is held once per replica; the others by every EP rank (whole or TP-split).
  int64_t expert = 0;
  for (const TensorMeta& t : tensors) expert += ExpertIndex(t.name) >= 0;
  const int64_t other = static_cast<int64_t>(tensors.size()) - expert;
  WP_RETURN_IF_ERROR(
      CheckShards(p, "src_ep", src_ep * other + expert, "src_ep x non-expert tensors + experts"));
  WP_RETURN_IF_ERROR(CheckShards(p, "dst_replicas", int64_t{dst_replicas} * (dst_ep * other + expert),
                                 "dst_replicas x (dst_ep x non-expert tensors + experts)"));
  WP_ASSIGN_OR_RETURN(s.graph, topology::MakePreset("dgx-h100", {{"nodes", (src_ranks + dst_ranks + 7) / 8},
                                                                 {"nic_gbps", nic_gbps}}));
  const std::vector<MeshAxis> src_axes = {PipelineAxis("pp", src_pp), ExpertParallelAxis("ep", src_ep)};
  ExpertOptions serve;
  serve.non_expert_tp = LlamaTpRules();
  const std::vector<MeshAxis> dst_axes = {ReplicaAxis("dp", dst_replicas),
                                          ExpertParallelAxis("ep", dst_ep, serve)};
  WP_ASSIGN_OR_RETURN(Placement src, BuildMesh(tensors, src_axes));
  WP_ASSIGN_OR_RETURN(Placement dst, BuildMesh(tensors, dst_axes));
  const std::vector<int> gpus = s.graph.Endpoints();
  s.endpoints = {Range(gpus, 0, src_ranks), Range(gpus, src_ranks, dst_ranks)};
  s.description = "Kimi-K2-like MoE (" + std::to_string(layers) + " layers x " + std::to_string(experts) +
                  " experts, " + std::to_string(tensors.size()) +
                  " tensors, fp8 on the wire): " + std::to_string(src_ranks) + " trainer GPUs (pp " +
                  std::to_string(src_pp) + " x ep " + std::to_string(src_ep) + ") -> " +
                  std::to_string(dst_ranks) + " inference GPUs (" + std::to_string(dst_replicas) +
                  " replicas x ep " + std::to_string(dst_ep) + ") on dgx-h100";
  s.anchor_s = 1.3;
  s.anchor =
      "Perplexity weight transfer: Kimi-K2 1T, 256 BF16 trainer GPUs -> 128 FP8 inference GPUs in 1.3 s";
  return Finish(s, src, dst, static_cast<uint64_t>(chunk_mib) << 20, fanout);
}

Status BuildDense(Scenario& s, const PresetParams& p) {
  WP_ASSIGN_OR_RETURN(std::string preset, p.String("topology"));
  WP_ASSIGN_OR_RETURN(int gpus, p.Int("gpus", 1, 1 << 20));
  WP_ASSIGN_OR_RETURN(int tp, p.Int("tp", 1, 1024));
  WP_ASSIGN_OR_RETURN(int layers, p.Int("layers", 1, 1024));
  WP_ASSIGN_OR_RETURN(int chunk_mib, p.Int("chunk_mib", 1, 1024));
  WP_ASSIGN_OR_RETURN(int fanout, p.Int("relay_fanout", 0, 1024));
  if (gpus % tp != 0) return p.Error("gpus", "must be a multiple of tp");
  const std::vector<TensorMeta> tensors = ModelTensors(Dense50bSpec(layers));
  WP_RETURN_IF_ERROR(
      CheckShards(p, "gpus", int64_t{gpus} * static_cast<int64_t>(tensors.size()), "gpus x tensors"));
  WP_ASSIGN_OR_RETURN(s.graph, GraphWithGpus(preset, gpus));
  WP_ASSIGN_OR_RETURN(Placement src, BuildMesh(tensors, std::vector<MeshAxis>{TensorParallelAxis("tp", tp)}));
  WP_ASSIGN_OR_RETURN(Placement dst, BuildMesh(tensors, std::vector<MeshAxis>{ReplicaAxis("dp", gpus / tp),
                                                                              TensorParallelAxis("tp", tp)}));
  const std::vector<int> eps = s.graph.Endpoints();
  // The source group is the first replica's own GPUs: its copy is local.
  s.endpoints = {Range(eps, 0, tp), Range(eps, 0, gpus)};
  s.description = "50B dense model (" + std::to_string(tensors.size()) + " tensors, bf16) from one TP-" +
                  std::to_string(tp) + " group to " + std::to_string(gpus / tp) + " replicas x TP " +
                  std::to_string(tp) + " (" + std::to_string(gpus) + " GPUs) on " + preset;
  return Finish(s, src, dst, static_cast<uint64_t>(chunk_mib) << 20, fanout);
}

Status BuildReplacement(Scenario& s, const PresetParams& p) {
  WP_ASSIGN_OR_RETURN(std::string preset, p.String("topology"));
  WP_ASSIGN_OR_RETURN(int gpus, p.Int("gpus", 2, 1 << 20));
  WP_ASSIGN_OR_RETURN(int tp, p.Int("tp", 1, 1024));
  WP_ASSIGN_OR_RETURN(int failed, p.Int("failed_host", 0, 1 << 20));
  WP_ASSIGN_OR_RETURN(int layers, p.Int("layers", 1, 1024));
  WP_ASSIGN_OR_RETURN(int optimizer, p.Int("optimizer", 0, 1));
  WP_ASSIGN_OR_RETURN(int chunk_mib, p.Int("chunk_mib", 1, 1024));
  if (gpus % tp != 0) return p.Error("gpus", "must be a multiple of tp");
  const int64_t per_rank =
      static_cast<int64_t>(ModelTensors(Dense50bSpec(layers)).size()) * (optimizer ? 4 : 1);
  WP_RETURN_IF_ERROR(CheckShards(p, "gpus", gpus * per_rank, "gpus x tensors"));
  WP_ASSIGN_OR_RETURN(s.graph, GraphWithGpus(preset, gpus));
  const std::vector<int> eps = Range(s.graph.Endpoints(), 0, gpus);
  // Hosts in the order their GPUs come; the failed one by that position.
  std::vector<int> hosts;
  for (int e : eps)
    if (std::find(hosts.begin(), hosts.end(), s.graph.nodes()[e].host) == hosts.end())
      hosts.push_back(s.graph.nodes()[e].host);
  if (failed >= static_cast<int>(hosts.size()))
    return p.Error("failed_host",
                   "must be below the " + std::to_string(hosts.size()) + " hosts of the cluster");
  // Replica r is GPUs [r * tp, (r + 1) * tp) of the cluster. The failed host's GPUs hold some
  // ranks of one or more replicas (all of one, or part of one when a TP group spans hosts); those
  // replicas are no source, every other one is.
  std::vector<int> on_failed, ranks, others;
  std::vector<char> lost(eps.size() / tp, 0);
  for (size_t i = 0; i < eps.size(); ++i) {
    if (s.graph.nodes()[eps[i]].host != hosts[failed]) continue;
    on_failed.push_back(eps[i]);
    ranks.push_back(static_cast<int>(i % tp));
    lost[i / tp] = 1;
  }
  for (size_t r = 0; r < lost.size(); ++r)
    if (!lost[r]) others.insert(others.end(), eps.begin() + r * tp, eps.begin() + (r + 1) * tp);
  const int replicas = static_cast<int>(others.size()) / tp;
  if (replicas < 1) return p.Error("gpus", "leaves no other replica to refill from");
  std::vector<TensorMeta> tensors = ModelTensors(Dense50bSpec(layers));
  if (optimizer) {
    WP_ASSIGN_OR_RETURN(tensors, WithAdamState(std::move(tensors)));
  }
  WP_ASSIGN_OR_RETURN(Placement src, BuildMesh(tensors, std::vector<MeshAxis>{ReplicaAxis("dp", replicas),
                                                                              TensorParallelAxis("tp", tp)}));
  WP_ASSIGN_OR_RETURN(Placement group,
                      BuildMesh(tensors, std::vector<MeshAxis>{TensorParallelAxis("tp", tp)}));
  // The replacement's GPU k takes over TP rank ranks[k].
  WP_ASSIGN_OR_RETURN(Placement dst, Placement::Make(tensors));
  for (size_t k = 0; k < ranks.size(); ++k) {
    dst.AddRank(static_cast<int>(k));
    for (const Shard& shard : group.shards(ranks[k])) dst.AddShard(static_cast<int>(k), shard);
  }
  s.endpoints = {others, on_failed};
  s.description = "a replacement for host " + std::to_string(failed) + " refills its " +
                  std::to_string(on_failed.size()) + " GPUs' shards of TP-" + std::to_string(tp) +
                  " replicas of a 50B dense model (bf16" +
                  (optimizer ? " weights, fp32 master and Adam moments" : "") + ") from " +
                  std::to_string(replicas) + " data-parallel replicas on " + preset;
  return Finish(s, src, dst, static_cast<uint64_t>(chunk_mib) << 20, 1);
}

Status BuildFanout(Scenario& s, const PresetParams& p) {
  WP_ASSIGN_OR_RETURN(std::string preset, p.String("topology"));
  WP_ASSIGN_OR_RETURN(int gpus, p.Int("gpus", 1, 1 << 20));
  WP_ASSIGN_OR_RETURN(double model_gb, p.Number("model_gb"));
  WP_ASSIGN_OR_RETURN(int buckets, p.Int("buckets", 1, 1 << 16));
  WP_ASSIGN_OR_RETURN(int chunk_mib, p.Int("chunk_mib", 1, 1024));
  WP_ASSIGN_OR_RETURN(int fanout, p.Int("relay_fanout", 0, 1024));
  // Range-checked before the cast: 1e12 GB overflowed uint64_t and reported "2.00 MiB moved".
  if (model_gb > kMaxModelGb)
    return p.Error("model_gb", "must be at most " + std::to_string(static_cast<int64_t>(kMaxModelGb)) +
                                   " (got " + p.merged().at("model_gb").dump() + ")");
  if (model_gb * 1e9 < 2.0 * buckets)
    return p.Error("model_gb", "must give every one of the " + std::to_string(buckets) +
                                   " buckets at least one bf16 element (got " +
                                   p.merged().at("model_gb").dump() + ")");
  WP_RETURN_IF_ERROR(CheckShards(p, "gpus", int64_t{gpus} * buckets, "gpus x buckets"));
  WP_ASSIGN_OR_RETURN(s.graph, GraphWithGpus(preset, gpus));
  const std::vector<TensorMeta> tensors = BucketTensors(static_cast<uint64_t>(model_gb * 1e9), buckets);
  WP_ASSIGN_OR_RETURN(Placement src, BuildMesh(tensors, std::vector<MeshAxis>{ReplicaAxis("dp", 1)}));
  WP_ASSIGN_OR_RETURN(Placement dst, BuildMesh(tensors, std::vector<MeshAxis>{ReplicaAxis("dp", gpus)}));
  const std::vector<int> eps = s.graph.Endpoints();
  s.endpoints = {Range(eps, 0, 1), Range(eps, 0, gpus)};
  s.description =
      "one GPU's model (" + p.merged().at("model_gb").dump() + " GB in " + std::to_string(buckets) +
      " bf16 buckets) to all " + std::to_string(gpus) + " GPUs of " + preset +
      (fanout == 1 ? " through a relay chain" : " through relay trees of fan-out " + std::to_string(fanout));
  return Finish(s, src, dst, static_cast<uint64_t>(chunk_mib) << 20, fanout);
}

}  // namespace

std::vector<int> Range(const std::vector<int>& endpoints, int from, int count) {
  return std::vector<int>(endpoints.begin() + from, endpoints.begin() + from + count);
}

Status Finish(Scenario& s, const Placement& src, const Placement& dst, uint64_t chunk_bytes,
              int relay_fanout) {
  WP_ASSIGN_OR_RETURN(Topology hosts, PlannerTopology(s.graph, s.endpoints.src_nodes, s.endpoints.dst_nodes));
  PlanOptions options;
  options.chunk_bytes = chunk_bytes;
  options.relay_fanout = relay_fanout;
  const auto start = std::chrono::steady_clock::now();
  auto plan = MakePlan(src, dst, hosts, options);
  if (!plan.ok()) return plan.status().WithContext("scenario '" + s.name + "'");
  s.plan_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  s.plan = std::move(plan).value();
  return Status::Ok();
}

std::vector<ScenarioInfo> Scenarios() {
  return {
      {kKimi, "Kimi-K2-like 1T MoE, 256 trainer GPUs -> 128 FP8 inference GPUs on dgx-h100 (anchor 1.3 s)",
       Defaults(kKimi)},
      {kDense, "50B dense weight sync from one TP group to every GPU of a 1,024-GPU cluster, on any preset",
       Defaults(kDense)},
      {kReplace, "a replacement node refills a failed node's shards from its data-parallel replicas",
       Defaults(kReplace)},
      {kFanout, "one GPU's 16 GB model to all 16,384 GPUs of a dgx-h100 fabric", Defaults(kFanout)},
      {kTestbed, "the testbed benchmark cases (bench/run-fanout-bench): 8 hosts on one switch at 1 Gb/s",
       Defaults(kTestbed)},
  };
}

Result<Scenario> BuildScenario(std::string_view name, const json& params) {
  const json defaults = Defaults(name);
  if (defaults.is_null()) {
    std::string known;
    for (const ScenarioInfo& i : Scenarios()) known += (known.empty() ? "" : ", ") + i.name;
    return NotFound("unknown scenario '" + std::string(name) + "' (known: " + known + ")");
  }
  WP_ASSIGN_OR_RETURN(PresetParams p, PresetParams::Merge(name, defaults, params, "scenario"));
  Scenario s;
  s.name = std::string(name);
  s.params = p.merged();
  Status st = name == kKimi      ? BuildKimi(s, p)
              : name == kDense   ? BuildDense(s, p)
              : name == kReplace ? BuildReplacement(s, p)
              : name == kTestbed ? BuildTestbed(s, p)
                                 : BuildFanout(s, p);
  if (!st.ok()) return st;
  return s;
}

}  // namespace weightport::sim
