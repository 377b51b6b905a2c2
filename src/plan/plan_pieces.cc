#include "plan/plan_pieces.h"

#include <algorithm>
#include <cstdint>

#include "weightport/core/dtype.h"
#include "weightport/core/placement_builders.h"
#include "weightport/kernels/convert.h"
#include "weightport/plan/planner.h"
#include "weightport/plan/quantized.h"

namespace weightport::plan_internal {
namespace {

bool SliceLess(const Slice& a, const Slice& b) {
  if (a.is_flat() != b.is_flat()) return a.is_flat();
  if (a.is_flat())
    return std::pair(a.flat().start, a.flat().length) < std::pair(b.flat().start, b.flat().length);
  return std::tie(a.box().start, a.box().length) < std::tie(b.box().start, b.box().length);
}

}  // namespace

std::pair<int64_t, int64_t> SliceBounds(const Slice& s, const Shape& shape) {
  if (s.is_flat()) return {s.flat().start, s.flat().end()};
  const Box& b = s.box();
  int64_t lo = 0, last = 0, stride = 1;
  for (size_t d = b.rank(); d-- > 0;) {
    lo += b.start[d] * stride;
    last += (b.start[d] + b.length[d] - 1) * stride;
    stride *= shape[d];
  }
  return {lo, last + 1};
}

namespace {

struct Entry {
  const Slice* slice;
  Holder holder;
  int host;
  int rank;
  int64_t lo = 0, hi = 0;  // SliceBounds: cheap to compare, and unequal for most unequal slices
};

// Groups one tensor's entries by equal slice; empty slices hold nothing and are dropped.
void GroupEntries(std::vector<Entry>& entries, uint32_t tensor, const Shape& shape, bool by_host,
                  std::vector<ShardGroup>& out) {
  for (Entry& e : entries)
    if (!e.slice->empty()) std::tie(e.lo, e.hi) = SliceBounds(*e.slice, shape);
  std::stable_sort(entries.begin(), entries.end(), [&](const Entry& a, const Entry& b) {
    if (a.lo != b.lo || a.hi != b.hi) return std::pair(a.lo, a.hi) < std::pair(b.lo, b.hi);
    if (SliceLess(*a.slice, *b.slice)) return true;
    if (SliceLess(*b.slice, *a.slice)) return false;
    return by_host ? std::pair(a.host, a.rank) < std::pair(b.host, b.rank) : a.rank < b.rank;
  });
  for (size_t i = 0; i < entries.size();) {
    size_t j = i;
    ShardGroup g;
    g.tensor = tensor;
    g.slice = *entries[i].slice;
    while (j < entries.size() && entries[j].lo == entries[i].lo && entries[j].hi == entries[i].hi &&
           *entries[j].slice == g.slice)
      g.holders.push_back(entries[j++].holder);
    g.lo = entries[i].lo, g.hi = entries[i].hi;
    i = j;
    if (g.slice.empty()) continue;
    out.push_back(std::move(g));
  }
}

std::vector<Box> ToBoxes(const Slice& s, const Shape& shape) {
  if (s.is_box()) return {s.box()};
  auto boxes = FlatToBoxes(s.flat(), shape);
  return boxes.ok() ? *boxes : std::vector<Box>{};
}

// The source groups of one tensor, sorted by lo, with a running maximum of hi for the search.
struct SourceIndex {
  std::vector<ShardGroup> groups;
  std::vector<int64_t> max_hi;

  void Build() {
    std::stable_sort(groups.begin(), groups.end(),
                     [](const ShardGroup& a, const ShardGroup& b) { return a.lo < b.lo; });
    max_hi.resize(groups.size());
    int64_t m = INT64_MIN;
    for (size_t i = 0; i < groups.size(); ++i) max_hi[i] = m = std::max(m, groups[i].hi);
  }
  // Groups whose bounding interval meets [lo, hi), ascending by lo.
  std::vector<const ShardGroup*> Near(int64_t lo, int64_t hi) const {
    std::vector<const ShardGroup*> out;
    size_t i = std::upper_bound(max_hi.begin(), max_hi.end(), lo) - max_hi.begin();
    for (; i < groups.size() && groups[i].lo < hi; ++i)
      if (groups[i].hi > lo) out.push_back(&groups[i]);
    return out;
  }
};

class PieceFinder {
 public:
  explicit PieceFinder(const Plan& plan) : plan_(plan), transforms_(RootTransforms(plan)) {}

