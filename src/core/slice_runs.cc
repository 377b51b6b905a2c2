// Contiguous byte runs of slices: one odometer step per run, never per element.
#include <limits>

#include "weightport/core/slice.h"

namespace weightport {
namespace {

// A row-major buffer laid over part of a tensor: element idx sits at
// base + sum_k (idx[k] - origin[k]) * stride[k], strides row-major over `extent`.
struct Frame {
  std::vector<int64_t> origin;
  std::vector<int64_t> extent;
  int64_t base = 0;
};

// The frame of a buffer holding `holder` packed.
Frame HolderFrame(const Slice& holder, const Shape& shape) {
  if (holder.is_box()) return {holder.box().start, holder.box().length, 0};
  return {std::vector<int64_t>(shape.size(), 0), shape, -holder.flat().start};
}

// The first dimension of the run: trailing dims that `p` covers fully in every frame coalesce
// into one run; dimension j itself may be partial.
size_t RunStartDim(const Box& p, const std::vector<Frame>& frames) {
  size_t j = p.rank() - 1;
  auto full = [&](size_t k) {
    for (const Frame& f : frames)
      if (p.length[k] != f.extent[k]) return false;
    return true;
  };
  while (j > 0 && full(j)) --j;
  return j;
}

// Visits the runs of the non-empty box `p` that are contiguous in every frame, in row-major order:
// visit(offsets in elements, one per frame; run length in elements).
template <typename Visit>
void WalkBox(const Box& p, const std::vector<Frame>& frames, Visit&& visit) {
  const size_t r = p.rank(), n = frames.size();
  std::vector<int64_t> off(n);
  for (size_t i = 0; i < n; ++i) off[i] = frames[i].base;
  if (r == 0) {
    visit(off.data(), int64_t{1});
    return;
  }
  const size_t j = RunStartDim(p, frames);
  int64_t run = 1;
  for (size_t k = j; k < r; ++k) run *= p.length[k];
  std::vector<int64_t> stride(n * r);
  for (size_t i = 0; i < n; ++i) {
    int64_t s = 1;
    for (size_t k = r; k-- > 0;) {
      stride[i * r + k] = s;
      off[i] += (p.start[k] - frames[i].origin[k]) * s;
      s *= frames[i].extent[k];
    }
  }
  std::vector<int64_t> count(j, 0);
  for (;;) {
    visit(off.data(), run);
    size_t d = j;  // odometer over dims 0..j-1, last fastest
    for (;;) {
      if (d == 0) return;
      --d;
      for (size_t i = 0; i < n; ++i) off[i] += stride[i * r + d];
      if (++count[d] < p.length[d]) break;
      for (size_t i = 0; i < n; ++i) off[i] -= p.length[d] * stride[i * r + d];
      count[d] = 0;
    }
  }
}

// Validates the slice and that the tensor's byte count fits in int64.
Status CheckSlice(const Slice& slice, const Shape& shape, uint64_t element_size) {
  WP_RETURN_IF_ERROR(ValidateSlice(slice, shape));
  if (element_size == 0) return InvalidArgument("element size is 0");
  WP_ASSIGN_OR_RETURN(const int64_t numel, NumElements(shape));
  if (static_cast<uint64_t>(numel) >
      static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) / element_size)
    return InvalidArgument("shape " + ShapeToString(shape) + " x " + std::to_string(element_size) +
                           " bytes overflows a 64-bit byte count");
  return Status::Ok();
}

// Merges runs adjacent in both buffers before passing them on.
class CopyCoalescer {
 public:
  explicit CopyCoalescer(const std::function<void(const CopyRun&)>& out) : out_(out) {}
  void Add(const CopyRun& r) {
    if (pending_.length && pending_.src_offset + pending_.length == r.src_offset &&
        pending_.dst_offset + pending_.length == r.dst_offset) {
      pending_.length += r.length;
      return;
    }
    Flush();
    pending_ = r;
  }
  void Flush() {
    if (pending_.length) out_(pending_);
    pending_ = {};
  }

 private:
  const std::function<void(const CopyRun&)>& out_;
  CopyRun pending_;
};

}  // namespace

