// Property tests: thousands of random source and destination placements (uneven box splits along any
// dimension, grids, flat 1-D shards against N-D slices, replicas, overlapping sources, ranks holding
// nothing, random topologies and options). Every plan must pass CheckCoverage and, run byte by byte,
// deliver exactly the destination shards.
#include <gtest/gtest.h>

#include <map>
#include <numeric>
#include <random>

#include <nlohmann/json.hpp>

#include "plan/plan_test_util.h"
#include "weightport/core/placement.h"
#include "weightport/plan/planner.h"

namespace weightport {
namespace {

using Rng = std::mt19937_64;

int Uniform(Rng& rng, int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); }

// Sorted cut points splitting [0, extent) into `parts` ranges, some possibly empty.
std::vector<int64_t> Cuts(Rng& rng, int64_t extent, int parts) {
  std::vector<int64_t> cuts = {0, extent};
  for (int i = 1; i < parts; ++i) cuts.push_back(std::uniform_int_distribution<int64_t>(0, extent)(rng));
  std::sort(cuts.begin(), cuts.end());
  return cuts;
}

std::vector<TensorMeta> RandomTensors(Rng& rng) {
  static const DType kTypes[] = {DType::kU8, DType::kBF16, DType::kF32};
  std::vector<TensorMeta> tensors;
  const int n = Uniform(rng, 1, 4);
  for (int i = 0; i < n; ++i) {
    Shape shape;
    const int rank = Uniform(rng, 0, 3);
    for (int d = 0; d < rank; ++d) shape.push_back(Uniform(rng, 1, 9));
    tensors.push_back(*TensorMeta::Make("t" + std::to_string(i), kTypes[Uniform(rng, 0, 2)], shape));
  }
  return tensors;
}

// The slices of one way to split a whole tensor: every element in exactly one slice.
std::vector<Slice> RandomSplit(Rng& rng, const TensorMeta& t) {
  const Shape& shape = t.shape;
  const int kind = shape.empty() ? 0 : Uniform(rng, 0, 3);
  std::vector<Slice> out;
  if (kind == 0) return {Slice::Full(shape)};
  if (kind == 1) {  // flat shards, FSDP1-style
    std::vector<int64_t> cuts = Cuts(rng, t.num_elements(), Uniform(rng, 1, 5));
    for (size_t i = 0; i + 1 < cuts.size(); ++i)
      out.push_back(Slice::MakeFlat(cuts[i], cuts[i + 1] - cuts[i]));
    return out;
  }
  // Boxes: an uneven split along one dimension, or a grid over two.
  const size_t d0 = Uniform(rng, 0, static_cast<int>(shape.size()) - 1);
  const size_t d1 = kind == 3 && shape.size() > 1 ? (d0 + 1) % shape.size() : d0;
  std::vector<int64_t> c0 = Cuts(rng, shape[d0], Uniform(rng, 1, 4));
  std::vector<int64_t> c1 =
      d1 == d0 ? std::vector<int64_t>{0, shape[d1]} : Cuts(rng, shape[d1], Uniform(rng, 1, 3));
  for (size_t i = 0; i + 1 < c0.size(); ++i)
    for (size_t j = 0; j + 1 < c1.size(); ++j) {
      Slice full = Slice::Full(shape);
      Box box = full.box();
      box.start[d0] = c0[i];
      box.length[d0] = c0[i + 1] - c0[i];
      if (d1 != d0) {
        box.start[d1] = c1[j];
        box.length[d1] = c1[j + 1] - c1[j];
      }
      out.push_back(Slice(std::move(box)));
    }
  return out;
}

// Ranks 0..ranks-1 (some holding nothing). Each tensor is split and each part given to `copies`
// distinct random ranks; a rank never gets two overlapping shards of one tensor.
Placement RandomPlacement(Rng& rng, const std::vector<TensorMeta>& tensors, int ranks, int copies,
                          bool subset, bool extra_overlap) {
  Placement p = *Placement::Make(tensors);
  for (int r = 0; r < ranks; ++r) p.AddRank(r);
  for (const TensorMeta& t : tensors) {
    std::vector<Slice> parts = RandomSplit(rng, t);
    for (const Slice& part : parts) {
      if (subset && Uniform(rng, 0, 3) == 0) continue;  // destinations need not hold every part
      std::vector<int> order(ranks);
      std::iota(order.begin(), order.end(), 0);
      std::shuffle(order.begin(), order.end(), rng);
      for (int c = 0; c < std::min(copies, ranks); ++c) p.AddShard(order[c], t.name, part);
    }
    // A whole copy on one more rank that holds nothing of this tensor yet: overlapping sources.
    if (extra_overlap) {
      const std::vector<Holding> holders = p.HoldersOf(t.name);
      for (int r = 0; r < ranks; ++r) {
        auto holds = [&](const Holding& h) { return h.rank == r; };
        if (std::none_of(holders.begin(), holders.end(), holds)) {
          p.AddShard(r, t.name, Slice::Full(t.shape));
          break;
        }
      }
    }
  }
  return p;
}

Topology RandomTopology(Rng& rng, int src_ranks, int dst_ranks) {
  std::vector<HostSpec> hosts(Uniform(rng, 1, 4));
  for (size_t h = 0; h < hosts.size(); ++h) {
    hosts[h].name = "h" + std::to_string(h);
    hosts[h].nic_gbps = 25.0 * Uniform(rng, 1, 8);
  }
  for (int r = 0; r < src_ranks; ++r)
    if (Uniform(rng, 0, 2)) hosts[Uniform(rng, 0, static_cast<int>(hosts.size()) - 1)].src_ranks.push_back(r);
  for (int r = 0; r < dst_ranks; ++r)
    if (Uniform(rng, 0, 2)) hosts[Uniform(rng, 0, static_cast<int>(hosts.size()) - 1)].dst_ranks.push_back(r);
  return *Topology::Make(std::move(hosts));
}

TEST(PlannerProperty, RandomPlacementsAreCoveredExactlyOnce) {
  constexpr int kCases = 3000;
  Rng rng(20261202);
  int relayed = 0, straddled = 0, flat_to_box = 0, overlapping_sources = 0;
  int at_sender = 0, at_receiver = 0, relayed_conversion = 0;
  for (int c = 0; c < kCases; ++c) {
    SCOPED_TRACE("case " + std::to_string(c));
    std::vector<TensorMeta> tensors = RandomTensors(rng);
    const int src_ranks = Uniform(rng, 1, 5), dst_ranks = Uniform(rng, 1, 6);
    const bool overlap = Uniform(rng, 0, 4) == 0;
    overlapping_sources += overlap;
    Placement src = RandomPlacement(rng, tensors, src_ranks, Uniform(rng, 1, 3), false, overlap);
    Placement dst = RandomPlacement(rng, tensors, dst_ranks, Uniform(rng, 1, 3), Uniform(rng, 0, 1), false);
    PlanOptions options;
    options.chunk_bytes = Uniform(rng, 1, 64);
    options.relay_fanout = Uniform(rng, 0, 3);
    options.split_bytes = Uniform(rng, 1, 128);
    if (Uniform(rng, 0, 2) == 0) {  // destinations store some floating-point tensors in another dtype
      static const DType kFloats[] = {DType::kF32, DType::kBF16, DType::kF16};
      for (const TensorMeta& t : tensors)
        if (t.dtype != DType::kU8 && Uniform(rng, 0, 1))
          options.transforms.push_back({t.name, kFloats[Uniform(rng, 0, 2)]});
      options.chunk_bytes = 4 * Uniform(rng, 1, 16);  // whole elements of every dtype on the wire
    }
    auto plan = MakePlan(src, dst, RandomTopology(rng, src_ranks, dst_ranks), options);
    ASSERT_TRUE(plan.ok()) << plan.status().ToString() << "\nsrc " << src.ToJson().dump() << "\ndst "
                           << dst.ToJson().dump();
    Status covered = CheckCoverage(*plan);
    ASSERT_TRUE(covered.ok()) << covered.ToString();
    const std::string problem = plan_test::RunPlanInMemory(*plan);
    ASSERT_EQ(problem, "") << "src " << src.ToJson().dump() << "\ndst " << dst.ToJson().dump();
    std::map<std::pair<int, uint32_t>, int> steps_into;
    bool any_relay = false, any_straddle = false, any_flat_to_box = false;
    bool sender = false, receiver = false, relayed_converted = false;
    for (const PlanStep& s : plan->steps) {
      sender |= s.transform == TransformKind::kConvertAtSender;
      receiver |= s.transform == TransformKind::kConvertAtReceiver;
      relayed_converted |=
          s.after >= 0 && plan->tensors[s.tensor].dtype != plan->destination_dtypes[s.tensor];
      any_relay |= s.after >= 0;
      any_straddle |= ++steps_into[{s.to_rank, s.to_shard}] == 2;
      any_flat_to_box |=
          plan->Buffer(s.from)->shards[s.from_shard].slice.is_flat() &&
          !plan->Buffer({PlanSide::kDestination, s.to_rank})->shards[s.to_shard].slice.is_flat();
    }
    relayed += any_relay;
    straddled += any_straddle;
    flat_to_box += any_flat_to_box;
    at_sender += sender;
    at_receiver += receiver;
    relayed_conversion += relayed_converted;
  }
  // The generator must reach the interesting cases often, or the property says little.
  EXPECT_GT(relayed, kCases / 5);
  EXPECT_GT(straddled, kCases / 5);
  EXPECT_GT(flat_to_box, kCases / 10);
  EXPECT_GT(overlapping_sources, kCases / 10);
  EXPECT_GT(at_sender, kCases / 40);
  EXPECT_GT(at_receiver, kCases / 40);
  EXPECT_GT(relayed_conversion, kCases / 40);
}

// A split of a vector or matrix of whole 128x128 blocks (the last block cut by the tensor's edge):
// cuts on block boundaries along one dimension or a grid over both, some parts possibly empty.
std::vector<Slice> RandomBlockSplit(Rng& rng, const TensorMeta& t) {
  std::vector<std::vector<int64_t>> cuts;
  for (int64_t extent : t.shape) {
    std::vector<int64_t> c = Cuts(rng, (extent + 127) / 128, Uniform(rng, 1, 3));
    for (int64_t& x : c) x = std::min(x * 128, extent);
    cuts.push_back(std::move(c));
  }
  if (cuts.size() == 2 && Uniform(rng, 0, 2) > 0) {  // mostly one dimension split, sometimes a grid
    const int d = Uniform(rng, 0, 1);
    cuts[d] = {0, t.shape[d]};
  }
  std::vector<Slice> out;
  const std::vector<int64_t> whole = {0, 1};
  const std::vector<int64_t>& c1 = cuts.size() == 2 ? cuts[1] : whole;
  for (size_t i = 0; i + 1 < cuts[0].size(); ++i)
    for (size_t j = 0; j + 1 < c1.size(); ++j) {
      if (cuts[0][i] == cuts[0][i + 1] || c1[j] == c1[j + 1]) continue;
      if (cuts.size() == 1) {
        out.push_back(Slice::MakeBox({cuts[0][i]}, {cuts[0][i + 1] - cuts[0][i]}));
      } else {
        out.push_back(Slice::MakeBox({cuts[0][i], c1[j]}, {cuts[0][i + 1] - cuts[0][i], c1[j + 1] - c1[j]}));
      }
    }
  return out;
}

Placement RandomBlockPlacement(Rng& rng, const std::vector<TensorMeta>& tensors, int ranks, int copies,
                               bool whole_copy) {
  Placement p = *Placement::Make(tensors);
  for (int r = 0; r < ranks; ++r) p.AddRank(r);
  for (const TensorMeta& t : tensors) {
    std::vector<int> order(ranks);
    std::iota(order.begin(), order.end(), 0);
    for (const Slice& part : RandomBlockSplit(rng, t)) {
      std::shuffle(order.begin(), order.end(), rng);
      for (int c = 0; c < std::min(copies, ranks); ++c) p.AddShard(order[c], t.name, part);
    }
    if (whole_copy) p.AddShard(ranks, t.name, Slice::Full(t.shape));  // overlapping sources
  }
  return p;
}

// Tensors quantised to e4m3 in 128x128 blocks: random block-aligned destination layouts; sources on
// block boundaries (quantising) or split anywhere (the receivers quantise); relays, overlapping
// sources split in whole blocks, any chunk size (cuts inside e4m3 bytes and scales).
// Run byte by byte, each destination shard must hold its slice quantised as a whole.
TEST(PlannerProperty, RandomBlockAlignedLayoutsDeliverTheQuantisedBlocks) {
  constexpr int kCases = 300;
  Rng rng(20261204);
  int relayed = 0, split_pieces = 0, at_receiver = 0;
  for (int c = 0; c < kCases; ++c) {
    SCOPED_TRACE("case " + std::to_string(c));
    std::vector<TensorMeta> tensors;
    for (int i = Uniform(rng, 1, 3); i > 0; --i) {
      Shape shape;
      for (int d = Uniform(rng, 1, 2); d > 0; --d)
        shape.push_back(128 * Uniform(rng, 1, 3) - Uniform(rng, 0, 127));
      tensors.push_back(
          *TensorMeta::Make("t" + std::to_string(i), Uniform(rng, 0, 1) ? DType::kBF16 : DType::kF32, shape));
    }
    const int src_ranks = Uniform(rng, 1, 3), dst_ranks = Uniform(rng, 1, 5);
    const bool whole_copy = Uniform(rng, 0, 3) == 0;
    // Half the cases: sources split anywhere (flat shards too), so the receivers quantise.
    const bool block_sources = Uniform(rng, 0, 1);
    Placement src =
        block_sources
            ? RandomBlockPlacement(rng, tensors, src_ranks, Uniform(rng, 1, 2), whole_copy)
            : RandomPlacement(rng, tensors, src_ranks + whole_copy, Uniform(rng, 1, 2), false, whole_copy);
    Placement dst = RandomBlockPlacement(rng, tensors, dst_ranks, Uniform(rng, 1, 3), false);
    PlanOptions options;
    // Whole f32 elements where the sources' dtype may travel.
    options.chunk_bytes = block_sources ? Uniform(rng, 1, 20000) : 4 * Uniform(rng, 1, 5000);
    options.relay_fanout = Uniform(rng, 0, 3);
    options.split_bytes = Uniform(rng, 1, 40000);
    options.transforms = {{"*", DType::kF8E4M3}};
    auto plan = MakePlan(src, dst, RandomTopology(rng, src_ranks + whole_copy, dst_ranks), options);
    ASSERT_TRUE(plan.ok()) << plan.status().ToString() << "\nsrc " << src.ToJson().dump() << "\ndst "
                           << dst.ToJson().dump();
    Status covered = CheckCoverage(*plan);
    ASSERT_TRUE(covered.ok()) << covered.ToString();
    ASSERT_EQ(plan_test::RunPlanInMemory(*plan), "")
        << "src " << src.ToJson().dump() << "\ndst " << dst.ToJson().dump();
    bool any_relay = false, any_split = false;
    for (const PlanStep& s : plan->steps) {
      if (s.transform == TransformKind::kConvertAtReceiver) {
        ++at_receiver;
      } else {
        ASSERT_EQ(s.transform, s.after < 0 ? TransformKind::kConvertAtSender : TransformKind::kIdentity);
      }
      any_relay |= s.after >= 0;
      any_split |=
          !(s.piece == plan->Buffer({PlanSide::kDestination, s.to_rank})->shards[s.to_shard].slice) &&
          !(s.piece == plan->Buffer(s.from)->shards[s.from_shard].slice);
    }
    relayed += any_relay;
    split_pieces += any_split;
  }
  EXPECT_GT(relayed, kCases / 5);
  EXPECT_GT(split_pieces, kCases / 5);
  EXPECT_GT(at_receiver, kCases / 5);
}

TEST(PlannerProperty, SameInputSamePlan) {
  Rng rng(7);
  for (int c = 0; c < 200; ++c) {
    std::vector<TensorMeta> tensors = RandomTensors(rng);
    Placement src = RandomPlacement(rng, tensors, 3, 2, false, false);
    Placement dst = RandomPlacement(rng, tensors, 4, 2, true, false);
    Topology topo = RandomTopology(rng, 3, 4);
    auto a = MakePlan(src, dst, topo);
    auto b = MakePlan(src, dst, topo);
    ASSERT_TRUE(a.ok() && b.ok());
    EXPECT_EQ(a->ToJson().dump(), b->ToJson().dump());
    auto round = Plan::FromJson(a->ToJson());
    ASSERT_TRUE(round.ok()) << round.status().ToString();
    EXPECT_EQ(round->Digest(), a->Digest());
  }
}

}  // namespace
}  // namespace weightport
