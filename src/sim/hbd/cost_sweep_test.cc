#include "weightport/sim/hbd/cost_sweep.h"

#include <gtest/gtest.h>

namespace weightport::sim::hbd {
namespace {

// The built-in prices (configs/hbd-cost.json): 800G transceiver $1,250, switch path $150, fiber
// $100, NVLink switch tray $28,000, a rack's backplane $40,000; 9 trays per 72 GPUs.
constexpr double kNvl72At28k = 9 * 28'000.0 / 72 + 40'000.0 / 72;  // $4,055.56

const CostSweepPoint* Find(const CostSweep& s, double count, double scale, double tray) {
  for (const CostSweepPoint& p : s.points)
    if (p.ocstrx_per_gpu == count && p.ocstrx_price_scale == scale && p.tray_usd == tray) return &p;
  return nullptr;
}

TEST(CostSweep, EveryPointIsTheCostModelRepricedByHand) {
  CostSweepOptions o;
  auto s = SweepCost(DefaultCostParams(), o);
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_EQ(s->points.size(), o.ocstrx_per_gpu.size() * o.ocstrx_price_scale.size() * o.tray_usd.size());
  // The parameters' own point: 8 OCSTrx at K = 3: 8 x $1,250 + 24 paths x $150 + 12 fibers x $100.
  const CostSweepPoint* own = Find(*s, 8, 1.0, 28'000);
  ASSERT_NE(own, nullptr);
  EXPECT_DOUBLE_EQ(own->infinitehbd_usd, 14'800);
  EXPECT_NEAR(own->nvl72_usd, kNvl72At28k, 1e-6);
  EXPECT_NEAR(own->ratio, 14'800 / kNvl72At28k, 1e-9);
  EXPECT_DOUBLE_EQ(own->ocstrx_unit_usd, 1'700);
  // Half the unit price, half the count: 4 x $625 + 12 x $75 + 6 fibers x $100 (fibers unscaled).
  const CostSweepPoint* cheap = Find(*s, 4, 0.5, 28'000);
  ASSERT_NE(cheap, nullptr);
  EXPECT_DOUBLE_EQ(cheap->infinitehbd_usd, 4'000);
  // A dearer tray moves only NVL-72.
  const CostSweepPoint* dear = Find(*s, 8, 1.0, 101'000);
  ASSERT_NE(dear, nullptr);
  EXPECT_DOUBLE_EQ(dear->infinitehbd_usd, 14'800);
  EXPECT_NEAR(dear->nvl72_usd, 9 * 101'000.0 / 72 + 40'000.0 / 72, 1e-6);
}

TEST(CostSweep, ThresholdsSolveForThePapersRatio) {
  CostSweepOptions o;
  o.tray_usd = {28'000, 101'000};
  auto s = SweepCost(DefaultCostParams(), o);
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  ASSERT_EQ(s->thresholds.size(), 2u);
  for (const auto& t : s->thresholds) {
    const double nvl = 9 * t.tray_usd / 72 + 40'000.0 / 72;
    // One OCSTrx at K = 3 costs $1,250 + 3 x $150 + 1.5 fibers x $100 = $1,850 per GPU.
    EXPECT_NEAR(t.max_ocstrx_at_price, 0.31 * nvl / 1'850, 1e-9) << t.tray_usd;
    // At 8 per GPU the 12 fibers stay at $1,200; the rest scales.
    EXPECT_NEAR(t.max_price_scale_at_count, (0.31 * nvl - 1'200) / (8 * 1'700.0), 1e-9) << t.tray_usd;
  }
}

TEST(CostSweep, CostPerTbpsCoversEveryArchitecture) {
  auto s = SweepCost(DefaultCostParams(), {});
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_EQ(s->per_tbps.size(), ArchNames().size());
  for (const ArchTbpsCost& a : s->per_tbps) {
    EXPECT_GT(a.tbps_per_gpu, 0) << a.arch;
    EXPECT_NEAR(a.usd_per_tbps * a.tbps_per_gpu, a.hbd_usd_per_gpu, 1e-6) << a.arch;
  }
}

TEST(CostSweep, BadOptionsAreNamed) {
  CostSweepOptions o;
  o.tray_usd = {};
  EXPECT_NE(SweepCost(DefaultCostParams(), o).status().message().find("switch tray price"),
            std::string::npos);
  o = {};
  o.ocstrx_per_gpu = {4, -1};
  EXPECT_NE(SweepCost(DefaultCostParams(), o).status().message().find("OCSTrx per GPU"), std::string::npos);
  o = {};
  o.k = 0;
  EXPECT_EQ(SweepCost(DefaultCostParams(), o).status().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace weightport::sim::hbd