  Result<PieceSet> Run() {
    const size_t n = plan_.tensors.size();
    std::vector<std::vector<Entry>> src(n), dst(n);
    Collect(plan_.sources, src);
    Collect(plan_.destinations, dst);
    for (uint32_t t = 0; t < n; ++t) {
      if (dst[t].empty()) continue;
      const Shape& shape = plan_.tensors[t].shape;
      SourceIndex index;
      GroupEntries(src[t], t, shape, false, index.groups);
      index.Build();
      std::vector<ShardGroup> groups;
      GroupEntries(dst[t], t, shape, true, groups);
      if (plan_.options.relay_fanout == 0) groups = Singletons(std::move(groups));
      for (ShardGroup& g : groups) {
        const uint32_t id = static_cast<uint32_t>(out_.dst_groups.size());
        out_.dst_groups.push_back(std::move(g));
        WP_RETURN_IF_ERROR(Cut(id, index));
      }
    }
    return std::move(out_);
  }

 private:
  void Collect(const std::vector<RankBuffer>& buffers, std::vector<std::vector<Entry>>& by_tensor) {
    for (uint32_t b = 0; b < buffers.size(); ++b)
      for (uint32_t s = 0; s < buffers[b].shards.size(); ++s) {
        const PlannedShard& shard = buffers[b].shards[s];
        by_tensor[shard.tensor].push_back({&shard.slice, {b, s}, buffers[b].host, buffers[b].endpoint.rank});
      }
  }

  // Each holder its own group. The holders are taken out of a group before it is copied per holder:
  // a copy of the whole list, reassigned to one, kept the list's capacity, so a slice held by N
  // replicas cost N x N holders (16,384 replicas of a 64-bucket model: over 10 GB).
  static std::vector<ShardGroup> Singletons(std::vector<ShardGroup> groups) {
    std::vector<ShardGroup> out;
    for (ShardGroup& g : groups) {
      std::vector<Holder> holders = std::move(g.holders);
      g.holders.clear();
      for (const Holder& h : holders) {
        ShardGroup one = g;
        one.holders.push_back(h);
        out.push_back(std::move(one));
      }
    }
    return out;
  }

  // Cuts destination group `id` into pieces by the source groups it overlaps.
  Status Cut(uint32_t id, const SourceIndex& index) {
    const ShardGroup& g = out_.dst_groups[id];
    const TensorMeta& t = plan_.tensors[g.tensor];
    std::vector<const ShardGroup*> near = index.Near(g.lo, g.hi);
    WP_ASSIGN_OR_RETURN(bool overlapping, SourcesOverlap(near, t.shape));
    int64_t covered = 0;
    if (!overlapping) {
      for (const ShardGroup* s : near) {
        WP_ASSIGN_OR_RETURN(std::vector<Slice> parts, Intersect(g.slice, s->slice, t.shape));
        for (Slice& part : parts) {
          covered += part.num_elements();
          WP_RETURN_IF_ERROR(Add(id, std::move(part), s->holders));
        }
      }
    } else {
      // Sources holding overlapping slices: each element goes to the first group holding it, and
      // every group holding a whole piece may send it.
      std::vector<Box> done;
      for (const ShardGroup* s : near) {
        WP_ASSIGN_OR_RETURN(std::vector<Slice> parts, Intersect(g.slice, s->slice, t.shape));
        for (const Slice& part : parts)
          for (Box& box : ToBoxes(part, t.shape)) {
            std::vector<Box> left = {std::move(box)};
            for (const Box& d : done) {
              std::vector<Box> next;
              for (const Box& l : left)
                for (Box& r : SubtractBox(l, d))
                  if (r.num_elements() > 0) next.push_back(std::move(r));
              left = std::move(next);
            }
            for (Box& l : left) {
              std::vector<Holder> holders;
              for (const ShardGroup* o : near) {
                WP_ASSIGN_OR_RETURN(bool has, Contains(o->slice, Slice(l), t.shape));
                if (has) holders.insert(holders.end(), o->holders.begin(), o->holders.end());
              }
              covered += l.num_elements();
              done.push_back(l);
              WP_RETURN_IF_ERROR(Add(id, Slice(std::move(l)), holders));
            }
          }
      }
    }
    if (covered != g.slice.num_elements()) {
      std::string ranks;
      for (const Holder& h : g.holders)
        ranks += (ranks.empty() ? "" : ", ") + std::to_string(plan_.destinations[h.buffer].endpoint.rank);
      return NotFound("tensor '" + t.name + "': destination rank(s) " + ranks + " need " +
                      g.slice.ToString() + " but the sources hold only " + std::to_string(covered) +
                      " of its " + std::to_string(g.slice.num_elements()) + " elements");
    }
    return Status::Ok();
  }

