// weightport topology: the interconnect presets, a summary and drawing of a topology, and routes.
#include <iostream>
#include <memory>

#include <nlohmann/json.hpp>

#include "cli/cli_common.h"
#include "topology_args.h"
#include "weightport/core/json_util.h"
#include "weightport/topology/presets.h"
#include "weightport/topology/render.h"
#include "weightport/topology/routing.h"

namespace weightport::cli {
namespace {

struct TopologyOptions {
  std::string spec;
  std::string dot, svg, write;
  std::string from, to, routing = "rail";
  int max_domains = 4;
  bool json = false;
};

int RunPresets(const TopologyOptions& o) {
  nlohmann::ordered_json all = nlohmann::ordered_json::array();
  for (const topology::PresetInfo& p : topology::Presets()) {
    if (o.json) {
      all.push_back({{"name", p.name}, {"summary", p.summary}, {"defaults", p.defaults}, {"help", p.help}});
      continue;
    }
    std::cout << p.name << ": " << p.summary << "\n";
    for (const auto& [key, value] : p.defaults.items()) {
      std::cout << "    " << key << " = " << value.dump();
      if (p.help.contains(key) && p.help[key].is_string())
        std::cout << "  (" << p.help[key].get<std::string>() << ")";
      std::cout << "\n";
    }
  }
  if (o.json) std::cout << all.dump(2) << "\n";
  return kExitOk;
}

int RunShow(const TopologyOptions& o) {
  auto graph = LoadGraph(o.spec);
  if (!graph.ok()) return Fail("topology show", graph.status());
  topology::DrawOptions draw;
  draw.max_domains = o.max_domains;
  for (auto [path, text] : {std::pair{o.dot, &topology::ToDot}, std::pair{o.svg, &topology::ToSvg}}) {
    if (path.empty()) continue;
    if (Status st = json_util::WriteTextFile(path, text(*graph, draw)); !st.ok())
      return Fail("topology show", st);
  }
  if (!o.write.empty())
    if (Status st = json_util::WriteTextFile(o.write, graph->ToJson().dump(1) + "\n"); !st.ok())
      return Fail("topology show", st);
  const nlohmann::json summary = topology::Summarize(*graph);
  if (o.json) {
    std::cout << summary.dump(2) << "\n";
    return kExitOk;
  }
  std::cout << "topology " << graph->name() << ": " << graph->nodes().size() << " nodes, "
            << graph->links().size() << " links, " << graph->Endpoints().size() << " endpoints\n";
  for (const char* key : {"nodes", "domains"}) {
    if (!summary.contains(key)) continue;
    std::cout << "  " << key << ":";
    for (const auto& [k, v] : summary[key].items()) std::cout << " " << k << " " << v.dump();
    std::cout << "\n";
  }
  for (const char* key : {"endpoint_hbd_gbps", "endpoint_dcn_gbps", "largest_hbd"})
    if (summary.contains(key)) std::cout << "  " << key << ": " << summary[key].dump() << "\n";
  std::cout << "  params: " << graph->params().dump() << "\n";
  for (const auto& [what, path] : {std::pair{"DOT", o.dot}, {"SVG", o.svg}, {"graph JSON", o.write}})
    if (!path.empty()) std::cout << "  wrote " << what << " to " << path << "\n";
  return kExitOk;
}

int RunRoute(const TopologyOptions& o) {
  auto graph = LoadGraph(o.spec);
  if (!graph.ok()) return Fail("topology route", graph.status());
  auto policy = topology::ParseRoutingPolicy(o.routing);
  if (!policy.ok()) return Fail("topology route", policy.status());
  const int from = graph->FindNode(o.from), to = graph->FindNode(o.to);
  for (auto [name, id] : {std::pair{o.from, from}, {o.to, to}})
    if (id < 0)
      return Fail("topology route", NotFound("no node '" + name + "' in topology '" + graph->name() + "'"));
  auto path = topology::Router(*graph, *policy).Route(from, to);
  if (!path.ok()) return Fail("topology route", path.status());
  nlohmann::ordered_json hops = nlohmann::ordered_json::array();
  double slowest = 0;
  for (int l : path->links) {
    const topology::Link& link = graph->links()[l];
    hops.push_back({{"from", graph->nodes()[link.from].name},
                    {"to", graph->nodes()[link.to].name},
                    {"gbps", link.gbps}});
    slowest = slowest == 0 ? link.gbps : std::min(slowest, link.gbps);
  }
  if (o.json) {
    std::cout << nlohmann::ordered_json{{"from", o.from},
                                        {"to", o.to},
                                        {"routing", o.routing},
                                        {"hops", hops},
                                        {"latency_us", path->latency_us},
                                        {"bottleneck_gbps", slowest}}
                     .dump(2)
              << "\n";
    return kExitOk;
  }
  std::cout << o.from;
  for (const auto& h : hops)
    std::cout << " -> " << h["to"].get<std::string>() << " (" << h["gbps"].dump() << " Gb/s)";
  std::cout << "\n"
            << hops.size() << " hops, " << path->latency_us << " us, bottleneck " << slowest << " Gb/s\n";
  return kExitOk;
}

}  // namespace

Command AddTopologyCommand(CLI::App& app) {
  auto o = std::make_shared<TopologyOptions>();
  auto* sub =
      app.add_subcommand("topology", "Interconnect presets, summaries and drawings of topologies, routes");
  sub->require_subcommand(1);
  auto* presets = sub->add_subcommand("presets", "List the topology presets and their parameters");
  presets->add_flag("--json", o->json, "Print machine-readable JSON");
  auto* show = sub->add_subcommand("show", "Summarise a topology; optionally draw it or write it as JSON");
  show->add_option("topology", o->spec, kTopologySpecHelp)->required();
  show->add_option("--dot", o->dot, "Write a Graphviz DOT drawing to this file");
  show->add_option("--svg", o->svg, "Write an SVG drawing to this file");
  show->add_option("--write", o->write,
                   "Write the graph as JSON to this file (input for --topology elsewhere)");
  show->add_option("--max-domains", o->max_domains, "Hosts / HBDs drawn in full; the rest are counted")
      ->check(CLI::Range(1, 4096))
      ->capture_default_str();
  show->add_flag("--json", o->json, "Print the summary as JSON");
  auto* route = sub->add_subcommand("route", "Show the path a flow between two nodes takes");
  route->add_option("topology", o->spec, kTopologySpecHelp)->required();
  route->add_option("from", o->from, "Node name, e.g. node0/gpu0")->required();
  route->add_option("to", o->to, "Node name")->required();
  route->add_option("--routing", o->routing, "shortest, ecmp or rail")->capture_default_str();
  route->add_flag("--json", o->json, "Print machine-readable JSON");
  return {sub, [o, presets, show, route] {
            if (presets->parsed()) return RunPresets(*o);
            if (show->parsed()) return RunShow(*o);
            if (route->parsed()) return RunRoute(*o);
            return kExitUsage;
          }};
}

}  // namespace weightport::cli
