#include "weightport/plan/topology.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

namespace weightport {
namespace {

TEST(Topology, JsonRoundTripsAndPlacesTheRest) {
  auto json = nlohmann::json::parse(R"({"nic_gbps": 200, "intra_host_gbps": 900,
      "hosts": [{"name": "a", "src_ranks": [0, 1], "dst_ranks": [0]}, {"name": "b", "nic_gbps": 25.5}]})");
  auto topo = Topology::FromJson(json);
  ASSERT_TRUE(topo.ok()) << topo.status().ToString();
  EXPECT_EQ(topo->HostOf({PlanSide::kSource, 1}), 0);
  EXPECT_EQ(topo->HostOf({PlanSide::kDestination, 0}), 0);
  EXPECT_EQ(topo->HostOf({PlanSide::kDestination, 1}), -1);
  EXPECT_DOUBLE_EQ(topo->nic_bytes_per_s(0), 25e9);
  EXPECT_DOUBLE_EQ(topo->nic_bytes_per_s(1), 25.5e9 / 8);
  EXPECT_DOUBLE_EQ(topo->intra_host_bytes_per_s(), 900e9 / 8);
  topo->Place(PlanSide::kDestination, {0, 1, 2});
  EXPECT_EQ(topo->hosts().size(), 4u);
  EXPECT_EQ(topo->hosts()[2].name, "dst1");
  EXPECT_DOUBLE_EQ(topo->nic_bytes_per_s(2), 25e9);  // the default NIC
  auto back = Topology::FromJson(topo->ToJson());
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(*back, *topo);
}

TEST(Topology, BadInputIsNamed) {
  auto twice = Topology::FromJson(nlohmann::json::parse(
      R"({"hosts": [{"name": "a", "src_ranks": [3]}, {"name": "b", "src_ranks": [3]}]})"));
  ASSERT_FALSE(twice.ok());
  EXPECT_NE(twice.status().message().find("src rank 3 is already on host 'a'"), std::string::npos)
      << twice.status().ToString();
  EXPECT_FALSE(
      Topology::FromJson(nlohmann::json::parse(R"({"hosts": [{"name": "a"}, {"name": "a"}]})")).ok());
  EXPECT_FALSE(Topology::FromJson(nlohmann::json::parse(R"({"nic_gbps": 0})")).ok());
  auto typo = Topology::FromJson(nlohmann::json::parse(R"({"hosts": [{"name": "a", "nic_gpbs": 5}]})"));
  ASSERT_FALSE(typo.ok());
  EXPECT_NE(typo.status().message().find("topology.hosts[0]: unknown field 'nic_gpbs'"), std::string::npos)
      << typo.status().ToString();
}

}  // namespace
}  // namespace weightport