  Result<bool> SourcesOverlap(const std::vector<const ShardGroup*>& near, const Shape& shape) const {
    for (size_t i = 0; i < near.size(); ++i)
      for (size_t j = i + 1; j < near.size() && near[j]->lo < near[i]->hi; ++j) {
        WP_ASSIGN_OR_RETURN(bool overlap, Overlaps(near[i]->slice, near[j]->slice, shape));
        if (overlap) return true;
      }
    return false;
  }

  // Adds a piece, split among its sources when it is large and several hold it.
  Status Add(uint32_t group, Slice slice, const std::vector<Holder>& sources) {
    const uint32_t tensor = out_.dst_groups[group].tensor;
    const TransformKind transform = transforms_[tensor];
    const DType wire = transform == TransformKind::kConvertAtSender ? plan_.destination_dtypes[tensor]
                                                                    : plan_.tensors[tensor].dtype;
    // Quantised at the sources, a piece is whole blocks: both sides' shards are (RootTransforms).
    WP_ASSIGN_OR_RETURN(const uint64_t bytes, plan_.WireBytes(tensor, wire, slice));
    const uint64_t split = plan_.options.split_bytes ? plan_.options.split_bytes : plan_.options.chunk_bytes;
    std::vector<Slice> parts;
    if (sources.size() > 1 && bytes > split) {
      const uint64_t want = std::min<uint64_t>(sources.size(), (bytes + split - 1) / split);
      const bool blocks = transform == TransformKind::kConvertAtSender && plan_.Quantized(tensor);
      if (!blocks) {
        WP_ASSIGN_OR_RETURN(parts, SplitSlice(slice, static_cast<int>(want)));
      } else if (plan_.Fp8ScalingOf(tensor) == kernels::Fp8Scaling::kBlock128) {
        WP_ASSIGN_OR_RETURN(parts, SplitInBlocks(slice, static_cast<int>(want)));
      } else {
        parts.push_back(std::move(slice));  // one scale for the whole tensor: one source quantises it
      }
    } else {
      parts.push_back(std::move(slice));
    }
    if (out_.pieces.size() + parts.size() > kMaxPlanSteps)
      return InvalidArgument("plan: tensor '" + plan_.tensors[tensor].name + "': more than " +
                             std::to_string(kMaxPlanSteps) +
                             " pieces (the limit) between the source and destination shards");
    for (Slice& part : parts) {
      Piece p;
      p.tensor = tensor;
      WP_ASSIGN_OR_RETURN(p.bytes, plan_.WireBytes(tensor, wire, part));
      // A step counts its chunks in 32 bits (PlanStep::chunks): checked, not wrapped.
      const uint64_t chunk = plan_.options.chunk_bytes;
      if (p.bytes / chunk + (p.bytes % chunk != 0) > UINT32_MAX)
        return InvalidArgument("plan: tensor '" + plan_.tensors[tensor].name + "': a piece of " +
                               std::to_string(p.bytes) + " bytes is more than " + std::to_string(UINT32_MAX) +
                               " chunks of chunk_bytes " + std::to_string(chunk) + " (the limit per step)");
      p.slice = std::move(part);
      p.transform = transform;
      p.dst_group = group;
      p.sources = sources;
      out_.pieces.push_back(std::move(p));
    }
    return Status::Ok();
  }

