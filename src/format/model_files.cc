#include "model_files.h"

#include <filesystem>
#include <system_error>

#include "weightport/format/checkpoint.h"

namespace weightport::model_files {

namespace fs = std::filesystem;

Status PrepareOutputDir(const std::string& dir, bool overwrite) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return IoError("cannot create directory " + dir + ": " + ec.message());
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename().string();
    const bool is_checkpoint = entry.path().extension() == ".safetensors" || name == kShardIndexFileName;
    if (!is_checkpoint) continue;
    if (!overwrite)
      return AlreadyExists(dir + " already holds a checkpoint (" + name +
                           "); choose another directory or overwrite");
    fs::remove(entry.path(), ec);
    if (ec) return IoError("cannot remove " + entry.path().string() + ": " + ec.message());
  }
  if (ec) return IoError("cannot list directory " + dir + ": " + ec.message());
  return Status::Ok();
}

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

}  // namespace weightport::model_files
