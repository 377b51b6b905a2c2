// Conversions in flight: where the planner places them, what a plan with them holds, and what
// Validate refuses.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "plan/plan_test_util.h"
#include "weightport/core/placement_builders.h"
#include "weightport/plan/planner.h"

// A namespace of its own: the unity build compiles this file together with other tests.
namespace weightport::planner_transform_test {
namespace {

std::vector<TensorMeta> Model(DType dtype) {
  return {*TensorMeta::Make("model.layers.0.mlp.up_proj.weight", dtype, {64, 48}),
          *TensorMeta::Make("model.norm.weight", dtype, {48})};
}

Placement FsdpOf(DType dtype, int ranks) { return *FsdpFlat(Model(dtype), ranks); }

// Three TP-2 replicas: the pieces travel down relay chains.
Placement ReplicasOf(DType dtype) {
  std::vector<MeshAxis> axes = {ReplicaAxis("dp", 3), TensorParallelAxis("tp", 2)};
  return *BuildMesh(Model(dtype), axes);
}

Plan MustPlan(const Placement& src, const Placement& dst, std::vector<TransformRule> rules = {}) {
  PlanOptions o;
  o.chunk_bytes = 256;
  o.transforms = std::move(rules);
  auto plan = MakePlan(src, dst, Topology(), o);
  EXPECT_TRUE(plan.ok()) << plan.status().ToString();
  return plan.ok() ? *plan : Plan();
}

TEST(PlannerTransform, NarrowingConvertsAtTheSourceAndRelaysForwardTheConvertedBytes) {
  const Plan plan = MustPlan(FsdpOf(DType::kF32, 2), ReplicasOf(DType::kBF16));  // dst placement says bf16
  ASSERT_FALSE(plan.steps.empty());
  uint64_t relays = 0;
  for (const PlanStep& s : plan.steps) {
    EXPECT_EQ(s.transform, s.after < 0 ? TransformKind::kConvertAtSender : TransformKind::kIdentity) << s.id;
    EXPECT_EQ(s.bytes, static_cast<uint64_t>(s.piece.num_elements()) * 2) << "bf16 on the wire";
    relays += s.after >= 0;
  }
  EXPECT_GT(relays, 0u);
  // Each destination rank's shards once, in bf16: three TP-2 copies of the matrix, six of the norm.
  EXPECT_EQ(plan.TotalBytes(), (3 * 64 * 48 + 6 * 48) * 2ull);
  EXPECT_EQ(plan.DestinationBytes(), plan.TotalBytes());
  EXPECT_TRUE(CheckCoverage(plan).ok());
  EXPECT_EQ(plan_test::RunPlanInMemory(plan), "");
}

TEST(PlannerTransform, WideningConvertsAtEveryReceiverAndRelaysForwardTheNarrowBytes) {
  const Plan plan = MustPlan(FsdpOf(DType::kBF16, 2), ReplicasOf(DType::kBF16), {{"*", DType::kF32}});
  EXPECT_EQ(plan.destination_dtypes, (std::vector<DType>{DType::kF32, DType::kF32}));
  for (const PlanStep& s : plan.steps) {
    EXPECT_EQ(s.transform, TransformKind::kConvertAtReceiver) << s.id;
    EXPECT_EQ(s.bytes, static_cast<uint64_t>(s.piece.num_elements()) * 2) << "bf16 on the wire";
    EXPECT_EQ(ReceiverEndPacked(s), true);
    EXPECT_EQ(SenderEndPacked(s), s.after >= 0);
  }
  EXPECT_EQ(plan.DestinationBytes(), (3 * 64 * 48 + 6 * 48) * 4ull);  // stored as f32
  EXPECT_EQ(plan.TotalBytes(), plan.DestinationBytes() / 2);
  EXPECT_TRUE(CheckCoverage(plan).ok());
  EXPECT_EQ(plan_test::RunPlanInMemory(plan), "");
}

TEST(PlannerTransform, SameWidthConvertsOnceAtTheSourceAndRulesPickTensors) {
  const Plan plan = MustPlan(FsdpOf(DType::kF16, 1), ReplicasOf(DType::kF16), {{"*norm*", DType::kBF16}});
  EXPECT_EQ(plan.destination_dtypes, (std::vector<DType>{DType::kF16, DType::kBF16}));
  for (const PlanStep& s : plan.steps) {
    const bool converted = plan.tensors[s.tensor].name == "model.norm.weight" && s.after < 0;
    EXPECT_EQ(s.transform, converted ? TransformKind::kConvertAtSender : TransformKind::kIdentity) << s.id;
  }
  EXPECT_EQ(plan_test::RunPlanInMemory(plan), "");
}

TEST(PlannerTransform, JsonKeepsDtypesRulesAndTransforms) {
  const Plan plan = MustPlan(FsdpOf(DType::kBF16, 2), ReplicasOf(DType::kBF16), {{"*up_proj*", DType::kF32}});
  auto round = Plan::FromJson(plan.ToJson());
  ASSERT_TRUE(round.ok()) << round.status().ToString();
  EXPECT_EQ(round->Digest(), plan.Digest());
  EXPECT_EQ(round->destination_dtypes, plan.destination_dtypes);
  ASSERT_EQ(round->options.transforms.size(), 1u);
  EXPECT_EQ(round->options.transforms[0].to, DType::kF32);
  nlohmann::json bad = plan.ToJson();
  bad["steps"][0]["transform"] = "squash";
  EXPECT_NE(Plan::FromJson(bad).status().message().find("unknown transform 'squash'"), std::string::npos);
}

TEST(PlannerTransform, ValidateRefusesTransformsThatDisagreeWithTheDtypes) {
  const Plan good = MustPlan(FsdpOf(DType::kF32, 2), ReplicasOf(DType::kBF16));
  auto refused = [&](auto&& mutate, const std::string& words) {
    Plan p = good;
    mutate(p);
    Status s = p.Validate();
    EXPECT_FALSE(s.ok()) << words;
    EXPECT_NE(s.message().find(words), std::string::npos) << s.ToString();
  };
  size_t root = 0, relay = 0;
  for (const PlanStep& s : good.steps) (s.after < 0 ? root : relay) = s.id;
  refused([&](Plan& p) { p.steps[root].transform = TransformKind::kIdentity; }, "identity from a source");
  refused([&](Plan& p) { p.steps[relay].transform = TransformKind::kConvertAtSender; }, "only a source");
  refused([&](Plan& p) { p.destination_dtypes.pop_back(); }, "destination dtypes for");
  refused([&](Plan& p) { p.destination_dtypes[0] = DType::kI16; }, "cannot convert f32 -> i16");
  refused([&](Plan& p) { p.options.chunk_bytes = 255; }, "not a whole number of bf16 elements");
}

TEST(PlannerTransform, RulesToUnsupportedDtypesAreRefusedByName) {
  PlanOptions o;
  o.transforms = {{"*.mlp.*", DType::kF8E5M2}};
  auto plan = MakePlan(FsdpOf(DType::kF32, 1), ReplicasOf(DType::kF32), Topology(), o);
  ASSERT_FALSE(plan.ok());
  EXPECT_NE(plan.status().message().find("'*.mlp.*'"), std::string::npos) << plan.status().ToString();
}

// Compression: steps over links slower than the compressor; a relay only after a compressed hop.
TEST(PlannerCompression, CompressesStepsOverLinksSlowerThanTheCompressor) {
  // Sources on a 100 Gb/s host; replica 0 on a 100 Gb/s host, replicas 1 and 2 on 0.1 Gb/s hosts.
  auto topo = Topology::Make({{"trainer", 100, {0, 1}, {}},
                              {"fast", 100, {}, {0, 1}},
                              {"slow1", 0.1, {}, {2, 3}},
                              {"slow2", 0.1, {}, {4, 5}}});
  ASSERT_TRUE(topo.ok()) << topo.status().ToString();
  PlanOptions o;
  o.chunk_bytes = 256;
  o.compressor_gbps = 5;
  auto plan = MakePlan(FsdpOf(DType::kBF16, 2), ReplicasOf(DType::kBF16), *topo, o);
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  uint64_t compressed = 0;
  for (const PlanStep& s : plan->steps) {
    const int from = plan->Buffer(s.from)->host, to = plan->Buffer({PlanSide::kDestination, s.to_rank})->host;
    const bool slow = plan->topology.hosts()[from].nic_gbps < 5 || plan->topology.hosts()[to].nic_gbps < 5;
    const bool after_compressed = s.after < 0 || plan->steps[s.after].compress;
    EXPECT_EQ(s.compress, from != to && slow && after_compressed) << s.id;
    compressed += s.compress;
  }
  EXPECT_GT(compressed, 0u);
  auto round = Plan::FromJson(plan->ToJson());
  ASSERT_TRUE(round.ok()) << round.status().ToString();
  EXPECT_EQ(round->Digest(), plan->Digest());
  o.compressor_gbps = 0;  // off
  auto off = MakePlan(FsdpOf(DType::kBF16, 2), ReplicasOf(DType::kBF16), *topo, o);
  for (const PlanStep& s : off->steps) EXPECT_FALSE(s.compress);
  // A relay cannot compress what it did not receive compressed.
  Plan bad = *plan;
  for (PlanStep& s : bad.steps)
    if (s.after >= 0) {
      bad.steps[s.after].compress = false;
      s.compress = true;
      break;
    }
  EXPECT_NE(bad.Validate().message().find("compresses only what"), std::string::npos);
}

}  // namespace
}  // namespace weightport::planner_transform_test
