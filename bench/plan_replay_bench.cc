// bench_plan_replay: what a version costs when a plan is compiled once and replayed (PlanRank), and
// what it would cost if every version re-planned, re-compiled, re-allocated and re-registered its
// arenas and reconnected its ranks. Every rank runs in this process, each on its own transport and
// progress loop (fake: in-process memcpy fabric; shm: UCX shared memory), with the same plan: FSDP
// flat shards over --sources ranks -> --replicas x TP --tp destination ranks.
//
// Per version, both ways: the sources' shards are written (memset), published (hashed), every
// destination receives concurrently and commits. The difference of the medians is the per-update
// overhead replay saves; the from-scratch figure is broken into plan / create (compile, allocate,
// register) / connect / transfer. --quantize: the destinations store the projections as e4m3 (at
// the sources with --src-tp, whose shards are whole blocks; else at the receivers), with
// --worker-threads threads per rank; the sources' Publish time is reported beside the replay.
#include <cstdio>
#include <cstring>
#include <iostream>
#include <map>
#include <thread>

#include <nlohmann/json.hpp>

#include "bench_util.h"
#include "weightport/core/placement_builders.h"
#include "weightport/engine/rank/plan_rank.h"
#include "weightport/format/synthetic_model.h"
#include "weightport/plan/planner.h"
#include "weightport/transport/testing/fake_transport.h"
#include "weightport/transport/ucx_transport.h"

