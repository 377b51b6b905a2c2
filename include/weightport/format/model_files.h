// Helpers shared by the writers of whole checkpoints (generator, perturbation, convert).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <span>
#include <string>
#include <vector>

#include "weightport/core/status.h"
#include "weightport/core/tensor_meta.h"

namespace weightport::model_files {

// Splits tensors, in order, into `shards` contiguous groups of about equal bytes. Each group is
// non-empty; `shards` larger than the tensor count is an error.
Result<std::vector<std::vector<TensorMeta>>> SplitIntoShards(const std::vector<TensorMeta>& tensors,
                                                             int shards);

// The bytes of one tensor, produced on demand (generated, or viewed in another checkpoint); the span
// must stay valid until the next call.
using TensorSource = std::function<Result<std::span<const std::byte>>(const TensorMeta& meta)>;

// Writes `tensors`, in order, as `shards` safetensors files in `dir` (one model.safetensors, or
// model-0000i-of-0000N.safetensors plus the index), each file carrying `metadata`. Checks the split
// before writing anything; writes beside `dir` and swaps the checkpoint in whole once complete
// (ReplaceCheckpointDir: refuses a `dir` holding a checkpoint unless `overwrite`). `progress` may be
// empty.
Status WriteShardedCheckpoint(const std::string& dir, bool overwrite, const std::vector<TensorMeta>& tensors,
                              int shards, const std::map<std::string, std::string>& metadata,
                              const TensorSource& source,
                              const std::function<void(uint64_t done, uint64_t total)>& progress);

}  // namespace weightport::model_files
