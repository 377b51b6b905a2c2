#include "weightport/format/synthetic_model.h"

#include <array>

namespace weightport {
namespace {

int RoundUp(int x, int multiple) { return (x + multiple - 1) / multiple * multiple; }

}  // namespace

Result<ModelArch> ParseModelArch(std::string_view name) {
  if (name == "dense" || name == "llama") return ModelArch::kDense;
  if (name == "moe") return ModelArch::kMoe;
  return InvalidArgument("unknown architecture '" + std::string(name) + "' (expected dense or moe)");
}

std::string_view ModelArchName(ModelArch arch) { return arch == ModelArch::kDense ? "dense" : "moe"; }

std::vector<std::string> PresetNames() { return {"tiny", "small", "1b"}; }

Result<ModelSpec> PresetSpec(std::string_view preset, ModelArch arch) {
  ModelSpec s;
  s.preset = std::string(preset);
  s.arch = arch;
  s.head_dim = 64;
  // Sizes chosen so that bf16 totals land near 50 MB, 500 MB and 2.5 GB for both architectures.
  if (preset == "tiny") {
    s.hidden = 512, s.heads = 8, s.kv_heads = 4, s.vocab = 8192;
    if (arch == ModelArch::kDense)
      s.layers = 6, s.intermediate = 1408;
    else
      s.layers = 3, s.experts = 8, s.moe_intermediate = 384, s.shared_experts = 1;
  } else if (preset == "small") {
    s.hidden = 1024, s.heads = 16, s.kv_heads = 8, s.vocab = 32000;
    if (arch == ModelArch::kDense)
      s.layers = 16, s.intermediate = 2816;
    else
      s.layers = 8, s.experts = 16, s.moe_intermediate = 384, s.shared_experts = 1;
  } else if (preset == "1b") {
    s.hidden = 2048, s.heads = 32, s.kv_heads = 8, s.vocab = 32000;
    if (arch == ModelArch::kDense)
      s.layers = 24, s.intermediate = 5632;
    else
      s.layers = 12, s.experts = 32, s.moe_intermediate = 384, s.shared_experts = 1;
  } else {
    return InvalidArgument("unknown preset '" + std::string(preset) + "' (expected tiny, small or 1b)");
  }
  return s;
}

Result<ModelSpec> ApplyOverrides(ModelSpec spec, const SpecOverrides& o) {
  if (o.layers) {
    if (*o.layers < 1 || *o.layers > 1024) return InvalidArgument("--layers must be in [1, 1024]");
    spec.layers = *o.layers;
  }
  if (o.experts) {
    if (spec.arch != ModelArch::kMoe)
      return InvalidArgument("--experts applies to the moe architecture only");
    if (*o.experts < 1 || *o.experts > 4096) return InvalidArgument("--experts must be in [1, 4096]");
    spec.experts = *o.experts;
  }
  if (o.hidden) {
    if (*o.hidden < spec.head_dim || *o.hidden % spec.head_dim != 0 || *o.hidden > 65536)
      return InvalidArgument("--hidden must be a multiple of " + std::to_string(spec.head_dim) + " in [" +
                             std::to_string(spec.head_dim) + ", 65536]");
    const double scale = static_cast<double>(*o.hidden) / spec.hidden;
    const int kv_ratio = spec.heads / spec.kv_heads;
    spec.hidden = *o.hidden;
    spec.heads = spec.hidden / spec.head_dim;
    spec.kv_heads = std::max(1, spec.heads / kv_ratio);
    if (spec.intermediate) spec.intermediate = RoundUp(static_cast<int>(spec.intermediate * scale), 64);
    if (spec.moe_intermediate)
      spec.moe_intermediate = RoundUp(static_cast<int>(spec.moe_intermediate * scale), 64);
  }
  if (o.layers || o.hidden || o.experts) spec.preset = "custom";
  return spec;
}

std::vector<TensorMeta> ModelTensors(const ModelSpec& s) {
  std::vector<TensorMeta> out;
  auto add = [&](std::string name, Shape shape) {
    // Shapes come from validated specs, so Make cannot fail here.
    out.push_back(*TensorMeta::Make(std::move(name), s.dtype, std::move(shape)));
  };
  const int64_t h = s.hidden, q = int64_t{s.heads} * s.head_dim, kv = int64_t{s.kv_heads} * s.head_dim;
  add("model.embed_tokens.weight", {s.vocab, h});
  for (int i = 0; i < s.layers; ++i) {
    const std::string p = "model.layers." + std::to_string(i) + ".";
    add(p + "input_layernorm.weight", {h});
    add(p + "self_attn.q_proj.weight", {q, h});
    add(p + "self_attn.k_proj.weight", {kv, h});
    add(p + "self_attn.v_proj.weight", {kv, h});
    add(p + "self_attn.o_proj.weight", {h, q});
    add(p + "post_attention_layernorm.weight", {h});
    auto mlp = [&](const std::string& prefix, int64_t width) {
      add(prefix + "gate_proj.weight", {width, h});
      add(prefix + "up_proj.weight", {width, h});
      add(prefix + "down_proj.weight", {h, width});
    };
    if (s.arch == ModelArch::kDense) {
      mlp(p + "mlp.", s.intermediate);
    } else {
      add(p + "mlp.gate.weight", {s.experts, h});  // router
      for (int e = 0; e < s.experts; ++e)
        mlp(p + "mlp.experts." + std::to_string(e) + ".", s.moe_intermediate);
      if (s.shared_experts > 0)
        mlp(p + "mlp.shared_experts.", int64_t{s.moe_intermediate} * s.shared_experts);
    }
  }
  add("model.norm.weight", {h});
  add("lm_head.weight", {s.vocab, h});
  return out;
}

uint64_t ModelBytes(const ModelSpec& spec) {
  uint64_t total = 0;
  for (const auto& t : ModelTensors(spec)) total += t.bytes;
  return total;
}

}  // namespace weightport
