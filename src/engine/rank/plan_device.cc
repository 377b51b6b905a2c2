// A rank's shards on a device (PlanRankOptions::device): allocated once at Create, copied between
// the arena and the device per version. Sources copy device -> arena in Publish. Destinations copy
// each incoming chunk's shard bytes to the device's staging copy as soon as the chunk is verified,
// on the device copier's thread, so that the copies run while later chunks are still on the wire;
// a band quantised here goes as soon as it is quantised, while the others still are. What delta
// kept from the version before (chunks, reused bands) is copied on the device from its live copy,
// not from the host: a 1% update copies ~1% of the bytes across the host-device link.
#include <algorithm>

#include "plan_rank_impl.h"

namespace weightport {

using namespace plan_rank_internal;

namespace {
bool SpanOrder(const DeviceSpan& a, const DeviceSpan& b) {
  return std::tie(a.shard, a.offset) < std::tie(b.shard, b.offset);
}

std::string ShardName(const PlanRank::Impl& r, size_t i) {
  return r.c->me.ToString() + " shard " + std::to_string(i) + " (tensor '" +
         r.c->plan->tensors[r.c->buffer->shards[i].tensor].name + "')";
}

// Turns ranges of a copy of the arena into the shard spans they cover (bytes outside every shard,
// such as landing areas, are no span), sorted, adjacent spans of a shard merged.
class SpanMapper {
 public:
  explicit SpanMapper(const RankBuffer& buffer)
      : shards_(buffer.shards), by_offset_(ShardsByOffset(buffer)) {}

  void Add(uint64_t begin, uint64_t length) {
    const uint64_t end = begin + length;
    // The first shard that ends after `begin`: shards do not overlap, so they end in offset order.
    auto it = std::partition_point(by_offset_.begin(), by_offset_.end(),
                                   [&](uint32_t i) { return shards_[i].offset + shards_[i].bytes <= begin; });
    for (; it != by_offset_.end() && shards_[*it].offset < end; ++it) {
      const PlannedShard& s = shards_[*it];
      const uint64_t lo = std::max(begin, s.offset), hi = std::min(end, s.offset + s.bytes);
      if (lo < hi) pending_.push_back({*it, lo - s.offset, hi - lo});
    }
  }

  // The spans added since the last call, into `out`.
  void Flush(std::vector<DeviceSpan>& out) {
    std::sort(pending_.begin(), pending_.end(), SpanOrder);
    const size_t first = out.size();
    for (const DeviceSpan& s : pending_) {
      if (out.size() > first && out.back().shard == s.shard &&
          out.back().offset + out.back().length >= s.offset)
        out.back().length = std::max(out.back().length, s.offset + s.length - out.back().offset);
      else
        out.push_back(s);
    }
    pending_.clear();
  }

