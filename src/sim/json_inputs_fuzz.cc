// libFuzzer target: every decoder of JSON that comes from outside the process — placements, plan
// topologies, topology graphs, plans, HBD fault traces and cost parameters — on the same input.
// Each must either refuse it with a Status or accept it; an accepted placement, topology or plan
// must survive a round trip through its own JSON.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include <nlohmann/json.hpp>

#include "weightport/core/json_util.h"
#include "weightport/core/placement.h"
#include "weightport/plan/plan.h"
#include "weightport/plan/topology.h"
#include "weightport/sim/hbd/cost_model.h"
#include "weightport/sim/hbd/fault_trace.h"
#include "weightport/topology/graph.h"

namespace {
void Require(bool ok) {
  if (!ok) std::abort();
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace weightport;
  auto json = json_util::Parse(std::string_view(reinterpret_cast<const char*>(data), size), "fuzz input");
  if (!json.ok()) return 0;
  if (auto p = Placement::FromJson(*json); p.ok()) {
    auto again = Placement::FromJson(p->ToJson());
    Require(again.ok() && *again == *p);
  }
  if (auto t = Topology::FromJson(*json); t.ok()) {
    auto again = Topology::FromJson(t->ToJson());
    Require(again.ok() && *again == *t);
  }
  if (auto plan = Plan::FromJson(*json); plan.ok()) {
    auto again = Plan::FromJson(plan->ToJson());
    Require(again.ok() && again->Digest() == plan->Digest());
  }
  (void)topology::Graph::FromJson(*json);
  (void)sim::hbd::ParseFaultTrace(*json);
  (void)sim::hbd::ParseCostParams(*json);
  return 0;
}
