#include "weightport/sim/hbd/tor_curve.h"

#include <gtest/gtest.h>

#include <limits>

namespace weightport::sim::hbd {
namespace {

constexpr double kNever = std::numeric_limits<double>::infinity();

TorCurveOptions Options(int tp, int dp, std::vector<double> sweep, int samples = 5) {
  return {
      .tp = tp, .dp = dp, .tor_gpus = 576, .borrow_gpus = std::move(sweep), .samples = samples, .seed = 3};
}

// 4,608 GPUs: 8 ToR groups of 576 for every architecture.
int Nodes(const ArchSpec& a) { return 4608 / a.gpus_per_node; }

TEST(TorCurve, LeftoversCountAsWasteAndNotAsCrossTrafficOnEveryArchitecture) {
  // No faults, DP 5 (no ToR group's TP groups divide into fives): waste = TP waste + idle TP
  // groups' GPUs, the same sum for every architecture; B = infinity forms no group across ToRs.
  for (const char* name : {"infinitehbd", "nvl-72", "nvl-36", "tpuv4", "dgx"}) {
    const ArchSpec a = *MakeArch(name, 3);
    const int tp = a.kind == ArchKind::kDgx ? 8 : 16;
    auto c = EvaluateTorCurve(a, Nodes(a), 0, Options(tp, 5, {0, kNever}, 1));
    ASSERT_TRUE(c.ok()) << name << ": " << c.status().ToString();
    ASSERT_EQ(c->points.size(), 2u);
    for (const TorCurvePoint& p : c->points) {
      EXPECT_NEAR(p.waste, p.tp_waste + p.idle_tp_groups * tp / 4608.0, 1e-12)
          << name << " B " << p.borrow_gpus;
      EXPECT_GT(p.idle_tp_groups, 0) << name;
      ASSERT_TRUE(p.cross_tor.has_value()) << name;
    }
    EXPECT_GT(c->points[0].cross_tor.value(), 0) << name;  // B = 0 pairs leftovers across ToRs
    EXPECT_EQ(c->points[1].cross_tor.value(), 0) << name;
    EXPECT_GT(c->points[1].waste, c->points[0].waste) << name;  // ... and idles them instead
  }
}

TEST(TorCurve, FixedTpGroupsTradeMonotonicallyAndTheRingsJointPlacementBeatsGreedy) {
  // For architectures whose TP groups cannot move, the candidate DP groups are the same at every B
  // and B only declines those whose crossings cost more than the GPUs they save, the most crossing
  // first: waste never falls and the cross-ToR share never rises as B grows.
  const std::vector<double> sweep = {0, 16, 64, 256, 512, 1024, 2048, 4096, kNever};
  for (const char* name : {"nvl-72", "nvl-36", "tpuv4"}) {
    const ArchSpec a = *MakeArch(name);
    auto c = EvaluateTorCurve(a, Nodes(a), 0.05, Options(16, 8, sweep));
    ASSERT_TRUE(c.ok()) << name;
    EXPECT_FALSE(c->greedy.has_value());
    for (size_t i = 1; i < c->points.size(); ++i) {
      EXPECT_GE(c->points[i].waste, c->points[i - 1].waste) << name << " B " << sweep[i];
      if (c->points[i].cross_tor && c->points[i - 1].cross_tor) {
        EXPECT_LE(*c->points[i].cross_tor, *c->points[i - 1].cross_tor + 1e-12) << name << " B " << sweep[i];
      }
    }
    EXPECT_EQ(c->points.back().cross_tor.value_or(0), 0) << name;
  }
  // The ring: at B = 0 the joint placement wastes exactly what the greedy cut wastes at the TP
  // level, and crosses ToRs with fewer rings (its cross-ToR share need not be lower: most of that
  // comes from DP leftovers of ToR groups, not from rings); at B = infinity nothing crosses.
  const ArchSpec ring = *MakeArch("infinitehbd", 3);
  auto c = EvaluateTorCurve(ring, Nodes(ring), 0.05, Options(32, 8, sweep));
  ASSERT_TRUE(c.ok());
  ASSERT_TRUE(c->greedy.has_value());
  EXPECT_DOUBLE_EQ(c->points.front().tp_waste, c->greedy->tp_waste);
  EXPECT_LT(c->points.front().crossing_tp_groups, c->greedy->crossing_tp_groups);
  EXPECT_EQ(c->points.back().crossing_tp_groups, 0);
  EXPECT_EQ(c->points.back().cross_tor.value_or(0), 0);
  for (size_t i = 1; i < c->points.size(); ++i)
    EXPECT_GE(c->points[i].tp_waste, c->points[i - 1].tp_waste) << "B " << sweep[i];
}

TEST(TorCurve, BadInputsAreErrors) {
  const ArchSpec ring = *MakeArch("infinitehbd", 3);
  EXPECT_FALSE(EvaluateTorCurve(ring, 1152, 1.0, Options(16, 0, {0})).ok());
  EXPECT_FALSE(EvaluateTorCurve(ring, 1152, 0.01, Options(16, 0, {-1})).ok());
  auto no_tor = Options(16, 0, {0});
  no_tor.tor_gpus = 0;
  EXPECT_FALSE(EvaluateTorCurve(ring, 1152, 0.01, no_tor).ok());
}

}  // namespace
}  // namespace weightport::sim::hbd
