// Helpers shared by the writers of whole checkpoints (generator, perturbation, convert).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "weightport/core/status.h"
#include "weightport/core/tensor_meta.h"

namespace weightport::model_files {

// Creates `dir` (and parents). Unless `overwrite`, fails when it already holds a checkpoint
// (*.safetensors or the shard index).
Status PrepareOutputDir(const std::string& dir, bool overwrite);

// Splits tensors, in order, into `shards` contiguous groups of about equal bytes. Each group is
// non-empty; `shards` larger than the tensor count is an error.
Result<std::vector<std::vector<TensorMeta>>> SplitIntoShards(const std::vector<TensorMeta>& tensors,
                                                             int shards);

}  // namespace weightport::model_files
