#include "weightport/core/placement.h"
#include "core/core_test_util.h"

#include <gtest/gtest.h>

#include <random>

namespace weightport {
namespace {

using core_test::InSlice;
using core_test::Meta;
using core_test::Numel;

bool HasSubstr(const Status& s, const std::string& sub) { return s.message().find(sub) != std::string::npos; }

Placement TwoTensors() { return Placement::Make({Meta("w", {4, 6}), Meta("b", {6}, DType::kF32)}).value(); }

TEST(PlacementTest, QueriesAndBytes) {
  Placement p = TwoTensors();
  p.AddShard(3, "w", Slice::MakeBox({0, 0}, {2, 6}));
  p.AddShard(3, "b", Slice::Full({6}));
  p.AddShard(7, "w", Slice::MakeBox({2, 0}, {2, 6}));
  p.AddShard(7, "b", Slice::Full({6}));
  p.AddRank(10);  // holds nothing
  ASSERT_TRUE(p.Validate().ok());
  EXPECT_EQ(p.ranks(), (std::vector<int>{3, 7, 10}));
  EXPECT_EQ(p.shards(3).size(), 2u);
  EXPECT_TRUE(p.shards(10).empty());
  EXPECT_TRUE(p.shards(99).empty());
  EXPECT_EQ(p.BytesOnRank(3), 2u * 6 * 2 + 6 * 4);
  EXPECT_EQ(p.BytesOnRank(10), 0u);
  EXPECT_EQ(p.ModelBytes(), 24u * 2 + 6 * 4);
  EXPECT_EQ(p.TotalBytes(), 24u * 2 + 2 * 6 * 4);  // b replicated twice
  const auto holders = p.HoldersOf("b");
  ASSERT_EQ(holders.size(), 2u);
  EXPECT_EQ(holders[0].rank, 3);
  EXPECT_EQ(holders[1].rank, 7);
  EXPECT_TRUE(p.HoldersOf("nope").empty());
  const auto by_tensor = p.HoldersByTensor();
  ASSERT_EQ(by_tensor.size(), 2u);
  EXPECT_EQ(by_tensor[0], p.HoldersOf("w"));
  EXPECT_EQ(by_tensor[1], holders);
  EXPECT_NE(p.FindTensor("w"), nullptr);
  EXPECT_EQ(p.FindTensor("x"), nullptr);
  EXPECT_TRUE(p.CheckCoverage().ok());
}

TEST(PlacementTest, MakeRejectsDuplicateTensors) {
  auto p = Placement::Make({Meta("w", {2}), Meta("w", {3})});
  ASSERT_FALSE(p.ok());
  EXPECT_TRUE(HasSubstr(p.status(), "'w'"));
}

TEST(PlacementTest, ValidateNamesRankAndTensor) {
  struct Case {
    std::vector<std::pair<int, Shard>> shards;
    std::string want;
  };
  const std::vector<Case> cases{
      {{{2, {"ghost", Slice::Full({4})}}}, "rank 2: tensor 'ghost': no such tensor"},
      {{{1, {"w", Slice::MakeBox({0, 0}, {5, 6})}}}, "rank 1: tensor 'w'"},
      {{{1, {"w", Slice::MakeBox({0}, {4})}}},
       "rank 1: tensor 'w': slice [0:4]: box of rank 1 for a tensor of rank 2"},
      {{{4, {"w", Slice::MakeFlat(20, 5)}}}, "rank 4: tensor 'w'"},
      {{{0, {"w", Slice::MakeBox({0, 0}, {3, 3})}}, {0, {"w", Slice::MakeBox({2, 2}, {2, 2})}}}, "overlap"},
      {{{0, {"w", Slice::MakeFlat(0, 10)}}, {0, {"w", Slice::MakeFlat(9, 3)}}}, "overlap"},
      {{{5, {"w", Slice::MakeBox({1, 4}, {1, 1})}}, {5, {"w", Slice::MakeFlat(8, 3)}}},
       "rank 5: tensor 'w': slices [1:2, 4:5] and flat[8:11] overlap"},
      {{{-1, {"w", Slice::Full({4, 6})}}}, "rank -1 is negative"},
  };
  for (const Case& c : cases) {
    Placement p = TwoTensors();
    for (const auto& [rank, shard] : c.shards) p.AddShard(rank, shard);
    const Status s = p.Validate();
    EXPECT_FALSE(s.ok()) << c.want;
    EXPECT_TRUE(HasSubstr(s, c.want)) << s.ToString();
  }
  // Touching but disjoint slices, and the same slice on two ranks, are fine.
  Placement p = TwoTensors();
  p.AddShard(0, "w", Slice::MakeBox({0, 0}, {2, 6}));
  p.AddShard(0, "w", Slice::MakeFlat(12, 3));
  p.AddShard(0, "w", Slice::MakeBox({2, 3}, {2, 3}));
  p.AddShard(1, "w", Slice::MakeBox({0, 0}, {2, 6}));
  EXPECT_TRUE(p.Validate().ok()) << p.Validate().ToString();
}

TEST(PlacementTest, ValidateAgainstManifest) {
  auto manifest = Manifest::FromMetas(
      7, std::vector<TensorMeta>{Meta("w", {4, 6}, DType::kF32), Meta("b", {6}), Meta("extra", {2})});
  ASSERT_TRUE(manifest.ok());
  Placement p = Placement::Make({Meta("w", {4, 6}, DType::kBF16), Meta("b", {6})}).value();
  Status s = p.ValidateAgainst(*manifest);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(HasSubstr(s, "tensor 'w' has dtype bf16 but the manifest has f32")) << s.ToString();

  p = Placement::Make({Meta("w", {4, 6}, DType::kF32), Meta("b", {3, 2})}).value();
  s = p.ValidateAgainst(*manifest);
  EXPECT_TRUE(HasSubstr(s, "tensor 'b' has shape [3, 2] but the manifest has [6]")) << s.ToString();

  p = Placement::Make({Meta("missing", {1})}).value();
  EXPECT_EQ(p.ValidateAgainst(*manifest).code(), StatusCode::kNotFound);

  auto from = Placement::FromManifest(*manifest);
  ASSERT_TRUE(from.ok());
  from->AddShard(0, "w", Slice::Full({4, 6}));
  EXPECT_TRUE(from->ValidateAgainst(*manifest).ok());
  from->AddShard(0, "w", Slice::MakeFlat(0, 1));  // overlap is still caught
  EXPECT_FALSE(from->ValidateAgainst(*manifest).ok());
}

TEST(PlacementTest, CoverageReportsTheGap) {
  Placement p = TwoTensors();
  p.AddShard(0, "w", Slice::MakeBox({0, 0}, {4, 3}));
  p.AddShard(1, "w", Slice::MakeFlat(3, 3));   // row 0, columns 3..5
  p.AddShard(2, "w", Slice::MakeFlat(9, 15));  // [9, 24): overlaps rank 0's box, covers the rest
  p.AddShard(0, "b", Slice::Full({6}));
  EXPECT_TRUE(p.CheckCoverage().ok()) << p.CheckCoverage().ToString();
  Placement q = TwoTensors();
  q.AddShard(0, "w", Slice::MakeBox({0, 0}, {4, 3}));
  q.AddShard(1, "w", Slice::MakeBox({0, 3}, {3, 3}));
  const auto gap = q.FindUncovered();
  ASSERT_TRUE(gap.has_value());
  EXPECT_EQ(gap->tensor, "w");
  EXPECT_EQ(gap->region, (Box{{3, 3}, {1, 3}}));
  const Status s = q.CheckCoverage();
  EXPECT_TRUE(HasSubstr(s, "tensor 'w' [4, 6]: region [3:4, 3:6] is held by no rank")) << s.ToString();
  // An empty tensor needs no holder; a scalar does.
  Placement r = Placement::Make({Meta("empty", {0, 4}), Meta("scalar", {})}).value();
  r.AddRank(0);
  EXPECT_EQ(r.FindUncovered()->tensor, "scalar");
  r.AddShard(0, "scalar", Slice());
  EXPECT_TRUE(r.CheckCoverage().ok());
}

// Random placements on small tensors: Validate's overlap verdict and FindUncovered agree with a
// per-element count.
TEST(PlacementTest, ValidateAndCoverageMatchPerElementReference) {
  std::mt19937_64 rng(42);
  auto uniform = [&rng](int64_t lo, int64_t hi) {
    return std::uniform_int_distribution<int64_t>(lo, hi)(rng);
  };
  auto random_slice = [&](const Shape& shape) {
    if (uniform(0, 2) == 0) {
      const int64_t n = Numel(shape), start = uniform(0, n - 1);
      return Slice::MakeFlat(start, uniform(1, n - start));
    }
    Box b;
    for (int64_t d : shape) {
      const int64_t start = uniform(0, d - 1);
      b.start.push_back(start);
      b.length.push_back(uniform(1, d - start));
    }
    return Slice(b);
  };
  int overlapping = 0, uncovered = 0;
  for (int c = 0; c < 1500; ++c) {
    Shape shape(uniform(0, 4));
    for (auto& d : shape) d = uniform(1, 4);
    Placement p = Placement::Make({Meta("t", shape)}).value();
    const int shards = static_cast<int>(uniform(1, 4));
    for (int i = 0; i < shards; ++i) p.AddShard(static_cast<int>(uniform(0, 1)), "t", random_slice(shape));
    bool overlap = false, gap = false;
    for (int64_t e = 0; e < Numel(shape); ++e) {
      int held = 0;
      for (int rank : p.ranks()) {
        int on_rank = 0;
        for (const Shard& s : p.shards(rank)) on_rank += InSlice(e, s.slice, shape);
        overlap |= on_rank > 1;
        held += on_rank;
      }
      gap |= held == 0;
    }
    overlapping += overlap;
    uncovered += gap;
    const Status v = p.Validate();
    ASSERT_EQ(v.ok(), !overlap) << v.ToString();
    const auto found = p.FindUncovered();
    ASSERT_EQ(found.has_value(), gap);
    if (found) {  // the reported region is really uncovered
      for (int64_t e = 0; e < Numel(shape); ++e) {
        if (!InSlice(e, Slice(found->region), shape)) continue;
        for (int rank : p.ranks())
          for (const Shard& s : p.shards(rank)) ASSERT_FALSE(InSlice(e, s.slice, shape));
      }
    }
  }
  EXPECT_GT(overlapping, 100);
  EXPECT_GT(uncovered, 100);
}

TEST(PlacementTest, CoverageOnLargeTensorsIsCheap) {
  // FSDP-style flat ranges over a [151936, 8192] tensor on 1024 ranks: boxes, not elements.
  const Shape shape{151936, 8192};
  Placement p = Placement::Make({Meta("model.embed_tokens.weight", shape)}).value();
  const int64_t total = 151936LL * 8192, per = total / 1024 + 1;
  for (int r = 0; r < 1024; ++r) {
    const int64_t lo = std::min(total, r * per), hi = std::min(total, lo + per);
    if (r != 500 && lo < hi) p.AddShard(r, "model.embed_tokens.weight", Slice::MakeFlat(lo, hi - lo));
  }
  ASSERT_TRUE(p.Validate().ok());
  const auto gap = p.FindUncovered();
  ASSERT_TRUE(gap.has_value());
  EXPECT_EQ(gap->region.start[0], 500 * per / 8192);
  p.AddShard(500, "model.embed_tokens.weight", Slice::MakeFlat(500 * per, per));
  EXPECT_TRUE(p.CheckCoverage().ok());
}

}  // namespace
}  // namespace weightport
