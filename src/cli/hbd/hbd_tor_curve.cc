// weightport hbd tor-curve: GPU waste (DP leftovers included) against the share of DP traffic
// crossing a ToR, per architecture and fault ratio, one point per borrow threshold.
#include <cmath>
#include <cstdio>
#include <iostream>
#include <limits>

#include <nlohmann/json.hpp>

#include "cli/cli_common.h"
#include "hbd_options.h"
#include "weightport/core/json_util.h"
#include "weightport/sim/hbd/charts.h"
#include "weightport/sim/hbd/cluster_eval.h"
#include "weightport/sim/hbd/tor_curve.h"

namespace weightport::cli {
namespace {

using namespace sim::hbd;

Result<std::vector<double>> ParseBorrow(const std::string& text) {
  WP_ASSIGN_OR_RETURN(std::vector<double> out,
                      ParseNumberList(text, "--borrow", "neither a number of GPUs >= 0 nor inf",
                                      [](double b) { return b >= 0; }));  // inf: never cross a ToR
  if (out.empty()) return InvalidArgument("--borrow: no thresholds given");
  return out;
}

nlohmann::ordered_json Borrow(double b) {
  return std::isfinite(b) ? nlohmann::ordered_json(b) : nlohmann::ordered_json("inf");
}

nlohmann::ordered_json PointJson(const TorCurvePoint& p) {
  return {{"borrow_gpus", Borrow(p.borrow_gpus)},
          {"waste", p.waste},
          {"tp_waste", p.tp_waste},
          {"cross_tor", p.cross_tor ? nlohmann::ordered_json(*p.cross_tor) : nlohmann::ordered_json(nullptr)},
          {"samples_with_dp", p.samples_with_dp},
          {"crossing_tp_groups", p.crossing_tp_groups},
          {"dp_groups", p.dp_groups},
          {"idle_tp_groups", p.idle_tp_groups}};
}

void PrintPoint(const char* label, const TorCurvePoint& p) {
  char cross[16] = "n/a";  // no sample formed a DP group
  if (p.cross_tor) std::snprintf(cross, sizeof cross, "%.2f%%", 100 * *p.cross_tor);
  std::printf("  %-8s %8.2f%% %8.2f%% %9s %10.1f %9.1f %9.1f\n", label, 100 * p.waste, 100 * p.tp_waste,
              cross, p.crossing_tp_groups, p.dp_groups, p.idle_tp_groups);
}

// Errors name the option: ToR groups must be whole domains of every architecture, the cluster whole
// ToR groups, so every architecture's ToR groups and cluster are the same size.
Status CheckSizes(const HbdOptions& o, const std::vector<ArchSpec>& archs) {
  for (const ArchSpec& a : archs) {
    const int unit = a.domain_gpus > 0 ? a.domain_gpus : a.gpus_per_node;
    if (o.curve_tor_gpus % unit != 0)
      return InvalidArgument("--tor-gpus " + std::to_string(o.curve_tor_gpus) + " is not a multiple of " +
                             a.name + "'s " + (a.domain_gpus > 0 ? "domain" : "node") + " of " +
                             std::to_string(unit) +
                             " GPUs: ToR groups would differ in size between architectures");
  }
  if (o.gpus % o.curve_tor_gpus != 0)
    return InvalidArgument("--gpus " + std::to_string(o.gpus) + " is not a multiple of --tor-gpus " +
                           std::to_string(o.curve_tor_gpus) + ": the last ToR group would be partial");
  if (o.tp > o.gpus)
    return InvalidArgument("--tp " + std::to_string(o.tp) + " is larger than the cluster (--gpus " +
                           std::to_string(o.gpus) + ")");
  return Status::Ok();
}

}  // namespace

int RunHbdTorCurve(const HbdOptions& o) {
  auto ratios = ParseFaultRatios(o.curve_ratios);
  if (!ratios.ok()) return Fail("hbd tor-curve", ratios.status());
  auto borrow = ParseBorrow(o.borrow);
  if (!borrow.ok()) return Fail("hbd tor-curve", borrow.status());
  auto parsed_archs = ParseArchs(o.curve_archs, o.k);
  if (!parsed_archs.ok()) return Fail("hbd tor-curve", parsed_archs.status());
  const std::vector<ArchSpec>& archs = *parsed_archs;
  if (Status st = CheckSizes(o, archs); !st.ok()) return Fail("hbd tor-curve", st);
  for (const ArchSpec& a : archs) {
    const int64_t work = static_cast<int64_t>(o.samples) * static_cast<int64_t>(ratios->size()) *
                         static_cast<int64_t>(borrow->size() + 1) * ClusterNodes(a, o.gpus);
    if (work > kMaxEvalNodeSamples)
      return Fail(
          "hbd tor-curve",
          InvalidArgument("--samples " + std::to_string(o.samples) + " x " + std::to_string(ratios->size()) +
                          " fault ratios x " + std::to_string(borrow->size() + 1) +
                          " placements (--borrow and the greedy cut) x " +
                          std::to_string(ClusterNodes(a, o.gpus)) + " nodes of " + a.name + " (--gpus " +
                          std::to_string(o.gpus) + ") is over the limit of " +
                          std::to_string(kMaxEvalNodeSamples) + " node placements"));
  }
  const TorCurveOptions options{.tp = o.tp,
                                .dp = o.dp,
                                .tor_gpus = o.curve_tor_gpus,
                                .borrow_gpus = *borrow,
                                .samples = o.samples,
                                .seed = o.seed};
  std::vector<TorCurve> curves;
  std::vector<Series> chart;
  for (size_t ai = 0; ai < archs.size(); ++ai) {
    const ArchSpec& a = archs[ai];
    for (size_t ri = 0; ri < ratios->size(); ++ri) {
      const double r = (*ratios)[ri];
      auto c = EvaluateTorCurve(a, ClusterNodes(a, o.gpus), r, options);
      if (!c.ok()) return Fail("hbd tor-curve", c.status().WithContext(a.name));
      char name[64];
      std::snprintf(name, sizeof name, "%s %g%%", a.name == "infinitehbd" ? "ring" : a.name.c_str(), 100 * r);
      Series line{name, {}, static_cast<int>(ai), ri > 0, true};
      for (const TorCurvePoint& p : c->points)
        if (p.cross_tor) line.points.push_back({100 * *p.cross_tor, 100 * p.waste});
      if (!line.points.empty()) chart.push_back(std::move(line));
      if (c->greedy && c->greedy->cross_tor)
        chart.push_back({std::string(name) + " greedy",
                         {{100 * *c->greedy->cross_tor, 100 * c->greedy->waste}},
                         static_cast<int>(archs.size() + ri),
                         false,
                         true});
      curves.push_back(std::move(c).value());
    }
  }
  if (!o.svg.empty()) {
    const std::string title = "GPU waste against cross-ToR DP traffic, TP " + std::to_string(o.tp) + ", " +
                              std::to_string(o.gpus) + " GPUs, ToR groups of " +
                              std::to_string(o.curve_tor_gpus);
    Status st = json_util::WriteTextFile(o.svg, LineChartSvg(chart, title, "DP bytes crossing a ToR (%)",
                                                             "GPU waste, DP leftovers included (%)"));
    if (!st.ok()) return Fail("hbd tor-curve", st.WithContext("--svg"));
  }
  if (o.json) {
    nlohmann::ordered_json out{
        {"gpus", o.gpus},       {"tp", o.tp},    {"k", o.k}, {"tor_gpus", o.curve_tor_gpus},
        {"samples", o.samples}, {"seed", o.seed}};
    nlohmann::ordered_json list = nlohmann::ordered_json::array();
    for (const TorCurve& c : curves) {
      nlohmann::ordered_json row{{"arch", c.arch}, {"fault_ratio", c.fault_ratio}, {"dp", c.dp}};
      if (c.greedy) row["greedy"] = PointJson(*c.greedy);
      row["points"] = nlohmann::ordered_json::array();
      for (const TorCurvePoint& p : c.points) row["points"].push_back(PointJson(p));
      list.push_back(std::move(row));
    }
    out["curves"] = std::move(list);
    std::cout << out.dump(2) << "\n";
    return kExitOk;
  }
  std::printf(
      "GPU waste (DP leftovers included) against DP traffic crossing a ToR, TP %d, %d GPUs, ToR groups of %d "
      "GPUs, "
      "mean of %d draws\nB: a ring or DP group crosses ToRs only where that saves more than B GPUs per "
      "crossing\n",
      o.tp, o.gpus, o.curve_tor_gpus, o.samples);
  for (const TorCurve& c : curves) {
    std::printf("\n%s, %g%% of nodes down, DP %d\n  %-8s %9s %9s %9s %10s %9s %9s\n", c.arch.c_str(),
                100 * c.fault_ratio, c.dp, "B", "waste", "TP waste", "cross-ToR", "TP groups", "DP",
                "idle TP");
    std::printf("  %-8s %9s %9s %9s %10s %9s %9s\n", "", "", "", "", "crossing", "groups", "groups");
    if (c.greedy) PrintPoint("greedy", *c.greedy);
    for (const TorCurvePoint& p : c.points) {
      char label[32];
      std::snprintf(label, sizeof label, "%g", p.borrow_gpus);  // inf where infinite
      PrintPoint(label, p);
    }
  }
  return kExitOk;
}

}  // namespace weightport::cli
