// Plan <-> JSON. Strict reader: every key checked, errors name the JSON path. The estimate is
// written for readers and recomputed on reading (it is derived from the steps and topology).
#include <climits>

#include <nlohmann/json.hpp>

#include "weightport/core/json_util.h"
#include "weightport/plan/plan.h"
#include "weightport/plan/planner.h"
#include "weightport/plan/quantized.h"

namespace weightport {
namespace {

using namespace json_util;

Json OptionsToJson(const PlanOptions& o) {
  Json transforms = Json::array();
  for (const TransformRule& r : o.transforms) {
    Json rule = {{"glob", r.glob}, {"to", DTypeName(r.to)}};
    if (r.scaling != kernels::Fp8Scaling::kBlock128) rule["scaling"] = Fp8ScalingName(r.scaling);
    transforms.push_back(std::move(rule));
  }
  return {{"chunk_bytes", o.chunk_bytes},         {"relay_fanout", o.relay_fanout},
          {"split_bytes", o.split_bytes},         {"per_chunk_overhead_s", o.per_chunk_overhead_s},
          {"compressor_gbps", o.compressor_gbps}, {"transforms", std::move(transforms)}};
}

Result<TransformKind> ParseTransform(const std::string& name, const std::string& path) {
  for (TransformKind k :
       {TransformKind::kIdentity, TransformKind::kConvertAtSender, TransformKind::kConvertAtReceiver})
    if (name == TransformName(k)) return k;
  return InvalidArgument(path + ": unknown transform '" + name +
                         "' (known: identity, convert_at_sender, convert_at_receiver)");
}

Result<DType> ReadDType(const Json& obj, const char* key, const std::string& path) {
  WP_ASSIGN_OR_RETURN(std::string name, GetString(obj, key, path));
  auto dtype = ParseDTypeName(name);
  if (!dtype.ok()) return dtype.status().WithContext(path + "." + key);
  return dtype;
}

// A scaling name (quantized.h) at `path`.
Result<kernels::Fp8Scaling> ReadScaling(const Json& value, const std::string& path) {
  if (!value.is_string()) return InvalidArgument(path + ": expected block128 or tensor");
  auto scaling = ParseFp8Scaling(value.get<std::string>());
  if (!scaling.ok()) return scaling.status().WithContext(path);
  return scaling;
}

Result<int> ReadInt(const Json& obj, const char* key, const std::string& path, int64_t min) {
  WP_ASSIGN_OR_RETURN(int64_t v, GetI64(obj, key, path));
  if (v < min || v > INT_MAX)
    return InvalidArgument(path + "." + key + ": " + std::to_string(v) + " is out of range");
  return static_cast<int>(v);
}

Result<uint32_t> ReadU32(const Json& obj, const char* key, const std::string& path) {
  WP_ASSIGN_OR_RETURN(uint64_t v, GetU64(obj, key, path));
  if (v > UINT32_MAX)
    return InvalidArgument(path + "." + key + ": " + std::to_string(v) + " is out of range");
  return static_cast<uint32_t>(v);
}

Result<PlanOptions> OptionsFromJson(const Json& j, const std::string& path) {
  WP_RETURN_IF_ERROR(CheckKeys(
      j,
      {"chunk_bytes", "relay_fanout", "split_bytes", "per_chunk_overhead_s", "compressor_gbps", "transforms"},
      path));
  PlanOptions o;
  WP_ASSIGN_OR_RETURN(o.chunk_bytes, GetU64(j, "chunk_bytes", path));
  WP_ASSIGN_OR_RETURN(o.relay_fanout, ReadInt(j, "relay_fanout", path, 0));
  WP_ASSIGN_OR_RETURN(o.split_bytes, GetU64(j, "split_bytes", path));
  WP_ASSIGN_OR_RETURN(o.per_chunk_overhead_s, GetDouble(j, "per_chunk_overhead_s", path));
  WP_ASSIGN_OR_RETURN(o.compressor_gbps, GetDouble(j, "compressor_gbps", path));
  WP_ASSIGN_OR_RETURN(const Json* transforms, GetArray(j, "transforms", path));
  for (size_t i = 0; i < transforms->size(); ++i) {
    const std::string at = At(path + ".transforms", i);
    WP_RETURN_IF_ERROR(CheckKeys((*transforms)[i], {"glob", "to", "scaling"}, at));
    TransformRule rule;
    WP_ASSIGN_OR_RETURN(rule.glob, GetString((*transforms)[i], "glob", at));
    WP_ASSIGN_OR_RETURN(rule.to, ReadDType((*transforms)[i], "to", at));
    if ((*transforms)[i].contains("scaling")) {
      WP_ASSIGN_OR_RETURN(rule.scaling, ReadScaling((*transforms)[i]["scaling"], at + ".scaling"));
    }
    o.transforms.push_back(std::move(rule));
  }
  return o;
}

Json BuffersToJson(const std::vector<RankBuffer>& buffers) {
  Json list = Json::array();
  for (const RankBuffer& b : buffers) {
    Json shards = Json::array();
    for (const PlannedShard& s : b.shards) {
      Json js = {{"tensor", s.tensor}, {"offset", s.offset}, {"bytes", s.bytes}};
      PutSlice(js, s.slice);
      shards.push_back(std::move(js));
    }
    list.push_back(
        {{"rank", b.endpoint.rank}, {"host", b.host}, {"bytes", b.bytes}, {"shards", std::move(shards)}});
  }
  return list;
}

Result<std::vector<RankBuffer>> BuffersFromJson(const Json& j, const std::string& path, PlanSide side) {
  if (!j.is_array()) return InvalidArgument(path + ": expected an array");
  std::vector<RankBuffer> buffers;
  for (size_t i = 0; i < j.size(); ++i) {
    const std::string at = At(path, i);
    WP_RETURN_IF_ERROR(CheckKeys(j[i], {"rank", "host", "bytes", "shards"}, at));
    RankBuffer b;
    b.endpoint.side = side;
    WP_ASSIGN_OR_RETURN(b.endpoint.rank, ReadInt(j[i], "rank", at, 0));
    WP_ASSIGN_OR_RETURN(b.host, ReadInt(j[i], "host", at, 0));
    WP_ASSIGN_OR_RETURN(b.bytes, GetU64(j[i], "bytes", at));
    WP_ASSIGN_OR_RETURN(const Json* shards, GetArray(j[i], "shards", at));
    for (size_t s = 0; s < shards->size(); ++s) {
      const Json& sj = (*shards)[s];
      const std::string sat = At(at + ".shards", s);
      WP_RETURN_IF_ERROR(CheckKeys(sj, {"tensor", "offset", "bytes", "start", "length", "flat"}, sat));
      PlannedShard shard;
      WP_ASSIGN_OR_RETURN(shard.tensor, ReadU32(sj, "tensor", sat));
      WP_ASSIGN_OR_RETURN(shard.offset, GetU64(sj, "offset", sat));
      WP_ASSIGN_OR_RETURN(shard.bytes, GetU64(sj, "bytes", sat));
      WP_ASSIGN_OR_RETURN(shard.slice, ReadSlice(sj, sat));
      b.shards.push_back(std::move(shard));
    }
    buffers.push_back(std::move(b));
  }
  return buffers;
}

Json StepToJson(const PlanStep& s) {
  Json piece = Json::object();
  PutSlice(piece, s.piece);
  return {{"id", s.id},
          {"tensor", s.tensor},
          {"from", {{"side", PlanSideName(s.from.side)}, {"rank", s.from.rank}, {"shard", s.from_shard}}},
          {"to", {{"rank", s.to_rank}, {"shard", s.to_shard}}},
          {"piece", std::move(piece)},
          {"bytes", s.bytes},
          {"chunks", s.chunks},
          {"transform", TransformName(s.transform)},
          {"after", s.after},
          {"root", s.root},
          {"depth", s.depth},
          {"compress", s.compress}};
}

Result<PlanStep> StepFromJson(const Json& j, const std::string& path) {
  WP_RETURN_IF_ERROR(CheckKeys(j,
                               {"id", "tensor", "from", "to", "piece", "bytes", "chunks", "transform",
                                "after", "root", "depth", "compress"},
                               path));
  PlanStep s;
  WP_ASSIGN_OR_RETURN(s.id, ReadU32(j, "id", path));
  WP_ASSIGN_OR_RETURN(s.tensor, ReadU32(j, "tensor", path));
  WP_ASSIGN_OR_RETURN(const Json* from, GetObject(j, "from", path));
  WP_RETURN_IF_ERROR(CheckKeys(*from, {"side", "rank", "shard"}, path + ".from"));
  WP_ASSIGN_OR_RETURN(std::string side, GetString(*from, "side", path + ".from"));
  if (side != "src" && side != "dst") return InvalidArgument(path + ".from.side must be \"src\" or \"dst\"");
  s.from.side = side == "src" ? PlanSide::kSource : PlanSide::kDestination;
  WP_ASSIGN_OR_RETURN(s.from.rank, ReadInt(*from, "rank", path + ".from", 0));
  WP_ASSIGN_OR_RETURN(s.from_shard, ReadU32(*from, "shard", path + ".from"));
  WP_ASSIGN_OR_RETURN(const Json* to, GetObject(j, "to", path));
  WP_RETURN_IF_ERROR(CheckKeys(*to, {"rank", "shard"}, path + ".to"));
  WP_ASSIGN_OR_RETURN(s.to_rank, ReadInt(*to, "rank", path + ".to", 0));
  WP_ASSIGN_OR_RETURN(s.to_shard, ReadU32(*to, "shard", path + ".to"));
  WP_ASSIGN_OR_RETURN(const Json* piece, GetObject(j, "piece", path));
  WP_RETURN_IF_ERROR(CheckKeys(*piece, {"start", "length", "flat"}, path + ".piece"));
  WP_ASSIGN_OR_RETURN(s.piece, ReadSlice(*piece, path + ".piece"));
  WP_ASSIGN_OR_RETURN(s.bytes, GetU64(j, "bytes", path));
  WP_ASSIGN_OR_RETURN(s.chunks, ReadU32(j, "chunks", path));
  WP_ASSIGN_OR_RETURN(std::string transform, GetString(j, "transform", path));
  WP_ASSIGN_OR_RETURN(s.transform, ParseTransform(transform, path + ".transform"));
  WP_ASSIGN_OR_RETURN(s.after, GetI64(j, "after", path));
  WP_ASSIGN_OR_RETURN(s.root, ReadU32(j, "root", path));
  WP_ASSIGN_OR_RETURN(s.depth, ReadU32(j, "depth", path));
  WP_ASSIGN_OR_RETURN(s.compress, GetBool(j, "compress", path));
  return s;
}

Json EstimateToJson(const PlanEstimate& e) {
  Json hosts = Json::array();
  for (const HostLoad& h : e.hosts)
    hosts.push_back({{"host", h.host},
                     {"nic_out", h.nic_out},
                     {"nic_in", h.nic_in},
                     {"local", h.local},
                     {"busy_s", h.busy_s}});
  return {{"lower_bound_s", e.lower_bound_s},
          {"predicted_s", e.predicted_s},
          {"max_depth", e.max_depth},
          {"hosts", std::move(hosts)}};
}

}  // namespace

nlohmann::json Plan::ToJson() const {
  Json tensor_list = Json::array();
  for (const TensorMeta& t : tensors) tensor_list.push_back(TensorToJson(t));
  Json dtypes = Json::array();
  for (DType d : destination_dtypes) dtypes.push_back(DTypeName(d));
  Json step_list = Json::array();
  for (const PlanStep& s : steps) step_list.push_back(StepToJson(s));
  Json out = {{"format", "weightport-plan"},       {"version", 1},
              {"options", OptionsToJson(options)}, {"topology", topology.ToJson()},
              {"tensors", std::move(tensor_list)}, {"destination_dtypes", std::move(dtypes)},
              {"sources", BuffersToJson(sources)}, {"destinations", BuffersToJson(destinations)},
              {"steps", std::move(step_list)},     {"estimate", EstimateToJson(estimate)}};
  if (!destination_scaling.empty()) {  // absent when every f8e4m3 tensor has block scales
    Json scaling = Json::array();
    for (kernels::Fp8Scaling s : destination_scaling) scaling.push_back(Fp8ScalingName(s));
    out["destination_scaling"] = std::move(scaling);
  }
  return out;
}

uint64_t Plan::JsonBytes() const {
  // ToJson with an empty step list, then each step's text and the commas between them: the same
  // bytes as ToJson().dump(), a step at a time (a plan of millions of steps is gigabytes as JSON).
  Plan shell;
  shell.options = options;
  shell.topology = topology;
  shell.tensors = tensors;
  shell.destination_dtypes = destination_dtypes;
  shell.destination_scaling = destination_scaling;
  shell.sources = sources;
  shell.destinations = destinations;
  shell.estimate = estimate;
  uint64_t bytes = shell.ToJson().dump().size();
  for (const PlanStep& s : steps) bytes += StepToJson(s).dump().size();
  if (steps.size() > 1) bytes += steps.size() - 1;
  return bytes;
}

Result<Plan> Plan::FromJson(const nlohmann::json& json) {
  const std::string root = "plan";
  WP_RETURN_IF_ERROR(CheckKeys(json,
                               {"format", "version", "options", "topology", "tensors", "destination_dtypes",
                                "destination_scaling", "sources", "destinations", "steps", "estimate"},
                               root));
  WP_ASSIGN_OR_RETURN(std::string format, GetString(json, "format", root));
  WP_ASSIGN_OR_RETURN(uint64_t version, GetU64(json, "version", root));
  if (format != "weightport-plan" || version != 1)
    return InvalidArgument(root + ": not a weightport plan of version 1 (format '" + format + "', version " +
                           std::to_string(version) + ")");
  Plan plan;
  WP_ASSIGN_OR_RETURN(const Json* options, GetObject(json, "options", root));
  WP_ASSIGN_OR_RETURN(plan.options, OptionsFromJson(*options, root + ".options"));
  WP_ASSIGN_OR_RETURN(const Json* topology, GetObject(json, "topology", root));
  WP_ASSIGN_OR_RETURN(plan.topology, Topology::FromJson(*topology));
  WP_ASSIGN_OR_RETURN(const Json* tensors, GetArray(json, "tensors", root));
  for (size_t i = 0; i < tensors->size(); ++i) {
    WP_ASSIGN_OR_RETURN(TensorMeta t, ReadTensor((*tensors)[i], At(root + ".tensors", i)));
    plan.tensors.push_back(std::move(t));
  }
  WP_ASSIGN_OR_RETURN(const Json* dtypes, GetArray(json, "destination_dtypes", root));
  for (size_t i = 0; i < dtypes->size(); ++i) {
    const Json& d = (*dtypes)[i];
    if (!d.is_string())
      return InvalidArgument(At(root + ".destination_dtypes", i) + ": expected a dtype name");
    auto dtype = ParseDTypeName(d.get<std::string>());
    if (!dtype.ok()) return dtype.status().WithContext(At(root + ".destination_dtypes", i));
    plan.destination_dtypes.push_back(*dtype);
  }
  if (json.contains("destination_scaling")) {
    WP_ASSIGN_OR_RETURN(const Json* scaling, GetArray(json, "destination_scaling", root));
    for (size_t i = 0; i < scaling->size(); ++i) {
      WP_ASSIGN_OR_RETURN(const kernels::Fp8Scaling s,
                          ReadScaling((*scaling)[i], At(root + ".destination_scaling", i)));
      plan.destination_scaling.push_back(s);
    }
  }
  WP_ASSIGN_OR_RETURN(const Json* sources, Field(json, "sources", root));
  WP_ASSIGN_OR_RETURN(plan.sources, BuffersFromJson(*sources, root + ".sources", PlanSide::kSource));
  WP_ASSIGN_OR_RETURN(const Json* destinations, Field(json, "destinations", root));
  WP_ASSIGN_OR_RETURN(plan.destinations,
                      BuffersFromJson(*destinations, root + ".destinations", PlanSide::kDestination));
  WP_ASSIGN_OR_RETURN(const Json* steps, GetArray(json, "steps", root));
  plan.steps.reserve(steps->size());
  for (size_t i = 0; i < steps->size(); ++i) {
    WP_ASSIGN_OR_RETURN(PlanStep step, StepFromJson((*steps)[i], At(root + ".steps", i)));
    plan.steps.push_back(std::move(step));
  }
  WP_RETURN_IF_ERROR(plan.Validate());
  plan.estimate = EstimatePlan(plan);
  return plan;
}

}  // namespace weightport
