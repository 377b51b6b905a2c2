#include "weightport/engine/rank/plan_rank.h"
#include "weightport/core/memory_check.h"

#include <sys/mman.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <future>
#include <mutex>

#include "plan_rank_impl.h"
#include "weightport/core/hash.h"
#include "weightport/engine/common/arena.h"
#include "weightport/engine/rank/source_replicas.h"
#include "weightport/kernels/compress.h"
#include "weightport/kernels/convert.h"

namespace weightport {

using arena_layout::ArenaLayout;
using namespace plan_rank_internal;

PlanRank::PlanRank(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
PlanRank::~PlanRank() {
  if (impl_ && impl_->loop) {
    // Connections and the region belong to the loop's transport: release them there.
    auto* impl = impl_.get();
    auto release = [impl] {
      impl->OnLoopThread();  // run there (or after the loop stopped, alone)
      impl->connections.clear();
      impl->device_regions = {};
      impl->arena.reset();
    };
    if (impl->loop->on_loop_thread())
      release();
    else
      impl->loop->Call([&release](Transport&) { release(); });
  }
}

Result<std::unique_ptr<PlanRank>> PlanRank::Create(std::shared_ptr<const Plan> plan, Endpoint me,
                                                   ProgressLoop& loop, PlanRankOptions options) {
  std::vector<uint32_t> replicated = ReplicatedShards(SourceReplicaGroups(*plan), me);
  WP_ASSIGN_OR_RETURN(auto compiled, CompileRank(std::move(plan), me, CompileOptions::Of(options)));
  WP_ASSIGN_OR_RETURN(auto rank, CreateCompiled(std::move(compiled), loop, options));
  rank->impl_->replicated = std::move(replicated);
  return rank;
}

Result<std::unique_ptr<PlanRank>> PlanRank::Create(const RankPlan& part, ProgressLoop& loop,
                                                   PlanRankOptions options) {
  WP_ASSIGN_OR_RETURN(auto compiled, CompileRank(part, CompileOptions::Of(options)));
  WP_ASSIGN_OR_RETURN(auto rank, CreateCompiled(std::move(compiled), loop, options));
  rank->impl_->replicated = part.replicated_shards;
  return rank;
}

Result<std::unique_ptr<PlanRank>> PlanRank::CreateCompiled(std::shared_ptr<const CompiledRank> compiled,
                                                           ProgressLoop& loop, PlanRankOptions options) {
  auto impl = std::make_unique<Impl>();
  impl->c = std::move(compiled);
  impl->loop = &loop;
  impl->options = options;
  const ArenaLayout& mine = *impl->c->mine;
  const uint64_t end = impl->c->arena_bytes;
  if (options.keep_versions > 0 && options.device && !impl->is_source())
    return Unimplemented(impl->c->me.ToString() + ": keep_versions with shards on a device");
  // Before the arena: an error after it is registered would free it off the loop thread.
  if (options.device) WP_RETURN_IF_ERROR(AllocateDeviceShards(*impl));
  Impl* raw = impl.get();
  WP_ASSIGN_OR_RETURN(
      raw->arena, loop.Call([raw, end](Transport& t) -> Result<std::unique_ptr<MemoryRegion>> {
        const uint64_t size = std::max<uint64_t>(end, 64);
        // The transport's own memory where it allocates (UCX: same-host peers map it, a Get is one memcpy).
        // Elsewhere our own mapping registered as is: the region's own type is what the transport
        // accepts as the local side of a Get (AllocateArena's wrapper is for remote access only).
        // A rank that rotates its keys keeps its memory in a mapping of its own, which each fresh
        // transport registers again (Rekey): the shards never move.
        if (!raw->options.rotate_keys) {
          auto own = t.Allocate(size);
          if (own.ok() || own.status().code() != StatusCode::kUnimplemented) return own;
        }
        WP_RETURN_IF_ERROR(CheckMemoryFits(size, false, "plan arena"));
        void* data = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (data == MAP_FAILED)
          return ResourceExhausted("plan arena: mmap of " + std::to_string(size) + " bytes failed");
        raw->own_memory = std::shared_ptr<void>(data, [size](void* p) { munmap(p, size); });
        return RegisterArena(t, data, size, "plan arena");
      }));
  raw->base = raw->arena->data();
  if (options.device_direct) {  // with a device: CompileRank refuses it without
    Status direct = loop.Call([raw](Transport& t) -> Status {
      auto regions = RegisterDeviceCopies(*raw, t);
      if (!regions.ok()) {
        raw->arena.reset();  // registered on the loop thread: released there
        return regions.status();
      }
      raw->device_regions = *std::move(regions);
      return Status::Ok();
    });
    if (!direct.ok()) return direct;
  }
  // Fault every page in now, once, so that no version pays first-touch faults (both copies of a
  // destination would otherwise be faulted by the first two versions).
  std::memset(raw->base, 0, raw->arena->size());
  const size_t threads = options.worker_threads
                             ? std::min<size_t>(options.worker_threads, 64)
                             : std::clamp<size_t>(std::thread::hardware_concurrency(), 1, 8);
  if (!impl->is_source()) {
    for (const auto& [step, slot] : mine.counter_slot) StoreCounter(raw->at(mine.CounterOffset(step)), 0);
    // Batches of kept chunks are independent: as many keepers as workers (one quantises).
    if ((options.delta && !impl->c->in_chunks.empty()) || !impl->c->in_quantize.empty())
      impl->keepers = std::make_unique<WorkerPool>(options.delta ? threads : 1);
  }
  // A destination's device copier (device spans mapped: CompileRank) and device_direct verifier.
  if (!impl->is_source() && !impl->device_shards[0].empty())
    impl->device_copier = std::make_unique<WorkerPool>(1);
  const std::vector<uint8_t>& direct = impl->c->direct_chunks;
  if (std::find(direct.begin(), direct.end(), 1) != direct.end())
    impl->direct_verifier = std::make_unique<WorkerPool>(1);
  if (threads > 1 &&
      impl->c->out_quantize.size() + impl->c->in_quantize.size() + impl->c->out_chunks.size() > 1)
    impl->workers = std::make_unique<WorkerPool>(threads);
  return std::unique_ptr<PlanRank>(new PlanRank(std::move(impl)));
}

const Plan& PlanRank::plan() const { return *impl_->c->plan; }
uint64_t PlanRank::plan_digest() const {
  return impl_->c->plan_digest ? *impl_->c->plan_digest : impl_->c->plan->Digest();
}
Endpoint PlanRank::endpoint() const { return impl_->c->me; }
PlanPeer PlanRank::peer_info() const {
  Impl* impl = impl_.get();
  Bytes address = impl->loop->Call([](Transport& t) { return t.address(); });
  PlanPeer peer{std::move(address), impl->arena->remote_key()};
  if (impl->is_source() && impl->device_regions[1]) {
    peer.device_key = impl->device_regions[1]->remote_key();
    peer.device_memory = impl->options.device->memory_type();
  }
  return peer;
}

std::vector<Endpoint> PlanRank::peers_needed() const {
  std::vector<Endpoint> out;
  for (const InStep& s : impl_->c->in_steps) out.push_back(s.sender);
  for (const RootSource& r : impl_->c->roots) out.push_back(r.endpoint);
  for (const DetourLevel& l : impl_->c->detour_levels) out.push_back(l.from);  // to route around a relay
  for (const Alternate& a : impl_->c->alternates) out.push_back(a.from);       // to replace a lost source
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

Status PlanRank::Connect(const std::map<Endpoint, PlanPeer>& peers, std::vector<Endpoint>* unreachable) {
  Impl* impl = impl_.get();
  // A peer the coordinator lost (PeerLost) is left out of the tables it sends after a rekey: it is
  // routed around, so it needs no connection.
  const std::set<Endpoint> lost = impl->loop->Call([impl](Transport&) {
    impl->OnLoopThread();
    return impl->lost_peers;
  });
  for (const Endpoint& ep : peers_needed()) {
    auto it = peers.find(ep);
    if (it == peers.end() && lost.count(ep)) continue;
    if (it == peers.end()) return NotFound(impl->c->me.ToString() + ": no address for " + ep.ToString());
    const ArenaLayout& l = impl->c->layouts.at(ep);
    if (it->second.key.length < l.public_bytes)
      return InvalidArgument(ep.ToString() + ": its arena is " + std::to_string(it->second.key.length) +
                             " bytes, the plan needs " + std::to_string(l.public_bytes) +
                             " (a different plan?)");
    const PlanPeer& peer = it->second;
    // A table that names a peer as before (another rank came back, say) leaves its connection be;
    // a peer whose entry changed is dialled again.
    const bool kept = impl->loop->Call([&](Transport&) {
      impl->OnLoopThread();
      auto a = impl->addresses.find(ep);
      auto k = impl->keys.find(ep);
      const bool same = !peer.device_key && a != impl->addresses.end() && a->second == peer.address &&
                        k != impl->keys.end() && k->second.Serialize() == peer.key.Serialize() &&
                        impl->connections.count(ep);
      if (!same && impl->connections.count(ep)) {
        impl->connections[ep]->Close();
        impl->connections.erase(ep);
        impl->keys.erase(ep);
        impl->addresses.erase(ep);
        impl->source_devices.erase(ep);
      }
      return same;
    });
    if (kept) continue;
    // Dialled and, once connected, entered in the loop thread's tables, in one task there.
    const Status connected = impl->loop->Call([&](Transport& t) -> Status {
      impl->OnLoopThread();
      auto conn = t.Connect(peer.address, ep.ToString());
      if (!conn.ok()) return conn.status();
      impl->connections[ep] = std::move(*conn);
      impl->keys[ep] = peer.key;
      impl->addresses[ep] = peer.address;
      return Status::Ok();
    });
    const StatusCode code = connected.code();
    if (!connected.ok() && unreachable != nullptr && ep.side == PlanSide::kDestination &&
        (code == StatusCode::kUnavailable || code == StatusCode::kIoError)) {
      // A relay gone before the coordinator noticed (it left right after a rekey): around it.
      unreachable->push_back(ep);
      impl->loop->Call([impl, ep](Transport&) {
        impl->OnLoopThread();
        impl->lost_peers.insert(ep);
      });
      continue;
    }
    if (!connected.ok())
      return connected.WithContext(impl->c->me.ToString() + ": connecting to " + ep.ToString());
    if (peer.device_key && ep.side == PlanSide::kSource) {
      // Every run within its shards is read from there: this rank's transport must read that memory
      // (a CUDA-aware UCX for a GPU's), or nothing arrives.
      const auto [takes, transport] = impl->loop->Call(
          [&](Transport& t) { return std::pair(t.TakesMemory(peer.device_memory), t.name()); });
      if (!takes)
        return FailedPrecondition(impl->c->me.ToString() + ": " + ep.ToString() +
                                  " publishes on its device (" + peer.device_memory +
                                  " memory), which transport '" + transport +
                                  "' cannot read; give every rank a transport that takes it, or start " +
                                  ep.ToString() + " without device_direct");
      Impl::SourceDevice device{*peer.device_key, impl->c->PeerDeviceLayout(ep)};
      if (peer.device_key->length < device.layout.bytes)
        return InvalidArgument(ep.ToString() + ": its published device copy is " +
                               std::to_string(peer.device_key->length) + " bytes, the plan needs " +
                               std::to_string(device.layout.bytes) + " (a different plan?)");
      impl->loop->Call([&](Transport&) {
        impl->OnLoopThread();
        impl->source_devices[ep] = std::move(device);
      });
    }
  }
  return Status::Ok();
}

Status PlanRank::Rekey(ProgressLoop& fresh) {
  Impl* impl = impl_.get();
  if (!impl->own_memory)
    return FailedPrecondition(impl->c->me.ToString() +
                              ": its arena belongs to its transport; a rank that moves to another one "
                              "is created with rotate_keys");
  const size_t size = impl->arena->size();
  using Regions = std::pair<std::unique_ptr<MemoryRegion>, std::array<std::unique_ptr<MemoryRegion>, 2>>;
  WP_ASSIGN_OR_RETURN(Regions regions, fresh.Call([impl, size](Transport& t) -> Result<Regions> {
    Regions out;
    WP_ASSIGN_OR_RETURN(out.first, RegisterArena(t, impl->base, size, "plan arena"));
    if (impl->device_regions[0] || impl->device_regions[1]) {  // the fresh transport must take it too
      WP_ASSIGN_OR_RETURN(out.second, RegisterDeviceCopies(*impl, t));
    }
    return out;
  }));
  // The old transport's connections and registrations are released on its own loop thread; the
  // caller then closes that transport, and with it every key peers hold for it.
  std::set<Endpoint> lost;
  impl->loop->Call([impl, &lost](Transport&) {
    impl->OnLoopThread();
    impl->CloseConnections();
    impl->device_regions = {};
    impl->arena.reset();
    lost = std::move(impl->lost_peers);
  });
  impl->arena = std::move(regions.first);
  impl->device_regions = std::move(regions.second);
  impl->loop = &fresh;
  fresh.Call([impl, &lost](Transport&) {
    impl->OnLoopThread();
    impl->lost_peers = std::move(lost);
  });
  return Status::Ok();
}

size_t PlanRank::num_shards() const { return impl_->c->buffer->shards.size(); }
std::span<std::byte> PlanRank::shard_bytes(size_t shard) {
  const PlannedShard& s = impl_->c->buffer->shards.at(shard);
  const uint64_t base = impl_->is_source() ? 0 : impl_->c->mine->CopyOffset(impl_->live);
  return {impl_->at(base + s.offset), s.bytes};
}
uint64_t PlanRank::live_version() const { return impl_->live_version; }
uint64_t PlanRank::published_from_device() const { return impl_->published_from_device; }
uint64_t PlanRank::published_on_device() const { return impl_->published_on_device; }
void* PlanRank::device_shard(size_t shard) const {
  const auto& copy = impl_->device_shards[impl_->is_source() ? 0 : impl_->live];
  return copy.empty() ? nullptr : copy.at(shard).get();
}

Status PlanRank::Publish(uint64_t version) {
  Impl& r = *impl_;
  if (!r.is_source()) return FailedPrecondition(r.c->me.ToString() + ": Publish on a destination");
  if (version == 0 || version > arena_layout::kMaxCounterVersion)
    return InvalidArgument("Publish: version " + std::to_string(version) + " out of range");
  if (r.c->mine->hash_bytes == 0) {  // it sends nothing; its replicas are still compared
    if (!r.replicated.empty() && !r.options.device_direct) {
      WP_RETURN_IF_ERROR(ReadDeviceShards(r));
      DigestReplicas(r);
    }
    return Status::Ok();
  }
  std::byte* header = r.at(r.c->mine->hash_offset);
  StoreWord(header, 0);  // readers see "not published" while the shards and hashes change
  WP_RETURN_IF_ERROR(ReadDeviceShards(r));
  for (const ConvertSpan& c : r.c->out_converts)  // checked when the plan was compiled
    kernels::Convert(c.from_dtype, c.to_dtype, r.at(c.from), r.at(c.to), c.count).IgnoreError();
  RunQuantizeJobs(r.at(0), r.c->out_quantize, r.c->out_gathers, r.workers.get());
  struct Scratch {
    std::vector<std::byte> chunk, frame;  // a compressed step's chunk, gathered, and its frame
  };
  std::mutex mu;
  Status failed;  // the first device hash that failed
  auto fail = [&](const Status& s, const OutChunk& c) {
    std::lock_guard<std::mutex> lock(mu);
    if (failed.ok())
      failed = s.WithContext(r.c->me.ToString() + ": hashing " + r.StepName(c.step) + " chunk " +
                             std::to_string(c.k) + " on " + r.options.device->name());
  };
  // device_direct: runs of a step's chunks one after the other on the device, one call each.
  ForEachIndex<Scratch>(r.workers.get(), r.c->out_device_batches.size(), [&](size_t b, Scratch&) {
    const Status s = HashPublishedBatch(r, b);
    if (!s.ok()) fail(s, r.c->out_chunks[r.c->out_device_batches[b].first_chunk]);
  });
  // Each chunk writes only its own hash entry and slot: shared among the workers.
  ForEachIndex<Scratch>(r.workers.get(), r.c->out_chunks.size(), [&](size_t i, Scratch& s) {
    const OutChunk& c = r.c->out_chunks[i];
    if (r.c->out_hash[i] == OutHash::kDeviceBatch) return;  // hashed in its batch
    uint64_t h = 0;
    if (r.c->out_hash[i] ==
        OutHash::kDevice) {  // device_direct: peers read it from the published device copy
      Result<uint64_t> on_device = HashPublishedOnDevice(r, i);
      if (!on_device.ok()) return fail(on_device.status(), c);
      h = *on_device;
    } else {
      h = HashRuns(r.at(0), r.c->out_runs, c.run_begin, c.run_end, &Run::from);
    }
    std::memcpy(r.at(c.hash_offset), &h, 8);
    uint64_t compressed = 0;  // 0: the chunk travels as is
    if (c.slot >= 0) {
      s.chunk.clear();
      for (uint32_t j = c.run_begin; j < c.run_end; ++j)
        s.chunk.insert(s.chunk.end(), r.at(r.c->out_runs[j].from),
                       r.at(r.c->out_runs[j].from) + r.c->out_runs[j].length);
      // Only a chunk that shrinks by 10% travels as a frame: the receiver pays to decompress it.
      if (kernels::ZstdCompress(s.chunk, 1, s.frame).ok() && s.frame.size() * 10 <= s.chunk.size() * 9 &&
          s.frame.size() <= r.c->slot_bytes) {
        std::memcpy(r.at(static_cast<uint64_t>(c.slot)), s.frame.data(), s.frame.size());
        compressed = s.frame.size();
      }
    }
    std::memcpy(r.at(c.hash_offset + 8), &compressed, 8);
  });
  WP_RETURN_IF_ERROR(failed);  // the header says "not published"
  StoreWord(header + 8, HashAreaCheck(version, header, r.c->mine->hash_bytes));
  StoreWord(header, version);
  DigestReplicas(r);
  return Status::Ok();
}

std::vector<std::pair<uint32_t, uint64_t>> PlanRank::replica_digests() const {
  return impl_->replica_digests;
}

Result<ReceiveStats> PlanRank::Receive(uint64_t version) {
  Impl& r = *impl_;
  if (r.is_source()) return FailedPrecondition(r.c->me.ToString() + ": Receive on a source");
  if (version == 0 || version > arena_layout::kMaxCounterVersion)
    return InvalidArgument("Receive: version " + std::to_string(version) + " out of range");
  if (r.loop->on_loop_thread()) return FailedPrecondition("Receive called on the loop thread");
  r.received_version = 0;
  auto promise = std::make_shared<std::promise<Result<ReceiveStats>>>();
  auto future = promise->get_future();
  Impl* impl = &r;
  r.loop->Post([impl, version, promise](Transport&) {
    StartReceive(*impl, version,
                 [promise](Result<ReceiveStats> result) { promise->set_value(std::move(result)); });
  });
  Result<ReceiveStats> result = future.get();
  if (result.ok()) r.received_version = version;
  return result;
}

void PlanRank::PeerLost(Endpoint peer) {
  Impl* impl = impl_.get();
  impl->loop->Post([impl, peer](Transport&) {
    impl->OnLoopThread();
    if (!impl->lost_peers.insert(peer).second) return;
    if (impl->peer_lost_receive) impl->peer_lost_receive(peer);
  });
}

void PlanRank::Cancel(uint64_t version, const std::string& reason) {
  Impl* impl = impl_.get();
  impl->cancelled_version.store(version);
  impl->loop->Post([impl, reason](Transport&) {
    impl->OnLoopThread();
    if (impl->cancel_receive) impl->cancel_receive(reason);
  });
}

Status PlanRank::Commit(uint64_t version) {
  Impl& r = *impl_;
  if (r.is_source()) return Status::Ok();
  if (r.received_version != version)
    return FailedPrecondition(r.c->me.ToString() + ": commit of version " + std::to_string(version) +
                              ", which was not received in full");
  if (r.options.keep_versions > 0) KeepVersion(r, r.live ^ 1, version);
  r.live ^= 1;
  r.live_version = version;
  r.received_version = 0;
  return Status::Ok();
}

void PlanRank::Abort(uint64_t version) {
  if (impl_->received_version == version) impl_->received_version = 0;
}

}  // namespace weightport
