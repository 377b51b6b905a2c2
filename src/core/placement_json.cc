// Placement <-> JSON. Strict reader: every key checked, errors name the JSON path.
#include <climits>

#include <nlohmann/json.hpp>

#include "weightport/core/json_util.h"
#include "weightport/core/placement.h"

namespace weightport {
namespace {

using json_util::At;
using json_util::CheckKeys;
using json_util::Json;

Result<Shard> ShardFromJson(const Json& j, const std::string& path) {
  using namespace json_util;
  WP_RETURN_IF_ERROR(CheckKeys(j, {"tensor", "start", "length", "flat"}, path));
  Shard shard;
  WP_ASSIGN_OR_RETURN(shard.tensor, GetString(j, "tensor", path));
  WP_ASSIGN_OR_RETURN(shard.slice, ReadSlice(j, path));
  return shard;
}

}  // namespace

nlohmann::json Placement::ToJson() const {
  Json tensors = Json::array();
  for (const TensorMeta& t : tensors_) tensors.push_back(json_util::TensorToJson(t));
  Json ranks = Json::array();
  for (const auto& [rank, shards] : shards_) {
    Json list = Json::array();
    for (const Shard& s : shards) {
      Json js = {{"tensor", s.tensor}};
      json_util::PutSlice(js, s.slice);
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
    WP_ASSIGN_OR_RETURN(TensorMeta meta, ReadTensor(tj, path));
    Status added = p.AddTensor(std::move(meta));
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