  // A quantised tensor's piece split among its sources in whole blocks, along its first dimension
  // of two blocks or more (a piece of one block is not split).
  static Result<std::vector<Slice>> SplitInBlocks(const Slice& slice, int parts) {
    const Box& box = slice.box();  // WireBytes checked it is a box on block boundaries
    const int64_t block = kernels::kFp8Block;
    size_t dim = 0;
    while (dim < box.rank() && box.length[dim] <= block) ++dim;
    if (dim == box.rank()) return std::vector<Slice>{slice};
    const int64_t blocks = (box.length[dim] + block - 1) / block;
    WP_ASSIGN_OR_RETURN(std::vector<Slice> spans, SplitSlice(Slice::MakeBox({0}, {blocks}), parts));
    std::vector<Slice> out;
    for (const Slice& span : spans) {
      Box part = box;
      part.start[dim] += span.box().start[0] * block;
      part.length[dim] =
          std::min(span.box().length[0] * block, box.length[dim] - span.box().start[0] * block);
      out.push_back(Slice(std::move(part)));
    }
    return out;
  }

  const Plan& plan_;
  const std::vector<TransformKind> transforms_;  // per tensor
  PieceSet out_;
};

}  // namespace

Result<std::vector<Slice>> SplitSlice(const Slice& slice, int parts) {
  if (parts <= 1 || slice.num_elements() <= 1) return std::vector<Slice>{slice};
  std::vector<Slice> out;
  if (slice.is_flat()) {
    WP_ASSIGN_OR_RETURN(std::vector<SplitRange> ranges, EvenSplit(slice.flat().length, parts));
    for (const SplitRange& r : ranges)
      if (r.length > 0) out.push_back(Slice::MakeFlat(slice.flat().start + r.start, r.length));
    return out;
  }
  const Box& box = slice.box();
  // The first dimension long enough for every part, else the longest.
  size_t dim = box.rank();
  for (size_t d = 0; d < box.rank() && dim == box.rank(); ++d)
    if (box.length[d] >= parts) dim = d;
  if (dim == box.rank()) dim = std::max_element(box.length.begin(), box.length.end()) - box.length.begin();
  WP_ASSIGN_OR_RETURN(std::vector<SplitRange> ranges, EvenSplit(box.length[dim], parts));
  for (const SplitRange& r : ranges) {
    if (r.length == 0) continue;
    Box part = box;
    part.start[dim] += r.start;
    part.length[dim] = r.length;
    out.push_back(Slice(std::move(part)));
  }
  return out;
}

std::vector<TransformKind> RootTransforms(const Plan& plan) {
  std::vector<bool> whole_blocks(plan.tensors.size(), true);  // every source shard, where quantised
  for (const RankBuffer& b : plan.sources)
    for (const PlannedShard& s : b.shards)
      if (plan.Quantized(s.tensor) &&
          !ScaleGridSlice(s.slice, plan.tensors[s.tensor].shape, plan.Fp8ScalingOf(s.tensor)).ok())
        whole_blocks[s.tensor] = false;
  std::vector<TransformKind> out;
  for (uint32_t t = 0; t < plan.tensors.size(); ++t) {
    const DType from = plan.tensors[t].dtype, to = plan.destination_dtypes[t];
    if (from == to)
      out.push_back(TransformKind::kIdentity);
    else if (plan.Quantized(t))
      out.push_back(whole_blocks[t] ? TransformKind::kConvertAtSender : TransformKind::kConvertAtReceiver);
    else
      out.push_back(DTypeSize(to) <= DTypeSize(from) ? TransformKind::kConvertAtSender
                                                     : TransformKind::kConvertAtReceiver);
  }
  return out;
}

Result<PieceSet> FindPieces(const Plan& plan) { return PieceFinder(plan).Run(); }

}  // namespace weightport::plan_internal
