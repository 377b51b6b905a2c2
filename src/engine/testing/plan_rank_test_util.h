// What the PlanRank tests share: small models, content that shows a misplaced or stale byte, a
// Group of ranks over the fake transport (with fault injection) that publishes, receives, commits
// and checks versions, and the plans they run.
#pragma once

#include <gtest/gtest.h>

#include <cstring>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <thread>

#include "weightport/core/device_memory.h"
#include "weightport/core/placement_builders.h"
#include "weightport/engine/rank/plan_rank.h"
#include "weightport/kernels/convert.h"
#include "weightport/plan/planner.h"
#include "weightport/plan/quantized.h"
#include "weightport/transport/testing/fake_transport.h"
#include "weightport/transport/testing/fault_transport.h"

namespace weightport::plan_rank_test {

inline std::vector<TensorMeta> Model(DType dtype = DType::kBF16) {
  return {*TensorMeta::Make("model.embed_tokens.weight", dtype, {96, 64}),
          *TensorMeta::Make("model.layers.0.self_attn.q_proj.weight", dtype, {128, 64}),
          *TensorMeta::Make("model.layers.0.self_attn.o_proj.weight", dtype, {64, 128}),
          *TensorMeta::Make("model.layers.0.mlp.down_proj.weight", dtype, {64, 190}),
          *TensorMeta::Make("model.norm.weight", dtype, {64})};
}

// Every byte depends on (version, tensor, position): a misplaced or stale byte shows.
inline std::vector<std::byte> TensorBytes(const TensorMeta& t, size_t index, uint64_t version) {
  std::vector<std::byte> out(t.bytes);
  uint64_t x = version * 0x9E3779B97F4A7C15ull + index * 0xBF58476D1CE4E5B9ull;
  for (auto& b : out) {
    x ^= x >> 31;
    x *= 0x94D049BB133111EBull;
    b = std::byte(static_cast<uint8_t>(x >> 56));
  }
  return out;
}

// Elements of `whole` (the tensor in `dtype`) into or against a packed shard.
inline void CopySlice(const Plan& plan, const PlannedShard& s, DType dtype, std::span<std::byte> packed,
                      std::span<const std::byte> whole, bool into_packed) {
  const TensorMeta& t = plan.tensors[s.tensor];
  ASSERT_TRUE(
      ForEachContiguousRun(s.slice, t.shape, DTypeSize(dtype), [&](const SliceRun& r) {
        if (into_packed)
          std::memcpy(packed.data() + r.packed_offset, whole.data() + r.tensor_offset, r.length);
        else
          EXPECT_EQ(std::memcmp(packed.data() + r.packed_offset, whole.data() + r.tensor_offset, r.length), 0)
              << t.name << " " << s.slice.ToString();
      }).ok());
}

// A quantised shard holds its slice of `whole` quantised in 128x128 blocks: e4m3 bytes, then scales.
inline void ExpectQuantizedShard(const Plan& plan, const PlannedShard& s, std::span<const std::byte> whole,
                                 std::span<const std::byte> stored) {
  const TensorMeta& t = plan.tensors[s.tensor];
  auto m = QuantizedMatrixOf(s.slice, t.shape, plan.Fp8ScalingOf(s.tensor));
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  std::vector<std::byte> values(static_cast<size_t>(s.slice.num_elements()) * DTypeSize(t.dtype));
  CopySlice(plan, s, t.dtype, values, whole, true);
  std::vector<uint8_t> want(static_cast<size_t>(m->rows * m->cols));
  std::vector<float> scales(static_cast<size_t>(m->scales));
  ASSERT_TRUE(
      kernels::QuantizeE4m3(t.dtype, values.data(), m->rows, m->cols, m->scaling, want.data(), scales.data())
          .ok());
  ASSERT_EQ(stored.size(), StoredScaleOffset(s.slice.num_elements()) + scales.size() * 4);
  EXPECT_EQ(std::memcmp(stored.data(), want.data(), want.size()), 0) << t.name << " e4m3 bytes";
  EXPECT_EQ(std::memcmp(stored.data() + StoredScaleOffset(s.slice.num_elements()), scales.data(),
                        scales.size() * 4),
            0)
      << t.name << " scales";
}

// The host stand-in, each call forwarded: test devices override what they watch, break or play.
class StandInDevice : public DeviceMemory {
 public:
  Result<std::shared_ptr<void>> Allocate(size_t bytes) override { return host_->Allocate(bytes); }
  Status ToHost(const void* device, std::span<std::byte> host) override {
    return host_->ToHost(device, host);
  }
  Status ToDevice(std::span<const std::byte> host, void* device) override {
    return host_->ToDevice(host, device);
  }
  Status CopyOnDevice(const void* from, void* to, size_t bytes) override {
    return host_->CopyOnDevice(from, to, bytes);
  }
  Result<std::vector<uint64_t>> ChunkHashes(const void* device, size_t bytes, uint64_t chunk) override {
    return host_->ChunkHashes(device, bytes, chunk);
  }
  std::string memory_type() const override { return host_->memory_type(); }
  Result<uint64_t> HashConcatenated(std::span<const DeviceBytes> parts) override {
    return host_->HashConcatenated(parts);
  }

