// Quantising to f8e4m3 in 128x128 blocks inside a plan: the sources quantise whole blocks, each
// piece carries its scales, relays forward them, and slices off block boundaries are refused by name.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "plan/plan_test_util.h"
#include "weightport/core/placement.h"
#include "weightport/plan/planner.h"
#include "weightport/plan/quantized.h"

namespace weightport {
namespace {

// A matrix on whole blocks, one with partial blocks at its edges, and a vector.
std::vector<TensorMeta> Model(DType dtype) {
  return {*TensorMeta::Make("layers.0.mlp.up_proj.weight", dtype, {512, 256}),
          *TensorMeta::Make("layers.0.attn.o_proj.weight", dtype, {200, 300}),
          *TensorMeta::Make("layers.0.norm.weight", dtype, {300})};
}

// Each rank's box of each tensor, by name: {start, length}; tensors not listed are held whole.
using Boxes = std::map<std::string, std::pair<std::vector<int64_t>, std::vector<int64_t>>>;
Placement Layout(DType dtype, const std::vector<Boxes>& ranks) {
  Placement p = *Placement::Make(Model(dtype));
  for (size_t r = 0; r < ranks.size(); ++r) {
    p.AddRank(static_cast<int>(r));
    for (const TensorMeta& t : Model(dtype)) {
      auto it = ranks[r].find(t.name);
      p.AddShard(
          static_cast<int>(r), t.name,
          it == ranks[r].end() ? Slice::Full(t.shape) : Slice::MakeBox(it->second.first, it->second.second));
    }
  }
  return p;
}

// Two trainer ranks splitting the matrices by rows (on block boundaries).
Placement Trainers(DType dtype) {
  return Layout(dtype, {{{"layers.0.mlp.up_proj.weight", {{0, 0}, {256, 256}}},
                         {"layers.0.attn.o_proj.weight", {{0, 0}, {128, 300}}}},
                        {{"layers.0.mlp.up_proj.weight", {{256, 0}, {256, 256}}},
                         {"layers.0.attn.o_proj.weight", {{128, 0}, {72, 300}}}}});
}

// Three replicas of a TP-2 layout splitting the matrices by columns.
Placement Replicas(DType dtype) {
  const Boxes left = {{"layers.0.mlp.up_proj.weight", {{0, 0}, {512, 128}}},
                      {"layers.0.attn.o_proj.weight", {{0, 0}, {200, 256}}}};
  const Boxes right = {{"layers.0.mlp.up_proj.weight", {{0, 128}, {512, 128}}},
                       {"layers.0.attn.o_proj.weight", {{0, 256}, {200, 44}}}};
  return Layout(dtype, {left, right, left, right, left, right});
}

Result<Plan> Quantizing(const Placement& src, const Placement& dst, uint64_t chunk_bytes = 1000,
                        int fanout = 1) {
  PlanOptions o;
  o.chunk_bytes = chunk_bytes;  // cuts pieces inside the e4m3 bytes and inside the scales
  o.relay_fanout = fanout;
  o.transforms = {{"*", DType::kF8E4M3}};
  return MakePlan(src, dst, Topology(), o);
}

uint64_t Blocks(int64_t n) { return static_cast<uint64_t>((n + 127) / 128); }

TEST(PlannerQuantize, SourcesQuantiseWholeBlocksAndRelaysForwardTheE4m3BytesAndScales) {
  for (DType dtype : {DType::kBF16, DType::kF32}) {
    auto plan = Quantizing(Trainers(dtype), Replicas(dtype));
    ASSERT_TRUE(plan.ok()) << plan.status().ToString();
    uint64_t relays = 0;
    for (const PlanStep& s : plan->steps) {
      EXPECT_TRUE(plan->Quantized(s.tensor));
      EXPECT_EQ(s.transform, s.after < 0 ? TransformKind::kConvertAtSender : TransformKind::kIdentity)
          << s.id;
      EXPECT_EQ(plan->WireDType(s), DType::kF8E4M3);
      const Box& b = s.piece.box();
      const uint64_t scales = b.rank() == 2 ? Blocks(b.length[0]) * Blocks(b.length[1]) : Blocks(b.length[0]);
      EXPECT_EQ(s.bytes, static_cast<uint64_t>(s.piece.num_elements()) + 4 * scales) << s.id;
      relays += s.after >= 0;
    }
    EXPECT_GT(relays, 0u);
    // Three copies of each matrix and six of the vector, one byte per element plus the scales:
    // 512x256 is 4x2 blocks, 200x300 is 2x3 (cut 2 + 1 by the TP split), the vector 3 blocks.
    EXPECT_EQ(plan->TotalBytes(), 3 * (512 * 256 + 4 * 8) + 3 * (200 * 300 + 4 * 6) + 6 * (300 + 4 * 3));
    EXPECT_TRUE(CheckCoverage(*plan).ok());
    EXPECT_EQ(plan_test::RunPlanInMemory(*plan), "") << DTypeName(dtype);
    auto round = Plan::FromJson(plan->ToJson());
    ASSERT_TRUE(round.ok()) << round.status().ToString();
    EXPECT_EQ(round->Digest(), plan->Digest());
  }
}

TEST(PlannerQuantize, AStoredShardKeepsItsScalesAlignedAfterItsE4m3Bytes) {
  auto plan = Quantizing(Trainers(DType::kBF16), Replicas(DType::kBF16));
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  for (const PlannedShard& s : plan->destinations[1].shards) {
    auto m = QuantizedMatrixOf(s.slice, plan->tensors[s.tensor].shape, kernels::Fp8Scaling::kBlock128);
    ASSERT_TRUE(m.ok());
    EXPECT_EQ(StoredScaleOffset(s.slice.num_elements()) % 4, 0u);
    EXPECT_EQ(s.bytes, StoredScaleOffset(s.slice.num_elements()) + 4 * static_cast<uint64_t>(m->scales));
  }
  // dst rank 1 holds columns 256..300 of the 200x300 matrix: one partial block column, two rows.
  auto m = QuantizedMatrixOf(Slice::MakeBox({0, 256}, {200, 44}), {200, 300}, kernels::Fp8Scaling::kBlock128);
  ASSERT_TRUE(m.ok());
  EXPECT_EQ(m->rows, 200);
  EXPECT_EQ(m->cols, 44);
  EXPECT_EQ(m->scales, 2);
}

TEST(PlannerQuantize, APieceSeveralSourcesHoldIsSplitInWholeBlockRows) {
  PlanOptions o;
  o.chunk_bytes = 4096;
  o.split_bytes = 4096;
  o.transforms = {{"*", DType::kF8E4M3}};
  // Three full copies at the sources, one destination rank: the 512-row matrix is shared by rows.
  auto plan = MakePlan(Layout(DType::kBF16, {{}, {}, {}}), Layout(DType::kBF16, {{}}), Topology(), o);
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  size_t up = 0;
  for (const PlanStep& s : plan->steps) {
    ASSERT_TRUE(ScaleGridSlice(s.piece, plan->tensors[s.tensor].shape, kernels::Fp8Scaling::kBlock128).ok())
        << s.piece.ToString();
    up += plan->tensors[s.tensor].name == "layers.0.mlp.up_proj.weight";
  }
  EXPECT_EQ(up, 3u) << "512 rows are 4 block rows, among 3 sources";
  EXPECT_TRUE(CheckCoverage(*plan).ok());
  EXPECT_EQ(plan_test::RunPlanInMemory(*plan), "");
}

TEST(PlannerQuantize, APieceOfOneBlockRowIsSplitAlongItsColumns) {
  PlanOptions o;
  o.chunk_bytes = 4096;
  o.split_bytes = 4096;
  o.transforms = {{"*", DType::kF8E4M3}};
  Placement src = *Placement::Make({*TensorMeta::Make("wide", DType::kBF16, {100, 1024})});
  for (int r = 0; r < 4; ++r) src.AddShard(r, "wide", Slice::Full({100, 1024}));
  Placement dst = *Placement::Make({*TensorMeta::Make("wide", DType::kBF16, {100, 1024})});
  dst.AddShard(0, "wide", Slice::Full({100, 1024}));
  auto plan = MakePlan(src, dst, Topology(), o);
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  ASSERT_EQ(plan->steps.size(), 4u) << "8 block columns among 4 sources";
  for (const PlanStep& s : plan->steps) EXPECT_EQ(s.piece.box().length, (std::vector<int64_t>{100, 256}));
  EXPECT_EQ(plan_test::RunPlanInMemory(*plan), "");
}

TEST(PlannerQuantize, AnEmptyShardNeedsNoBlocks) {
  // dst rank 1 holds no columns of the 200x300 matrix, at column 300 (not a block boundary).
  const Placement dst = Layout(DType::kBF16, {{}, {{"layers.0.attn.o_proj.weight", {{0, 300}, {200, 0}}}}});
  auto plan = Quantizing(Trainers(DType::kBF16), dst);
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  EXPECT_TRUE(CheckCoverage(*plan).ok());
  EXPECT_EQ(plan_test::RunPlanInMemory(*plan), "");
}

TEST(PlannerQuantize, SlicesOffBlockBoundariesAreRefusedNamingTensorAndRanks) {
  // The destinations split the 512x256 matrix at column 100.
  const Placement dst = Layout(DType::kBF16, {{{"layers.0.mlp.up_proj.weight", {{0, 0}, {512, 100}}}},
                                              {{"layers.0.mlp.up_proj.weight", {{0, 100}, {512, 156}}}}});
  auto plan = Quantizing(Trainers(DType::kBF16), dst);
  ASSERT_FALSE(plan.ok());
  EXPECT_NE(plan.status().message().find("layers.0.mlp.up_proj.weight"), std::string::npos)
      << plan.status().ToString();
  EXPECT_NE(plan.status().message().find("block boundaries"), std::string::npos) << plan.status().ToString();
  // Only vectors and matrices have a block layout.
  Placement cube = *Placement::Make({*TensorMeta::Make("experts", DType::kBF16, {4, 128, 128})});
  cube.AddRank(0);
  cube.AddShard(0, "experts", Slice::Full({4, 128, 128}));
  plan = Quantizing(cube, cube);
  ASSERT_FALSE(plan.ok());
  EXPECT_NE(plan.status().message().find("experts"), std::string::npos) << plan.status().ToString();
  EXPECT_NE(plan.status().message().find("vectors and matrices"), std::string::npos)
      << plan.status().ToString();
}

// Sources off block boundaries (rows split at 100; FSDP's flat shards): the pieces travel in bf16
// and each receiver quantises its whole shard; relays forward the bf16 bytes.
TEST(PlannerQuantize, SourcesOffBlockBoundariesSendTheirDtypeAndEachReceiverQuantises) {
  const Placement rows100 = Layout(DType::kBF16, {{{"layers.0.mlp.up_proj.weight", {{0, 0}, {100, 256}}}},
                                                  {{"layers.0.mlp.up_proj.weight", {{100, 0}, {412, 256}}}}});
  Placement flat_shards = *Placement::Make(Model(DType::kBF16));
  for (const TensorMeta& t : Model(DType::kBF16)) {
    flat_shards.AddShard(0, t.name, Slice::MakeFlat(0, t.num_elements() / 3));
    flat_shards.AddShard(1, t.name,
                         Slice::MakeFlat(t.num_elements() / 3, t.num_elements() - t.num_elements() / 3));
  }
  const Placement& flat = flat_shards;
  for (const Placement* src : {&rows100, &flat}) {
    auto plan = Quantizing(*src, Replicas(DType::kBF16));
    ASSERT_TRUE(plan.ok()) << plan.status().ToString();
    uint64_t at_receiver = 0;
    for (const PlanStep& s : plan->steps) {
      const bool up = plan->tensors[s.tensor].name == "layers.0.mlp.up_proj.weight";
      if (src == &rows100 && !up) {  // held whole at the sources: quantised there
        EXPECT_EQ(s.transform, s.after < 0 ? TransformKind::kConvertAtSender : TransformKind::kIdentity);
        continue;
      }
      EXPECT_EQ(s.transform, TransformKind::kConvertAtReceiver) << s.id;
      EXPECT_EQ(s.bytes, static_cast<uint64_t>(s.piece.num_elements()) * 2) << "bf16 on the wire";
      ++at_receiver;
    }
    EXPECT_GT(at_receiver, 0u);
    EXPECT_TRUE(CheckCoverage(*plan).ok());
    EXPECT_EQ(plan_test::RunPlanInMemory(*plan), "");
  }
}

// One scale per tensor: its scale grid is one f32, and only the whole tensor is whole blocks.
TEST(PlannerQuantize, APerTensorScaleGridIsOneScaleForTheWholeTensor) {
  constexpr auto kPerTensor = kernels::Fp8Scaling::kPerTensor;
  EXPECT_EQ(*ScaleGridShape({200, 300}, kPerTensor), (Shape{1, 1}));
  EXPECT_EQ(*ScaleGridShape({300}, kPerTensor), (Shape{1}));
  auto whole = QuantizedMatrixOf(Slice::Full({200, 300}), {200, 300}, kPerTensor);
  ASSERT_TRUE(whole.ok()) << whole.status().ToString();
  EXPECT_EQ(whole->scales, 1);
  EXPECT_EQ(*StoredQuantizedBytes(Slice::Full({200, 300}), {200, 300}, kPerTensor), 200u * 300u + 4u);
  auto half = ScaleGridSlice(Slice::MakeBox({0, 0}, {128, 300}), {200, 300}, kPerTensor);
  ASSERT_FALSE(half.ok());
  EXPECT_NE(half.status().message().find("not the whole tensor"), std::string::npos)
      << half.status().ToString();
  EXPECT_EQ(ScaleGridSlice(Slice::MakeBox({128, 0}, {0, 300}), {200, 300}, kPerTensor)->num_elements(), 0);
  EXPECT_EQ(*ParseFp8Scaling(Fp8ScalingName(kPerTensor)), kPerTensor);
  EXPECT_FALSE(ParseFp8Scaling("block64").ok());
  EXPECT_EQ(kernels::Fp8Scaling{}, kernels::Fp8Scaling::kBlock128)
      << "a scaling left unset means block scales";
}

// Per-tensor scales for destinations that split a tensor (TP) are refused naming the tensor; for
// whole replicas each tensor is quantised where it is whole: at the sources for the vector they
// hold whole, at each receiver for the matrices they split by rows.
TEST(PlannerQuantize, PerTensorScalesAreQuantisedWhereTheTensorIsWhole) {
  PlanOptions o;
  o.chunk_bytes = 1000;
  o.transforms = {{"*", DType::kF8E4M3, kernels::Fp8Scaling::kPerTensor}};
  auto split = MakePlan(Trainers(DType::kBF16), Replicas(DType::kBF16), Topology(), o);
  ASSERT_FALSE(split.ok());
  EXPECT_NE(split.status().message().find("layers.0.mlp.up_proj.weight"), std::string::npos)
      << split.status().ToString();
  EXPECT_NE(split.status().message().find("whole tensor"), std::string::npos) << split.status().ToString();

  auto plan = MakePlan(Trainers(DType::kBF16), Layout(DType::kBF16, {{}, {}, {}}), Topology(), o);
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  for (const PlanStep& s : plan->steps) {
    const bool vector = plan->tensors[s.tensor].shape.size() == 1;
    if (vector) {
      EXPECT_EQ(s.transform, s.after < 0 ? TransformKind::kConvertAtSender : TransformKind::kIdentity)
          << s.id;
      EXPECT_EQ(s.bytes, 300u + 4u) << "e4m3 and one scale";
    } else {
      EXPECT_EQ(s.transform, TransformKind::kConvertAtReceiver) << s.id;
    }
  }
  for (const PlannedShard& s : plan->destinations[0].shards)
    EXPECT_EQ(s.bytes, StoredScaleOffset(s.slice.num_elements()) + 4);
  EXPECT_TRUE(CheckCoverage(*plan).ok());
  EXPECT_EQ(plan_test::RunPlanInMemory(*plan), "");
  auto round = Plan::FromJson(plan->ToJson());
  ASSERT_TRUE(round.ok()) << round.status().ToString();
  EXPECT_EQ(round->Digest(), plan->Digest());
  EXPECT_EQ(round->Fp8ScalingOf(0), kernels::Fp8Scaling::kPerTensor);
  EXPECT_EQ(round->options.transforms.at(0).scaling, kernels::Fp8Scaling::kPerTensor);
  // Plans with block scales only are written as before (their digests do not change).
  auto block = Quantizing(Trainers(DType::kBF16), Replicas(DType::kBF16));
  ASSERT_TRUE(block.ok());
  EXPECT_FALSE(block->ToJson().contains("destination_scaling"));
  EXPECT_FALSE(block->ToJson()["options"]["transforms"][0].contains("scaling"));
  // Sources that all hold every tensor whole (data parallel): a large piece is not split among them
  // (no part of it would be whole); one source quantises each tensor.
  auto replicated =
      MakePlan(Layout(DType::kBF16, {{}, {}}), Layout(DType::kBF16, {{}, {}, {}}), Topology(), o);
  ASSERT_TRUE(replicated.ok()) << replicated.status().ToString();
  for (const PlanStep& s : replicated->steps) {
    EXPECT_EQ(s.piece, Slice::Full(replicated->tensors[s.tensor].shape)) << s.id;
    EXPECT_EQ(s.transform, s.after < 0 ? TransformKind::kConvertAtSender : TransformKind::kIdentity) << s.id;
  }
  EXPECT_EQ(plan_test::RunPlanInMemory(*replicated), "");
  nlohmann::json bad = plan->ToJson();
  bad["destination_scaling"][1] = "block64";
  EXPECT_NE(Plan::FromJson(bad).status().message().find("destination_scaling[1]"), std::string::npos)
      << Plan::FromJson(bad).status().ToString();
  Plan wrong = *plan;
  wrong.destination_dtypes[2] = DType::kBF16;  // the vector, no longer quantised, keeps its one scale
  EXPECT_NE(
      wrong.Validate().message().find("'layers.0.norm.weight' has per-tensor scales but is not quantised"),
      std::string::npos)
      << wrong.Validate().ToString();
  wrong = *plan;
  std::fill(wrong.destination_scaling.begin(), wrong.destination_scaling.end(),
            kernels::Fp8Scaling::kBlock128);
  EXPECT_NE(wrong.Validate().message().find("no per-tensor scale"), std::string::npos);
}

TEST(PlannerQuantize, ValidateRefusesAShardQuantisedBothWays) {
  auto plan = Quantizing(Trainers(DType::kBF16), Replicas(DType::kBF16), 1000, 0);  // no relays
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  Plan bad = *plan;
  // The two trainers' pieces of one destination shard: one of them made to quantise at the receiver.
  for (PlanStep& s : bad.steps)
    if (s.after < 0 && s.from.rank == 1 && plan->tensors[s.tensor].name == "layers.0.mlp.up_proj.weight") {
      s.transform = TransformKind::kConvertAtReceiver;
      s.bytes = static_cast<uint64_t>(s.piece.num_elements()) * 2;
      s.chunks = static_cast<uint32_t>((s.bytes + bad.options.chunk_bytes - 1) / bad.options.chunk_bytes);
      break;
    }
  EXPECT_NE(bad.Validate().message().find("quantised at the sources by step"), std::string::npos)
      << bad.Validate().ToString();
  bad = *plan;
  bad.steps[0].bytes -= 4;  // without one of its scales
  EXPECT_NE(bad.Validate().message().find("byte count does not match"), std::string::npos);
  bad = *plan;
  bad.destinations[0].shards[0].bytes =
      static_cast<uint64_t>(bad.destinations[0].shards[0].slice.num_elements());
  EXPECT_NE(bad.Validate().message().find("byte count does not match its slice"), std::string::npos);
}

}  // namespace
}  // namespace weightport
