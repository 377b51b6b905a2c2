#include <filesystem>
#include <vector>

#include "model_files.h"
#include "weightport/format/checkpoint.h"
#include "weightport/format/safetensors.h"
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
  const std::vector<TensorMeta> tensors = ModelTensors(spec);
  WP_ASSIGN_OR_RETURN(auto groups, model_files::SplitIntoShards(tensors, options.shards));
  WP_RETURN_IF_ERROR(model_files::PrepareOutputDir(options.out_dir, options.overwrite));

  const auto metadata = SpecMetadata(spec, options.seed);
  const uint64_t total = ModelBytes(spec);
  uint64_t done = 0;
  std::vector<std::byte> buffer;
  ShardIndex index;
  index.metadata = {{"format", "pt"}};
  index.total_size = total;
  for (size_t s = 0; s < groups.size(); ++s) {
    const std::string file = ShardFileName(static_cast<int>(s + 1), static_cast<int>(groups.size()));
    const std::string path = (std::filesystem::path(options.out_dir) / file).string();
    WP_ASSIGN_OR_RETURN(SafetensorsWriter writer, SafetensorsWriter::Create(path, groups[s], metadata));
    for (const auto& meta : groups[s]) {
      buffer.resize(meta.bytes);
      WP_RETURN_IF_ERROR(FillTensor(meta, options.seed, buffer));
      WP_RETURN_IF_ERROR(writer.Append(buffer));
      index.weight_map[meta.name] = file;
      done += meta.bytes;
      if (options.progress) options.progress(done, total);
    }
    WP_RETURN_IF_ERROR(writer.Finish());
  }
  if (groups.size() > 1)
    WP_RETURN_IF_ERROR(index.Write((std::filesystem::path(options.out_dir) / kShardIndexFileName).string()));
  return Status::Ok();
}

}  // namespace weightport