Status ForEachContiguousRun(const Slice& slice, const Shape& shape, uint64_t element_size,
                            const std::function<void(const SliceRun&)>& visit) {
  WP_RETURN_IF_ERROR(CheckSlice(slice, shape, element_size));
  if (slice.empty()) return Status::Ok();
  if (slice.is_flat()) {
    visit({static_cast<uint64_t>(slice.flat().start) * element_size, 0,
           static_cast<uint64_t>(slice.flat().length) * element_size});
    return Status::Ok();
  }
  const std::vector<Frame> frames{{std::vector<int64_t>(shape.size(), 0), shape, 0}};
  uint64_t packed = 0;
  WalkBox(slice.box(), frames, [&](const int64_t* off, int64_t len) {
    const uint64_t bytes = static_cast<uint64_t>(len) * element_size;
    visit({static_cast<uint64_t>(off[0]) * element_size, packed, bytes});
    packed += bytes;
  });
  return Status::Ok();
}

Result<std::vector<SliceRun>> ContiguousRuns(const Slice& slice, const Shape& shape, uint64_t element_size) {
  std::vector<SliceRun> runs;
  WP_RETURN_IF_ERROR(
      ForEachContiguousRun(slice, shape, element_size, [&runs](const SliceRun& r) { runs.push_back(r); }));
  return runs;
}

Result<RunStats> CountContiguousRuns(const Slice& slice, const Shape& shape, uint64_t element_size) {
  WP_RETURN_IF_ERROR(CheckSlice(slice, shape, element_size));
  RunStats stats;
  if (slice.empty()) return stats;
  stats.bytes = static_cast<uint64_t>(slice.num_elements()) * element_size;
  stats.runs = 1;
  if (slice.is_flat() || slice.box().rank() == 0) return stats;
  const Box& b = slice.box();
  const size_t j = RunStartDim(b, {{std::vector<int64_t>(shape.size(), 0), shape, 0}});
  for (size_t k = 0; k < j; ++k) stats.runs *= static_cast<uint64_t>(b.length[k]);
  return stats;
}

Status ForEachCopyRun(const Slice& piece, const Shape& shape, uint64_t element_size, const Slice& src,
                      const Slice& dst, const std::function<void(const CopyRun&)>& visit) {
  WP_RETURN_IF_ERROR(CheckSlice(piece, shape, element_size));
  for (const Slice* holder : {&src, &dst}) {
    const char* which = holder == &src ? "source" : "destination";
    auto inside = Contains(*holder, piece, shape);
    if (!inside.ok()) return inside.status().WithContext(std::string(which) + " slice");
    if (!*inside)
      return InvalidArgument("piece " + piece.ToString() + " is not inside the " + which + " slice " +
                             holder->ToString());
  }
  if (piece.empty()) return Status::Ok();
  const std::vector<Frame> frames{HolderFrame(src, shape), HolderFrame(dst, shape)};
  if (piece.is_flat() && src.is_flat() && dst.is_flat()) {
    const auto len = static_cast<uint64_t>(piece.flat().length);
    visit({static_cast<uint64_t>(piece.flat().start + frames[0].base) * element_size,
           static_cast<uint64_t>(piece.flat().start + frames[1].base) * element_size, len * element_size});
    return Status::Ok();
  }
  CopyCoalescer out(visit);
  auto walk = [&](const Box& box) {
    WalkBox(box, frames, [&](const int64_t* off, int64_t len) {
      out.Add({static_cast<uint64_t>(off[0]) * element_size, static_cast<uint64_t>(off[1]) * element_size,
               static_cast<uint64_t>(len) * element_size});
    });
  };
  if (piece.is_box()) {
    walk(piece.box());
  } else {
    WP_ASSIGN_OR_RETURN(std::vector<Box> boxes, FlatToBoxes(piece.flat(), shape));
    for (const Box& b : boxes) walk(b);
  }
  out.Flush();
  return Status::Ok();
}

Result<std::vector<CopyRun>> CopyRuns(const Slice& piece, const Shape& shape, uint64_t element_size,
                                      const Slice& src, const Slice& dst) {
  std::vector<CopyRun> runs;
  WP_RETURN_IF_ERROR(
      ForEachCopyRun(piece, shape, element_size, src, dst, [&runs](const CopyRun& r) { runs.push_back(r); }));
  return runs;
}

}  // namespace weightport
