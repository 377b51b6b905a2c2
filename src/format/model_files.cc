#include "weightport/format/model_files.h"

#include <filesystem>

#include "weightport/format/checkpoint.h"
#include "weightport/format/checkpoint_dir.h"
#include "weightport/format/safetensors_writer.h"

namespace weightport::model_files {

namespace fs = std::filesystem;

Result<std::vector<std::vector<TensorMeta>>> SplitIntoShards(const std::vector<TensorMeta>& tensors,
                                                             int shards) {
  if (shards < 1) return InvalidArgument("shard count must be at least 1, got " + std::to_string(shards));
  if (static_cast<size_t>(shards) > tensors.size())
    return InvalidArgument("cannot split " + std::to_string(tensors.size()) + " tensors into " +
                           std::to_string(shards) + " shards");
  uint64_t total = 0;
  for (const auto& t : tensors) total += t.bytes;
  std::vector<std::vector<TensorMeta>> out(static_cast<size_t>(shards));
  uint64_t cumulative = 0;
  size_t shard = 0;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const size_t tensors_left = tensors.size() - i;
    const size_t shards_left = out.size() - shard;
    // Move on when this shard reached its share of bytes, or when every remaining tensor is
    // needed to keep the remaining shards non-empty.
    const bool full =
        !out[shard].empty() && (cumulative * out.size() >= total * (shard + 1) || tensors_left < shards_left);
    if (full && shard + 1 < out.size()) ++shard;
    out[shard].push_back(tensors[i]);
    cumulative += tensors[i].bytes;
  }
  return out;
}

Status WriteShardedCheckpoint(const std::string& dir, bool overwrite, const std::vector<TensorMeta>& tensors,
                              int shards, const std::map<std::string, std::string>& metadata,
                              const TensorSource& source,
                              const std::function<void(uint64_t done, uint64_t total)>& progress) {
  WP_ASSIGN_OR_RETURN(auto groups, SplitIntoShards(tensors, shards));
  return ReplaceCheckpointDir(dir, overwrite, [&](const std::string& staging) -> Status {
    ShardIndex index;
    index.metadata = {{"format", "pt"}};
    for (const auto& t : tensors) index.total_size += t.bytes;
    uint64_t done = 0;
    for (size_t s = 0; s < groups.size(); ++s) {
      const std::string file = ShardFileName(static_cast<int>(s + 1), static_cast<int>(groups.size()));
      WP_ASSIGN_OR_RETURN(
          SafetensorsWriter writer,
          SafetensorsWriter::Create((fs::path(staging) / file).string(), groups[s], metadata));
      for (const auto& meta : groups[s]) {
        WP_ASSIGN_OR_RETURN(std::span<const std::byte> bytes, source(meta));
        WP_RETURN_IF_ERROR(writer.Append(bytes));
        index.weight_map[meta.name] = file;
        done += meta.bytes;
        if (progress) progress(done, index.total_size);
      }
      WP_RETURN_IF_ERROR(writer.Finish());
    }
    if (groups.size() > 1)
      WP_RETURN_IF_ERROR(index.Write((fs::path(staging) / kShardIndexFileName).string()));
    return Status::Ok();
  });
}

}  // namespace weightport::model_files
