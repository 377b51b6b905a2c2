// Describing a Graph to people: a summary (counts, per-endpoint bandwidth by path class) and
// drawings (Graphviz DOT, and a standalone SVG laid out in tiers: spines on top, endpoints at the
// bottom). Large graphs are drawn in part: the first `max_domains` hosts / HBDs in full, the rest
// counted in a note.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "weightport/topology/graph.h"

namespace weightport::topology {

// {"name", "params", "nodes": {kind: count}, "links", "domains": {kind: count},
//  "endpoints", "endpoint_hbd_gbps": per-endpoint bandwidth into its HBD fabric (median),
//  "endpoint_dcn_gbps": per-endpoint NIC bandwidth (median), "largest_hbd": endpoints}
nlohmann::json Summarize(const Graph& graph);

struct DrawOptions {
  int max_domains = 4;
};
std::string ToDot(const Graph& graph, const DrawOptions& options = {});
std::string ToSvg(const Graph& graph, const DrawOptions& options = {});

// &, <, >, " and ' as entities: text for an SVG or XML document.
std::string XmlEscape(const std::string& s);

}  // namespace weightport::topology
