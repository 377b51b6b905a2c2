#include "hbd_trace_run.h"

#include <algorithm>
#include <cstdio>
#include <vector>

#include "weightport/core/json_util.h"
#include "weightport/sim/hbd/trace_mapping.h"

namespace weightport::cli {
namespace {

using namespace sim::hbd;

double Mean(const std::vector<double>& values) {
  double sum = 0;
  for (double v : values) sum += v;
  return values.empty() ? 0 : sum / values.size();
}

// Percentiles averaged over mappings, with the spread of the per-mapping means.
nlohmann::ordered_json OverMappings(const std::vector<Percentiles>& per_mapping) {
  std::vector<double> mean, p50, p99, max;
  for (const Percentiles& p : per_mapping)
    mean.push_back(p.mean), p50.push_back(p.p50), p99.push_back(p.p99), max.push_back(p.max);
  return {{"mean", Mean(mean)},
          {"p50", Mean(p50)},
          {"p99", Mean(p99)},
          {"max", *std::max_element(max.begin(), max.end())},
          {"spread",
           {{"min", *std::min_element(mean.begin(), mean.end())},
            {"max", *std::max_element(mean.begin(), mean.end())}}}};
}

std::string Pct(double fraction) {
  char text[32];
  std::snprintf(text, sizeof text, "%.2f%%", 100 * fraction);
  return text;
}

}  // namespace

Result<TraceInput> LoadTrace(const std::string& path, int servers, int gpus_per_server,
                             std::optional<double> sample_days) {
  TraceInput in;
  in.path = path;
  in.servers = servers;
  in.gpus_per_server = gpus_per_server;
  WP_ASSIGN_OR_RETURN(json_util::Json j, json_util::ParseFile(path));
  auto t = ParseFaultTrace(j);
  if (!t.ok()) return t.status().WithContext(path);
  in.trace = std::move(t).value();
  if (sample_days) {  // a command that samples the trace (hbd compare)
    if (auto samples = TraceSamples(in.trace, *sample_days); !samples.ok())
      return samples.status().WithContext("--trace " + path + " with --sample-days");
  }
  auto stats = ComputeTraceStats(in.trace, servers);
  if (!stats.ok()) return stats.status().WithContext("--trace " + path + " with --trace-nodes");
  in.stats = *stats;
  return in;
}

nlohmann::ordered_json TraceStatsJson(const TraceInput& in) {
  const TraceStats& s = in.stats;
  const double n = std::max(1, s.servers);
  return {
      {"file", in.path},
      {"servers", s.servers},
      {"servers_with_faults", s.servers_listed},
      {"gpus_per_server", in.gpus_per_server},
      {"span_days", s.span_days},
      {"faults", s.faults},
      {"zero_length_faults", s.zero_length_faults},
      {"overlapping_faults", s.overlapping_faults},
      {"open_at_start", s.open_at_start},
      {"open_at_end", s.open_at_end},
      {"concurrent_faulty", {{"mean", s.mean_faulty}, {"p99", s.p99_faulty}, {"max", s.max_faulty}}},
      {"fault_ratio", {{"mean", s.mean_faulty / n}, {"p99", s.p99_faulty / n}, {"max", s.max_faulty / n}}}};
}

void PrintTraceStats(const TraceInput& in, int mappings, uint64_t seed, double sample_days) {
  const TraceStats& s = in.stats;
  const double n = std::max(1, s.servers);
  std::printf(
      "\ntrace %s: %d servers of %d GPUs (%d with faults), %.1f days, %lld faults (%lld zero-length, %lld "
      "overlapping another on their server, %lld open at the start, %lld at the end)\n"
      "concurrent faulty servers: mean %.2f (%s), p99 %d (%s), max %d (%s)\n",
      in.path.c_str(), s.servers, in.gpus_per_server, s.servers_listed, s.span_days,
      static_cast<long long>(s.faults), static_cast<long long>(s.zero_length_faults),
      static_cast<long long>(s.overlapping_faults), static_cast<long long>(s.open_at_start),
      static_cast<long long>(s.open_at_end), s.mean_faulty, Pct(s.mean_faulty / n).c_str(), s.p99_faulty,
      Pct(s.p99_faulty / n).c_str(), s.max_faulty, Pct(s.max_faulty / n).c_str());
  std::printf(
      "replayed every %.2f h over %d seeded mapping%s of its servers onto each cluster (seeds %llu-%llu):\n",
      sample_days * 24, mappings, mappings == 1 ? "" : "s", static_cast<unsigned long long>(seed),
      static_cast<unsigned long long>(seed + mappings - 1));
}

Result<nlohmann::ordered_json> ReplayTrace(const ArchSpec& arch, int cluster_nodes, const TraceInput& in,
                                           const TraceReplay& replay, const EvalOptions& eval,
                                           Series& series) {
  std::vector<Percentiles> waste, cross_tor, recut;
  std::vector<double> fault_ratio, reconfigurations, recut_rebuilt;
  nlohmann::ordered_json per_mapping = nlohmann::ordered_json::array();
  TraceMapping first;
  int samples = 0;
  for (int m = 0; m < replay.mappings; ++m) {
    const uint64_t seed = replay.seed + m;
    auto mapping =
        MapTrace(in.trace, in.servers, in.gpus_per_server, cluster_nodes, arch.gpus_per_node, seed);
    if (!mapping.ok()) return mapping.status().WithContext("--trace-nodes, --gpus-per-trace-node");
    std::vector<std::pair<double, double>> points;
    WP_ASSIGN_OR_RETURN(ClusterMetrics r,
                        EvaluateTrace(arch, cluster_nodes, in.trace, mapping->nodes, replay.sample_days, eval,
                                      m == 0 ? &points : nullptr));
    if (m == 0) {
      first = std::move(mapping).value();
      for (auto [day, w] : points) series.points.push_back({day, 100 * w});
    }
    samples = r.samples;
    waste.push_back(r.waste);
    if (r.cross_tor) cross_tor.push_back(*r.cross_tor);
    if (r.waste_recut) recut.push_back(*r.waste_recut), recut_rebuilt.push_back(r.recut_reconfigurations);
    fault_ratio.push_back(r.mean_fault_ratio);
    reconfigurations.push_back(static_cast<double>(r.reconfigurations));
    per_mapping.push_back({{"seed", seed},
                           {"fault_ratio_mean", r.mean_fault_ratio},
                           {"waste_mean", r.waste.mean},
                           {"waste_p99", r.waste.p99},
                           {"cross_tor_mean", r.cross_tor ? nlohmann::ordered_json(r.cross_tor->mean)
                                                          : nlohmann::ordered_json(nullptr)},
                           {"reconfigurations", r.reconfigurations}});
  }
  const double years = std::max(in.trace.days, replay.sample_days) / 365.0;
  const double reconfig = Mean(reconfigurations);
  nlohmann::ordered_json t = {
      {"samples", samples},
      {"mappings", replay.mappings},
      {"trace_servers_placed", first.slots},
      {"trace_copies", first.copies},
      {"idle_nodes", first.idle_nodes},
      {"fault_ratio_mean", Mean(fault_ratio)},
      {"waste", OverMappings(waste)},
      // Samples with no DP group are left out; a mapping without any has no figure.
      {"cross_tor", cross_tor.empty() ? nlohmann::ordered_json(nullptr) : OverMappings(cross_tor)},
      {"reconfigurations", reconfig},
      {"reconfigurations_per_year", reconfig / years},
      {"reconfiguration_s", reconfig * ReconfigurationSeconds(arch)}};
  if (!recut.empty())
    t["recut_every_sample"] = {{"waste", OverMappings(recut)}, {"reconfigurations", Mean(recut_rebuilt)}};
  t["per_mapping"] = per_mapping;
  return t;
}

void PrintTraceRow(const std::string& arch, const nlohmann::ordered_json& t) {
  const auto& w = t["waste"];
  std::string cross = "n/a (no DP group)";
  if (!t["cross_tor"].is_null())
    cross = "mean " + Pct(t["cross_tor"]["mean"].get<double>()) + " p99 " +
            Pct(t["cross_tor"]["p99"].get<double>());
  std::printf(
      "%-14s waste mean %s (%s-%s over mappings) p50 %s p99 %s max %s; cross-ToR %s; %.0f reconfigurations "
      "(%.1f/year, %.3f s in all); faulty nodes %s on average\n",
      arch.c_str(), Pct(w["mean"].get<double>()).c_str(), Pct(w["spread"]["min"].get<double>()).c_str(),
      Pct(w["spread"]["max"].get<double>()).c_str(), Pct(w["p50"].get<double>()).c_str(),
      Pct(w["p99"].get<double>()).c_str(), Pct(w["max"].get<double>()).c_str(), cross.c_str(),
      t["reconfigurations"].get<double>(), t["reconfigurations_per_year"].get<double>(),
      t["reconfiguration_s"].get<double>(), Pct(t["fault_ratio_mean"].get<double>()).c_str());
  if (t.contains("recut_every_sample"))
    std::printf(
        "%-14s (a greedy re-cut of the whole ring at every sample: waste %s mean, %.0f rings rebuilt)\n", "",
        Pct(t["recut_every_sample"]["waste"]["mean"].get<double>()).c_str(),
        t["recut_every_sample"]["reconfigurations"].get<double>());
}

}  // namespace weightport::cli
