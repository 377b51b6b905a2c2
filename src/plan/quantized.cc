#include "weightport/plan/quantized.h"

#include <algorithm>

#include "weightport/kernels/convert.h"

namespace weightport {
namespace {

using kernels::Fp8Scaling;

// A block's edge in a dimension of `n` elements: 128, or the whole dimension for one scale per tensor.
int64_t BlockEdge(int64_t n, Fp8Scaling scaling) {
  return scaling == Fp8Scaling::kPerTensor ? std::max<int64_t>(n, 1) : kernels::kFp8Block;
}

int64_t Blocks(int64_t n, int64_t edge) { return (n + edge - 1) / edge; }

}  // namespace

const char* Fp8ScalingName(Fp8Scaling scaling) {
  return scaling == Fp8Scaling::kPerTensor ? "tensor" : "block128";
}

Result<Fp8Scaling> ParseFp8Scaling(std::string_view text) {
  if (text == "block128") return Fp8Scaling::kBlock128;
  if (text == "tensor") return Fp8Scaling::kPerTensor;
  return InvalidArgument("f8e4m3 scaling '" + std::string(text) + "': want block128 or tensor");
}

bool Quantizes(DType from, DType to) {
  return to == DType::kF8E4M3 && (from == DType::kF32 || from == DType::kBF16);
}

Result<Shape> ScaleGridShape(const Shape& shape, Fp8Scaling scaling) {
  if (shape.empty() || shape.size() > 2)
    return InvalidArgument("shape " + ShapeToString(shape) +
                           ": only vectors and matrices are quantised to f8e4m3");
  Shape grid;
  for (int64_t n : shape) grid.push_back(Blocks(n, BlockEdge(n, scaling)));
  return grid;
}

Result<Slice> ScaleGridSlice(const Slice& slice, const Shape& shape, Fp8Scaling scaling) {
  WP_ASSIGN_OR_RETURN(Shape grid, ScaleGridShape(shape, scaling));
  WP_RETURN_IF_ERROR(ValidateSlice(slice, shape));
  if (!slice.is_box())
    return InvalidArgument("slice " + slice.ToString() +
                           " is a flat range; a tensor quantised to f8e4m3 is sliced in boxes");
  const Box& box = slice.box();
  Box out;
  if (slice.num_elements() == 0) {  // an empty shard: no blocks, wherever it starts
    for (size_t d = 0; d < shape.size(); ++d) {
      out.start.push_back(std::min(box.start[d] / BlockEdge(shape[d], scaling), grid[d]));
      out.length.push_back(0);
    }
    return Slice(std::move(out));
  }
  for (size_t d = 0; d < shape.size(); ++d) {
    const int64_t end = box.start[d] + box.length[d], edge = BlockEdge(shape[d], scaling);
    if (box.start[d] % edge != 0 || (end % edge != 0 && end != shape[d]))
      return InvalidArgument(
          "slice " + slice.ToString() + " of shape " + ShapeToString(shape) +
          (scaling == Fp8Scaling::kPerTensor
               ? " is not the whole tensor; quantising with one scale per tensor needs the whole tensor"
               : " does not start and end on 128-element block boundaries in dimension " + std::to_string(d) +
                     "; quantising in 128x128 blocks needs whole blocks"));
    out.start.push_back(box.start[d] / edge);
    out.length.push_back(Blocks(end, edge) - box.start[d] / edge);
  }
  return Slice(std::move(out));
}

Result<QuantizedMatrix> QuantizedMatrixOf(const Slice& slice, const Shape& shape, Fp8Scaling scaling) {
  WP_ASSIGN_OR_RETURN(Slice blocks, ScaleGridSlice(slice, shape, scaling));
  const Box& box = slice.box();
  QuantizedMatrix m;
  m.rows = box.rank() == 2 ? box.length[0] : 1;
  m.cols = box.length.back();
  m.scales = blocks.num_elements();
  m.scaling = scaling;
  return m;
}

uint64_t StoredScaleOffset(int64_t elements) { return (static_cast<uint64_t>(elements) + 3) & ~uint64_t{3}; }

Result<uint64_t> StoredQuantizedBytes(const Slice& slice, const Shape& shape, Fp8Scaling scaling) {
  WP_ASSIGN_OR_RETURN(QuantizedMatrix m, QuantizedMatrixOf(slice, shape, scaling));
  return StoredScaleOffset(m.rows * m.cols) + 4 * static_cast<uint64_t>(m.scales);
}

Result<uint64_t> WireQuantizedBytes(const Slice& slice, const Shape& shape, Fp8Scaling scaling) {
  WP_ASSIGN_OR_RETURN(QuantizedMatrix m, QuantizedMatrixOf(slice, shape, scaling));
  return static_cast<uint64_t>(m.rows * m.cols) + 4 * static_cast<uint64_t>(m.scales);
}

}  // namespace weightport
