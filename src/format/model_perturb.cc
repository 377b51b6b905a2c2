#include <cmath>
#include <cstring>
#include <filesystem>
#include <random>
#include <vector>

#include "float_bits.h"
#include "weightport/format/checkpoint.h"
#include "weightport/format/checkpoint_dir.h"
#include "weightport/format/model_files.h"
#include "weightport/format/safetensors_reader.h"
#include "weightport/format/safetensors_writer.h"
#include "weightport/format/synthetic_model.h"

namespace weightport {
namespace {

namespace fs = std::filesystem;

// Adds a small step to the element at `p` and makes sure its bits change.
void PerturbElement(DType dtype, std::byte* p, float step) {
  switch (dtype) {
    case DType::kF32: {
      float v, w;
      std::memcpy(&v, p, 4);
      w = v + step;
      if (std::memcmp(&w, &v, 4) == 0) w = std::nextafter(v, v + 1.0f);
      if (std::memcmp(&w, &v, 4) == 0) reinterpret_cast<uint8_t*>(&w)[0] ^= 1;  // NaN/inf
      std::memcpy(p, &w, 4);
      return;
    }
    case DType::kF64: {
      double v, w;
      std::memcpy(&v, p, 8);
      w = v + step;
      if (std::memcmp(&w, &v, 8) == 0) reinterpret_cast<uint8_t*>(&w)[0] ^= 1;
      std::memcpy(p, &w, 8);
      return;
    }
    case DType::kF16:
    case DType::kBF16: {
      uint16_t h;
      std::memcpy(&h, p, 2);
      const bool bf = dtype == DType::kBF16;
      const float v = bf ? float_bits::Bf16ToF32(h) : float_bits::F16ToF32(h);
      uint16_t n = bf ? float_bits::F32ToBf16(v + step) : float_bits::F32ToF16(v + step);
      if (n == h) n ^= 1;  // step below half an ulp: move one ulp
      std::memcpy(p, &n, 2);
      return;
    }
    default:  // 8-bit floats: flip the lowest mantissa bit (a one-ulp step).
      *p ^= std::byte{1};
      return;
  }
}

// Chooses which runs of elements to change, streaming over the model in order, so that exactly
// `need` of `total` elements change and each run of `block` elements is chosen with about the same
// probability (selection sampling, Knuth's algorithm S, at run granularity).
class RunSampler {
 public:
  RunSampler(uint64_t need, uint64_t total, uint64_t seed) : need_(need), unvisited_(total), rng_(seed) {}

  // The number of elements to change at the start of the next run of `len` elements.
  uint64_t Next(uint64_t len) {
    uint64_t take = 0;
    if (need_ > 0) {
      // Forced when skipping this run would leave fewer elements than still needed; otherwise
      // chosen with probability need/unvisited.
      const bool chosen = need_ > unvisited_ - len ||
                          std::uniform_int_distribution<uint64_t>(0, unvisited_ - 1)(rng_) < need_;
      if (chosen) take = std::min(len, need_);
    }
    need_ -= take;
    unvisited_ -= len;
    return take;
  }
  std::mt19937_64& rng() { return rng_; }