 private:
  std::shared_ptr<DeviceMemory> host_ = HostStandInMemory();
};

struct Group {
  std::shared_ptr<const Plan> plan;
  std::shared_ptr<FakeFabric> fabric = std::make_shared<FakeFabric>();
  std::shared_ptr<FaultPlan> faults = std::make_shared<FaultPlan>(7);
  std::map<Endpoint, std::unique_ptr<ProgressLoop>> loops;  // each rank's, with its transport
  std::map<Endpoint, PlanPeer> table;                       // every rank's address and key
  std::map<Endpoint, std::unique_ptr<PlanRank>> ranks;
  // Which version's bytes tensor t holds in version v: every tensor changes every version unless a
  // test says otherwise.
  std::function<uint64_t(uint32_t t, uint64_t v)> content = [](uint32_t, uint64_t v) { return v; };
  // The bytes of a tensor in a version: random unless a test wants them compressible.
  std::function<std::vector<std::byte>(const TensorMeta&, size_t, uint64_t)> bytes = TensorBytes;

  std::shared_ptr<DeviceMemory> device;  // the destinations' PlanRankOptions::device: checks read there
  bool direct = false;  // PlanRankOptions::device_direct: a destination's device copy is its copy
  std::shared_ptr<DeviceMemory> source_device;  // the sources': the trainer writes there

