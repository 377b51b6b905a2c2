// A closed-form training-step model: model FLOPs utilisation (MFU) of a dense or MoE transformer
// per HBD architecture, at the best memory-feasible TP x PP x DP (x EP) layout, with and without
// node faults. Every architecture has the same accelerator (GpuSpec): the comparison is of the
// interconnects.
//
// Notation: L layers (L_moe of them MoE), h hidden, f dense FFN, f_e expert FFN, M matrices per
// MLP (3 gated, 2 plain), k routed experts per token (top-k), S shared experts, V vocabulary, s
// sequence length, a attention width (heads x head dim; for MLA the mean of the QK and V widths),
// B global batch in sequences, one sequence per microbatch (T = s tokens), m = floor(B / DP) microbatches
// per replica (a step's batch is DP m <= B sequences), n = ceil(L / PP) layers per pipeline stage, peak the
// GPU's dense bf16 FLOP/s, eff the stated compute efficiency, bw_hbd / bw_dcn per-GPU bandwidth each way x
// the stated collective efficiency.
//
// FLOPs (PaLM's convention, Chowdhery et al. 2022, app. B): model FLOPs per token = 6 N_active +
// 12 L s a, N_active = active layer parameters + the output head (V h; the input embedding is a
// lookup). The time counts the same FLOPs plus recompute: selective (Korthikanti et al. 2022)
// repeats the attention core's forward, + 4 L s a per token; full repeats the whole forward,
// + 2 N_layers + 4 L s a. A stage's FLOPs per microbatch = T x (n / L x the layers' FLOPs per
// token + the head's 6 V h): the last stage is taken as the slowest (it holds the head).
//   compute per microbatch  t_c = stage FLOPs / (TP x peak x eff)
//
// TP with sequence parallelism (Megatron-LM): per layer and microbatch, an all-gather and a
// reduce-scatter around the attention block and again around the MLP, forward and backward: 8
// collectives (a MoE layer: 4, plus 4 when it has shared experts, which are TP-split; the routed
// experts are not). Full recompute repeats the forward's 4. Each moves T h 2 (TP-1)/TP bytes per
// GPU on the HBD (a ring collective; a switched fabric, ring or torus carries it at bw_hbd).
// Exposed: none of it is overlapped with compute (Megatron-LM's default).
//   t_tp = n x collectives per layer x T h 2 (TP-1)/TP / bw_hbd
//
// MoE: experts are split over EP GPUs of one stage (EP divides TP x DP, and EP and TP divide one
// another); dispatch and combine, forward and backward (full recompute: + the forward's 2), each
// send T/TP x k x h x 2 x (EP-1)/EP bytes per GPU per MoE layer. On the HBD when the EP group fits
// one domain (MfuFabric::HbdGroupLimit), else on the DCN. On a switched HBD at bw_hbd; on the ring
// and the TPU torus each byte crosses the mean hop count of the group (ring of r nodes: the mean
// of min(d, r-d) over d = 1..r-1; torus: the sum over dimensions of the mean wrap distance), and
// the time is multiplied by it. Routing is balanced; no dedup of a token's copies. Exposed.
//   t_a2a = n x (L_moe / L) x a2a per layer x T/TP k h 2 (EP-1)/EP x hops / bw
//
// Pipeline (1F1B): stages send T h 2 / TP bytes per GPU (SP-sharded) forward and back per
// microbatch on the DCN, exposed (t_pp). With t_mb = t_c + t_tp + t_a2a + t_pp,
//   step pipeline = (m + PP - 1) t_mb; bubble = (PP - 1) t_mb.
//
// DP (ZeRO-1 / distributed optimizer): bf16 gradients reduce-scattered and bf16 parameters
// all-gathered over the DCN, ring: 2 bytes x P_gpu x (DP-1)/DP each way (expert parameters over
// their own data-parallel size EDP = TP x DP / EP). The reduce-scatter overlaps the last
// microbatch's backward and the all-gather the first microbatch's forward (of the first stage,
// the last to finish); the rest is exposed.
//   step = (m + PP - 1) t_mb + max(0, t_rs - t_bwd) + max(0, t_ag - t_fwd)
//
// Memory per GPU (the first stage, the most microbatches in flight): parameters P_gpu = n / L x
// (non-expert layer parameters / TP + routed expert parameters / EP) + V h / TP (one embedding or
// head per stage; both at PP 1), at 2 bytes bf16 weights + 4 bytes fp32 gradients + 12 bytes fp32
// master and Adam moments / (E)DP (ZeRO-1). Activations: min(PP, m) microbatches x n layers x T x
// per token and layer, with SP, (18 h + 2 M f) / TP (selective recompute; Korthikanti's 34 h for
// GPT-3's layer), a MoE layer 2 M f_e (k + S) for 2 M f; full recompute keeps each layer's input,
// 2 h / TP, plus one layer's working set. Plus the fp32 logits of a microbatch, 4 V T / TP. The sum
// must fit HBM x kUsableHbmFraction.
//
// MFU = model FLOPs per step (DP m s x per token) / (step x counted GPUs x peak). Counted GPUs: the
// architecture's cluster (whole domains); with faults, its healthy GPUs: GPUs a layout leaves
// idle, or a fault's waste, do no work but count.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "weightport/core/status.h"
#include "weightport/sim/hbd/architecture.h"