 private:
  uint64_t need_, unvisited_;
  std::mt19937_64 rng_;
};

uint64_t PerturbTensor(const TensorMeta& meta, std::span<std::byte> data, uint64_t block,
                       RunSampler& sampler) {
  const uint64_t n = static_cast<uint64_t>(meta.num_elements());
  const size_t esize = DTypeSize(meta.dtype);
  std::normal_distribution<float> step(0.0f, 0.002f);
  uint64_t changed = 0;
  for (uint64_t begin = 0; begin < n; begin += block) {
    const uint64_t take = sampler.Next(std::min(block, n - begin));
    for (uint64_t i = begin; i < begin + take; ++i)
      PerturbElement(meta.dtype, data.data() + i * esize, step(sampler.rng()));
    changed += take;
  }
  return changed;
}

// Metadata of the next step: weightport.step incremented where present.
std::map<std::string, std::string> NextStepMetadata(std::map<std::string, std::string> metadata) {
  if (auto it = metadata.find("weightport.step"); it != metadata.end())
    it->second = std::to_string(std::strtoull(it->second.c_str(), nullptr, 10) + 1);
  return metadata;
}

Status CheckPerturbArgs(double fraction, uint64_t block) {
  if (!(fraction >= 0.0 && fraction <= 1.0))
    return InvalidArgument("--perturb must be a fraction in [0, 1], got " + std::to_string(fraction));
  if (block == 0) return InvalidArgument("--perturb-block must be at least 1");
  return Status::Ok();
}

}  // namespace

Result<PerturbReport> PerturbInMemory(std::span<const TensorMeta> tensors, std::span<std::byte> flat,
                                      double fraction, uint64_t block, uint64_t seed) {
  WP_RETURN_IF_ERROR(CheckPerturbArgs(fraction, block));
  PerturbReport report;
  uint64_t bytes = 0;
  for (const TensorMeta& t : tensors) {
    bytes += t.bytes;
    if (IsFloatingPoint(t.dtype)) report.elements_total += static_cast<uint64_t>(t.num_elements());
  }
  if (bytes != flat.size())
    return InvalidArgument("perturb: the tensors hold " + std::to_string(bytes) + " bytes, the buffer " +
                           std::to_string(flat.size()));
  RunSampler sampler(
      static_cast<uint64_t>(std::llround(fraction * static_cast<double>(report.elements_total))),
      report.elements_total, seed);
  uint64_t offset = 0;
  for (const TensorMeta& t : tensors) {
    if (IsFloatingPoint(t.dtype))
      report.elements_changed += PerturbTensor(t, flat.subspan(offset, t.bytes), block, sampler);
    offset += t.bytes;
  }
  return report;
}

Result<PerturbReport> PerturbModel(const PerturbOptions& o) {
  WP_RETURN_IF_ERROR(CheckPerturbArgs(o.fraction, o.block));
  if (o.shards < 0)
    return InvalidArgument("gen-model: --shards must be at least 1, got " + std::to_string(o.shards));
  if (fs::exists(o.out_dir) && fs::exists(o.from_dir) && fs::equivalent(o.out_dir, o.from_dir))
    return InvalidArgument("gen-model: --out must differ from --from (" + o.out_dir + ")");
  WP_ASSIGN_OR_RETURN(Checkpoint source, Checkpoint::Open(o.from_dir));

  PerturbReport report;
  for (const auto& t : source.tensors())
    if (IsFloatingPoint(t.meta().dtype))
      report.elements_total += static_cast<uint64_t>(t.meta().num_elements());
  RunSampler sampler(
      static_cast<uint64_t>(std::llround(o.fraction * static_cast<double>(report.elements_total))),
      report.elements_total, o.seed);
  // The next step's bytes of each tensor, asked for in model order (the sampler's order).
  std::vector<std::byte> buffer;
  auto next_step = [&](const SafetensorsFile& file,
                       const SafetensorsTensor& t) -> std::span<const std::byte> {
    auto src = file.Data(t);
    if (!IsFloatingPoint(t.meta.dtype)) return src;
    buffer.assign(src.begin(), src.end());
    report.elements_changed += PerturbTensor(t.meta, buffer, o.block, sampler);
    return buffer;
  };

  if (o.shards > 0) {  // re-sharded: one metadata map (the first shard's) for every file
    std::vector<TensorMeta> metas;
    for (const auto& t : source.tensors()) metas.push_back(t.meta());
    auto view = [&](const TensorMeta& meta) -> Result<std::span<const std::byte>> {
      const CheckpointTensor* t = source.Find(meta.name);
      return next_step(source.files()[t->file], *t->entry);
    };
    WP_RETURN_IF_ERROR(model_files::WriteShardedCheckpoint(
        o.out_dir, o.overwrite, metas, o.shards, NextStepMetadata(source.metadata()), view, o.progress));
    return report;
  }

  const uint64_t total = source.total_bytes();
  auto write = [&](const std::string& staging) -> Status {
    uint64_t done = 0;
    for (const SafetensorsFile& file : source.files()) {
      std::vector<TensorMeta> metas;
      for (const auto& t : file.tensors()) metas.push_back(t.meta);
      const std::string out_path = (fs::path(staging) / fs::path(file.path()).filename()).string();
      WP_ASSIGN_OR_RETURN(SafetensorsWriter writer,
                          SafetensorsWriter::Create(out_path, metas, NextStepMetadata(file.metadata())));
      for (const auto& t : file.tensors()) {
        WP_RETURN_IF_ERROR(writer.Append(next_step(file, t)));
        done += t.meta.bytes;
        if (o.progress) o.progress(done, total);
      }
      WP_RETURN_IF_ERROR(writer.Finish());
    }
    const fs::path index = fs::path(source.path()) / kShardIndexFileName;
    if (fs::is_directory(source.path()) && fs::exists(index)) {
      std::error_code ec;
      fs::copy_file(index, fs::path(staging) / kShardIndexFileName, fs::copy_options::overwrite_existing, ec);
      if (ec) return IoError("cannot copy " + index.string() + ": " + ec.message());
    }
    return Status::Ok();
  };
  WP_RETURN_IF_ERROR(ReplaceCheckpointDir(o.out_dir, o.overwrite, write));
  return report;
}

}  // namespace weightport
