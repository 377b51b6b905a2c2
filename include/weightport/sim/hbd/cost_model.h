// Cost and power per GPU of the HBD architectures of architecture.h, from a parameter file of
// part prices and watts, each with its source (configs/hbd-cost.json; the same values are built
// in as DefaultCostParams()).
//
// Counted: the interconnect that makes the HBD (switch trays and chips, copper backplanes,
// transceivers, optical circuit switch ports, fibers) and, separately, the datacenter network
// (DCN) all architectures share (NIC, optics, leaf/spine ports, fibers), both per GPU. Not
// counted: GPUs, hosts, racks, power delivery, cooling; the GPU's price and watts are reported for
// context only. Watts are typical draw, not provisioned power.
#pragma once

#include <functional>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "weightport/core/status.h"
#include "weightport/sim/hbd/architecture.h"

namespace weightport::sim::hbd {

struct CostPart {
  std::string name;
  double usd = 0, watts = 0;  // per unit
  std::string source;         // a citation, or "assumption: ..." with the reasoning
  bool operator==(const CostPart&) const = default;
};

// The parts the model prices (the keys of "parts"; all required):
//   gpu (context only), trx_800g, trx_400g, ocs_switch_path (the adder per switchable path of an
//   OCSTrx), fiber, nvlink_switch_tray (GB200 generation, 2 switch chips), nvlink_backplane (one
//   72-GPU rack's copper cartridges), nvswitch3_chip, ocs_port, nic_400g, switch_port_800g.
std::vector<std::string> CostPartNames();

struct CostParams {
  std::map<std::string, CostPart, std::less<>> parts;  // by name
  struct InfiniteHbd {
    double ocstrx_per_gpu = 0;  // 800G OCS transceivers per GPU (active ring bandwidth)
    double tbps_per_gpu = 0;    // HBD bandwidth per GPU, each way
    std::string source;
    bool operator==(const InfiniteHbd&) const = default;
  } infinitehbd;
  struct Nvl {
    double nvl72_switch_trays = 0;    // per 72-GPU rack
    double nvl36_switch_trays = 0;    // per 36-GPU rack
    double uplinks_800g_per_gpu = 0;  // domains above 72: optical links per GPU to the second tier
    double tbps_per_gpu = 0;
    std::string source;
    bool operator==(const Nvl&) const = default;
  } nvl;
  struct TpuV4 {
    double chips_per_cube = 0;
    double optical_links_per_cube = 0;
    double tbps_per_chip = 0;
    std::string source;
    bool operator==(const TpuV4&) const = default;
  } tpuv4;
  struct Dgx {
    double gpus_per_node = 0;
    double nvswitch_chips_per_node = 0;
    double tbps_per_gpu = 0;
    std::string source;
    bool operator==(const Dgx&) const = default;
  } dgx;
  struct Dcn {
    std::map<std::string, double, std::less<>> per_gpu;  // part name -> count per GPU
    std::string source;
    bool operator==(const Dcn&) const = default;
  } dcn;
  bool operator==(const CostParams&) const = default;
};

// Strict: unknown keys, missing fields, unknown part names, negative or non-finite numbers, empty
// sources and zero divisors (cube size, GPUs per node) are InvalidArgument naming the key, e.g.
// "parts.trx_800g.usd: must be a number >= 0 (got -1)".
Result<CostParams> ParseCostParams(const nlohmann::json& json);
// Reads and parses a parameter file; errors name the path.
Result<CostParams> LoadCostParams(const std::string& path);
// The built-in defaults: the content of configs/hbd-cost.json, parsed once.
const CostParams& DefaultCostParams();

// One part's share of one GPU: `count` units of `part`.
struct CostLine {
  std::string part;
  double count = 0, usd = 0, watts = 0;
};

struct ArchCost {
  double hbd_usd_per_gpu = 0, hbd_watts_per_gpu = 0;
  double dcn_usd_per_gpu = 0, dcn_watts_per_gpu = 0;
  double hbd_tbps_per_gpu = 0;        // HBD bandwidth per GPU each way, for cost per Tb/s
  double gpu_usd = 0, gpu_watts = 0;  // context: the GPU itself
  std::vector<CostLine> hbd_lines, dcn_lines;
};

// Per GPU, by architecture (HBD lines; the DCN lines are params.dcn.per_gpu for every kind):
//   infinitehbd  ocstrx_per_gpu x (trx_800g + K x ocs_switch_path) + ocstrx_per_gpu x K / 2
//                fibers: every OCSTrx switches among K fibers, one per hop distance, and a fiber
//                joins two of them. gpus_per_node does not change the per-GPU count (GPU j of a
//                node links to GPU j of its neighbours) but must be >= 1; K >= 1.
//   nvl-36/72    nvl36 or nvl72 switch trays / domain GPUs + nvlink_backplane / 72.
//   nvl-N, N > 72 and a multiple of 72: two-tier Clos of NVL-72 racks: 3 x nvl72 trays / 72
//                (first tier doubled, plus the second tier), 2 x uplinks_800g_per_gpu trx_800g and
//                uplinks_800g_per_gpu fibers, + nvlink_backplane / 72. Other sizes are errors.
//   tpuv4        optical_links_per_cube / chips_per_cube x (trx_400g + ocs_port + fiber); the
//                architecture's cube size must equal chips_per_cube.
//   dgx          nvswitch_chips_per_node / gpus_per_node nvswitch3_chip; the architecture's node
//                size must equal gpus_per_node.
Result<ArchCost> CostPerGpu(const ArchSpec& arch, const CostParams& params);

}  // namespace weightport::sim::hbd
