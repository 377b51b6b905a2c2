// How the InfiniteHBD-against-NVL-72 cost verdict moves with the two inputs that set it: the
// OCSTrx count and unit price per GPU, and the NVLink switch tray price (cost_model.h). Each point
// reprices a copy of the parameters and runs CostPerGpu on both, so the sweep and `hbd compare`
// never disagree. Also the HBD cost per Tb/s of each architecture at its own bandwidth per GPU.
#pragma once

#include <string>
#include <vector>

#include "weightport/core/status.h"
#include "weightport/sim/hbd/cost_model.h"

namespace weightport::sim::hbd {

struct CostSweepOptions {
  int k = 3;  // InfiniteHBD's hop reach: each OCSTrx switches among k paths
  std::vector<double> ocstrx_per_gpu = {2, 4, 6, 8};
  // The OCSTrx unit price (800G transceiver + k switch paths) as a fraction of the parameters'.
  std::vector<double> ocstrx_price_scale = {0.25, 0.5, 1.0};
  std::vector<double> tray_usd = {14'000, 28'000, 56'000, 101'000};
  double target_ratio = 0.31;  // the paper's InfiniteHBD / NVL-72 HBD cost
};

struct CostSweepPoint {
  double ocstrx_per_gpu = 0, ocstrx_price_scale = 0, tray_usd = 0;
  double ocstrx_unit_usd = 0;                 // what one OCSTrx (transceiver and k switch paths) costs here
  double infinitehbd_usd = 0, nvl72_usd = 0;  // HBD per GPU
  double ratio = 0;                           // infinitehbd / nvl72
};

struct ArchTbpsCost {
  std::string arch;
  double hbd_usd_per_gpu = 0, tbps_per_gpu = 0, usd_per_tbps = 0;
};

struct CostSweep {
  CostSweepOptions options;
  std::vector<CostSweepPoint> points;  // tray outermost, then count, then price scale
  // At each tray price, the most OCSTrx per GPU at which the target holds with the parameters'
  // unit price (0: not even with one; continuous, from the linear cost), and the unit-price scale
  // it needs at the parameters' count.
  struct Threshold {
    double tray_usd = 0, max_ocstrx_at_price = 0, max_price_scale_at_count = 0;
  };
  std::vector<Threshold> thresholds;
  std::vector<ArchTbpsCost> per_tbps;  // every architecture, at the parameters' prices
};

// InvalidArgument naming the option for empty or non-positive lists, k < 1, a target <= 0.
Result<CostSweep> SweepCost(const CostParams& params, const CostSweepOptions& options);

}  // namespace weightport::sim::hbd
