// weightport hbd: evaluate high-bandwidth-domain architectures under node faults (GPU waste of a
// tensor-parallel job), and make synthetic fault traces.
#include <cstdio>
#include <iostream>
#include <memory>
#include <optional>

#include <nlohmann/json.hpp>

#include "cli_common.h"
#include "option_checks.h"
#include "weightport/core/json_util.h"
#include "weightport/sim/hbd/charts.h"
#include "weightport/sim/hbd/cluster_eval.h"
#include "weightport/sim/hbd/cost_model.h"
#include "weightport/sim/hbd/fault_trace.h"
#include "weightport/sim/hbd/sync_time.h"
#include "weightport/sim/hbd/tp_placement.h"

namespace weightport::cli {
namespace {

using namespace sim::hbd;

struct HbdOptions {
  int gpus = 1152, tp = 16, k = 2, samples = 20;
  std::string archs = "infinitehbd,nvl-72,tpuv4,dgx";
  std::string ratios = "0.01,0.02,0.05,0.07,0.1";
  std::string trace, plot, trace_plot;
  double sample_days = 1.0 / 24;
  int dp = 0, tor_gpus = 256, layers = 56, sim_tp = 8, max_stretch = 64;
  std::string dp_policy = "tor-aware", model = "50b", cost;
  // hbd place
  int nodes = 64;
  std::string faulty;
  double fault_ratio = 0.05;
  std::string svg;
  uint64_t seed = 1;
  bool json = false;
  // hbd trace
  SyntheticOptions synthetic;
  std::string out;
};

Result<std::vector<double>> ParseRatios(const std::string& text) {
  std::vector<double> out;
  for (const std::string& item : SplitList(text)) {
    char* end = nullptr;
    const double r = std::strtod(item.c_str(), &end);
    if (item.empty() || *end != '\0' || !(r >= 0 && r < 1))
      return InvalidArgument("--fault-ratio: '" + item + "' is not a ratio in [0, 1)");
    out.push_back(r);
  }
  return out;
}

// Nodes of this architecture for `gpus` GPUs: whole domains where it has them.
int ClusterNodes(const ArchSpec& a, int gpus) {
  const int unit = a.domain_gpus > 0 ? a.domain_gpus : a.gpus_per_node;
  return gpus / unit * unit / a.gpus_per_node;
}

nlohmann::ordered_json StatsJson(const Percentiles& p) {
  return {{"mean", p.mean}, {"p50", p.p50}, {"p99", p.p99}, {"max", p.max}};
}

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
                                           const std::vector<double>& ratios, const FaultTrace* trace,
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
    WP_ASSIGN_OR_RETURN(std::vector<int> positions, MapTraceNodes(*trace, nodes, o.seed));
    std::vector<std::pair<double, double>> series;
    WP_ASSIGN_OR_RETURN(ClusterMetrics m,
                        EvaluateTrace(a, nodes, *trace, positions, o.sample_days, eval, &series));
    for (auto [day, waste] : series) over_trace_series.points.push_back({day, 100 * waste});
    const double years = std::max(trace->days, o.sample_days) / 365.0;
    row["trace"] = {{"samples", m.samples},
                    {"fault_ratio_mean", m.mean_fault_ratio},
                    {"waste", StatsJson(m.waste)},
                    {"cross_tor", m.cross_tor ? StatsJson(*m.cross_tor) : nullptr},
                    {"reconfigurations", m.reconfigurations},
                    {"reconfigurations_per_year", m.reconfigurations / years},
                    {"reconfiguration_s", m.reconfiguration_s}};
    if (m.waste_recut)
      row["trace"]["recut_every_sample"] = {{"waste", StatsJson(*m.waste_recut)},
                                            {"reconfigurations", m.recut_reconfigurations}};
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
      row["sim"] = {{"preset", t.preset},
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
                  const FaultTrace* trace) {
  std::printf(
      "GPU waste ratio (healthy GPUs a TP-%d job cannot use / healthy GPUs), %d GPUs, mean of %d draws\n",
      o.tp, o.gpus, o.samples);
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
  std::printf("\nPer GPU: interconnect cost and power (%s)%s\n",
              o.cost.empty() ? "built-in prices, configs/hbd-cost.json" : o.cost.c_str(),
              o.model == "none" ? "" : "; 50b dense model simulated on each architecture's topology preset");
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
  std::printf("\nover the trace %s (%zu nodes, %.0f days, sampled every %.2f h):\n", o.trace.c_str(),
              trace->node_ids.size(), trace->days, o.sample_days * 24);
  for (const auto& row : rows) {
    if (row.contains("cannot_place")) continue;
    const auto& t = row["trace"];
    char cross[64] = "n/a (no DP group)";
    if (!t["cross_tor"].is_null())
      std::snprintf(cross, sizeof cross, "mean %.2f%% p99 %.2f%%", 100 * t["cross_tor"]["mean"].get<double>(),
                    100 * t["cross_tor"]["p99"].get<double>());
    std::printf(
        "%-14s waste mean %.2f%% p50 %.2f%% p99 %.2f%% max %.2f%%; cross-ToR %s; "
        "%lld reconfigurations (%.1f/year, %.3f s in all); faulty nodes %.2f%% on average\n",
        row["arch"].get<std::string>().c_str(), 100 * t["waste"]["mean"].get<double>(),
        100 * t["waste"]["p50"].get<double>(), 100 * t["waste"]["p99"].get<double>(),
        100 * t["waste"]["max"].get<double>(), cross,
        static_cast<long long>(t["reconfigurations"].get<int64_t>()),
        t["reconfigurations_per_year"].get<double>(), t["reconfiguration_s"].get<double>(),
        100 * t["fault_ratio_mean"].get<double>());
    if (t.contains("recut_every_sample"))
      std::printf(
          "%-14s (a greedy re-cut of the whole ring at every sample: waste %.2f%% mean, %lld rings "
          "rebuilt)\n",
          "", 100 * t["recut_every_sample"]["waste"]["mean"].get<double>(),
          static_cast<long long>(t["recut_every_sample"]["reconfigurations"].get<int64_t>()));
  }
}

int RunCompare(const HbdOptions& o) {
  auto ratios = ParseRatios(o.ratios);
  if (!ratios.ok()) return Fail("hbd compare", ratios.status());
  auto eval = MakeEvalOptions(o);
  if (!eval.ok()) return Fail("hbd compare", eval.status());
  if (o.tp > o.gpus)
    return Fail("hbd compare",
                InvalidArgument("--tp " + std::to_string(o.tp) + " is larger than the cluster (--gpus " +
                                std::to_string(o.gpus) + "): no TP group can be placed"));
  if (o.model != "none" && o.model != "50b")
    return Fail("hbd compare", InvalidArgument("--model: '" + o.model + "' is not one of 50b, none"));
  std::vector<ArchSpec> archs;
  for (const std::string& name : SplitList(o.archs)) {
    auto a = MakeArch(name, o.k);
    if (!a.ok()) return Fail("hbd compare", a.status());
    archs.push_back(*a);
  }
  std::optional<FaultTrace> trace;
  if (!o.trace.empty()) {
    auto j = json_util::ParseFile(o.trace);
    if (!j.ok()) return Fail("hbd compare", j.status().WithContext("--trace"));
    auto t = ParseFaultTrace(*j);
    if (!t.ok()) return Fail("hbd compare", t.status().WithContext(o.trace));
    if (auto samples = TraceSamples(*t, o.sample_days); !samples.ok())
      return Fail("hbd compare", samples.status().WithContext("--trace " + o.trace + " with --sample-days"));
    trace = std::move(t).value();
  }
  CostParams prices = DefaultCostParams();
  if (!o.cost.empty()) {
    auto loaded = LoadCostParams(o.cost);
    if (!loaded.ok()) return Fail("hbd compare", loaded.status());
    prices = std::move(loaded).value();
  }
  // The evaluation's work, before any of it: every sample places every node of the cluster.
  const int64_t trace_samples = trace ? *TraceSamples(*trace, o.sample_days) : 0;
  for (const ArchSpec& a : archs) {
    const int64_t work =
        (static_cast<int64_t>(o.samples) * static_cast<int64_t>(ratios->size()) + trace_samples) *
        ClusterNodes(a, o.gpus);
    if (work > kMaxEvalNodeSamples)
      return Fail(
          "hbd compare",
          InvalidArgument("--samples " + std::to_string(o.samples) + " x " + std::to_string(ratios->size()) +
                          " fault ratios" +
                          (trace ? " + " + std::to_string(trace_samples) + " trace samples" : "") +
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
    std::cout << nlohmann::ordered_json{{"gpus", o.gpus},         {"tp", o.tp},
                                        {"tor_gpus", o.tor_gpus}, {"dp_policy", o.dp_policy},
                                        {"samples", o.samples},   {"archs", rows}}
                     .dump(2)
              << "\n";
    return kExitOk;
  }
  PrintCompare(o, *ratios, rows, trace ? &*trace : nullptr);
  return kExitOk;
}

Result<std::vector<char>> FaultSet(const HbdOptions& o) {
  if (o.faulty.empty()) return FaultDraws(o.nodes, o.fault_ratio, o.seed).Next();
  std::vector<char> faulty(o.nodes, 0);
  for (const std::string& item : SplitList(o.faulty)) {
    char* end = nullptr;
    const long node = std::strtol(item.c_str(), &end, 10);
    if (item.empty() || *end != '\0' || node < 0 || node >= o.nodes)
      return InvalidArgument("--faulty: '" + item + "' is not a node in [0, " + std::to_string(o.nodes) +
                             ")");
    faulty[node] = 1;
  }
  return faulty;
}

int RunPlace(const HbdOptions& o) {
  auto arch = MakeArch("infinitehbd", o.k);
  if (!arch.ok()) return Fail("hbd place", arch.status());
  if (o.tp > o.nodes * arch->gpus_per_node)
    return Fail("hbd place",
                InvalidArgument("--tp " + std::to_string(o.tp) + " is larger than the ring (--nodes " +
                                std::to_string(o.nodes) + " of " + std::to_string(arch->gpus_per_node) +
                                " GPUs): no TP group can be placed"));
  auto faulty = FaultSet(o);
  if (!faulty.ok()) return Fail("hbd place", faulty.status());
  auto p = PlaceTp(*arch, *faulty, o.tp, /*keep_groups=*/true);
  if (!p.ok()) return Fail("hbd place", p.status());
  if (!o.svg.empty()) {
    const std::string title = "InfiniteHBD K=" + std::to_string(o.k) + ", TP " + std::to_string(o.tp) + ", " +
                              std::to_string(o.nodes) + " nodes";
    if (Status st = json_util::WriteTextFile(o.svg, PlacementSvg(*faulty, *p, title)); !st.ok())
      return Fail("hbd place", st);
  }
  nlohmann::ordered_json rings = nlohmann::ordered_json::array();
  for (const TpGroup& g : p->tp_groups) rings.push_back({{"nodes", g.nodes}, {"bridged", g.bridged}});
  std::vector<int> down;
  for (int i = 0; i < o.nodes; ++i)
    if ((*faulty)[i]) down.push_back(i);
  if (o.json) {
    std::cout << nlohmann::ordered_json{{"nodes", o.nodes},
                                        {"k", o.k},
                                        {"tp", o.tp},
                                        {"faulty", down},
                                        {"rings", rings},
                                        {"segments", p->segments},
                                        {"usable_gpus", p->usable_gpus},
                                        {"healthy_gpus", p->healthy_gpus},
                                        {"waste_ratio", p->waste_ratio()}}
                     .dump(2)
              << "\n";
    return kExitOk;
  }
  std::printf("%d nodes, %zu faulty, K = %d, TP %d: %d rings (%d bridged) in %d segments, waste %.2f%%\n",
              o.nodes, down.size(), o.k, o.tp, p->groups, p->bridged_groups, p->segments,
              100 * p->waste_ratio());
  for (size_t r = 0; r < p->tp_groups.size(); ++r) {
    std::printf("  ring %zu:", r);
    for (int node : p->tp_groups[r].nodes) std::printf(" %d", node);
    std::printf("%s\n", p->tp_groups[r].bridged ? "  (bridged)" : "");
  }
  return kExitOk;
}

int RunTrace(const HbdOptions& o) {
  auto t = SyntheticTrace(o.synthetic);
  if (!t.ok()) return Fail("hbd trace", t.status());
  if (Status st = json_util::WriteFile(o.out, FaultTraceToJson(*t)); !st.ok()) return Fail("hbd trace", st);
  std::fprintf(stderr, "weightport hbd trace: %zu events for %d nodes over %.0f days written to %s\n",
               t->events.size(), o.synthetic.nodes, o.synthetic.days, o.out.c_str());
  return kExitOk;
}

}  // namespace

Command AddHbdCommand(CLI::App& app) {
  auto o = std::make_shared<HbdOptions>();
  auto* sub = app.add_subcommand("hbd", "Evaluate high-bandwidth-domain architectures under node faults");
  sub->require_subcommand(1);
  auto* compare = sub->add_subcommand(
      "compare",
      "GPU waste of a tensor-parallel job per architecture, at fault ratios and over a fault trace");
  compare->add_option("--gpus", o->gpus, "GPUs in the cluster (each architecture uses whole domains of it)")
      ->check(CLI::Range(1, 1 << 24))
      ->capture_default_str();
  compare->add_option("--tp", o->tp, "Tensor-parallel size")
      ->check(CLI::Range(1, 4096))
      ->capture_default_str();
  compare->add_option("--arch", o->archs, "Architectures: infinitehbd, nvl-36, nvl-72, nvl-576, tpuv4, dgx")
      ->capture_default_str();
  compare->add_option("--k", o->k, "InfiniteHBD: hops each node's optical links reach")
      ->check(CLI::Range(1, 64))
      ->capture_default_str();
  compare->add_option("--fault-ratio", o->ratios, "Fractions of nodes down, comma-separated")
      ->capture_default_str();
  compare->add_option("--samples", o->samples, "Random fault sets drawn per ratio")
      ->check(CLI::Range(1, 100000))
      ->capture_default_str();
  compare->add_option("--trace", o->trace, "A fault trace (JSON event list) to replay as well")
      ->check(CLI::ExistingFile);
  compare->add_option("--sample-days", o->sample_days, "With --trace: evaluate this often (days)")
      ->check(FiniteRange(1e-6, 1e6))
      ->capture_default_str();
  compare->add_option("--seed", o->seed, "Seed for fault draws and for placing trace nodes")
      ->check(NonNegativeInteger())
      ->capture_default_str();
  compare->add_option("--dp", o->dp, "DP size (TP groups per DP group); 0: as many as one ToR group holds")
      ->check(CLI::Range(0, 1 << 20))
      ->capture_default_str();
  compare->add_option("--tor-gpus", o->tor_gpus, "GPUs under one ToR group of the rail-optimised DCN")
      ->check(CLI::Range(1, 1 << 24))
      ->capture_default_str();
  compare
      ->add_option(
          "--max-stretch", o->max_stretch,
          "With --trace, InfiniteHBD: the most rings one repair may rebuild to borrow or gather free nodes")
      ->check(CLI::Range(0, 1 << 20))
      ->capture_default_str();
  compare->add_option("--dp-policy", o->dp_policy, "DP grouping: tor-aware or in-order")
      ->capture_default_str();
  compare
      ->add_option("--model", o->model,
                   "Simulate a global sync and a node's recovery of this model per architecture: 50b or none")
      ->capture_default_str();
  compare->add_option("--layers", o->layers, "Layers of the 50b model (56: ~50B parameters)")
      ->check(CLI::Range(1, 1024))
      ->capture_default_str();
  compare
      ->add_option("--sim-tp", o->sim_tp,
                   "TP of the model's layout in the sync and recovery simulations (8 fits every HBD and a "
                   "72-GPU rack)")
      ->check(CLI::Range(1, 4096))
      ->capture_default_str();
  compare->add_option("--cost", o->cost, "Prices and watts of the parts (JSON like configs/hbd-cost.json)")
      ->check(CLI::ExistingFile);
  compare->add_option("--plot", o->plot, "Write waste against fault ratio per architecture as SVG here");
  compare->add_option("--trace-plot", o->trace_plot, "With --trace: write waste over time as SVG here");
  compare->add_flag("--json", o->json, "Print machine-readable JSON");
  auto* place = sub->add_subcommand("place", "The TP rings of an InfiniteHBD k-hop ring for one fault set");
  place->add_option("--nodes", o->nodes, "Nodes in the ring")
      ->check(CLI::Range(1, 1 << 20))
      ->capture_default_str();
  place->add_option("--tp", o->tp, "Tensor-parallel size")->check(CLI::Range(1, 4096))->capture_default_str();
  place->add_option("--k", o->k, "Hops each node's optical links reach")
      ->check(CLI::Range(1, 64))
      ->capture_default_str();
  place->add_option("--faulty", o->faulty,
                    "Faulty nodes, comma-separated (default: --fault-ratio at random)");
  place->add_option("--fault-ratio", o->fault_ratio, "Fraction of nodes down when --faulty is not given")
      ->check(FiniteRange(0, 1))
      ->capture_default_str();
  place->add_option("--seed", o->seed, "Seed for the random fault set")
      ->check(NonNegativeInteger())
      ->capture_default_str();
  place->add_option("--svg", o->svg, "Draw the placement as SVG here");
  place->add_flag("--json", o->json, "Print machine-readable JSON");
  auto* trace = sub->add_subcommand("trace", "Write a synthetic fault trace in the public JSON event format");
  trace->add_option("--nodes", o->synthetic.nodes, "Nodes")
      ->check(CLI::Range(1, 1 << 22))
      ->capture_default_str();
  trace->add_option("--fault-ratio", o->synthetic.fault_ratio, "Long-run fraction of nodes down, in (0, 1)")
      ->check(FiniteRange(1e-9, 1 - 1e-9))
      ->capture_default_str();
  trace
      ->add_option("--mean-fault-days", o->synthetic.mean_fault_days,
                   "Mean fault duration (days, exponential)")
      ->check(FiniteRange(1e-6, 1e6))
      ->capture_default_str();
  trace->add_option("--days", o->synthetic.days, "Length of the trace (days)")
      ->check(FiniteRange(1e-6, 1e6))
      ->capture_default_str();
  trace->add_option("--seed", o->synthetic.seed, "Random seed")
      ->check(NonNegativeInteger())
      ->capture_default_str();
  trace->add_option("--out", o->out, "Output JSON file")->required();
  return {sub, [o, compare, place, trace] {
            if (compare->parsed()) return RunCompare(*o);
            if (place->parsed()) return RunPlace(*o);
            if (trace->parsed()) return RunTrace(*o);
            return kExitUsage;
          }};
}

}  // namespace weightport::cli
