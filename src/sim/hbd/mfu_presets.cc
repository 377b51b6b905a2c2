// The MFU model's inputs that are published figures: model presets, the GPU, and each
// architecture's bandwidth per GPU (mfu_model.h).
#include <algorithm>
#include <cmath>

#include "weightport/sim/hbd/cost_model.h"
#include "weightport/sim/hbd/mfu_model.h"

namespace weightport::sim::hbd {

std::vector<std::string> ModelPresetNames() { return {"dense70b", "gpt3-175b", "moe671b"}; }

Result<ModelSpec> ModelPreset(std::string_view name) {
  ModelSpec m;
  m.name = std::string(name);
  if (name == "dense70b") {
    m.source =
        "Llama-3 70B (Meta, 'The Llama 3 Herd of Models', 2024, table 3): 80 layers, model dim 8192, FFN "
        "28672 (SwiGLU), 64 heads, 8 KV heads, vocabulary 128,256, sequences of 8,192; global batch 16M "
        "tokens (2,048 sequences), the batch the paper gives for its 405B (none is given for the 70B)";
    m.layers = m.dense_layers = 80;
    m.hidden = 8192;
    m.ffn = 28672;
    m.mlp_matrices = 3;
    m.heads = 64;
    m.kv_heads = 8;
    m.vocab = 128256;
    m.seq_len = 8192;
    m.global_batch_seqs = 2048;
    return m;
  }
  if (name == "gpt3-175b") {
    m.source =
        "GPT-3 175B (Brown et al., 'Language Models are Few-Shot Learners', 2020, table 2.1): 96 layers, "
        "d_model 12288, FFN 4 x d_model (GELU), 96 heads of 128, context 2,048, batch 3.2M tokens "
        "(1,536 sequences); vocabulary 50,257 (GPT-2's BPE)";
    m.layers = m.dense_layers = 96;
    m.hidden = 12288;
    m.ffn = 4 * 12288;
    m.mlp_matrices = 2;
    m.heads = m.kv_heads = 96;
    m.vocab = 50257;
    m.seq_len = 2048;
    m.global_batch_seqs = 1536;
    return m;
  }
  if (name == "moe671b") {
    m.source =
        "DeepSeek-V3 (DeepSeek-AI, 'DeepSeek-V3 Technical Report', 2024, sec. 4.2): 61 layers, hidden "
        "7168, 128 heads, MLA (query rank 1536, KV rank 512, head dims 128 + 64 rope, values 128: "
        "~187M parameters a layer), the first 3 layers a dense FFN of 18432, then 1 shared + 256 routed "
        "experts of 2048 (SwiGLU), top-8; vocabulary 129,280; sequences of 4,096, batch 15,360 "
        "sequences (the final batch size); 671B parameters, 37B active";
    m.layers = 61;
    m.dense_layers = 3;
    m.hidden = 7168;
    m.ffn = 18432;
    m.mlp_matrices = 3;
    m.heads = m.kv_heads = 128;
    // W_dq 7168x1536 + W_uq 1536x128x192 + W_dkv 7168x576 + W_ukv 512x128x256 + W_o 128x128x7168.
    m.attn_params_per_layer =
        7168.0 * 1536 + 1536.0 * 128 * 192 + 7168.0 * 576 + 512.0 * 128 * 256 + 128.0 * 128 * 7168;
    m.attn_dim = 128 * (192 + 128) / 2;  // QK^T over 192 per head, AV over 128
    m.vocab = 129280;
    m.seq_len = 4096;
    m.global_batch_seqs = 15360;
    m.experts = 256;
    m.top_k = 8;
    m.shared_experts = 1;
    m.expert_ffn = 2048;
    return m;
  }
  std::string known;
  for (const std::string& n : ModelPresetNames()) known += (known.empty() ? "" : ", ") + n;
  return NotFound("unknown model '" + std::string(name) + "' (known: " + known + ")");
}

GpuSpec DefaultGpu() {
  GpuSpec g;
  g.name = "H100 SXM";
  // NVIDIA H100 Tensor Core GPU datasheet: BF16 1,979 TFLOP/s with sparsity, half of it dense.
  g.peak_flops = 989.4e12;
  g.hbm_bytes = 80.0 * (1ull << 30);  // 80 GB HBM3 (the datasheet's figure, taken as GiB)
  // Assumption: large bf16 GEMMs reach ~70% of the dense peak on an H100 SXM (cuBLAS runs of
  // ~650-750 TFLOP/s); every architecture gets the same.
  g.efficiency = 0.7;
  return g;
}

Result<MfuFabric> ArchFabric(const ArchSpec& arch) {
  WP_ASSIGN_OR_RETURN(ArchCost cost, CostPerGpu(arch, DefaultCostParams()));
  MfuFabric f;
  f.hbd_gbps = cost.hbd_tbps_per_gpu * 1000;
  // configs/hbd-cost.json "dcn": one 400G ConnectX-7 NIC per GPU for every architecture.
  f.dcn_gbps = kDcnGbpsPerGpu;
  // Assumption: NCCL-style collectives reach ~80% of the link rate on large messages.
  f.comm_efficiency = 0.8;
  switch (arch.kind) {
    case ArchKind::kDgx:
      f.max_tp = arch.gpus_per_node;
      break;
    case ArchKind::kNvl:
    case ArchKind::kTpuV4:
      f.max_tp = arch.domain_gpus;
      break;
    case ArchKind::kInfiniteHbd:
      f.max_tp = kMaxRingTp;
      break;
  }
  return f;
}

int HbdGroupLimit(const ArchSpec& arch, int tp) {
  if (tp < 1) return 0;
  switch (arch.kind) {
    case ArchKind::kDgx:
      return arch.gpus_per_node;
    case ArchKind::kNvl:
    case ArchKind::kTpuV4:
      return arch.domain_gpus / tp * tp;
    case ArchKind::kInfiniteHbd:
      return kMaxRingTp / tp * tp;
  }
  return 0;
}

namespace {

// Mean distance between two points of a ring of d positions with wrap-around (0 included).
double MeanWrap(int d) {
  double sum = 0;
  for (int x = 0; x < d; ++x) sum += std::min(x, d - x);
  return d > 0 ? sum / d : 0;
}

}  // namespace

double AllToAllHops(const ArchSpec& arch, int ep) {
  if (ep <= 1) return 1;
  switch (arch.kind) {
    case ArchKind::kDgx:
    case ArchKind::kNvl:
      return 1;  // one switch hop
    case ArchKind::kInfiniteHbd: {
      const int r = (ep + arch.gpus_per_node - 1) / arch.gpus_per_node;  // ring nodes
      if (r <= 2) return 1;
      double sum = 0;
      for (int d = 1; d < r; ++d) sum += std::min(d, r - d);
      return std::max(1.0, sum / (r - 1));
    }
    case ArchKind::kTpuV4: {
      // The EP chips as a torus slice of the 4x4x4 cube: double the shortest side while ep allows.
      int dims[3] = {1, 1, 1};
      int rest = ep;
      while (rest > 1) {
        int* d = std::min_element(dims, dims + 3);
        if (rest % 2 == 0 && *d < 4) {
          *d *= 2;
          rest /= 2;
        } else {
          *d *= rest;
          rest = 1;
        }
      }
      return std::max(1.0, MeanWrap(dims[0]) + MeanWrap(dims[1]) + MeanWrap(dims[2]));
    }
  }
  return 1;
}

}  // namespace weightport::sim::hbd
