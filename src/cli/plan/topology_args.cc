#include "topology_args.h"

#include "cli/cli_common.h"

#include <filesystem>

#include "weightport/core/json_util.h"
#include "weightport/topology/presets.h"

namespace weightport::cli {

Result<nlohmann::json> ParseParamList(const std::string& text) {
  nlohmann::json out = nlohmann::json::object();
  for (const std::string& item : SplitList(text)) {
    const size_t eq = item.find('=');
    if (eq == std::string::npos || eq == 0)
      return InvalidArgument("parameter '" + item + "' must look like key=value");
    const std::string key = item.substr(0, eq), value = item.substr(eq + 1);
    auto parsed = nlohmann::json::parse(value, nullptr, /*allow_exceptions=*/false);
    out[key] =
        parsed.is_discarded() || parsed.is_object() || parsed.is_array() ? nlohmann::json(value) : parsed;
  }
  return out;
}

Result<topology::Graph> LoadGraph(const std::string& spec) {
  std::error_code ec;
  if (std::filesystem::is_regular_file(spec, ec)) {
    WP_ASSIGN_OR_RETURN(nlohmann::json j, json_util::ParseFile(spec));
    auto graph = topology::Graph::FromJson(j);
    if (!graph.ok()) return graph.status().WithContext(spec);
    return graph;
  }
  const size_t colon = spec.find(':');
  const std::string name = spec.substr(0, colon);
  nlohmann::json params = nlohmann::json::object();
  if (colon != std::string::npos) {
    auto parsed = ParseParamList(spec.substr(colon + 1));
    if (!parsed.ok()) return parsed.status().WithContext("topology '" + spec + "'");
    params = std::move(parsed).value();
  }
  auto graph = topology::MakePreset(name, params);
  if (!graph.ok() && graph.status().code() == StatusCode::kNotFound)
    return NotFound("topology '" + spec + "' is neither a file nor a preset (" + graph.status().message() +
                    ")");
  return graph;
}

}  // namespace weightport::cli
