// The inputs of `weightport plan`: placements from files (a full Placement JSON or a short layout
// spec), the tensor table a spec is built over, and a topology file.
//
// A layout spec names a mesh of builder axes (placement_builders.h) over the model's tensors:
//   {"mesh": [{"axis": "dp", "kind": "replica", "size": 2},
//             {"axis": "tp", "kind": "tp", "size": 2}],
//    "rank_offset": 0, "description": "two replicas of TP 2"}
// Kinds and their options (all optional):
//   replica  -
//   tp       "rules": [{"glob": "*.q_proj.*", "kind": "column"|"row"|"vocab"|"replicated",
//                       "granule": 1}, ...] (default: the Llama rules),
//            "replicate_unmatched": false (true: tensors no rule matches are replicated)
//   pp       "layers_per_stage": [n, ...], "first_stage": [glob, ...], "last_stage": [glob, ...]
//   ep       "assignment": "contiguous"|"round_robin", "non_expert": "replicated"|"tp"
//   fsdp     "unit_per_layer": false  (FSDP1 flat shards)
//   fsdp2    -                        (torch.chunk of dim 0)
// Parsing is strict: an unknown key, kind or value is an error naming the file and JSON path
// ("tp2.json: mesh[1].kind: unknown kind 'tpp' (expected replica, tp, pp, ep, fsdp or fsdp2)").
//
// Thread-safety: free functions without shared state.
#pragma once

#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "weightport/core/placement.h"
#include "weightport/core/status.h"
#include "weightport/core/tensor_meta.h"
#include "weightport/core/tensor_rename.h"
#include "weightport/plan/plan.h"
#include "weightport/plan/topology.h"

namespace weightport::cli {

// Kinds of mesh axis a spec may name, in the order the help text lists them.
const std::vector<std::string>& LayoutKinds();

// True when `json` looks like a layout spec (an object with "mesh") rather than a Placement JSON.
bool IsLayoutSpec(const nlohmann::json& json);

// Builds the placement a layout spec describes over `tensors`. `what` (the file name) prefixes
// every error.
Result<Placement> PlacementFromLayoutSpec(const nlohmann::json& spec, std::vector<TensorMeta> tensors,
                                          std::string_view what);

// Reads a placement file: a Placement JSON (Placement::FromJson) or a layout spec built over
// `tensors`. A spec without `tensors` is an error that says how to give them; a Placement JSON is
// checked against `tensors` when they are given (same names, dtypes and shapes for the tensors it
// lists). A Placement JSON's tensors are renamed by `renames` first (tensor_rename.h); a layout
// spec is built over `tensors` as they are, so rename those before (RenameTensors). Errors name
// `path`.
Result<Placement> LoadPlacementFile(const std::string& path,
                                    const std::optional<std::vector<TensorMeta>>& tensors,
                                    std::span<const TensorRename> renames = {});

// LoadPlacementFile on JSON already read from `path`.
Result<Placement> PlacementFromJson(const nlohmann::json& json,
                                    const std::optional<std::vector<TensorMeta>>& tensors,
                                    const std::string& path, std::span<const TensorRename> renames = {});

// The tensors of a manifest JSON file (`weightport manifest` output). Errors name `path`.
Result<std::vector<TensorMeta>> LoadManifestTensors(const std::string& path);

// Reads a topology JSON file (Topology::FromJson). Errors name `path`.
Result<Topology> LoadTopologyFile(const std::string& path);

// The help of --compressor-gbps (plan, reshard).
inline constexpr const char* kCompressorHelp =
    "Compress (zstd, per chunk) the steps over links slower than this many Gbit/s: what one\n"
    "sender thread compresses (about 5.9 on bf16 weights here: bench_compress); 0: never";

// `--convert GLOB=DTYPE` values: destinations store the tensors matching GLOB as DTYPE (f32, bf16
// or f16). The error names the value at fault.
Result<std::vector<TransformRule>> ParseConvertRules(const std::vector<std::string>& values);

}  // namespace weightport::cli
