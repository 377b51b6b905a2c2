// Placement: which rank holds which slice of which tensor, as one side of a transfer sees it.
//
// A Placement lists the model's tensors (name, dtype, shape; usually from a Manifest) and, for each
// rank, the Shards it holds. Rank ids are ints >= 0 and may be sparse; a rank may hold nothing
// (AddRank). Replication is several ranks holding the same slice. Each shard is stored packed on
// its rank (see slice.h); the order of a rank's shards is the order they were added.
//
// Building is unchecked and cheap (AddShard); Validate() reports every structural problem with the
// rank and tensor named. The planner intersects a source and a destination Placement of the same
// tensors; builders for TP/PP/EP/FSDP layouts are in placement_builders.h.
//
// Thread-safety: none for mutation; const methods may run concurrently.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "weightport/core/manifest.h"
#include "weightport/core/slice.h"
#include "weightport/core/status.h"
#include "weightport/core/tensor_meta.h"

namespace weightport {

struct Shard {
  std::string tensor;
  Slice slice;
  friend bool operator==(const Shard&, const Shard&) = default;
};

// One holder of a tensor: the rank and the slice it holds.
struct Holding {
  int rank = 0;
  Slice slice;
  friend bool operator==(const Holding&, const Holding&) = default;
};

// An element region of a tensor no rank holds.
struct UncoveredRegion {
  std::string tensor;
  Box region;
};

class Placement {
 public:
  Placement() = default;

  // Errors on duplicate tensor names; the metas must be valid (TensorMeta::Make).
  static Result<Placement> Make(std::vector<TensorMeta> tensors);
  static Result<Placement> FromManifest(const Manifest& manifest);

  // Adds a tensor; error when the name is taken.
  Status AddTensor(TensorMeta meta);
  // Declares a rank (it may hold nothing). Idempotent.
  void AddRank(int rank);
  // Adds a shard to `rank` (declaring it). Not checked here: see Validate().
  void AddShard(int rank, Shard shard);
  void AddShard(int rank, std::string tensor, Slice slice) {
    AddShard(rank, Shard{std::move(tensor), std::move(slice)});
  }

  const std::vector<TensorMeta>& tensors() const { return tensors_; }
  // nullptr when the placement has no such tensor.
  const TensorMeta* FindTensor(std::string_view name) const;
  // The same, trying tensors()[hint] first: loops over shards added in table order (as the builders
  // add them) pass the last index + 1 and skip the hash lookup.
  const TensorMeta* FindTensor(std::string_view name, size_t hint) const;
  // The declared ranks, ascending.
  std::vector<int> ranks() const;
  size_t num_ranks() const { return shards_.size(); }
  bool HasRank(int rank) const { return shards_.count(rank) != 0; }
  // The shards of `rank`; empty for an unknown rank.
  std::span<const Shard> shards(int rank) const;
  // Every (rank, slice) holding part of `tensor`, ascending by rank then in shard order.
  std::vector<Holding> HoldersOf(std::string_view tensor) const;
  // HoldersOf for every tensor in one pass over the shards: entry i is tensors()[i]'s holders.
  // Use this in loops over tensors (HoldersOf scans every shard).
  std::vector<std::vector<Holding>> HoldersByTensor() const;

  // Bytes a rank stores (shards of unknown tensors count 0).
  uint64_t BytesOnRank(int rank) const;
  // Bytes over all ranks, replicas counted each time.
  uint64_t TotalBytes() const;
  // Bytes of one copy of every tensor.
  uint64_t ModelBytes() const;

  // Checks: rank ids >= 0; every shard names a known tensor; its slice is valid in the tensor's
  // shape (rank, bounds, lengths); no two shards of one tensor on one rank overlap. The first
  // problem is returned, naming the rank and tensor.
  Status Validate() const;
  // Validate() plus: every tensor of this placement is in `manifest` with the same dtype and
  // shape (a placement may describe a subset of the manifest's tensors).
  Status ValidateAgainst(const Manifest& manifest) const;
  // On a valid placement: the first tensor region (a box) that no rank holds, or nullopt when every
  // element of every tensor is held somewhere. Works on boxes, not elements.
  std::optional<UncoveredRegion> FindUncovered() const;
  // FindUncovered() as a Status naming the tensor and region.
  Status CheckCoverage() const;

  // JSON (placement_json.cc):
  // {"tensors": [{"name", "dtype", "shape"}...],
  //  "ranks": [{"rank": 0, "shards": [{"tensor": "w", "start": [..], "length": [..]} or
  //                                    {"tensor": "w", "flat": [start, length]} ...]} ...]}
  nlohmann::json ToJson() const;
  // Strict: unknown or missing keys, wrong types, duplicate tensors or ranks are errors naming the
  // JSON path; the result is Validate()d.
  static Result<Placement> FromJson(const nlohmann::json& json);

  friend bool operator==(const Placement& a, const Placement& b) {
    return a.tensors_ == b.tensors_ && a.shards_ == b.shards_;
  }

 private:
  std::vector<TensorMeta> tensors_;
  // Transparent hashing: lookups by string_view allocate nothing.
  struct NameHash {
    using is_transparent = void;
    size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
  };
  std::unordered_map<std::string, size_t, NameHash, std::equal_to<>> index_;
  std::map<int, std::vector<Shard>> shards_;
};

}  // namespace weightport
