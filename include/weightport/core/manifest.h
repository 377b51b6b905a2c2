// Manifest: the description of one model version — its tensors in order, their sizes, where each
// sits in the version's flat byte space, and xxh3-64 hashes per fixed-size chunk of each tensor.
//
// Chunks are per tensor: chunk k of a tensor covers bytes [k*chunk_size, min((k+1)*chunk_size,
// bytes)) of that tensor. Per-tensor chunking keeps a chunk inside one tensor, so a slice of a
// tensor maps to whole or partial chunks of that tensor alone (resharding and delta updates rely
// on it).
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "weightport/core/byte_range.h"
#include "weightport/core/status.h"
#include "weightport/core/tensor_meta.h"

namespace weightport {

inline constexpr uint64_t kDefaultChunkSize = 1ull << 20;  // 1 MiB

struct ManifestTensor {
  TensorMeta meta;
  uint64_t offset = 0;  // start in the version's flat byte space (tensors concatenated in order)
  uint64_t hash = 0;    // xxh3-64 of the whole tensor
  std::vector<uint64_t> chunk_hashes;

  ByteRange range() const { return {offset, meta.bytes}; }
  friend bool operator==(const ManifestTensor&, const ManifestTensor&) = default;
};

// The bytes of one tensor, as handed to Manifest::Build.
struct TensorBytes {
  TensorMeta meta;
  std::span<const std::byte> data;
};

class Manifest {
 public:
  Manifest() = default;

  // Hashes every tensor. Errors: chunk_size 0, duplicate names, data size != meta.bytes.
  static Result<Manifest> Build(uint64_t version, std::span<const TensorBytes> tensors,
                                uint64_t chunk_size = kDefaultChunkSize);
  // Builds without hashing (hashes left 0): for placements and plans that need only the layout.
  static Result<Manifest> FromMetas(uint64_t version, std::span<const TensorMeta> tensors,
                                    uint64_t chunk_size = kDefaultChunkSize);

  uint64_t version() const { return version_; }
  uint64_t chunk_size() const { return chunk_size_; }
  uint64_t total_bytes() const { return total_bytes_; }
  const std::vector<ManifestTensor>& tensors() const { return tensors_; }
  size_t num_chunks() const;

  // nullptr when there is no tensor of that name.
  const ManifestTensor* Find(std::string_view name) const;
  // Byte range of chunk `index` within tensor `t` (tensor-relative offsets).
  ByteRange ChunkRange(const ManifestTensor& t, size_t index) const;
  // Indices of the chunks of tensor `t` that differ from `older`'s chunks of the same tensor
  // (all of them when `older` lacks the tensor, its shape/dtype changed or chunk sizes differ).
  std::vector<size_t> ChangedChunks(const ManifestTensor& t, const Manifest& older) const;

  nlohmann::json ToJson() const;
  // Strict: every field typed and checked; offsets and sizes recomputed and compared.
  static Result<Manifest> FromJson(const nlohmann::json& json);
  // The same from JSON text (as it travels in a ManifestMsg); `what` names the source in errors.
  static Result<Manifest> FromJsonText(std::string_view text, std::string_view what);

  friend bool operator==(const Manifest& a, const Manifest& b) {
    return a.version_ == b.version_ && a.chunk_size_ == b.chunk_size_ && a.tensors_ == b.tensors_;
  }

 private:
  Status Append(ManifestTensor tensor);

  uint64_t version_ = 0;
  uint64_t chunk_size_ = kDefaultChunkSize;
  uint64_t total_bytes_ = 0;
  std::vector<ManifestTensor> tensors_;
  std::unordered_map<std::string, size_t> index_;
};

}  // namespace weightport
