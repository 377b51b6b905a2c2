// CompileRank alone: a rank's part of a plan compiled without a transport, memory or threads.
#include "compiled_rank.h"

#include <gtest/gtest.h>

#include <memory>
#include <vector>

#include "engine/testing/plan_rank_test_util.h"

namespace weightport::plan_rank_test {
namespace {

using plan_rank_internal::CompiledRank;
using plan_rank_internal::CompileOptions;
using plan_rank_internal::CompileRank;

// One source, two destinations that each hold every tensor: with a relay fanout of 1 the source
// feeds one of them and that one relays to the other.
std::shared_ptr<const Plan> OneToTwo(int fanout) {
  return std::make_shared<const Plan>(MustPlan(TensorParallel(Model(), 1), ReplicasOfTp(2, 1), fanout));
}

std::vector<Endpoint> Ranks(const Plan& plan) {
  std::vector<Endpoint> out;
  for (const RankBuffer& b : plan.sources) out.push_back(b.endpoint);
  for (const RankBuffer& b : plan.destinations) out.push_back(b.endpoint);
  return out;
}

std::shared_ptr<const CompiledRank> MustCompile(std::shared_ptr<const Plan> plan, Endpoint me,
                                                CompileOptions options = {}) {
  auto compiled = CompileRank(std::move(plan), me, options);
  EXPECT_TRUE(compiled.ok()) << me.ToString() << ": " << compiled.status().ToString();
  return compiled.ok() ? *compiled : nullptr;
}

TEST(CompiledRank, ChunksAndStepsAreWhatThePlanSays) {
  for (int fanout : {0, 1}) {
    const auto plan = OneToTwo(fanout);
    ASSERT_EQ(plan->sources.size(), 1u);
    ASSERT_EQ(plan->destinations.size(), 2u);
    for (const Endpoint& me : Ranks(*plan)) {
      SCOPED_TRACE(me.ToString() + ", fanout " + std::to_string(fanout));
      const auto c = MustCompile(plan, me);
      ASSERT_NE(c, nullptr);
      size_t out_chunks = 0, in_chunks = 0, in_steps = 0;
      uint64_t in_bytes = 0;
      for (const PlanStep& s : plan->steps) {
        if (me.side == PlanSide::kSource && s.from == me) out_chunks += s.chunks;
        if (me.side == PlanSide::kDestination && s.to_rank == me.rank && s.chunks > 0) {
          in_chunks += s.chunks;
          in_bytes += s.bytes;
          ++in_steps;
        }
      }
      EXPECT_EQ(c->out_chunks.size(), out_chunks);
      EXPECT_EQ(c->in_chunks.size(), in_chunks);
      EXPECT_EQ(c->in_steps.size(), in_steps);
      uint64_t landed = 0;
      for (const auto& chunk : c->in_chunks) landed += chunk.bytes;
      EXPECT_EQ(landed, in_bytes);
      EXPECT_EQ(c->buffer, plan->Buffer(me));
      EXPECT_EQ(c->mine, &c->layouts.at(me));
      EXPECT_GE(c->arena_bytes, c->mine->public_bytes);
      EXPECT_EQ(c->roots.empty(), me.side == PlanSide::kSource);  // a destination mirrors its roots
    }
  }
}

TEST(CompiledRank, ADestinationHashesNothingAndCountsOnlyWhatItRelays) {
  for (int fanout : {0, 1}) {
    const auto plan = OneToTwo(fanout);
    int relays = 0;
    for (const RankBuffer& b : plan->destinations) {
      SCOPED_TRACE(b.endpoint.ToString() + ", fanout " + std::to_string(fanout));
      const auto c = MustCompile(plan, b.endpoint);
      ASSERT_NE(c, nullptr);
      EXPECT_TRUE(c->out_chunks.empty());
      EXPECT_TRUE(c->out_runs.empty());
      for (const auto& in : c->in_steps) {
        bool relayed_from = false;  // a step of the plan reads this one's chunks at this rank
        for (const PlanStep& s : plan->steps) relayed_from |= s.after == static_cast<int64_t>(in.step);
        EXPECT_EQ(in.my_counter >= 0, relayed_from) << c->StepName(in.step);
        relays += relayed_from;
      }
    }
    // Fed directly, nobody relays; in a chain, the first replica relays every step to the second.
    EXPECT_EQ(relays > 0, fanout == 1);
  }
}

TEST(CompiledRank, CompilingTwiceGivesTheSameTables) {
  const auto plan = OneToTwo(1);
  for (const Endpoint& me : Ranks(*plan)) {
    SCOPED_TRACE(me.ToString());
    const auto a = MustCompile(plan, me), b = MustCompile(plan, me);
    ASSERT_NE(a, nullptr);
    ASSERT_NE(b, nullptr);
    EXPECT_NE(a, b);
    EXPECT_EQ(a->arena_bytes, b->arena_bytes);
    EXPECT_EQ(a->slot_bytes, b->slot_bytes);
    EXPECT_EQ(a->out_runs, b->out_runs);
    EXPECT_EQ(a->out_chunks, b->out_chunks);
    EXPECT_EQ(a->out_converts, b->out_converts);
    EXPECT_EQ(a->out_quantize, b->out_quantize);
    EXPECT_EQ(a->out_gathers, b->out_gathers);
    EXPECT_EQ(a->in_runs, b->in_runs);
    EXPECT_EQ(a->in_chunks, b->in_chunks);
    EXPECT_EQ(a->in_steps, b->in_steps);
    EXPECT_EQ(a->in_converts, b->in_converts);
    EXPECT_EQ(a->in_quantize, b->in_quantize);
    EXPECT_EQ(a->in_gathers, b->in_gathers);
    EXPECT_EQ(a->band_chunk_begin, b->band_chunk_begin);
    EXPECT_EQ(a->band_chunks, b->band_chunks);
    EXPECT_EQ(a->roots, b->roots);
    EXPECT_EQ(a->detour_levels, b->detour_levels);
    EXPECT_EQ(a->detour_ranges, b->detour_ranges);
    EXPECT_EQ(a->detour_runs, b->detour_runs);
  }
}

TEST(CompiledRank, DeviceTablesOnlyWithADevice) {
  const auto plan = OneToTwo(0);
  const Endpoint dst{PlanSide::kDestination, 0};
  const auto host = MustCompile(plan, dst);
  ASSERT_NE(host, nullptr);
  EXPECT_EQ(host->device_layout.bytes, 0u);
  EXPECT_TRUE(host->device_spans.empty());
  EXPECT_EQ(host->direct_chunks, std::vector<uint8_t>(host->in_chunks.size(), 0));

  const auto device = MustCompile(plan, dst, {.device = true, .device_direct = true});
  ASSERT_NE(device, nullptr);
  EXPECT_EQ(device->device_layout.offsets.size(), plan->Buffer(dst)->shards.size());
  EXPECT_GT(device->device_layout.bytes, 0u);
  EXPECT_EQ(device->chunk_device_begin.size(), device->in_chunks.size() + 1);
  EXPECT_EQ(device->direct_chunks.size(), device->in_chunks.size());
  // Fed directly, as sent, nothing converted: every chunk with bytes lands on the device.
  for (size_t i = 0; i < device->in_chunks.size(); ++i)
    EXPECT_EQ(device->direct_chunks[i], device->in_chunks[i].bytes > 0 ? 1 : 0) << i;
}

TEST(CompiledRank, RefusesARankNotInThePlanAndDirectWithoutADevice) {
  const auto plan = OneToTwo(1);
  const Endpoint stranger{PlanSide::kDestination, 7};
  auto none = CompileRank(plan, stranger, {});
  ASSERT_FALSE(none.ok());
  EXPECT_EQ(none.status().code(), StatusCode::kNotFound);
  EXPECT_NE(none.status().message().find(stranger.ToString()), std::string::npos) << none.status().ToString();

  auto direct = CompileRank(plan, {PlanSide::kDestination, 0}, {.device = false, .device_direct = true});
  ASSERT_FALSE(direct.ok());
  EXPECT_EQ(direct.status().code(), StatusCode::kInvalidArgument);

  EXPECT_FALSE(CompileRank(nullptr, {PlanSide::kSource, 0}, {}).ok());
}

}  // namespace
}  // namespace weightport::plan_rank_test
