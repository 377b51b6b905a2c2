#include "reshard_common.h"

#include <algorithm>
#include <cstring>
#include <functional>

#include <nlohmann/json.hpp>

#include "cli/plan/plan_inputs.h"
#include "weightport/core/json_util.h"
#include "weightport/core/placement.h"
#include "weightport/format/safetensors_writer.h"
#include "weightport/kernels/convert.h"
#include "weightport/plan/planner.h"
#include "weightport/plan/quantized.h"

namespace weightport::cli {
namespace {

// Changes the low byte of every 16-bit word (a mantissa's low bits, as a training step does) and
// keeps the high one (sign, exponent), so every version compresses as weights do.
uint8_t Mask(uint64_t distance, uint64_t position) {
  if (distance == 0 || position % 2 == 1) return 0;
  return static_cast<uint8_t>((distance * 151 + position % 251) | 1);
}

// Calls visit(tensor_offset, packed_offset, length) for each run of the shard.
void ForRuns(const Plan& plan, const PlannedShard& shard, const std::function<void(const SliceRun&)>& visit) {
  const TensorMeta& t = plan.tensors[shard.tensor];
  ForEachContiguousRun(shard.slice, t.shape, DTypeSize(t.dtype), visit).IgnoreError();  // valid: the plan is
}

}  // namespace

Result<std::shared_ptr<const Plan>> BuildReshardPlan(const ReshardPlanInputs& in, const ModelSource& model) {
  // A Placement JSON stands alone; a layout spec (plan_inputs.h) is built over the model's tensors,
  // read only then (the coordinator may have no model).
  auto load = [&](const std::string& path) -> Result<Placement> {
    WP_ASSIGN_OR_RETURN(nlohmann::json j, json_util::ParseFile(path));
    if (!IsLayoutSpec(j)) return PlacementFromJson(j, std::nullopt, path);
    WP_ASSIGN_OR_RETURN(std::vector<TensorMeta> tensors, ModelLayout(model));
    return PlacementFromJson(j, std::move(tensors), path);
  };
  WP_ASSIGN_OR_RETURN(Placement src, load(in.src_json));
  WP_ASSIGN_OR_RETURN(Placement dst, load(in.dst_json));
  Topology topology;
  if (!in.topology_json.empty()) {
    WP_ASSIGN_OR_RETURN(topology, LoadTopologyFile(in.topology_json));
  }
  PlanOptions options;
  options.chunk_bytes = in.chunk_bytes;
  options.relay_fanout = in.relay_fanout;
  WP_ASSIGN_OR_RETURN(options.transforms, ParseConvertRules(in.convert));
  options.compressor_gbps = in.compressor_gbps;
  WP_ASSIGN_OR_RETURN(Plan plan, MakePlan(src, dst, topology, options));
  return std::make_shared<const Plan>(std::move(plan));
}

Result<LoadedModel> LoadModelFor(const ModelSource& source, const Plan& plan) {
  WP_ASSIGN_OR_RETURN(std::vector<TensorMeta> layout, ModelLayout(source));
  LoadedModel m;
  uint64_t total = 0;
  std::map<std::string, const TensorMeta*> by_name;
  for (const TensorMeta& t : layout) {
    m.offset[t.name] = total;
    by_name[t.name] = &t;
    total += t.bytes;
  }
  for (const TensorMeta& t : plan.tensors) {
    auto it = by_name.find(t.name);
    if (it == by_name.end())
      return NotFound(source.Describe() + " has no tensor '" + t.name + "' the plan moves");
    if (it->second->dtype != t.dtype || it->second->shape != t.shape)
      return InvalidArgument(source.Describe() + ": tensor '" + t.name +
                             "' differs from the placements' (dtype or shape)");
  }
  m.bytes.resize(total);
  WP_RETURN_IF_ERROR(LoadWeights(source, layout, m.bytes, nullptr));
  return m;
}

uint64_t VersionScheme::Distance(uint64_t version, uint32_t tensor, uint64_t offset) const {
  if (perturb >= 1) return versions - version;
  const uint64_t block = offset / kBlockBytes;
  uint64_t last = version;  // the last version, at most `version`, that changed this block
  for (; last > 1; --last) {
    uint64_t x = last * 0x9E3779B97F4A7C15ull ^ (uint64_t{tensor} << 40) ^ block * 0xBF58476D1CE4E5B9ull;
    x ^= x >> 31;
    x *= 0x94D049BB133111EBull;
    x ^= x >> 29;
    if (static_cast<double>(x >> 11) * 0x1.0p-53 < perturb) break;
  }
  return versions - last;
}

namespace {
// Calls visit(tensor offset, packed offset, length, mask distance) for the shard's bytes, cut where
// the distance may change (block boundaries).
void ForVersionSegments(const Plan& plan, const PlannedShard& shard, const VersionScheme& scheme,
                        uint64_t version,
                        const std::function<void(uint64_t, uint64_t, uint64_t, uint64_t)>& visit) {
  ForRuns(plan, shard, [&](const SliceRun& r) {
    for (uint64_t done = 0; done < r.length;) {
      const uint64_t at = r.tensor_offset + done;
      const uint64_t n =
          std::min(r.length - done, VersionScheme::kBlockBytes - at % VersionScheme::kBlockBytes);
      visit(at, r.packed_offset + done, n, scheme.Distance(version, shard.tensor, at));
      done += n;
    }
  });
}
}  // namespace

void WriteShardVersion(const Plan& plan, const PlannedShard& shard, const LoadedModel& model,
                       uint64_t version, const VersionScheme& scheme, std::span<std::byte> out) {
  const std::byte* base = model.bytes.data() + model.offset.at(plan.tensors[shard.tensor].name);
  ForVersionSegments(plan, shard, scheme, version,
                     [&](uint64_t at, uint64_t packed, uint64_t n, uint64_t distance) {
                       std::memcpy(out.data() + packed, base + at, n);
                       if (distance == 0) return;
                       for (uint64_t i = 0; i < n; ++i) out[packed + i] ^= std::byte(Mask(distance, at + i));
                     });
}

namespace {
// A quantised shard (quantized.h): version v of its elements, quantised as the source does, against
// its e4m3 bytes and its scales.
Status CheckQuantizedShardVersion(const Plan& plan, const PlannedShard& shard, const LoadedModel& model,
                                  uint64_t version, const VersionScheme& scheme,
                                  std::span<const std::byte> bytes) {
  const TensorMeta& t = plan.tensors[shard.tensor];
  const std::string what = "tensor '" + t.name + "' " + shard.slice.ToString();
  WP_ASSIGN_OR_RETURN(const QuantizedMatrix m,
                      QuantizedMatrixOf(shard.slice, t.shape, plan.Fp8ScalingOf(shard.tensor)));
  if (m.scales == 0) return Status::Ok();  // an empty shard
  std::vector<std::byte> values(static_cast<size_t>(m.rows * m.cols) * DTypeSize(t.dtype));
  WriteShardVersion(plan, shard, model, version, scheme, values);
  std::vector<uint8_t> want(static_cast<size_t>(m.rows * m.cols));
  std::vector<float> scales(static_cast<size_t>(m.scales));
  WP_RETURN_IF_ERROR(
      kernels::QuantizeE4m3(t.dtype, values.data(), m.rows, m.cols, m.scaling, want.data(), scales.data()));
  const uint64_t scale_at = StoredScaleOffset(m.rows * m.cols);
  if (bytes.size() != scale_at + scales.size() * 4)
    return DataLoss(what + ": " + std::to_string(bytes.size()) + " bytes stored, a quantised shard has " +
                    std::to_string(scale_at + scales.size() * 4));
  for (size_t e = 0; e < want.size(); ++e)
    if (static_cast<uint8_t>(bytes[e]) != want[e])
      return DataLoss(what + ": element " + std::to_string(e) + " of the shard differs from version " +
                      std::to_string(version) + " quantised to f8e4m3");
  for (size_t b = 0; b < scales.size(); ++b)
    if (std::memcmp(bytes.data() + scale_at + b * 4, &scales[b], 4) != 0)
      return DataLoss(what + ": the scale of block " + std::to_string(b) +
                      " of the shard differs from version " + std::to_string(version) + "'s");
  return Status::Ok();
}
}  // namespace

Status CheckShardVersion(const Plan& plan, const PlannedShard& shard, const LoadedModel& model,
                         uint64_t version, const VersionScheme& scheme, std::span<const std::byte> bytes) {
  if (plan.Quantized(shard.tensor))
    return CheckQuantizedShardVersion(plan, shard, model, version, scheme, bytes);
  const TensorMeta& t = plan.tensors[shard.tensor];
  const DType to = plan.destination_dtypes[shard.tensor];
  const uint64_t from_size = DTypeSize(t.dtype), to_size = DTypeSize(to);
  const std::byte* base = model.bytes.data() + model.offset.at(t.name);
  int64_t bad = -1;
  std::vector<std::byte> source, want;  // a segment: the version's bytes, then as the destination stores them
  ForVersionSegments(plan, shard, scheme, version,
                     [&](uint64_t at, uint64_t packed, uint64_t n, uint64_t distance) {
                       if (bad >= 0) return;
                       source.resize(n);
                       for (uint64_t i = 0; i < n; ++i)
                         source[i] = base[at + i] ^ std::byte(Mask(distance, at + i));
                       const uint64_t elements = n / from_size;
                       want.resize(elements * to_size);
                       if (!kernels::Convert(t.dtype, to, source.data(), want.data(), elements).ok()) {
                         bad = static_cast<int64_t>(at / from_size);
                         return;
                       }
                       const std::byte* got = bytes.data() + packed / from_size * to_size;
                       for (uint64_t e = 0; e < elements && bad < 0; ++e)
                         if (std::memcmp(got + e * to_size, want.data() + e * to_size, to_size) != 0)
                           bad = static_cast<int64_t>(at / from_size + e);
                     });
  if (bad < 0) return Status::Ok();
  return DataLoss("tensor '" + t.name + "' " + shard.slice.ToString() + ": element " + std::to_string(bad) +
                  " of the tensor differs from version " + std::to_string(version) +
                  (to != t.dtype ? " converted to " + std::string(DTypeName(to)) : ""));
}

Status WriteShardsFile(const std::string& path, const Plan& plan, const RankBuffer& buffer,
                       const std::function<std::span<const std::byte>(size_t)>& shard_bytes) {
  std::vector<TensorMeta> metas;
  std::vector<std::pair<size_t, uint64_t>> parts;  // per entry: the shard and its bytes' offset in it
  nlohmann::json index = nlohmann::json::array();
  auto add = [&](const std::string& tensor, size_t shard, const Slice& slice, DType dtype,
                 uint64_t offset) -> Status {
    const std::string entry = tensor + ".shard" + std::to_string(shard);
    std::vector<int64_t> shape =
        slice.is_box() ? slice.box().length : std::vector<int64_t>{slice.flat().length};
    WP_ASSIGN_OR_RETURN(TensorMeta m, TensorMeta::Make(entry, dtype, shape));
    metas.push_back(std::move(m));
    parts.emplace_back(shard, offset);
    nlohmann::json e = {{"entry", entry}, {"tensor", tensor}};
    json_util::PutSlice(e, slice);
    index.push_back(std::move(e));
    return Status::Ok();
  };
  const bool source = buffer.endpoint.side == PlanSide::kSource;
  for (size_t i = 0; i < buffer.shards.size(); ++i) {
    const PlannedShard& s = buffer.shards[i];
    const TensorMeta& t = plan.tensors[s.tensor];
    WP_RETURN_IF_ERROR(add(t.name, i, s.slice, source ? t.dtype : plan.destination_dtypes[s.tensor], 0));
    if (source || !plan.Quantized(s.tensor)) continue;
    // Its scales, as FP8 checkpoints name them: "<tensor>_scale_inv", f32, one per 128x128 block (or
    // one for the tensor).
    for (const TensorMeta& other : plan.tensors)
      if (other.name == t.name + "_scale_inv")
        return InvalidArgument(path + ": tensor '" + t.name +
                               "' is quantised in flight, and the model has a '" + other.name +
                               "' of its own: its scales would take that name");
    WP_ASSIGN_OR_RETURN(Slice blocks, ScaleGridSlice(s.slice, t.shape, plan.Fp8ScalingOf(s.tensor)));
    WP_RETURN_IF_ERROR(
        add(t.name + "_scale_inv", i, blocks, DType::kF32, StoredScaleOffset(s.slice.num_elements())));
  }
  WP_ASSIGN_OR_RETURN(SafetensorsWriter w,
                      SafetensorsWriter::Create(path, metas, {{"weightport.shards", index.dump()}}));
  for (size_t e = 0; e < metas.size(); ++e)
    WP_RETURN_IF_ERROR(w.Append(shard_bytes(parts[e].first).subspan(parts[e].second, metas[e].bytes)));
  return w.Finish();
}

}  // namespace weightport::cli
