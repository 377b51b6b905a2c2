// The data-centre network (DCN) the presets share: a two-tier folded Clos above a set of NICs.
// Leaves are either rail-optimised (one leaf per (scalable unit, rail): NIC r of every host in a
// scalable unit goes to leaf "su<g>/leaf-rail<r>") or plain top-of-rack switches ("tor<g>"). Every
// leaf is cabled to every spine ("spine<s>"); a spine node stands for one spine plane, so the
// number of spines is the number of uplinks per leaf, not the number of switch boxes. Internal.
#pragma once

#include <string>
#include <vector>

#include "weightport/core/status.h"
#include "weightport/topology/graph.h"

namespace weightport::topology::internal {

struct DcnPort {
  int nic = 0;    // node index of the NIC
  int group = 0;  // scalable unit (rail-optimised) or ToR index (plain); groups ascend from 0
  int rail = 0;   // leaf within the group when rail-optimised; ignored otherwise
};

struct DcnSpec {
  bool rail_optimised = true;
  double nic_gbps = 400;  // NIC <-> leaf, each way
  double nic_latency_us = 1;
  double switch_latency_us = 1;  // leaf <-> spine
  double oversubscription = 1;   // leaf downlink total / leaf uplink total
  int spines = -1;               // -1: AutoSpines(); 0: none (only with a single leaf)
};

// The default spine count: one uplink per downlink port of the fullest leaf, divided by the
// oversubscription, at most 32 (the uplinks of a 64-port leaf such as a 64 x 400G switch); none
// when there is a single leaf.
int AutoSpines(int leaves, int max_ports_per_leaf, double oversubscription);

struct DcnResult {
  int leaves = 0;
  int spines = 0;
};
// Adds leaves in (group, rail) order, then spines, then the cables. A leaf's rack is the rack its
// NICs share (-1 when they differ). Leaf <-> spine cables carry leaf downlink total / spines /
// oversubscription each way. Errors (naming `preset`) when spines is 0 and there is more than one leaf.
Result<DcnResult> AddDcn(Graph& graph, const std::vector<DcnPort>& ports, const DcnSpec& spec,
                         const std::string& preset);

}  // namespace weightport::topology::internal
