// float8 e4m3fn quantisation with per-tensor or 128x128 block scales.
#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "kernels/convert_lanes.h"
#include "kernels/fp8_avx512.h"
#include "weightport/kernels/convert.h"

namespace weightport::kernels {
namespace {

using lanes::u16;
using lanes::u32;

// The loops, written once and inlined into each compiled variant below (with n a constant 128 the
// row kernels unroll without a remainder).
inline uint32_t FiniteAbsBits(uint32_t u) {  // |x| as bits when finite, else 0
  const uint32_t abs = u & 0x7fffffffu;
  return lanes::Select(abs <= 0x7f7fffffu, abs, 0u);
}
inline uint8_t QuantizeOne(uint32_t f32_bits, float scale) {
  return lanes::F32ToE4m3(std::bit_cast<uint32_t>(std::bit_cast<float>(f32_bits) / scale));
}
// Largest finite |x| of a row segment, as bits (for non-negative floats, bit order is value order).
inline uint32_t AmaxLoop(const u32* in, size_t n, uint32_t m) {
  for (size_t i = 0; i < n; ++i) {
    const uint32_t a = FiniteAbsBits(in[i]);
    m = m > a ? m : a;
  }
  return m;
}
inline uint32_t AmaxLoop(const u16* in, size_t n, uint32_t m) {
  for (size_t i = 0; i < n; ++i) {
    const uint32_t a = FiniteAbsBits(lanes::Bf16ToF32(in[i]));
    m = m > a ? m : a;
  }
  return m;
}
inline void QuantizeLoop(const u32* in, size_t n, float scale, uint8_t* out) {
  for (size_t i = 0; i < n; ++i) out[i] = QuantizeOne(in[i], scale);
}
inline void QuantizeLoop(const u16* in, size_t n, float scale, uint8_t* out) {
  for (size_t i = 0; i < n; ++i) out[i] = QuantizeOne(lanes::Bf16ToF32(in[i]), scale);
}

// One segment of a row (a partial block, or a per-tensor row).
WP_VECTOR_CLONES uint32_t AmaxBitsF32(const u32* in, size_t n, uint32_t m) { return AmaxLoop(in, n, m); }
WP_VECTOR_CLONES uint32_t AmaxBitsBf16(const u16* in, size_t n, uint32_t m) { return AmaxLoop(in, n, m); }
WP_VECTOR_CLONES void QuantizeF32(const u32* in, size_t n, float scale, uint8_t* out) {
  QuantizeLoop(in, n, scale, out);
}
WP_VECTOR_CLONES void QuantizeBf16(const u16* in, size_t n, float scale, uint8_t* out) {
  QuantizeLoop(in, n, scale, out);
}

// One row of a strip in 128x128 block mode: every full block of the row in one call (per-block
// calls of 128 elements spent much of their time entering and leaving the vector loop). The row's
// last, partial block is left to the caller. Same signatures as the avx512:: kernels.
using AmaxRow = void (*)(const void* in, int64_t blocks, uint32_t* amax);
using QuantizeRow = void (*)(const void* in, int64_t blocks, const float* scales, uint8_t* out);
WP_VECTOR_CLONES void AmaxRowF32(const void* in, int64_t blocks, uint32_t* amax) {
  for (int64_t bc = 0; bc < blocks; ++bc)
    amax[bc] = AmaxLoop(static_cast<const u32*>(in) + bc * kFp8Block, kFp8Block, amax[bc]);
}
WP_VECTOR_CLONES void AmaxRowBf16(const void* in, int64_t blocks, uint32_t* amax) {
  for (int64_t bc = 0; bc < blocks; ++bc)
    amax[bc] = AmaxLoop(static_cast<const u16*>(in) + bc * kFp8Block, kFp8Block, amax[bc]);
}
WP_VECTOR_CLONES void QuantizeRowF32(const void* in, int64_t blocks, const float* scales, uint8_t* out) {
  for (int64_t bc = 0; bc < blocks; ++bc)
    QuantizeLoop(static_cast<const u32*>(in) + bc * kFp8Block, kFp8Block, scales[bc], out + bc * kFp8Block);
}
WP_VECTOR_CLONES void QuantizeRowBf16(const void* in, int64_t blocks, const float* scales, uint8_t* out) {
  for (int64_t bc = 0; bc < blocks; ++bc)
    QuantizeLoop(static_cast<const u16*>(in) + bc * kFp8Block, kFp8Block, scales[bc], out + bc * kFp8Block);
}

const std::array<float, 256>& E4m3Table() {
  static const std::array<float, 256> table = [] {
    std::array<float, 256> t{};
    for (int v = 0; v < 256; ++v) {
      const int exp = (v >> 3) & 0xf, mant = v & 7;
      float mag = exp == 0 ? std::ldexp(static_cast<float>(mant), -9)
                           : std::ldexp(1.0f + static_cast<float>(mant) / 8.0f, exp - 7);
      if ((v & 0x7f) == 0x7f) mag = std::bit_cast<float>(0x7fc00000u);  // NaN
      t[v] = (v & 0x80) ? -mag : mag;
    }
    return t;
  }();
  return table;
}

struct Blocks {
  int64_t rows = 0, cols = 0, block_rows = 0, block_cols = 0;  // block size in elements
  int64_t count_rows() const { return (rows + block_rows - 1) / block_rows; }
  int64_t count_cols() const { return (cols + block_cols - 1) / block_cols; }
};

Result<Blocks> MakeBlocks(int64_t rows, int64_t cols, Fp8Scaling scaling) {
  constexpr int64_t kMaxElements = int64_t{1} << 50;  // far beyond any tensor; keeps products in range
  if (rows >= 1 && cols >= 1 && rows > kMaxElements / cols)
    return InvalidArgument("fp8: a " + std::to_string(rows) + " x " + std::to_string(cols) +
                           " tensor is too large");
  if (rows < 1 || cols < 1)
    return InvalidArgument("fp8: a " + std::to_string(rows) + " x " + std::to_string(cols) +
                           " tensor has no elements to scale");
  if (scaling == Fp8Scaling::kPerTensor) return Blocks{rows, cols, rows, cols};
  return Blocks{rows, cols, kFp8Block, kFp8Block};
}

}  // namespace

uint8_t F32ToE4m3(float f) { return lanes::F32ToE4m3(std::bit_cast<uint32_t>(f)); }
float E4m3ToF32(uint8_t v) { return E4m3Table()[v]; }

int64_t Fp8ScaleCount(int64_t rows, int64_t cols, Fp8Scaling scaling) {
  auto b = MakeBlocks(rows, cols, scaling);
  return b.ok() ? b->count_rows() * b->count_cols() : 0;
}

Status QuantizeE4m3(DType from, const void* src, int64_t rows, int64_t cols, Fp8Scaling scaling, uint8_t* dst,
                    float* scales) {
  if (from != DType::kF32 && from != DType::kBF16)
    return InvalidArgument("fp8: quantises f32 or bf16, not " + std::string(DTypeName(from)));
  WP_ASSIGN_OR_RETURN(Blocks b, MakeBlocks(rows, cols, scaling));
  if (src == nullptr || dst == nullptr || scales == nullptr) return InvalidArgument("fp8: a null buffer");
  const auto* in32 = static_cast<const u32*>(src);
  const auto* in16 = static_cast<const u16*>(src);
  // Every row goes through the row kernels in 128-column groups (a block's columns in block mode;
  // with one scale per tensor every group gets that scale), then its partial last group.
  const int64_t groups = (cols + kFp8Block - 1) / kFp8Block, full = cols / kFp8Block;
  const bool per_tensor = scaling == Fp8Scaling::kPerTensor;
  std::vector<uint32_t> amax(groups);
  std::vector<float> tensor_scales(per_tensor ? groups : 0);  // the one scale, once per group
  const bool f32 = from == DType::kF32;
  const AmaxRow amax_row = f32 ? AmaxRowF32 : AmaxRowBf16;
  const QuantizeRow quantize_row = avx512::Available()
                                       ? (f32 ? avx512::QuantizeRowF32 : avx512::QuantizeRowBf16)
                                       : (f32 ? QuantizeRowF32 : QuantizeRowBf16);
  const size_t element = f32 ? 4 : 2;
  auto row = [&](int64_t r) { return static_cast<const std::byte*>(src) + r * cols * element; };
  const int64_t tail_at = full * kFp8Block, tail = cols - tail_at;  // the partial group's columns
  // A scale that underflows to 0 would make 0/0 NaN: the smallest normal float at least.
  auto scale_of = [](uint32_t bits) {
    const float m = std::bit_cast<float>(bits);
    return m > 0 ? std::max(m / kE4m3Max, std::numeric_limits<float>::min()) : 1.0f;
  };
  for (int64_t br = 0; br < b.count_rows(); ++br) {
    const int64_t r0 = br * b.block_rows, r1 = std::min(rows, r0 + b.block_rows);
    // One pass for the strip's maxima, one to quantise it.
    std::fill(amax.begin(), amax.end(), 0u);
    for (int64_t r = r0; r < r1; ++r) {
      if (full > 0) amax_row(row(r), full, amax.data());
      if (tail > 0) {
        const int64_t at = r * cols + tail_at;
        amax[full] =
            f32 ? AmaxBitsF32(in32 + at, tail, amax[full]) : AmaxBitsBf16(in16 + at, tail, amax[full]);
      }
    }
    const float* strip_scales = scales + br * groups;
    if (per_tensor) {
      scales[0] = scale_of(*std::max_element(amax.begin(), amax.end()));
      std::fill(tensor_scales.begin(), tensor_scales.end(), scales[0]);
      strip_scales = tensor_scales.data();
    } else {
      for (int64_t g = 0; g < groups; ++g) scales[br * groups + g] = scale_of(amax[g]);
    }
    for (int64_t r = r0; r < r1; ++r) {
      if (full > 0) quantize_row(row(r), full, strip_scales, dst + r * cols);
      if (tail > 0) {
        const int64_t at = r * cols + tail_at;
        if (f32)
          QuantizeF32(in32 + at, tail, strip_scales[full], dst + at);
        else
          QuantizeBf16(in16 + at, tail, strip_scales[full], dst + at);
      }
    }
  }
  return Status::Ok();
}

Status DequantizeE4m3(const uint8_t* src, const float* scales, int64_t rows, int64_t cols, Fp8Scaling scaling,
                      DType to, void* dst) {
  if (to != DType::kF32 && to != DType::kBF16)
    return InvalidArgument("fp8: dequantises to f32 or bf16, not " + std::string(DTypeName(to)));
  WP_ASSIGN_OR_RETURN(Blocks b, MakeBlocks(rows, cols, scaling));
  if (src == nullptr || dst == nullptr || scales == nullptr) return InvalidArgument("fp8: a null buffer");
  const std::array<float, 256>& table = E4m3Table();
  auto* out32 = static_cast<u32*>(dst);
  auto* out16 = static_cast<u16*>(dst);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) {
      const int64_t at = r * cols + c;
      const float v = table[src[at]] * scales[(r / b.block_rows) * b.count_cols() + c / b.block_cols];
      if (to == DType::kF32)
        out32[at] = std::bit_cast<uint32_t>(v);
      else
        out16[at] = lanes::F32ToBf16(std::bit_cast<uint32_t>(v));
    }
  return Status::Ok();
}

}  // namespace weightport::kernels
