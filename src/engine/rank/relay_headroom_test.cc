#include "weightport/engine/rank/relay_headroom.h"

#include <gtest/gtest.h>

#include "engine/testing/plan_rank_test_util.h"
#include "weightport/plan/planner.h"

namespace weightport {
namespace {

using plan_rank_test::Model;
using plan_rank_test::ReplicasOfTp;

constexpr double kGbps = 1;                    // every host's NIC
constexpr double kNicBytes = kGbps * 1e9 / 8;  // per second

// `sources` FSDP ranks and `replicas` x TP `tp` destination ranks, each rank on a host of its own
// (or all of them on one host).
Plan PlanOf(int sources, int replicas, int tp, int fanout, bool one_host = false) {
  std::vector<HostSpec> hosts;
  if (one_host) {
    HostSpec all{"all", kGbps, {}, {}};
    for (int r = 0; r < sources; ++r) all.src_ranks.push_back(r);
    for (int r = 0; r < replicas * tp; ++r) all.dst_ranks.push_back(r);
    hosts.push_back(all);
  } else {
    for (int r = 0; r < sources; ++r) hosts.push_back({"s" + std::to_string(r), kGbps, {r}, {}});
    for (int r = 0; r < replicas * tp; ++r) hosts.push_back({"d" + std::to_string(r), kGbps, {}, {r}});
  }
  auto topology = Topology::Make(hosts);
  EXPECT_TRUE(topology.ok()) << topology.status().ToString();
  PlanOptions o;
  o.chunk_bytes = 1024;
  o.relay_fanout = fanout;
  auto plan = MakePlan(*FsdpFlat(Model(), sources), *ReplicasOfTp(replicas, tp), *topology, o);
  EXPECT_TRUE(plan.ok()) << plan.status().ToString();
  return std::move(*plan);
}

Endpoint Dst(int rank) { return {PlanSide::kDestination, rank}; }

bool ReadsASource(const Plan& plan, int rank) {
  for (const PlanStep& s : plan.steps)
    if (s.to_rank == rank && s.from.side == PlanSide::kSource) return true;
  return false;
}

// The replica that reads the four sources relays to the other one: its flows meet on its link.
TEST(RelayHeadroom, ARelayReadingSeveralHostsKeepsItsInboundUnderItsNic) {
  const Plan plan = PlanOf(4, 2, 2, 1);
  int capped = 0;
  for (int r = 0; r < 4; ++r) {
    auto cap = RelayInboundCap(plan, Dst(r), kDefaultRelayHeadroom);
    ASSERT_TRUE(cap.ok()) << cap.status().ToString();
    if (ReadsASource(plan, r)) {
      EXPECT_DOUBLE_EQ(*cap, (1 - kDefaultRelayHeadroom) * kNicBytes) << "dst rank " << r;
      ++capped;
    }
  }
  EXPECT_EQ(capped, 2);
  auto off = RelayInboundCap(plan, Dst(0), 0);
  ASSERT_TRUE(off.ok());
  EXPECT_EQ(*off, 0);
}

// Nothing is capped where no flows meet: a chain from one source, every destination reading the
// sources (nobody relays), or every rank on one host.
TEST(RelayHeadroom, NoCapWhereNoFlowsMeetAtARelay) {
  struct Case {
    const char* what;
    Plan plan;
  };
  const Case cases[] = {{"a relay chain from one source", PlanOf(1, 3, 1, 1)},
                        {"no relays", PlanOf(4, 2, 2, 0)},
                        {"one host", PlanOf(4, 2, 2, 1, true)}};
  for (const Case& c : cases) {
    for (const RankBuffer& b : c.plan.destinations) {
      auto cap = RelayInboundCap(c.plan, b.endpoint, kDefaultRelayHeadroom);
      ASSERT_TRUE(cap.ok()) << c.what << ": " << cap.status().ToString();
      EXPECT_EQ(*cap, 0) << c.what << ", " << b.endpoint.ToString();
    }
  }
}

TEST(RelayHeadroom, BadArgumentsAreErrors) {
  const Plan plan = PlanOf(4, 2, 2, 1);
  EXPECT_EQ(RelayInboundCap(plan, Dst(0), 1).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(RelayInboundCap(plan, {PlanSide::kSource, 0}, 0.1).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(RelayInboundCap(plan, Dst(9), 0.1).status().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace weightport
