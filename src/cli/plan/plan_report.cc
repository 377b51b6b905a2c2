#include "plan_report.h"

#include <algorithm>
#include <cstdio>
#include <map>

#include "cli/cli_common.h"

namespace weightport::cli {
namespace {

std::string HostName(const Plan& plan, int host) {
  const auto& hosts = plan.topology.hosts();
  if (host < 0 || static_cast<size_t>(host) >= hosts.size()) return "?";
  return hosts[host].name;
}

std::string Hex(uint64_t v) {
  char buf[20];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(v));
  return buf;
}

}  // namespace

std::string FormatSeconds(double s) {
  char buf[32];
  if (s >= 1.0)
    std::snprintf(buf, sizeof buf, "%.3f s", s);
  else if (s >= 1e-3)
    std::snprintf(buf, sizeof buf, "%.2f ms", s * 1e3);
  else
    std::snprintf(buf, sizeof buf, "%.0f us", s * 1e6);
  return buf;
}

PlanSummary SummarizePlan(const Plan& plan, std::optional<double> planning_s) {
  PlanSummary s;
  s.tensors = plan.tensors.size();
  for (const TensorMeta& t : plan.tensors) s.model_bytes += t.bytes;
  s.destination_bytes = plan.DestinationBytes();
  s.planning_s = planning_s;
  std::map<Endpoint, size_t> index;
  for (const auto* side : {&plan.sources, &plan.destinations})
    for (const RankBuffer& b : *side) {
      index[b.endpoint] = s.ranks.size();
      s.ranks.push_back({b.endpoint, HostName(plan, b.host), b.bytes});
    }
  for (const PlanStep& step : plan.steps) {
    ++s.steps;
    s.bytes += step.bytes;
    s.chunks += step.chunks;
    s.max_depth = std::max(s.max_depth, step.depth);
    (step.from.side == PlanSide::kSource ? s.direct_steps : s.relayed_steps) += 1;
    s.convert_at_sender += step.transform == TransformKind::kConvertAtSender;
    s.convert_at_receiver += step.transform == TransformKind::kConvertAtReceiver;
    s.compressed_steps += step.compress;
    if (auto it = index.find(step.from); it != index.end()) {
      s.ranks[it->second].sent += step.bytes;
      ++s.ranks[it->second].steps_sent;
    }
    if (auto it = index.find(Endpoint{PlanSide::kDestination, step.to_rank}); it != index.end()) {
      s.ranks[it->second].received += step.bytes;
      ++s.ranks[it->second].steps_received;
    }
  }
  return s;
}

nlohmann::ordered_json PlanReportJson(const Plan& plan, const PlanSummary& s, const PlanLabels& labels) {
  using Json = nlohmann::ordered_json;
  Json ranks = Json::array();
  for (const RankTraffic& r : s.ranks)
    ranks.push_back({{"side", PlanSideName(r.endpoint.side)},
                     {"rank", r.endpoint.rank},
                     {"host", r.host},
                     {"buffer_bytes", r.buffer_bytes},
                     {"sent_bytes", r.sent},
                     {"received_bytes", r.received},
                     {"steps_sent", r.steps_sent},
                     {"steps_received", r.steps_received}});
  Json hosts = Json::array();
  for (const HostLoad& h : plan.estimate.hosts)
    hosts.push_back({{"host", HostName(plan, h.host)},
                     {"nic_out_bytes", h.nic_out},
                     {"nic_in_bytes", h.nic_in},
                     {"local_bytes", h.local},
                     {"busy_s", h.busy_s}});
  return {{"src", {{"file", labels.src}, {"ranks", plan.sources.size()}}},
          {"dst", {{"file", labels.dst}, {"ranks", plan.destinations.size()}}},
          {"tensors", s.tensors},
          {"model_bytes", s.model_bytes},
          {"destination_bytes", s.destination_bytes},
          {"bytes", s.bytes},
          {"steps",
           {{"total", s.steps},
            {"direct", s.direct_steps},
            {"relayed", s.relayed_steps},
            {"chunks", s.chunks},
            {"max_depth", s.max_depth},
            {"convert_at_sender", s.convert_at_sender},
            {"convert_at_receiver", s.convert_at_receiver},
            {"compressed", s.compressed_steps}}},
          {"options",
           {{"chunk_bytes", plan.options.chunk_bytes},
            {"relay_fanout", plan.options.relay_fanout},
            {"split_bytes", plan.options.split_bytes}}},
          {"estimate",
           {{"lower_bound_s", plan.estimate.lower_bound_s},
            {"predicted_s", plan.estimate.predicted_s},
            {"max_depth", plan.estimate.max_depth}}},
          {"planning_s", s.planning_s ? nlohmann::ordered_json(*s.planning_s) : nlohmann::ordered_json()},
          {"digest", Hex(plan.Digest())},
          {"ranks", std::move(ranks)},
          {"hosts", std::move(hosts)}};
}

