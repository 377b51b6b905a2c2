#include <gtest/gtest.h>

#include <climits>
#include <random>

#include <nlohmann/json.hpp>

#include "core/core_test_util.h"
#include "weightport/core/json_util.h"
#include "weightport/core/placement.h"
#include "weightport/core/placement_builders.h"

namespace weightport {
namespace {

using core_test::Meta;

using nlohmann::json;

// Random valid placement: random tensors, sparse ranks, per rank and tensor nothing, one random
// slice, or two disjoint pieces (a flat range cut in two, or a box cut along dim 0).
Placement RandomPlacement(std::mt19937_64& rng) {
  auto uniform = [&rng](int64_t lo, int64_t hi) {
    return std::uniform_int_distribution<int64_t>(lo, hi)(rng);
  };
  std::vector<TensorMeta> tensors;
  const auto dtypes = AllDTypes();
  for (int i = 0, n = static_cast<int>(uniform(0, 4)); i < n; ++i) {
    Shape shape(uniform(0, 3));
    for (auto& d : shape) d = uniform(0, 5);
    tensors.push_back(Meta("t" + std::to_string(i), shape, dtypes[uniform(0, dtypes.size() - 1)]));
  }
  Placement p = Placement::Make(tensors).value();
  for (int r = 0, n = static_cast<int>(uniform(0, 4)); r < n; ++r) {
    const int rank = static_cast<int>(uniform(0, 1) ? uniform(0, 8) : uniform(0, INT_MAX));
    if (p.HasRank(rank)) continue;
    p.AddRank(rank);
    for (const TensorMeta& t : tensors) {
      const int64_t numel = t.num_elements();
      switch (uniform(0, 3)) {
        case 0:
          break;
        case 1: {  // flat, possibly cut in two
          const int64_t start = uniform(0, numel), len = uniform(0, numel - start), cut = uniform(0, len);
          p.AddShard(rank, t.name, Slice::MakeFlat(start, cut));
          if (uniform(0, 1)) p.AddShard(rank, t.name, Slice::MakeFlat(start + cut, len - cut));
          break;
        }
        default: {  // box, possibly cut along dim 0
          Box b;
          for (int64_t d : t.shape) {
            const int64_t start = uniform(0, d);
            b.start.push_back(start);
            b.length.push_back(uniform(0, d - start));
          }
          if (b.rank() > 0 && uniform(0, 1)) {
            Box second = b;
            const int64_t cut = uniform(0, b.length[0]);
            b.length[0] = cut;
            second.start[0] += cut;
            second.length[0] -= cut;
            p.AddShard(rank, t.name, Slice(second));
          }
          p.AddShard(rank, t.name, Slice(b));
        }
      }
    }
  }
  return p;
}

TEST(PlacementJsonTest, RoundTripsRandomPlacements) {
  std::mt19937_64 rng(7);
  for (int c = 0; c < 1000; ++c) {
    const Placement p = RandomPlacement(rng);
    ASSERT_TRUE(p.Validate().ok()) << p.Validate().ToString();
    const json j = p.ToJson();
    auto text = json_util::Parse(j.dump(), "test");
    ASSERT_TRUE(text.ok());
    auto back = Placement::FromJson(*text);
    ASSERT_TRUE(back.ok()) << back.status().ToString() << "\n" << j.dump();
    ASSERT_EQ(*back, p) << j.dump();
    ASSERT_EQ(back->ToJson(), j);
  }
}

TEST(PlacementJsonTest, RoundTripsBuiltLayouts) {
  std::vector<TensorMeta> tensors{Meta("model.embed_tokens.weight", {151936, 8192}),
                                  Meta("model.layers.0.self_attn.q_proj.weight", {8192, 8192}),
                                  Meta("model.norm.weight", {8192}), Meta("lm_head.weight", {151936, 8192})};
  for (auto built : {TensorParallel(tensors, 3), FsdpFlat(tensors, 7), Fsdp2(tensors, 5)}) {
    ASSERT_TRUE(built.ok());
    auto back = Placement::FromJson(built->ToJson());
    ASSERT_TRUE(back.ok()) << back.status().ToString();
    EXPECT_EQ(*back, *built);
  }
}

TEST(PlacementJsonTest, Format) {
  Placement p = Placement::Make({Meta("w", {4, 6}), Meta("b", {6}, DType::kF32)}).value();
  p.AddShard(1, "w", Slice::MakeBox({0, 2}, {4, 2}));
  p.AddShard(1, "b", Slice::MakeFlat(2, 4));
  p.AddRank(5);
  const json want = json::parse(R"({
    "tensors": [{"name": "w", "dtype": "bf16", "shape": [4, 6]},
                {"name": "b", "dtype": "f32", "shape": [6]}],
    "ranks": [{"rank": 1, "shards": [{"tensor": "w", "start": [0, 2], "length": [4, 2]},
                                     {"tensor": "b", "flat": [2, 4]}]},
              {"rank": 5, "shards": []}]})");
  EXPECT_EQ(p.ToJson(), want);
}

TEST(PlacementJsonTest, StrictErrorsNameThePath) {
  const json good = json::parse(R"({
    "tensors": [{"name": "w", "dtype": "bf16", "shape": [4, 6]}],
    "ranks": [{"rank": 0, "shards": [{"tensor": "w", "start": [0, 0], "length": [4, 6]}]}]})");
  ASSERT_TRUE(Placement::FromJson(good).ok());
  struct Case {
    std::string json_pointer;  // where to change `good`
    json value;                // what to put there (null: erase)
    std::string want;
  };
  const std::vector<Case> cases{
      {"/extra", 1, "placement: unknown field 'extra'"},
      {"/tensors", nullptr, "field 'tensors' is missing"},
      {"/tensors/0/dtype", "bf17", "placement.tensors[0].dtype"},
      {"/tensors/0/shape/1", -6, "tensor 'w'"},
      {"/tensors/0/shape", "4x6", "placement.tensors[0].shape must be an array"},
      {"/tensors/1", {{"name", "w"}, {"dtype", "f32"}, {"shape", json::array()}}, "placement.tensors[1]"},
      {"/ranks/0/rank", -1, "placement.ranks[0].rank -1 is not a rank id"},
      {"/ranks/0/rank", 1ll << 40, "is not a rank id"},
      {"/ranks/0/rank", "0", "placement.ranks[0]: field 'rank' must be an integer"},
      {"/ranks/1", {{"rank", 0}, {"shards", json::array()}}, "placement.ranks[1]: rank 0 appears twice"},
      {"/ranks/0/shards/0/length", nullptr, "placement.ranks[0].shards[0]: field 'length' is missing"},
      {"/ranks/0/shards/0/start/1", 1.5, "placement.ranks[0].shards[0].start[1] must be an integer"},
      {"/ranks/0/shards/0/length", {4}, "start has 2 entries, length has 1"},
      {"/ranks/0/shards/0/flat", {0, 1}, "needs either 'flat' or 'start' and 'length'"},
      {"/ranks/0/shards/0/colour", "red", "placement.ranks[0].shards[0]: unknown field 'colour'"},
      {"/ranks/0/shards/0/tensor", "v", "rank 0: tensor 'v': no such tensor"},
      {"/ranks/0/shards/0/length/1", 7, "rank 0: tensor 'w'"},
      {"/ranks/0/shards/1",
       {{"tensor", "w"}, {"flat", {0, 1, 2}}},
       "placement.ranks[0].shards[1].flat must be"},
      {"/ranks/0/shards/1", {{"tensor", "w"}, {"flat", {23, 1}}}, "overlap"},
  };
  for (const Case& c : cases) {
    json j = good;
    const json::json_pointer ptr(c.json_pointer);
    if (c.value.is_null())
      j.at(ptr.parent_pointer()).erase(ptr.back());
    else
      j[ptr] = c.value;
    auto p = Placement::FromJson(j);
    ASSERT_FALSE(p.ok()) << c.json_pointer;
    EXPECT_NE(p.status().message().find(c.want), std::string::npos)
        << c.json_pointer << ": " << p.status().ToString();
  }
  EXPECT_FALSE(Placement::FromJson(json::array()).ok());
}

}  // namespace
}  // namespace weightport
