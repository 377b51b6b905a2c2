// Internal to the planner: which pieces of which tensor each group of destination shards needs, and
// which source shards can send each piece.
//
// Identical shards are grouped: replicas on the destination side (one group, fed once and relayed)
// and on the source side (candidates sharing the sending). A destination group's needs are cut by
// the source groups it overlaps, found through each slice's bounding interval in row-major element
// order (sorted, with a running maximum of ends) so the search stays near-linear when a tensor is
// split over hundreds of ranks.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "weightport/core/slice.h"
#include "weightport/core/status.h"
#include "weightport/plan/plan.h"

namespace weightport::plan_internal {

// A shard of a rank: index into Plan::sources or Plan::destinations, and into its shards.
struct Holder {
  uint32_t buffer = 0;
  uint32_t shard = 0;
};

// Ranks holding the same slice of one tensor. Destination groups list their holders by (host, rank)
// so that a relay chain crosses hosts as few times as it can.
struct ShardGroup {
  uint32_t tensor = 0;
  Slice slice;
  int64_t lo = 0, hi = 0;  // bounding interval of the slice in row-major element order
  std::vector<Holder> holders;
};

// A piece one destination group needs, and every source shard holding all of it.
struct Piece {
  uint32_t tensor = 0;
  Slice slice;
  uint64_t bytes = 0;                                  // on the wire
  TransformKind transform = TransformKind::kIdentity;  // of the step from its source (RootTransforms)
  uint32_t dst_group = 0;                              // index into PieceSet::dst_groups
  std::vector<Holder> sources;
};

struct PieceSet {
  std::vector<ShardGroup> dst_groups;
  std::vector<Piece> pieces;  // in tensor order, then destination group order
};

// Per tensor, where the steps from its sources convert: where the fewer bytes travel, and at the
// source on a tie (it converts once; receivers would convert once each). A tensor quantised to
// e4m3 in blocks (quantized.h) is quantised at its sources when every source shard holds whole
// blocks, else at each receiver (which lands the source's dtype and quantises its whole shard).
std::vector<TransformKind> RootTransforms(const Plan& plan);

// Needs plan.tensors, sources, destinations, topology and options filled in. With relay_fanout 0,
// every destination shard is a group of its own. Pieces held by several sources and larger than
// options.split_bytes are split among them. Errors name the tensor, slice and destination ranks of
// any destination elements no source holds.
Result<PieceSet> FindPieces(const Plan& plan);

// [lo, hi) in row-major element order containing every element of a non-empty slice valid in `shape`.
std::pair<int64_t, int64_t> SliceBounds(const Slice& slice, const Shape& shape);

// `slice` cut into at most `parts` non-empty slices along one dimension (a flat range along its
// length; a box along its first dimension long enough, else its longest).
Result<std::vector<Slice>> SplitSlice(const Slice& slice, int parts);

}  // namespace weightport::plan_internal
