#include "weightport/sim/hbd/charts.h"

#include <gtest/gtest.h>

namespace weightport::sim::hbd {
namespace {

size_t Count(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

TEST(Charts, ALineChartHasOneLineAndOneLegendEntryPerSeries) {
  const std::string svg = LineChartSvg({{"ring <k=3>", {{1, 0.1}, {5, 0.5}}}, {"nvl-72", {{1, 10}, {5, 8}}}},
                                       "waste & faults", "nodes down (%)", "waste (%)");
  EXPECT_EQ(Count(svg, "<polyline"), 2u);
  EXPECT_NE(svg.find("ring &lt;k=3&gt;"), std::string::npos);
  EXPECT_NE(svg.find("waste &amp; faults"), std::string::npos);
  EXPECT_EQ(Count(svg, "<svg"), Count(svg, "</svg>"));
}

TEST(Charts, SeriesCanShareAColourDashAndMarkTheirPoints) {
  Series solid{"ring 2%", {{0, 1}, {5, 0.5}}, 0};
  Series dashed{"ring 5%", {{0, 2}, {6, 1}, {8, 0.5}}, 0, /*dashed=*/true, /*markers=*/true};
  Series dot{"greedy", {{4, 0.4}}, 3, false, true};
  const std::string svg = LineChartSvg({solid, dashed, dot}, "t", "x", "y");
  EXPECT_EQ(Count(svg, "<circle"), 4u);  // the markers of the last two series only
  EXPECT_EQ(Count(svg, "stroke-dasharray"), 1u);
  EXPECT_EQ(Count(svg, "stroke=\"#1f77b4\""), 2u);  // palette colour 0, twice
  EXPECT_EQ(Count(svg, "fill=\"#9467bd\""), 2u);    // colour 3: the dot and its legend entry
}

TEST(Charts, APlacementDrawsEveryNodeWithItsState) {
  auto arch = MakeArch("infinitehbd", 3);
  std::vector<char> faulty(12, 0);
  faulty[2] = faulty[3] = 1;  // ring 0 is 0, 1, 4, 5: bridged over them
  auto p = PlaceTp(*arch, faulty, 16, true);
  ASSERT_TRUE(p.ok());
  const std::string svg = PlacementSvg(faulty, *p, "ring");
  EXPECT_EQ(Count(svg, "<rect x="), 12u);
  EXPECT_EQ(Count(svg, "(faulty)"), 2u);
  EXPECT_EQ(Count(svg, "(unused)"), 2u);  // 10 healthy nodes, rings of 4
  EXPECT_NE(svg.find("2 rings (1 bridged"), std::string::npos) << svg;
}

}  // namespace
}  // namespace weightport::sim::hbd
