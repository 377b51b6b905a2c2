#include "weightport/topology/preset_params.h"

#include <cmath>

namespace weightport::topology::internal {

Result<PresetParams> PresetParams::Merge(std::string_view preset, const nlohmann::json& defaults,
                                         const nlohmann::json& overrides, std::string_view kind) {
  PresetParams p;
  p.preset_ = std::string(preset);
  p.kind_ = std::string(kind);
  if (!overrides.is_object())
    return InvalidArgument(p.kind_ + " '" + p.preset_ + "': parameters must be a JSON object");
  p.merged_ = defaults;
  for (const auto& [key, value] : overrides.items()) {
    if (!defaults.contains(key)) {
      std::string known;
      for (const auto& [k, v] : defaults.items()) known += (known.empty() ? "" : ", ") + k;
      return InvalidArgument(p.kind_ + " '" + p.preset_ + "': unknown parameter '" + key +
                             "' (known: " + known + ")");
    }
    p.merged_[key] = value;
  }
  return p;
}

Status PresetParams::Error(const char* key, const std::string& what) const {
  return InvalidArgument(kind_ + " '" + preset_ + "': parameter '" + key + "' " + what);
}

Result<int> PresetParams::Int(const char* key, int min, int max) const {
  const nlohmann::json& v = merged_.at(key);
  const std::string range = "an integer in [" + std::to_string(min) + ", " + std::to_string(max) + "]";
  if (!v.is_number_integer()) return Error(key, "must be " + range);
  int64_t x;
  if (v.is_number_unsigned()) {
    const uint64_t u = v.get<uint64_t>();
    x = u > static_cast<uint64_t>(max) ? static_cast<int64_t>(max) + 1 : static_cast<int64_t>(u);
  } else {
    x = v.get<int64_t>();
  }
  if (x < min || x > max) return Error(key, "must be " + range + " (got " + v.dump() + ")");
  return static_cast<int>(x);
}

Result<int> PresetParams::IntOrAuto(const char* key, int min, int max) const {
  const nlohmann::json& v = merged_.at(key);
  if (v.is_string() && v.get<std::string>() == "auto") return -1;
  if (!v.is_number_integer())
    return Error(
        key, "must be \"auto\" or an integer in [" + std::to_string(min) + ", " + std::to_string(max) + "]");
  return Int(key, min, max);
}

Result<std::string> PresetParams::String(const char* key) const {
  const nlohmann::json& v = merged_.at(key);
  if (!v.is_string()) return Error(key, "must be a string");
  return v.get<std::string>();
}

Result<double> PresetParams::Number(const char* key, bool allow_zero) const {
  const nlohmann::json& v = merged_.at(key);
  if (!v.is_number()) return Error(key, "must be a number");
  const double x = v.get<double>();
  if (!std::isfinite(x) || (allow_zero ? !(x >= 0) : !(x > 0)))
    return Error(key, std::string("must be ") + (allow_zero ? ">= 0" : "> 0") + " (got " + v.dump() + ")");
  return x;
}

}  // namespace weightport::topology::internal
