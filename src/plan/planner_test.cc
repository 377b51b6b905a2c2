#include "weightport/plan/planner.h"

#include <set>

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "plan/plan_test_util.h"
#include "weightport/core/placement_builders.h"
#include "weightport/format/synthetic_model.h"

namespace weightport {
namespace {

// A llama-shaped model small enough to run plans byte by byte quickly (~100 KB).
std::vector<TensorMeta> TinyModel() {
  ModelSpec spec = *PresetSpec("tiny", ModelArch::kDense);
  spec.layers = 2;
  spec.hidden = 32;
  spec.intermediate = 64;
  spec.heads = 4;
  spec.kv_heads = 2;
  spec.head_dim = 8;
  spec.vocab = 256;
  return ModelTensors(spec);
}

uint64_t ModelBytes(const std::vector<TensorMeta>& tensors) {
  uint64_t total = 0;
  for (const TensorMeta& t : tensors) total += t.bytes;
  return total;
}

// `replicas` copies of a TP-`tp` layout, ranks 0 .. replicas * tp - 1.
Placement ReplicatedTp(const std::vector<TensorMeta>& tensors, int replicas, int tp) {
  std::vector<MeshAxis> axes = {ReplicaAxis("dp", replicas), TensorParallelAxis("tp", tp)};
  return *BuildMesh(tensors, axes);
}

// Every rank and host on hosts of its own.
Topology Flat() { return Topology(); }

uint64_t SourceBytesSent(const Plan& plan) {
  uint64_t total = 0;
  for (const PlanStep& s : plan.steps)
    if (s.from.side == PlanSide::kSource) total += s.bytes;
  return total;
}

TEST(Planner, FsdpToReplicatedTpIsExactAndSendsTheModelOnce) {
  const std::vector<TensorMeta> tensors = TinyModel();
  Placement src = *FsdpFlat(tensors, 4);
  Placement dst = ReplicatedTp(tensors, 2, 2);
  auto plan = MakePlan(src, dst, Flat());
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  ASSERT_TRUE(CheckCoverage(*plan).ok());
  EXPECT_EQ(plan_test::RunPlanInMemory(*plan), "");
  // The sources send one copy; the second replica gets its copy from the first.
  EXPECT_EQ(SourceBytesSent(*plan), ModelBytes(tensors));
  EXPECT_EQ(plan->TotalBytes(), plan->DestinationBytes());
  // Replicated tensors (norms) are on all four ranks: a chain of four.
  EXPECT_EQ(plan->estimate.max_depth, 3u);
}

TEST(Planner, RelaysKeepFanOutNearTheCostOfOneReplica) {
  const std::vector<TensorMeta> tensors = TinyModel();
  Placement src = *FsdpFlat(tensors, 4);
  PlanOptions chain, naive;
  naive.relay_fanout = 0;
  auto one = MakePlan(src, ReplicatedTp(tensors, 1, 2), Flat(), chain);
  auto eight = MakePlan(src, ReplicatedTp(tensors, 8, 2), Flat(), chain);
  auto eight_naive = MakePlan(src, ReplicatedTp(tensors, 8, 2), Flat(), naive);
  ASSERT_TRUE(one.ok() && eight.ok() && eight_naive.ok());
  EXPECT_EQ(SourceBytesSent(*eight), ModelBytes(tensors));
  EXPECT_EQ(SourceBytesSent(*eight_naive), eight_naive->DestinationBytes());
  // Each replica's NIC carries its share in and (as a relay) out, so no host is much busier than
  // with one replica. The naive way makes the 4 sources send 8 copies: 2 each, where one replica's
  // TP ranks take half a copy each, so 4x.
  EXPECT_LT(eight->estimate.lower_bound_s, 1.3 * one->estimate.lower_bound_s);
  EXPECT_GT(eight_naive->estimate.lower_bound_s, 3.5 * one->estimate.lower_bound_s);
  EXPECT_EQ(eight->estimate.max_depth, 15u);  // norms: on all 16 ranks
  EXPECT_EQ(plan_test::RunPlanInMemory(*eight), "");
}

TEST(Planner, TreeFanOutBoundsTheDepth) {
  const std::vector<TensorMeta> tensors = TinyModel();
  PlanOptions tree;
  tree.relay_fanout = 2;
  auto plan = MakePlan(*Replicated(tensors, std::vector<int>{0}), ReplicatedTp(tensors, 7, 1), Flat(), tree);
  ASSERT_TRUE(plan.ok());
  EXPECT_EQ(plan->estimate.max_depth, 2u);  // positions 1,2 at depth 1; 3..6 at depth 2
  EXPECT_EQ(plan_test::RunPlanInMemory(*plan), "");
}

// Every tensor to the same 7 replicas goes down one chain (same hops, same order): per-tensor
// rotations balance no peak better and make each link carry flows of several chains.
TEST(Planner, PiecesForTheSameReplicasShareOneChain) {
  const std::vector<TensorMeta> tensors = TinyModel();
  PlanOptions chain;
  chain.relay_fanout = 1;
  auto plan = MakePlan(*Replicated(tensors, std::vector<int>{0}), ReplicatedTp(tensors, 7, 1), Flat(), chain);
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  std::set<std::pair<std::string, int>> hops;  // (sender, receiver rank)
  for (const PlanStep& s : plan->steps) hops.insert({s.from.ToString(), s.to_rank});
  EXPECT_EQ(hops.size(), 7u);  // one into each replica: the source's, then one per relay
  EXPECT_EQ(SourceBytesSent(*plan), ModelBytes(tensors));
  EXPECT_EQ(plan_test::RunPlanInMemory(*plan), "");
}

TEST(Planner, ReplicatedSourcesShareTheSending) {
  const std::vector<TensorMeta> tensors = TinyModel();
  Placement src = *Replicated(tensors, std::vector<int>{0, 1, 2, 3});
  Placement dst = ReplicatedTp(tensors, 1, 2);
  auto plan = MakePlan(src, dst, Flat());
  ASSERT_TRUE(plan.ok());
  std::vector<uint64_t> sent(4, 0);
  for (const PlanStep& s : plan->steps) sent[s.from.rank] += s.bytes;
  const uint64_t total = ModelBytes(tensors);
  for (int r = 0; r < 4; ++r) {
    EXPECT_GT(sent[r], total / 4 * 0.9) << "src rank " << r;
    EXPECT_LT(sent[r], total / 4 * 1.1) << "src rank " << r;
  }
  EXPECT_EQ(plan_test::RunPlanInMemory(*plan), "");
}

TEST(Planner, FasterNicsCarryMore) {
  const std::vector<TensorMeta> tensors = TinyModel();
  HostSpec slow{"slow", 25, {0}, {}}, fast{"fast", 100, {1}, {}};
  auto plan = MakePlan(*Replicated(tensors, std::vector<int>{0, 1}), ReplicatedTp(tensors, 1, 1),
                       *Topology::Make({slow, fast}));
  ASSERT_TRUE(plan.ok());
  uint64_t from_slow = 0, from_fast = 0;
  for (const PlanStep& s : plan->steps) (s.from.rank == 0 ? from_slow : from_fast) += s.bytes;
  EXPECT_GT(from_fast, 3 * from_slow);
  EXPECT_LT(from_fast, 5 * from_slow);
}

TEST(Planner, SameHostCopiesUseTheLocalPath) {
  const std::vector<TensorMeta> tensors = TinyModel();
  HostSpec h0{"h0", 100, {0}, {0}}, h1{"h1", 100, {1}, {1}};
  auto plan = MakePlan(*Replicated(tensors, std::vector<int>{0, 1}), ReplicatedTp(tensors, 1, 2),
                       *Topology::Make({h0, h1}));
  ASSERT_TRUE(plan.ok());
  // Each TP rank can be fed by the source on its own host: no NIC traffic at all.
  for (const HostLoad& h : plan->estimate.hosts) {
    EXPECT_EQ(h.nic_in, 0u);
    EXPECT_EQ(h.nic_out, 0u);
  }
  EXPECT_EQ(plan_test::RunPlanInMemory(*plan), "");
}

TEST(Planner, RanksHoldingNothingGetNoSteps) {
  const std::vector<TensorMeta> tensors = TinyModel();
  Placement src = *FsdpFlat(tensors, 2);
  src.AddRank(5);
  Placement dst = ReplicatedTp(tensors, 1, 2);
  dst.AddRank(9);
  auto plan = MakePlan(src, dst, Flat());
  ASSERT_TRUE(plan.ok());
  ASSERT_NE(plan->Buffer({PlanSide::kDestination, 9}), nullptr);
  EXPECT_EQ(plan->Buffer({PlanSide::kDestination, 9})->bytes, 0u);
  for (const PlanStep& s : plan->steps) {
    EXPECT_NE(s.to_rank, 9);
    EXPECT_NE(s.from, (Endpoint{PlanSide::kSource, 5}));
  }
}

TEST(Planner, UncoveredDestinationIsNamed) {
  auto w = *TensorMeta::Make("w", DType::kF32, {4, 4});
  Placement src = *Placement::Make({w}), dst = *Placement::Make({w});
  src.AddShard(0, "w", Slice::MakeBox({0, 0}, {2, 4}));
  dst.AddShard(3, "w", Slice::MakeBox({1, 0}, {3, 4}));
  auto plan = MakePlan(src, dst, Flat());
  ASSERT_FALSE(plan.ok());
  EXPECT_EQ(plan.status().code(), StatusCode::kNotFound);
  EXPECT_NE(plan.status().message().find("tensor 'w'"), std::string::npos) << plan.status().ToString();
  EXPECT_NE(plan.status().message().find("rank(s) 3"), std::string::npos) << plan.status().ToString();
}

TEST(Planner, DisagreeingTensorsAreErrors) {
  auto a = *TensorMeta::Make("w", DType::kF32, {4});
  auto b = *TensorMeta::Make("w", DType::kI32, {4});  // no conversion from f32
  auto c = *TensorMeta::Make("v", DType::kF32, {4});
  Placement src = *Replicated({a}, std::vector<int>{0});
  auto dtype = MakePlan(src, *Replicated({b}, std::vector<int>{0}), Flat());
  EXPECT_FALSE(dtype.ok());
  EXPECT_NE(dtype.status().message().find("tensor 'w'"), std::string::npos);
  EXPECT_NE(dtype.status().message().find("i32"), std::string::npos) << dtype.status().ToString();
  auto missing = MakePlan(src, *Replicated({c}, std::vector<int>{0}), Flat());
  EXPECT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("tensor 'v'"), std::string::npos) << missing.status().ToString();
  PlanOptions bad;
  bad.chunk_bytes = 0;
  EXPECT_FALSE(MakePlan(src, src, Flat(), bad).ok());
}

// 4096 FSDP2 sources and 2048 replicas of one tensor: 4096 pieces, each relayed to every replica,
// would make 8.4M steps; refused before they are made (the old code built them, ~1.5 GB).
TEST(Planner, TooManyStepsAreRefusedBeforeTheyAreMade) {
  const std::vector<TensorMeta> tensors = {*TensorMeta::Make("w", DType::kBF16, {4096, 16})};
  const std::vector<MeshAxis> src_axes = {Fsdp2Axis("fsdp", 4096)};
  const std::vector<MeshAxis> dst_axes = {ReplicaAxis("dp", 2048)};
  auto src = BuildMesh(tensors, src_axes), dst = BuildMesh(tensors, dst_axes);
  ASSERT_TRUE(src.ok() && dst.ok());
  auto plan = MakePlan(*src, *dst, Topology{});
  ASSERT_FALSE(plan.ok());
  EXPECT_NE(plan.status().message().find("8388608 steps, over the limit of 4194304"), std::string::npos)
      << plan.status().message();
}

// A 16 GiB tensor in 1-byte chunks would be 1.7e10 chunks in a step's 32-bit count (it wrapped).
TEST(Planner, ChunkCountsOverThirtyTwoBitsAreRefused) {
  const std::vector<TensorMeta> tensors = {*TensorMeta::Make("w", DType::kBF16, {int64_t{1} << 31, 4})};
  const std::vector<MeshAxis> axes = {ReplicaAxis("dp", 1)};
  auto src = BuildMesh(tensors, axes), dst = BuildMesh(tensors, axes);
  ASSERT_TRUE(src.ok() && dst.ok());
  PlanOptions options;
  options.chunk_bytes = 1;
  auto plan = MakePlan(*src, *dst, Topology{}, options);
  ASSERT_FALSE(plan.ok());
  EXPECT_EQ(plan.status().message(),
            "plan: tensor 'w': a piece of 17179869184 bytes is more than 4294967295 chunks of chunk_bytes 1 "
            "(the limit per step)");
  options.chunk_bytes = 8;  // 2^31 chunks
  EXPECT_TRUE(MakePlan(*src, *dst, Topology{}, options).ok());
}

TEST(Planner, ChunksPipelineAlongTheChain) {
  auto w = *TensorMeta::Make("w", DType::kU8, {10, 10});
  PlanOptions o;
  o.chunk_bytes = 16;
  auto plan =
      MakePlan(*Replicated({w}, std::vector<int>{0}), *Replicated({w}, std::vector<int>{0, 1, 2}), Flat(), o);
  ASSERT_TRUE(plan.ok());
  ASSERT_EQ(plan->steps.size(), 3u);
  for (const PlanStep& s : plan->steps) {
    EXPECT_EQ(s.chunks, 7u);  // 100 bytes in 16-byte chunks
    EXPECT_EQ(s.root, 0u);
    EXPECT_EQ(s.depth, s.id);
    EXPECT_EQ(s.after, static_cast<int64_t>(s.id) - 1);
  }
  // Pipelined: the fill is two hops of one chunk, not two hops of the tensor.
  const double nic = plan->topology.nic_bytes_per_s(0);
  EXPECT_NEAR(plan->estimate.predicted_s - plan->estimate.lower_bound_s,
              2 * (16 / nic + o.per_chunk_overhead_s) + 7 * o.per_chunk_overhead_s, 1e-12);
  EXPECT_NEAR(plan->estimate.lower_bound_s, 100 / nic, 1e-15);
}

TEST(Planner, JsonRoundTripAndValidation) {
  const std::vector<TensorMeta> tensors = TinyModel();
  auto plan = MakePlan(*FsdpFlat(tensors, 3), ReplicatedTp(tensors, 2, 2), Flat());
  ASSERT_TRUE(plan.ok());
  auto back = Plan::FromJson(plan->ToJson());
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->ToJson(), plan->ToJson());
  EXPECT_EQ(back->Digest(), plan->Digest());

  nlohmann::json broken = plan->ToJson();
  broken["steps"][1]["after"] = 5;
  EXPECT_FALSE(Plan::FromJson(broken).ok());
  broken = plan->ToJson();
  broken["steps"][0]["chunks"] = 999;
  EXPECT_FALSE(Plan::FromJson(broken).ok());
  broken = plan->ToJson();
  broken["steps"][0]["surprise"] = 1;
  auto unknown = Plan::FromJson(broken);
  ASSERT_FALSE(unknown.ok());
  EXPECT_NE(unknown.status().message().find("plan.steps[0]"), std::string::npos)
      << unknown.status().ToString();

  // A step written twice is caught by the coverage check, not by structure.
  Plan twice = *plan;
  PlanStep dup = twice.steps[0];
  dup.id = static_cast<uint32_t>(twice.steps.size());
  dup.root = dup.id;
  twice.steps.push_back(dup);
  EXPECT_TRUE(twice.Validate().ok());
  EXPECT_FALSE(CheckCoverage(twice).ok());
}

}  // namespace
}  // namespace weightport
