// The models the built-in scenarios move: tensor tables only (no weight bytes).
#pragma once

#include <cstdint>
#include <vector>

#include "weightport/core/dtype.h"
#include "weightport/core/status.h"
#include "weightport/core/tensor_meta.h"
#include "weightport/format/synthetic_model.h"

namespace weightport::sim {

// DeepSeek-V3 / Kimi-K2 class MoE: hidden 7168, 64 heads of 128, routed experts of width 2048 plus
// one shared expert, vocabulary 163840. 61 layers x 384 experts is ~1.05T parameters.
ModelSpec KimiK2LikeSpec(int layers, int experts, DType dtype);
// Llama-style dense model of ~50B parameters at 56 layers: hidden 8192, 64 heads (8 KV heads) of
// 128, MLP width 28672, vocabulary 128256, bf16.
ModelSpec Dense50bSpec(int layers);
// `buckets` flat bf16 tensors ("bucket.N") adding up to about `total_bytes`: a model packed into
// transfer buckets, as weight-sync systems do.
std::vector<TensorMeta> BucketTensors(uint64_t total_bytes, int buckets);
// The tensors plus what mixed-precision Adam keeps for each: an fp32 master copy and two fp32
// moments (name + ".master", ".exp_avg", ".exp_avg_sq": the TP rules' globs still match).
Result<std::vector<TensorMeta>> WithAdamState(std::vector<TensorMeta> tensors);

}  // namespace weightport::sim
