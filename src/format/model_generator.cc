#include <vector>

#include "weightport/format/checkpoint.h"
#include "weightport/format/model_files.h"
#include "weightport/format/synthetic_model.h"

namespace weightport {

namespace {

std::map<std::string, std::string> SpecMetadata(const ModelSpec& s, uint64_t seed) {
  return {{"format", "pt"},
          {"weightport.arch", std::string(ModelArchName(s.arch))},
          {"weightport.preset", s.preset},
          {"weightport.seed", std::to_string(seed)},
          {"weightport.step", "0"},
          {"weightport.layers", std::to_string(s.layers)},
          {"weightport.hidden", std::to_string(s.hidden)},
          {"weightport.experts", std::to_string(s.experts)},
          {"weightport.dtype", std::string(DTypeName(s.dtype))}};
}

}  // namespace

Status GenerateModel(const ModelSpec& spec, const GenerateOptions& options) {
  if (spec.dtype != DType::kF32 && spec.dtype != DType::kBF16 && spec.dtype != DType::kF16)
    return InvalidArgument("gen-model: dtype must be f32, bf16 or f16, not " +
                           std::string(DTypeName(spec.dtype)));
  std::vector<std::byte> buffer;
  auto fill = [&](const TensorMeta& meta) -> Result<std::span<const std::byte>> {
    buffer.resize(meta.bytes);
    WP_RETURN_IF_ERROR(FillTensor(meta, options.seed, buffer));
    return std::span<const std::byte>(buffer);
  };
  return model_files::WriteShardedCheckpoint(options.out_dir, options.overwrite, ModelTensors(spec),
                                             options.shards, SpecMetadata(spec, options.seed), fill,
                                             options.progress);
}

}  // namespace weightport
