// Slice: the part of one tensor a rank holds, and how that part lies in memory.
//
// A Slice is either
//   - a Box: per-dimension [start, start + length), a hyper-rectangle (TP splits, FSDP2 dim-0
//     shards, pipeline stages hold Full boxes), or
//   - a FlatRange: [start, start + length) of the tensor flattened row-major (FSDP1 flat shards).
// Coordinates are in elements; byte offsets come out of the run functions below.
//
// A rank holding a slice stores it "packed": the slice's elements in row-major order of the slice
// (for a box: row-major over its lengths; for a flat range: in flat order), contiguous, no gaps.
//
// Every function here works per run or per box, never per element, so it is usable on
// [151936, 8192] tensors. Functions that take a Shape validate the slices against it first.
//
// Thread-safety: plain values; const functions are safe to call concurrently.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <variant>
#include <vector>

#include "weightport/core/status.h"
#include "weightport/core/tensor_meta.h"

namespace weightport {

struct Box {
  std::vector<int64_t> start;
  std::vector<int64_t> length;

  size_t rank() const { return start.size(); }
  // Product of lengths (1 for rank 0), saturating at INT64_MAX; exact for a box valid in a shape.
  int64_t num_elements() const;
  friend bool operator==(const Box&, const Box&) = default;
};

struct FlatRange {
  int64_t start = 0;
  int64_t length = 0;

  int64_t end() const { return start + length; }
  friend bool operator==(const FlatRange&, const FlatRange&) = default;
};

class Slice {
 public:
  Slice() = default;                              // the rank-0 box: the one element of a scalar
  Slice(Box box) : v_(std::move(box)) {}          // NOLINT(google-explicit-constructor)
  Slice(FlatRange flat) : v_(std::move(flat)) {}  // NOLINT(google-explicit-constructor)

  static Slice MakeBox(std::vector<int64_t> start, std::vector<int64_t> length) {
    return Slice(Box{std::move(start), std::move(length)});
  }
  static Slice MakeFlat(int64_t start, int64_t length) { return Slice(FlatRange{start, length}); }
  // The whole tensor, as a box.
  static Slice Full(const Shape& shape);

  bool is_box() const { return std::holds_alternative<Box>(v_); }
  bool is_flat() const { return std::holds_alternative<FlatRange>(v_); }
  const Box& box() const { return std::get<Box>(v_); }
  const FlatRange& flat() const { return std::get<FlatRange>(v_); }

  int64_t num_elements() const { return is_box() ? box().num_elements() : flat().length; }
  bool empty() const { return num_elements() == 0; }
  // "[0:4, 2:6]" for a box (start:end per dim), "flat[10:30]" for a flat range.
  std::string ToString() const;

  friend bool operator==(const Slice&, const Slice&) = default;

 private:
  std::variant<Box, FlatRange> v_;
};

// OK when `slice` lies inside a tensor of `shape`: a box has the tensor's rank and per dim
// 0 <= start, 0 <= length, start + length <= dim; a flat range has 0 <= start, 0 <= length,
// start + length <= elements. Also rejects shapes with negative dims or overflowing counts.
// Errors name the offending dimension; callers add the tensor and rank.
Status ValidateSlice(const Slice& slice, const Shape& shape);

// ---- intersection ----------------------------------------------------------------------------

// The elements two slices of the same tensor share, as a list of disjoint non-empty slices in
// row-major order (every element of piece i precedes every element of piece i+1):
//   box  ∩ box  -> one box, or nothing
//   flat ∩ flat -> one flat range, or nothing
//   box  ∩ flat -> boxes: the flat range's FlatToBoxes pieces clipped to the box (<= 2*rank-1)
// Boxes rather than flat ranges or byte runs keep the result O(rank) even when it spans millions
// of rows; ContiguousRuns/ForEachCopyRun turn each piece into byte runs when needed.
Result<std::vector<Slice>> Intersect(const Slice& a, const Slice& b, const Shape& shape);
// True when a and b share at least one element. Both must be valid in `shape`.
Result<bool> Overlaps(const Slice& a, const Slice& b, const Shape& shape);
// True when every element of `inner` is in `outer`. Both must be valid in `shape`.
Result<bool> Contains(const Slice& outer, const Slice& inner, const Shape& shape);

// Box-only helpers: same rank, start + length must not overflow (true of any box valid in a
// shape); no shape needed.
// The common box; a box with some zero length when they are disjoint.
Box IntersectBoxes(const Box& a, const Box& b);
bool BoxesOverlap(const Box& a, const Box& b);
// `a` minus `b` as at most 2*rank disjoint boxes (in no particular order).
std::vector<Box> SubtractBox(const Box& a, const Box& b);

// The flat range [flat.start, flat.end()) of a row-major tensor of `shape` as at most
// 2*rank-1 disjoint boxes (1 for rank 0), in row-major order. Empty range -> no boxes.
Result<std::vector<Box>> FlatToBoxes(const FlatRange& flat, const Shape& shape);

// ---- contiguous byte runs --------------------------------------------------------------------

// One maximal contiguous run of a slice. Offsets and length in bytes.
struct SliceRun {
  uint64_t tensor_offset = 0;  // in the whole tensor's row-major bytes
  uint64_t packed_offset = 0;  // in the slice's own packed buffer (running sum of lengths)
  uint64_t length = 0;
  friend bool operator==(const SliceRun&, const SliceRun&) = default;
};

// Visits the runs of `slice` in a row-major tensor of `shape` with `element_size`-byte elements,
// in increasing tensor_offset order: trailing dimensions the box covers fully are coalesced and
// the remaining outer index space is walked with an odometer, one step per run. A flat slice is
// one run; an empty slice has none. The visitor is called once per run.
Status ForEachContiguousRun(const Slice& slice, const Shape& shape, uint64_t element_size,
                            const std::function<void(const SliceRun&)>& visit);
// The same runs as a vector (may be large: one run per row of a column split).
Result<std::vector<SliceRun>> ContiguousRuns(const Slice& slice, const Shape& shape, uint64_t element_size);
// Number of runs and bytes without materialising them (O(rank)).
struct RunStats {
  uint64_t runs = 0;
  uint64_t bytes = 0;
};
Result<RunStats> CountContiguousRuns(const Slice& slice, const Shape& shape, uint64_t element_size);

// One copy of `length` bytes from a source buffer to a destination buffer.
struct CopyRun {
  uint64_t src_offset = 0;
  uint64_t dst_offset = 0;
  uint64_t length = 0;
  friend bool operator==(const CopyRun&, const CopyRun&) = default;
};

// For a `piece` held by both `src` and `dst` (each stored packed; Slice::Full(shape) for a buffer
// holding the whole tensor), visits maximal runs contiguous in both packed buffers, in row-major
// order of the piece. This is what a transfer of an Intersect() piece executes. Errors when the
// piece is not contained in both holders.
Status ForEachCopyRun(const Slice& piece, const Shape& shape, uint64_t element_size, const Slice& src,
                      const Slice& dst, const std::function<void(const CopyRun&)>& visit);
Result<std::vector<CopyRun>> CopyRuns(const Slice& piece, const Shape& shape, uint64_t element_size,
                                      const Slice& src, const Slice& dst);

}  // namespace weightport
