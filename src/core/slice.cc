// Slice basics: validation, intersection and the flat-range-to-boxes decomposition.
// Byte runs live in slice_runs.cc.
#include "weightport/core/slice.h"

#include <algorithm>
#include <limits>

namespace weightport {
namespace {

std::string Dim(size_t d) { return "dimension " + std::to_string(d); }

// Row-major element strides of `shape` (stride[r-1] = 1). The shape must have a valid count.
std::vector<int64_t> Strides(const Shape& shape) {
  std::vector<int64_t> s(shape.size(), 1);
  for (size_t k = shape.size(); k-- > 1;) s[k - 1] = s[k] * shape[k];
  return s;
}

// Row-major flat index of the box's first and last element (box non-empty and valid).
int64_t FirstIndex(const Box& b, const std::vector<int64_t>& strides) {
  int64_t i = 0;
  for (size_t k = 0; k < b.rank(); ++k) i += b.start[k] * strides[k];
  return i;
}
int64_t LastIndex(const Box& b, const std::vector<int64_t>& strides) {
  int64_t i = 0;
  for (size_t k = 0; k < b.rank(); ++k) i += (b.start[k] + b.length[k] - 1) * strides[k];
  return i;
}

// The flat range as boxes; shape already validated and the range inside it.
std::vector<Box> FlatToBoxesUnchecked(const FlatRange& flat, const Shape& shape) {
  std::vector<Box> head, tail;
  if (flat.length == 0) return head;
  const size_t r = shape.size();
  if (r == 0) return {Box{}};
  const std::vector<int64_t> stride = Strides(shape);
  // [a, b), both multiples of stride[k] and inside one index of dims 0..k-1, is a box: those dims
  // fixed, dim k spanning (b - a) / stride[k] indices, inner dims full.
  auto make = [&](int64_t a, int64_t b, size_t k) {
    Box box;
    box.start.assign(r, 0);
    box.length.assign(r, 1);
    int64_t rest = a;
    for (size_t d = 0; d <= k; ++d) {
      box.start[d] = rest / stride[d];
      rest %= stride[d];
    }
    box.length[k] = (b - a) / stride[k];
    for (size_t d = k + 1; d < r; ++d) box.length[d] = shape[d];
    return box;
  };
  int64_t cur = flat.start, end = flat.end();
  // Peel unaligned head and tail pieces level by level, innermost first: at level k the bounds
  // are multiples of stride[k]; rounding them to stride[k-1] leaves at most one piece each side.
  for (size_t k = r - 1; k >= 1; --k) {
    const int64_t up = stride[k - 1];
    const int64_t a = (cur + up - 1) / up * up;  // <= numel: numel is a multiple of `up`
    const int64_t b = end / up * up;
    if (a > b) {  // cur and end inside one index of dim k-1
      head.push_back(make(cur, end, k));
      cur = end;
      break;
    }
    if (cur < a) head.push_back(make(cur, a, k));
    if (b < end) tail.push_back(make(b, end, k));
    cur = a;
    end = b;
    if (cur == end) break;
  }
  if (cur < end) head.push_back(make(cur, end, 0));
  head.insert(head.end(), tail.rbegin(), tail.rend());
  return head;
}

}  // namespace

int64_t Box::num_elements() const {
  int64_t n = 1;
  for (int64_t len : length) {
    if (len <= 0) return 0;
    if (__builtin_mul_overflow(n, len, &n)) return std::numeric_limits<int64_t>::max();
  }
  return n;
}

Slice Slice::Full(const Shape& shape) { return MakeBox(std::vector<int64_t>(shape.size(), 0), shape); }

std::string Slice::ToString() const {
  // "start:end", or "start:+length" where end would overflow (only in invalid slices).
  auto range = [](int64_t start, int64_t length) {
    int64_t end;
    if (__builtin_add_overflow(start, length, &end))
      return std::to_string(start) + ":+" + std::to_string(length);
    return std::to_string(start) + ":" + std::to_string(end);
  };
  if (is_flat()) return "flat[" + range(flat().start, flat().length) + "]";
  std::string s = "[";
  for (size_t k = 0; k < box().rank() && k < box().length.size(); ++k) {
    if (k) s += ", ";
    s += range(box().start[k], box().length[k]);
  }
  return s + "]";
}

Status ValidateSlice(const Slice& slice, const Shape& shape) {
  WP_ASSIGN_OR_RETURN(const int64_t numel, NumElements(shape));
  if (slice.is_flat()) {
    const FlatRange& f = slice.flat();
    if (f.start < 0 || f.length < 0 || f.start > numel - f.length)
      return OutOfRange("flat slice " + slice.ToString() + " is outside the " + std::to_string(numel) +
                        " elements of shape " + ShapeToString(shape));
    return Status::Ok();
  }
  const Box& b = slice.box();
  if (b.start.size() != b.length.size())
    return InvalidArgument("box has " + std::to_string(b.start.size()) + " starts but " +
                           std::to_string(b.length.size()) + " lengths");
  if (b.rank() != shape.size())
    return InvalidArgument("box of rank " + std::to_string(b.rank()) + " for a tensor of rank " +
                           std::to_string(shape.size()) + " (shape " + ShapeToString(shape) + ")");
  for (size_t k = 0; k < b.rank(); ++k) {
    if (b.length[k] < 0)
      return InvalidArgument(Dim(k) + " has negative length " + std::to_string(b.length[k]));
    if (b.start[k] < 0 || b.start[k] > shape[k] - b.length[k])
      return OutOfRange("box " + slice.ToString() + " is outside shape " + ShapeToString(shape) + " in " +
                        Dim(k));
  }
  return Status::Ok();
}

Box IntersectBoxes(const Box& a, const Box& b) {
  Box out;
  out.start.resize(a.rank());
  out.length.resize(a.rank());
  for (size_t k = 0; k < a.rank(); ++k) {
    const int64_t lo = std::max(a.start[k], b.start[k]);
    const int64_t hi = std::min(a.start[k] + a.length[k], b.start[k] + b.length[k]);
    out.start[k] = lo;
    out.length[k] = std::max<int64_t>(0, hi - lo);
  }
  return out;
}

bool BoxesOverlap(const Box& a, const Box& b) {
  if (a.num_elements() == 0 || b.num_elements() == 0) return false;
  for (size_t k = 0; k < a.rank(); ++k)
    if (a.start[k] >= b.start[k] + b.length[k] || b.start[k] >= a.start[k] + a.length[k]) return false;
  return true;
}

std::vector<Box> SubtractBox(const Box& a, const Box& b) {
  if (!BoxesOverlap(a, b)) return a.num_elements() ? std::vector<Box>{a} : std::vector<Box>{};
  std::vector<Box> out;
  Box rest = a;  // shrinks to a ∩ b one dimension at a time
  for (size_t k = 0; k < a.rank(); ++k) {
    const int64_t lo = std::max(rest.start[k], b.start[k]);
    const int64_t hi = std::min(rest.start[k] + rest.length[k], b.start[k] + b.length[k]);
    if (rest.start[k] < lo) {
      Box below = rest;
      below.length[k] = lo - rest.start[k];
      out.push_back(std::move(below));
    }
    if (hi < rest.start[k] + rest.length[k]) {
      Box above = rest;
      above.start[k] = hi;
      above.length[k] = rest.start[k] + rest.length[k] - hi;
      out.push_back(std::move(above));
    }
    rest.start[k] = lo;
    rest.length[k] = hi - lo;
  }
  return out;
}

Result<std::vector<Box>> FlatToBoxes(const FlatRange& flat, const Shape& shape) {
  WP_RETURN_IF_ERROR(ValidateSlice(Slice(flat), shape));
  return FlatToBoxesUnchecked(flat, shape);
}

Result<std::vector<Slice>> Intersect(const Slice& a, const Slice& b, const Shape& shape) {
  WP_RETURN_IF_ERROR(ValidateSlice(a, shape));
  WP_RETURN_IF_ERROR(ValidateSlice(b, shape));
  std::vector<Slice> out;
  if (a.is_flat() && b.is_flat()) {
    const int64_t lo = std::max(a.flat().start, b.flat().start);
    const int64_t hi = std::min(a.flat().end(), b.flat().end());
    if (lo < hi) out.push_back(Slice::MakeFlat(lo, hi - lo));
    return out;
  }
  if (a.is_box() && b.is_box()) {
    Box c = IntersectBoxes(a.box(), b.box());
    if (c.num_elements() > 0) out.push_back(std::move(c));
    return out;
  }
  const Box& box = a.is_box() ? a.box() : b.box();
  const FlatRange& flat = a.is_flat() ? a.flat() : b.flat();
  for (const Box& piece : FlatToBoxesUnchecked(flat, shape)) {
    Box c = IntersectBoxes(piece, box);
    if (c.num_elements() > 0) out.push_back(std::move(c));
  }
  return out;
}

Result<bool> Overlaps(const Slice& a, const Slice& b, const Shape& shape) {
  WP_ASSIGN_OR_RETURN(std::vector<Slice> common, Intersect(a, b, shape));
  return !common.empty();
}

Result<bool> Contains(const Slice& outer, const Slice& inner, const Shape& shape) {
  WP_RETURN_IF_ERROR(ValidateSlice(outer, shape));
  WP_RETURN_IF_ERROR(ValidateSlice(inner, shape));
  if (inner.empty()) return true;
  if (outer.is_box()) {
    const Box& o = outer.box();
    auto inside = [&o](const Box& b) { return IntersectBoxes(o, b) == b; };
    if (inner.is_box()) return inside(inner.box());
    for (const Box& piece : FlatToBoxesUnchecked(inner.flat(), shape))
      if (!inside(piece)) return false;
    return true;
  }
  // A box's elements all lie between its first and last element in flat order.
  int64_t first, last;
  if (inner.is_flat()) {
    first = inner.flat().start;
    last = inner.flat().end() - 1;
  } else {
    const std::vector<int64_t> strides = Strides(shape);
    first = FirstIndex(inner.box(), strides);
    last = LastIndex(inner.box(), strides);
  }
  return first >= outer.flat().start && last < outer.flat().end();
}

}  // namespace weightport
