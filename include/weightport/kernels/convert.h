// Dtype conversion kernels for weights in flight: elementwise conversions between f32, bf16 and
// f16, and f32/bf16 -> float8 e4m3fn with per-tensor or 128x128 block scales (the layout of
// DeepSeek-V3-style FP8 checkpoints: an f32 scale tensor beside each weight).
//
// Rounding is to nearest, ties to even, everywhere. NaN stays NaN (sign and the top payload bits
// kept, quieted for bf16 as float_bits does); infinities stay infinite where the target has them;
// f16 overflow becomes infinity as IEEE 754 says. e4m3fn has no infinities: magnitudes that round
// beyond its largest finite value (448) and infinities saturate to +-448 (satfinite), NaN becomes
// 0x7f | sign.
//
// The loops are written branch-free so the compiler vectorises them; on x86-64 each is built for
// AVX-512, AVX2 and the baseline, chosen at load time. Buffers need no alignment; source and
// destination must not overlap.
#pragma once

#include <cstddef>
#include <cstdint>

#include "weightport/core/dtype.h"
#include "weightport/core/status.h"

namespace weightport::kernels {

// f32 -> bf16 / f16, bf16 / f16 -> f32, f16 <-> bf16, and any of them to itself (a copy).
bool CanConvert(DType from, DType to);
// `count` elements. InvalidArgument naming both dtypes for an unsupported pair.
Status Convert(DType from, DType to, const void* src, void* dst, size_t count);

enum class Fp8Scaling : uint8_t { kBlock128, kPerTensor };  // value-initialised: block scales, the default
inline constexpr int64_t kFp8Block = 128;
inline constexpr float kE4m3Max = 448.0f;

// Scales for a rows x cols tensor: 1 per tensor, or ceil(rows/128) x ceil(cols/128) per block
// (row-major by block). 0 for a bad shape.
int64_t Fp8ScaleCount(int64_t rows, int64_t cols, Fp8Scaling scaling);

// Quantises a row-major rows x cols tensor of f32 or bf16 (a 1-D tensor is 1 x n; higher ranks
// fold their leading dimensions into rows). Each block's scale = amax / 448 over its finite
// values (1 when there are none or all are zero): the factor that dequantises, x ~ fp8 * scale
// (DeepSeek-V3's weight_scale_inv). Elements are divided by their scale, then rounded to e4m3fn.
// `scales` holds Fp8ScaleCount floats.
Status QuantizeE4m3(DType from, const void* src, int64_t rows, int64_t cols, Fp8Scaling scaling, uint8_t* dst,
                    float* scales);
// The inverse, to f32 or bf16: fp8 value x its block's scale, rounded to the target.
Status DequantizeE4m3(const uint8_t* src, const float* scales, int64_t rows, int64_t cols, Fp8Scaling scaling,
                      DType to, void* dst);

// One value, already scaled.
uint8_t F32ToE4m3(float f);
float E4m3ToF32(uint8_t v);

}  // namespace weightport::kernels
