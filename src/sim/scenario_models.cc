#include "sim/scenario_models.h"

#include <string>

namespace weightport::sim {

ModelSpec KimiK2LikeSpec(int layers, int experts, DType dtype) {
  ModelSpec s;
  s.preset = "custom";
  s.arch = ModelArch::kMoe;
  s.layers = layers;
  s.hidden = 7168;
  s.heads = 64;
  s.kv_heads = 64;
  s.head_dim = 128;
  s.vocab = 163840;
  s.experts = experts;
  s.moe_intermediate = 2048;
  s.shared_experts = 1;
  s.dtype = dtype;
  return s;
}

ModelSpec Dense50bSpec(int layers) {
  ModelSpec s;
  s.preset = "custom";
  s.arch = ModelArch::kDense;
  s.layers = layers;
  s.hidden = 8192;
  s.intermediate = 28672;
  s.heads = 64;
  s.kv_heads = 8;
  s.head_dim = 128;
  s.vocab = 128256;
  s.dtype = DType::kBF16;
  return s;
}

std::vector<TensorMeta> BucketTensors(uint64_t total_bytes, int buckets) {
  std::vector<TensorMeta> out;
  const int64_t elements = static_cast<int64_t>(total_bytes / 2 / static_cast<uint64_t>(buckets));
  for (int b = 0; b < buckets; ++b) {
    auto t = TensorMeta::Make("bucket." + std::to_string(b), DType::kBF16, {std::max<int64_t>(elements, 1)});
    if (t.ok()) out.push_back(std::move(t).value());
  }
  return out;
}

Result<std::vector<TensorMeta>> WithAdamState(std::vector<TensorMeta> tensors) {
  const size_t weights = tensors.size();
  for (const char* suffix : {".master", ".exp_avg", ".exp_avg_sq"}) {
    for (size_t i = 0; i < weights; ++i) {
      WP_ASSIGN_OR_RETURN(TensorMeta t,
                          TensorMeta::Make(tensors[i].name + suffix, DType::kF32, tensors[i].shape));
      tensors.push_back(std::move(t));
    }
  }
  return tensors;
}

}  // namespace weightport::sim
