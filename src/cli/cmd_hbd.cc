// weightport hbd: evaluate high-bandwidth-domain architectures under node faults (GPU waste of a
// tensor-parallel job), and make synthetic fault traces.
#include <cstdio>
#include <fstream>
#include <iostream>
#include <memory>
#include <sstream>

#include <nlohmann/json.hpp>

#include "cli_common.h"
#include "core/json_util.h"
#include "weightport/sim/hbd/fault_trace.h"
#include "weightport/sim/hbd/tp_placement.h"

namespace weightport::cli {
namespace {

using namespace sim::hbd;

struct HbdOptions {
  int gpus = 1152, tp = 16, k = 2, samples = 20;
  std::string archs = "infinitehbd,nvl-72,tpuv4,dgx";
  std::string ratios = "0.01,0.02,0.05,0.07,0.1";
  std::string trace;
  double sample_days = 1.0 / 24;
  uint64_t seed = 1;
  bool json = false;
  // hbd trace
  SyntheticOptions synthetic;
  std::string out;
};

Result<std::vector<double>> ParseRatios(const std::string& text) {
  std::vector<double> out;
  std::stringstream in(text);
  for (std::string item; std::getline(in, item, ',');) {
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
  std::stringstream names(o.archs);
  for (std::string name; std::getline(names, name, ',');) {
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
  for (const ArchSpec& a : archs) {
    const int nodes = ClusterNodes(a, o.gpus);
    nlohmann::ordered_json row = {{"arch", a.name}, {"nodes", nodes}, {"gpus", nodes * a.gpus_per_node}};
    if (a.kind == ArchKind::kInfiniteHbd) row["k"] = a.k;
    nlohmann::ordered_json by_ratio = nlohmann::ordered_json::array();
    for (double r : *ratios) {
      auto w = WasteAtFaultRatio(a, nodes, o.tp, r, o.samples, o.seed);
      if (!w.ok()) return Fail("hbd compare", w.status().WithContext(a.name));
      by_ratio.push_back({{"fault_ratio", r}, {"waste_mean", w->mean}, {"waste_p99", w->p99}});
    }
    row["waste_at_fault_ratio"] = by_ratio;
    if (!o.trace.empty()) {
      auto positions = MapTraceNodes(trace, nodes, o.seed);
      if (!positions.ok()) return Fail("hbd compare", positions.status().WithContext(a.name));
      auto w = WasteOverTrace(a, nodes, o.tp, trace, *positions, o.sample_days);
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
  compare->add_flag("--json", o->json, "Print machine-readable JSON");
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
  return {sub, [o, compare, trace] {
            if (compare->parsed()) return RunCompare(*o);
            if (trace->parsed()) return RunTrace(*o);
            return kExitUsage;
          }};
}

}  // namespace weightport::cli
