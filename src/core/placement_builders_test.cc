#include "weightport/core/placement_builders.h"
#include "core/core_test_util.h"

#include <gtest/gtest.h>

#include <map>

namespace weightport {
namespace {

using core_test::InSlice;
using core_test::Meta;

struct ModelSpec {
  int layers = 3;
  int64_t hidden = 6, inter = 10, vocab = 11, kv = 4;
  int experts = 0;  // > 0: MoE MLPs with a router and shared experts
  bool bias = false;
};

// HF Llama/MoE-style tensor list with small dims.
std::vector<TensorMeta> Model(const ModelSpec& m) {
  std::vector<TensorMeta> t{Meta("model.embed_tokens.weight", {m.vocab, m.hidden})};
  for (int i = 0; i < m.layers; ++i) {
    const std::string l = "model.layers." + std::to_string(i) + ".";
    t.push_back(Meta(l + "self_attn.q_proj.weight", {m.hidden, m.hidden}));
    if (m.bias) t.push_back(Meta(l + "self_attn.q_proj.bias", {m.hidden}));
    t.push_back(Meta(l + "self_attn.k_proj.weight", {m.kv, m.hidden}));
    t.push_back(Meta(l + "self_attn.v_proj.weight", {m.kv, m.hidden}));
    t.push_back(Meta(l + "self_attn.o_proj.weight", {m.hidden, m.hidden}));
    if (m.bias) t.push_back(Meta(l + "self_attn.o_proj.bias", {m.hidden}));
    auto mlp = [&](const std::string& p) {
      t.push_back(Meta(p + "gate_proj.weight", {m.inter, m.hidden}));
      t.push_back(Meta(p + "up_proj.weight", {m.inter, m.hidden}));
      t.push_back(Meta(p + "down_proj.weight", {m.hidden, m.inter}));
    };
    if (m.experts == 0) {
      mlp(l + "mlp.");
    } else {
      t.push_back(Meta(l + "mlp.gate.weight", {m.experts, m.hidden}));
      for (int e = 0; e < m.experts; ++e) mlp(l + "mlp.experts." + std::to_string(e) + ".");
      mlp(l + "mlp.shared_experts.");
    }
    t.push_back(Meta(l + "input_layernorm.weight", {m.hidden}));
    t.push_back(Meta(l + "post_attention_layernorm.weight", {m.hidden}));
  }
  t.push_back(Meta("model.norm.weight", {m.hidden}));
  t.push_back(Meta("lm_head.weight", {m.vocab, m.hidden}));
  return t;
}

// Per-element check: every element of `tensor` is held `times` times over `ranks` (all when empty).
testing::AssertionResult HeldTimes(const Placement& p, const TensorMeta& t, int times,
                                   std::vector<int> ranks = {}) {
  if (ranks.empty()) ranks = p.ranks();
  for (int64_t e = 0; e < t.num_elements(); ++e) {
    int held = 0;
    for (int r : ranks)
      for (const Shard& s : p.shards(r)) held += s.tensor == t.name && InSlice(e, s.slice, t.shape);
    if (held != times)
      return testing::AssertionFailure()
             << t.name << " element " << e << " held " << held << " times, want " << times;
  }
  return testing::AssertionSuccess();
}

bool IsNorm(const std::string& n) { return n.find("norm") != std::string::npos; }

const Slice* SliceOf(const Placement& p, int rank, const std::string& tensor) {
  for (const Shard& s : p.shards(rank))
    if (s.tensor == tensor) return &s.slice;
  return nullptr;
}

TEST(PlacementBuildersTest, EvenAndChunkSplits) {
  auto even = EvenSplit(151936, 3);
  ASSERT_TRUE(even.ok());
  EXPECT_EQ(*even, (std::vector<SplitRange>{{0, 50646}, {50646, 50645}, {101291, 50645}}));
  EXPECT_EQ(*EvenSplit(2, 4), (std::vector<SplitRange>{{0, 1}, {1, 1}, {2, 0}, {2, 0}}));
  EXPECT_EQ(*ChunkSplit(5, 4), (std::vector<SplitRange>{{0, 2}, {2, 2}, {4, 1}, {5, 0}}));
  EXPECT_EQ(*ChunkSplit(13, 4), (std::vector<SplitRange>{{0, 4}, {4, 4}, {8, 4}, {12, 1}}));
  EXPECT_EQ(*ChunkSplit(6, 4), (std::vector<SplitRange>{{0, 2}, {2, 2}, {4, 2}, {6, 0}}));
  EXPECT_EQ(*ChunkSplit(0, 2), (std::vector<SplitRange>{{0, 0}, {0, 0}}));
  EXPECT_FALSE(EvenSplit(4, 0).ok());
  EXPECT_FALSE(ChunkSplit(-1, 2).ok());
}

TEST(PlacementBuildersTest, GlobAndIndices) {
  EXPECT_TRUE(GlobMatch("*.q_proj.*", "model.layers.0.self_attn.q_proj.weight"));
  EXPECT_FALSE(GlobMatch("*.q_proj.*", "model.layers.0.self_attn.qq_proj.weight"));
  EXPECT_TRUE(GlobMatch("*norm*", "model.norm.weight"));
  EXPECT_TRUE(GlobMatch("lm_head.?eight", "lm_head.weight"));
  EXPECT_TRUE(GlobMatch("*", ""));
  EXPECT_FALSE(GlobMatch("a*b", "acbd"));
  EXPECT_TRUE(GlobMatch("a*b*c", "axxbyybzc"));
  EXPECT_EQ(LayerIndex("model.layers.17.mlp.up_proj.weight"), 17);
  EXPECT_EQ(LayerIndex("layers.2.w"), 2);
  EXPECT_EQ(LayerIndex("model.norm.weight"), -1);
  EXPECT_EQ(LayerIndex("model.sublayers.3.w"), -1);
  EXPECT_EQ(LayerIndex("model.layers.x.w"), -1);
  EXPECT_EQ(ExpertIndex("model.layers.1.mlp.experts.12.down_proj.weight"), 12);
  EXPECT_EQ(ExpertIndex("model.layers.1.mlp.shared_experts.down_proj.weight"), -1);
}

TEST(PlacementBuildersTest, LlamaRules) {
  const auto rules = LlamaTpRules();
  auto kind = [&](const std::string& n) { return MatchTpRule(rules, n)->kind; };
  EXPECT_EQ(kind("model.layers.0.self_attn.k_proj.weight"), TpKind::kColumn);
  EXPECT_EQ(kind("model.layers.0.mlp.experts.3.up_proj.weight"), TpKind::kColumn);
  EXPECT_EQ(kind("model.layers.0.mlp.down_proj.weight"), TpKind::kRow);
  EXPECT_EQ(kind("model.layers.0.self_attn.o_proj.weight"), TpKind::kRow);
  EXPECT_EQ(kind("model.embed_tokens.weight"), TpKind::kVocab);
  EXPECT_EQ(kind("lm_head.weight"), TpKind::kVocab);
  EXPECT_EQ(kind("model.layers.0.post_attention_layernorm.weight"), TpKind::kReplicated);
  EXPECT_EQ(kind("model.layers.0.mlp.gate.weight"), TpKind::kReplicated);
  auto none = MatchTpRule(rules, "model.rotary_emb.inv_freq");
  ASSERT_FALSE(none.ok());
  EXPECT_NE(none.status().message().find("'model.rotary_emb.inv_freq'"), std::string::npos);
}

TEST(PlacementBuildersTest, TensorParallelCoversSplitsOnceAndReplicatesNorms) {
  const auto tensors = Model({.bias = true});
  auto p = TensorParallel(tensors, 3);
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  EXPECT_EQ(p->ranks(), (std::vector<int>{0, 1, 2}));
  for (const TensorMeta& t : tensors) {
    const bool replicated = IsNorm(t.name) || t.name.find("o_proj.bias") != std::string::npos;
    EXPECT_TRUE(HeldTimes(*p, t, replicated ? 3 : 1));
  }
  // Column: rows 2..3 of q_proj [6, 6] on rank 1; row: columns of o_proj; vocab 11 -> 4, 4, 3.
  EXPECT_EQ(*SliceOf(*p, 1, "model.layers.0.self_attn.q_proj.weight"), Slice::MakeBox({2, 0}, {2, 6}));
  EXPECT_EQ(*SliceOf(*p, 1, "model.layers.0.self_attn.q_proj.bias"), Slice::MakeBox({2}, {2}));
  EXPECT_EQ(*SliceOf(*p, 2, "model.layers.1.self_attn.o_proj.weight"), Slice::MakeBox({0, 4}, {6, 2}));
  EXPECT_EQ(*SliceOf(*p, 2, "model.layers.1.mlp.down_proj.weight"), Slice::MakeBox({0, 7}, {6, 3}));
  EXPECT_EQ(*SliceOf(*p, 2, "lm_head.weight"), Slice::MakeBox({8, 0}, {3, 6}));
}

TEST(PlacementBuildersTest, VocabParallelOnRealShapes) {
  auto p = TensorParallel({Meta("model.embed_tokens.weight", {151936, 8192})}, 3);
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(*SliceOf(*p, 0, "model.embed_tokens.weight"), Slice::MakeBox({0, 0}, {50646, 8192}));
  EXPECT_EQ(*SliceOf(*p, 1, "model.embed_tokens.weight"), Slice::MakeBox({50646, 0}, {50645, 8192}));
  EXPECT_EQ(*SliceOf(*p, 2, "model.embed_tokens.weight"), Slice::MakeBox({101291, 0}, {50645, 8192}));
  EXPECT_EQ(p->TotalBytes(), p->ModelBytes());
  EXPECT_EQ(p->BytesOnRank(0), 50646ull * 8192 * 2);
  EXPECT_TRUE(p->CheckCoverage().ok());
}

TEST(PlacementBuildersTest, RanksBeyondTheDimensionHoldNothing) {
  auto p = TensorParallel(Model({.layers = 1, .hidden = 4, .inter = 4, .vocab = 5, .kv = 2}), 8);
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  EXPECT_EQ(p->num_ranks(), 8u);
  EXPECT_EQ(SliceOf(*p, 6, "lm_head.weight"), nullptr);
  EXPECT_NE(SliceOf(*p, 6, "model.norm.weight"), nullptr);
  EXPECT_TRUE(p->CheckCoverage().ok());
}

TEST(PlacementBuildersTest, TensorParallelGranuleKeepsHeadsWhole) {
  std::vector<TpPattern> rules{{"*k_proj*", {TpKind::kColumn, /*granule=*/2}}, {"*", {}}};
  auto p = TensorParallel({Meta("l.k_proj.w", {6, 4})}, 2, rules);  // 3 heads of 2 rows: 2 + 1 heads
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(*SliceOf(*p, 0, "l.k_proj.w"), Slice::MakeBox({0, 0}, {4, 4}));
  EXPECT_EQ(*SliceOf(*p, 1, "l.k_proj.w"), Slice::MakeBox({4, 0}, {2, 4}));
  rules[0].rule.granule = 4;
  EXPECT_FALSE(TensorParallel({Meta("l.k_proj.w", {6, 4})}, 2, rules).ok());
  auto unmatched = TensorParallel({Meta("model.rotary.inv_freq", {4})}, 2);
  ASSERT_FALSE(unmatched.ok());
  EXPECT_NE(unmatched.status().message().find("model.rotary.inv_freq"), std::string::npos);
}

TEST(PlacementBuildersTest, PipelineStages) {
  const auto tensors = Model({.layers = 5});
  auto p = PipelineStages(tensors, 2);
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  for (const TensorMeta& t : tensors) EXPECT_TRUE(HeldTimes(*p, t, 1));
  EXPECT_NE(SliceOf(*p, 0, "model.embed_tokens.weight"), nullptr);
  EXPECT_NE(SliceOf(*p, 0, "model.layers.2.mlp.up_proj.weight"), nullptr);  // 3 + 2 layers
  EXPECT_NE(SliceOf(*p, 1, "model.layers.3.mlp.up_proj.weight"), nullptr);
  EXPECT_NE(SliceOf(*p, 1, "model.norm.weight"), nullptr);
  EXPECT_NE(SliceOf(*p, 1, "lm_head.weight"), nullptr);
  EXPECT_EQ(p->TotalBytes(), p->ModelBytes());

  auto custom = PipelineStages(tensors, 3, {.layers_per_stage = {1, 3, 1}});
  ASSERT_TRUE(custom.ok());
  EXPECT_NE(SliceOf(*custom, 1, "model.layers.3.self_attn.q_proj.weight"), nullptr);
  EXPECT_NE(SliceOf(*custom, 2, "model.layers.4.self_attn.q_proj.weight"), nullptr);
  EXPECT_FALSE(PipelineStages(tensors, 3, {.layers_per_stage = {1, 3, 2}}).ok());
  // More stages than layers: the middle stages hold nothing.
  auto many = PipelineStages(Model({.layers = 1}), 4);
  ASSERT_TRUE(many.ok());
  EXPECT_TRUE(many->shards(2).empty());
  EXPECT_NE(SliceOf(*many, 3, "lm_head.weight"), nullptr);
  auto stray = PipelineStages({Meta("vision.proj", {2})}, 2);
  ASSERT_FALSE(stray.ok());
  EXPECT_NE(stray.status().message().find("'vision.proj'"), std::string::npos);
}

TEST(PlacementBuildersTest, ExpertParallel) {
  const auto tensors = Model({.layers = 2, .experts = 5});
  for (auto assignment : {ExpertAssignment::kContiguous, ExpertAssignment::kRoundRobin}) {
    auto p = ExpertParallel(tensors, 2, {.assignment = assignment});
    ASSERT_TRUE(p.ok()) << p.status().ToString();
    for (const TensorMeta& t : tensors) EXPECT_TRUE(HeldTimes(*p, t, ExpertIndex(t.name) >= 0 ? 1 : 2));
    // Contiguous: experts 0-2 on rank 0, 3-4 on rank 1. Round robin: 0, 2, 4 on rank 0.
    const bool contiguous = assignment == ExpertAssignment::kContiguous;
    EXPECT_NE(SliceOf(*p, 0, "model.layers.1.mlp.experts.2.up_proj.weight"), nullptr);
    EXPECT_NE(SliceOf(*p, contiguous ? 0 : 1, "model.layers.0.mlp.experts.1.down_proj.weight"), nullptr);
    EXPECT_NE(SliceOf(*p, contiguous ? 1 : 0, "model.layers.0.mlp.experts.4.gate_proj.weight"), nullptr);
  }
  // Attention and shared experts TP'd over the EP ranks, experts whole.
  auto p = ExpertParallel(tensors, 2, {.non_expert_tp = LlamaTpRules()});
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  for (const TensorMeta& t : tensors)
    EXPECT_TRUE(HeldTimes(*p, t, IsNorm(t.name) || GlobMatch("*mlp.gate.*", t.name) ? 2 : 1));
  EXPECT_EQ(*SliceOf(*p, 1, "model.layers.0.mlp.shared_experts.up_proj.weight"),
            Slice::MakeBox({5, 0}, {5, 6}));
  EXPECT_EQ(*SliceOf(*p, 1, "model.layers.0.mlp.experts.4.up_proj.weight"), Slice::Full({10, 6}));
}

TEST(PlacementBuildersTest, MeshTpTimesPpAndReplicas) {
  const auto tensors = Model({.layers = 4});
  const MeshAxis axes[] = {ReplicaAxis("dp", 2), PipelineAxis("pp", 2), TensorParallelAxis("tp", 2)};
  auto p = BuildMesh(tensors, axes, /*rank_offset=*/8);
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  EXPECT_EQ(p->ranks().front(), 8);
  EXPECT_EQ(p->ranks().back(), 15);
  // Rank 8 + (dp * 2 + pp) * 2 + tp; each replica covers splits once, norms once per TP rank.
  for (int dp = 0; dp < 2; ++dp) {
    const std::vector<int> replica{8 + dp * 4, 9 + dp * 4, 10 + dp * 4, 11 + dp * 4};
    for (const TensorMeta& t : tensors) EXPECT_TRUE(HeldTimes(*p, t, IsNorm(t.name) ? 2 : 1, replica));
  }
  EXPECT_EQ(*SliceOf(*p, 11, "model.layers.3.self_attn.q_proj.weight"), Slice::MakeBox({3, 0}, {3, 6}));
  EXPECT_EQ(SliceOf(*p, 11, "model.layers.1.self_attn.q_proj.weight"), nullptr);
  EXPECT_EQ(*SliceOf(*p, 9, "model.embed_tokens.weight"), Slice::MakeBox({6, 0}, {5, 6}));
  for (int r = 8; r < 12; ++r)
    EXPECT_EQ(std::vector<Shard>(p->shards(r).begin(), p->shards(r).end()),
              std::vector<Shard>(p->shards(r + 4).begin(), p->shards(r + 4).end()));
  const MeshAxis bad[] = {TensorParallelAxis("tp", 0)};
  EXPECT_FALSE(BuildMesh(tensors, bad).ok());
}

TEST(PlacementBuildersTest, FsdpFlatSpansTensorsAndRanks) {
  // a[5], b[6]: 11 elements padded to 12 over 4 ranks of 3.
  auto p = FsdpFlat({Meta("a", {5}), Meta("b", {2, 3})}, 4);
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  auto shards = [&](int r) { return std::vector<Shard>(p->shards(r).begin(), p->shards(r).end()); };
  EXPECT_EQ(shards(0), (std::vector<Shard>{{"a", Slice::MakeFlat(0, 3)}}));
  EXPECT_EQ(shards(1), (std::vector<Shard>{{"a", Slice::MakeFlat(3, 2)}, {"b", Slice::MakeFlat(0, 1)}}));
  EXPECT_EQ(shards(2), (std::vector<Shard>{{"b", Slice::MakeFlat(1, 3)}}));
  EXPECT_EQ(shards(3), (std::vector<Shard>{{"b", Slice::MakeFlat(4, 2)}}));

  const auto tensors = Model({.layers = 2});
  for (int world : {1, 3, 7, 64}) {
    for (bool per_layer : {false, true}) {
      auto q = FsdpFlat(tensors, world, {.unit_per_layer = per_layer});
      ASSERT_TRUE(q.ok()) << q.status().ToString();
      EXPECT_EQ(q->num_ranks(), static_cast<size_t>(world));
      EXPECT_EQ(q->TotalBytes(), q->ModelBytes());
      for (const TensorMeta& t : tensors) EXPECT_TRUE(HeldTimes(*q, t, 1));
    }
  }
  // More ranks than elements: the tail ranks hold nothing.
  auto tiny = FsdpFlat({Meta("s", {3})}, 8);
  ASSERT_TRUE(tiny.ok());
  EXPECT_EQ(tiny->num_ranks(), 8u);
  EXPECT_TRUE(tiny->shards(5).empty());
  auto mixed = FsdpFlat({Meta("a", {2}), Meta("b", {2}, DType::kF32)}, 2);
  ASSERT_FALSE(mixed.ok());
  EXPECT_NE(mixed.status().message().find("'b' is f32"), std::string::npos) << mixed.status().ToString();
  const MeshAxis over_tp[] = {FsdpFlatAxis("fsdp", 2), TensorParallelAxis("tp", 2)};
  EXPECT_FALSE(BuildMesh(Model({.layers = 1}), over_tp).ok());
}

TEST(PlacementBuildersTest, Fsdp2ChunksDimZero) {
  auto p = Fsdp2({Meta("w", {5, 3}), Meta("s", {})}, 4);
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  EXPECT_EQ(*SliceOf(*p, 2, "w"), Slice::MakeBox({4, 0}, {1, 3}));
  EXPECT_EQ(SliceOf(*p, 3, "w"), nullptr);
  for (int r = 0; r < 4; ++r) EXPECT_EQ(*SliceOf(*p, r, "s"), Slice());
  const auto tensors = Model({});
  auto q = Fsdp2(tensors, 4);
  ASSERT_TRUE(q.ok());
  for (const TensorMeta& t : tensors) EXPECT_TRUE(HeldTimes(*q, t, 1));
  EXPECT_EQ(q->TotalBytes(), q->ModelBytes());
}

TEST(PlacementBuildersTest, Fsdp2OverTensorParallelShardsTheLocalTensor) {
  const auto tensors = Model({});
  const MeshAxis axes[] = {Fsdp2Axis("dp", 2), TensorParallelAxis("tp", 2)};
  auto p = BuildMesh(tensors, axes);
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  for (const TensorMeta& t : tensors) EXPECT_TRUE(HeldTimes(*p, t, IsNorm(t.name) ? 2 : 1));
  // Rank 2 = (dp 1, tp 0): TP rows [0, 3) of q_proj, second torch.chunk of those: row 2.
  EXPECT_EQ(*SliceOf(*p, 2, "model.layers.0.self_attn.q_proj.weight"), Slice::MakeBox({2, 0}, {1, 6}));
  // o_proj is split on dim 1 by TP, then on dim 0 by FSDP2.
  EXPECT_EQ(*SliceOf(*p, 3, "model.layers.0.self_attn.o_proj.weight"), Slice::MakeBox({3, 3}, {3, 3}));
}

TEST(PlacementBuildersTest, ReplicatedOnSparseRanks) {
  const int ranks[] = {4, 9, 2};
  auto p = Replicated(Model({.layers = 1}), ranks);
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p->ranks(), (std::vector<int>{2, 4, 9}));
  EXPECT_EQ(p->TotalBytes(), 3 * p->ModelBytes());
  const int twice[] = {1, 1};
  EXPECT_FALSE(Replicated(Model({.layers = 1}), twice).ok());
}

TEST(PlacementBuildersTest, PartsMatchTheWholeSplits) {
  for (int64_t extent : {0, 1, 5, 6, 13, 151936})
    for (int parts : {1, 2, 3, 4, 7, 64}) {
      const std::vector<SplitRange> even = *EvenSplit(extent, parts), chunk = *ChunkSplit(extent, parts);
      for (int i = 0; i < parts; ++i) {
        EXPECT_EQ(*EvenPart(extent, parts, i), even[i]) << extent << " / " << parts << " [" << i << "]";
        EXPECT_EQ(*ChunkPart(extent, parts, i), chunk[i]) << extent << " / " << parts << " [" << i << "]";
      }
    }
  EXPECT_FALSE(EvenPart(4, 2, 2).ok());
  EXPECT_FALSE(ChunkPart(4, 2, -1).ok());
  EXPECT_FALSE(ChunkPart(-1, 2, 0).ok());
}

// A hostile mesh is refused with an error naming the limit, before it takes the machine's memory.
TEST(PlacementBuildersTest, MeshRefusesTooManyRanks) {
  const std::vector<TensorMeta> tensors = {Meta("w", {8})};
  const MeshAxis axes[] = {ReplicaAxis("a", 1 << 11), ReplicaAxis("b", 1 << 10)};
  auto p = BuildMesh(tensors, axes);
  ASSERT_FALSE(p.ok());
  EXPECT_NE(p.status().message().find("mesh axis 'b'"), std::string::npos) << p.status().message();
  EXPECT_NE(p.status().message().find(std::to_string(kMaxMeshRanks)), std::string::npos);
}

TEST(PlacementBuildersTest, MeshRefusesTooManyShards) {
  std::vector<TensorMeta> tensors;
  for (int i = 0; i < 5; ++i) tensors.push_back(Meta("w" + std::to_string(i), {8}));
  const MeshAxis axes[] = {ReplicaAxis("dp", 1 << 20)};
  auto p = BuildMesh(tensors, axes);
  ASSERT_FALSE(p.ok());
  EXPECT_NE(p.status().message().find(std::to_string(kMaxMeshShards)), std::string::npos)
      << p.status().message();
}

}  // namespace
}  // namespace weightport
