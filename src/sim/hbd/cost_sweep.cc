#include "weightport/sim/hbd/cost_sweep.h"

#include <algorithm>

namespace weightport::sim::hbd {
namespace {

Status CheckPositive(const std::vector<double>& values, const std::string& name) {
  if (values.empty()) return InvalidArgument(name + ": give at least one value");
  for (double v : values)
    if (!(v > 0)) return InvalidArgument(name + ": values must be > 0 (got " + std::to_string(v) + ")");
  return Status::Ok();
}

Result<double> HbdUsd(std::string_view arch, int k, const CostParams& params) {
  WP_ASSIGN_OR_RETURN(ArchSpec spec, MakeArch(arch, k));
  WP_ASSIGN_OR_RETURN(ArchCost cost, CostPerGpu(spec, params));
  return cost.hbd_usd_per_gpu;
}

// A copy of `params` with the sweep's inputs: `count` OCSTrx per GPU, their transceiver and switch
// paths at `scale` x the parameters' prices, the tray at `tray`.
CostParams Repriced(const CostParams& params, double count, double scale, double tray) {
  CostParams p = params;
  p.infinitehbd.ocstrx_per_gpu = count;
  p.parts.at("trx_800g").usd *= scale;
  p.parts.at("ocs_switch_path").usd *= scale;
  p.parts.at("nvlink_switch_tray").usd = tray;
  return p;
}

}  // namespace

Result<CostSweep> SweepCost(const CostParams& params, const CostSweepOptions& o) {
  if (o.k < 1) return InvalidArgument("k: must be >= 1 (got " + std::to_string(o.k) + ")");
  if (!(o.target_ratio > 0)) return InvalidArgument("target ratio: must be > 0");
  WP_RETURN_IF_ERROR(CheckPositive(o.ocstrx_per_gpu, "OCSTrx per GPU"));
  WP_RETURN_IF_ERROR(CheckPositive(o.ocstrx_price_scale, "OCSTrx price scale"));
  WP_RETURN_IF_ERROR(CheckPositive(o.tray_usd, "switch tray price"));
  for (const char* part : {"trx_800g", "ocs_switch_path", "nvlink_switch_tray"})
    if (!params.parts.count(part)) return InvalidArgument(std::string("parts.") + part + ": missing");
  CostSweep out;
  out.options = o;
  const double unit = params.parts.at("trx_800g").usd + o.k * params.parts.at("ocs_switch_path").usd;
  for (double tray : o.tray_usd) {
    for (double count : o.ocstrx_per_gpu) {
      for (double scale : o.ocstrx_price_scale) {
        const CostParams p = Repriced(params, count, scale, tray);
        CostSweepPoint pt{count, scale, tray, unit * scale};
        WP_ASSIGN_OR_RETURN(pt.infinitehbd_usd, HbdUsd("infinitehbd", o.k, p));
        WP_ASSIGN_OR_RETURN(pt.nvl72_usd, HbdUsd("nvl-72", o.k, p));
        pt.ratio = pt.nvl72_usd > 0 ? pt.infinitehbd_usd / pt.nvl72_usd : 0;
        out.points.push_back(pt);
      }
    }
    // InfiniteHBD's HBD cost is linear in the count (transceivers, paths, fibers per OCSTrx) and,
    // apart from the fibers, in the unit price: solve for where it meets target x NVL-72.
    const CostParams one = Repriced(params, 1, 1, tray);
    WP_ASSIGN_OR_RETURN(double per_ocstrx, HbdUsd("infinitehbd", o.k, one));
    WP_ASSIGN_OR_RETURN(double nvl, HbdUsd("nvl-72", o.k, one));
    const double budget = o.target_ratio * nvl;
    const double count = params.infinitehbd.ocstrx_per_gpu;
    const double fibers = count * o.k / 2 * params.parts.at("fiber").usd;
    const double priced = count * unit;
    out.thresholds.push_back({tray, per_ocstrx > 0 ? budget / per_ocstrx : 0,
                              priced > 0 ? std::max(0.0, (budget - fibers) / priced) : 0});
  }
  for (const std::string& name : ArchNames()) {
    WP_ASSIGN_OR_RETURN(ArchSpec spec, MakeArch(name, o.k));
    WP_ASSIGN_OR_RETURN(ArchCost cost, CostPerGpu(spec, params));
    out.per_tbps.push_back({name, cost.hbd_usd_per_gpu, cost.hbd_tbps_per_gpu,
                            cost.hbd_tbps_per_gpu > 0 ? cost.hbd_usd_per_gpu / cost.hbd_tbps_per_gpu : 0});
  }
  return out;
}

}  // namespace weightport::sim::hbd
