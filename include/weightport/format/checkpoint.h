// A model checkpoint on disk: one safetensors file, or a directory of shards described by
// model.safetensors.index.json ({"metadata": {"total_size": N}, "weight_map": {tensor: file}}).
// A directory without an index opens every *.safetensors file in it, in name order.
//
// Thread-safety: immutable after Open; reads from any thread.
#pragma once

#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "weightport/core/manifest.h"
#include "weightport/core/status.h"
#include "weightport/format/safetensors_reader.h"

namespace weightport {

inline constexpr std::string_view kShardIndexFileName = "model.safetensors.index.json";

// The sharded-checkpoint index.
struct ShardIndex {
  std::map<std::string, std::string> metadata;  // "total_size" is kept as a string here
  uint64_t total_size = 0;
  std::map<std::string, std::string> weight_map;  // tensor name -> shard file name

  nlohmann::json ToJson() const;
  static Result<ShardIndex> FromJson(const nlohmann::json& json, std::string_view file_name);
  static Result<ShardIndex> Read(const std::string& path);
  Status Write(const std::string& path) const;
};

// "model-00002-of-00004.safetensors"; "model.safetensors" when there is one shard.
std::string ShardFileName(int index, int count);

// The shard set `names` (file names of one checkpoint) is complete when, for every name of the form
// PREFIX-i-of-N.safetensors, each of PREFIX-1-of-N ... PREFIX-N-of-N (numbered as wide as that
// name's i) is in it. Returns the first missing name, or "" when none is.
std::string FirstMissingShard(const std::vector<std::string>& names);

struct CheckpointTensor {
  const SafetensorsTensor* entry;  // within files()[file]
  size_t file;
  const TensorMeta& meta() const { return entry->meta; }
};

class Checkpoint {
 public:
  // `path` is a .safetensors file or a directory. Errors name the file and tensor at fault:
  // a tensor in two shards, an index naming a missing file or a tensor its file lacks, a shard
  // holding a tensor the index does not list, a shard set whose -i-of-N names (from the index or
  // the directory) say a shard is missing.
  static Result<Checkpoint> Open(const std::string& path);

  const std::string& path() const { return path_; }
  const std::vector<SafetensorsFile>& files() const { return files_; }
  // Every tensor, in shard order then header order.
  const std::vector<CheckpointTensor>& tensors() const { return tensors_; }
  // Metadata of the first shard (where writers put model-level metadata).
  const std::map<std::string, std::string>& metadata() const;
  uint64_t total_bytes() const { return total_bytes_; }

  const CheckpointTensor* Find(std::string_view name) const;
  std::span<const std::byte> Data(const CheckpointTensor& tensor) const;

  // Hashes every tensor into a manifest (tensor order as in tensors()).
  Result<Manifest> BuildManifest(uint64_t version, uint64_t chunk_size = kDefaultChunkSize) const;

 private:
  std::string path_;
  std::vector<SafetensorsFile> files_;
  std::vector<CheckpointTensor> tensors_;
  std::unordered_map<std::string, size_t> index_;
  uint64_t total_bytes_ = 0;
};

}  // namespace weightport
