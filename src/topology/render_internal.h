// What the DOT and SVG drawings share: which nodes and edges to draw. Internal.
#pragma once

#include <string>
#include <vector>

#include "weightport/topology/render.h"

namespace weightport::topology::internal {

// At most this many switches (nodes with neither host nor HBD) are drawn.
inline constexpr int kMaxDrawnSwitches = 200;

struct Drawing {
  std::vector<int> nodes;   // drawn nodes, in node order
  std::vector<char> drawn;  // per node of the graph
  std::vector<int> edges;   // a link per connected pair of drawn nodes
  std::string note;         // what was left out; empty when everything is drawn
};

// The nodes of the first max_domains host domains, the nodes of the HBDs those reach, and the
// switches (all of them when there are at most kMaxDrawnSwitches; else those near the drawn
// nodes, up to that many); the edges between drawn nodes, a duplex pair drawn once.
Drawing SelectForDrawing(const Graph& graph, const DrawOptions& options);

// The fill colour of a node of this kind ("#b7e1a1" for a GPU ...); `unknown` for any other value.
const char* KindColor(NodeKind kind, const char* unknown);
using topology::XmlEscape;  // public: render.h
// A number without trailing zeros ("3600", "1800", "133.33").
std::string FormatNumber(double x);

}  // namespace weightport::topology::internal
