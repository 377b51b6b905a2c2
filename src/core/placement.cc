#include "weightport/core/placement.h"

#include <algorithm>
#include <tuple>
#include <utility>

namespace weightport {
namespace {

std::string RankTensor(int rank, const std::string& tensor) {
  return "placement: rank " + std::to_string(rank) + ": tensor '" + tensor + "'";
}

// A shard's elements as boxes (a flat range becomes its <= 2*rank-1 boxes); slice already valid.
std::vector<Box> AsBoxes(const Slice& slice, const Shape& shape) {
  if (slice.is_box()) return {slice.box()};
  auto boxes = FlatToBoxes(slice.flat(), shape);
  return boxes.ok() ? std::move(boxes).value() : std::vector<Box>{};
}

// Whether two valid slices of one tensor share an element, without per-element work.
bool SlicesOverlap(const Slice& a, const std::vector<Box>& a_boxes, const Slice& b,
                   const std::vector<Box>& b_boxes) {
  if (a.is_flat() && b.is_flat()) {
    return a.flat().length && b.flat().length && a.flat().start < b.flat().end() &&
           b.flat().start < a.flat().end();
  }
  for (const Box& x : a_boxes)
    for (const Box& y : b_boxes)
      if (BoxesOverlap(x, y)) return true;
  return false;
}

// A total order on slices (flat ranges first), by position: sorts replicas next to each other.
bool SliceLess(const Slice* a, const Slice* b) {
  if (a->is_flat() != b->is_flat()) return a->is_flat();
  if (a->is_flat()) {
    return std::pair(a->flat().start, a->flat().length) < std::pair(b->flat().start, b->flat().length);
  }
  return std::tie(a->box().start, a->box().length) < std::tie(b->box().start, b->box().length);
}

}  // namespace

Result<Placement> Placement::Make(std::vector<TensorMeta> tensors) {
  Placement p;
  for (TensorMeta& t : tensors) WP_RETURN_IF_ERROR(p.AddTensor(std::move(t)));
  return p;
}

Result<Placement> Placement::FromManifest(const Manifest& manifest) {
  Placement p;
  for (const ManifestTensor& t : manifest.tensors()) WP_RETURN_IF_ERROR(p.AddTensor(t.meta));
  return p;
}

Status Placement::AddTensor(TensorMeta meta) {
  if (index_.count(meta.name)) return AlreadyExists("placement: duplicate tensor '" + meta.name + "'");
  index_.emplace(meta.name, tensors_.size());
  tensors_.push_back(std::move(meta));
  return Status::Ok();
}

void Placement::AddRank(int rank) { shards_[rank]; }

void Placement::AddShard(int rank, Shard shard) { shards_[rank].push_back(std::move(shard)); }

const TensorMeta* Placement::FindTensor(std::string_view name) const {
  auto it = index_.find(name);
  return it == index_.end() ? nullptr : &tensors_[it->second];
}

const TensorMeta* Placement::FindTensor(std::string_view name, size_t hint) const {
  if (hint < tensors_.size() && tensors_[hint].name == name) return &tensors_[hint];
  return FindTensor(name);
}

std::vector<int> Placement::ranks() const {
  std::vector<int> out;
  out.reserve(shards_.size());
  for (const auto& [rank, shards] : shards_) out.push_back(rank);
  return out;
}

std::span<const Shard> Placement::shards(int rank) const {
  auto it = shards_.find(rank);
  if (it == shards_.end()) return {};
  return it->second;
}

std::vector<Holding> Placement::HoldersOf(std::string_view tensor) const {
  std::vector<Holding> out;
  for (const auto& [rank, shards] : shards_)
    for (const Shard& s : shards)
      if (s.tensor == tensor) out.push_back({rank, s.slice});
  return out;
}

std::vector<std::vector<Holding>> Placement::HoldersByTensor() const {
  std::vector<std::vector<Holding>> out(tensors_.size());
  for (const auto& [rank, shards] : shards_) {
    for (const Shard& s : shards) {
      auto it = index_.find(s.tensor);
      if (it != index_.end()) out[it->second].push_back({rank, s.slice});
    }
  }
  return out;
}

uint64_t Placement::BytesOnRank(int rank) const {
  uint64_t bytes = 0;
  for (const Shard& s : shards(rank)) {
    const TensorMeta* t = FindTensor(s.tensor);
    if (t) bytes += static_cast<uint64_t>(s.slice.num_elements()) * DTypeSize(t->dtype);
  }
  return bytes;
}

uint64_t Placement::TotalBytes() const {
  uint64_t bytes = 0;
  for (const auto& [rank, shards] : shards_) bytes += BytesOnRank(rank);
  return bytes;
}

uint64_t Placement::ModelBytes() const {
  uint64_t bytes = 0;
  for (const TensorMeta& t : tensors_) bytes += t.bytes;
  return bytes;
}

Status Placement::Validate() const {
  for (const auto& [rank, shards] : shards_) {
    if (rank < 0) return InvalidArgument("placement: rank " + std::to_string(rank) + " is negative");
    // (tensor index, shard index) of this rank's shards, sorted to group them for the overlap test.
    std::vector<std::pair<size_t, size_t>> by_tensor;
    by_tensor.reserve(shards.size());
    size_t hint = 0;
    for (size_t i = 0; i < shards.size(); ++i) {
      const Shard& s = shards[i];
      const TensorMeta* t = FindTensor(s.tensor, hint);
      if (!t) return NotFound(RankTensor(rank, s.tensor) + ": no such tensor in the placement");
      Status valid = ValidateSlice(s.slice, t->shape);
      if (!valid.ok()) return valid.WithContext(RankTensor(rank, s.tensor) + ": slice " + s.slice.ToString());
      hint = static_cast<size_t>(t - tensors_.data()) + 1;
      by_tensor.emplace_back(hint - 1, i);
    }
    std::sort(by_tensor.begin(), by_tensor.end());
    // Pairwise within a tensor: a rank holds few shards of one tensor.
    for (size_t g = 0; g < by_tensor.size();) {
      const size_t ti = by_tensor[g].first;
      std::vector<size_t> idx;
      for (; g < by_tensor.size() && by_tensor[g].first == ti; ++g) idx.push_back(by_tensor[g].second);
      if (idx.size() < 2) continue;
      const TensorMeta* t = &tensors_[ti];
      std::vector<std::vector<Box>> boxes;
      for (size_t i : idx) boxes.push_back(AsBoxes(shards[i].slice, t->shape));
      for (size_t a = 0; a < idx.size(); ++a) {
        for (size_t b = a + 1; b < idx.size(); ++b) {
          const Slice& sa = shards[idx[a]].slice;
          const Slice& sb = shards[idx[b]].slice;
          if (SlicesOverlap(sa, boxes[a], sb, boxes[b]))
            return InvalidArgument(RankTensor(rank, t->name) + ": slices " + sa.ToString() + " and " +
                                   sb.ToString() + " overlap");
        }
      }
    }
  }
  return Status::Ok();
}

Status Placement::ValidateAgainst(const Manifest& manifest) const {
  for (const TensorMeta& t : tensors_) {
    const ManifestTensor* m = manifest.Find(t.name);
    if (!m)
      return NotFound("placement: tensor '" + t.name + "' is not in the manifest (version " +
                      std::to_string(manifest.version()) + ")");
    if (m->meta.dtype != t.dtype)
      return InvalidArgument("placement: tensor '" + t.name + "' has dtype " +
                             std::string(DTypeName(t.dtype)) + " but the manifest has " +
                             std::string(DTypeName(m->meta.dtype)));
    if (m->meta.shape != t.shape)
      return InvalidArgument("placement: tensor '" + t.name + "' has shape " + ShapeToString(t.shape) +
                             " but the manifest has " + ShapeToString(m->meta.shape));
  }
  return Validate();
}

std::optional<UncoveredRegion> Placement::FindUncovered() const {
  std::unordered_map<std::string_view, std::vector<const Slice*>> holders;
  for (const auto& [rank, shards] : shards_)
    for (const Shard& s : shards) holders[s.tensor].push_back(&s.slice);
  for (const TensorMeta& t : tensors_) {
    std::vector<const Slice*>& held = holders[t.name];
    // Replicas add nothing: drop repeated slices before subtracting.
    std::sort(held.begin(), held.end(), SliceLess);
    held.erase(std::unique(held.begin(), held.end(), [](const Slice* a, const Slice* b) { return *a == *b; }),
               held.end());
    std::vector<Box> uncovered;
    const Box full = Slice::Full(t.shape).box();
    if (full.num_elements() > 0) uncovered.push_back(full);
    for (const Slice* s : held) {
      for (const Box& b : AsBoxes(*s, t.shape)) {
        std::vector<Box> next;
        for (const Box& u : uncovered)
          for (Box& rest : SubtractBox(u, b)) next.push_back(std::move(rest));
        uncovered = std::move(next);
        if (uncovered.empty()) break;
      }
    }
    if (!uncovered.empty()) {
      // Report the region that comes first in row-major order.
      auto first = std::min_element(uncovered.begin(), uncovered.end(),
                                    [](const Box& a, const Box& b) { return a.start < b.start; });
      return UncoveredRegion{t.name, *first};
    }
  }
  return std::nullopt;
}

Status Placement::CheckCoverage() const {
  std::optional<UncoveredRegion> gap = FindUncovered();
  if (!gap) return Status::Ok();
  const TensorMeta* t = FindTensor(gap->tensor);
  return FailedPrecondition("placement: tensor '" + gap->tensor + "' " + ShapeToString(t->shape) +
                            ": region " + Slice(gap->region).ToString() + " is held by no rank");
}

}  // namespace weightport