namespace weightport::bench {
namespace {

struct Ranks {
  std::map<Endpoint, std::unique_ptr<PlanRank>> ranks;
};

Result<Ranks> CreateAndConnect(const std::shared_ptr<const Plan>& plan,
                               std::map<Endpoint, std::unique_ptr<ProgressLoop>>& loops, double& create_s,
                               double& connect_s, const PlanRankOptions& options = {}) {
  Ranks r;
  auto t0 = Clock::now();
  std::map<Endpoint, PlanPeer> table;
  for (auto& [ep, loop] : loops) {
    WP_ASSIGN_OR_RETURN(auto rank, PlanRank::Create(plan, ep, *loop, options));
    table[ep] = rank->peer_info();
    r.ranks[ep] = std::move(rank);
  }
  auto t1 = Clock::now();
  for (auto& [ep, rank] : r.ranks) WP_RETURN_IF_ERROR(rank->Connect(table));
  create_s = Seconds(t1 - t0);
  connect_s = Seconds(Clock::now() - t1);
  return r;
}

// One version through every rank; `publish_s` gets the time the sources spent in Publish.
Status Update(const Plan& plan, Ranks& r, uint64_t v, uint64_t& bytes, double& publish_s) {
  publish_s = 0;
  for (const RankBuffer& b : plan.sources) {
    PlanRank& rank = *r.ranks.at(b.endpoint);
    for (size_t i = 0; i < rank.num_shards(); ++i) {
      auto s = rank.shard_bytes(i);
      std::memset(s.data(), static_cast<int>(v), s.size());
    }
    const auto t0 = Clock::now();
    WP_RETURN_IF_ERROR(rank.Publish(v));
    publish_s += Seconds(Clock::now() - t0);
  }
  std::vector<std::thread> threads;
  std::vector<Status> results(plan.destinations.size());
  std::vector<uint64_t> got(plan.destinations.size());
  for (size_t i = 0; i < plan.destinations.size(); ++i)
    threads.emplace_back([&, i] {
      auto res = r.ranks.at(plan.destinations[i].endpoint)->Receive(v);
      results[i] = res.status();
      if (res.ok()) got[i] = res->bytes;
    });
  for (auto& t : threads) t.join();
  bytes = 0;
  for (size_t i = 0; i < results.size(); ++i) {
    WP_RETURN_IF_ERROR(results[i]);
    bytes += got[i];
  }
  for (const RankBuffer& b : plan.destinations) WP_RETURN_IF_ERROR(r.ranks.at(b.endpoint)->Commit(v));
  return Status::Ok();
}

int Run(int argc, char** argv) {
  CLI::App app{"bench_plan_replay: per-version cost of replaying a compiled plan vs. planning from scratch"};
  std::string preset = "tiny", transport = "fake", chunk = "4M";
  int sources = 4, replicas = 2, tp = 2, fanout = 1, versions = 5, src_tp = 0;
  size_t worker_threads = 0;
  bool json = false, quantize = false;
  app.add_option("--preset", preset, "Synthetic model: tiny, small, 1b")->capture_default_str();
  app.add_option("--transport", transport, "fake or shm")
      ->check(CLI::IsMember({"fake", "shm"}))
      ->capture_default_str();
  app.add_option("--sources", sources, "FSDP flat source ranks")->capture_default_str();
  app.add_option("--replicas", replicas, "Destination replicas")->capture_default_str();
  app.add_option("--tp", tp, "Destination TP degree")->capture_default_str();
  app.add_option("--relay-fanout", fanout, "Plan relay fan-out")->capture_default_str();
  app.add_option("--chunk", chunk, "Chunk size")->capture_default_str();
  app.add_option("--versions", versions, "Versions timed each way")->capture_default_str();
  app.add_option("--src-tp", src_tp,
                 "Sources tensor parallel over this many ranks instead of FSDP flat shards")
      ->capture_default_str();
  app.add_flag("--quantize", quantize, "Destinations store every *_proj.weight as f8e4m3 in 128x128 blocks");
  app.add_option("--worker-threads", worker_threads, "PlanRankOptions::worker_threads (0: hardware)")
      ->capture_default_str();
  app.add_flag("--json", json, "Machine-readable output");
  if (int rc = ParseArgs(app, argc, argv); rc >= 0) return rc;

  auto fail = [](const Status& s) {
    std::cerr << "bench_plan_replay: " << s.ToString() << std::endl;
    return 1;
  };
  auto spec = PresetSpec(preset, ModelArch::kDense);
  if (!spec.ok()) return fail(spec.status());
  const std::vector<TensorMeta> tensors = ModelTensors(*spec);
  auto chunk_bytes = ParseSize(chunk, "--chunk");
  if (!chunk_bytes.ok()) return fail(chunk_bytes.status());
  auto src = src_tp > 0 ? TensorParallel(tensors, src_tp) : FsdpFlat(tensors, sources);
  std::vector<MeshAxis> axes = {ReplicaAxis("dp", replicas), TensorParallelAxis("tp", tp)};
  auto dst = BuildMesh(tensors, axes);
  if (!src.ok() || !dst.ok()) return fail(src.ok() ? dst.status() : src.status());
  PlanOptions po;
  po.chunk_bytes = *chunk_bytes;
  po.relay_fanout = fanout;
  if (quantize) po.transforms = {{"*_proj.weight", DType::kF8E4M3}};
  PlanRankOptions ro;
  ro.worker_threads = worker_threads;
  auto make_plan = [&]() -> Result<std::shared_ptr<const Plan>> {
    WP_ASSIGN_OR_RETURN(Plan p, MakePlan(*src, *dst, Topology(), po));
    return std::make_shared<const Plan>(std::move(p));
  };

  // One transport and loop per rank, for the whole run (a process keeps its UCX worker).
  auto fabric = std::make_shared<FakeFabric>();
  auto first = make_plan();
  if (!first.ok()) return fail(first.status());
  std::map<Endpoint, std::unique_ptr<ProgressLoop>> loops;
  for (const auto* side : {&(*first)->sources, &(*first)->destinations})
    for (const RankBuffer& b : *side) {
      Result<std::unique_ptr<Transport>> t = RankTransport(transport, fabric, b.endpoint.ToString());
      if (!t.ok()) return fail(t.status());
      loops[b.endpoint] = std::make_unique<ProgressLoop>(std::move(*t));
    }

  std::vector<double> replay, publish, scratch, plan_s, create_s, connect_s, transfer_s;
  uint64_t bytes = 0;
  double published = 0;
  {  // replay: compiled once, before timing
    double c = 0, k = 0;
    auto ranks = CreateAndConnect(*first, loops, c, k, ro);
    if (!ranks.ok()) return fail(ranks.status());
    for (int v = 1; v <= versions + 1; ++v) {
      auto t0 = Clock::now();
      if (Status s = Update(**first, *ranks, v, bytes, published); !s.ok()) return fail(s);
      if (v == 1) continue;  // the first one warms the connections
      replay.push_back(Seconds(Clock::now() - t0));
      publish.push_back(published);
    }
  }
  for (int v = 1; v <= versions; ++v) {
    auto t0 = Clock::now();
    auto plan = make_plan();
    if (!plan.ok()) return fail(plan.status());
    auto t1 = Clock::now();
    double c = 0, k = 0;
    auto ranks = CreateAndConnect(*plan, loops, c, k, ro);
    if (!ranks.ok()) return fail(ranks.status());
    auto t2 = Clock::now();
    if (Status s = Update(**plan, *ranks, v, bytes, published); !s.ok()) return fail(s);
    auto t3 = Clock::now();
    scratch.push_back(Seconds(t3 - t0));
    plan_s.push_back(Seconds(t1 - t0));
    create_s.push_back(c);
    connect_s.push_back(k);
    transfer_s.push_back(Seconds(t3 - t2));
  }
  for (auto& [ep, loop] : loops) loop->Stop();

  const Stats r = Summarize(replay), s = Summarize(scratch);
  nlohmann::ordered_json out = {{"preset", preset},
                                {"transport", transport},
                                {"ranks", {{"sources", sources}, {"replicas", replicas}, {"tp", tp}}},
                                {"steps", (*first)->steps.size()},
                                {"bytes_per_version", bytes},
                                {"replay_s", r.median},
                                {"replay_publish_s", Summarize(publish).median},
                                {"scratch_s", s.median},
                                {"overhead_saved_s", s.median - r.median},
                                {"scratch_plan_s", Summarize(plan_s).median},
                                {"scratch_create_s", Summarize(create_s).median},
                                {"scratch_connect_s", Summarize(connect_s).median},
                                {"scratch_transfer_s", Summarize(transfer_s).median}};
  if (json) {
    std::cout << out.dump(2) << std::endl;
  } else {
    std::printf("%s model, %s transport, %zu steps, %s per version (median of %d)\n", preset.c_str(),
                transport.c_str(), (*first)->steps.size(), HumanSize(bytes).c_str(), versions);
    std::printf("  replay (compiled once):  %.4f s  (the sources' Publish %.4f)\n", r.median,
                Summarize(publish).median);
    std::printf(
        "  from scratch:            %.4f s  (plan %.4f, create+register %.4f, connect %.4f, transfer %.4f)\n",
        s.median, Summarize(plan_s).median, Summarize(create_s).median, Summarize(connect_s).median,
        Summarize(transfer_s).median);
    std::printf("  saved per version:       %.4f s\n", s.median - r.median);
  }
  return 0;
}

}  // namespace
}  // namespace weightport::bench

int main(int argc, char** argv) { return weightport::bench::Run(argc, argv); }
