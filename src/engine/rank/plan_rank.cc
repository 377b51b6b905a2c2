#include "weightport/engine/rank/plan_rank.h"

#include <sys/mman.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <future>
#include <mutex>
#include <optional>

#define XXH_STATIC_LINKING_ONLY
#include <xxhash.h>

#include "plan_rank_impl.h"
#include "weightport/core/hash.h"
#include "weightport/engine/common/arena.h"
#include "weightport/kernels/compress.h"
#include "weightport/kernels/convert.h"
#include "weightport/plan/quantized.h"
#include "weightport/transport/ucx_transport.h"

namespace weightport {

using plan_layout::EncodeCounter;
using plan_layout::kHashHeaderBytes;
using plan_layout::PlanLayout;
using namespace plan_rank_internal;

namespace {

// Where a step's runs start within a copy of each end's arena: a packed end's area (plan.h), else
// the rank's buffer at 0.
uint64_t SenderBase(const std::map<Endpoint, PlanLayout>& layouts, const PlanStep& s) {
  if (!SenderEndPacked(s)) return 0;
  return layouts.at(s.from).area_offset.at(
      s.transform == TransformKind::kConvertAtSender ? s.id : static_cast<uint32_t>(s.after));
}
uint64_t ReceiverBase(const std::map<Endpoint, PlanLayout>& layouts, const PlanStep& s) {
  return ReceiverEndPacked(s) ? layouts.at(Endpoint{PlanSide::kDestination, s.to_rank}).area_offset.at(s.id)
                              : 0;
}

// The runs of `s`, grouped by chunk, with offsets within a copy of each end's arena (the bases
// added), checked against both.
Status CompileRuns(const Plan& plan, const std::map<Endpoint, PlanLayout>& layouts, const PlanStep& s,
                   uint64_t from_base, uint64_t to_base,
                   const std::function<void(uint32_t chunk, const Run&)>& add) {
  const PlanLayout& from = layouts.at(s.from);
  const PlanLayout& to = layouts.at(Endpoint{PlanSide::kDestination, s.to_rank});
  Status bad;
  WP_RETURN_IF_ERROR(ForEachStepRun(plan, s, [&](const StepRun& r) {
    if (!bad.ok()) return;
    const Run run{from_base + r.from_offset, to_base + r.to_offset, r.length};
    if (run.from + run.length > from.data_bytes || run.to + run.length > to.data_bytes) {
      bad = Internal("step " + std::to_string(s.id) + ": a run leaves its buffers");
      return;
    }
    add(static_cast<uint32_t>(r.piece_offset / plan.options.chunk_bytes), run);
  }));
  return bad;
}

Status CompileStep(const Plan& plan, const std::map<Endpoint, PlanLayout>& layouts, const PlanStep& s,
                   const std::function<void(uint32_t chunk, const Run&)>& add) {
  return CompileRuns(plan, layouts, s, SenderBase(layouts, s), ReceiverBase(layouts, s), add);
}

// A relayed step `s` read from upstream of its relay: from `via`'s sender end (the sender of a step
// before `s` in its chain, or the root step's source: its shard, or its wire area when it
// converts) into `s`'s receiving end. Every hop of a chain carries the same piece in the root's wire
// dtype and is checked against the root's hashes, so the chunks are the same. nullopt when the
// plan's chain does not have that shape.
std::optional<PlanStep> DetourStep(const Plan& plan, const PlanStep& s, const PlanStep& via) {
  PlanStep d = s;
  d.from = via.from;
  d.from_shard = via.from_shard;
  d.transform = via.transform;
  d.after = via.after;
  d.depth = via.depth;
  if (!(via.piece == s.piece) || via.bytes != s.bytes || via.chunks != s.chunks ||
      (s.compress && !via.compress) || ReceiverEndPacked(d) != ReceiverEndPacked(s) ||
      plan.WireDType(d) != plan.WireDType(s))
    return std::nullopt;
  return d;
}

// The conversions of a converting step, by chunk: from the shard into the wire area at a source,
// from the landing area into the shard at a receiver.
Status CompileConversion(const Plan& plan, const PlanLayout& mine, const PlanStep& s,
                         const std::function<void(uint32_t chunk, const ConvertSpan&)>& add) {
  const DType from = plan.tensors[s.tensor].dtype, to = plan.destination_dtypes[s.tensor];
  const uint64_t wire = DTypeSize(plan.WireDType(s));
  const uint64_t area = mine.area_offset.at(s.id), chunk = plan.options.chunk_bytes / wire;
  const bool at_sender = s.transform == TransformKind::kConvertAtSender;
  return ForEachConvertRun(plan, s, [&](const ConvertRun& r) {
    const uint64_t packed = area + r.piece_element * wire;
    add(static_cast<uint32_t>(r.piece_element / chunk),
        at_sender ? ConvertSpan{r.shard_offset, packed, r.count, from, to}
                  : ConvertSpan{packed, r.shard_offset, r.count, from, to});
  });
}

// A quantising step at its source: the runs that gather the piece from the shard, and its shape.
Status CompileQuantize(const Plan& plan, const PlanLayout& mine, const PlanStep& s, PlanRank::Impl& impl) {
  const TensorMeta& t = plan.tensors[s.tensor];
  WP_ASSIGN_OR_RETURN(const QuantizedMatrix m,
                      QuantizedMatrixOf(s.piece, t.shape, plan.Fp8ScalingOf(s.tensor)));
  QuantizeJob job;
  job.out = mine.area_offset.at(s.id);
  job.scales_at = job.out + static_cast<uint64_t>(m.rows * m.cols);  // after the e4m3 bytes, on the wire
  job.rows = m.rows, job.cols = m.cols, job.scales = m.scales, job.from = t.dtype, job.scaling = m.scaling;
  job.gather_begin = static_cast<uint32_t>(impl.out_gathers.size());
  const uint64_t element = DTypeSize(t.dtype);
  WP_RETURN_IF_ERROR(ForEachConvertRun(plan, s, [&](const ConvertRun& r) {
    impl.out_gathers.push_back({r.shard_offset, r.piece_element * element, r.count * element});
  }));
  job.gather_end = static_cast<uint32_t>(impl.out_gathers.size());
  impl.out_quantize.push_back(job);
  return Status::Ok();
}

// A step into a shard this destination quantises whole (quantized.h): the runs that gather its piece
// from its landing area into the shard's matrix, by shard.
Status CompileLandedGathers(const Plan& plan, const PlanLayout& mine, const PlanStep& s,
                            std::map<uint32_t, std::vector<Run>>& gathers) {
  const uint64_t element = DTypeSize(plan.tensors[s.tensor].dtype);
  const uint64_t area = mine.area_offset.at(s.id);
  const uint64_t shard = plan.Buffer({PlanSide::kDestination, s.to_rank})->shards.at(s.to_shard).offset;
  return ForEachConvertRun(plan, s, [&](const ConvertRun& r) {  // shard offsets count e4m3 bytes: elements
    gathers[s.to_shard].push_back(
        {area + r.piece_element * element, (r.shard_offset - shard) * element, r.count * element});
  });
}

// The jobs quantising each shard whose pieces land here, from CompileLandedGathers' runs.
Status CompileShardQuantize(const Plan& plan, const RankBuffer& me,
                            const std::map<uint32_t, std::vector<Run>>& gathers, PlanRank::Impl& impl) {
  for (const auto& [index, runs] : gathers) {
    const PlannedShard& shard = me.shards.at(index);
    const DType from = plan.tensors[shard.tensor].dtype;
    WP_ASSIGN_OR_RETURN(
        const QuantizedMatrix m,
        QuantizedMatrixOf(shard.slice, plan.tensors[shard.tensor].shape, plan.Fp8ScalingOf(shard.tensor)));
    uint64_t gathered = 0;
    for (const Run& r : runs) gathered += r.length;
    if (gathered != static_cast<uint64_t>(m.rows * m.cols) * DTypeSize(from))
      return Internal("shard " + std::to_string(index) + ": its pieces do not add up to it");
    QuantizeJob job;
    job.out = shard.offset;
    job.scales_at = shard.offset + StoredScaleOffset(m.rows * m.cols);
    job.rows = m.rows, job.cols = m.cols, job.scales = m.scales, job.from = from, job.scaling = m.scaling;
    job.gather_begin = static_cast<uint32_t>(impl.in_gathers.size());
    impl.in_gathers.insert(impl.in_gathers.end(), runs.begin(), runs.end());
    job.gather_end = static_cast<uint32_t>(impl.in_gathers.size());
    impl.in_quantize.push_back(job);
  }
  return Status::Ok();
}

// Appends `item` to `list` and widens [begin, end) over it: a chunk's runs (or conversions) are
// appended in piece order, so they are one contiguous range of the list.
template <typename T>
void AppendToRange(std::vector<T>& list, const T& item, uint32_t& begin, uint32_t& end) {
  list.push_back(item);
  if (end == begin) begin = static_cast<uint32_t>(list.size() - 1);
  end = static_cast<uint32_t>(list.size());
}

// The detour levels of relayed step `s` at this rank, nearest upstream first, the root source last;
// a compressed step only the root source (relays keep no frames of their own to read).
Status CompileDetours(const Plan& plan, PlanRank::Impl& impl, const PlanStep& s, InStep& in) {
  std::vector<const PlanStep*> upstream;
  for (int64_t a = s.after; a >= 0; a = plan.steps[a].after)
    if (!s.compress || plan.steps[a].after < 0) upstream.push_back(&plan.steps[a]);
  in.detour_first = static_cast<uint32_t>(impl.detour_levels.size());
  std::vector<std::pair<const PlanStep*, PlanStep>> levels;
  for (const PlanStep* via : upstream)
    if (auto d = DetourStep(plan, s, *via)) levels.emplace_back(via, *d);
  if (levels.empty() || levels.back().first->after >= 0) return Status::Ok();  // no way to the root
  in.detour_levels = static_cast<uint32_t>(levels.size());
  const uint32_t first_range = static_cast<uint32_t>(impl.detour_ranges.size());
  impl.detour_ranges.resize(first_range + size_t{s.chunks} * levels.size());
  for (uint32_t k = 0; k < s.chunks; ++k)
    impl.in_chunks[in.first_chunk + k].detour_ranges = first_range + k * in.detour_levels;
  for (uint32_t l = 0; l < levels.size(); ++l) {
    const auto& [via, d] = levels[l];
    impl.detour_levels.push_back(
        {via->from,
         via->after >= 0 ? static_cast<int64_t>(impl.layouts.at(via->from).CounterOffset(via->after)) : -1});
    WP_RETURN_IF_ERROR(CompileRuns(plan, impl.layouts, d, SenderBase(impl.layouts, *via),
                                   ReceiverBase(impl.layouts, s), [&](uint32_t k, const Run& r) {
                                     RunRange& range =
                                         impl.detour_ranges[first_range + k * in.detour_levels + l];
                                     AppendToRange(impl.detour_runs, r, range.begin, range.end);
                                   }));
  }
  if (s.compress)
    in.root_slots = impl.layouts.at(levels.back().first->from).slot_offset.at(levels.back().first->id);
  return Status::Ok();
}

}  // namespace

uint64_t plan_rank_internal::HashRuns(const std::byte* base, const std::vector<Run>& runs, uint32_t begin,
                                      uint32_t end, uint64_t Run::*offset) {
  XXH3_state_t state;
  XXH3_64bits_reset(&state);
  for (uint32_t i = begin; i < end; ++i) XXH3_64bits_update(&state, base + runs[i].*offset, runs[i].length);
  return XXH3_64bits_digest(&state);
}

std::string PlanRank::Impl::StepName(uint32_t step) const {
  const PlanStep& s = plan->steps[step];
  return "tensor '" + plan->tensors[s.tensor].name + "' step " + std::to_string(step);
}

PlanRank::PlanRank(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
PlanRank::~PlanRank() {
  if (impl_ && impl_->loop) {
    // Connections and the region belong to the loop's transport: release them there.
    auto* impl = impl_.get();
    auto release = [impl] {
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
  if (!plan) return InvalidArgument("PlanRank: no plan");
  auto impl = std::make_unique<Impl>();
  impl->plan = plan;
  impl->me = me;
  impl->loop = &loop;
  impl->options = options;
  impl->buffer = plan->Buffer(me);
  if (impl->buffer == nullptr) return NotFound(me.ToString() + " is not a rank of the plan");
  if (plan->options.chunk_bytes == 0) return InvalidArgument("plan: chunk_bytes is 0");
  impl->layouts = plan_layout::ComputeLayouts(*plan);
  impl->slot_bytes = plan_layout::SlotBytes(*plan);
  impl->mine = &impl->layouts.at(me);
  const PlanLayout& mine = *impl->mine;
  uint64_t end = mine.public_bytes;

  std::map<Endpoint, size_t> root_index;
  std::map<uint32_t, std::vector<Run>> landed_gathers;  // by shard: pieces this rank quantises whole
  for (const PlanStep& s : plan->steps) {
    const RankBuffer* from = plan->Buffer(s.from);
    if (from == nullptr) return Internal("step " + std::to_string(s.id) + ": unknown sender");
    if (s.from == me && me.side == PlanSide::kSource) {  // chunks this source hashes
      const size_t first = impl->out_chunks.size();
      for (uint32_t k = 0; k < s.chunks; ++k)
        impl->out_chunks.push_back(
            {mine.HashOffset(s.id, k), static_cast<uint32_t>(impl->out_runs.size()),
             static_cast<uint32_t>(impl->out_runs.size()),
             s.compress ? static_cast<int64_t>(mine.slot_offset.at(s.id) + k * impl->slot_bytes) : -1, s.id,
             k});
      if (s.transform == TransformKind::kConvertAtSender && plan->Quantized(s.tensor))
        WP_RETURN_IF_ERROR(CompileQuantize(*plan, mine, s, *impl));
      else if (s.transform == TransformKind::kConvertAtSender)
        WP_RETURN_IF_ERROR(CompileConversion(
            *plan, mine, s, [&](uint32_t, const ConvertSpan& c) { impl->out_converts.push_back(c); }));
      WP_RETURN_IF_ERROR(CompileStep(*plan, impl->layouts, s, [&](uint32_t k, const Run& r) {
        OutChunk& c = impl->out_chunks[first + k];
        AppendToRange(impl->out_runs, r, c.run_begin, c.run_end);
      }));
    }
    if (me.side != PlanSide::kDestination || s.to_rank != me.rank || s.chunks == 0) continue;
    InStep in;
    in.step = s.id;
    in.sender = s.from;
    in.root_source = plan->steps[s.root].from;
    in.after = s.after;
    in.first_chunk = static_cast<uint32_t>(impl->in_chunks.size());
    in.chunks = s.chunks;
    if (s.compress) {
      in.compressed = true;
      const PlanLayout& sender = impl->layouts.at(s.from);
      in.sender_slots =
          sender.slot_offset.at(s.from.side == PlanSide::kSource ? s.id : static_cast<uint32_t>(s.after));
      in.my_slots = mine.slot_offset.at(s.id);
    }
    if (s.after >= 0) {
      in.sender_counter = impl->layouts.at(s.from).CounterOffset(static_cast<uint32_t>(s.after));
      in.poll_scratch = end;
      end += plan_layout::kCounterBytes;
    }
    if (mine.counter_slot.count(s.id)) in.my_counter = static_cast<int64_t>(mine.CounterOffset(s.id));
    auto [it, fresh] = root_index.emplace(in.root_source, impl->roots.size());
    if (fresh) {
      const PlanLayout& rl = impl->layouts.at(in.root_source);
      impl->roots.push_back({in.root_source, rl.hash_offset, rl.hash_bytes, 0});
    }
    in.expected_hashes = impl->layouts.at(in.root_source).HashOffset(s.root, 0);  // rebased below
    for (uint32_t k = 0; k < s.chunks; ++k)
      impl->in_chunks.push_back({static_cast<uint32_t>(impl->in_steps.size()), k,
                                 static_cast<uint32_t>(impl->in_runs.size()),
                                 static_cast<uint32_t>(impl->in_runs.size()), 0});
    WP_RETURN_IF_ERROR(CompileStep(*plan, impl->layouts, s, [&](uint32_t k, const Run& r) {
      InChunk& c = impl->in_chunks[in.first_chunk + k];
      AppendToRange(impl->in_runs, r, c.run_begin, c.run_end);
      c.bytes += r.length;
    }));
    if (ReceiverEndPacked(s) && plan->Quantized(s.tensor))
      WP_RETURN_IF_ERROR(CompileLandedGathers(*plan, mine, s, landed_gathers));
    else if (ReceiverEndPacked(s))
      WP_RETURN_IF_ERROR(CompileConversion(*plan, mine, s, [&](uint32_t k, const ConvertSpan& span) {
        InChunk& c = impl->in_chunks[in.first_chunk + k];
        AppendToRange(impl->in_converts, span, c.convert_begin, c.convert_end);
      }));
    if (s.after >= 0) WP_RETURN_IF_ERROR(CompileDetours(*plan, *impl, s, in));
    impl->in_steps.push_back(in);
  }
  WP_RETURN_IF_ERROR(CompileShardQuantize(*plan, *impl->buffer, landed_gathers, *impl));
  // Mirrors of the root sources' hash areas; expected hashes are read there.
  end = (end + 63) & ~uint64_t{63};
  for (RootSource& r : impl->roots) {
    r.mirror = end;
    end += (r.bytes + 63) & ~uint64_t{63};
  }
  for (InStep& in : impl->in_steps) {
    const RootSource& r = impl->roots[root_index.at(in.root_source)];
    in.expected_hashes = in.expected_hashes - r.remote_offset + r.mirror;
  }
  // Before the arena: an error after it is registered would free it off the loop thread.
  if (options.device_direct && !options.device)
    return InvalidArgument(me.ToString() + ": device_direct without a device to land on");
  if (options.device) WP_RETURN_IF_ERROR(AllocateDeviceShards(*impl));
  Impl* raw = impl.get();
  WP_ASSIGN_OR_RETURN(
      raw->arena, loop.Call([raw, end](Transport& t) -> Result<std::unique_ptr<MemoryRegion>> {
        const uint64_t size = std::max<uint64_t>(end, 64);
        // UCX-allocated memory where the transport is UCX (same-host peers map it: a Get is one memcpy).
        // Elsewhere our own mapping registered as is: the region's own type is what the transport
        // accepts as the local side of a Get (AllocateArena's wrapper is for remote access only).
        // A rank that rotates its keys keeps its memory in a mapping of its own, which each fresh
        // transport registers again (Rekey): the shards never move.
        if (!raw->options.rotate_keys) {
          auto ucx = UcxAllocate(t, size);
          if (ucx.ok() || ucx.status().code() != StatusCode::kInvalidArgument) return ucx;
        }
        void* data = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (data == MAP_FAILED)
          return ResourceExhausted("plan arena: mmap of " + std::to_string(size) + " bytes failed");
        raw->own_memory = std::shared_ptr<void>(data, [size](void* p) { munmap(p, size); });
        return RegisterArena(t, data, size, "plan arena");
      }));
  raw->base = raw->arena->data();
  if (options.device_direct) {  // with a device: refused above without
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
    if ((options.delta && !impl->in_chunks.empty()) || !impl->in_quantize.empty())
      impl->keepers = std::make_unique<WorkerPool>(options.delta ? threads : 1);
  }
  constexpr uint64_t kBandBytes = 4ull << 20;
  SplitIntoBands(impl->out_quantize, impl->out_gathers, kBandBytes);
  SplitIntoBands(impl->in_quantize, impl->in_gathers, kBandBytes);
  MapBandsToChunks(*impl);
  MapDeviceSpans(*impl);   // after the bands are cut: a band's output is a span of its own
  MapDirectChunks(*impl);  // after MapBandsToChunks: a chunk a band reads stays on the host
  MapPublishedOnDevice(*impl);
  if (threads > 1 && impl->out_quantize.size() + impl->in_quantize.size() + impl->out_chunks.size() > 1)
    impl->workers = std::make_unique<WorkerPool>(threads);
  return std::unique_ptr<PlanRank>(new PlanRank(std::move(impl)));
}

const Plan& PlanRank::plan() const { return *impl_->plan; }
Endpoint PlanRank::endpoint() const { return impl_->me; }
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
  for (const InStep& s : impl_->in_steps) out.push_back(s.sender);
  for (const RootSource& r : impl_->roots) out.push_back(r.endpoint);
  for (const DetourLevel& l : impl_->detour_levels) out.push_back(l.from);  // to route around a relay
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

Status PlanRank::Connect(const std::map<Endpoint, PlanPeer>& peers, std::vector<Endpoint>* unreachable) {
  Impl* impl = impl_.get();
  // A peer the coordinator lost (PeerLost) is left out of the tables it sends after a rekey: it is
  // routed around, so it needs no connection.
  const std::set<Endpoint> lost = impl->loop->Call([impl](Transport&) {
    impl->CloseConnections();
    return impl->lost_peers;
  });
  for (const Endpoint& ep : peers_needed()) {
    auto it = peers.find(ep);
    if (it == peers.end() && lost.count(ep)) continue;
    if (it == peers.end()) return NotFound(impl->me.ToString() + ": no address for " + ep.ToString());
    const PlanLayout& l = impl->layouts.at(ep);
    if (it->second.key.length < l.public_bytes)
      return InvalidArgument(ep.ToString() + ": its arena is " + std::to_string(it->second.key.length) +
                             " bytes, the plan needs " + std::to_string(l.public_bytes) +
                             " (a different plan?)");
    const PlanPeer& peer = it->second;
    auto conn = impl->loop->Call([&](Transport& t) { return t.Connect(peer.address, ep.ToString()); });
    const StatusCode code = conn.status().code();
    if (!conn.ok() && unreachable != nullptr && ep.side == PlanSide::kDestination &&
        (code == StatusCode::kUnavailable || code == StatusCode::kIoError)) {
      // A relay gone before the coordinator noticed (it left right after a rekey): around it.
      unreachable->push_back(ep);
      impl->loop->Call([impl, ep](Transport&) { impl->lost_peers.insert(ep); });
      continue;
    }
    if (!conn.ok())
      return conn.status().WithContext(impl->me.ToString() + ": connecting to " + ep.ToString());
    impl->connections[ep] = std::move(*conn);
    impl->keys[ep] = peer.key;
    if (peer.device_key && ep.side == PlanSide::kSource) {
      // Every run within its shards is read from there: this rank's transport must read that memory
      // (a CUDA-aware UCX for a GPU's), or nothing arrives.
      const auto [takes, transport] = impl->loop->Call(
          [&](Transport& t) { return std::pair(t.TakesMemory(peer.device_memory), t.name()); });
      if (!takes)
        return FailedPrecondition(impl->me.ToString() + ": " + ep.ToString() + " publishes on its device (" +
                                  peer.device_memory + " memory), which transport '" + transport +
                                  "' cannot read; give every rank a transport that takes it, or start " +
                                  ep.ToString() + " without device_direct");
      Impl::SourceDevice device{*peer.device_key, DeviceLayout::Of(*impl->plan->Buffer(ep))};
      if (peer.device_key->length < device.layout.bytes)
        return InvalidArgument(ep.ToString() + ": its published device copy is " +
                               std::to_string(peer.device_key->length) + " bytes, the plan needs " +
                               std::to_string(device.layout.bytes) + " (a different plan?)");
      impl->source_devices[ep] = std::move(device);
    }
  }
  return Status::Ok();
}

void PlanRank::Impl::CloseConnections() {
  for (auto& [ep, c] : connections) c->Close();
  connections.clear();
  keys.clear();
  source_devices.clear();
}

Status PlanRank::Rekey(ProgressLoop& fresh) {
  Impl* impl = impl_.get();
  if (!impl->own_memory)
    return FailedPrecondition(impl->me.ToString() +
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
    impl->CloseConnections();
    impl->device_regions = {};
    impl->arena.reset();
    lost = std::move(impl->lost_peers);
  });
  impl->arena = std::move(regions.first);
  impl->device_regions = std::move(regions.second);
  impl->loop = &fresh;
  fresh.Call([impl, &lost](Transport&) { impl->lost_peers = std::move(lost); });
  return Status::Ok();
}

size_t PlanRank::num_shards() const { return impl_->buffer->shards.size(); }
std::span<std::byte> PlanRank::shard_bytes(size_t shard) {
  const PlannedShard& s = impl_->buffer->shards.at(shard);
  const uint64_t base = impl_->is_source() ? 0 : impl_->mine->CopyOffset(impl_->live);
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
  if (!r.is_source()) return FailedPrecondition(r.me.ToString() + ": Publish on a destination");
  if (version == 0 || version > plan_layout::kMaxCounterVersion)
    return InvalidArgument("Publish: version " + std::to_string(version) + " out of range");
  if (r.mine->hash_bytes == 0) return Status::Ok();
  std::byte* header = r.at(r.mine->hash_offset);
  StoreWord(header, 0);  // readers see "not published" while the shards and hashes change
  WP_RETURN_IF_ERROR(ReadDeviceShards(r));
  for (const ConvertSpan& c : r.out_converts)  // checked when the plan was compiled
    kernels::Convert(c.from_dtype, c.to_dtype, r.at(c.from), r.at(c.to), c.count).IgnoreError();
  RunQuantizeJobs(r.at(0), r.out_quantize, r.out_gathers, r.workers.get());
  struct Scratch {
    std::vector<std::byte> chunk, frame;  // a compressed step's chunk, gathered, and its frame
  };
  std::mutex mu;
  Status failed;  // the first device hash that failed
  auto fail = [&](const Status& s, const OutChunk& c) {
    std::lock_guard<std::mutex> lock(mu);
    if (failed.ok())
      failed = s.WithContext(r.me.ToString() + ": hashing " + r.StepName(c.step) + " chunk " +
                             std::to_string(c.k) + " on " + r.options.device->name());
  };
  // device_direct: runs of a step's chunks one after the other on the device, one call each.
  ForEachIndex<Scratch>(r.workers.get(), r.out_device_batches.size(), [&](size_t b, Scratch&) {
    const Status s = HashPublishedBatch(r, b);
    if (!s.ok()) fail(s, r.out_chunks[r.out_device_batches[b].first_chunk]);
  });
  // Each chunk writes only its own hash entry and slot: shared among the workers.
  ForEachIndex<Scratch>(r.workers.get(), r.out_chunks.size(), [&](size_t i, Scratch& s) {
    const OutChunk& c = r.out_chunks[i];
    if (r.out_hash[i] == OutHash::kDeviceBatch) return;  // hashed in its batch
    uint64_t h = 0;
    if (r.out_hash[i] == OutHash::kDevice) {  // device_direct: peers read it from the published device copy
      Result<uint64_t> on_device = HashPublishedOnDevice(r, i);
      if (!on_device.ok()) return fail(on_device.status(), c);
      h = *on_device;
    } else {
      h = HashRuns(r.at(0), r.out_runs, c.run_begin, c.run_end, &Run::from);
    }
    std::memcpy(r.at(c.hash_offset), &h, 8);
    uint64_t compressed = 0;  // 0: the chunk travels as is
    if (c.slot >= 0) {
      s.chunk.clear();
      for (uint32_t j = c.run_begin; j < c.run_end; ++j)
        s.chunk.insert(s.chunk.end(), r.at(r.out_runs[j].from),
                       r.at(r.out_runs[j].from) + r.out_runs[j].length);
      // Only a chunk that shrinks by 10% travels as a frame: the receiver pays to decompress it.
      if (kernels::ZstdCompress(s.chunk, 1, s.frame).ok() && s.frame.size() * 10 <= s.chunk.size() * 9 &&
          s.frame.size() <= r.slot_bytes) {
        std::memcpy(r.at(static_cast<uint64_t>(c.slot)), s.frame.data(), s.frame.size());
        compressed = s.frame.size();
      }
    }
    std::memcpy(r.at(c.hash_offset + 8), &compressed, 8);
  });
  WP_RETURN_IF_ERROR(failed);  // the header says "not published"
  StoreWord(header + 8, HashAreaCheck(version, header, r.mine->hash_bytes));
  StoreWord(header, version);
  return Status::Ok();
}

Result<ReceiveStats> PlanRank::Receive(uint64_t version) {
  Impl& r = *impl_;
  if (r.is_source()) return FailedPrecondition(r.me.ToString() + ": Receive on a source");
  if (version == 0 || version > plan_layout::kMaxCounterVersion)
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
    if (!impl->lost_peers.insert(peer).second) return;
    if (impl->peer_lost_receive) impl->peer_lost_receive(peer);
  });
}

void PlanRank::Cancel(uint64_t version, const std::string& reason) {
  Impl* impl = impl_.get();
  impl->cancelled_version.store(version);
  impl->loop->Post([impl, reason](Transport&) {
    if (impl->cancel_receive) impl->cancel_receive(reason);
  });
}

Status PlanRank::Commit(uint64_t version) {
  Impl& r = *impl_;
  if (r.is_source()) return Status::Ok();
  if (r.received_version != version)
    return FailedPrecondition(r.me.ToString() + ": commit of version " + std::to_string(version) +
                              ", which was not received in full");
  r.live ^= 1;
  r.live_version = version;
  r.received_version = 0;
  return Status::Ok();
}

void PlanRank::Abort(uint64_t version) {
  if (impl_->received_version == version) impl_->received_version = 0;
}

}  // namespace weightport
