// CompileRank: a rank's part of a Plan into the tables PlanRank replays every version (compiled_rank.h).
// Walks the plan once: a destination groups its incoming steps' runs (ForEachStepRun) by chunk, with
// their conversions, detours and the shards it quantises; a source lists the chunks it hashes;
// every rank computes every rank's arena layout from the plan alone.
#include "compiled_rank.h"

#include <algorithm>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "plan_rank_impl.h"
#include "weightport/engine/rank/source_replicas.h"
#include "weightport/plan/quantized.h"

namespace weightport {
namespace plan_rank_internal {

using arena_layout::ArenaLayout;

namespace {

// Where a step's runs start within a copy of each end's arena: a packed end's area (plan.h), else
// the rank's buffer at 0.
uint64_t SenderBase(const std::map<Endpoint, ArenaLayout>& layouts, const PlanStep& s) {
  if (!SenderEndPacked(s)) return 0;
  return layouts.at(s.from).area_offset.at(
      s.transform == TransformKind::kConvertAtSender ? s.id : static_cast<uint32_t>(s.after));
}
uint64_t ReceiverBase(const std::map<Endpoint, ArenaLayout>& layouts, const PlanStep& s) {
  return ReceiverEndPacked(s) ? layouts.at(Endpoint{PlanSide::kDestination, s.to_rank}).area_offset.at(s.id)
                              : 0;
}

// The runs of `s`, grouped by chunk, with offsets within a copy of each end's arena (the bases
// added), checked against both.
Status CompileRuns(const Plan& plan, const std::map<Endpoint, ArenaLayout>& layouts, const PlanStep& s,
                   uint64_t from_base, uint64_t to_base,
                   const std::function<void(uint32_t chunk, const Run&)>& add) {
  const ArenaLayout& from = layouts.at(s.from);
  const ArenaLayout& to = layouts.at(Endpoint{PlanSide::kDestination, s.to_rank});
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

Status CompileStep(const Plan& plan, const std::map<Endpoint, ArenaLayout>& layouts, const PlanStep& s,
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
Status CompileConversion(const Plan& plan, const ArenaLayout& mine, const PlanStep& s,
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
Status CompileQuantize(const Plan& plan, const ArenaLayout& mine, const PlanStep& s, CompiledRank& rank) {
  const TensorMeta& t = plan.tensors[s.tensor];
  WP_ASSIGN_OR_RETURN(const QuantizedMatrix m,
                      QuantizedMatrixOf(s.piece, t.shape, plan.Fp8ScalingOf(s.tensor)));
  QuantizeJob job;
  job.out = mine.area_offset.at(s.id);
  job.scales_at = job.out + static_cast<uint64_t>(m.rows * m.cols);  // after the e4m3 bytes, on the wire
  job.rows = m.rows, job.cols = m.cols, job.scales = m.scales, job.from = t.dtype, job.scaling = m.scaling;
  job.gather_begin = static_cast<uint32_t>(rank.out_gathers.size());
  const uint64_t element = DTypeSize(t.dtype);
  WP_RETURN_IF_ERROR(ForEachConvertRun(plan, s, [&](const ConvertRun& r) {
    rank.out_gathers.push_back({r.shard_offset, r.piece_element * element, r.count * element});
  }));
  job.gather_end = static_cast<uint32_t>(rank.out_gathers.size());
  rank.out_quantize.push_back(job);
  return Status::Ok();
}

// A step into a shard this destination quantises whole (quantized.h): the runs that gather its piece
// from its landing area into the shard's matrix, by shard.
Status CompileLandedGathers(const Plan& plan, const ArenaLayout& mine, const PlanStep& s,
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
                            const std::map<uint32_t, std::vector<Run>>& gathers, CompiledRank& rank) {
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
    job.gather_begin = static_cast<uint32_t>(rank.in_gathers.size());
    rank.in_gathers.insert(rank.in_gathers.end(), runs.begin(), runs.end());
    job.gather_end = static_cast<uint32_t>(rank.in_gathers.size());
    rank.in_quantize.push_back(job);
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
Status CompileDetours(const Plan& plan, CompiledRank& rank, const PlanStep& s, InStep& in) {
  std::vector<const PlanStep*> upstream;
  for (int64_t a = s.after; a >= 0; a = plan.steps[a].after)
    if (!s.compress || plan.steps[a].after < 0) upstream.push_back(&plan.steps[a]);
  in.detour_first = static_cast<uint32_t>(rank.detour_levels.size());
  std::vector<std::pair<const PlanStep*, PlanStep>> levels;
  for (const PlanStep* via : upstream)
    if (auto d = DetourStep(plan, s, *via)) levels.emplace_back(via, *d);
  if (levels.empty() || levels.back().first->after >= 0) return Status::Ok();  // no way to the root
  in.detour_levels = static_cast<uint32_t>(levels.size());
  const uint32_t first_range = static_cast<uint32_t>(rank.detour_ranges.size());
  rank.detour_ranges.resize(first_range + size_t{s.chunks} * levels.size());
  for (uint32_t k = 0; k < s.chunks; ++k)
    rank.in_chunks[in.first_chunk + k].detour_ranges = first_range + k * in.detour_levels;
  for (uint32_t l = 0; l < levels.size(); ++l) {
    const auto& [via, d] = levels[l];
    rank.detour_levels.push_back(
        {via->from,
         via->after >= 0 ? static_cast<int64_t>(rank.layouts.at(via->from).CounterOffset(via->after)) : -1});
    WP_RETURN_IF_ERROR(CompileRuns(plan, rank.layouts, d, SenderBase(rank.layouts, *via),
                                   ReceiverBase(rank.layouts, s), [&](uint32_t k, const Run& r) {
                                     RunRange& range =
                                         rank.detour_ranges[first_range + k * in.detour_levels + l];
                                     AppendToRange(rank.detour_runs, r, range.begin, range.end);
                                   }));
  }
  if (s.compress)
    in.root_slots = rank.layouts.at(levels.back().first->from).slot_offset.at(levels.back().first->id);
  return Status::Ok();
}

using ReplicaIndex = std::map<std::pair<Endpoint, uint32_t>, const SourceReplicaGroup*>;

// The other holders of plain root step `s`'s sender shard (source_replicas.h), by endpoint: where
// its runs are read when its source is lost. A replica is the same slice of the same tensor, so the
// step's bytes lie at the same place within its shard; a step read from a wire area or compressed
// slots has none (those are the sender's own).
Status CompileAlternates(const Plan& plan, const ReplicaIndex& replicas, CompiledRank& rank,
                         const PlanStep& s, InStep& in) {
  if (s.after >= 0 || SenderEndPacked(s) || s.compress) return Status::Ok();
  auto g = replicas.find({s.from, s.from_shard});
  if (g == replicas.end()) return Status::Ok();
  const PlannedShard& own = plan.Buffer(s.from)->shards.at(s.from_shard);
  std::vector<std::pair<Endpoint, uint32_t>> holders = g->second->holders;
  std::sort(holders.begin(), holders.end());
  const auto first = static_cast<uint32_t>(rank.alternates.size());
  for (const auto& [ep, shard] : holders) {
    if (ep == s.from) continue;
    const PlannedShard& other = plan.Buffer(ep)->shards.at(shard);
    if (other.bytes != own.bytes || other.offset + other.bytes > rank.layouts.at(ep).data_bytes)
      return Internal(rank.StepName(s.id) + ": the replica of its shard at " + ep.ToString() +
                      " does not match it");
    rank.alternates.push_back({ep, static_cast<int64_t>(other.offset) - static_cast<int64_t>(own.offset)});
  }
  in.alt_count = static_cast<uint32_t>(rank.alternates.size()) - first;
  if (in.alt_count > 0) in.alt_first = first;
  return Status::Ok();
}

}  // namespace

std::string CompiledRank::StepName(uint32_t step) const {
  const PlanStep& s = plan->steps[step];
  return "tensor '" + plan->tensors[s.tensor].name + "' step " +
         std::to_string(step_ids.empty() ? step : step_ids.at(step));
}

DeviceLayout CompiledRank::PeerDeviceLayout(Endpoint source) const {
  const RankBuffer& buffer = *plan->Buffer(source);
  if (part) return DeviceLayout::OfPart(buffer, part->devices.at(source));
  return DeviceLayout::Of(buffer);
}

namespace {
Result<std::shared_ptr<const CompiledRank>> Compile(std::shared_ptr<const Plan> plan, Endpoint me,
                                                    const CompileOptions& options,
                                                    const RankPlan* from_part) {
  if (!plan) return InvalidArgument("PlanRank: no plan");
  auto compiled = std::make_shared<CompiledRank>();
  CompiledRank& rank = *compiled;
  rank.plan = plan;
  rank.me = me;
  rank.options = options;
  rank.buffer = plan->Buffer(me);
  if (rank.buffer == nullptr) return NotFound(me.ToString() + " is not a rank of the plan");
  if (plan->options.chunk_bytes == 0) return InvalidArgument("plan: chunk_bytes is 0");
  if (from_part != nullptr) {
    if (!from_part->tables) return InvalidArgument(me.ToString() + ": a rank plan without its tables");
    rank.plan_digest = from_part->digest;
    rank.step_ids = from_part->step_ids;
    rank.part = from_part->tables;
    rank.layouts = from_part->tables->layouts;
  } else {
    rank.layouts = arena_layout::ComputeLayouts(*plan);
  }
  rank.slot_bytes = arena_layout::SlotBytes(*plan);
  rank.mine = &rank.layouts.at(me);
  const ArenaLayout& mine = *rank.mine;
  uint64_t end = mine.public_bytes;

  std::map<Endpoint, size_t> root_index;
  std::vector<SourceReplicaGroup> replica_groups;
  ReplicaIndex replicas;  // (source, shard) -> its group, at a destination
  if (!rank.is_source()) replica_groups = SourceReplicaGroups(*plan);
  for (const SourceReplicaGroup& g : replica_groups)
    for (const auto& holder : g.holders) replicas.emplace(holder, &g);
  std::map<uint32_t, std::vector<Run>> landed_gathers;  // by shard: pieces this rank quantises whole
  for (const PlanStep& s : plan->steps) {
    const RankBuffer* from = plan->Buffer(s.from);
    if (from == nullptr) return Internal("step " + std::to_string(s.id) + ": unknown sender");
    if (s.from == me && me.side == PlanSide::kSource) {  // chunks this source hashes
      const size_t first = rank.out_chunks.size();
      for (uint32_t k = 0; k < s.chunks; ++k)
        rank.out_chunks.push_back(
            {mine.HashOffset(s.id, k), static_cast<uint32_t>(rank.out_runs.size()),
             static_cast<uint32_t>(rank.out_runs.size()),
             s.compress ? static_cast<int64_t>(mine.slot_offset.at(s.id) + k * rank.slot_bytes) : -1, s.id,
             k});
      if (s.transform == TransformKind::kConvertAtSender && plan->Quantized(s.tensor))
        WP_RETURN_IF_ERROR(CompileQuantize(*plan, mine, s, rank));
      else if (s.transform == TransformKind::kConvertAtSender)
        WP_RETURN_IF_ERROR(CompileConversion(
            *plan, mine, s, [&](uint32_t, const ConvertSpan& c) { rank.out_converts.push_back(c); }));
      WP_RETURN_IF_ERROR(CompileStep(*plan, rank.layouts, s, [&](uint32_t k, const Run& r) {
        OutChunk& c = rank.out_chunks[first + k];
        AppendToRange(rank.out_runs, r, c.run_begin, c.run_end);
      }));
    }
    if (me.side != PlanSide::kDestination || s.to_rank != me.rank || s.chunks == 0) continue;
    InStep in;
    in.step = s.id;
    in.sender = s.from;
    in.root_source = plan->steps[s.root].from;
    in.after = s.after;
    in.first_chunk = static_cast<uint32_t>(rank.in_chunks.size());
    in.chunks = s.chunks;
    if (s.compress) {
      in.compressed = true;
      const ArenaLayout& sender = rank.layouts.at(s.from);
      in.sender_slots =
          sender.slot_offset.at(s.from.side == PlanSide::kSource ? s.id : static_cast<uint32_t>(s.after));
      in.my_slots = mine.slot_offset.at(s.id);
    }
    if (s.after >= 0) {
      in.sender_counter = rank.layouts.at(s.from).CounterOffset(static_cast<uint32_t>(s.after));
      in.poll_scratch = end;
      end += arena_layout::kCounterBytes;
    }
    if (mine.counter_slot.count(s.id)) in.my_counter = static_cast<int64_t>(mine.CounterOffset(s.id));
    auto [it, fresh] = root_index.emplace(in.root_source, rank.roots.size());
    if (fresh) {
      const ArenaLayout& rl = rank.layouts.at(in.root_source);
      rank.roots.push_back({in.root_source, rl.hash_offset, rl.hash_bytes, 0});
    }
    in.expected_hashes = rank.layouts.at(in.root_source).HashOffset(s.root, 0);  // rebased below
    for (uint32_t k = 0; k < s.chunks; ++k)
      rank.in_chunks.push_back({static_cast<uint32_t>(rank.in_steps.size()), k,
                                static_cast<uint32_t>(rank.in_runs.size()),
                                static_cast<uint32_t>(rank.in_runs.size()), 0});
    WP_RETURN_IF_ERROR(CompileStep(*plan, rank.layouts, s, [&](uint32_t k, const Run& r) {
      InChunk& c = rank.in_chunks[in.first_chunk + k];
      AppendToRange(rank.in_runs, r, c.run_begin, c.run_end);
      c.bytes += r.length;
    }));
    if (ReceiverEndPacked(s) && plan->Quantized(s.tensor))
      WP_RETURN_IF_ERROR(CompileLandedGathers(*plan, mine, s, landed_gathers));
    else if (ReceiverEndPacked(s))
      WP_RETURN_IF_ERROR(CompileConversion(*plan, mine, s, [&](uint32_t k, const ConvertSpan& span) {
        InChunk& c = rank.in_chunks[in.first_chunk + k];
        AppendToRange(rank.in_converts, span, c.convert_begin, c.convert_end);
      }));
    if (s.after >= 0) WP_RETURN_IF_ERROR(CompileDetours(*plan, rank, s, in));
    WP_RETURN_IF_ERROR(CompileAlternates(*plan, replicas, rank, s, in));
    rank.in_steps.push_back(in);
  }
  WP_RETURN_IF_ERROR(CompileShardQuantize(*plan, *rank.buffer, landed_gathers, rank));
  // Mirrors of the root sources' hash areas; expected hashes are read there.
  end = (end + 63) & ~uint64_t{63};
  for (RootSource& r : rank.roots) {
    r.mirror = end;
    end += (r.bytes + 63) & ~uint64_t{63};
  }
  for (InStep& in : rank.in_steps) {
    const RootSource& r = rank.roots[root_index.at(in.root_source)];
    in.expected_hashes = in.expected_hashes - r.remote_offset + r.mirror;
  }
  rank.arena_bytes = end;
  if (options.device_direct && !options.device)
    return InvalidArgument(me.ToString() + ": device_direct without a device to land on");
  constexpr uint64_t kBandBytes = 4ull << 20;
  SplitIntoBands(rank.out_quantize, rank.out_gathers, kBandBytes);
  SplitIntoBands(rank.in_quantize, rank.in_gathers, kBandBytes);
  MapBandsToChunks(rank);
  if (options.device) rank.device_layout = DeviceLayout::Of(*rank.buffer);
  MapDeviceSpans(rank);   // after the bands are cut: a band's output is a span of its own
  MapDirectChunks(rank);  // after MapBandsToChunks: a chunk a band reads stays on the host
  MapPublishedOnDevice(rank);
  return std::shared_ptr<const CompiledRank>(std::move(compiled));
}
}  // namespace

Result<std::shared_ptr<const CompiledRank>> CompileRank(std::shared_ptr<const Plan> plan, Endpoint me,
                                                        const CompileOptions& options) {
  return Compile(std::move(plan), me, options, nullptr);
}

Result<std::shared_ptr<const CompiledRank>> CompileRank(const RankPlan& part, const CompileOptions& options) {
  return Compile(part.plan, part.me, options, &part);
}

}  // namespace plan_rank_internal
}  // namespace weightport
