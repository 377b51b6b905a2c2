// bench_rollback: what rollback and the replica check cost. Every rank runs in this process on its
// own transport (fake: in-process memcpy fabric; shm: UCX shared memory). Sources hold the whole
// model each (DDP, --sources replicas); destinations are --replicas whole-model replicas.
//
// Measured in one run, medians over --versions versions:
//   receive_full_s    a destination's Receive of a version in full (delta off): the transfer a
//                     rollback replaces
//   restore_s         a destination's Restore of a kept version (PlanRank::Restore): a local copy
//                     checked block by block
//   commit_keep_s     Commit with --keep versions kept (copy and hash of the staging copy) against
//   commit_plain_s    Commit without (a flip), the same ranks and bytes
//   publish_ddp_s     a DDP source's Publish (its steps' chunk hashes and the digests of its
//                     replicated shards) against
//   publish_fsdp_s    a source's Publish in a plan where the same sources hold disjoint FSDP shards
//                     (the same bytes sent per source, nothing replicated, no digests)
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
  std::shared_ptr<const Plan> plan;
  std::map<Endpoint, std::unique_ptr<ProgressLoop>> loops;
  std::map<Endpoint, std::unique_ptr<PlanRank>> ranks;
  ~Ranks() {
    ranks.clear();
    for (auto& [ep, loop] : loops) loop->Stop();
  }
};

Result<std::unique_ptr<Ranks>> Start(const Placement& src, const Placement& dst, const std::string& transport,
                                     uint64_t chunk, const PlanRankOptions& destinations) {
  auto r = std::make_unique<Ranks>();
  PlanOptions po;
  po.chunk_bytes = chunk;
  WP_ASSIGN_OR_RETURN(Plan p, MakePlan(src, dst, Topology(), po));
  r->plan = std::make_shared<const Plan>(std::move(p));
  auto fabric = std::make_shared<FakeFabric>();
  std::map<Endpoint, PlanPeer> table;
  for (const auto* side : {&r->plan->sources, &r->plan->destinations})
    for (const RankBuffer& b : *side) {
      Result<std::unique_ptr<Transport>> t = RankTransport(transport, fabric, b.endpoint.ToString());
      WP_RETURN_IF_ERROR(t.status());
      auto& loop = r->loops[b.endpoint] = std::make_unique<ProgressLoop>(std::move(*t));
      PlanRankOptions o = b.endpoint.side == PlanSide::kDestination ? destinations : PlanRankOptions{};
      WP_ASSIGN_OR_RETURN(auto rank, PlanRank::Create(r->plan, b.endpoint, *loop, o));
      table[b.endpoint] = rank->peer_info();
      r->ranks[b.endpoint] = std::move(rank);
    }
  for (auto& [ep, rank] : r->ranks) WP_RETURN_IF_ERROR(rank->Connect(table));
  return r;
}

struct Times {
  std::vector<double> publish, receive, commit;
};

// One version: the sources' shards written and published, every destination receiving at once,
// then committing; per-rank times appended to `t`.
Status Update(Ranks& r, uint64_t v, Times& t) {
  for (const RankBuffer& b : r.plan->sources) {
    PlanRank& rank = *r.ranks.at(b.endpoint);
    for (size_t i = 0; i < rank.num_shards(); ++i)
      std::memset(rank.shard_bytes(i).data(), static_cast<int>(v), rank.shard_bytes(i).size());
    const auto t0 = Clock::now();
    WP_RETURN_IF_ERROR(rank.Publish(v));
    t.publish.push_back(Seconds(Clock::now() - t0));
  }
  std::vector<std::thread> threads;
  std::vector<Status> results(r.plan->destinations.size());
  std::vector<double> took(results.size());
  for (size_t i = 0; i < results.size(); ++i)
    threads.emplace_back([&, i] {
      const auto t0 = Clock::now();
      results[i] = r.ranks.at(r.plan->destinations[i].endpoint)->Receive(v).status();
      took[i] = Seconds(Clock::now() - t0);
    });
  for (auto& th : threads) th.join();
  for (size_t i = 0; i < results.size(); ++i) {
    WP_RETURN_IF_ERROR(results[i]);
    t.receive.push_back(took[i]);
    const auto t0 = Clock::now();
    WP_RETURN_IF_ERROR(r.ranks.at(r.plan->destinations[i].endpoint)->Commit(v));
    t.commit.push_back(Seconds(Clock::now() - t0));
  }
  return Status::Ok();
}

