// What a simulation reports: endpoint mapping, JSON and the timeline chart.
#include <algorithm>
#include <cstdio>
#include <string>

#include "weightport/sim/simulator.h"
#include "weightport/topology/render.h"

namespace weightport::sim {

using topology::Graph;

const char* GranularityName(Granularity granularity) {
  return granularity == Granularity::kPair ? "pair" : "step";
}

Result<Granularity> ParseGranularity(std::string_view name) {
  if (name == "pair") return Granularity::kPair;
  if (name == "step") return Granularity::kStep;
  return InvalidArgument("unknown granularity '" + std::string(name) + "' (pair, step)");
}

Result<EndpointMap> MapRanksInOrder(const Graph& graph, const Plan& plan, int src_offset, int dst_offset) {
  const std::vector<int> endpoints = graph.Endpoints();
  auto ranks = [](const std::vector<RankBuffer>& buffers) {
    int n = 0;
    for (const RankBuffer& b : buffers) n = std::max(n, b.endpoint.rank + 1);
    return n;
  };
  const int src = ranks(plan.sources), dst = ranks(plan.destinations);
  if (src_offset < 0) return InvalidArgument("source offset must be >= 0");
  if (dst_offset < 0) dst_offset = src_offset + src;
  const int need = std::max(src_offset + src, dst_offset + dst);
  if (need > static_cast<int>(endpoints.size()))
    return InvalidArgument("topology '" + graph.name() + "' has " + std::to_string(endpoints.size()) +
                           " endpoints; the plan's " + std::to_string(src) + " source and " +
                           std::to_string(dst) + " destination ranks from offsets " +
                           std::to_string(src_offset) + " and " + std::to_string(dst_offset) + " need " +
                           std::to_string(need));
  EndpointMap map;
  for (int r = 0; r < src; ++r) map.src_nodes.push_back(endpoints[src_offset + r]);
  for (int r = 0; r < dst; ++r) map.dst_nodes.push_back(endpoints[dst_offset + r]);
  return map;
}

namespace {

std::string LinkName(const Graph& graph, int link) {
  if (link < 0) return "";
  if (static_cast<size_t>(link) >= graph.links().size())
    return "local copy #" + std::to_string(link - graph.links().size());
  const topology::Link& l = graph.links()[link];
  return graph.nodes()[l.from].name + " -> " + graph.nodes()[l.to].name;
}

// The class of a link by what it joins: where the bytes of a plan travel.
const char* LinkTier(const Graph& graph, int link) {
  using topology::NodeKind;
  if (link < 0 || static_cast<size_t>(link) >= graph.links().size()) return "local_copy";
  const topology::Link& l = graph.links()[link];
  auto is = [&](NodeKind k) { return graph.nodes()[l.from].kind == k || graph.nodes()[l.to].kind == k; };
  if (is(NodeKind::kSpine)) return "leaf_spine";
  if (is(NodeKind::kOcs)) return "ocs";
  if (is(NodeKind::kTor)) return "nic_leaf";
  if (is(NodeKind::kNic) || is(NodeKind::kHostMemory) || is(NodeKind::kPcieSwitch)) return "host_pcie";
  return "hbd";  // NVSwitch, or accelerator to accelerator (ring, torus)
}

}  // namespace

nlohmann::json SimResult::ToJson(const Graph& graph, size_t max_links) const {
  using nlohmann::json;
  json dsts = json::array();
  double slowest = 0, fastest = -1;
  for (const DestinationTime& d : destinations) {
    dsts.push_back({{"rank", d.rank},
                    {"node", d.node >= 0 ? graph.nodes()[d.node].name : ""},
                    {"bytes", d.bytes},
                    {"done_s", d.done_s}});
    if (d.bytes == 0) continue;  // a rank this plan sends nothing
    slowest = std::max(slowest, d.done_s);
    fastest = fastest < 0 ? d.done_s : std::min(fastest, d.done_s);
  }
  json links_json = json::array();
  for (size_t i = 0; i < links.size() && i < max_links; ++i)
    links_json.push_back({{"link", LinkName(graph, links[i].link)},
                          {"bytes", links[i].bytes},
                          {"busy_s", links[i].busy_s},
                          {"utilisation", links[i].utilisation}});
  // Bytes by link class, summed over every link of the class (a byte crossing two NIC-leaf links
  // counts twice): how much of the plan's traffic the HBD fabric carries and how much climbs to
  // the spines.
  json tiers = json::object();
  for (const LinkUse& use : links) {
    const char* tier = LinkTier(graph, use.link);
    tiers[tier] = (tiers.contains(tier) ? tiers[tier].get<uint64_t>() : 0) + use.bytes;
  }
  json timeline_json = json::array();
  for (const TimelineSample& s : timeline)
    timeline_json.push_back({s.t_s, s.delivered_bytes, s.running_flows, s.destinations_done});
  return {{"makespan_s", makespan_s},
          {"lower_bound_s", lower_bound_s},
          {"bottleneck", LinkName(graph, bottleneck_link)},
          {"first_destination_done_s", std::max(fastest, 0.0)},
          {"destinations", dsts},
          {"busiest_links", links_json},
          {"links_used", links.size()},
          {"bytes_by_link_class", tiers},
          {"timeline_columns", {"t_s", "delivered_bytes", "running_flows", "destinations_done"}},
          {"timeline", timeline_json},
          {"stats",
           {{"steps", stats.steps},
            {"flows", stats.flows},
            {"split_pairs", stats.split_pairs},
            {"messages", stats.messages},
            {"events", stats.events},
            {"solves", stats.solves},
            {"quantum_s", stats.quantum_s},
            {"wall_s", stats.wall_s}}}};
}

std::string TimelineSvg(const SimResult& result, std::string_view title) {
  const double w = 720, h = 360, left = 70, right = 20, top = 40, bottom = 50;
  const double tmax = std::max({result.makespan_s, result.lower_bound_s, 1e-12});
  double ymax = 1;
  for (const TimelineSample& s : result.timeline) ymax = std::max(ymax, s.delivered_bytes);
  auto px = [&](double t) { return left + (w - left - right) * t / tmax; };
  auto py = [&](double y) { return h - bottom - (h - top - bottom) * y / ymax; };
  std::string svg;
  char buf[512];
  std::snprintf(
      buf, sizeof buf,
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" height=\"%.0f\" font-family=\"sans-serif\" "
      "font-size=\"12\">\n<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n",
      w, h);
  svg += buf;
  std::snprintf(buf, sizeof buf, "<text x=\"%.0f\" y=\"22\" font-size=\"14\">", left);
  svg += buf + topology::XmlEscape(std::string(title)) + "</text>\n";
  // Axes with five ticks each.
  std::snprintf(buf, sizeof buf,
                "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"black\"/>\n"
                "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"black\"/>\n",
                left, h - bottom, w - right, h - bottom, left, top, left, h - bottom);
  svg += buf;
  for (int i = 0; i <= 5; ++i) {
    const double t = tmax * i / 5, y = ymax * i / 5;
    std::snprintf(buf, sizeof buf,
                  "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">%.3g</text>\n"
                  "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"end\">%.3g</text>\n",
                  px(t), h - bottom + 16, t, left - 6, py(y) + 4, y / 1e9);
    svg += buf;
  }
  std::snprintf(buf, sizeof buf,
                "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">time (s)</text>\n"
                "<text x=\"16\" y=\"%.1f\" transform=\"rotate(-90 16 %.1f)\" "
                "text-anchor=\"middle\">delivered (GB)</text>\n",
                (left + w - right) / 2, h - 12, (top + h - bottom) / 2, (top + h - bottom) / 2);
  svg += buf;
  std::string points;
  for (const TimelineSample& s : result.timeline) {
    std::snprintf(buf, sizeof buf, "%.1f,%.1f ", px(s.t_s), py(s.delivered_bytes));
    points += buf;
  }
  svg += "<polyline fill=\"none\" stroke=\"#1f77b4\" stroke-width=\"2\" points=\"" + points + "\"/>\n";
  std::snprintf(
      buf, sizeof buf,
      "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#d62728\" stroke-dasharray=\"4 3\"/>\n"
      "<text x=\"%.1f\" y=\"%.1f\" fill=\"#d62728\">lower bound %.3g s</text>\n"
      "<text x=\"%.1f\" y=\"%.1f\" fill=\"#1f77b4\">simulated %.3g s</text>\n",
      px(result.lower_bound_s), top, px(result.lower_bound_s), h - bottom, left + 10, top + 14,
      result.lower_bound_s, left + 10, top + 30, result.makespan_s);
  svg += buf;
  svg += "</svg>\n";
  return svg;
}

}  // namespace weightport::sim