  // Every rank with `options`, or the sources with `sources` where given; with `from_parts`, each
  // rank made from its part of the plan (rank_plan.h), as a plan session's ranks are.
  explicit Group(Plan p, PlanRankOptions options = {}, std::optional<PlanRankOptions> sources = std::nullopt,
                 bool from_parts = false)
      : plan(std::make_shared<const Plan>(std::move(p))),
        device(options.device),
        direct(options.device_direct),
        source_device(sources ? sources->device : options.device) {
    for (PlanRankOptions* o : {&options, sources ? &*sources : nullptr})
      if (o && o->timeout == PlanRankOptions{}.timeout) o->timeout = std::chrono::milliseconds(10'000);
    std::vector<Endpoint> all;
    for (const auto& b : plan->sources) all.push_back(b.endpoint);
    for (const auto& b : plan->destinations) all.push_back(b.endpoint);
    std::optional<RankPlanCutter> cutter;
    if (from_parts) cutter.emplace(plan);
    for (const Endpoint& ep : all) {
      auto t = MakeFakeTransport(fabric, ep.ToString());
      EXPECT_TRUE(t.ok());
      auto f = MakeFaultInjectingTransport(std::move(*t), faults);
      EXPECT_TRUE(f.ok());
      loops[ep] = std::make_unique<ProgressLoop>(std::move(*f));
      const PlanRankOptions& o = ep.side == PlanSide::kSource && sources ? *sources : options;
      Result<std::unique_ptr<PlanRank>> rank = InvalidArgument("no part");
      if (cutter) {
        auto part = cutter->Cut(ep);
        EXPECT_TRUE(part.ok()) << part.status().ToString();
        if (part.ok()) rank = PlanRank::Create(*part, *loops[ep], o);
      } else {
        rank = PlanRank::Create(plan, ep, *loops[ep], o);
      }
      EXPECT_TRUE(rank.ok()) << rank.status().ToString();
      table[ep] = (*rank)->peer_info();
      ranks[ep] = std::move(*rank);
    }
    for (auto& [ep, r] : ranks) EXPECT_TRUE(r->Connect(table).ok()) << ep.ToString();
  }
  ~Group() {
    ranks.clear();
    for (auto& [ep, l] : loops) l->Stop();
  }

  // Rank `ep` (created with rotate_keys) moves to a fresh transport named `name`; every rank connects
  // again with its new address and keys.
  void Rekey(Endpoint ep, const std::string& name) {
    auto made = MakeFakeTransport(fabric, name);
    ASSERT_TRUE(made.ok());
    auto faulty = MakeFaultInjectingTransport(*std::move(made), faults);
    ASSERT_TRUE(faulty.ok());
    auto fresh = std::make_unique<ProgressLoop>(*std::move(faulty));
    ASSERT_TRUE(ranks.at(ep)->Rekey(*fresh).ok());
    loops.at(ep)->Stop();
    loops[ep] = std::move(fresh);
    table[ep] = ranks.at(ep)->peer_info();
    for (auto& [e, rank] : ranks) ASSERT_TRUE(rank->Connect(table).ok()) << e.ToString();
  }

  // Rank `ep` goes away with its transport: its address leads nowhere.
  void Remove(Endpoint ep) {
    ranks.erase(ep);
    loops.at(ep)->Stop();
    loops.erase(ep);
  }

  // Writes version v into every source (its device shards when it has them) and publishes it.
  void Publish(uint64_t v) {
    for (const RankBuffer& b : plan->sources) {
      PlanRank& r = *ranks.at(b.endpoint);
      for (size_t i = 0; i < b.shards.size(); ++i) {
        const TensorMeta& t = plan->tensors[b.shards[i].tensor];
        const uint32_t index = b.shards[i].tensor;
        std::span<std::byte> into = r.shard_bytes(i);
        std::vector<std::byte> staged;  // what goes to the device
        if (source_device) {
          staged.resize(into.size());
          into = staged;
        }
        CopySlice(*plan, b.shards[i], t.dtype, into, bytes(t, index, content(index, v)), true);
        if (source_device) {
          ASSERT_TRUE(source_device->ToDevice(staged, r.device_shard(i)).ok());
        }
      }
      ASSERT_TRUE(r.Publish(v).ok());
    }
  }

  // Every destination (not Removed) receives v concurrently; the results by rank.
  std::map<int, Result<ReceiveStats>> Receive(uint64_t v) {
    std::map<int, Result<ReceiveStats>> out;
    std::mutex mu;
    std::vector<std::thread> threads;
    for (const RankBuffer& b : plan->destinations)
      if (ranks.count(b.endpoint))
        threads.emplace_back([&, ep = b.endpoint] {
          auto result = ranks.at(ep)->Receive(v);
          std::lock_guard<std::mutex> lock(mu);
          out.emplace(ep.rank, std::move(result));
        });
    for (auto& t : threads) t.join();
    return out;
  }

  ReceiveStats Update(uint64_t v) {
    Publish(v);
    ReceiveStats total;
    for (auto& [rank, result] : Receive(v)) {
      EXPECT_TRUE(result.ok()) << "dst rank " << rank << ": " << result.status().ToString();
      if (!result.ok()) continue;
      total.bytes += result->bytes;
      total.chunks += result->chunks;
      total.corrupt_refetched += result->corrupt_refetched;
      total.kept_chunks += result->kept_chunks;
      total.kept_bytes += result->kept_bytes;
      total.frames += result->frames;
      total.frame_bytes += result->frame_bytes;
      total.bands_quantized += result->bands_quantized;
      total.bands_reused += result->bands_reused;
      total.device_bytes += result->device_bytes;
      total.device_kept_bytes += result->device_kept_bytes;
      total.device_direct_bytes += result->device_direct_bytes;
      total.source_device_bytes += result->source_device_bytes;
    }
    for (const RankBuffer& b : plan->destinations) EXPECT_TRUE(ranks.at(b.endpoint)->Commit(v).ok());
    return total;
  }

  void ExpectLive(uint64_t v) {
    for (const RankBuffer& b : plan->destinations) ExpectRankLive(b, v);
  }

  // Destination b's live copy holds version v: the sources' elements in its dtypes.
  void ExpectRankLive(const RankBuffer& b, uint64_t v) {
    PlanRank& r = *ranks.at(b.endpoint);
    EXPECT_EQ(r.live_version(), v);
    for (size_t i = 0; i < b.shards.size(); ++i) {
      std::span<std::byte> held = r.shard_bytes(i);  // the copy checked below
      std::vector<std::byte> on_device;
      if (device) {  // the device's live copy is the arena's, or with device_direct the one there is
        on_device.resize(held.size());
        ASSERT_TRUE(device->ToHost(r.device_shard(i), on_device).ok());
        if (direct)
          held = on_device;
        else
          EXPECT_EQ(std::memcmp(on_device.data(), held.data(), held.size()), 0)
              << b.endpoint.ToString() << " shard " << i;
      }
      const uint32_t index = b.shards[i].tensor;
      const TensorMeta& t = plan->tensors[index];
      const DType dtype = plan->destination_dtypes[index];
      std::vector<std::byte> whole = bytes(t, index, content(index, v));
      if (plan->Quantized(index)) {
        ExpectQuantizedShard(*plan, b.shards[i], whole, held);
        continue;
      }
      if (dtype != t.dtype) {  // what the destinations store: the source's elements converted
        std::vector<std::byte> converted(static_cast<size_t>(t.num_elements()) * DTypeSize(dtype));
        ASSERT_TRUE(kernels::Convert(t.dtype, dtype, whole.data(), converted.data(), t.num_elements()).ok());
        whole = std::move(converted);
      }
      CopySlice(*plan, b.shards[i], dtype, held, whole, false);
    }
  }
};

inline Plan MustPlan(const Result<Placement>& src, const Result<Placement>& dst, int fanout,
                     uint64_t chunk = 1024, std::vector<TransformRule> transforms = {}) {
  EXPECT_TRUE(src.ok()) << src.status().ToString();
  EXPECT_TRUE(dst.ok()) << dst.status().ToString();
  PlanOptions o;
  o.chunk_bytes = chunk;
  o.relay_fanout = fanout;
  o.transforms = std::move(transforms);
  auto plan = MakePlan(*src, *dst, Topology(), o);
  EXPECT_TRUE(plan.ok()) << plan.status().ToString();
  return std::move(*plan);
}

inline Result<Placement> ReplicasOfTp(int replicas, int tp, DType dtype = DType::kBF16) {
  std::vector<MeshAxis> axes = {ReplicaAxis("dp", replicas), TensorParallelAxis("tp", tp)};
  return BuildMesh(Model(dtype), axes);
}

// Matrices on 128-element block boundaries under TP-2 (with partial blocks at their edges) and a vector.
inline std::vector<TensorMeta> BlockModel(DType dtype) {
  return {*TensorMeta::Make("model.layers.0.self_attn.q_proj.weight", dtype, {256, 200}),
          *TensorMeta::Make("model.layers.0.self_attn.o_proj.weight", dtype, {300, 256}),
          *TensorMeta::Make("model.layers.0.mlp.up_proj.weight", dtype, {512, 128}),
          *TensorMeta::Make("model.norm.weight", dtype, {200})};
}

// Three replicas of TP-2.
inline std::vector<MeshAxis> TpReplicas() { return {ReplicaAxis("dp", 3), TensorParallelAxis("tp", 2)}; }

// Bytes zstd shrinks by about half: only their low four bits vary.
inline std::vector<std::byte> CompressibleBytes(const TensorMeta& t, size_t index, uint64_t version) {
  std::vector<std::byte> out = plan_rank_test::TensorBytes(t, index, version);
  for (auto& b : out) b &= std::byte{0x0f};
  return out;
}

// Sources on a fast host, three TP-2 replicas on hosts behind 100 Mbit/s links: the planner
// compresses the steps into the slow hosts.
inline Plan SlowLinkPlan(std::vector<TransformRule> rules = {}) {
  auto topo = Topology::Make({{"trainer", 100, {0, 1}, {}},
                              {"edge0", 0.1, {}, {0, 1}},
                              {"edge1", 0.1, {}, {2, 3}},
                              {"edge2", 0.1, {}, {4, 5}}});
  EXPECT_TRUE(topo.ok()) << topo.status().ToString();
  PlanOptions o;
  o.chunk_bytes = 1024;
  o.compressor_gbps = 5;
  o.transforms = std::move(rules);
  auto plan = MakePlan(*FsdpFlat(Model(), 2), *ReplicasOfTp(3, 2), *topo, o);
  EXPECT_TRUE(plan.ok()) << plan.status().ToString();
  return std::move(*plan);
}

}  // namespace weightport::plan_rank_test
