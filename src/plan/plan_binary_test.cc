#include "weightport/plan/plan_binary.h"

#include <random>

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "weightport/core/placement_builders.h"
#include "weightport/format/synthetic_model.h"
#include "weightport/plan/planner.h"

namespace weightport {
namespace {

std::vector<TensorMeta> SmallModel() {
  ModelSpec spec = *PresetSpec("tiny", ModelArch::kMoe);
  spec.layers = 2;
  spec.hidden = 256;  // q_proj [256, 256]: whole 128x128 blocks under TP 2
  spec.intermediate = 256;
  spec.heads = 4;
  spec.kv_heads = 2;
  spec.head_dim = 64;
  spec.vocab = 512;
  return ModelTensors(spec);
}

// A plan with every feature the binary form carries: relays, splits, conversions, quantised
// tensors with per-tensor scales, compression and hosts.
Plan RichPlan() {
  const std::vector<TensorMeta> tensors = SmallModel();
  Placement src = *FsdpFlat(tensors, 4);
  std::vector<MeshAxis> axes = {ReplicaAxis("dp", 3), TensorParallelAxis("tp", 2)};
  Placement dst = *BuildMesh(tensors, axes);
  std::vector<HostSpec> hosts = {
      {"a", 100, {0, 1}, {0, 1}}, {"b", 25, {2, 3}, {2, 3}}, {"c", 10, {}, {4, 5}}};
  PlanOptions o;
  o.chunk_bytes = 16384;
  o.compressor_gbps = 20;
  o.transforms = {{"*mlp*", DType::kBF16, kernels::Fp8Scaling::kBlock128},
                  {"*q_proj*", DType::kF8E4M3, kernels::Fp8Scaling::kBlock128},
                  {"model.norm.weight", DType::kF8E4M3, kernels::Fp8Scaling::kPerTensor}};
  auto plan = MakePlan(src, dst, *Topology::Make(hosts, 50, 400), o);
  if (!plan.ok()) ADD_FAILURE() << plan.status().ToString();
  return plan.ok() ? std::move(*plan) : Plan{};
}

TEST(PlanBinary, RoundTripsEveryField) {
  const Plan plan = RichPlan();
  ASSERT_GT(plan.steps.size(), 10u);
  EXPECT_FALSE(plan.destination_scaling.empty());
  bool relayed = false, converted = false, compressed = false;
  for (const PlanStep& s : plan.steps) {
    relayed |= s.after >= 0;
    converted |= s.transform != TransformKind::kIdentity;
    compressed |= s.compress;
  }
  EXPECT_TRUE(relayed && converted && compressed);
  const std::string bytes = EncodePlanBinary(plan);
  std::string_view in = bytes;
  auto back = DecodePlanBinary(in);
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_TRUE(in.empty());
  // The JSON names every field: equal JSON (without the derived estimate) is an equal plan.
  nlohmann::json a = plan.ToJson(), b = back->ToJson();
  a.erase("estimate");
  b.erase("estimate");
  EXPECT_EQ(a, b);
  EXPECT_EQ(back->Digest(), plan.Digest());
  // Far smaller than the JSON.
  EXPECT_LT(bytes.size() * 5, plan.ToJson().dump().size());
}

// Integer and boolean tensors (a step counter, position ids, masks) travel too: every dtype decodes.
TEST(PlanBinary, RoundTripsTensorsOfEveryDtype) {
  std::vector<TensorMeta> tensors = SmallModel();
  const DType every[] = {DType::kF64,    DType::kF32, DType::kF16, DType::kBF16, DType::kF8E4M3,
                         DType::kF8E5M2, DType::kI64, DType::kI32, DType::kI16,  DType::kI8,
                         DType::kU64,    DType::kU32, DType::kU16, DType::kU8,   DType::kBool};
  ASSERT_GE(tensors.size(), std::size(every));
  for (size_t i = 0; i < std::size(every); ++i) tensors[i].dtype = every[i];
  auto src = Fsdp2(tensors, 2);
  auto dst = Fsdp2(tensors, 1);
  auto topology = Topology::Make({{"a", 100, {0, 1}, {0}}}, 50, 400);
  ASSERT_TRUE(src.ok()) << src.status().ToString();
  ASSERT_TRUE(dst.ok()) << dst.status().ToString();
  ASSERT_TRUE(topology.ok()) << topology.status().ToString();
  auto plan = MakePlan(*src, *dst, *topology, PlanOptions{});
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  const std::string bytes = EncodePlanBinary(*plan);
  std::string_view in = bytes;
  auto back = DecodePlanBinary(in);
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->Digest(), plan->Digest());
}

TEST(PlanBinary, JsonBytesIsTheSizeOfTheJsonText) {
  const Plan plan = RichPlan();
  EXPECT_EQ(plan.JsonBytes(), plan.ToJson().dump().size());
  Plan empty = plan;
  empty.steps.clear();
  EXPECT_EQ(empty.JsonBytes(), empty.ToJson().dump().size());
  empty.steps.push_back(plan.steps.front());
  EXPECT_EQ(empty.JsonBytes(), empty.ToJson().dump().size());
}

TEST(PlanBinary, DigestSeesEveryChange) {
  const Plan plan = RichPlan();
  Plan other = plan;
  other.steps.back().depth += 1;
  EXPECT_NE(other.Digest(), plan.Digest());
  other = plan;
  other.tensors[0].name += "x";
  EXPECT_NE(other.Digest(), plan.Digest());
  other = plan;
  other.options.chunk_bytes *= 2;
  EXPECT_NE(other.Digest(), plan.Digest());
}

TEST(PlanBinary, TwoPlansBackToBackDecodeInOrder) {
  const Plan plan = RichPlan();
  std::string bytes = EncodePlanBinary(plan);
  EncodePlanBinary(plan, bytes);
  std::string_view in = bytes;
  ASSERT_TRUE(DecodePlanBinary(in).ok());
  ASSERT_TRUE(DecodePlanBinary(in).ok());
  EXPECT_TRUE(in.empty());
}

TEST(PlanBinary, TruncatedOrCorruptInputFailsCleanly) {
  const Plan plan = RichPlan();
  const std::string bytes = EncodePlanBinary(plan);
  for (size_t cut : {size_t{0}, size_t{3}, size_t{9}, bytes.size() / 3, bytes.size() / 2, bytes.size() - 1}) {
    std::string_view in = std::string_view(bytes).substr(0, cut);
    EXPECT_FALSE(DecodePlanBinary(in).ok()) << "cut at " << cut;
  }
  std::mt19937 rng(7);
  int failed = 0;
  for (int i = 0; i < 300; ++i) {
    std::string bad = bytes;
    const size_t at = 7 + rng() % (bad.size() - 7);
    bad[at] = static_cast<char>(rng());
    std::string_view in = bad;
    auto decoded = DecodePlanBinary(in);  // never crashes; a change that still decodes is a valid plan
    if (!decoded.ok()) ++failed;
  }
  EXPECT_GT(failed, 0);
  std::string huge = "WPPLAN1";
  plan_binary::PutVarint(huge, 4096);
  plan_binary::PutVarint(huge, 1ull << 60);  // relay fanout out of range
  std::string_view in = huge;
  auto r = DecodePlanBinary(in);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("relay_fanout"), std::string::npos) << r.status().ToString();
}

TEST(PlanBinary, VarintsAndStringsRoundTrip) {
  std::string out;
  const std::vector<uint64_t> values = {0, 1, 127, 128, 300, 1ull << 32, ~0ull};
  for (uint64_t v : values) plan_binary::PutVarint(out, v);
  for (int64_t v : {int64_t{0}, int64_t{-1}, int64_t{5}, INT64_MIN, INT64_MAX})
    plan_binary::PutSigned(out, v);
  plan_binary::PutString(out, std::string("a\0b", 3));
  std::string_view in = out;
  for (uint64_t v : values) EXPECT_EQ(*plan_binary::GetVarint(in, "v"), v);
  for (int64_t v : {int64_t{0}, int64_t{-1}, int64_t{5}, INT64_MIN, INT64_MAX})
    EXPECT_EQ(*plan_binary::GetSigned(in, "s"), v);
  EXPECT_EQ(*plan_binary::GetString(in, "str"), std::string("a\0b", 3));
  EXPECT_TRUE(in.empty());
}

}  // namespace
}  // namespace weightport
