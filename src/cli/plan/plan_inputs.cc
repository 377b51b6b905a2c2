#include "plan_inputs.h"

#include <climits>
#include <initializer_list>
#include <set>

#include <nlohmann/json.hpp>

#include "weightport/core/json_util.h"
#include "weightport/core/manifest.h"
#include "weightport/core/placement_builders.h"
#include "weightport/plan/quantized.h"

namespace weightport::cli {
namespace {

using Json = nlohmann::json;

constexpr int64_t kMaxAxisSize = 1 << 20;

std::string Join(const std::string& path, std::string_view key) {
  return path.empty() ? std::string(key) : path + "." + std::string(key);
}
std::string At(const std::string& path, size_t i) { return path + "[" + std::to_string(i) + "]"; }

std::string List(std::initializer_list<std::string_view> names) {
  std::string out;
  size_t i = 0;
  for (std::string_view n : names) {
    if (i > 0) out += i + 1 == names.size() ? " or " : ", ";
    out += n;
    ++i;
  }
  return out;
}

Status Error(const std::string& path, const std::string& message) {
  return InvalidArgument(path.empty() ? message : path + ": " + message);
}

// Rejects keys outside `allowed`: a typo must not silently change the layout.
Status CheckKeys(const Json& obj, std::initializer_list<std::string_view> allowed, const std::string& path) {
  if (!obj.is_object()) return Error(path, "expected a JSON object");
  for (const auto& [key, value] : obj.items()) {
    bool known = false;
    for (std::string_view a : allowed) known |= key == a;
    if (!known) return Error(path, "unknown key '" + key + "' (expected " + List(allowed) + ")");
  }
  return Status::Ok();
}

Result<std::string> GetString(const Json& obj, std::string_view key, const std::string& path) {
  const Json& v = obj.at(key);
  if (!v.is_string()) return Error(Join(path, key), "must be a string");
  return v.get<std::string>();
}

Result<int64_t> IntValue(const Json& v, const std::string& path, int64_t lo, int64_t hi) {
  if (!v.is_number_integer()) return Error(path, "must be an integer");
  // Parsed non-negative numbers are unsigned and may exceed INT64_MAX.
  const bool fits = v.is_number_unsigned() ? v.get<uint64_t>() <= static_cast<uint64_t>(hi) &&
                                                 static_cast<int64_t>(v.get<uint64_t>()) >= lo
                                           : v.get<int64_t>() >= lo && v.get<int64_t>() <= hi;
  if (!fits) return Error(path, "must be in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]");
  return v.get<int64_t>();
}

Result<int64_t> GetInt(const Json& obj, std::string_view key, const std::string& path, int64_t lo,
                       int64_t hi) {
  return IntValue(obj.at(key), Join(path, key), lo, hi);
}

Result<bool> GetBool(const Json& obj, std::string_view key, const std::string& path) {
  const Json& v = obj.at(key);
  if (!v.is_boolean()) return Error(Join(path, key), "must be true or false");
  return v.get<bool>();
}

Result<std::vector<std::string>> GetStrings(const Json& obj, std::string_view key, const std::string& path) {
  const Json& v = obj.at(key);
  if (!v.is_array()) return Error(Join(path, key), "must be an array of strings");
  std::vector<std::string> out;
  for (size_t i = 0; i < v.size(); ++i) {
    if (!v[i].is_string()) return Error(At(Join(path, key), i), "must be a string");
    out.push_back(v[i].get<std::string>());
  }
  return out;
}

Result<TpKind> ParseTpKind(const std::string& name, const std::string& path) {
  if (name == "column") return TpKind::kColumn;
  if (name == "row") return TpKind::kRow;
  if (name == "vocab") return TpKind::kVocab;
  if (name == "replicated") return TpKind::kReplicated;
  return Error(path, "unknown rule kind '" + name + "' (expected " +
                         List({"column", "row", "vocab", "replicated"}) + ")");
}

Result<std::vector<TpPattern>> TpRulesFromJson(const Json& obj, const std::string& path) {
  std::vector<TpPattern> rules;
  if (obj.contains("rules")) {
    const Json& list = obj.at("rules");
    const std::string list_path = Join(path, "rules");
    if (!list.is_array()) return Error(list_path, "must be an array of rules");
    for (size_t i = 0; i < list.size(); ++i) {
      const std::string rule_path = At(list_path, i);
      WP_RETURN_IF_ERROR(CheckKeys(list[i], {"glob", "kind", "granule"}, rule_path));
      if (!list[i].contains("glob") || !list[i].contains("kind"))
        return Error(rule_path, "needs 'glob' and 'kind'");
      TpPattern p;
      WP_ASSIGN_OR_RETURN(p.glob, GetString(list[i], "glob", rule_path));
      WP_ASSIGN_OR_RETURN(std::string kind, GetString(list[i], "kind", rule_path));
      WP_ASSIGN_OR_RETURN(p.rule.kind, ParseTpKind(kind, Join(rule_path, "kind")));
      if (list[i].contains("granule")) {
        WP_ASSIGN_OR_RETURN(p.rule.granule, GetInt(list[i], "granule", rule_path, 1, INT64_MAX));
      }
      rules.push_back(std::move(p));
    }
  } else {
    rules = LlamaTpRules();
  }
  if (obj.contains("replicate_unmatched")) {
    WP_ASSIGN_OR_RETURN(bool rest, GetBool(obj, "replicate_unmatched", path));
    if (rest) rules.push_back({"*", TpRule{TpKind::kReplicated}});
  }
  return rules;
}

Result<MeshAxis> PipelineFromJson(const Json& j, const std::string& name, int size, const std::string& path) {
  PipelineOptions o;
  if (j.contains("layers_per_stage")) {
    const Json& v = j.at("layers_per_stage");
    if (!v.is_array()) return Error(Join(path, "layers_per_stage"), "must be an array of integers");
    for (size_t i = 0; i < v.size(); ++i) {
      WP_ASSIGN_OR_RETURN(int64_t n, IntValue(v[i], At(Join(path, "layers_per_stage"), i), 0, INT_MAX));
      o.layers_per_stage.push_back(n);
    }
    if (o.layers_per_stage.size() != static_cast<size_t>(size))
      return Error(Join(path, "layers_per_stage"), "has " + std::to_string(o.layers_per_stage.size()) +
                                                       " entries for " + std::to_string(size) + " stages");
  }
  if (j.contains("first_stage")) {
    WP_ASSIGN_OR_RETURN(o.first_stage, GetStrings(j, "first_stage", path));
  }
  if (j.contains("last_stage")) {
    WP_ASSIGN_OR_RETURN(o.last_stage, GetStrings(j, "last_stage", path));
  }
  return PipelineAxis(name, size, std::move(o));
}

Result<MeshAxis> ExpertFromJson(const Json& j, const std::string& name, int size, const std::string& path) {
  ExpertOptions o;
  if (j.contains("assignment")) {
    WP_ASSIGN_OR_RETURN(std::string a, GetString(j, "assignment", path));
    if (a == "contiguous") {
      o.assignment = ExpertAssignment::kContiguous;
    } else if (a == "round_robin") {
      o.assignment = ExpertAssignment::kRoundRobin;
    } else {
      return Error(Join(path, "assignment"),
                   "unknown assignment '" + a + "' (expected " + List({"contiguous", "round_robin"}) + ")");
    }
  }
  if (j.contains("non_expert")) {
    WP_ASSIGN_OR_RETURN(std::string ne, GetString(j, "non_expert", path));
    if (ne == "tp") {
      o.non_expert_tp = LlamaTpRules();
    } else if (ne != "replicated") {
      return Error(Join(path, "non_expert"),
                   "unknown value '" + ne + "' (expected " + List({"replicated", "tp"}) + ")");
    }
  }
  return ExpertParallelAxis(name, size, std::move(o));
}

Result<MeshAxis> AxisFromJson(const Json& j, const std::string& path) {
  if (!j.is_object()) return Error(path, "expected a JSON object");
  if (!j.contains("kind"))
    return Error(path, "needs 'kind' (" + List({"replica", "tp", "pp", "ep", "fsdp", "fsdp2"}) + ")");
  if (!j.contains("size")) return Error(path, "needs 'size'");
  WP_ASSIGN_OR_RETURN(std::string kind, GetString(j, "kind", path));
  std::string name = kind;
  if (j.contains("axis")) {
    WP_ASSIGN_OR_RETURN(name, GetString(j, "axis", path));
  }
  if (name.empty()) return Error(Join(path, "axis"), "must not be empty");
  WP_ASSIGN_OR_RETURN(int64_t size64, GetInt(j, "size", path, 1, kMaxAxisSize));
  const int size = static_cast<int>(size64);
  if (kind == "replica") {
    WP_RETURN_IF_ERROR(CheckKeys(j, {"axis", "kind", "size"}, path));
    return ReplicaAxis(name, size);
  }
  if (kind == "tp") {
    WP_RETURN_IF_ERROR(CheckKeys(j, {"axis", "kind", "size", "rules", "replicate_unmatched"}, path));
    WP_ASSIGN_OR_RETURN(std::vector<TpPattern> rules, TpRulesFromJson(j, path));
    return TensorParallelAxis(name, size, std::move(rules));
  }
  if (kind == "pp") {
    WP_RETURN_IF_ERROR(
        CheckKeys(j, {"axis", "kind", "size", "layers_per_stage", "first_stage", "last_stage"}, path));
    return PipelineFromJson(j, name, size, path);
  }
  if (kind == "ep") {
    WP_RETURN_IF_ERROR(CheckKeys(j, {"axis", "kind", "size", "assignment", "non_expert"}, path));
    return ExpertFromJson(j, name, size, path);
  }
  if (kind == "fsdp") {
    WP_RETURN_IF_ERROR(CheckKeys(j, {"axis", "kind", "size", "unit_per_layer"}, path));
    FsdpFlatOptions o;
    if (j.contains("unit_per_layer")) {
      WP_ASSIGN_OR_RETURN(o.unit_per_layer, GetBool(j, "unit_per_layer", path));
    }
    return FsdpFlatAxis(name, size, o);
  }
  if (kind == "fsdp2") {
    WP_RETURN_IF_ERROR(CheckKeys(j, {"axis", "kind", "size"}, path));
    return Fsdp2Axis(name, size);
  }
  return Error(Join(path, "kind"), "unknown kind '" + kind + "' (expected " +
                                       List({"replica", "tp", "pp", "ep", "fsdp", "fsdp2"}) + ")");
}

Result<Placement> BuildFromSpec(const Json& spec, std::vector<TensorMeta> tensors) {
  WP_RETURN_IF_ERROR(CheckKeys(spec, {"mesh", "rank_offset", "description"}, ""));
  if (spec.contains("description") && !spec.at("description").is_string())
    return Error("description", "must be a string");
  int64_t rank_offset = 0;
  if (spec.contains("rank_offset")) {
    WP_ASSIGN_OR_RETURN(rank_offset, GetInt(spec, "rank_offset", "", 0, INT_MAX));
  }
  const Json& mesh = spec.at("mesh");
  if (!mesh.is_array() || mesh.empty()) return Error("mesh", "must be a non-empty array of axes");
  std::vector<MeshAxis> axes;
  std::set<std::string> names;
  for (size_t i = 0; i < mesh.size(); ++i) {
    WP_ASSIGN_OR_RETURN(MeshAxis axis, AxisFromJson(mesh[i], At("mesh", i)));
    if (!names.insert(axis.name).second)
      return Error(At("mesh", i), "axis name '" + axis.name + "' is used twice");
    axes.push_back(std::move(axis));
  }
  auto placement = BuildMesh(std::move(tensors), axes, static_cast<int>(rank_offset));
  if (!placement.ok()) return placement.status().WithContext("mesh");
  return placement;
}

}  // namespace

const std::vector<std::string>& LayoutKinds() {
  static const std::vector<std::string> kinds = {"replica", "tp", "pp", "ep", "fsdp", "fsdp2"};
  return kinds;
}

bool IsLayoutSpec(const nlohmann::json& json) { return json.is_object() && json.contains("mesh"); }

Result<Placement> PlacementFromLayoutSpec(const nlohmann::json& spec, std::vector<TensorMeta> tensors,
                                          std::string_view what) {
  auto placement = BuildFromSpec(spec, std::move(tensors));
  if (!placement.ok()) return placement.status().WithContext(what);
  return placement;
}

Result<Placement> LoadPlacementFile(const std::string& path,
                                    const std::optional<std::vector<TensorMeta>>& tensors,
                                    std::span<const TensorRename> renames) {
  WP_ASSIGN_OR_RETURN(Json json, json_util::ParseFile(path));
  return PlacementFromJson(json, tensors, path, renames);
}

Result<Placement> PlacementFromJson(const nlohmann::json& json,
                                    const std::optional<std::vector<TensorMeta>>& tensors,
                                    const std::string& path, std::span<const TensorRename> renames) {
  if (IsLayoutSpec(json)) {
    if (!tensors)
      return InvalidArgument(
          path + ": a layout spec needs the model's tensors: give --model, --preset or --manifest");
    return PlacementFromLayoutSpec(json, *tensors, path);
  }
  if (!json.is_object() || (!json.contains("tensors") && !json.contains("ranks")))
    return InvalidArgument(path +
                           ": neither a layout spec (with \"mesh\") nor a placement (with \"tensors\" and "
                           "\"ranks\")");
  auto placement = Placement::FromJson(json);
  if (placement.ok() && !renames.empty()) placement = RenameTensors(*placement, renames);
  if (!placement.ok()) return placement.status().WithContext(path);
  if (tensors) {
    WP_ASSIGN_OR_RETURN(Manifest model, Manifest::FromMetas(0, *tensors));
    Status agrees = placement->ValidateAgainst(model);
    if (!agrees.ok()) return agrees.WithContext(path + " does not match the model");
  }
  return placement;
}

Result<std::vector<TensorMeta>> LoadManifestTensors(const std::string& path) {
  WP_ASSIGN_OR_RETURN(Json json, json_util::ParseFile(path));
  auto manifest = Manifest::FromJson(json);
  if (!manifest.ok()) return manifest.status().WithContext(path);
  std::vector<TensorMeta> out;
  out.reserve(manifest->tensors().size());
  for (const ManifestTensor& t : manifest->tensors()) out.push_back(t.meta);
  return out;
}

Result<Topology> LoadTopologyFile(const std::string& path) {
  WP_ASSIGN_OR_RETURN(Json json, json_util::ParseFile(path));
  auto topology = Topology::FromJson(json);
  if (!topology.ok()) return topology.status().WithContext(path);
  return topology;
}

Result<std::vector<TransformRule>> ParseConvertRules(const std::vector<std::string>& values) {
  std::vector<TransformRule> rules;
  for (const std::string& v : values) {
    const size_t eq = v.rfind('=');
    if (eq == std::string::npos || eq == 0 || eq + 1 == v.size())
      return InvalidArgument("--convert '" + v + "': expected GLOB=DTYPE, e.g. '*.mlp.*=bf16'");
    // f8e4m3 takes its scaling after a colon: f8e4m3 (128x128 blocks), f8e4m3:tensor.
    std::string to = v.substr(eq + 1), scaling = "block128";
    if (const size_t colon = to.find(':'); colon != std::string::npos) {
      scaling = to.substr(colon + 1);
      to.resize(colon);
    }
    auto dtype = ParseDTypeName(to);
    if (!dtype.ok()) return dtype.status().WithContext("--convert '" + v + "'");
    auto parsed = ParseFp8Scaling(scaling);
    if (!parsed.ok()) return parsed.status().WithContext("--convert '" + v + "'");
    if (*parsed != kernels::Fp8Scaling::kBlock128 && *dtype != DType::kF8E4M3)
      return InvalidArgument("--convert '" + v + "': only f8e4m3 takes a scaling (f8e4m3:tensor)");
    rules.push_back({v.substr(0, eq), *dtype, *parsed});
  }
  return rules;
}

}  // namespace weightport::cli
