// Placement <-> JSON. Strict reader: every key checked, errors name the JSON path.
#include <climits>
#include <initializer_list>

#include <nlohmann/json.hpp>

#include "json_util.h"
#include "weightport/core/placement.h"

namespace weightport {
namespace {

using json_util::Json;

std::string At(const std::string& path, size_t i) { return path + "[" + std::to_string(i) + "]"; }

// Rejects keys outside `allowed` (typos must not silently drop data).
Status CheckKeys(const Json& obj, std::initializer_list<std::string_view> allowed, const std::string& path) {
  if (!obj.is_object()) return InvalidArgument(path + ": expected a JSON object");
  for (const auto& [key, value] : obj.items()) {
    bool known = false;
    for (std::string_view a : allowed) known |= key == a;
    if (!known) return InvalidArgument(path + ": unknown field '" + key + "'");
  }
  return Status::Ok();
}

Json SliceToJson(const Slice& s) {
  if (s.is_flat()) return {{"flat", {s.flat().start, s.flat().length}}};
  return {{"start", s.box().start}, {"length", s.box().length}};
}

Result<Shard> ShardFromJson(const Json& j, const std::string& path) {
  using namespace json_util;
  WP_RETURN_IF_ERROR(CheckKeys(j, {"tensor", "start", "length", "flat"}, path));
  Shard shard;
  WP_ASSIGN_OR_RETURN(shard.tensor, GetString(j, "tensor", path));
  const bool flat = j.contains("flat"), box = j.contains("start") || j.contains("length");
  if (flat == box) return InvalidArgument(path + ": needs either 'flat' or 'start' and 'length'");
  if (flat) {
    WP_ASSIGN_OR_RETURN(const Json* flat_json, Field(j, "flat", path));
    WP_ASSIGN_OR_RETURN(std::vector<int64_t> f, AsI64Array(*flat_json, path + ".flat"));
    if (f.size() != 2) return InvalidArgument(path + ".flat must be [start, length]");
    shard.slice = Slice::MakeFlat(f[0], f[1]);
    return shard;
  }
  WP_ASSIGN_OR_RETURN(const Json* start_json, Field(j, "start", path));
  WP_ASSIGN_OR_RETURN(const Json* length_json, Field(j, "length", path));
  WP_ASSIGN_OR_RETURN(std::vector<int64_t> start, AsI64Array(*start_json, path + ".start"));
  WP_ASSIGN_OR_RETURN(std::vector<int64_t> length, AsI64Array(*length_json, path + ".length"));
  if (start.size() != length.size())
    return InvalidArgument(path + ": start has " + std::to_string(start.size()) + " entries, length has " +
                           std::to_string(length.size()));
  shard.slice = Slice::MakeBox(std::move(start), std::move(length));
  return shard;
}

}  // namespace

nlohmann::json Placement::ToJson() const {
  Json tensors = Json::array();
  for (const TensorMeta& t : tensors_)
    tensors.push_back({{"name", t.name}, {"dtype", std::string(DTypeName(t.dtype))}, {"shape", t.shape}});
  Json ranks = Json::array();
  for (const auto& [rank, shards] : shards_) {
    Json list = Json::array();
    for (const Shard& s : shards) {
      Json js = SliceToJson(s.slice);
      js["tensor"] = s.tensor;
      list.push_back(std::move(js));
    }
    ranks.push_back({{"rank", rank}, {"shards", std::move(list)}});
  }
  return {{"tensors", std::move(tensors)}, {"ranks", std::move(ranks)}};
}

Result<Placement> Placement::FromJson(const nlohmann::json& json) {
  using namespace json_util;
  const std::string root = "placement";
  WP_RETURN_IF_ERROR(CheckKeys(json, {"tensors", "ranks"}, root));
  Placement p;
  WP_ASSIGN_OR_RETURN(const Json* tensors, GetArray(json, "tensors", root));
  for (size_t i = 0; i < tensors->size(); ++i) {
    const Json& tj = (*tensors)[i];
    const std::string path = At(root + ".tensors", i);
    WP_RETURN_IF_ERROR(CheckKeys(tj, {"name", "dtype", "shape"}, path));
    WP_ASSIGN_OR_RETURN(std::string name, GetString(tj, "name", path));
    WP_ASSIGN_OR_RETURN(std::string dtype_name, GetString(tj, "dtype", path));
    auto dtype = ParseDTypeName(dtype_name);
    if (!dtype.ok()) return dtype.status().WithContext(path + ".dtype");
    WP_ASSIGN_OR_RETURN(const Json* shape_json, Field(tj, "shape", path));
    WP_ASSIGN_OR_RETURN(Shape shape, AsI64Array(*shape_json, path + ".shape"));
    auto meta = TensorMeta::Make(std::move(name), *dtype, std::move(shape));
    if (!meta.ok()) return meta.status().WithContext(path);
    Status added = p.AddTensor(std::move(meta).value());
    if (!added.ok()) return added.WithContext(path);
  }
  WP_ASSIGN_OR_RETURN(const Json* ranks, GetArray(json, "ranks", root));
  for (size_t i = 0; i < ranks->size(); ++i) {
    const Json& rj = (*ranks)[i];
    const std::string path = At(root + ".ranks", i);
    WP_RETURN_IF_ERROR(CheckKeys(rj, {"rank", "shards"}, path));
    WP_ASSIGN_OR_RETURN(int64_t rank, GetI64(rj, "rank", path));
    if (rank < 0 || rank > INT_MAX)
      return InvalidArgument(path + ".rank " + std::to_string(rank) + " is not a rank id (0.." +
                             std::to_string(INT_MAX) + ")");
    if (p.HasRank(static_cast<int>(rank)))
      return InvalidArgument(path + ": rank " + std::to_string(rank) + " appears twice");
    p.AddRank(static_cast<int>(rank));
    WP_ASSIGN_OR_RETURN(const Json* shards, GetArray(rj, "shards", path));
    for (size_t s = 0; s < shards->size(); ++s) {
      WP_ASSIGN_OR_RETURN(Shard shard, ShardFromJson((*shards)[s], At(path + ".shards", s)));
      p.AddShard(static_cast<int>(rank), std::move(shard));
    }
  }
  WP_RETURN_IF_ERROR(p.Validate());
  return p;
}

}  // namespace weightport
