// Presets: the interconnects weightport models, built by parameter. Every default is a public
// figure (see docs/TOPOLOGY.md for the sources) or a stated assumption.
//
//   dgx-h100, dgx-h200  nodes of 8 GPUs on one NVSwitch (NVLink4, 450 GB/s per GPU each way), one
//                       400G NIC per GPU behind a PCIe Gen5 switch, a rail-optimised two-tier
//                       fat-tree (rail leaf per scalable unit, spines above)
//   gb200-nvl72         racks of 72 GPUs on NVLink5 (900 GB/s per GPU), one 400G NIC per GPU, the
//                       same two-tier DCN
//   tpuv4               cubes of 4x4x4 chips in a torus (6 ICI links per chip), cube faces joined
//                       by optical circuit switches; hosts of 4 chips on the DCN
//   infinitehbd         nodes of g GPUs whose optical transceivers form a ring of nodes (each node
//                       reaches the nodes within K hops; the active ring uses the +-1 circuits),
//                       plus a DCN
//   fat-tree            hosts (host memory, optional GPUs) on ToRs, ToRs on spines
//
// Parameters are a JSON object of overrides; unknown keys and out-of-range values are errors
// naming the preset and the key.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "weightport/core/status.h"
#include "weightport/topology/graph.h"

namespace weightport::topology {

struct PresetInfo {
  std::string name;
  std::string summary;      // one line
  nlohmann::json defaults;  // every parameter with its default value
  nlohmann::json help;      // parameter -> one-line meaning (with its unit)
};

std::vector<PresetInfo> Presets();
// The preset with `params` merged over its defaults; the merged parameters are kept in
// Graph::params().
Result<Graph> MakePreset(std::string_view name, const nlohmann::json& params = nlohmann::json::object());

}  // namespace weightport::topology
