#include "weightport/plan/quantized.h"

#include <algorithm>

#include "weightport/kernels/convert.h"

namespace weightport {
namespace {

constexpr int64_t kBlock = kernels::kFp8Block;

int64_t Blocks(int64_t n) { return (n + kBlock - 1) / kBlock; }

}  // namespace

bool Quantizes(DType from, DType to) {
  return to == DType::kF8E4M3 && (from == DType::kF32 || from == DType::kBF16);
}

Result<Shape> ScaleGridShape(const Shape& shape) {
  if (shape.empty() || shape.size() > 2)
    return InvalidArgument("shape " + ShapeToString(shape) +
                           ": only vectors and matrices are quantised to f8e4m3 in 128x128 blocks");
  Shape grid;
  for (int64_t n : shape) grid.push_back(Blocks(n));
  return grid;
}

Result<Slice> ScaleGridSlice(const Slice& slice, const Shape& shape) {
  WP_ASSIGN_OR_RETURN(Shape grid, ScaleGridShape(shape));
  WP_RETURN_IF_ERROR(ValidateSlice(slice, shape));
  if (!slice.is_box())
    return InvalidArgument("slice " + slice.ToString() +
                           " is a flat range; a tensor quantised in 128x128 blocks is sliced in boxes");
  const Box& box = slice.box();
  Box out;
  if (slice.num_elements() == 0) {  // an empty shard: no blocks, wherever it starts
    for (size_t d = 0; d < shape.size(); ++d) {
      out.start.push_back(std::min(box.start[d] / kBlock, grid[d]));
      out.length.push_back(0);
    }
    return Slice(std::move(out));
  }
  for (size_t d = 0; d < shape.size(); ++d) {
    const int64_t end = box.start[d] + box.length[d];
    if (box.start[d] % kBlock != 0 || (end % kBlock != 0 && end != shape[d]))
      return InvalidArgument("slice " + slice.ToString() + " of shape " + ShapeToString(shape) +
                             " does not start and end on 128-element block boundaries in dimension " +
                             std::to_string(d) + "; quantising in 128x128 blocks needs whole blocks");
    out.start.push_back(box.start[d] / kBlock);
    out.length.push_back(Blocks(end) - box.start[d] / kBlock);
  }
  return Slice(std::move(out));
}

Result<QuantizedMatrix> QuantizedMatrixOf(const Slice& slice, const Shape& shape) {
  WP_ASSIGN_OR_RETURN(Slice blocks, ScaleGridSlice(slice, shape));
  const Box& box = slice.box();
  QuantizedMatrix m;
  m.rows = box.rank() == 2 ? box.length[0] : 1;
  m.cols = box.length.back();
  m.scales = blocks.num_elements();
  return m;
}

uint64_t StoredScaleOffset(int64_t elements) { return (static_cast<uint64_t>(elements) + 3) & ~uint64_t{3}; }

Result<uint64_t> StoredQuantizedBytes(const Slice& slice, const Shape& shape) {
  WP_ASSIGN_OR_RETURN(QuantizedMatrix m, QuantizedMatrixOf(slice, shape));
  return StoredScaleOffset(m.rows * m.cols) + 4 * static_cast<uint64_t>(m.scales);
}

Result<uint64_t> WireQuantizedBytes(const Slice& slice, const Shape& shape) {
  WP_ASSIGN_OR_RETURN(QuantizedMatrix m, QuantizedMatrixOf(slice, shape));
  return static_cast<uint64_t>(m.rows * m.cols) + 4 * static_cast<uint64_t>(m.scales);
}

}  // namespace weightport
