#include "weightport/engine/rank/rank_plan.h"

#include <gtest/gtest.h>

#include <set>

#include <nlohmann/json.hpp>

#include "compiled_rank.h"
#include "engine/testing/plan_rank_test_util.h"

namespace weightport {
namespace {

using namespace plan_rank_test;
using plan_rank_internal::CompiledRank;
using plan_rank_internal::CompileRank;

struct NamedPlan {
  const char* name;
  Plan plan;
  bool compressible = false;
};

// Relay chains and trees, conversions both ways, f8e4m3 at the sources and at the receivers, and
// compressed steps through relays: everything a part must carry.
std::vector<NamedPlan> Plans() {
  std::vector<NamedPlan> out;
  out.push_back({"chain", MustPlan(TensorParallel(Model(), 2), ReplicasOfTp(4, 2), 1)});
  out.push_back({"tree", MustPlan(FsdpFlat(Model(), 4), ReplicasOfTp(4, 2), 2)});
  out.push_back({"replicated sources", MustPlan(ReplicasOfTp(2, 2), ReplicasOfTp(3, 2), 1)});
  out.push_back({"conversions", MustPlan(FsdpFlat(Model(), 4), ReplicasOfTp(3, 2), 1, 1024,
                                         {{"*_proj.weight", DType::kF32}, {"*norm*", DType::kF16}})});
  out.push_back({"narrowed at the sources",
                 MustPlan(TensorParallel(Model(DType::kF32), 4), ReplicasOfTp(2, 2, DType::kBF16), 1)});
  const auto blocks = BlockModel(DType::kBF16);
  out.push_back({"quantised", MustPlan(FsdpFlat(blocks, 3), BuildMesh(blocks, TpReplicas()), 1, 1000,
                                       {{"*.weight", DType::kF8E4M3}})});
  out.push_back(
      {"quantised at the sources", MustPlan(TensorParallel(blocks, 2), BuildMesh(blocks, TpReplicas()), 1,
                                            1000, {{"*", DType::kF8E4M3}})});
  out.push_back({"compressed", SlowLinkPlan({}), true});
  out.push_back({"compressed, converted", SlowLinkPlan({{"*", DType::kF32}}), true});
  return out;
}

std::vector<Endpoint> Ranks(const Plan& plan) {
  std::vector<Endpoint> out;
  for (const auto* side : {&plan.sources, &plan.destinations})
    for (const RankBuffer& b : *side) out.push_back(b.endpoint);
  return out;
}

// The tables a part compiles to are the whole plan's, with step ids translated.
void ExpectSameTables(const CompiledRank& whole, const CompiledRank& part, const std::vector<uint32_t>& ids) {
  EXPECT_EQ(part.arena_bytes, whole.arena_bytes);
  EXPECT_EQ(part.mine->public_bytes, whole.mine->public_bytes);
  EXPECT_EQ(part.out_runs, whole.out_runs);
  ASSERT_EQ(part.out_chunks.size(), whole.out_chunks.size());
  for (size_t i = 0; i < part.out_chunks.size(); ++i) {
    auto c = part.out_chunks[i];
    c.step = ids.at(c.step);
    EXPECT_EQ(c, whole.out_chunks[i]);
  }
  EXPECT_EQ(part.out_converts, whole.out_converts);
  EXPECT_EQ(part.out_quantize, whole.out_quantize);
  EXPECT_EQ(part.out_gathers, whole.out_gathers);
  EXPECT_EQ(part.in_runs, whole.in_runs);
  EXPECT_EQ(part.in_chunks, whole.in_chunks);
  ASSERT_EQ(part.in_steps.size(), whole.in_steps.size());
  for (size_t i = 0; i < part.in_steps.size(); ++i) {
    auto s = part.in_steps[i];
    s.step = ids.at(s.step);
    if (s.after >= 0) s.after = ids.at(static_cast<size_t>(s.after));
    EXPECT_EQ(s, whole.in_steps[i]);
  }
  EXPECT_EQ(part.in_converts, whole.in_converts);
  EXPECT_EQ(part.in_quantize, whole.in_quantize);
  EXPECT_EQ(part.in_gathers, whole.in_gathers);
  EXPECT_EQ(part.roots, whole.roots);
  EXPECT_EQ(part.detour_levels, whole.detour_levels);
  EXPECT_EQ(part.detour_ranges, whole.detour_ranges);
  EXPECT_EQ(part.detour_runs, whole.detour_runs);
  EXPECT_EQ(part.alternates, whole.alternates);
  EXPECT_EQ(part.direct_chunks, whole.direct_chunks);
  EXPECT_EQ(part.out_hash, whole.out_hash);
  EXPECT_EQ(part.out_device_batches, whole.out_device_batches);
  EXPECT_EQ(part.device_spans, whole.device_spans);
  EXPECT_EQ(part.device_tail_spans, whole.device_tail_spans);
}

TEST(RankPlan, EveryPartCompilesToTheWholePlansTables) {
  for (const NamedPlan& p : Plans()) {
    SCOPED_TRACE(p.name);
    auto whole = std::make_shared<const Plan>(p.plan);
    RankPlanCutter cutter(whole);
    EXPECT_EQ(cutter.digest(), whole->Digest());
    for (const Endpoint& ep : Ranks(*whole)) {
      SCOPED_TRACE(ep.ToString());
      auto part = cutter.Cut(ep);
      ASSERT_TRUE(part.ok()) << part.status().ToString();
      // Through its binary form, as the coordinator sends it.
      const std::string bytes = EncodeRankPlan(*part);
      auto decoded = DecodeRankPlan(bytes);
      ASSERT_TRUE(decoded.ok()) << decoded.status().ToString();
      EXPECT_EQ(EncodeRankPlan(*decoded), bytes);
      EXPECT_EQ(decoded->digest, whole->Digest());
      for (const plan_rank_internal::CompileOptions o :
           {plan_rank_internal::CompileOptions{}, plan_rank_internal::CompileOptions{true, true}}) {
        auto a = CompileRank(whole, ep, o);
        auto b = CompileRank(*decoded, o);
        ASSERT_TRUE(a.ok() && b.ok()) << a.status().ToString() << " / " << b.status().ToString();
        ExpectSameTables(**a, **b, decoded->step_ids);
        // A source peer's device copy is found where the whole plan puts it.
        for (const Endpoint& peer : decoded->peers())
          if (peer.side == PlanSide::kSource) {
            const auto da = (*a)->PeerDeviceLayout(peer), db = (*b)->PeerDeviceLayout(peer);
            EXPECT_EQ(da.bytes, db.bytes);
            const RankBuffer& trimmed = *decoded->plan->Buffer(peer);
            for (size_t i = 0; i < trimmed.shards.size(); ++i)
              EXPECT_EQ(db.OffsetOf(trimmed.shards[i].offset, trimmed.shards[i].bytes),
                        da.OffsetOf(trimmed.shards[i].offset, trimmed.shards[i].bytes));
          }
      }
    }
  }
}

TEST(RankPlan, RanksMadeFromPartsMoveEveryVersion) {
  for (const NamedPlan& p : Plans()) {
    SCOPED_TRACE(p.name);
    PlanRankOptions o;
    o.delta = true;
    Group g(p.plan, o, std::nullopt, /*from_parts=*/true);
    if (p.compressible) g.bytes = CompressibleBytes;
    for (uint64_t v = 1; v <= 2; ++v) {
      g.Update(v);
      g.ExpectLive(v);
    }
  }
}

TEST(RankPlan, RanksMadeFromPartsRouteAroundADeadRelay) {
  Group g(MustPlan(TensorParallel(Model(), 2), ReplicasOfTp(4, 2), 1), {}, std::nullopt, true);
  g.Update(1);
  std::set<int> relays;
  for (const PlanStep& s : g.plan->steps)
    if (s.from.side == PlanSide::kDestination) relays.insert(s.from.rank);
  ASSERT_FALSE(relays.empty());
  const int dead = *relays.begin();
  g.faults->KillPeer(Endpoint{PlanSide::kDestination, dead}.ToString());
  g.Publish(2);
  uint64_t rerouted = 0;
  for (auto& [rank, result] : g.Receive(2)) {
    if (rank == dead) continue;
    ASSERT_TRUE(result.ok()) << "dst rank " << rank << ": " << result.status().ToString();
    rerouted += result->rerouted_steps;
    ASSERT_TRUE(g.ranks.at({PlanSide::kDestination, rank})->Commit(2).ok());
    g.ExpectRankLive(*g.plan->Buffer({PlanSide::kDestination, rank}), 2);
  }
  EXPECT_GT(rerouted, 0u);
}

// A part grows with the rank's own steps, not with the plan: 64 sources to 16 TP-2 replicas.
TEST(RankPlan, PartsAreSmallBesideTheWholePlan) {
  auto whole = std::make_shared<const Plan>(MustPlan(FsdpFlat(Model(), 64), ReplicasOfTp(16, 2), 4));
  RankPlanCutter cutter(whole);
  size_t largest = 0, total = 0;
  for (const Endpoint& ep : Ranks(*whole)) {
    auto part = cutter.Cut(ep);
    ASSERT_TRUE(part.ok()) << part.status().ToString();
    EXPECT_LT(part->plan->steps.size(), whole->steps.size() / 4) << ep.ToString();
    const size_t bytes = EncodeRankPlan(*part).size();
    largest = std::max(largest, bytes);
    total += bytes;
  }
  const size_t json = whole->ToJson().dump().size();
  EXPECT_LT(largest * 20, json) << "largest part " << largest << " bytes, whole plan JSON " << json;
  EXPECT_LT(total, json);
}

TEST(RankPlan, BadPartsAreRefused) {
  auto whole = std::make_shared<const Plan>(MustPlan(TensorParallel(Model(), 2), ReplicasOfTp(3, 2), 1));
  RankPlanCutter cutter(whole);
  EXPECT_EQ(cutter.Cut({PlanSide::kDestination, 99}).status().code(), StatusCode::kNotFound);
  auto part = cutter.Cut({PlanSide::kDestination, 3});
  ASSERT_TRUE(part.ok());
  const std::string bytes = EncodeRankPlan(*part);
  EXPECT_FALSE(DecodeRankPlan(bytes.substr(0, bytes.size() - 1)).ok());
  EXPECT_FALSE(DecodeRankPlan(bytes + "x").ok());
  EXPECT_FALSE(DecodeRankPlan("WPRANK0" + bytes.substr(7)).ok());
  for (size_t cut = 8; cut < bytes.size(); cut += bytes.size() / 17)
    EXPECT_FALSE(DecodeRankPlan(bytes.substr(0, cut)).ok());
}

}  // namespace
}  // namespace weightport
