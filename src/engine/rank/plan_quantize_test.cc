// Quantising to e4m3 at the ranks with one scale per tensor (TransformRule::scaling): the whole
// tensor is one band, quantised where it is whole, and a version that leaves it unchanged copies it
// from the live copy (on a device too) instead of quantising it again.
#include <gtest/gtest.h>

#include "engine/testing/plan_rank_test_util.h"
#include "weightport/core/device_memory.h"
#include "weightport/plan/quantized.h"

namespace weightport {
namespace {

using namespace plan_rank_test;

constexpr auto kPerTensor = kernels::Fp8Scaling::kPerTensor;

// Two whole replicas of a model whose matrices are 5 MiB of bf16 (more than a band of block rows):
// FSDP's flat shards send bf16 and each replica quantises each tensor whole, one scale each.
TEST(PlanQuantize, PerTensorScalesAreQuantisedWholeAtTheReceivers) {
  const std::vector<TensorMeta> model = {
      *TensorMeta::Make("model.layers.0.mlp.up_proj.weight", DType::kBF16, {2048, 1280}),
      *TensorMeta::Make("model.layers.0.mlp.down_proj.weight", DType::kBF16, {1280, 300}),
      *TensorMeta::Make("model.norm.weight", DType::kBF16, {1280})};
  const std::vector<MeshAxis> replicas = {ReplicaAxis("dp", 2)};
  for (bool on_device : {false, true}) {
    SCOPED_TRACE(on_device ? "on a device" : "on the host");
    PlanRankOptions o;
    o.worker_threads = 2;
    if (on_device) o.device = HostStandInMemory();
    Group g(MustPlan(FsdpFlat(model, 3), BuildMesh(model, replicas), 1, 1 << 20,
                     {{"*", DType::kF8E4M3, kPerTensor}}),
            o);
    for (uint32_t t = 0; t < g.plan->tensors.size(); ++t) EXPECT_EQ(g.plan->Fp8ScalingOf(t), kPerTensor);
    for (const RankBuffer& b : g.plan->destinations)
      for (const PlannedShard& s : b.shards)
        EXPECT_EQ(s.bytes, StoredScaleOffset(s.slice.num_elements()) + 4) << "one f32 scale";
    g.content = [](uint32_t t, uint64_t v) { return t == 0 ? v : uint64_t{1}; };  // up_proj changes
    const ReceiveStats first = g.Update(1);
    g.ExpectLive(1);  // the bytes of quantising each tensor whole with its one scale
    EXPECT_EQ(first.bands_quantized, 2u * 3u) << "a band per tensor and replica";
    const ReceiveStats second = g.Update(2);
    g.ExpectLive(2);
    EXPECT_EQ(second.bands_quantized, 2u) << "up_proj, in each replica";
    EXPECT_EQ(second.bands_reused, 2u * 2u);
    if (on_device) {
      EXPECT_GT(second.device_kept_bytes, 0u);
    }
  }
}

// Sources that hold a tensor whole quantise it as they publish (e4m3 and one scale travel).
TEST(PlanQuantize, PerTensorScalesAreQuantisedAtASourceHoldingTheTensorWhole) {
  const std::vector<int> one = {0};
  const std::vector<MeshAxis> replicas = {ReplicaAxis("dp", 3)};
  Group g(MustPlan(Replicated(BlockModel(DType::kF32), one), BuildMesh(BlockModel(DType::kF32), replicas), 1,
                   4096, {{"*.weight", DType::kF8E4M3, kPerTensor}}));
  for (const PlanStep& s : g.plan->steps) {
    EXPECT_FALSE(ReceiverEndPacked(s)) << s.id;
    if (s.after < 0) {
      EXPECT_EQ(s.transform, TransformKind::kConvertAtSender) << s.id;
    }
    EXPECT_EQ(s.bytes, static_cast<uint64_t>(s.piece.num_elements()) + 4) << s.id;
  }
  for (uint64_t v = 1; v <= 2; ++v) {
    const ReceiveStats s = g.Update(v);
    EXPECT_EQ(s.bands_quantized, 0u);
    g.ExpectLive(v);
  }
}

}  // namespace
}  // namespace weightport
