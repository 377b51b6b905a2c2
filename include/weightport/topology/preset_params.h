// Reading a preset's parameters: the caller's overrides merged over the defaults, each value
// checked as it is read; errors name the preset and the key. Internal to the topology layer.
#pragma once

#include <string>
#include <string_view>
#include <utility>

#include <nlohmann/json.hpp>

#include "weightport/core/status.h"

namespace weightport::topology::internal {

class PresetParams {
 public:
  // Rejects overrides that are not an object or name a key the defaults lack.
  // `kind` names what the parameters belong to in errors ("preset", "scenario").
  static Result<PresetParams> Merge(std::string_view preset, const nlohmann::json& defaults,
                                    const nlohmann::json& overrides, std::string_view kind = "preset");

  // An integer in [min, max].
  Result<int> Int(const char* key, int min, int max) const;
  // An integer in [min, max], or -1 for the string "auto" (Set the value chosen for it).
  Result<int> IntOrAuto(const char* key, int min, int max) const;
  // Records the value a parameter resolved to (e.g. "auto" -> 4) in merged().
  void Set(const char* key, nlohmann::json value) { merged_[key] = std::move(value); }
  // A string.
  Result<std::string> String(const char* key) const;
  // A finite number > 0 (or >= 0 with allow_zero).
  Result<double> Number(const char* key, bool allow_zero = false) const;

  Status Error(const char* key, const std::string& what) const;
  const std::string& preset() const { return preset_; }
  const nlohmann::json& merged() const { return merged_; }

 private:
  std::string preset_;
  std::string kind_ = "preset";
  nlohmann::json merged_;
};

}  // namespace weightport::topology::internal
