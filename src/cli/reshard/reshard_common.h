// Pieces shared by `weightport reshard` and `demo --scenario reshard`: building the plan every rank
// compiles, the content of each version, and writing a destination's shards.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "cli/pubsub/pubsub_common.h"
#include "weightport/core/status.h"
#include "weightport/plan/plan.h"

namespace weightport::cli {

struct ReshardPlanInputs {
  std::string src_json;  // Placement JSON files
  std::string dst_json;
  std::string topology_json;  // optional
  uint64_t chunk_bytes = 4ull << 20;
  int relay_fanout = 1;
  std::vector<std::string> convert;  // --convert GLOB=DTYPE
  double compressor_gbps = 0;        // PlanOptions::compressor_gbps
};
// Reads the placements (Placement JSON, or a layout spec built over `model`'s tensors) and the
// topology, and runs the planner: every rank given the same inputs compiles the same plan (the
// coordinator checks digests).
Result<std::shared_ptr<const Plan>> BuildReshardPlan(const ReshardPlanInputs& in, const ModelSource& model);

// The source model, whole, with each tensor's offset.
struct LoadedModel {
  std::vector<std::byte> bytes;
  std::map<std::string, uint64_t> offset;
};
// Loads the model and checks it has every tensor of the plan with the same dtype and shape.
Result<LoadedModel> LoadModelFor(const ModelSource& source, const Plan& plan);

// Version v of n: the model with the low byte of every 16-bit word changed by a mask that depends
// on a distance and the byte's position, so versions differ, compress as the model does, and the
// last one is the model itself. The distance is n - v, or with `perturb` < 1 n - (the last version
// <= v that changed the byte's 1 MiB block of its tensor), each block changing in a version with
// probability `perturb` (version 1 has every block): a fine-tuning step, for delta updates.
struct VersionScheme {
  static constexpr uint64_t kBlockBytes = 1 << 20;  // as gen-model --perturb: 2^19 bf16 elements
  uint64_t versions = 1;
  double perturb = 1;
  uint64_t Distance(uint64_t version, uint32_t tensor, uint64_t tensor_offset) const;
};
// Writes or checks the packed bytes of one shard in version v.
void WriteShardVersion(const Plan& plan, const PlannedShard& shard, const LoadedModel& model,
                       uint64_t version, const VersionScheme& scheme, std::span<std::byte> out);
// OK when `bytes` hold version v of the shard (converted where the plan converts); else DataLoss
// naming the tensor, slice and element.
Status CheckShardVersion(const Plan& plan, const PlannedShard& shard, const LoadedModel& model,
                         uint64_t version, const VersionScheme& scheme, std::span<const std::byte> bytes);

// Writes one rank's shards as safetensors: entry "<tensor>.shard<i>" with the slice's packed shape
// (a box's lengths, a flat range's length), and metadata "weightport.shards": JSON
// [{"entry", "tensor", "start", "length"} or {"entry", "tensor", "flat": [start, length]}]. A
// destination shard quantised to f8e4m3 adds its block scales: entry "<tensor>_scale_inv.shard<i>",
// tensor "<tensor>_scale_inv", its slice of the scale grid.
Status WriteShardsFile(const std::string& path, const Plan& plan, const RankBuffer& buffer,
                       const std::function<std::span<const std::byte>(size_t)>& shard_bytes);

}  // namespace weightport::cli
