// The testbed scenario: the cases bench/run-fanout-bench measures on network namespaces, so that
// the simulator's predictions can be set beside the measurements. Eight hosts on one switch (the
// testbed's bridge), every link shaped to the same rate in both directions; the source on h0.
#include <string>

#include "sim/scenario_build.h"
#include "sim/scenario_models.h"
#include "weightport/core/placement_builders.h"
#include "weightport/format/synthetic_model.h"
#include "weightport/topology/presets.h"

namespace weightport::sim {

using nlohmann::json;
using topology::internal::PresetParams;

// per_message_us: a cost per Get to charge (SimOptions::per_message_s). 0 by default: a cost of
// 36 us per Get matched the reshard's measurement, but packing its strided pieces at the sources
// (33,108 Gets into the busiest destination down to 404) left the measured time where it was, so
// per-Get cost is not what makes it slower than its bytes (docs/SIMULATOR.md).
json TestbedDefaults() {
  return {{"case", "fanout"},  {"receivers", 7},   {"payload", "1gib"}, {"holders", 2},
          {"relay_fanout", 1}, {"rate_gbps", 1.0}, {"chunk_kib", 1024}, {"per_message_us", 0}};
}

namespace {

// "1gib": 16 bf16 tensors of 64 MiB (the layout `--model-bytes 1GiB` makes), "128mib" 2 of them;
// "small": the small dense preset (485 MiB, 147 tensors).
Result<std::vector<TensorMeta>> Payload(const PresetParams& p) {
  WP_ASSIGN_OR_RETURN(std::string payload, p.String("payload"));
  if (payload == "1gib") return BucketTensors(uint64_t{1} << 30, 16);
  if (payload == "128mib") return BucketTensors(uint64_t{128} << 20, 2);
  if (payload == "small") {
    WP_ASSIGN_OR_RETURN(ModelSpec spec, PresetSpec("small", ModelArch::kDense));
    return ModelTensors(spec);
  }
  return p.Error("payload", "must be \"1gib\", \"128mib\" or \"small\" (got \"" + payload + "\")");
}

}  // namespace

Status BuildTestbed(Scenario& s, const PresetParams& p) {
  WP_ASSIGN_OR_RETURN(std::string which, p.String("case"));
  WP_ASSIGN_OR_RETURN(int receivers, p.Int("receivers", 1, 7));
  WP_ASSIGN_OR_RETURN(int holders, p.Int("holders", 1, 7));
  WP_ASSIGN_OR_RETURN(int fanout, p.Int("relay_fanout", 0, 64));
  WP_ASSIGN_OR_RETURN(double rate_gbps, p.Number("rate_gbps"));
  WP_ASSIGN_OR_RETURN(int chunk_kib, p.Int("chunk_kib", 4, 1 << 20));
  WP_ASSIGN_OR_RETURN(double per_message_us, p.Number("per_message_us", /*allow_zero=*/true));
  s.per_message_s = per_message_us * 1e-6;
  WP_ASSIGN_OR_RETURN(s.graph, topology::MakePreset("fat-tree", {{"hosts", 8},
                                                                 {"hosts_per_tor", 8},
                                                                 {"spines", 0},
                                                                 {"gpus_per_host", 0},
                                                                 {"nic_gbps", rate_gbps}}));
  const std::vector<int> hosts = s.graph.Endpoints();
  WP_ASSIGN_OR_RETURN(std::vector<TensorMeta> tensors, Payload(p));
  Placement src, dst;
  if (which == "fanout") {
    WP_ASSIGN_OR_RETURN(src, BuildMesh(tensors, std::vector<MeshAxis>{ReplicaAxis("dp", 1)}));
    WP_ASSIGN_OR_RETURN(dst, BuildMesh(tensors, std::vector<MeshAxis>{ReplicaAxis("dp", receivers)}));
    s.endpoints = {Range(hosts, 0, 1), Range(hosts, 1, receivers)};
    s.description = "testbed fan-out: h0 -> " + std::to_string(receivers) + " receivers (h1..h" +
                    std::to_string(receivers) + ")";
  } else if (which == "reshard") {
    // examples/plans/fsdp4.json -> tp2x2.json: 4 FSDP ranks (one flat unit per layer) on h0-h3,
    // 2 replicas x TP 2 on h4-h7.
    FsdpFlatOptions per_layer;
    per_layer.unit_per_layer = true;
    WP_ASSIGN_OR_RETURN(src, BuildMesh(tensors, std::vector<MeshAxis>{FsdpFlatAxis("fsdp", 4, per_layer)}));
    WP_ASSIGN_OR_RETURN(
        dst, BuildMesh(tensors, std::vector<MeshAxis>{ReplicaAxis("dp", 2), TensorParallelAxis("tp", 2)}));
    s.endpoints = {Range(hosts, 0, 4), Range(hosts, 4, 4)};
    s.description = "testbed reshard: 4 FSDP ranks (h0-h3) -> 2 replicas x TP 2 (h4-h7)";
  } else if (which == "replacement") {
    // A source started again on h<holders> refills the whole payload from the data-parallel
    // replicas on h0.. (PlanRank::Refill: blocks dealt over the holders in turn).
    WP_ASSIGN_OR_RETURN(src, BuildMesh(tensors, std::vector<MeshAxis>{ReplicaAxis("dp", holders)}));
    WP_ASSIGN_OR_RETURN(dst, BuildMesh(tensors, std::vector<MeshAxis>{ReplicaAxis("dp", 1)}));
    s.endpoints = {Range(hosts, 0, holders), Range(hosts, holders, 1)};
    s.description =
        "testbed node replacement: h0..h" + std::to_string(holders - 1) + " -> h" + std::to_string(holders);
  } else {
    return p.Error("case", "must be \"fanout\", \"reshard\" or \"replacement\" (got \"" + which + "\")");
  }
  s.description += ", " + p.merged().at("payload").get<std::string>() + ", links at " +
                   std::to_string(rate_gbps) + " Gb/s, relay fan-out " + std::to_string(fanout);
  return Finish(s, src, dst, static_cast<uint64_t>(chunk_kib) << 10, fanout);
}

}  // namespace weightport::sim
