// Reading a topology from the command line: a graph JSON file (weightport topology show --write)
// or a preset with optional parameters, "dgx-h100" or "dgx-h100:nodes=4,nic_gbps=200".
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "weightport/core/status.h"
#include "weightport/topology/graph.h"

namespace weightport::cli {

// "k=v,k=v" -> {"k": v}: a value that parses as JSON (a number, true) is kept as such, anything
// else is a string. Errors name the malformed item.
Result<nlohmann::json> ParseParamList(const std::string& text);
// A file path when such a file exists, else a preset spec.
Result<topology::Graph> LoadGraph(const std::string& spec);

inline constexpr const char* kTopologySpecHelp =
    "a graph JSON file, or a preset with optional parameters: dgx-h100, dgx-h200, gb200-nvl72, tpuv4, "
    "infinitehbd, fat-tree, e.g. dgx-h100:nodes=4,nic_gbps=200 (see 'weightport topology presets')";

}  // namespace weightport::cli