void PrintPlanReport(std::ostream& out, const Plan& plan, const PlanSummary& s, const PlanLabels& labels) {
  char line[256];
  out << "plan: " << plan.sources.size() << " source ranks (" << labels.src << ") -> "
      << plan.destinations.size() << " destination ranks (" << labels.dst << ")\n";
  out << "  model:       " << s.tensors << " tensors, " << HumanBytes(s.model_bytes)
      << "; the destination holds " << HumanBytes(s.destination_bytes) << "\n";
  out << "  moved:       " << HumanBytes(s.bytes) << " in " << s.steps << " steps (" << s.direct_steps
      << " direct, " << s.relayed_steps << " relayed, relay depth <= " << s.max_depth << "), " << s.chunks
      << " chunks of <= " << HumanBytes(plan.options.chunk_bytes) << "\n";
  if (s.convert_at_sender + s.convert_at_receiver > 0)
    out << "  converted:   " << s.convert_at_sender << " steps at their source, " << s.convert_at_receiver
        << " at their receiver (the narrower dtype travels)\n";
  if (s.compressed_steps > 0)
    out << "  compressed:  " << s.compressed_steps << " steps over links slower than "
        << plan.options.compressor_gbps << " Gbit/s (zstd per chunk; sizes above are uncompressed)\n";
  out << "  time:        lower bound " << FormatSeconds(plan.estimate.lower_bound_s) << ", predicted "
      << FormatSeconds(plan.estimate.predicted_s) << " (relay fan-out " << plan.options.relay_fanout << ")\n";
  out << "  planned in:  "
      << (s.planning_s ? FormatSeconds(*s.planning_s) : std::string("- (read from a file)")) << "; digest "
      << Hex(plan.Digest()) << "\n\n";

  std::snprintf(line, sizeof line, "  %-14s %-12s %12s %12s %12s %8s %8s\n", "rank", "host", "holds", "sent",
                "received", "steps>", "steps<");
  out << line;
  for (const RankTraffic& r : s.ranks) {
    std::snprintf(line, sizeof line, "  %-14s %-12s %12s %12s %12s %8llu %8llu\n",
                  r.endpoint.ToString().c_str(), r.host.c_str(), HumanBytes(r.buffer_bytes).c_str(),
                  HumanBytes(r.sent).c_str(), HumanBytes(r.received).c_str(),
                  static_cast<unsigned long long>(r.steps_sent),
                  static_cast<unsigned long long>(r.steps_received));
    out << line;
  }
  out << "\n";
  std::snprintf(line, sizeof line, "  %-12s %12s %12s %12s %12s\n", "host", "nic out", "nic in", "local",
                "busy");
  out << line;
  for (const HostLoad& h : plan.estimate.hosts) {
    std::snprintf(line, sizeof line, "  %-12s %12s %12s %12s %12s\n", HostName(plan, h.host).c_str(),
                  HumanBytes(h.nic_out).c_str(), HumanBytes(h.nic_in).c_str(), HumanBytes(h.local).c_str(),
                  FormatSeconds(h.busy_s).c_str());
    out << line;
  }
}

}  // namespace weightport::cli
