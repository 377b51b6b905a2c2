// Drawings for the HBD evaluation, as standalone SVG: line charts (waste against fault ratio per
// architecture, waste over a trace) and a placement (which nodes each TP ring uses, which are
// bridged over, which are wasted or faulty).
#pragma once

#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "weightport/sim/hbd/architecture.h"
#include "weightport/sim/hbd/tp_placement.h"

namespace weightport::sim::hbd {

struct Series {
  std::string name;
  std::vector<std::pair<double, double>> points;  // (x, y)
  int color = -1;                                 // palette index; -1: the series' own index
  bool dashed = false;                            // a dashed line
  bool markers = false;  // a dot at each point (a series of one point shows as its dot)
};

// Axes from 0 to the largest x and y; one coloured polyline and legend entry per series.
std::string LineChartSvg(const std::vector<Series>& series, std::string_view title, std::string_view x_label,
                         std::string_view y_label);

// Nodes in ring order, left to right and wrapping into rows: faulty nodes red, nodes of a TP ring in
// that ring's colour (a bridged ring outlined), healthy nodes no ring uses grey. Needs a placement
// made with keep_groups.
std::string PlacementSvg(const std::vector<char>& faulty, const TpPlacement& placement,
                         std::string_view title);

}  // namespace weightport::sim::hbd
