#include "weightport/sim/hbd/mfu_model.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "weightport/sim/hbd/cluster_eval.h"
#include "weightport/sim/hbd/tp_placement.h"

namespace weightport::sim::hbd {
namespace {

std::string ThreeDigits(double v) {
  char text[32];
  std::snprintf(text, sizeof text, "%.3g", v);
  return text;
}

// What EvaluateStep needs of the model, computed once per search.
struct Derived {
  ModelCounts counts;
  int moe_layers = 0;
  double h = 0, s = 0, a = 0, vh = 0;
  double per_layer_active = 0;   // active layer parameters / L
  double tp_collectives = 0;     // per layer, mean over layers, selective recompute
  double act_selective_tp1 = 0;  // bytes per token and layer at TP 1, mean over layers
  double act_max_layer_tp1 = 0;  // the largest layer's
};

Derived Derive(const ModelSpec& m, const ModelCounts& c) {
  Derived d;
  d.counts = c;
  d.moe_layers = m.layers - m.dense_layers;
  d.h = static_cast<double>(m.hidden);
  d.s = static_cast<double>(m.seq_len);
  d.a = static_cast<double>(m.attn_dim > 0 ? m.attn_dim : m.hidden);
  d.vh = static_cast<double>(m.vocab) * d.h;
  d.per_layer_active = c.active_layer_params / m.layers;
  const double moe_collectives = 4 + (m.shared_experts > 0 ? 4 : 0);
  d.tp_collectives = (m.dense_layers * 8.0 + d.moe_layers * moe_collectives) / m.layers;
  const double dense_act = 18 * d.h + 2.0 * m.mlp_matrices * m.ffn;
  const double moe_act = 18 * d.h + 2.0 * m.mlp_matrices * m.expert_ffn * (m.top_k + m.shared_experts);
  d.act_selective_tp1 = (m.dense_layers * dense_act + d.moe_layers * moe_act) / m.layers;
  d.act_max_layer_tp1 = std::max(m.dense_layers > 0 ? dense_act : 0, d.moe_layers > 0 ? moe_act : 0);
  return d;
}

enum class Verdict { kOk, kInvalid, kMemory };

// The step of one layout, without building messages (the search evaluates ~10^6 of them).
Verdict Step(const ModelSpec& m, const Derived& d, const GpuSpec& gpu, const ArchSpec& arch,
             const MfuFabric& f, const ParallelConfig& c, double counted_gpus, StepBreakdown* out) {
  if (c.tp < 1 || c.pp < 1 || c.dp < 1 || c.ep < 1 || m.heads % c.tp != 0 || c.pp > m.layers ||
      c.dp > m.global_batch_seqs || c.tp > f.max_tp)
    return Verdict::kInvalid;
  if (m.experts == 0 ? c.ep != 1
                     : (m.experts % c.ep != 0 || (static_cast<int64_t>(c.tp) * c.dp) % c.ep != 0 ||
                        (c.ep % c.tp != 0 && c.tp % c.ep != 0)))
    return Verdict::kInvalid;
  StepBreakdown& r = *out;
  r = StepBreakdown{};
  const double tp = c.tp, dp = c.dp, ep = c.ep, L = m.layers;
  const double mb = static_cast<double>(m.global_batch_seqs / c.dp);  // floor: at most the batch
  const double n = std::ceil(L / c.pp);
  const double T = d.s;  // one sequence per microbatch
  const double hbd = f.hbd_gbps * 1e9 / 8 * f.comm_efficiency, dcn = f.dcn_gbps * 1e9 / 8 * f.comm_efficiency;
  // Compute: forward and backward FLOPs of a stage's microbatch, with recompute.
  const double fwd_layer = 2 * d.per_layer_active + 4 * d.s * d.a;
  double bwd_layer = 4 * d.per_layer_active + 8 * d.s * d.a + 4 * d.s * d.a;  // selective
  if (c.full_recompute) bwd_layer = 4 * d.per_layer_active + 8 * d.s * d.a + fwd_layer;
  const double rate = tp * gpu.peak_flops * gpu.efficiency;
  const double t_fwd = T * (n * fwd_layer + 2 * d.vh) / rate;
  const double t_bwd = T * (n * bwd_layer + 4 * d.vh) / rate;
  const double t_c = t_fwd + t_bwd;
  // TP / SP collectives on the HBD.
  const double collectives = d.tp_collectives * (c.full_recompute ? 1.5 : 1);
  const double t_tp = c.tp > 1 ? n * collectives * T * d.h * 2 * (tp - 1) / tp / hbd : 0;
  // MoE all-to-all.
  double t_a2a = 0;
  r.a2a_on_hbd = true;
  if (d.moe_layers > 0 && c.ep > 1) {
    r.a2a_on_hbd = c.ep <= HbdGroupLimit(arch, c.tp);
    const double bw = r.a2a_on_hbd ? hbd : dcn;
    const double hops = r.a2a_on_hbd ? AllToAllHops(arch, c.ep) : 1;
    const double per = T / tp * m.top_k * d.h * 2 * (ep - 1) / ep;
    t_a2a = n * (d.moe_layers / L) * (c.full_recompute ? 6 : 4) * per * hops / bw;
  }
  const double t_pp = c.pp > 1 ? 2 * T * d.h * 2 / tp / dcn : 0;
  const double t_mb = t_c + t_tp + t_a2a + t_pp;
  // Parameters per GPU and the DP traffic.
  const double dense_gpu =
      n / L * (d.counts.layer_params - d.counts.expert_params) / tp + (c.pp == 1 ? 2 : 1) * d.vh / tp;
  const double expert_gpu = n / L * d.counts.expert_params / ep;
  const double edp = tp * dp / ep;
  const double dp_bytes = 2 * (dense_gpu * (dp - 1) / dp + (edp > 1 ? expert_gpu * (edp - 1) / edp : 0));
  const double t_rs = dp_bytes / dcn, t_ag = dp_bytes / dcn;
  // Memory of the first stage.
  const double in_flight = std::min<double>(c.pp, mb);
  double act = in_flight * n * T * d.act_selective_tp1 / tp;
  if (c.full_recompute) act = in_flight * n * T * 2 * d.h / tp + T * d.act_max_layer_tp1 / tp;
  const double logits = 4.0 * m.vocab * T / tp;
  r.memory_bytes = dense_gpu * (6 + 12 / dp) + expert_gpu * (6 + 12 / edp) + act + logits;
  if (r.memory_bytes > gpu.hbm_bytes * kUsableHbmFraction) return Verdict::kMemory;
  r.microbatches = static_cast<int>(mb);
  r.compute_s = mb * t_c;
  r.tp_s = mb * t_tp;
  r.a2a_s = mb * t_a2a;
  r.pp_s = mb * t_pp;
  r.bubble_s = (c.pp - 1) * t_mb;
  r.dp_s = t_rs + t_ag;
  r.dp_exposed_s = std::max(0.0, t_rs - t_bwd) + std::max(0.0, t_ag - t_fwd);
  r.step_s = (mb + c.pp - 1) * t_mb + r.dp_exposed_s;
  r.model_flops = mb * dp * d.s * d.counts.model_flops_per_token;
  r.mfu = r.model_flops / (r.step_s * counted_gpus * gpu.peak_flops);
  return Verdict::kOk;
}

Status CheckGpu(const GpuSpec& g) {
  if (!(g.peak_flops > 0) || !(g.hbm_bytes > 0) || !(g.efficiency > 0 && g.efficiency <= 1))
    return InvalidArgument("GPU " + g.name + ": peak and HBM must be > 0, efficiency in (0, 1]");
  return Status::Ok();
}

// Nodes of `arch` in `gpus` GPUs: whole domains where it has them (as hbd compare).
int ClusterNodes(const ArchSpec& a, int gpus) {
  const int unit = a.domain_gpus > 0 ? a.domain_gpus : a.gpus_per_node;
  return gpus / unit * unit / a.gpus_per_node;
}

std::vector<int> Divisors(int64_t v, int64_t limit) {
  std::vector<int> out;
  for (int64_t i = 1; i <= std::min(v, limit); ++i)
    if (v % i == 0) out.push_back(static_cast<int>(i));
  return out;
}

// DP sizes worth trying: the most the TP groups allow, rounded down to multiples of 1, 2, 4, ...
// 1024 (an EP group must divide TP x DP). Fewer replicas leave GPUs idle that MFU counts.
std::vector<int> DpSizes(int most) {
  std::vector<int> out;
  for (int unit = 1; unit <= 1024 && unit <= most; unit *= 2)
    if (out.empty() || out.back() != most / unit * unit) out.push_back(most / unit * unit);
  return out;
}

}  // namespace

Result<ModelCounts> CountModel(const ModelSpec& m) {
  if (m.layers < 1 || m.hidden < 1 || m.ffn < 0 || m.heads < 1 || m.vocab < 1 || m.seq_len < 1 ||
      m.global_batch_seqs < 1 || m.mlp_matrices < 1)
    return InvalidArgument("model " + m.name + ": layers, hidden, heads, vocab, seq_len, batch must be >= 1");
  if (m.dense_layers < 0 || m.dense_layers > m.layers || (m.experts == 0) != (m.dense_layers == m.layers))
    return InvalidArgument("model " + m.name +
                           ": dense layers must be all layers exactly when it has no experts");
  if (m.experts > 0 && (m.top_k < 1 || m.top_k > m.experts || m.expert_ffn < 1 || m.shared_experts < 0))
    return InvalidArgument("model " + m.name + ": top-k must be in [1, experts] and the expert FFN >= 1");
  const double h = static_cast<double>(m.hidden), M = m.mlp_matrices;
  const int kv = m.kv_heads > 0 ? m.kv_heads : m.heads;
  const double attn =
      m.attn_params_per_layer > 0 ? m.attn_params_per_layer : 2 * h * h + 2 * h * kv * (h / m.heads);
  const int moe = m.layers - m.dense_layers;
  const double expert = M * h * static_cast<double>(m.expert_ffn), router = h * m.experts;
  ModelCounts c;
  c.expert_params = moe * m.experts * expert;
  c.layer_params = m.layers * attn + m.dense_layers * M * h * static_cast<double>(m.ffn) +
                   moe * ((m.experts + m.shared_experts) * expert + router);
  c.active_layer_params = m.layers * attn + m.dense_layers * M * h * static_cast<double>(m.ffn) +
                          moe * ((m.top_k + m.shared_experts) * expert + router);
  const double vh = static_cast<double>(m.vocab) * h;
  c.total_params = c.layer_params + 2 * vh;
  const double a = static_cast<double>(m.attn_dim > 0 ? m.attn_dim : m.hidden);
  c.model_flops_per_token = 6 * (c.active_layer_params + vh) + 12.0 * m.layers * m.seq_len * a;
  return c;
}

Result<StepBreakdown> EvaluateStep(const ModelSpec& model, const GpuSpec& gpu, const ArchSpec& arch,
                                   const MfuFabric& fabric, const ParallelConfig& c, double counted_gpus) {
  WP_ASSIGN_OR_RETURN(ModelCounts counts, CountModel(model));
  WP_RETURN_IF_ERROR(CheckGpu(gpu));
  if (!(counted_gpus >= static_cast<double>(c.tp) * c.pp * c.dp))
    return InvalidArgument("counted GPUs " + ThreeDigits(counted_gpus) + " are fewer than TP x PP x DP");
  const std::string layout = "TP " + std::to_string(c.tp) + " PP " + std::to_string(c.pp) + " DP " +
                             std::to_string(c.dp) + " EP " + std::to_string(c.ep);
  StepBreakdown r;
  switch (Step(model, Derive(model, counts), gpu, arch, fabric, c, counted_gpus, &r)) {
    case Verdict::kOk:
      return r;
    case Verdict::kInvalid:
      return InvalidArgument(model.name + " on " + arch.name + ": " + layout +
                             " does not divide the model (TP must divide the heads and be at most " +
                             std::to_string(fabric.max_tp) +
                             ", DP at most the batch, EP the experts and TP x DP, PP at most the layers)");
    case Verdict::kMemory:
      return ResourceExhausted(model.name + " on " + arch.name + ": " + layout + " needs " +
                               ThreeDigits(r.memory_bytes / 1e9) + " GB per GPU, over " +
                               ThreeDigits(gpu.hbm_bytes * kUsableHbmFraction / 1e9) + " GB usable of HBM");
  }
  return Internal("unreachable");
}

Result<MfuPoint> BestMfu(const ModelSpec& model, const GpuSpec& gpu, const ArchSpec& arch,
                         const MfuFabric& fabric, int gpus, const MfuSearch& search) {
  WP_ASSIGN_OR_RETURN(ModelCounts counts, CountModel(model));
  WP_RETURN_IF_ERROR(CheckGpu(gpu));
  if (!(search.fault_ratio >= 0 && search.fault_ratio < 1))
    return InvalidArgument("fault ratio must be in [0, 1) (got " + ThreeDigits(search.fault_ratio) + ")");
  if (search.samples < 1 || search.max_pp < 1) return InvalidArgument("samples and max PP must be >= 1");
  const Derived d = Derive(model, counts);
  MfuPoint p;
  const int nodes = ClusterNodes(arch, gpus);
  p.cluster_gpus = nodes * arch.gpus_per_node;
  p.counted_gpus = p.cluster_gpus;
  if (nodes == 0) {
    p.why_none = std::to_string(gpus) + " GPUs hold no whole " + arch.name + " domain";
    return p;
  }
  std::vector<int> eps = {1};
  for (int e = 2; e <= model.experts; e *= 2)
    if (model.experts % e == 0) eps.push_back(e);
  bool placed_any = false;
  for (int tp : Divisors(model.heads, std::min(fabric.max_tp, p.cluster_gpus))) {
    double usable = 0, counted = p.cluster_gpus, waste = 0, ratio = 0;
    if (search.fault_ratio == 0) {
      auto placed = PlaceTp(arch, std::vector<char>(nodes, 0), tp);
      if (!placed.ok()) continue;  // a TP the architecture's nodes cannot hold
      usable = placed->usable_gpus;
      waste = placed->waste_ratio();
    } else {
      EvalOptions eval;
      eval.tp = tp;
      auto m = EvaluateAtFaultRatio(arch, nodes, search.fault_ratio, search.samples, search.seed, eval);
      if (!m.ok()) continue;
      ratio = m->mean_fault_ratio;
      counted = p.cluster_gpus * (1 - ratio);
      waste = m->waste.mean;
      usable = counted * (1 - waste);
    }
    const int groups = static_cast<int>(std::floor(usable / tp + 1e-9));
    if (groups < 1) continue;
    placed_any = true;
    for (int pp = 1; pp <= std::min(model.layers, search.max_pp); ++pp) {
      for (int dp : DpSizes(std::min<int64_t>(groups / pp, model.global_batch_seqs))) {
        for (int ep : eps) {
          for (bool full : {false, true}) {
            const ParallelConfig c{tp, pp, dp, ep, full};
            StepBreakdown s;
            if (Step(model, d, gpu, arch, fabric, c, counted, &s) != Verdict::kOk) continue;
            if (p.found && s.mfu <= p.step.mfu) continue;
            p.found = true;
            p.config = c;
            p.step = s;
            p.counted_gpus = counted;
            p.fault_ratio = ratio;
            p.waste = waste;
          }
        }
      }
    }
  }
  if (!p.found)
    p.why_none = placed_any ? "no TP x PP x DP layout fits " +
                                  ThreeDigits(gpu.hbm_bytes * kUsableHbmFraction / 1e9) + " GB of HBM"
                            : "no TP size dividing the heads places on " + arch.name;
  return p;
}

}  // namespace weightport::sim::hbd
