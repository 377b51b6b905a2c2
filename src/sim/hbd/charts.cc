#include "weightport/sim/hbd/charts.h"

#include <algorithm>
#include <cstdio>

#include "weightport/topology/render.h"

namespace weightport::sim::hbd {
namespace {

constexpr const char* kPalette[] = {"#1f77b4", "#ff7f0e", "#2ca02c", "#9467bd",
                                    "#8c564b", "#e377c2", "#17becf"};

std::string Escape(std::string_view text) { return topology::XmlEscape(std::string(text)); }

std::string Format(const char* fmt, auto... args) {
  char buf[512];
  std::snprintf(buf, sizeof buf, fmt, args...);
  return buf;
}

std::string Header(double w, double h, std::string_view title) {
  return Format(
             "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" height=\"%.0f\" "
             "font-family=\"sans-serif\" font-size=\"12\">\n<rect width=\"100%%\" height=\"100%%\" "
             "fill=\"white\"/>\n",
             w, h) +
         "<text x=\"20\" y=\"22\" font-size=\"14\">" + Escape(title) + "</text>\n";
}

}  // namespace

std::string LineChartSvg(const std::vector<Series>& series, std::string_view title, std::string_view x_label,
                         std::string_view y_label) {
  const double w = 760, h = 400, left = 70, right = 170, top = 40, bottom = 50;
  double xmax = 1e-12, ymax = 1e-12;
  for (const Series& s : series)
    for (auto [x, y] : s.points) xmax = std::max(xmax, x), ymax = std::max(ymax, y);
  auto px = [&](double x) { return left + (w - left - right) * x / xmax; };
  auto py = [&](double y) { return h - bottom - (h - top - bottom) * y / ymax; };
  std::string svg = Header(w, h, title);
  svg += Format("<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"black\"/>\n", left,
                h - bottom, w - right, h - bottom);
  svg += Format("<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"black\"/>\n", left, top, left,
                h - bottom);
  for (int i = 0; i <= 5; ++i) {
    svg += Format("<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">%.3g</text>\n", px(xmax * i / 5),
                  h - bottom + 16, xmax * i / 5);
    svg += Format("<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"end\">%.3g</text>\n", left - 6,
                  py(ymax * i / 5) + 4, ymax * i / 5);
  }
  svg += Format("<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">", (left + w - right) / 2, h - 12) +
         Escape(x_label) + "</text>\n";
  svg += Format("<text x=\"16\" y=\"%.1f\" transform=\"rotate(-90 16 %.1f)\" text-anchor=\"middle\">",
                (top + h - bottom) / 2, (top + h - bottom) / 2) +
         Escape(y_label) + "</text>\n";
  for (size_t i = 0; i < series.size(); ++i) {
    const Series& line = series[i];
    const char* color = kPalette[(line.color >= 0 ? line.color : i) % std::size(kPalette)];
    std::string points;
    for (auto [x, y] : line.points) points += Format("%.1f,%.1f ", px(x), py(y));
    svg += Format("<polyline fill=\"none\" stroke=\"%s\" stroke-width=\"2\"%s points=\"", color,
                  line.dashed ? " stroke-dasharray=\"6 4\"" : "") +
           points + "\"/>\n";
    for (auto [x, y] : line.markers ? line.points : std::vector<std::pair<double, double>>{})
      svg += Format("<circle cx=\"%.1f\" cy=\"%.1f\" r=\"3\" fill=\"%s\"/>\n", px(x), py(y), color);
    svg += Format("<text x=\"%.1f\" y=\"%.1f\" fill=\"%s\">", w - right + 12, top + 16 + 18.0 * i, color) +
           Escape(series[i].name) + "</text>\n";
  }
  return svg + "</svg>\n";
}

std::string PlacementSvg(const std::vector<char>& faulty, const TpPlacement& placement,
                         std::string_view title) {
  const int n = static_cast<int>(faulty.size());
  const int per_row = std::min(n, 32), rows = (n + per_row - 1) / std::max(1, per_row);
  const double cell = 22, w = 40 + per_row * cell, h = 90 + rows * cell;
  std::vector<int> ring_of(n, -1);
  std::vector<char> bridged(placement.tp_groups.size(), 0);
  for (size_t r = 0; r < placement.tp_groups.size(); ++r) {
    for (int node : placement.tp_groups[r].nodes) ring_of[node] = static_cast<int>(r);
    bridged[r] = placement.tp_groups[r].bridged;
  }
  std::string svg = Header(w, h, title);
  for (int i = 0; i < n; ++i) {
    const double x = 20 + (i % per_row) * cell, y = 40 + (i / per_row) * cell;
    const int r = ring_of[i];
    const char* fill = faulty[i] ? "#d62728" : r < 0 ? "#c7c7c7" : kPalette[r % std::size(kPalette)];
    const char* stroke = r >= 0 && bridged[r] ? "black" : "white";
    svg += Format(
        "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"%s\" stroke=\"%s\" "
        "stroke-width=\"2\"><title>node %d%s</title></rect>\n",
        x, y, cell - 3, cell - 3, fill, stroke, i,
        faulty[i] ? " (faulty)"
        : r < 0   ? " (unused)"
                  : (" (ring " + std::to_string(r) + ")").c_str());
  }
  svg += Format(
      "<text x=\"20\" y=\"%.1f\">%d rings (%d bridged over faulty nodes), %d of %d healthy GPUs used; "
      "red: faulty, grey: unused, outlined: bridged</text>\n",
      h - 16, placement.groups, placement.bridged_groups, placement.usable_gpus, placement.healthy_gpus);
  return svg + "</svg>\n";
}

}  // namespace weightport::sim::hbd
