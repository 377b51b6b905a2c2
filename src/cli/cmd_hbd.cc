// weightport hbd: evaluate high-bandwidth-domain architectures under node faults (GPU waste of a
// tensor-parallel job), and make synthetic fault traces.
#include <cstdio>
#include <iostream>
#include <memory>

#include <nlohmann/json.hpp>

#include "cli_common.h"
#include "core/json_util.h"
#include "weightport/sim/hbd/charts.h"
#include "weightport/sim/hbd/fault_trace.h"
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

int RunCompare(const HbdOptions& o) {
  auto ratios = ParseRatios(o.ratios);
  if (!ratios.ok()) return Fail("hbd compare", ratios.status());
  std::vector<ArchSpec> archs;
  for (const std::string& name : SplitList(o.archs)) {
    auto a = MakeArch(name, o.k);
    if (!a.ok()) return Fail("hbd compare", a.status());
    archs.push_back(*a);
  }
  FaultTrace trace;
  if (!o.trace.empty()) {
    auto j = json_util::ParseFile(o.trace);
    if (!j.ok()) return Fail("hbd compare", j.status());
    auto t = ParseFaultTrace(*j);
    if (!t.ok()) return Fail("hbd compare", t.status().WithContext(o.trace));
    trace = std::move(t).value();
  }
  nlohmann::ordered_json rows = nlohmann::ordered_json::array();
  std::vector<Series> by_ratio_series, over_trace_series;
  for (const ArchSpec& a : archs) {
    by_ratio_series.push_back({a.name, {}});
    const int nodes = ClusterNodes(a, o.gpus);
    nlohmann::ordered_json row = {{"arch", a.name}, {"nodes", nodes}, {"gpus", nodes * a.gpus_per_node}};
    if (a.kind == ArchKind::kInfiniteHbd) row["k"] = a.k;
    nlohmann::ordered_json by_ratio = nlohmann::ordered_json::array();
    for (double r : *ratios) {
      auto w = WasteAtFaultRatio(a, nodes, o.tp, r, o.samples, o.seed);
      if (!w.ok()) return Fail("hbd compare", w.status().WithContext(a.name));
      by_ratio.push_back({{"fault_ratio", r}, {"waste_mean", w->mean}, {"waste_p99", w->p99}});
      by_ratio_series.back().points.push_back({100 * r, 100 * w->mean});
    }
    row["waste_at_fault_ratio"] = by_ratio;
    if (!o.trace.empty()) {
      auto positions = MapTraceNodes(trace, nodes, o.seed);
      if (!positions.ok()) return Fail("hbd compare", positions.status().WithContext(a.name));
      std::vector<std::pair<double, double>> series;
      auto w = WasteOverTrace(a, nodes, o.tp, trace, *positions, o.sample_days, &series);
      over_trace_series.push_back({a.name, {}});
      for (auto [day, waste] : series) over_trace_series.back().points.push_back({day, 100 * waste});
      if (!w.ok()) return Fail("hbd compare", w.status().WithContext(a.name));
      row["trace"] = {{"waste_mean", w->mean},
                      {"waste_p50", w->p50},
                      {"waste_p99", w->p99},
                      {"waste_max", w->max},
                      {"fault_ratio_mean", w->mean_fault_ratio},
                      {"samples", w->samples}};
    }
    rows.push_back(row);
  }
  const std::string what = "TP " + std::to_string(o.tp) + ", " + std::to_string(o.gpus) + " GPUs";
  if (!o.plot.empty()) {
    Status st = json_util::WriteTextFile(
        o.plot, LineChartSvg(by_ratio_series, "GPU waste against node fault ratio, " + what, "nodes down (%)",
                             "GPU waste (%)"));
    if (!st.ok()) return Fail("hbd compare", st);
  }
  if (!o.trace_plot.empty() && !o.trace.empty()) {
    Status st = json_util::WriteTextFile(
        o.trace_plot,
        LineChartSvg(over_trace_series, "GPU waste over " + o.trace + ", " + what, "day", "GPU waste (%)"));
    if (!st.ok()) return Fail("hbd compare", st);
  }
  if (o.json) {
    std::cout << nlohmann::ordered_json{{"gpus", o.gpus},
                                        {"tp", o.tp},
                                        {"samples", o.samples},
                                        {"archs", rows}}
                     .dump(2)
              << "\n";
    return kExitOk;
  }
  std::printf(
      "GPU waste ratio (healthy GPUs a TP-%d job cannot use / healthy GPUs), %d GPUs, mean of %d draws\n",
      o.tp, o.gpus, o.samples);
  std::printf("%-14s", "fault ratio");
  for (double r : *ratios) std::printf("%9.1f%%", r * 100);
  std::printf("\n");
  for (const auto& row : rows) {
    std::printf("%-14s", row["arch"].get<std::string>().c_str());
    for (const auto& w : row["waste_at_fault_ratio"])
      std::printf("%9.2f%%", 100 * w["waste_mean"].get<double>());
    std::printf("\n");
  }
  if (!o.trace.empty()) {
    std::printf("\nover the trace %s (%zu nodes, %.0f days, sampled every %.2f h):\n", o.trace.c_str(),
                trace.node_ids.size(), trace.days, o.sample_days * 24);
    for (const auto& row : rows)
      std::printf(
          "%-14s waste mean %.2f%%, p50 %.2f%%, p99 %.2f%%, max %.2f%% (faulty nodes %.2f%% on average)\n",
          row["arch"].get<std::string>().c_str(), 100 * row["trace"]["waste_mean"].get<double>(),
          100 * row["trace"]["waste_p50"].get<double>(), 100 * row["trace"]["waste_p99"].get<double>(),
          100 * row["trace"]["waste_max"].get<double>(),
          100 * row["trace"]["fault_ratio_mean"].get<double>());
  }
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
      ->capture_default_str();
  compare->add_option("--seed", o->seed, "Seed for fault draws and for placing trace nodes")
      ->capture_default_str();
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
      ->check(CLI::Range(0.0, 1.0))
      ->capture_default_str();
  place->add_option("--seed", o->seed, "Seed for the random fault set")->capture_default_str();
  place->add_option("--svg", o->svg, "Draw the placement as SVG here");
  place->add_flag("--json", o->json, "Print machine-readable JSON");
  auto* trace = sub->add_subcommand("trace", "Write a synthetic fault trace in the public JSON event format");
  trace->add_option("--nodes", o->synthetic.nodes, "Nodes")
      ->check(CLI::Range(1, 1 << 22))
      ->capture_default_str();
  trace->add_option("--fault-ratio", o->synthetic.fault_ratio, "Long-run fraction of nodes down")
      ->capture_default_str();
  trace
      ->add_option("--mean-fault-days", o->synthetic.mean_fault_days,
                   "Mean fault duration (days, exponential)")
      ->capture_default_str();
  trace->add_option("--days", o->synthetic.days, "Length of the trace (days)")->capture_default_str();
  trace->add_option("--seed", o->synthetic.seed, "Random seed")->capture_default_str();
  trace->add_option("--out", o->out, "Output JSON file")->required();
  return {sub, [o, compare, place, trace] {
            if (compare->parsed()) return RunCompare(*o);
            if (place->parsed()) return RunPlace(*o);
            if (trace->parsed()) return RunTrace(*o);
            return kExitUsage;
          }};
}

}  // namespace weightport::cli
