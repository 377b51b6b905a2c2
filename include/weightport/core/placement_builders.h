// Builders for the common layouts: replication, tensor/pipeline/expert parallelism, FSDP1 flat
// shards, FSDP2 dim-0 shards, and their composition over a rank grid (a "mesh").
//
// A mesh is a list of axes, e.g. {pp: 2, dp: 2, tp: 4}; rank id = row-major coordinate over the
// axes in the order given (last axis fastest, like torch DeviceMesh), plus an optional offset.
// Each axis maps the shards a coordinate holds to the shards it holds after splitting or selecting
// along that axis. Axes are applied in this order: selecting axes (pipeline stages) first, in mesh
// order, then the other axes from the last (innermost) to the first, so an FSDP2 axis outside a TP
// axis shards the TP-local tensor on dim 0, as FSDP2-on-DTensor does.
//
// Names follow HF Llama/MoE conventions: "model.layers.{i}.…", "….mlp.experts.{e}.…".
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "weightport/core/placement.h"

namespace weightport {

// ---- splitting one extent --------------------------------------------------------------------

struct SplitRange {
  int64_t start = 0;
  int64_t length = 0;
  friend bool operator==(const SplitRange&, const SplitRange&) = default;
};

// Megatron/vLLM style: sizes differ by at most one, the first extent % parts parts get the extra
// element (151936 over 3 -> 50646, 50645, 50645). Error when parts < 1 or extent < 0.
Result<std::vector<SplitRange>> EvenSplit(int64_t extent, int parts);
// torch.chunk style (FSDP2 dim-0 shards): chunks of ceil(extent / parts), the last one smaller;
// parts past the end are empty (start = extent, length 0). 5 over 4 -> 2, 2, 1, 0.
Result<std::vector<SplitRange>> ChunkSplit(int64_t extent, int parts);
// Part `index` of EvenSplit / ChunkSplit alone, in constant time: an axis binder asks for one
// index at a time, and building the whole split per index made a mesh quadratic in its size.
// Error when parts < 1, extent < 0 or index is outside [0, parts).
Result<SplitRange> EvenPart(int64_t extent, int parts, int index);
Result<SplitRange> ChunkPart(int64_t extent, int parts, int index);

// Shell-style glob over a whole tensor name: '*' matches any run of characters (dots included),
// '?' one character; everything else literally.
bool GlobMatch(std::string_view pattern, std::string_view name);
// The N of "layers.N." in a name ("model.layers.7.mlp…" -> 7), or -1.
int64_t LayerIndex(std::string_view name);
// The N of "experts.N." (not "shared_experts."), or -1.
int64_t ExpertIndex(std::string_view name);

// ---- tensor parallelism ----------------------------------------------------------------------

enum class TpKind : uint8_t {
  kReplicated,  // norms, routers
  kColumn,      // split dim 0 of a [out, in] weight (and its bias)
  kRow,         // split dim 1 of a [out, in] weight; a 1-D bias is replicated
  kVocab,       // split dim 0 (the vocabulary) of embed_tokens / lm_head
};
struct TpRule {
  TpKind kind = TpKind::kReplicated;
  // Split in whole units of this many indices (e.g. head_dim rows); the extent must divide.
  int64_t granule = 1;
};
struct TpPattern {
  std::string glob;
  TpRule rule;
};
// q/k/v/gate/up_proj column; o/down_proj row; embed_tokens, lm_head vocab; *norm* and the MoE
// router (mlp.gate) replicated. No catch-all: a tensor matching none is an error (append
// {"*", {}} to replicate the rest).
std::vector<TpPattern> LlamaTpRules();
// The first rule whose glob matches the name; error naming the tensor when none does.
Result<TpRule> MatchTpRule(std::span<const TpPattern> rules, std::string_view tensor);

// ---- mesh axes -------------------------------------------------------------------------------

// Maps the shards one mesh coordinate holds before an axis to those it holds at `index` along it.
using ShardMap = std::function<Result<std::vector<Shard>>(std::vector<Shard> held, int index)>;

struct MeshAxis {
  std::string name;
  int size = 1;
  bool selects = false;  // keeps or drops whole shards; applied before the splitting axes
  // Called once per build with the tensor table (a Placement without shards); the returned map
  // may refer to `table` and is used only while it lives.
  std::function<Result<ShardMap>(const Placement& table, int size)> bind;
};

struct PipelineOptions {
  // Layers per stage, summing to the number of layers; empty: EvenSplit over the stages.
  std::vector<int64_t> layers_per_stage = {};
  // Tensors outside "layers.N." go to the first and/or last stage by these globs; a tensor
  // matching neither is an error.
  std::vector<std::string> first_stage = {"*embed_tokens*"};
  std::vector<std::string> last_stage = {"*lm_head*", "model.norm.*"};
};

enum class ExpertAssignment : uint8_t {
  kContiguous,  // EvenSplit blocks: rank r holds experts [start_r, start_r + n_r)
  kRoundRobin,  // expert e on rank e % size
};
struct ExpertOptions {
  ExpertAssignment assignment = ExpertAssignment::kContiguous;
  // Non-expert tensors: replicated when empty, else tensor-parallel over the same ranks with these
  // rules (vLLM's expert parallelism reuses the TP ranks for attention).
  std::vector<TpPattern> non_expert_tp = {};
};

struct FsdpFlatOptions {
  // FSDP1 wraps each decoder layer in its own unit: one flat buffer per layer plus one for the
  // tensors outside layers. false: one flat buffer for all tensors.
  bool unit_per_layer = false;
};

MeshAxis ReplicaAxis(std::string name, int size);
MeshAxis TensorParallelAxis(std::string name, int size, std::vector<TpPattern> rules = LlamaTpRules());
MeshAxis PipelineAxis(std::string name, int size, PipelineOptions options = {});
MeshAxis ExpertParallelAxis(std::string name, int size, ExpertOptions options = {});
// torch.chunk of each held box's dim 0 (of the TP-local box when inside a TP axis); rank-0 tensors
// replicated. Needs box shards.
MeshAxis Fsdp2Axis(std::string name, int size);
// FSDP1: the held tensors' elements concatenated in table order, padded to a multiple of `size`,
// each index holding one contiguous 1/size range, mapped to per-tensor Flat slices. Needs whole
// tensors (no TP inside it) of one dtype per unit.
MeshAxis FsdpFlatAxis(std::string name, int size, FsdpFlatOptions options = {});

// Bounds on a mesh, checked as it is built so that a hostile size fails with an error instead of
// exhausting memory: ranks (the product of the axis sizes, checked before anything is built) and
// shards over all ranks (counted as the ranks are filled in; a shard costs ~150 bytes).
inline constexpr int64_t kMaxMeshRanks = int64_t{1} << 20;
inline constexpr int64_t kMaxMeshShards = int64_t{1} << 22;

// Builds the placement of `tensors` over the mesh; ranks rank_offset .. rank_offset + world - 1,
// every one declared even when it holds nothing. The result is Validate()d. Errors when the mesh
// has more than kMaxMeshRanks ranks or kMaxMeshShards shards.
Result<Placement> BuildMesh(std::vector<TensorMeta> tensors, std::span<const MeshAxis> axes,
                            int rank_offset = 0);

// ---- single-axis shortcuts (ranks 0 .. n-1 unless given) ---------------------------------------

Result<Placement> Replicated(std::vector<TensorMeta> tensors, std::span<const int> ranks);
Result<Placement> TensorParallel(std::vector<TensorMeta> tensors, int tp,
                                 std::vector<TpPattern> rules = LlamaTpRules());
Result<Placement> PipelineStages(std::vector<TensorMeta> tensors, int pp, PipelineOptions options = {});
Result<Placement> ExpertParallel(std::vector<TensorMeta> tensors, int ep, ExpertOptions options = {});
Result<Placement> FsdpFlat(std::vector<TensorMeta> tensors, int world, FsdpFlatOptions options = {});
Result<Placement> Fsdp2(std::vector<TensorMeta> tensors, int world);

}  // namespace weightport
