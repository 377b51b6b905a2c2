// The planner's view of a topology Graph: one planner host per high-bandwidth domain.
//
// The planner balances NICs per host and copies within a host before crossing the network; a
// "host" here is the HBD domain of the rank's node when that domain is switched (an NVLink
// island: any two members one NVSwitch apart), else the OS host (a ring or torus HBD, whose far
// members are many hops apart, plans per host and lets routing use the ring). So the fastest
// path class is used first and the DCN only between domains. A domain's NIC is the sum of its endpoints' NIC
// uplinks; the intra-host bandwidth is the smallest domain's total HBD bandwidth among the domains used.
#pragma once

#include <vector>

#include "weightport/core/status.h"
#include "weightport/plan/topology.h"
#include "weightport/topology/graph.h"

namespace weightport {

// src_nodes[r] / dst_nodes[r]: the graph node of source / destination rank r.
Result<Topology> PlannerTopology(const topology::Graph& graph, const std::vector<int>& src_nodes,
                                 const std::vector<int>& dst_nodes);

}  // namespace weightport
