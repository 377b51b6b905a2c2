// weightport hbd cost-sweep: how the InfiniteHBD / NVL-72 HBD cost ratio moves with the OCSTrx count
// and price per GPU and the NVLink switch tray price, and each architecture's HBD cost per Tb/s.
#include <cstdio>

#include <nlohmann/json.hpp>

#include "cli/cli_common.h"
#include "hbd_options.h"
#include "weightport/sim/hbd/cost_sweep.h"

namespace weightport::cli {

using sim::hbd::CostParams;
using sim::hbd::CostSweep;
using sim::hbd::CostSweepOptions;

namespace {

nlohmann::ordered_json SweepJson(const CostSweep& s, const std::string& prices) {
  nlohmann::ordered_json points = nlohmann::json::array(), thresholds = nlohmann::json::array(),
                         per_tbps = nlohmann::json::array();
  for (const auto& p : s.points)
    points.push_back({{"ocstrx_per_gpu", p.ocstrx_per_gpu},
                      {"ocstrx_price_scale", p.ocstrx_price_scale},
                      {"ocstrx_unit_usd", p.ocstrx_unit_usd},
                      {"tray_usd", p.tray_usd},
                      {"infinitehbd_usd", p.infinitehbd_usd},
                      {"nvl72_usd", p.nvl72_usd},
                      {"ratio", p.ratio},
                      {"holds", p.ratio <= s.options.target_ratio}});
  for (const auto& t : s.thresholds)
    thresholds.push_back({{"tray_usd", t.tray_usd},
                          {"max_ocstrx_per_gpu_at_price", t.max_ocstrx_at_price},
                          {"max_price_scale_at_count", t.max_price_scale_at_count}});
  for (const auto& a : s.per_tbps)
    per_tbps.push_back({{"arch", a.arch},
                        {"hbd_usd_per_gpu", a.hbd_usd_per_gpu},
                        {"tbps_per_gpu", a.tbps_per_gpu},
                        {"usd_per_tbps", a.usd_per_tbps}});
  return {{"prices", prices}, {"k", s.options.k},         {"target_ratio", s.options.target_ratio},
          {"points", points}, {"thresholds", thresholds}, {"usd_per_tbps", per_tbps}};
}

void PrintSweep(const CostSweep& s, const CostParams& params, const std::string& prices) {
  const CostSweepOptions& o = s.options;
  std::printf(
      "InfiniteHBD (K = %d) HBD cost per GPU as a share of NVL-72's (%s); * where it is at most %.0f%%\n",
      o.k, prices.c_str(), o.target_ratio * 100);
  std::printf("rows: OCSTrx per GPU; columns: OCSTrx unit price (transceiver + %d switch paths)\n", o.k);
  size_t i = 0;
  for (double tray : o.tray_usd) {
    std::printf("\nNVLink switch tray $%.0f\n%-8s", tray, "OCSTrx");
    for (double scale : o.ocstrx_price_scale)
      std::printf(" %10s",
                  ("$" + std::to_string(static_cast<long>((params.parts.at("trx_800g").usd +
                                                           o.k * params.parts.at("ocs_switch_path").usd) *
                                                          scale)))
                      .c_str());
    std::printf("\n");
    for (double count : o.ocstrx_per_gpu) {
      std::printf("%-8g", count);
      for (size_t c = 0; c < o.ocstrx_price_scale.size(); ++c, ++i) {
        const auto& p = s.points[i];
        std::printf(" %9.0f%%%s", p.ratio * 100, p.ratio <= o.target_ratio ? "*" : " ");
      }
      std::printf("\n");
    }
  }
  std::printf("\nWhere %.0f%% holds:\n", o.target_ratio * 100);
  for (const auto& t : s.thresholds)
    std::printf(
        "  tray $%-7.0f at most %.2f OCSTrx per GPU at the file's unit price, or %.1f%% of that price at %g "
        "per GPU\n",
        t.tray_usd, t.max_ocstrx_at_price, t.max_price_scale_at_count * 100,
        params.infinitehbd.ocstrx_per_gpu);
  std::printf("\nHBD cost per Tb/s of bandwidth per GPU (each way), at the file's prices:\n");
  for (const auto& a : s.per_tbps)
    std::printf("  %-12s $%8.0f per GPU  %5.1f Tb/s  $%7.0f per Tb/s\n", a.arch.c_str(), a.hbd_usd_per_gpu,
                a.tbps_per_gpu, a.usd_per_tbps);
}

}  // namespace

int RunHbdCostSweep(const HbdOptions& o) {
  CostParams params = sim::hbd::DefaultCostParams();
  if (!o.cost.empty()) {
    auto loaded = sim::hbd::LoadCostParams(o.cost);
    if (!loaded.ok()) return Fail("hbd cost-sweep", loaded.status());
    params = std::move(*loaded);
  }
  CostSweepOptions so;
  so.k = o.k;
  auto s = sim::hbd::SweepCost(params, so);
  if (!s.ok()) return Fail("hbd cost-sweep", s.status());
  const std::string prices = o.cost.empty() ? "built-in prices, configs/hbd-cost.json" : o.cost;
  if (o.json) {
    std::printf("%s\n", SweepJson(*s, prices).dump(2).c_str());
  } else {
    PrintSweep(*s, params, prices);
  }
  return kExitOk;
}

}  // namespace weightport::cli