namespace weightport::sim::hbd {

struct ModelSpec {
  std::string name, source;
  int layers = 0;
  int dense_layers = 0;  // MoE models: the leading layers with a dense FFN; dense models: all
  int64_t hidden = 0, ffn = 0;
  int mlp_matrices = 3;  // 3 gated (SwiGLU), 2 plain
  int heads = 0, kv_heads = 0;
  double attn_params_per_layer = 0;  // 0: h^2 (Q, O) x 2 + 2 h kv_heads (h / heads) (K, V)
  int64_t attn_dim = 0;              // 0: hidden
  int64_t vocab = 0, seq_len = 0, global_batch_seqs = 0;
  int experts = 0, top_k = 0, shared_experts = 0;  // routed experts, per token, always-on
  int64_t expert_ffn = 0;
};

// dense70b (Llama-3 70B), gpt3-175b (GPT-3), moe671b (DeepSeek-V3); each names its source.
Result<ModelSpec> ModelPreset(std::string_view name);
std::vector<std::string> ModelPresetNames();

struct ModelCounts {
  double layer_params = 0;   // all layers: attention, dense and shared FFNs, routers, experts
  double expert_params = 0;  // routed experts (of layer_params)
  double active_layer_params = 0;
  double total_params = 0;  // layers + input embedding + output head
  double model_flops_per_token = 0;
};
Result<ModelCounts> CountModel(const ModelSpec& model);

struct GpuSpec {
  std::string name;
  double peak_flops = 0;  // dense bf16, per second
  double hbm_bytes = 0;
  double efficiency = 0;  // achieved share of peak on the model's matrix products
};
// H100 SXM at 989 TFLOP/s, 80 GiB, efficiency 0.7 (see the .cc for sources).
GpuSpec DefaultGpu();
inline constexpr double kUsableHbmFraction = 0.9;  // the rest: runtime, NCCL buffers, fragmentation

struct MfuFabric {
  double hbd_gbps = 0;  // per GPU, each way
  double dcn_gbps = 0;
  double comm_efficiency = 0.8;
  int max_tp = 0;  // the largest TP group one HBD holds
};
// HBD bandwidth from the cost model's per-GPU Tb/s (configs/hbd-cost.json); DCN one 400G NIC per
// GPU (the same file's DCN); max TP: DGX 8, NVL its domain, TPUv4 a 64-chip cube, the ring
// kMaxRingTp.
inline constexpr int kMaxRingTp = 64;
inline constexpr double kDcnGbpsPerGpu = 400;
Result<MfuFabric> ArchFabric(const ArchSpec& arch);

// Ranks of a TP x EP layout sit in whole TP groups; the largest EP group one HBD holds at this TP
// (DGX 8, NVL floor(domain / TP) TP groups, TPUv4 64, the ring kMaxRingTp).
int HbdGroupLimit(const ArchSpec& arch, int tp);
// Mean hops a byte of an all-to-all among `ep` GPUs crosses on this HBD (>= 1).
double AllToAllHops(const ArchSpec& arch, int ep);

struct ParallelConfig {
  int tp = 1, pp = 1, dp = 1, ep = 1;
  bool full_recompute = false;
};

struct StepBreakdown {
  int microbatches = 0;
  double compute_s = 0, tp_s = 0, a2a_s = 0, pp_s = 0, bubble_s = 0;
  double dp_s = 0, dp_exposed_s = 0;  // the DP traffic's time on the DCN, and its exposed part
  double step_s = 0;
  bool a2a_on_hbd = true;
  double memory_bytes = 0;
  double model_flops = 0;  // per step
  double mfu = 0;
};

// One layout's step; counted_gpus is MFU's denominator. Errors: a layout that does not divide the
// model (InvalidArgument), one over HBM (ResourceExhausted naming the bytes).
Result<StepBreakdown> EvaluateStep(const ModelSpec& model, const GpuSpec& gpu, const ArchSpec& arch,
                                   const MfuFabric& fabric, const ParallelConfig& config,
                                   double counted_gpus);

struct MfuSearch {
  double fault_ratio = 0;
  int samples = 5;  // fault draws per TP size (EvaluateAtFaultRatio)
  uint64_t seed = 1;
  int max_pp = 64;
};

struct MfuPoint {
  int cluster_gpus = 0;     // whole domains of the requested GPUs
  double counted_gpus = 0;  // healthy GPUs
  double fault_ratio = 0;   // of nodes down, as drawn
  double waste = 0;         // at the chosen TP
  bool found = false;       // no layout fits: why_none says why
  std::string why_none;
  ParallelConfig config;
  StepBreakdown step;
};

// The best-MFU layout of `model` on `gpus` GPUs of `arch`: TP over the divisors of the heads up
// to the HBD's limit that PlaceTp places, PP 1..min(layers, max_pp) (uneven stages allowed), DP
// from min(TP groups placed / PP, B) rounded down to multiples of 1, 2, 4, ... 1024, EP over powers of two
// dividing the experts, selective or full recompute. With a fault ratio the TP groups placed are
// usable GPUs / TP, usable = healthy x (1 - the waste EvaluateAtFaultRatio gives at that TP).
Result<MfuPoint> BestMfu(const ModelSpec& model, const GpuSpec& gpu, const ArchSpec& arch,
                         const MfuFabric& fabric, int gpus, const MfuSearch& search);

}  // namespace weightport::sim::hbd
