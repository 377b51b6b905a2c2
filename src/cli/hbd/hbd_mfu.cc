// weightport hbd mfu: the best-MFU training layout of a model per HBD architecture and cluster size,
// its step time split, and its MFU against DGX's (sim/hbd/mfu_model.h).
#include <cstdio>
#include <iostream>

#include <nlohmann/json.hpp>

#include "cli/cli_common.h"
#include "hbd_options.h"
#include "hbd_trace_run.h"
#include "weightport/sim/hbd/mfu_model.h"

namespace weightport::cli {
namespace {

using namespace sim::hbd;

Result<std::vector<int>> ParseGpus(const std::string& text) {
  WP_ASSIGN_OR_RETURN(std::vector<long> counts,
                      ParseIntegerList(text, "--gpus", "not a GPU count in [1, 2^24]", 1, 1 << 24));
  if (counts.empty()) return InvalidArgument("--gpus: give at least one GPU count");
  return std::vector<int>(counts.begin(), counts.end());
}

nlohmann::ordered_json PointJson(const std::string& arch, const MfuPoint& p) {
  nlohmann::ordered_json j = {{"arch", arch},
                              {"cluster_gpus", p.cluster_gpus},
                              {"counted_gpus", p.counted_gpus},
                              {"fault_ratio", p.fault_ratio}};
  if (!p.found) {
    j["cannot_run"] = p.why_none;
    return j;
  }
  const StepBreakdown& s = p.step;
  j["waste"] = p.waste;
  j["tp"] = p.config.tp;
  j["pp"] = p.config.pp;
  j["dp"] = p.config.dp;
  j["ep"] = p.config.ep;
  j["recompute"] = p.config.full_recompute ? "full" : "selective";
  j["microbatches"] = s.microbatches;
  j["step_s"] = s.step_s;
  j["compute_s"] = s.compute_s;
  j["tp_comm_s"] = s.tp_s;
  j["a2a_s"] = s.a2a_s;
  j["a2a_on"] = s.a2a_on_hbd ? "hbd" : "dcn";
  j["pp_p2p_s"] = s.pp_s;
  j["bubble_s"] = s.bubble_s;
  j["dp_s"] = s.dp_s;
  j["dp_exposed_s"] = s.dp_exposed_s;
  j["memory_gb"] = s.memory_bytes / 1e9;
  j["mfu"] = s.mfu;
  return j;
}

void PrintTable(const nlohmann::ordered_json& out) {
  const auto& m = out["model"];
  std::printf("%s: %s\n", m["name"].get<std::string>().c_str(), m["source"].get<std::string>().c_str());
  std::printf("%.1fB parameters, %.1fB active; %s at %.0f TFLOP/s x %.0f%%, %.0f GiB; faults: %s\n",
              m["params"].get<double>() / 1e9, m["active_params"].get<double>() / 1e9,
              out["gpu"]["name"].get<std::string>().c_str(), out["gpu"]["peak_tflops"].get<double>(),
              100 * out["gpu"]["efficiency"].get<double>(), out["gpu"]["hbm_gib"].get<double>(),
              out["faults"].get<std::string>().c_str());
  std::printf("step split in seconds; rc: s selective, f full recompute; a2a on the HBD, or *DCN\n");
  std::printf("%-6s %-12s %3s %3s %5s %4s %2s %8s %8s %7s %7s %6s %7s %7s %6s %6s\n", "gpus", "arch", "TP",
              "PP", "DP", "EP", "rc", "step", "compute", "TP", "a2a", "PP", "bubble", "DP exp", "MFU",
              "x DGX");
  for (const auto& point : out["points"]) {
    for (const auto& a : point["archs"]) {
      std::printf("%-6d %-12s", point["gpus"].get<int>(), a["arch"].get<std::string>().c_str());
      if (a.contains("cannot_run")) {
        std::printf(" cannot run: %s\n", a["cannot_run"].get<std::string>().c_str());
        continue;
      }
      const bool dcn = a["a2a_on"] == "dcn";
      std::printf(" %3d %3d %5d %4d %2s %8.2f %8.2f %7.2f %6.2f%s %6.2f %7.2f %7.2f %5.1f%%",
                  a["tp"].get<int>(), a["pp"].get<int>(), a["dp"].get<int>(), a["ep"].get<int>(),
                  a["recompute"] == "full" ? "f" : "s", a["step_s"].get<double>(),
                  a["compute_s"].get<double>(), a["tp_comm_s"].get<double>(), a["a2a_s"].get<double>(),
                  dcn ? "*" : " ", a["pp_p2p_s"].get<double>(), a["bubble_s"].get<double>(),
                  a["dp_exposed_s"].get<double>(), 100 * a["mfu"].get<double>());
      if (a["ratio_to_dgx"].is_null())
        std::printf(" %6s\n", "n/a");
      else
        std::printf(" %5.2fx\n", a["ratio_to_dgx"].get<double>());
    }
  }
}

}  // namespace

int RunHbdMfu(const HbdOptions& o) {
  auto model = ModelPreset(o.mfu_model);
  if (!model.ok()) return Fail("hbd mfu", model.status().WithContext("--model"));
  if (o.global_batch > 0) model->global_batch_seqs = o.global_batch;
  auto counts = CountModel(*model);
  if (!counts.ok()) return Fail("hbd mfu", counts.status());
  auto gpu_counts = ParseGpus(o.mfu_gpus);
  if (!gpu_counts.ok()) return Fail("hbd mfu", gpu_counts.status());
  MfuSearch search;
  search.fault_ratio = o.mfu_fault_ratio;
  search.samples = o.samples;
  search.seed = o.seed;
  std::string faults = search.fault_ratio > 0 ? "fault ratio " + std::to_string(search.fault_ratio) : "none";
  nlohmann::ordered_json trace_json;
  if (!o.trace.empty()) {
    auto t = LoadTrace(o.trace, o.trace_nodes, o.gpus_per_trace_node, std::nullopt);  // no sampling here
    if (!t.ok()) return Fail("hbd mfu", t.status());
    // The trace's time-weighted mean of concurrent faulty servers, as each architecture's node
    // fault ratio (the trace is not replayed: see docs/HBD.md).
    search.fault_ratio = t->stats.mean_faulty / t->servers;
    if (!(search.fault_ratio < 1))
      return Fail("hbd mfu", InvalidArgument("--trace " + o.trace + ": its mean fault ratio is not below 1"));
    faults = "the mean fault ratio of " + o.trace + ", " + std::to_string(search.fault_ratio);
    trace_json = {{"path", o.trace}, {"servers", t->servers}, {"mean_fault_ratio", search.fault_ratio}};
  }
  auto parsed_archs = ParseArchs(o.archs, o.k);
  if (!parsed_archs.ok()) return Fail("hbd mfu", parsed_archs.status());
  const std::vector<ArchSpec>& archs = *parsed_archs;
  auto dgx = MakeArch("dgx");
  const GpuSpec gpu = DefaultGpu();
  nlohmann::ordered_json points = nlohmann::ordered_json::array();
  for (int gpus : *gpu_counts) {
    auto dgx_fabric = ArchFabric(*dgx);
    if (!dgx_fabric.ok()) return Fail("hbd mfu", dgx_fabric.status());
    auto reference = BestMfu(*model, gpu, *dgx, *dgx_fabric, gpus, search);
    if (!reference.ok()) return Fail("hbd mfu", reference.status().WithContext("dgx"));
    nlohmann::ordered_json rows = nlohmann::ordered_json::array();
    for (const ArchSpec& a : archs) {
      if (!o.json) std::fprintf(stderr, "weightport hbd mfu: %d GPUs, %s\n", gpus, a.name.c_str());
      auto fabric = ArchFabric(a);
      if (!fabric.ok()) return Fail("hbd mfu", fabric.status().WithContext(a.name));
      auto p = a.kind == ArchKind::kDgx ? reference : BestMfu(*model, gpu, a, *fabric, gpus, search);
      if (!p.ok()) return Fail("hbd mfu", p.status().WithContext(a.name));
      nlohmann::ordered_json row = PointJson(a.name, *p);
      row["hbd_gbps"] = fabric->hbd_gbps;
      if (p->found)
        row["ratio_to_dgx"] = reference->found ? nlohmann::ordered_json(p->step.mfu / reference->step.mfu)
                                               : nlohmann::ordered_json(nullptr);
      rows.push_back(std::move(row));
    }
    points.push_back({{"gpus", gpus}, {"archs", rows}});
  }
  nlohmann::ordered_json out = {
      {"model",
       {{"name", model->name},
        {"source", model->source},
        {"params", counts->total_params},
        {"active_params", counts->active_layer_params + model->vocab * static_cast<double>(model->hidden)},
        {"model_flops_per_token", counts->model_flops_per_token},
        {"global_batch_seqs", model->global_batch_seqs},
        {"seq_len", model->seq_len}}},
      {"gpu",
       {{"name", gpu.name},
        {"peak_tflops", gpu.peak_flops / 1e12},
        {"efficiency", gpu.efficiency},
        {"hbm_gib", gpu.hbm_bytes / (1ull << 30)}}},
      {"faults", faults},
      {"fault_ratio", search.fault_ratio},
      {"k", o.k}};
  if (!trace_json.is_null()) out["trace"] = trace_json;
  out["points"] = points;
  if (o.json) {
    std::cout << out.dump(2) << "\n";
    return kExitOk;
  }
  PrintTable(out);
  return kExitOk;
}

}  // namespace weightport::cli