int Run(int argc, char** argv) {
  CLI::App app{
      "bench_rollback: rollback (restore of a kept version) against a full transfer, the cost of "
      "keeping versions at commit, and of the replica digests at publish"};
  std::string preset = "small", transport = "shm", chunk = "4M";
  int sources = 2, replicas = 2, versions = 5;
  size_t keep = 2;
  bool json = false;
  app.add_option("--preset", preset, "Synthetic model: tiny, small, 1b")->capture_default_str();
  app.add_option("--transport", transport, "fake or shm")
      ->check(CLI::IsMember({"fake", "shm"}))
      ->capture_default_str();
  app.add_option("--sources", sources, "Source ranks, each holding the whole model (DDP)")
      ->capture_default_str();
  app.add_option("--replicas", replicas, "Destination ranks, each a whole-model replica")
      ->capture_default_str();
  app.add_option("--keep", keep, "Versions each destination keeps (PlanRankOptions::keep_versions)")
      ->capture_default_str();
  app.add_option("--chunk", chunk, "Chunk size")->capture_default_str();
  app.add_option("--versions", versions, "Versions timed (after one that warms up)")->capture_default_str();
  app.add_flag("--json", json, "Machine-readable output");
  if (int rc = ParseArgs(app, argc, argv); rc >= 0) return rc;
  auto fail = [](const Status& s) {
    std::cerr << "bench_rollback: " << s.ToString() << std::endl;
    return 1;
  };
  auto spec = PresetSpec(preset, ModelArch::kDense);
  if (!spec.ok()) return fail(spec.status());
  const std::vector<TensorMeta> tensors = ModelTensors(*spec);
  auto chunk_bytes = ParseSize(chunk, "--chunk");
  if (!chunk_bytes.ok()) return fail(chunk_bytes.status());
  std::vector<int> src_ranks, dst_ranks;
  for (int i = 0; i < sources; ++i) src_ranks.push_back(i);
  for (int i = 0; i < replicas; ++i) dst_ranks.push_back(i);
  auto ddp = Replicated(tensors, src_ranks);
  auto fsdp = FsdpFlat(tensors, sources);
  auto dst = Replicated(tensors, dst_ranks);
  if (!ddp.ok() || !fsdp.ok() || !dst.ok())
    return fail(!ddp.ok() ? ddp.status() : !fsdp.ok() ? fsdp.status() : dst.status());

  PlanRankOptions keeping;
  keeping.keep_versions = keep;
  // Every byte changes every version (memset to the version), so each receive is a full transfer:
  // the one a rollback replaces. Delta stays on, as by default: it gives the rank its keeper threads.
  PlanRankOptions plain = keeping;
  plain.keep_versions = 0;

  Times kept, flat, fsdp_times;
  std::vector<double> restore;
  uint64_t rank_bytes = 0;
  {
    auto r = Start(*ddp, *dst, transport, *chunk_bytes, keeping);
    if (!r.ok()) return fail(r.status());
    Times warm;
    if (Status s = Update(**r, 1, warm); !s.ok()) return fail(s);
    for (int v = 2; v <= versions + 1; ++v) {
      if (Status s = Update(**r, v, kept); !s.ok()) return fail(s);
      // Every destination restores the version before (a rollback's work; its commit is a flip) and
      // forgets it again: the next Update goes on from v.
      for (const RankBuffer& b : (*r)->plan->destinations) {
        PlanRank& rank = *(*r)->ranks.at(b.endpoint);
        rank_bytes = rank.kept_bytes();
        const auto t0 = Clock::now();
        auto restored = rank.Restore(v - 1);
        if (!restored.ok()) return fail(restored.status());
        restore.push_back(Seconds(Clock::now() - t0));
        rank.Abort(v - 1);
      }
    }
  }
  for (auto [placement, times, options] :
       {std::tuple{&*ddp, &flat, plain}, std::tuple{&*fsdp, &fsdp_times, plain}}) {
    auto r = Start(*placement, *dst, transport, *chunk_bytes, options);
    if (!r.ok()) return fail(r.status());
    Times warm;
    if (Status s = Update(**r, 1, warm); !s.ok()) return fail(s);
    for (int v = 2; v <= versions + 1; ++v)
      if (Status s = Update(**r, v, *times); !s.ok()) return fail(s);
  }
  const double receive = Summarize(kept.receive).median, restored = Summarize(restore).median;
  nlohmann::ordered_json out = {{"preset", preset},
                                {"transport", transport},
                                {"sources", sources},
                                {"replicas", replicas},
                                {"keep_versions", keep},
                                {"rank_bytes", rank_bytes},
                                {"receive_full_s", receive},
                                {"restore_s", restored},
                                {"restore_vs_receive", restored / receive},
                                {"commit_keep_s", Summarize(kept.commit).median},
                                {"commit_plain_s", Summarize(flat.commit).median},
                                {"publish_ddp_s", Summarize(flat.publish).median},
                                {"publish_fsdp_s", Summarize(fsdp_times.publish).median}};
  if (json) {
    std::cout << out.dump(2) << std::endl;
    return 0;
  }
  std::printf("%s over %s: %d DDP sources -> %d replicas, %s per replica, medians of %d versions\n",
              preset.c_str(), transport.c_str(), sources, replicas, HumanSize(rank_bytes).c_str(), versions);
  std::printf("  receive in full   %.4f s   restore (rollback) %.4f s   = %.2fx\n", receive, restored,
              restored / receive);
  std::printf("  commit keeping %zu %.4f s   commit (flip)      %.6f s\n", keep,
              out["commit_keep_s"].get<double>(), out["commit_plain_s"].get<double>());
  std::printf("  publish DDP       %.4f s   publish FSDP       %.4f s (same bytes sent per source)\n",
              out["publish_ddp_s"].get<double>(), out["publish_fsdp_s"].get<double>());
  return 0;
}

}  // namespace
}  // namespace weightport::bench

int main(int argc, char** argv) { return weightport::bench::Run(argc, argv); }
