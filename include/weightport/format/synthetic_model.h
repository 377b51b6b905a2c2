// Synthetic models: real sharded safetensors checkpoints with the tensor names and shapes of real
// architectures (a Llama-style dense model and a DeepSeek/Qwen-style MoE with routed and shared
// experts), filled deterministically from a seed with weight-like values. Used by the demo, the
// tests and the benchmarks, so that nothing depends on downloading a model.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "weightport/core/dtype.h"
#include "weightport/core/status.h"
#include "weightport/core/tensor_meta.h"

namespace weightport {

enum class ModelArch { kDense, kMoe };

Result<ModelArch> ParseModelArch(std::string_view name);  // "dense" | "moe"
std::string_view ModelArchName(ModelArch arch);

struct ModelSpec {
  std::string preset;  // "tiny", "small", "1b" or "custom"
  ModelArch arch = ModelArch::kDense;
  int layers = 0;
  int hidden = 0;
  int intermediate = 0;  // dense MLP width
  int heads = 0;
  int kv_heads = 0;
  int head_dim = 0;
  int vocab = 0;
  int experts = 0;           // MoE: routed experts per layer
  int moe_intermediate = 0;  // MoE: width of each expert
  int shared_experts = 0;    // MoE: always-on experts per layer
  DType dtype = DType::kBF16;
};

// Names accepted by PresetSpec.
std::vector<std::string> PresetNames();
// The preset's spec for an architecture. Sizes in bf16: tiny ~50 MB, small ~500 MB, 1b ~2.5 GB.
Result<ModelSpec> PresetSpec(std::string_view preset, ModelArch arch);

struct SpecOverrides {
  std::optional<int> layers, hidden, experts;
};
// Applies overrides; a new hidden size rescales the widths and head counts with it.
Result<ModelSpec> ApplyOverrides(ModelSpec spec, const SpecOverrides& overrides);

// Tensor names and shapes, in Hugging Face Llama / DeepSeek-MoE naming, in layer order.
std::vector<TensorMeta> ModelTensors(const ModelSpec& spec);
uint64_t ModelBytes(const ModelSpec& spec);

// Fills `out` (meta.bytes long) with the tensor's deterministic content for `seed`: values drawn
// like trained weights (near-normal around 0 for projections, around 1 for norm scales), converted
// to the tensor's dtype with round-to-nearest-even. The same (seed, name, shape, dtype) always
// gives the same bytes. Supported dtypes: f32, f16, bf16.
Status FillTensor(const TensorMeta& meta, uint64_t seed, std::span<std::byte> out);

// Progress callback: bytes done, bytes total.
using ProgressFn = std::function<void(uint64_t done, uint64_t total)>;

struct GenerateOptions {
  std::string out_dir;
  uint64_t seed = 0;
  int shards = 1;
  bool overwrite = false;  // replace checkpoint files already in out_dir
  ProgressFn progress;     // may be empty
};

// Writes the checkpoint: one file model.safetensors, or `shards` files with balanced sizes plus
// model.safetensors.index.json. Creates out_dir if needed; refuses to overwrite existing
// checkpoint files there unless `overwrite`. Writes beside out_dir and swaps the new checkpoint in
// whole once it is complete (ReplaceCheckpointDir, checkpoint_dir.h), as PerturbModel does.
Status GenerateModel(const ModelSpec& spec, const GenerateOptions& options);

struct PerturbOptions {
  std::string from_dir;
  std::string out_dir;
  double fraction = 0.01;     // of all elements, in [0, 1]
  uint64_t block = 1u << 19;  // changed elements come in runs of this many (1 = scattered)
  uint64_t seed = 1;
  bool overwrite = false;
  int shards = 0;  // 0: the source's files, names and per-file metadata; N: N balanced shards
  ProgressFn progress;
};

struct PerturbReport {
  uint64_t elements_total = 0;
  uint64_t elements_changed = 0;
};

// The next "training step" of weights held in memory: `tensors` laid out back to back in `flat`
// (Manifest offsets). Changes exactly round(fraction x E) floating-point elements, in runs of
// `block`, as PerturbModel does.
Result<PerturbReport> PerturbInMemory(std::span<const TensorMeta> tensors, std::span<std::byte> flat,
                                      double fraction, uint64_t block = 1u << 19, uint64_t seed = 1);

// Writes the next "training step" of a checkpoint: the same files, names, shapes and metadata
// (with weightport.step incremented; with `shards`, that many files as GenerateModel writes them), where
// exactly round(fraction x E) of the E floating-point elements of the model take a new value that differs in
// its bits (old value plus a small step). Changes come in runs of `block` elements (aligned within each
// tensor) spread at random over the whole model, so they stay local the way chunked delta transfers see them;
// block = 1 scatters them. The default run, 2^19 elements, is 1 MiB of bf16: one default manifest chunk.
Result<PerturbReport> PerturbModel(const PerturbOptions& options);

}  // namespace weightport
