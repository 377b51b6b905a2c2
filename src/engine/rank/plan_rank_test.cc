#include "weightport/engine/rank/plan_rank.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <mutex>
#include <set>
#include <thread>

#include "engine/testing/plan_rank_test_util.h"

namespace weightport {
namespace {

using namespace plan_rank_test;

class PlanRankReplay : public ::testing::TestWithParam<int> {};

size_t RelaySteps(const Plan& plan) {
  size_t n = 0;
  for (const PlanStep& s : plan.steps) n += s.after >= 0;
  return n;
}

TEST_P(PlanRankReplay, FsdpFlatToReplicatedTp) {
  Group g(MustPlan(FsdpFlat(Model(), 4), ReplicasOfTp(2, 2), GetParam()));
  if (GetParam() == 0) {
    EXPECT_EQ(RelaySteps(*g.plan), 0u);
  } else {
    EXPECT_GT(RelaySteps(*g.plan), 0u);
  }
  for (uint64_t v = 1; v <= 3; ++v) {
    ReceiveStats s = g.Update(v);
    EXPECT_EQ(s.bytes, g.plan->TotalBytes());
    g.ExpectLive(v);
  }
}

TEST_P(PlanRankReplay, Tp4ToTp2) {
  Group g(MustPlan(TensorParallel(Model(), 4), TensorParallel(Model(), 2), GetParam()));
  for (uint64_t v = 1; v <= 2; ++v) {
    g.Update(v);
    g.ExpectLive(v);
  }
}

TEST_P(PlanRankReplay, ReplicatedSourcesToThreeReplicasAndAnEmptyRank) {
  std::vector<int> src_ranks = {0, 1};
  auto dst = ReplicasOfTp(3, 2);
  ASSERT_TRUE(dst.ok());
  dst->AddRank(9);  // holds nothing
  auto src = Replicated(Model(), src_ranks);
  ASSERT_TRUE(src.ok());
  src->AddRank(5);
  Group g(MustPlan(src, dst, GetParam()));
  for (uint64_t v = 1; v <= 3; ++v) {
    g.Update(v);
    g.ExpectLive(v);
  }
}

// Widening at every receiver (bf16 -> f32), same width at the source (bf16 -> f16), identity for
// the rest, through relays: what lands is the source's elements converted, every version.
TEST_P(PlanRankReplay, ConvertsInFlightAtReceiversAndSources) {
  Group g(MustPlan(FsdpFlat(Model(), 4), ReplicasOfTp(3, 2), GetParam(), 1024,
                   {{"*_proj.weight", DType::kF32}, {"*norm*", DType::kF16}}));
  uint64_t at_sender = 0, at_receiver = 0;
  for (const PlanStep& s : g.plan->steps) {
    at_sender += s.transform == TransformKind::kConvertAtSender;
    at_receiver += s.transform == TransformKind::kConvertAtReceiver;
  }
  EXPECT_GT(at_sender, 0u);
  EXPECT_GT(at_receiver, 0u);
  EXPECT_LT(g.plan->TotalBytes(), g.plan->DestinationBytes());  // bf16 travels, f32 is stored
  for (uint64_t v = 1; v <= 3; ++v) {
    ReceiveStats s = g.Update(v);
    EXPECT_EQ(s.bytes, g.plan->TotalBytes());
    g.ExpectLive(v);
  }
}

// f32 sources, bf16 destinations: the sources convert when they publish and half the bytes travel.
TEST_P(PlanRankReplay, NarrowsAtTheSources) {
  Group g(MustPlan(TensorParallel(Model(DType::kF32), 4), ReplicasOfTp(2, 2, DType::kBF16), GetParam()));
  EXPECT_EQ(g.plan->TotalBytes(), g.plan->DestinationBytes());
  for (uint64_t v = 1; v <= 2; ++v) {
    g.Update(v);
    g.ExpectLive(v);
  }
}

// bf16 sources, f8e4m3 destinations with block scales. Sources on block boundaries quantise whole
// blocks as they publish (about half the bytes travel, relays forward the scales); FSDP's flat
// shards send bf16 and each receiver quantises its whole shard. Unchanged tensors are kept, and a
// receiver copies their quantised bands from its live copy instead of quantising them again,
// unless that copy's band was written to since.
TEST_P(PlanRankReplay, QuantisesInFlightAndKeepsWhatDidNotChange) {
  std::vector<MeshAxis> tp2 = TpReplicas();
  std::vector<MeshAxis> tp1 = {ReplicaAxis("dp", 2)};
  const std::vector<int> one = {0};
  for (int layout = 0; layout < 3; ++layout) {
    const char* names[] = {"one rank -> 3 replicas of TP-2", "TP-2 -> 2 whole replicas",
                           "FSDP-3 flat -> 3 x TP-2"};
    SCOPED_TRACE(names[layout]);
    auto src = layout == 0   ? Replicated(BlockModel(DType::kBF16), one)
               : layout == 1 ? TensorParallel(BlockModel(DType::kBF16), 2)
                             : FsdpFlat(BlockModel(DType::kBF16), 3);
    auto dst = BuildMesh(BlockModel(DType::kBF16), layout == 1 ? tp1 : tp2);
    Group g(MustPlan(src, dst, GetParam(), 1000, {{"*.weight", DType::kF8E4M3}}));
    for (const PlanStep& s : g.plan->steps) {
      ASSERT_TRUE(g.plan->Quantized(s.tensor));
      EXPECT_EQ(ReceiverEndPacked(s), layout == 2) << s.id;
    }
    if (layout < 2) {
      EXPECT_LT(g.plan->TotalBytes() * 10, g.plan->DestinationBytes() * 11);  // e4m3 travels
    }
    g.content = [&](uint32_t t, uint64_t v) {  // only q_proj changes after version 1
      return g.plan->tensors[t].name.find("q_proj") != std::string::npos ? v : 1;
    };
    uint64_t changing = 0;
    for (const PlanStep& s : g.plan->steps)
      if (g.plan->tensors[s.tensor].name.find("q_proj") != std::string::npos) changing += s.bytes;
    ReceiveStats first = g.Update(1);
    EXPECT_EQ(first.bytes, g.plan->TotalBytes());
    g.ExpectLive(1);
    ReceiveStats second = g.Update(2);
    g.ExpectLive(2);
    EXPECT_EQ(second.bytes, changing);
    EXPECT_EQ(second.bytes + second.kept_bytes, g.plan->TotalBytes());
    if (layout < 2) {  // nothing is quantised at the receivers
      EXPECT_EQ(first.bands_quantized + second.bands_quantized + second.bands_reused, 0u);
      continue;
    }
    EXPECT_GT(first.bands_quantized, 0u);
    EXPECT_EQ(first.bands_reused, 0u);
    // q_proj's bands (one per shard here) are quantised again, the others copied.
    EXPECT_EQ(second.bands_quantized, 3u * 2u);
    EXPECT_EQ(second.bands_quantized + second.bands_reused, first.bands_quantized);
    // A reader scribbles on a live shard that will not change (the first destination's first
    // o_proj shard): the next version quantises that band again rather than copy the scribble.
    const RankBuffer& d0 = g.plan->destinations[0];
    size_t o_shard = d0.shards.size();
    for (size_t i = 0; i < d0.shards.size() && o_shard == d0.shards.size(); ++i)
      if (g.plan->tensors[d0.shards[i].tensor].name.find("o_proj") != std::string::npos) o_shard = i;
    ASSERT_LT(o_shard, d0.shards.size());
    std::span<std::byte> scribbled = g.ranks.at(d0.endpoint)->shard_bytes(o_shard);
    scribbled[scribbled.size() / 2] ^= std::byte{0x5a};
    ReceiveStats third = g.Update(3);
    g.ExpectLive(3);
    EXPECT_EQ(third.bands_quantized, second.bands_quantized + 1);
    EXPECT_EQ(third.bands_quantized + third.bands_reused, first.bands_quantized);
  }
}

// Shards of several MiB are quantised in bands of whole block rows on two threads, at the source
// (whole blocks there) and at the receivers (flat sources): the bytes are those of quantising each
// shard whole.
TEST(PlanRank, LargeShardsAreQuantisedInBandsOnSeveralThreads) {
  // 4352 rows (34 blocks: TP-2 halves of 17) x 1074 columns (a partial block): 9.3 MiB of bf16.
  const std::vector<TensorMeta> big = {
      *TensorMeta::Make("model.layers.0.mlp.up_proj.weight", DType::kBF16, {4352, 1074})};
  PlanRankOptions o;
  o.worker_threads = 2;
  const std::vector<int> one = {0};
  for (bool at_sources : {true, false}) {
    SCOPED_TRACE(at_sources ? "at the source" : "at the receivers");
    auto src = at_sources ? Replicated(big, one) : FsdpFlat(big, 3);
    Group g(MustPlan(src, BuildMesh(big, TpReplicas()), 1, 1 << 20, {{"*", DType::kF8E4M3}}), o);
    for (const PlanStep& s : g.plan->steps) EXPECT_EQ(ReceiverEndPacked(s), !at_sources);
    for (uint64_t v = 1; v <= 2; ++v) {
      g.Update(v);
      g.ExpectLive(v);
    }
  }
}

// A version that changes a few rows of a shard of several bands: each receiver quantises again only
// the bands that read a changed chunk and copies the others from its live copy; the bytes are those
// of quantising every shard whole. The rows changed (1500-1509 of the first TP rank's shard) come
// from the second flat source, in the second piece of the first band: the first 1 MiB chunk of that
// piece holds rows ~1451-1938, so it lands in both bands of that shard.
TEST(PlanRank, OnlyTheBandsWhoseRowsChangedAreQuantisedAgain) {
  // 4352 x 1074 bf16 under TP-2: shards of 2176 rows, in bands of 1920 and 256 rows (~4 MiB).
  const std::vector<TensorMeta> big = {
      *TensorMeta::Make("model.layers.0.mlp.up_proj.weight", DType::kBF16, {4352, 1074})};
  Group g(MustPlan(FsdpFlat(big, 3), BuildMesh(big, TpReplicas()), 1, 1 << 20, {{"*", DType::kF8E4M3}}));
  constexpr size_t kRowBytes = 1074 * 2;
  g.bytes = [](const TensorMeta& t, size_t index, uint64_t v) {  // version 2 changes rows 1500-1509
    std::vector<std::byte> out = plan_rank_test::TensorBytes(t, index, 1);
    if (v >= 2)
      for (size_t i = 1500 * kRowBytes; i < 1510 * kRowBytes; ++i) out[i] ^= std::byte{0x11};
    return out;
  };
  ReceiveStats first = g.Update(1);
  g.ExpectLive(1);
  EXPECT_EQ(first.bands_quantized, 3u * 2u * 2u);  // 3 replicas x 2 TP ranks x 2 bands
  ReceiveStats second = g.Update(2);
  g.ExpectLive(2);
  EXPECT_EQ(second.bands_quantized, 3u * 2u) << "the first TP rank's two bands, in each replica";
  EXPECT_EQ(second.bands_reused, first.bands_quantized - 6u);
}

// 0: direct from the sources; 1: relay chain; 2: binary relay tree.
INSTANTIATE_TEST_SUITE_P(Fanout, PlanRankReplay, ::testing::Values(0, 1, 2));

TEST(PlanRank, CorruptChunkIsFetchedAgain) {
  Group g(MustPlan(FsdpFlat(Model(), 4), ReplicasOfTp(2, 2), 0));
  g.Update(1);
  // Which Get comes 40th across the ranks is a race: now and then it reads a hash area entry the
  // rank does not use, which harms nothing. So over several versions: every version exact, and at
  // least one corrupted chunk caught by its hash and fetched again.
  uint64_t corrupted = 0, refetched = 0;
  for (uint64_t v = 2; v <= 11 && refetched == 0; ++v) {
    g.faults->set_corrupt(FaultTrigger{.nth = 40, .ops = kFaultGet});
    ReceiveStats s = g.Update(v);
    refetched += s.corrupt_refetched;
    corrupted = g.faults->stats().corrupted;
    g.ExpectLive(v);
  }
  EXPECT_GE(corrupted, 1u);
  EXPECT_GE(refetched, 1u);
}

TEST(PlanRank, CorruptionOnRelayHopsIsRepaired) {
  Group g(MustPlan(TensorParallel(Model(), 2), ReplicasOfTp(3, 2), 1));
  ASSERT_GT(RelaySteps(*g.plan), 0u);
  g.faults->set_corrupt(FaultTrigger{.probability = 0.02, .ops = kFaultGet});
  for (uint64_t v = 1; v <= 2; ++v) {
    g.Update(v);
    g.ExpectLive(v);
  }
  EXPECT_GT(g.faults->stats().corrupted, 0u);
}

// Compressed steps: chunks that shrink travel as frames (also down the relay chain), the rest as
// is, and every destination byte is exact; a corrupted frame is fetched again.
TEST(PlanRank, CompressedChunksTravelAsFramesThroughRelays) {
  for (bool convert : {false, true}) {
    SCOPED_TRACE(convert ? "bf16 -> f32 at the receivers" : "no conversion");
    std::vector<TransformRule> rules;
    if (convert) rules.push_back({"*", DType::kF32});
    Group g(SlowLinkPlan(rules));
    uint64_t compressed = 0, relayed = 0;
    for (const PlanStep& s : g.plan->steps) {
      compressed += s.compress;
      relayed += s.compress && s.after >= 0;
    }
    ASSERT_GT(compressed, 0u);
    EXPECT_GT(relayed, 0u);
    g.bytes = CompressibleBytes;
    ReceiveStats first = g.Update(1);
    g.ExpectLive(1);
    EXPECT_GT(first.frames, first.chunks / 2);
    EXPECT_LT(first.frame_bytes * 10, first.bytes * 7) << "frames of half-entropy bytes";
    g.bytes = plan_rank_test::TensorBytes;  // random: no chunk shrinks, every one travels as is
    ReceiveStats second = g.Update(2);
    g.ExpectLive(2);
    EXPECT_EQ(second.frames, 0u);
    g.bytes = CompressibleBytes;
    g.faults->set_corrupt(FaultTrigger{.probability = 0.01, .ops = kFaultGet});
    ReceiveStats third = g.Update(3);
    g.ExpectLive(3);
    EXPECT_GT(third.frames, 0u);
    g.faults->set_corrupt(FaultTrigger{});
  }
}

// Delta with compression: kept chunks bring their frames along, so a relay's downstream that
// needs a chunk the relay kept reads a whole frame.
TEST(PlanRank, DeltaKeepsFramesForTheRanksDownstream) {
  Group g(SlowLinkPlan());
  g.bytes = CompressibleBytes;
  g.Update(1);
  // Only the norm changes in version 2; replica 2's copy of q_proj is scribbled on, so its relay
  // hop's chunk comes from upstream, where it was kept.
  g.content = [&](uint32_t t, uint64_t v) {
    return g.plan->tensors[t].name.find("norm") != std::string::npos ? v : 1;
  };
  for (auto& [ep, rank] : g.ranks)
    if (ep.side == PlanSide::kDestination && ep.rank >= 4) rank->shard_bytes(1)[3] ^= std::byte{1};
  ReceiveStats s = g.Update(2);
  g.ExpectLive(2);
  EXPECT_GT(s.kept_chunks, 0u);
  EXPECT_GT(s.frames, 0u);
}

// Delta: only the tensors that changed are fetched; the rest is copied from the live copy, through
// relays and conversions alike, and every destination byte is exact.
TEST_P(PlanRankReplay, DeltaFetchesOnlyWhatChanged) {
  for (bool convert : {false, true}) {
    SCOPED_TRACE(convert ? "bf16 -> f32 at the receivers" : "no conversion");
    std::vector<TransformRule> rules;
    if (convert) rules.push_back({"*", DType::kF32});
    Group g(MustPlan(FsdpFlat(Model(), 4), ReplicasOfTp(3, 2), GetParam(), 1024, rules));
    // The norm and q_proj change every version; the others only in version 3.
    g.content = [&](uint32_t t, uint64_t v) {
      const std::string& name = g.plan->tensors[t].name;
      return name.find("norm") != std::string::npos || name.find("q_proj") != std::string::npos ? v
             : v >= 3                                                                           ? 3
                                                                                                : 1;
    };
    uint64_t changing = 0;  // wire bytes of the steps of the tensors that change every version
    for (const PlanStep& s : g.plan->steps) {
      const std::string& name = g.plan->tensors[s.tensor].name;
      if (name.find("norm") != std::string::npos || name.find("q_proj") != std::string::npos)
        changing += s.bytes;
    }
    ReceiveStats first = g.Update(1);
    EXPECT_EQ(first.bytes, g.plan->TotalBytes());
    EXPECT_EQ(first.kept_chunks, 0u);
    g.ExpectLive(1);
    ReceiveStats second = g.Update(2);
    g.ExpectLive(2);
    EXPECT_EQ(second.bytes, changing);
    EXPECT_EQ(second.bytes + second.kept_bytes, g.plan->TotalBytes());
    EXPECT_GT(second.kept_chunks, 0u);
    ReceiveStats third = g.Update(3);  // everything changed
    g.ExpectLive(3);
    EXPECT_EQ(third.bytes, g.plan->TotalBytes());
    ReceiveStats fourth = g.Update(4);
    g.ExpectLive(4);
    EXPECT_EQ(fourth.bytes, changing);
    // The staging copy now holds version 3, whose unchanged chunks are those of version 5: they are
    // kept where they lie, with neither copy nor hash.
    ReceiveStats fifth = g.Update(5);
    g.ExpectLive(5);
    EXPECT_EQ(fifth.bytes, changing);
    EXPECT_EQ(fifth.bytes + fifth.kept_bytes, g.plan->TotalBytes());
  }
}

// A chunk unchanged since the live version but written over in the live copy is fetched after all.
TEST(PlanRank, DeltaFetchesAChunkChangedInTheLiveCopy) {
  Group g(MustPlan(TensorParallel(Model(), 2), ReplicasOfTp(2, 2), 1));
  g.content = [](uint32_t, uint64_t) { return 1; };  // the same bytes every version
  g.Update(1);
  PlanRank& victim = *g.ranks.at(Endpoint{PlanSide::kDestination, 1});
  victim.shard_bytes(0)[5] ^= std::byte{0x40};
  ReceiveStats s = g.Update(2);
  EXPECT_GT(s.chunks, 0u);  // the scribbled chunk, fetched
  EXPECT_EQ(s.bytes + s.kept_bytes, g.plan->TotalBytes());
  g.ExpectLive(2);
  // Version 3 is received into the copy that was scribbled on while it was live: the chunks it
  // still holds from version 1 are hashed before they are kept, and the scribbled one is copied
  // from the live copy (version 2 fetched it) instead.
  s = g.Update(3);
  EXPECT_EQ(s.chunks, 0u);
  EXPECT_EQ(s.kept_bytes, g.plan->TotalBytes());
  g.ExpectLive(3);
}

// The same where the receivers widen bf16 to f32: the landing area a kept chunk is hashed in is not
// the shard its conversion wrote, so a scribble on the converted shard of the copy that held the
// version before is converted over, not kept.
TEST(PlanRank, DeltaConvertsAgainOverAScribbleOnAConvertedShard) {
  Group g(MustPlan(TensorParallel(Model(), 2), ReplicasOfTp(1, 2), 1, 1024, {{"*", DType::kF32}}));
  g.content = [](uint32_t, uint64_t) { return 1; };
  g.Update(1);
  for (const RankBuffer& b : g.plan->destinations)
    g.ranks.at(b.endpoint)->shard_bytes(0)[5] ^= std::byte{0x40};
  g.Update(2);  // into the other copy, from the live one's landing areas, converted
  g.ExpectLive(2);
  ReceiveStats s = g.Update(3);  // into the scribbled copy, which still holds version 1's landing areas
  EXPECT_EQ(s.kept_bytes, g.plan->TotalBytes());
  g.ExpectLive(3);
}

// More kept chunks than one batch (8 MiB) per destination, on 4 keeper threads, a step converted at
// the receivers and a scribble on every shard of the live copy: every kept chunk is right.
TEST(PlanRank, KeptChunksInManyBatchesOnSeveralKeepers) {
  std::vector<TensorMeta> model;
  for (int i = 0; i < 4; ++i)  // 8 MiB of bf16 each
    model.push_back(*TensorMeta::Make("model.layers." + std::to_string(i) + ".mlp.up_proj.weight",
                                      DType::kBF16, {2048, 2048}));
  PlanRankOptions o;
  o.worker_threads = 4;
  const std::vector<MeshAxis> one_replica = {ReplicaAxis("dp", 1)};
  Group g(MustPlan(FsdpFlat(model, 2), BuildMesh(model, one_replica), 1, 1 << 20,
                   {{"model.layers.0.*", DType::kF32}}),
          o);
  g.content = [](uint32_t t, uint64_t v) { return t == 3 ? v : uint64_t{1}; };
  g.Update(1);
  PlanRank& dst = *g.ranks.at(g.plan->destinations.at(0).endpoint);
  for (size_t i = 0; i < dst.num_shards(); ++i)
    dst.shard_bytes(i)[dst.shard_bytes(i).size() / 2] ^= std::byte{0x10};
  for (uint64_t v = 2; v <= 3; ++v) {
    const ReceiveStats s = g.Update(v);
    EXPECT_GT(s.kept_bytes, uint64_t{16} << 20) << "version " << v;
    g.ExpectLive(v);
  }
}

// Without delta every chunk is fetched.
TEST(PlanRank, DeltaOffFetchesEverything) {
  PlanRankOptions o;
  o.delta = false;
  Group g(MustPlan(TensorParallel(Model(), 2), ReplicasOfTp(2, 2), 1), o);
  g.content = [](uint32_t, uint64_t) { return 1; };
  g.Update(1);
  ReceiveStats s = g.Update(2);
  EXPECT_EQ(s.bytes, g.plan->TotalBytes());
  EXPECT_EQ(s.kept_chunks, 0u);
  g.ExpectLive(2);
  // Also where the ranks quantise what lands (their worker thread is not a sign of delta).
  Group q(MustPlan(FsdpFlat(BlockModel(DType::kBF16), 3), BuildMesh(BlockModel(DType::kBF16), TpReplicas()),
                   1, 1000, {{"*.weight", DType::kF8E4M3}}),
          o);
  q.content = [](uint32_t, uint64_t) { return 1; };
  q.Update(1);
  s = q.Update(2);
  EXPECT_EQ(s.bytes, q.plan->TotalBytes());
  EXPECT_EQ(s.kept_chunks, 0u);
  q.ExpectLive(2);
}

// A destination with a rate cap fetches no faster than it: each receive takes at least its bytes,
// less one chunk of burst, over the cap, and the chunks held back wait on the loop (a rank that
// reads from a capped relay is paced by it and may never wait itself); the version lands intact.
// Without the cap nothing waits.
TEST(PlanRank, ACappedDestinationFetchesNoFasterThanItsCap) {
  PlanRankOptions capped;
  capped.delta = false;
  capped.max_bytes_per_s = 200e3;  // about 35 KB per destination rank: at least 0.17 s each
  Group g(MustPlan(TensorParallel(Model(), 2), ReplicasOfTp(2, 2), 1), capped);
  g.Publish(1);
  uint64_t waits = 0;  // a rank fed by a capped relay may never get ahead of its own cap
  for (auto& [rank, result] : g.Receive(1)) {
    ASSERT_TRUE(result.ok()) << "dst rank " << rank << ": " << result.status().ToString();
    waits += result->capped_waits;
    const double floor_s = (static_cast<double>(result->bytes) - 1024) / capped.max_bytes_per_s;
    EXPECT_GE(std::chrono::duration<double>(result->elapsed).count(), floor_s) << "dst rank " << rank;
  }
  EXPECT_GT(waits, 0u);
  for (const RankBuffer& b : g.plan->destinations) ASSERT_TRUE(g.ranks.at(b.endpoint)->Commit(1).ok());
  g.ExpectLive(1);

  Group free(MustPlan(TensorParallel(Model(), 2), ReplicasOfTp(2, 2), 1));
  free.Publish(1);
  for (auto& [rank, result] : free.Receive(1)) {
    ASSERT_TRUE(result.ok()) << "dst rank " << rank << ": " << result.status().ToString();
    EXPECT_EQ(result->capped_waits, 0u);
  }
}

// The receive's window halves on Gets that fail and are retried (an outage: every operation after
// the 40th fails for 30 ms), and with delay_factor on chunks slow against the fastest; each version
// still lands bit-exact. Delay unwatched, slow chunks leave the window as it was.
TEST(PlanRank, TheWindowHalvesOnLostGetsAndOnDelay) {
  PlanRankOptions o;
  o.delta = false;
  o.window = 16;
  o.max_attempts = 50;
  o.backoff_max = std::chrono::milliseconds(5);
  auto totals = [](std::map<int, Result<ReceiveStats>>& results) {
    ReceiveStats t;
    t.min_window = SIZE_MAX;
    for (auto& [rank, r] : results) {
      EXPECT_TRUE(r.ok()) << "dst rank " << rank << ": " << r.status().ToString();
      if (!r.ok()) continue;
      t.errors_retried += r->errors_retried;
      t.congestion_events += r->congestion_events;
      t.delay_backoffs += r->delay_backoffs;
      t.min_window = std::min(t.min_window, r->min_window);
    }
    return t;
  };
  auto commit = [](Group& g, uint64_t v) {
    for (const RankBuffer& b : g.plan->destinations) ASSERT_TRUE(g.ranks.at(b.endpoint)->Commit(v).ok());
    g.ExpectLive(v);
  };
  {
    Group g(MustPlan(FsdpFlat(Model(), 4), ReplicasOfTp(2, 2), 0), o);
    g.Publish(1);
    g.faults->set_fail_after(40);
    std::thread clear([&] {
      std::this_thread::sleep_for(std::chrono::milliseconds(30));
      g.faults->Clear();
    });
    auto results = g.Receive(1);
    clear.join();
    const ReceiveStats t = totals(results);
    EXPECT_GT(t.errors_retried, 0u);
    EXPECT_GT(t.congestion_events, 0u);
    EXPECT_LT(t.min_window, 16u);
    EXPECT_EQ(t.delay_backoffs, 0u);
    commit(g, 1);
  }
  for (double factor : {4.0, 0.0}) {
    SCOPED_TRACE("delay_factor " + std::to_string(factor));
    PlanRankOptions d = o;
    d.delay_factor = factor;
    Group g(MustPlan(FsdpFlat(Model(), 4), ReplicasOfTp(2, 2), 0), d);
    g.Publish(1);
    g.faults->set_delay({.probability = 0.3, .ops = kFaultGet}, std::chrono::milliseconds(20));
    auto results = g.Receive(1);
    g.faults->Clear();
    const ReceiveStats t = totals(results);
    EXPECT_GT(g.faults->stats().delayed, 0u);
    if (factor > 0) {
      EXPECT_GT(t.delay_backoffs, 0u);
      EXPECT_LT(t.min_window, 16u);
    } else {
      EXPECT_EQ(t.delay_backoffs, 0u);
      EXPECT_EQ(t.min_window, 16u);
    }
    commit(g, 1);
  }
}

// A corrupted chunk in a landing area is fetched again before it is converted. Flat sources to
// column splits: a chunk is up to 6 Gets, and a chunk fails after 4 corrupt attempts, so the
// rate per Get stays low enough that no chunk fails (about 1e-6 per chunk).
TEST(PlanRank, CorruptionBeforeAConversionIsRepaired) {
  Group g(MustPlan(FsdpFlat(Model(), 2), ReplicasOfTp(3, 2), 1, 1024, {{"*", DType::kF32}}));
  g.faults->set_corrupt(FaultTrigger{.probability = 0.005, .ops = kFaultGet});
  uint64_t refetched = 0;
  for (uint64_t v = 1; v <= 3; ++v) {
    refetched += g.Update(v).corrupt_refetched;
    g.ExpectLive(v);
  }
  EXPECT_GT(g.faults->stats().corrupted, 0u);
  EXPECT_GT(refetched, 0u);
}

TEST(PlanRank, DeadSourceFailsTheUpdateAndKeepsTheOldVersion) {
  Group g(MustPlan(FsdpFlat(Model(), 4), ReplicasOfTp(2, 2), 1));
  g.Update(1);
  g.faults->KillPeer("src rank 1");
  g.Publish(2);
  int failed = 0;
  for (auto& [rank, result] : g.Receive(2)) {
    if (result.ok()) continue;
    ++failed;
    EXPECT_NE(result.status().message().find("src rank 1"), std::string::npos) << result.status().ToString();
  }
  EXPECT_GT(failed, 0);
  for (const RankBuffer& b : g.plan->destinations) {
    g.ranks.at(b.endpoint)->Abort(2);
    EXPECT_FALSE(g.ranks.at(b.endpoint)->Commit(2).ok());
  }
  g.ExpectLive(1);
}

// The destination ranks some other destination relays to.
std::set<int> RelayRanks(const Plan& plan) {
  std::set<int> out;
  for (const PlanStep& s : plan.steps)
    if (s.from.side == PlanSide::kDestination) out.insert(s.from.rank);
  return out;
}

// Commits v at destination `rank` alone and checks what it holds.
void ExpectRankHolds(Group& g, int rank, uint64_t v) {
  const Endpoint ep{PlanSide::kDestination, rank};
  ASSERT_TRUE(g.ranks.at(ep)->Commit(v).ok()) << ep.ToString();
  g.ExpectRankLive(*g.plan->Buffer(ep), v);
}

// A relay that dies mid-plan (its connections fail): the ranks downstream of it fetch its steps
// from their root sources and complete, byte for byte. Chains and trees, conversions at either
// end, compressed chains (and local copies behind compressed hops, which read the source's bytes
// as they are).
TEST(PlanRank, DeadRelayIsRoutedAround) {
  const std::vector<TransformRule> convert = {{"*_proj.weight", DType::kF32}, {"*norm*", DType::kF16}};
  struct Case {
    const char* name;
    std::function<Plan()> plan;
    bool compressible = false;
  };
  const std::vector<Case> cases = {
      {"chain", [] { return MustPlan(TensorParallel(Model(), 2), ReplicasOfTp(4, 2), 1); }},
      {"binary tree", [] { return MustPlan(TensorParallel(Model(), 2), ReplicasOfTp(4, 2), 2); }},
      {"conversions", [&] { return MustPlan(FsdpFlat(Model(), 4), ReplicasOfTp(3, 2), 1, 1024, convert); }},
      {"compressed", [] { return SlowLinkPlan({}); }, true},
      {"compressed, converted at the receivers",
       [] {
         return SlowLinkPlan({{"*", DType::kF32}});
       },
       true},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    Group g(c.plan());
    if (c.compressible) g.bytes = CompressibleBytes;
    g.Update(1);
    const std::set<int> relays = RelayRanks(*g.plan);
    ASSERT_FALSE(relays.empty());
    const int dead = *relays.begin();
    g.faults->KillPeer(Endpoint{PlanSide::kDestination, dead}.ToString());
    g.Publish(2);
    uint64_t rerouted = 0;
    for (auto& [rank, result] : g.Receive(2)) {
      if (rank == dead) continue;  // it still reads the sources; only the ranks reading it lost it
      ASSERT_TRUE(result.ok()) << "dst rank " << rank << ": " << result.status().ToString();
      rerouted += result->rerouted_steps;
      if (c.compressible) {
        EXPECT_GT(result->frames, 0u) << "dst rank " << rank;
      }
      ExpectRankHolds(g, rank, 2);
    }
    EXPECT_GT(rerouted, 0u);
  }
}

// A relay lost deep in a chain: its downstream reads the nearest live relay upstream of it, not the
// source; with that one dead too, the next one up (or the source). Every byte still arrives.
TEST(PlanRank, ALostRelayIsRoutedToTheNearestLiveRankUpstream) {
  const Plan plan = MustPlan(TensorParallel(Model(), 2), ReplicasOfTp(4, 2), 1);
  // A step at depth 2 or more: its sender relays what another relay sent it.
  const PlanStep* deep = nullptr;
  for (const PlanStep& s : plan.steps)
    if (s.after >= 0 && plan.steps[s.after].after >= 0) deep = &s;
  ASSERT_NE(deep, nullptr) << "the chain has no step two relays deep";
  const int reader = deep->to_rank, relay = deep->from.rank, upstream = plan.steps[deep->after].from.rank;
  for (const bool upstream_dead_too : {false, true}) {
    SCOPED_TRACE(upstream_dead_too ? "the relay upstream is dead too" : "one relay dead");
    Group g(plan);
    g.Update(1);
    g.faults->KillPeer(Endpoint{PlanSide::kDestination, relay}.ToString());
    if (upstream_dead_too) g.faults->KillPeer(Endpoint{PlanSide::kDestination, upstream}.ToString());
    g.Publish(2);
    for (auto& [rank, result] : g.Receive(2)) {
      if (rank == relay || (upstream_dead_too && rank == upstream)) continue;
      ASSERT_TRUE(result.ok()) << "dst rank " << rank << ": " << result.status().ToString();
      ExpectRankHolds(g, rank, 2);
      if (rank != reader) continue;
      EXPECT_GT(result->rerouted_steps, 0u);
      // It went to a relay upstream first (the nearest one, which is the dead upstream in the
      // second case, then further up).
      EXPECT_GT(result->rerouted_via_relay, 0u);
      EXPECT_EQ(result->errors_retried, 0u) << "a chunk from a dead rank is routed, not retried";
    }
  }
}

// A relay that hangs (never receives: a stopped process) holds its downstream until the coordinator
// declares it lost; then the downstream completes from the sources.
TEST(PlanRank, RelayDeclaredLostIsRoutedAround) {
  Group g(MustPlan(TensorParallel(Model(), 2), ReplicasOfTp(3, 2), 1));
  g.Update(1);
  const int hung = *RelayRanks(*g.plan).begin();
  // Every rank but the hung one receives `version` at once, each on a thread of its own.
  std::map<int, Result<ReceiveStats>> results;
  std::vector<std::thread> threads;
  std::mutex mu;
  auto receive_all = [&](uint64_t version) {
    results.clear();
    threads.clear();
    for (const RankBuffer& b : g.plan->destinations) {
      if (b.endpoint.rank == hung) continue;
      threads.emplace_back([&, version, ep = b.endpoint] {
        auto r = g.ranks.at(ep)->Receive(version);
        std::lock_guard<std::mutex> lock(mu);
        results.emplace(ep.rank, std::move(r));
      });
    }
  };
  g.Publish(2);
  receive_all(2);
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  {
    std::lock_guard<std::mutex> lock(mu);
    EXPECT_LT(results.size(), threads.size()) << "the hung relay's downstream finished without it";
  }
  for (auto& [ep, r] : g.ranks)
    if (ep.side == PlanSide::kDestination) r->PeerLost(Endpoint{PlanSide::kDestination, hung});
  for (auto& t : threads) t.join();
  uint64_t rerouted = 0, via_relay = 0;
  for (auto& [rank, result] : results) {
    ASSERT_TRUE(result.ok()) << "dst rank " << rank << ": " << result.status().ToString();
    rerouted += result->rerouted_steps;
    via_relay += result->rerouted_via_relay;
    ExpectRankHolds(g, rank, 2);
  }
  EXPECT_GT(rerouted, 0u);
  // In this chain a replicated tensor passes several relays before the hung one: its downstream
  // reads the nearest of them, not the source.
  EXPECT_GT(via_relay, 0u);
  // The next version goes around the lost relay at once: no rank waits for it again.
  g.Publish(3);
  receive_all(3);
  for (auto& t : threads) t.join();
  for (auto& [rank, result] : results) {
    ASSERT_TRUE(result.ok()) << "dst rank " << rank << ": " << result.status().ToString();
    ExpectRankHolds(g, rank, 3);
  }
  EXPECT_EQ(results.size(), threads.size());
}

// A relay whose own receive fails (not dead: corrupt beyond repair) marks its counters failed; the
// ranks downstream go to the sources at once instead of waiting for the timeout.
TEST(PlanRank, FailedRelayIsRoutedAroundAtOnce) {
  Group g(MustPlan(TensorParallel(Model(), 2), ReplicasOfTp(3, 2), 1));
  g.Update(1);
  const int relay = *RelayRanks(*g.plan).begin();
  g.Publish(2);
  g.ranks.at(Endpoint{PlanSide::kDestination, relay})->Cancel(2, "test");
  uint64_t rerouted = 0;
  for (auto& [rank, result] : g.Receive(2)) {
    if (rank == relay) {
      EXPECT_EQ(result.status().code(), StatusCode::kCancelled);
      continue;
    }
    ASSERT_TRUE(result.ok()) << "dst rank " << rank << ": " << result.status().ToString();
    rerouted += result->rerouted_steps;
    ExpectRankHolds(g, rank, 2);
  }
  EXPECT_GT(rerouted, 0u);
}

// A relay that is gone when the ranks below it dial it (it left right after sending its keys, before
// the coordinator noticed): Connect with `unreachable` lists it, and the receive goes around it to
// the sources. Without that list the dial is an error, as before; a source is never skipped.
TEST(PlanRank, ARelayThatCannotBeDialledIsRoutedAround) {
  Group g(MustPlan(TensorParallel(Model(), 2), ReplicasOfTp(3, 2), 1));
  g.Update(1);
  const int relay = *RelayRanks(*g.plan).begin();
  const Endpoint gone{PlanSide::kDestination, relay};
  g.Remove(gone);
  std::vector<int> below;  // the ranks that read from the relay
  for (const auto& [ep, rank] : g.ranks) {
    const std::vector<Endpoint> needed = rank->peers_needed();
    if (std::find(needed.begin(), needed.end(), gone) != needed.end()) below.push_back(ep.rank);
  }
  ASSERT_FALSE(below.empty());
  // The table names the relay at an address nothing answers (Connect keeps a connection whose
  // entry is unchanged; a changed one is dialled).
  std::map<Endpoint, PlanPeer> table = g.table;
  for (size_t i = 16; i < table.at(gone).address.size(); ++i) table.at(gone).address[i] = std::byte{0xff};
  for (int rank : below) {
    PlanRank& r = *g.ranks.at(Endpoint{PlanSide::kDestination, rank});
    EXPECT_EQ(r.Connect(table).code(), StatusCode::kUnavailable) << "dst rank " << rank;
    std::vector<Endpoint> unreachable;
    ASSERT_TRUE(r.Connect(table, &unreachable).ok()) << "dst rank " << rank;
    EXPECT_EQ(unreachable, std::vector<Endpoint>{gone});
  }
  g.Publish(2);
  uint64_t rerouted = 0;
  for (auto& [rank, result] : g.Receive(2)) {  // every rank but the relay
    ASSERT_TRUE(result.ok()) << "dst rank " << rank << ": " << result.status().ToString();
    rerouted += result->rerouted_steps;
    ExpectRankHolds(g, rank, 2);
  }
  EXPECT_GT(rerouted, 0u);
  // A source that cannot be dialled is still an error.
  const Endpoint source = g.plan->sources[0].endpoint;
  g.Remove(source);
  for (size_t i = 16; i < table.at(source).address.size(); ++i) table.at(source).address[i] = std::byte{0xff};
  std::vector<Endpoint> unreachable;
  EXPECT_EQ(g.ranks.at(Endpoint{PlanSide::kDestination, below[0]})->Connect(table, &unreachable).code(),
            StatusCode::kUnavailable);
}

TEST(PlanRank, UnpublishedSourceTimesOutNamingTheWait) {
  PlanRankOptions o;
  o.timeout = std::chrono::milliseconds(300);
  Group g(MustPlan(TensorParallel(Model(), 2), TensorParallel(Model(), 2), 0), o);
  g.Update(1);
  // Version 2 is never published: the hash headers still say 1.
  auto result = g.ranks.at(Endpoint{PlanSide::kDestination, 0})->Receive(2);
  ASSERT_FALSE(result.ok());
  EXPECT_EQ(result.status().code(), StatusCode::kTimeout);
  EXPECT_NE(result.status().message().find("had not published"), std::string::npos)
      << result.status().ToString();
  g.ExpectLive(1);
}

TEST(PlanRank, RefusesARankOutsideThePlan) {
  auto plan =
      std::make_shared<const Plan>(MustPlan(TensorParallel(Model(), 2), TensorParallel(Model(), 2), 0));
  auto fabric = std::make_shared<FakeFabric>();
  ProgressLoop loop(*MakeFakeTransport(fabric, "x"));
  auto r = PlanRank::Create(plan, Endpoint{PlanSide::kDestination, 7}, loop);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("dst rank 7"), std::string::npos);
}

}  // namespace
}  // namespace weightport
