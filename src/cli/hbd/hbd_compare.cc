// weightport hbd compare: GPU waste, cross-ToR traffic, cost and (optionally) simulated sync and
// recovery per architecture, at fault ratios and over a fault trace.
#include <cstdio>
#include <iostream>
#include <optional>

#include <nlohmann/json.hpp>

#include "cli/cli_common.h"
#include "hbd_options.h"
#include "hbd_trace_run.h"
#include "weightport/core/json_util.h"
#include "weightport/sim/hbd/charts.h"
#include "weightport/sim/hbd/cluster_eval.h"
#include "weightport/sim/hbd/cost_model.h"
#include "weightport/sim/hbd/sync_time.h"

namespace weightport::cli {

using namespace sim::hbd;

Result<std::vector<double>> ParseFaultRatios(const std::string& text) {
  WP_ASSIGN_OR_RETURN(std::vector<double> ratios,
                      ParseNumberList(text, "--fault-ratio", "not a ratio in [0, 1)",
                                      [](double r) { return r >= 0 && r < 1; }));
  if (ratios.empty()) return InvalidArgument("--fault-ratio: give at least one ratio");
  return ratios;
}

Result<std::vector<ArchSpec>> ParseArchs(const std::string& text, int k) {
  std::vector<ArchSpec> archs;
  for (const std::string& name : SplitList(text)) {
    auto a = MakeArch(name, k);
    if (!a.ok()) return a.status().WithContext("--arch");
    archs.push_back(*a);
  }
  if (archs.empty()) return InvalidArgument("--arch: give at least one architecture");
  return archs;
}

int ClusterNodes(const ArchSpec& a, int gpus) {
  const int unit = a.domain_gpus > 0 ? a.domain_gpus : a.gpus_per_node;
  return gpus / unit * unit / a.gpus_per_node;
}

namespace {

Result<EvalOptions> MakeEvalOptions(const HbdOptions& o) {
  EvalOptions e;
  e.tp = o.tp;
  e.dp = o.dp;
  e.tor_gpus = o.tor_gpus;
  e.max_stretch = o.max_stretch;
  if (o.dp_policy == "tor-aware") {
    e.dp_policy = DpPolicy::kTorAware;
  } else if (o.dp_policy == "in-order") {
    e.dp_policy = DpPolicy::kInOrder;
  } else {
    return InvalidArgument("--dp-policy: '" + o.dp_policy + "' is neither tor-aware nor in-order");
  }
  return e;
}

// One architecture's row of the comparison.
Result<nlohmann::ordered_json> CompareArch(const HbdOptions& o, const ArchSpec& a,
                                           const std::vector<double>& ratios, const TraceInput* trace,
                                           const EvalOptions& eval, const CostParams& prices,
                                           Series& by_ratio_series, Series& over_trace_series) {
  const int nodes = ClusterNodes(a, o.gpus);
  nlohmann::ordered_json row = {{"arch", a.name}, {"nodes", nodes}, {"gpus", nodes * a.gpus_per_node}};
  if (a.kind == ArchKind::kInfiniteHbd) row["k"] = a.k;
  // A cluster smaller than one of the design's domains has no GPU to place on: not "0% waste".
  if (nodes == 0) {
    const int unit = a.domain_gpus > 0 ? a.domain_gpus : a.gpus_per_node;
    row["cannot_place"] =
        std::to_string(o.gpus) + " GPUs are fewer than one " + a.name + " domain of " + std::to_string(unit);
    row["at_fault_ratio"] = nlohmann::ordered_json::array();
    return row;
  }
  nlohmann::ordered_json by_ratio = nlohmann::ordered_json::array();
  for (double r : ratios) {
    WP_ASSIGN_OR_RETURN(ClusterMetrics m, EvaluateAtFaultRatio(a, nodes, r, o.samples, o.seed, eval));
    row["dp"] = m.dp;
    by_ratio.push_back({{"fault_ratio", r},
                        {"waste_mean", m.waste.mean},
                        {"waste_p99", m.waste.p99},
                        {"cross_tor_mean", m.cross_tor ? nlohmann::ordered_json(m.cross_tor->mean)
                                                       : nlohmann::ordered_json(nullptr)}});
    by_ratio_series.points.push_back({100 * r, 100 * m.waste.mean});
  }
  row["at_fault_ratio"] = by_ratio;
  if (trace) {
    const TraceReplay replay{o.trace_mappings, o.seed, o.sample_days};
    WP_ASSIGN_OR_RETURN(row["trace"], ReplayTrace(a, nodes, *trace, replay, eval, over_trace_series));
  }
  WP_ASSIGN_OR_RETURN(ArchCost cost, CostPerGpu(a, prices));
  row["cost_per_gpu"] = {{"hbd_usd", cost.hbd_usd_per_gpu},
                         {"hbd_watts", cost.hbd_watts_per_gpu},
                         {"hbd_tbps", cost.hbd_tbps_per_gpu},
                         {"dcn_usd", cost.dcn_usd_per_gpu},
                         {"dcn_watts", cost.dcn_watts_per_gpu}};
  if (o.model != "none") {
    if (auto preset = ArchPreset(a); !preset.ok()) {
      row["sim"] = {{"skipped", preset.status().message()}};
    } else {
      WP_ASSIGN_OR_RETURN(SyncTimes t,
                          SimulateSyncAndRecovery(a, nodes * a.gpus_per_node, o.sim_tp, o.layers));
      row["sim"] = {{"model", "dense-50b"},
                    {"layers", o.layers},
                    {"preset", t.preset},
                    {"gpus", t.gpus},
                    {"tp", t.tp},
                    {"sync_s", t.sync_s},
                    {"sync_bound_s", t.sync_bound_s},
                    {"recovery_s", t.recovery_s},
                    {"recovery_with_optimizer_s", t.recovery_optimizer_s}};
    }
  }
  return row;
}

std::string Seconds(const nlohmann::ordered_json& row, const char* key) {
  if (!row.contains("sim") || !row["sim"].contains(key)) return "n/a";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3f", row["sim"][key].get<double>());
  return buf;
}

void PrintCompare(const HbdOptions& o, const std::vector<double>& ratios, const nlohmann::ordered_json& rows,
                  const TraceInput* trace) {
  std::string cluster = std::to_string(o.gpus) + " GPUs";
  if (trace && !o.gpus_given)
    cluster += " (the trace's " + std::to_string(trace->servers) + " servers of " +
               std::to_string(trace->gpus_per_server) + ")";
  std::printf("GPU waste ratio (healthy GPUs a TP-%d job cannot use / healthy GPUs), %s, mean of %d draws\n",
              o.tp, cluster.c_str(), o.samples);
  auto header = [&] {
    std::printf("%-14s", "nodes down");
    for (double r : ratios) std::printf("%9.1f%%", r * 100);
    std::printf("\n");
  };
  header();
  for (const auto& row : rows) {
    std::printf("%-14s", row["arch"].get<std::string>().c_str());
    if (row.contains("cannot_place"))
      std::printf("  cannot place: %s", row["cannot_place"].get<std::string>().c_str());
    for (const auto& w : row["at_fault_ratio"]) std::printf("%9.2f%%", 100 * w["waste_mean"].get<double>());
    std::printf("\n");
  }
  std::printf("\nDP traffic crossing a ToR (%s DP grouping, ToR groups of ~%d GPUs, rail-optimised)\n",
              o.dp_policy.c_str(), o.tor_gpus);
  header();
  for (const auto& row : rows) {
    if (row.contains("cannot_place")) continue;
    std::printf("%-14s",
                (row["arch"].get<std::string>() + " dp" + std::to_string(row.value("dp", 0))).c_str());
    for (const auto& w : row["at_fault_ratio"]) {
      if (w["cross_tor_mean"].is_null())
        std::printf("%10s", "n/a");  // no DP group was formed
      else
        std::printf("%9.2f%%", 100 * w["cross_tor_mean"].get<double>());
    }
    std::printf("\n");
  }
  std::printf("\nPer GPU: interconnect cost and power (%s)\n",
              o.cost.empty() ? "built-in prices, configs/hbd-cost.json" : o.cost.c_str());
  if (o.model != "none")
    std::printf(
        "Sync and recovery: a dense 50b model of %d layers simulated on each architecture's topology preset "
        "at TP %d (--sim-tp; the waste above is at TP %d) on the GPUs shown\n",
        o.layers, o.sim_tp, o.tp);
  std::printf("%-14s %9s %7s %7s %9s %7s", "arch", "HBD $", "HBD W", "Tb/s", "DCN $", "DCN W");
  if (o.model != "none")
    std::printf(" %-12s %6s %4s %8s %10s %12s", "preset", "gpus", "tp", "sync s", "recovery s",
                "+optimizer s");
  std::printf("\n");
  for (const auto& row : rows) {
    if (row.contains("cannot_place")) continue;
    const auto& c = row["cost_per_gpu"];
    std::printf("%-14s %9.0f %7.1f %7.1f %9.0f %7.1f", row["arch"].get<std::string>().c_str(),
                c["hbd_usd"].get<double>(), c["hbd_watts"].get<double>(), c["hbd_tbps"].get<double>(),
                c["dcn_usd"].get<double>(), c["dcn_watts"].get<double>());
    if (o.model != "none") {
      const bool sim = row.contains("sim") && row["sim"].contains("preset");
      std::printf(" %-12s %6s %4s %8s %10s %12s", sim ? row["sim"]["preset"].get<std::string>().c_str() : "-",
                  sim ? std::to_string(row["sim"]["gpus"].get<int>()).c_str() : "-",
                  sim ? std::to_string(row["sim"]["tp"].get<int>()).c_str() : "-",
                  Seconds(row, "sync_s").c_str(), Seconds(row, "recovery_s").c_str(),
                  Seconds(row, "recovery_with_optimizer_s").c_str());
    }
    std::printf("\n");
  }
  if (!trace) return;
  PrintTraceStats(*trace, o.trace_mappings, o.seed, o.sample_days);
  for (const auto& row : rows)
    if (!row.contains("cannot_place")) PrintTraceRow(row["arch"].get<std::string>(), row["trace"]);
}

}  // namespace

int RunHbdCompare(HbdOptions o) {
  std::optional<TraceInput> trace;
  if (!o.trace.empty()) {
    auto t = LoadTrace(o.trace, o.trace_nodes, o.gpus_per_trace_node, o.sample_days);
    if (!t.ok()) return Fail("hbd compare", t.status());
    trace = std::move(t).value();
    // The cluster the trace covers, unless --gpus names another (tiled or cut by the mappings).
    if (!o.gpus_given) {
      const int64_t gpus = static_cast<int64_t>(o.trace_nodes) * o.gpus_per_trace_node;
      if (gpus > (1 << 24))
        return Fail("hbd compare",
                    InvalidArgument("--trace-nodes " + std::to_string(o.trace_nodes) + " x " +
                                    "--gpus-per-trace-node " + std::to_string(o.gpus_per_trace_node) +
                                    " is over 2^24 GPUs: give --gpus"));
      o.gpus = static_cast<int>(gpus);
    }
  }
  auto ratios = ParseFaultRatios(o.ratios);
  if (!ratios.ok()) return Fail("hbd compare", ratios.status());
  auto eval = MakeEvalOptions(o);
  if (!eval.ok()) return Fail("hbd compare", eval.status());
  if (o.tp > o.gpus)
    return Fail("hbd compare",
                InvalidArgument("--tp " + std::to_string(o.tp) + " is larger than the cluster (--gpus " +
                                std::to_string(o.gpus) + "): no TP group can be placed"));
  if (o.model != "none" && o.model != "50b")
    return Fail("hbd compare", InvalidArgument("--model: '" + o.model + "' is not one of 50b, none"));
  auto parsed_archs = ParseArchs(o.archs, o.k);
  if (!parsed_archs.ok()) return Fail("hbd compare", parsed_archs.status());
  const std::vector<ArchSpec>& archs = *parsed_archs;
  CostParams prices = DefaultCostParams();
  if (!o.cost.empty()) {
    auto loaded = LoadCostParams(o.cost);
    if (!loaded.ok()) return Fail("hbd compare", loaded.status());
    prices = std::move(loaded).value();
  }
  // The evaluation's work, before any of it: every sample places every node of the cluster.
  const int64_t trace_samples = trace ? *TraceSamples(trace->trace, o.sample_days) * o.trace_mappings : 0;
  for (const ArchSpec& a : archs) {
    const int64_t work =
        (static_cast<int64_t>(o.samples) * static_cast<int64_t>(ratios->size()) + trace_samples) *
        ClusterNodes(a, o.gpus);
    if (work > kMaxEvalNodeSamples)
      return Fail(
          "hbd compare",
          InvalidArgument("--samples " + std::to_string(o.samples) + " x " + std::to_string(ratios->size()) +
                          " fault ratios" +
                          (trace ? " + " + std::to_string(trace_samples / o.trace_mappings) +
                                       " trace samples x --trace-mappings " + std::to_string(o.trace_mappings)
                                 : "") +
                          ", each placing the " + std::to_string(ClusterNodes(a, o.gpus)) + " nodes of " +
                          a.name + " (--gpus " + std::to_string(o.gpus) + "), is " + std::to_string(work) +
                          " node placements, over the limit of " + std::to_string(kMaxEvalNodeSamples)));
  }
  nlohmann::ordered_json rows = nlohmann::ordered_json::array();
  std::vector<Series> by_ratio_series, over_trace_series;
  for (const ArchSpec& a : archs) {
    by_ratio_series.push_back({a.name, {}});
    over_trace_series.push_back({a.name, {}});
    if (!o.json) std::fprintf(stderr, "weightport hbd compare: evaluating %s\n", a.name.c_str());
    auto row = CompareArch(o, a, *ratios, trace ? &*trace : nullptr, *eval, prices, by_ratio_series.back(),
                           over_trace_series.back());
    if (!row.ok()) return Fail("hbd compare", row.status().WithContext(a.name));
    rows.push_back(std::move(row).value());
  }
  const std::string what = "TP " + std::to_string(o.tp) + ", " + std::to_string(o.gpus) + " GPUs";
  if (!o.plot.empty()) {
    Status st = json_util::WriteTextFile(
        o.plot, LineChartSvg(by_ratio_series, "GPU waste against node fault ratio, " + what, "nodes down (%)",
                             "GPU waste (%)"));
    if (!st.ok()) return Fail("hbd compare", st);
  }
  if (!o.trace_plot.empty() && trace) {
    Status st = json_util::WriteTextFile(
        o.trace_plot,
        LineChartSvg(over_trace_series, "GPU waste over " + o.trace + ", " + what, "day", "GPU waste (%)"));
    if (!st.ok()) return Fail("hbd compare", st);
  }
  if (o.json) {
    nlohmann::ordered_json out{
        {"gpus", o.gpus},           {"tp", o.tp},          {"k", o.k}, {"tor_gpus", o.tor_gpus},
        {"dp_policy", o.dp_policy}, {"samples", o.samples}};
    if (trace) out["trace"] = TraceStatsJson(*trace);
    out["archs"] = rows;
    std::cout << out.dump(2) << "\n";
    return kExitOk;
  }
  PrintCompare(o, *ratios, rows, trace ? &*trace : nullptr);
  return kExitOk;
}

}  // namespace weightport::cli
