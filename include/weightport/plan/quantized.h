// Tensors the destinations store as float8 e4m3fn with 128x128 block scales (the layout of
// DeepSeek-V3-style FP8 checkpoints) or one scale per tensor, quantised in flight.
//
// Per-tensor scaling is the same with one block the size of the tensor: its scale grid is one f32,
// only a whole tensor is whole blocks, so its destination shards hold it whole (a replicated
// tensor) and it is quantised at its sources where one holds it whole, else at each receiver.
//
// A quantised tensor is a vector or a matrix of f32 or bf16 at the sources. Its scale grid has one
// f32 per 128x128 block ([ceil(rows/128), ceil(cols/128)]; [ceil(n/128)] for a vector: blocks of
// 128 elements), each the factor that dequantises its block (kernels::QuantizeE4m3). A block's
// scale depends on the whole block, so every destination shard is a box that starts on a block
// boundary and ends on one or at the tensor's edge. Where every source shard is such a box too,
// each piece is whole blocks: its source quantises it as it publishes (half the bytes of bf16
// travel) and the piece carries its own scales. Otherwise (FSDP's flat shards, rows split at 100)
// the pieces travel in the sources' dtype and each receiver quantises its whole shard once every
// piece of it is verified (plan.h, TransformKind).
//
// Stored, a destination shard is its e4m3 bytes (row-major) followed, 4-byte aligned, by the f32
// scales of its blocks (row-major by block). On the wire, a piece quantised at its source is its
// e4m3 bytes followed directly by its scales; chunk k is bytes [k * chunk_bytes, (k + 1) *
// chunk_bytes) of that.
#pragma once

#include <cstdint>

#include "weightport/core/dtype.h"
#include "weightport/core/slice.h"
#include "weightport/core/status.h"
#include "weightport/core/tensor_meta.h"
#include "weightport/kernels/convert.h"

namespace weightport {

// Sources holding `from` and destinations storing `to`: f32 or bf16 to f8e4m3.
bool Quantizes(DType from, DType to);

// "block128" or "tensor"; ParseFp8Scaling is its inverse (InvalidArgument naming the text).
const char* Fp8ScalingName(kernels::Fp8Scaling scaling);
Result<kernels::Fp8Scaling> ParseFp8Scaling(std::string_view text);

// The scale grid of a quantised tensor of `shape`; InvalidArgument naming the shape unless it is a
// vector or a matrix.
Result<Shape> ScaleGridShape(const Shape& shape, kernels::Fp8Scaling scaling);

// The blocks `slice` covers, as a box of the scale grid. InvalidArgument naming the slice unless
// it is a box on block boundaries (ends at a boundary or the tensor's edge; per tensor: the whole
// tensor) or holds nothing.
Result<Slice> ScaleGridSlice(const Slice& slice, const Shape& shape, kernels::Fp8Scaling scaling);

// The quantiser's view of a box of a quantised tensor: rows x cols, row-major (1 x n for a vector).
struct QuantizedMatrix {
  int64_t rows = 0, cols = 0;
  int64_t scales = 0;  // blocks: ceil(rows / 128) * ceil(cols / 128); 1 per tensor
  kernels::Fp8Scaling scaling = kernels::Fp8Scaling::kBlock128;
};
Result<QuantizedMatrix> QuantizedMatrixOf(const Slice& slice, const Shape& shape,
                                          kernels::Fp8Scaling scaling);

// Where a stored shard of `elements` e4m3 values keeps its scales, from the shard's start.
uint64_t StoredScaleOffset(int64_t elements);
// Bytes of a stored quantised shard and of a quantised piece on the wire.
Result<uint64_t> StoredQuantizedBytes(const Slice& slice, const Shape& shape, kernels::Fp8Scaling scaling);
Result<uint64_t> WireQuantizedBytes(const Slice& slice, const Shape& shape, kernels::Fp8Scaling scaling);

}  // namespace weightport