 private:
  const std::vector<PlannedShard>& shards_;
  std::vector<uint32_t> by_offset_;
  std::vector<DeviceSpan> pending_;
};
}  // namespace

std::vector<uint32_t> plan_rank_internal::ShardsByOffset(const RankBuffer& buffer) {
  std::vector<uint32_t> out;
  for (uint32_t i = 0; i < buffer.shards.size(); ++i)  // an empty one holds no byte
    if (buffer.shards[i].bytes > 0) out.push_back(i);
  std::sort(out.begin(), out.end(),
            [&](uint32_t a, uint32_t b) { return buffer.shards[a].offset < buffer.shards[b].offset; });
  return out;
}

Status plan_rank_internal::AllocateDeviceShards(PlanRank::Impl& r) {
  // One allocation per copy: one registration, where the transport reads or writes it (device_direct).
  const int copies = r.is_source() && !r.options.device_direct ? 1 : 2;
  for (int c = 0; c < copies; ++c) {
    auto memory = r.options.device->Allocate(r.c->device_layout.bytes);
    if (!memory.ok())
      return memory.status().WithContext(
          r.c->me.ToString() + ": " + std::to_string(r.c->buffer->shards.size()) + " shards (" +
          std::to_string(r.c->device_layout.bytes) + " bytes) on " + r.options.device->name());
    for (uint64_t offset : r.c->device_layout.offsets)
      r.device_shards[c].emplace_back(*memory, static_cast<std::byte*>(memory->get()) + offset);
  }
  return Status::Ok();
}

void plan_rank_internal::MapDeviceSpans(CompiledRank& r) {
  if (r.is_source() || !r.options.device || r.buffer->shards.empty()) return;
  // Bands as quantised: SplitIntoBands has cut the in_quantize jobs already.
  SpanMapper mapper(*r.buffer);
  // A chunk fills what its runs land on (a shard stored as sent) and what its conversions write.
  r.chunk_device_begin.assign(1, 0);
  for (const InChunk& c : r.in_chunks) {
    for (uint32_t i = c.run_begin; i < c.run_end; ++i) mapper.Add(r.in_runs[i].to, r.in_runs[i].length);
    for (uint32_t i = c.convert_begin; i < c.convert_end; ++i) {
      const ConvertSpan& span = r.in_converts[i];
      mapper.Add(span.to, span.count * DTypeSize(span.to_dtype));
    }
    mapper.Flush(r.device_spans);
    r.chunk_device_begin.push_back(static_cast<uint32_t>(r.device_spans.size()));
  }
  // A band quantised here: its e4m3 rows and their scales.
  r.band_device_begin.assign(1, static_cast<uint32_t>(r.device_spans.size()));
  for (const QuantizeJob& band : r.in_quantize) {
    mapper.Add(band.out, static_cast<uint64_t>(band.rows * band.cols));
    mapper.Add(band.scales_at, static_cast<uint64_t>(band.scales) * sizeof(float));
    mapper.Flush(r.device_spans);
    r.band_device_begin.push_back(static_cast<uint32_t>(r.device_spans.size()));
  }
  // Every byte no chunk or band fills goes at the end: the padding before a quantised shard's
  // scales (and anything else not accounted for above: copied late, never lost).
  std::vector<DeviceSpan> filled = r.device_spans;
  std::sort(filled.begin(), filled.end(), SpanOrder);
  auto next = filled.begin();
  for (uint32_t i = 0; i < r.buffer->shards.size(); ++i) {
    uint64_t at = 0;  // bytes of shard i before `at` are filled or in a tail span
    for (; next != filled.end() && next->shard == i; ++next) {
      if (next->offset > at) r.device_tail_spans.push_back({i, at, next->offset - at});
      at = std::max(at, next->offset + next->length);
    }
    if (r.buffer->shards[i].bytes > at)
      r.device_tail_spans.push_back({i, at, r.buffer->shards[i].bytes - at});
  }
}

Status plan_rank_internal::ReadDeviceShards(PlanRank::Impl& r) {
  r.published_from_device = r.published_on_device = 0;
  if (r.device_shards[0].empty()) return Status::Ok();
  // device_direct: every changed block into the published device copy, and to the arena only
  // where host work reads the shard.
  const bool published = r.is_source() && r.options.device_direct;
  r.device_block_hashes.resize(r.c->buffer->shards.size());
  for (size_t i = 0; i < r.c->buffer->shards.size(); ++i) {
    const PlannedShard& s = r.c->buffer->shards[i];
    const auto* device = static_cast<const std::byte*>(r.device_shards[0][i].get());
    auto hashes = r.options.device->ChunkHashes(device, s.bytes, kDeviceBlockBytes);
    if (!hashes.ok())
      return hashes.status().WithContext("hashing " + ShardName(r, i) + " on " + r.options.device->name());
    if (hashes->size() != (s.bytes + kDeviceBlockBytes - 1) / kDeviceBlockBytes)
      return Internal(r.options.device->name() + " gave " + std::to_string(hashes->size()) +
                      " block hashes for " + ShardName(r, i) + " (" + std::to_string(s.bytes) + " bytes)");
    std::vector<uint64_t>& known = r.device_block_hashes[i];
    auto unchanged = [&](size_t k) { return known.size() == hashes->size() && known[k] == (*hashes)[k]; };
    // Runs of changed blocks, each one copy.
    for (size_t k = 0; k < hashes->size();) {
      if (unchanged(k)) {
        ++k;
        continue;
      }
      size_t end = k + 1;
      while (end < hashes->size() && !unchanged(end)) ++end;
      const uint64_t at = k * kDeviceBlockBytes,
                     bytes = std::min<uint64_t>(end * kDeviceBlockBytes, s.bytes) - at;
      if (published) {
        const Status copied = r.options.device->CopyOnDevice(
            device + at, static_cast<std::byte*>(r.device_shards[1][i].get()) + at, bytes);
        if (!copied.ok()) {
          known.clear();  // the published copy of this shard is unknown now
          return copied.WithContext("publishing " + ShardName(r, i) + " on " + r.options.device->name());
        }
        r.published_on_device += bytes;
      }
      if (!published || r.c->host_shards[i]) {
        const Status read =
            r.options.device->ToHost(device + at, std::span<std::byte>(r.at(s.offset + at), bytes));
        if (!read.ok()) {
          known.clear();  // the arena's copy of this shard is unknown now
          return read.WithContext("reading " + ShardName(r, i) + " from " + r.options.device->name());
        }
        r.published_from_device += bytes;
      }
      k = end;
    }
    known = *std::move(hashes);
  }
  return Status::Ok();
}

namespace {
// `spans` of the arena's copy `copy` (from_device: of the device's live copy, `copy` ^ 1) into the
// device's copy `copy`, counted into `n`.
Status CopySpans(PlanRank::Impl& r, int copy, std::span<const DeviceSpan> spans, bool from_device,
                 DeviceCopied& n) {
  const std::byte* base = r.at(r.c->mine->CopyOffset(copy));
  for (const DeviceSpan& s : spans) {
    std::byte* to = static_cast<std::byte*>(r.device_shards[copy][s.shard].get()) + s.offset;
    const Status copied =
        from_device ? r.options.device->CopyOnDevice(
                          static_cast<const std::byte*>(r.device_shards[copy ^ 1][s.shard].get()) + s.offset,
                          to, s.length)
                    : r.options.device->ToDevice(
                          std::span(base + r.c->buffer->shards[s.shard].offset + s.offset, s.length), to);
    if (!copied.ok())
      return copied.WithContext("copying " + ShardName(r, s.shard) + (from_device ? " on " : " to ") +
                                r.options.device->name());
    n.bytes += s.length;
    if (from_device) n.on_device += s.length;
  }
  return Status::Ok();
}

std::span<const DeviceSpan> SpansOf(const PlanRank::Impl& r, const std::vector<uint32_t>& begin, size_t i) {
  return std::span(r.c->device_spans).subspan(begin[i], begin[i + 1] - begin[i]);
}
}  // namespace

Result<DeviceCopied> plan_rank_internal::ChunksToDevice(PlanRank::Impl& r, int staging,
                                                        const std::vector<size_t>& chunks, bool kept) {
  DeviceCopied n;
  for (size_t c : chunks)
    WP_RETURN_IF_ERROR(CopySpans(r, staging, SpansOf(r, r.c->chunk_device_begin, c), kept, n));
  return n;
}

Result<DeviceCopied> plan_rank_internal::BandToDevice(PlanRank::Impl& r, int staging, size_t band,
                                                      bool reused) {
  if (r.c->band_device_begin.size() != r.c->in_quantize.size() + 1 || band >= r.c->in_quantize.size())
    return Internal(r.c->me.ToString() + ": device spans mapped for " +
                    std::to_string(r.c->band_device_begin.size() - 1) + " bands, " +
                    std::to_string(r.c->in_quantize.size()) + " quantised, band " + std::to_string(band) +
                    " copied");
  DeviceCopied n;
  WP_RETURN_IF_ERROR(CopySpans(r, staging, SpansOf(r, r.c->band_device_begin, band), reused, n));
  return n;
}

Result<DeviceCopied> plan_rank_internal::TailToDevice(PlanRank::Impl& r, int staging) {
  DeviceCopied n;
  WP_RETURN_IF_ERROR(CopySpans(r, staging, r.c->device_tail_spans, false, n));
  return n;
}

}  // namespace weightport
