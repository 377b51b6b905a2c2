// weightport hbd: evaluate high-bandwidth-domain architectures under node faults (GPU waste of a
// tensor-parallel job; compare in hbd_compare.cc), place one fault set's TP rings, and make
// synthetic fault traces; `hbd cost-sweep`, `hbd mfu` and `hbd tor-curve` run in hbd_cost_sweep.cc,
// hbd_mfu.cc and hbd_tor_curve.cc.
#include <cstdio>
#include <iostream>
#include <memory>

#include <nlohmann/json.hpp>

#include "cli/cli_common.h"
#include "cli/option_checks.h"
#include "hbd_options.h"
#include "weightport/core/json_util.h"
#include "weightport/sim/hbd/charts.h"
#include "weightport/sim/hbd/fault_trace.h"
#include "weightport/sim/hbd/tp_placement.h"

namespace weightport::cli {
namespace {

using namespace sim::hbd;

// Options several subcommands take, each with its check, the default shown.
void AddK(CLI::App* app, int& k, const std::string& help) {
  app->add_option("--k", k, help)->check(CLI::Range(1, 64))->capture_default_str();
}
template <typename Seed>
void AddSeed(CLI::App* app, Seed& seed, const std::string& help) {
  app->add_option("--seed", seed, help)->check(NonNegativeInteger())->capture_default_str();
}
void AddDp(CLI::App* app, int& dp) {
  app->add_option("--dp", dp, "DP size (TP groups per DP group); 0: as many as one ToR group holds")
      ->check(CLI::Range(0, 1 << 20))
      ->capture_default_str();
}

Result<std::vector<char>> FaultSet(const HbdOptions& o) {
  if (o.faulty.empty()) return FaultDraws(o.nodes, o.fault_ratio, o.seed).Next();
  std::vector<char> faulty(o.nodes, 0);
  WP_ASSIGN_OR_RETURN(
      std::vector<long> nodes,
      ParseIntegerList(o.faulty, "--faulty", "not a node in [0, " + std::to_string(o.nodes) + ")", 0,
                       static_cast<long>(o.nodes) - 1));
  for (long node : nodes) faulty[node] = 1;
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

// hbd compare
CLI::App* AddCompareCommand(CLI::App* parent, HbdOptions* o, CLI::Option** gpus_out) {
  auto* compare = parent->add_subcommand(
      "compare",
      "GPU waste of a tensor-parallel job per architecture, at fault ratios and over a fault trace");
  auto* gpus =
      compare
          ->add_option("--gpus", o->gpus,
                       "GPUs in the cluster (each architecture uses whole domains of it); with --trace "
                       "the default is the trace's, --trace-nodes x --gpus-per-trace-node")
          ->check(CLI::Range(1, 1 << 24))
          ->capture_default_str();
  compare->add_option("--tp", o->tp, "Tensor-parallel size")
      ->check(CLI::Range(1, 4096))
      ->capture_default_str();
  compare->add_option("--arch", o->archs, "Architectures: infinitehbd, nvl-36, nvl-72, nvl-576, tpuv4, dgx")
      ->capture_default_str();
  AddK(compare, o->k, "InfiniteHBD: hops each node's optical links reach");
  compare->add_option("--fault-ratio", o->ratios, "Fractions of nodes down, comma-separated")
      ->capture_default_str();
  compare->add_option("--samples", o->samples, "Random fault sets drawn per ratio")
      ->check(CLI::Range(1, 100000))
      ->capture_default_str();
  auto* trace_nodes =
      compare
          ->add_option("--trace-nodes", o->trace_nodes,
                       "With --trace: the servers the trace covers, faulty or not (a trace lists only those "
                       "that failed)")
          ->check(CLI::Range(1, 1 << 24));
  compare->add_option("--trace", o->trace, "A fault trace (JSON event list) to replay as well")
      ->check(CLI::ExistingFile)
      ->needs(trace_nodes);
  compare
      ->add_option("--gpus-per-trace-node", o->gpus_per_trace_node,
                   "With --trace: GPUs of one trace server; a server spans that many GPUs of the cluster's "
                   "nodes (8: two 4-GPU nodes, one DGX)")
      ->check(CLI::Range(1, 4096))
      ->capture_default_str();
  compare
      ->add_option("--trace-mappings", o->trace_mappings,
                   "With --trace: seeded placements of the trace's servers on the cluster (seeds --seed, "
                   "--seed + 1, ...); figures are their means, with the spread")
      ->check(CLI::Range(1, 1000))
      ->capture_default_str();
  compare->add_option("--sample-days", o->sample_days, "With --trace: evaluate this often (days)")
      ->check(FiniteRange(1e-6, 1e6))
      ->capture_default_str();
  AddSeed(compare, o->seed, "Seed for fault draws and for placing trace servers");
  AddDp(compare, o->dp);
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
                   "Simulate a global sync and a node's recovery of this model per architecture (minutes at "
                   "thousands of GPUs): 50b or none")
      ->capture_default_str();
  compare->add_option("--layers", o->layers, "Layers of the 50b model (56: ~50B parameters)")
      ->check(CLI::Range(1, 1024))
      ->capture_default_str();
  compare
      ->add_option("--sim-tp", o->sim_tp,
                   "TP of the model's layout in the sync and recovery simulations, whatever --tp is (8 fits "
                   "every HBD and a 72-GPU rack)")
      ->check(CLI::Range(1, 4096))
      ->capture_default_str();
  compare->add_option("--cost", o->cost, "Prices and watts of the parts (JSON like configs/hbd-cost.json)")
      ->check(CLI::ExistingFile);
  compare->add_option("--plot", o->plot, "Write waste against fault ratio per architecture as SVG here");
  compare->add_option("--trace-plot", o->trace_plot, "With --trace: write waste over time as SVG here");
  compare->add_flag("--json", o->json, "Print machine-readable JSON");
  *gpus_out = gpus;
  return compare;
}

// hbd place
CLI::App* AddPlaceCommand(CLI::App* parent, HbdOptions* o) {
  auto* place =
      parent->add_subcommand("place", "The TP rings of an InfiniteHBD k-hop ring for one fault set");
  place->add_option("--nodes", o->nodes, "Nodes in the ring")
      ->check(CLI::Range(1, 1 << 20))
      ->capture_default_str();
  place->add_option("--tp", o->tp, "Tensor-parallel size")->check(CLI::Range(1, 4096))->capture_default_str();
  AddK(place, o->k, "Hops each node's optical links reach");
  place->add_option("--faulty", o->faulty,
                    "Faulty nodes, comma-separated (default: --fault-ratio at random)");
  place->add_option("--fault-ratio", o->fault_ratio, "Fraction of nodes down when --faulty is not given")
      ->check(FiniteRange(0, 1))
      ->capture_default_str();
  AddSeed(place, o->seed, "Seed for the random fault set");
  place->add_option("--svg", o->svg, "Draw the placement as SVG here");
  place->add_flag("--json", o->json, "Print machine-readable JSON");
  return place;
}

// hbd trace
CLI::App* AddTraceCommand(CLI::App* parent, HbdOptions* o) {
  auto* trace =
      parent->add_subcommand("trace", "Write a synthetic fault trace in the public JSON event format");
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
  AddSeed(trace, o->synthetic.seed, "Random seed");
  trace->add_option("--out", o->out, "Output JSON file")->required();
  return trace;
}

// hbd cost-sweep
CLI::App* AddCostSweepCommand(CLI::App* parent, HbdOptions* o) {
  auto* sweep = parent->add_subcommand(
      "cost-sweep",
      "InfiniteHBD's HBD cost against NVL-72's over the OCSTrx count and price per GPU and the NVLink\n"
      "switch tray price (the inputs that set it), and every architecture's HBD cost per Tb/s");
  AddK(sweep, o->k, "Hops each node's optical links reach (switch paths per OCSTrx)");
  sweep->add_option("--cost", o->cost, "Prices and watts (JSON, as configs/hbd-cost.json); default: built in")
      ->check(CLI::ExistingFile);
  sweep->add_flag("--json", o->json, "Print machine-readable JSON");
  return sweep;
}

// hbd mfu
CLI::App* AddMfuCommand(CLI::App* parent, HbdOptions* o) {
  auto* mfu = parent->add_subcommand(
      "mfu",
      "Model FLOPs utilisation of a training step per architecture at its best memory-feasible TP x PP x\n"
      "DP (x EP) layout, and its ratio to DGX's (closed-form model: docs/HBD.md, MFU)");
  mfu->add_option("--model", o->mfu_model,
                  "Model preset: dense70b (Llama-3 70B), gpt3-175b (GPT-3), moe671b (DeepSeek-V3)")
      ->capture_default_str();
  mfu->add_option("--gpus", o->mfu_gpus,
                  "Cluster sizes, comma-separated (each architecture uses whole domains)")
      ->capture_default_str();
  mfu->add_option("--arch", o->archs, "Architectures (DGX is always evaluated for the ratio)")
      ->capture_default_str();
  AddK(mfu, o->k, "InfiniteHBD: hops each node's optical links reach");
  auto* mfu_ratio = mfu->add_option("--fault-ratio", o->mfu_fault_ratio,
                                    "Fraction of nodes down; the usable GPUs shrink by each architecture's "
                                    "waste at that ratio and TP")
                        ->check(FiniteRange(0, 0.99))
                        ->capture_default_str();
  auto* mfu_trace_nodes =
      mfu->add_option("--trace-nodes", o->trace_nodes, "With --trace: the servers the trace covers")
          ->check(CLI::Range(1, 1 << 24));
  mfu->add_option(
         "--trace", o->trace,
         "A fault trace (JSON event list): its time-weighted mean fault ratio is used as --fault-ratio")
      ->check(CLI::ExistingFile)
      ->needs(mfu_trace_nodes)
      ->excludes(mfu_ratio);
  mfu->add_option("--samples", o->samples, "Random fault sets drawn per TP size")
      ->check(CLI::Range(1, 1000))
      ->capture_default_str();
  AddSeed(mfu, o->seed, "Seed for the fault draws");
  mfu->add_option("--global-batch", o->global_batch, "Global batch in sequences; 0: the preset's")
      ->check(CLI::Range(0, 1 << 24))
      ->capture_default_str();
  mfu->add_flag("--json", o->json, "Print machine-readable JSON");
  return mfu;
}

// hbd tor-curve
CLI::App* AddTorCurveCommand(CLI::App* parent, HbdOptions* o) {
  auto* curve = parent->add_subcommand(
      "tor-curve",
      "GPU waste (DP leftovers included) against the share of DP traffic crossing a ToR, per architecture "
      "and\n"
      "fault ratio, over a borrow threshold: InfiniteHBD's ToR-aware ring placement and every "
      "architecture's\n"
      "DP grouping cross a ToR only where that saves more GPUs than the threshold (docs/HBD.md)");
  curve->add_option("--gpus", o->gpus, "GPUs in the cluster: a multiple of --tor-gpus")
      ->check(CLI::Range(1, 1 << 24))
      ->capture_default_str();
  curve->add_option("--tp", o->tp, "Tensor-parallel size")->check(CLI::Range(1, 4096))->capture_default_str();
  AddDp(curve, o->dp);
  curve
      ->add_option("--arch", o->curve_archs,
                   "Architectures: infinitehbd, nvl-36, nvl-72, nvl-576, tpuv4, dgx")
      ->capture_default_str();
  AddK(curve, o->k, "InfiniteHBD: hops each node's optical links reach");
  curve->add_option("--fault-ratio", o->curve_ratios, "Fractions of nodes down, comma-separated")
      ->capture_default_str();
  curve
      ->add_option(
          "--tor-gpus", o->curve_tor_gpus,
          "GPUs under one ToR group, the same for every architecture: a multiple of every domain and "
          "node (576 = 8 NVL-72 racks = 9 TPUv4 cubes = 72 DGX nodes = 144 ring nodes)")
      ->check(CLI::Range(1, 1 << 24))
      ->capture_default_str();
  curve
      ->add_option(
          "--borrow", o->borrow,
          "Borrow thresholds in GPUs, comma-separated (inf: never cross a ToR): one point of each curve "
          "per threshold")
      ->capture_default_str();
  curve->add_option("--samples", o->samples, "Random fault sets drawn per ratio")
      ->check(CLI::Range(1, 100000))
      ->capture_default_str();
  AddSeed(curve, o->seed, "Seed for the fault draws");
  curve->add_option("--svg", o->svg, "Write the curves (waste against cross-ToR share) as SVG here");
  curve->add_flag("--json", o->json, "Print machine-readable JSON");
  return curve;
}

}  // namespace

Command AddHbdCommand(CLI::App& app) {
  auto o = std::make_shared<HbdOptions>();
  auto* sub = app.add_subcommand("hbd", "Evaluate high-bandwidth-domain architectures under node faults");
  sub->require_subcommand(1);
  CLI::Option* gpus = nullptr;
  CLI::App* compare = AddCompareCommand(sub, o.get(), &gpus);
  CLI::App* place = AddPlaceCommand(sub, o.get());
  CLI::App* trace = AddTraceCommand(sub, o.get());
  CLI::App* sweep = AddCostSweepCommand(sub, o.get());
  CLI::App* mfu = AddMfuCommand(sub, o.get());
  CLI::App* curve = AddTorCurveCommand(sub, o.get());
  return {sub, [o, compare, place, trace, sweep, mfu, curve, gpus] {
            o->gpus_given = gpus->count() > 0;
            if (curve->parsed()) return RunHbdTorCurve(*o);
            if (mfu->parsed()) return RunHbdMfu(*o);
            if (sweep->parsed()) return RunHbdCostSweep(*o);
            if (compare->parsed()) return RunHbdCompare(*o);
            if (place->parsed()) return RunPlace(*o);
            if (trace->parsed()) return RunTrace(*o);
            return kExitUsage;
          }};
}

}  // namespace weightport::cli
