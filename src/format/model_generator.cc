#include <sys/statvfs.h>

#include <filesystem>
#include <system_error>
#include <vector>

#include "weightport/format/checkpoint.h"
#include "weightport/format/model_files.h"
#include "weightport/format/synthetic_model.h"

namespace weightport {

namespace {

namespace fs = std::filesystem;

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

// The generator fills one tensor in memory at a time (the presets' largest is 125 MiB).
constexpr uint64_t kMaxGeneratedTensorBytes = uint64_t{8} << 30;

// Refuses a model that cannot fit on the file system that would hold `out_dir`, before writing.
Status CheckFreeSpace(const std::string& out_dir, uint64_t bytes) {
  std::error_code ec;
  fs::path p = fs::absolute(out_dir, ec);
  if (ec) return Status::Ok();  // the write reports what is wrong with the path
  while (!fs::exists(p, ec) && p.has_parent_path() && p != p.parent_path()) p = p.parent_path();
  struct statvfs st;
  if (::statvfs(p.c_str(), &st) != 0) return Status::Ok();
  const uint64_t free_bytes = static_cast<uint64_t>(st.f_bavail) * st.f_frsize;
  if (bytes <= free_bytes) return Status::Ok();
  return ResourceExhausted("gen-model: the checkpoint would be " + std::to_string(bytes) + " bytes but " +
                           p.string() + " has " + std::to_string(free_bytes) + " bytes free");
}

}  // namespace

Status GenerateModel(const ModelSpec& spec, const GenerateOptions& options) {
  if (spec.dtype != DType::kF32 && spec.dtype != DType::kBF16 && spec.dtype != DType::kF16)
    return InvalidArgument("gen-model: dtype must be f32, bf16 or f16, not " +
                           std::string(DTypeName(spec.dtype)));
  const std::vector<TensorMeta> tensors = ModelTensors(spec);
  uint64_t total = 0;
  for (const auto& t : tensors) {
    if (t.bytes > kMaxGeneratedTensorBytes)
      return InvalidArgument("gen-model: tensor '" + t.name + "' would be " + std::to_string(t.bytes) +
                             " bytes; the generator holds one tensor in memory and allows at most " +
                             std::to_string(kMaxGeneratedTensorBytes) + " (a smaller --hidden)");
    total += t.bytes;
  }
  WP_RETURN_IF_ERROR(CheckFreeSpace(options.out_dir, total));
  std::vector<std::byte> buffer;
  auto fill = [&](const TensorMeta& meta) -> Result<std::span<const std::byte>> {
    buffer.resize(meta.bytes);
    WP_RETURN_IF_ERROR(FillTensor(meta, options.seed, buffer));
    return std::span<const std::byte>(buffer);
  };
  return model_files::WriteShardedCheckpoint(options.out_dir, options.overwrite, tensors, options.shards,
                                             SpecMetadata(spec, options.seed), fill, options.progress);
}

}  // namespace weightport
