// weightport sim: run a plan on a model of the network (a plan file on a topology, or a built-in
// scenario) and report completion times, the bound, the busiest links and a timeline.
#include <algorithm>
#include <cstdio>
#include <iostream>
#include <memory>

#include <nlohmann/json.hpp>

#include "cli/cli_common.h"
#include "cli/option_checks.h"
#include "cli/pubsub/pubsub_common.h"
#include "topology_args.h"
#include "weightport/core/json_util.h"
#include "weightport/sim/scenarios.h"
#include "weightport/sim/simulator.h"

namespace weightport::cli {
namespace {

struct SimCliOptions {
  std::string plan, topology, scenario, params;
  int src_offset = 0, dst_offset = -1;
  std::string granularity = "pair", routing = "rail";
  double quantum_us = -1;
  double per_message_us = -1;  // < 0: the scenario's (Scenario::per_message_s, 0 unless given)
  std::string timeline, plot;
  bool list = false, json = false;
};

int ListScenarios(bool json) {
  nlohmann::ordered_json all = nlohmann::ordered_json::array();
  for (const sim::ScenarioInfo& s : sim::Scenarios()) {
    if (json) {
      all.push_back({{"name", s.name}, {"summary", s.summary}, {"defaults", s.defaults}});
      continue;
    }
    std::cout << s.name << ": " << s.summary << "\n    defaults: " << s.defaults.dump() << "\n";
  }
  if (json) std::cout << all.dump(2) << "\n";
  return kExitOk;
}

// The scenario, or a plan file on a topology wrapped as one.
Result<sim::Scenario> Load(const SimCliOptions& o) {
  if (!o.scenario.empty()) {
    WP_ASSIGN_OR_RETURN(nlohmann::json params, ParseParamList(o.params));
    std::fprintf(stderr, "weightport sim: building scenario '%s' (layouts and plan)...\n",
                 o.scenario.c_str());
    return sim::BuildScenario(o.scenario, params);
  }
  sim::Scenario s;
  s.name = o.plan;
  WP_ASSIGN_OR_RETURN(nlohmann::json j, json_util::ParseFile(o.plan));
  auto plan = Plan::FromJson(j);
  if (!plan.ok()) return plan.status().WithContext(o.plan);
  s.plan = std::move(plan).value();
  WP_ASSIGN_OR_RETURN(s.graph, LoadGraph(o.topology));
  WP_ASSIGN_OR_RETURN(s.endpoints, sim::MapRanksInOrder(s.graph, s.plan, o.src_offset, o.dst_offset));
  s.description = "plan " + o.plan + " on " + o.topology;
  return s;
}

// Contiguous copies (one Get each in the engine) into the busiest destination rank, and in all: a
// cost the flow model leaves out (docs/SIMULATOR.md).
std::pair<uint64_t, uint64_t> CopyRuns(const Plan& plan) {
  std::vector<uint64_t> per_rank;
  uint64_t total = 0;
  for (const PlanStep& step : plan.steps) {
    uint64_t n = 0;
    if (!ForEachStepRun(plan, step, [&](const StepRun&) { ++n; }).ok()) continue;
    if (per_rank.size() <= static_cast<size_t>(step.to_rank)) per_rank.resize(step.to_rank + 1, 0);
    per_rank[step.to_rank] += n;
    total += n;
  }
  uint64_t most = 0;
  for (uint64_t n : per_rank) most = std::max(most, n);
  return {most, total};
}

int Run(const SimCliOptions& o) {
  if (o.list) return ListScenarios(o.json);
  if (o.scenario.empty() && (o.plan.empty() || o.topology.empty()))
    return Fail(
        "sim", InvalidArgument(
                   "give --scenario NAME, or --plan FILE with --topology SPEC (--list shows the scenarios)"));
  sim::SimOptions options;
  auto granularity = sim::ParseGranularity(o.granularity);
  if (!granularity.ok()) return Fail("sim", granularity.status());
  auto routing = topology::ParseRoutingPolicy(o.routing);
  if (!routing.ok()) return Fail("sim", routing.status());
  options.granularity = *granularity;
  options.routing = *routing;
  options.quantum_s = o.quantum_us < 0 ? -1 : o.quantum_us * 1e-6;
  auto scenario = Load(o);
  if (!scenario.ok()) return Fail("sim", scenario.status());
  const sim::Scenario& s = *scenario;
  options.per_message_s = o.per_message_us < 0 ? s.per_message_s : o.per_message_us * 1e-6;
  std::fprintf(stderr, "weightport sim: simulating %zu steps on %zu nodes...\n", s.plan.steps.size(),
               s.graph.nodes().size());
  auto result = sim::Simulate(s.plan, s.graph, s.endpoints, options);
  if (!result.ok()) return Fail("sim", result.status().WithContext(s.name));
  const sim::SimResult& r = *result;
  if (!o.plot.empty())
    if (Status st = json_util::WriteTextFile(o.plot, sim::TimelineSvg(r, s.name)); !st.ok())
      return Fail("sim", st);
  nlohmann::json report = r.ToJson(s.graph);
  if (!o.timeline.empty())
    if (Status st = json_util::WriteTextFile(o.timeline, report.dump(1) + "\n"); !st.ok())
      return Fail("sim", st);
  report.erase("timeline");
  report.erase("destinations");
  nlohmann::ordered_json j = {
      {"scenario", s.name},
      {"description", s.description},
      {"params", s.params},
      {"granularity", o.granularity},
      {"routing", o.routing},
      {"per_message_s", options.per_message_s},
      {"steps", s.plan.steps.size()},
      {"bytes", s.plan.TotalBytes()},
      {"plan_s", s.plan_s},
      {"planner_lower_bound_s", s.plan.estimate.lower_bound_s},
      {"planner_predicted_s", s.plan.estimate.predicted_s},
      {"sim", report},
      {"ratio_to_lower_bound", r.lower_bound_s > 0 ? r.makespan_s / r.lower_bound_s : 0},
      {"peak_rss_bytes", PeakRssBytes()}};
  const auto [runs_max, runs_total] = CopyRuns(s.plan);
  j["copy_runs"] = {{"total", runs_total}, {"busiest_destination", runs_max}};
  if (s.anchor_s > 0) j["anchor"] = {{"seconds", s.anchor_s}, {"what", s.anchor}};
  if (o.json) {
    std::cout << j.dump(2) << "\n";
    return kExitOk;
  }
  std::printf("%s\n  %s\n", s.name.c_str(), s.description.c_str());
  std::printf("  plan        %zu steps, %s moved, planned in %.2f s\n", s.plan.steps.size(),
              HumanBytes(s.plan.TotalBytes()).c_str(), s.plan_s);
  std::printf(
      "  simulated   %.3f s   (%s granularity, %s routing, %zu flows, %zu events, %zu solves, %.1f s wall)\n",
      r.makespan_s, o.granularity.c_str(), o.routing.c_str(), r.stats.flows, r.stats.events, r.stats.solves,
      r.stats.wall_s);
  std::printf("  lower bound %.3f s   (busiest link: %s); simulated / bound = %.3f\n", r.lower_bound_s,
              report["bottleneck"].get<std::string>().c_str(),
              r.lower_bound_s > 0 ? r.makespan_s / r.lower_bound_s : 0);
  std::printf("  planner     lower bound %.3f s, predicted %.3f s (host-level model)\n",
              s.plan.estimate.lower_bound_s, s.plan.estimate.predicted_s);
  std::printf("  copies      %llu contiguous runs (one Get each), %llu into the busiest destination rank\n",
              static_cast<unsigned long long>(runs_total), static_cast<unsigned long long>(runs_max));
  if (options.per_message_s > 0)
    std::printf("  messages    %.1f us each, charged on their flows' paths\n", options.per_message_s * 1e6);
  if (s.anchor_s > 0) std::printf("  anchor      %.3f s   (%s)\n", s.anchor_s, s.anchor.c_str());
  std::printf("  first / last destination done: %.3f s / %.3f s\n",
              report["first_destination_done_s"].get<double>(), r.makespan_s);
  std::printf("  busiest links:\n");
  for (size_t i = 0; i < 5 && i < report["busiest_links"].size(); ++i) {
    const auto& l = report["busiest_links"][i];
    std::printf("    %-48s %s, busy %.3f s, %.0f%% of the run\n", l["link"].get<std::string>().c_str(),
                HumanBytes(l["bytes"].get<uint64_t>()).c_str(), l["busy_s"].get<double>(),
                100 * l["utilisation"].get<double>());
  }
  std::printf("  peak RSS    %s\n", HumanBytes(PeakRssBytes()).c_str());
  return kExitOk;
}

}  // namespace

Command AddSimCommand(CLI::App& app) {
  auto o = std::make_shared<SimCliOptions>();
  auto* sub = app.add_subcommand(
      "sim", "Simulate a plan on a model of the network: a plan file on a topology, or a built-in scenario");
  sub->add_option("--plan", o->plan, "A plan written by 'weightport plan --dump'")->check(CLI::ExistingFile);
  sub->add_option("--topology", o->topology, kTopologySpecHelp);
  sub->add_option("--src-offset", o->src_offset, "With --plan: source rank r runs on endpoint src-offset + r")
      ->check(CLI::Range(0, 1 << 30))
      ->capture_default_str();
  sub->add_option(
         "--dst-offset", o->dst_offset,
         "With --plan: destination rank r runs on endpoint dst-offset + r (default: after the sources)")
      ->check(CLI::Range(0, 1 << 30));
  sub->add_option("--scenario", o->scenario, "A built-in scenario (--list shows them)")->excludes("--plan");
  sub->add_option("--param", o->params, "Scenario parameters, e.g. layers=4,experts=16");
  sub->add_flag("--list", o->list, "List the built-in scenarios and their parameters");
  sub->add_option("--granularity", o->granularity, "pair (one flow per sender and receiver) or step")
      ->capture_default_str();
  sub->add_option("--routing", o->routing, "shortest, ecmp or rail")->capture_default_str();
  sub->add_option("--quantum-us", o->quantum_us,
                  "Re-solve link shares at most this often (0: at every event; default: lower bound / 2000)")
      ->check(FiniteRange(0, 1e12));
  sub->add_option("--per-message-us", o->per_message_us,
                  "Cost of one message (one contiguous run, one Get) on its path, in us; 0: bytes only\n"
                  "(default: the scenario's per_message_us parameter, itself 0; 0 for a plan file)")
      ->check(FiniteRange(0, 1e6));
  sub->add_option("--timeline", o->timeline,
                  "Write the full result (per destination, timeline) as JSON here");
  sub->add_option("--plot", o->plot, "Write the timeline as an SVG chart here");
  sub->add_flag("--json", o->json, "Print machine-readable JSON");
  sub->footer(
      "Examples:\n  weightport sim --scenario kimi-k2-update\n"
      "  weightport sim --scenario dense-50b-sync --param topology=gb200-nvl72\n"
      "  weightport plan --src S.json --dst D.json --preset small --dump P.json && "
      "weightport sim --plan P.json --topology fat-tree:nic_gbps=1");
  return {sub, [o] { return Run(*o); }};
}

}  // namespace weightport::cli
