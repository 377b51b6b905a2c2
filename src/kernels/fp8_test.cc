#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "format/float_bits.h"
#include "kernels/fp8_avx512.h"
#include "weightport/kernels/convert.h"

namespace weightport::kernels {
namespace {

// The e4m3fn code nearest to f by brute force over every finite code, ties to the even code;
// saturating at +-448; NaN -> 0x7f | sign.
uint8_t NearestE4m3(float f) {
  const uint8_t sign = std::signbit(f) ? 0x80 : 0;
  if (std::isnan(f)) return sign | 0x7f;
  const double a = std::fabs(static_cast<double>(f));
  int best = 0;
  double best_err = INFINITY;
  for (int code = 0; code <= 0x7e; ++code) {
    const double err = std::fabs(static_cast<double>(E4m3ToF32(static_cast<uint8_t>(code))) - a);
    if (err < best_err || (err == best_err && (code & 1) == 0)) best = code, best_err = err;
  }
  return static_cast<uint8_t>(sign | best);
}

TEST(Fp8, TheTableDecodesEveryCode) {
  EXPECT_EQ(E4m3ToF32(0x7e), 448.0f);
  EXPECT_EQ(E4m3ToF32(0xfe), -448.0f);
  EXPECT_EQ(E4m3ToF32(0x08), 0x1p-6f);  // smallest normal
  EXPECT_EQ(E4m3ToF32(0x01), 0x1p-9f);  // smallest subnormal
  EXPECT_EQ(E4m3ToF32(0x38), 1.0f);
  EXPECT_TRUE(std::isnan(E4m3ToF32(0x7f)));
  EXPECT_TRUE(std::isnan(E4m3ToF32(0xff)));
}

TEST(Fp8, EveryBf16InputRoundsToTheNearestCode) {
  for (uint32_t b = 0; b < 65536; ++b) {
    const float f = float_bits::Bf16ToF32(static_cast<uint16_t>(b));
    ASSERT_EQ(F32ToE4m3(f), NearestE4m3(f)) << std::hex << b << " = " << f;
  }
}

TEST(Fp8, F32TiesAndSaturation) {
  // Halfway between 1.0 (0x38) and 1.125 (0x39): to the even code 0x38; just above: 0x39.
  EXPECT_EQ(F32ToE4m3(1.0625f), 0x38);
  EXPECT_EQ(F32ToE4m3(std::nextafter(1.0625f, 2.0f)), 0x39);
  EXPECT_EQ(F32ToE4m3(1.1875f), 0x3a);  // halfway 0x39 / 0x3a: even
  EXPECT_EQ(F32ToE4m3(447.9f), 0x7e);
  EXPECT_EQ(F32ToE4m3(464.0f), 0x7e);  // would round past 448: saturates
  EXPECT_EQ(F32ToE4m3(1e30f), 0x7e);
  EXPECT_EQ(F32ToE4m3(-INFINITY), 0xfe);
  EXPECT_EQ(F32ToE4m3(0x1p-10f), 0x00);   // half the smallest subnormal: ties to even 0
  EXPECT_EQ(F32ToE4m3(0x1.8p-9f), 0x02);  // 1.5 x smallest subnormal: ties to even 2
  std::mt19937 rng(7);
  for (int i = 0; i < 200000; ++i) {
    const float f = std::bit_cast<float>(static_cast<uint32_t>(rng()));
    ASSERT_EQ(F32ToE4m3(f), NearestE4m3(f)) << std::hexfloat << f;
  }
}

TEST(Fp8, BlockScalesAreAmaxOver448AndDequantiseWithinHalfAStep) {
  const int64_t rows = 300, cols = 260;  // 3 x 3 blocks, the last ones partial
  std::mt19937 rng(3);
  std::normal_distribution<float> normal(0.0f, 0.02f);
  std::vector<uint16_t> w(rows * cols);
  for (auto& x : w) x = float_bits::F32ToBf16(normal(rng));
  w[5 * cols + 200] = float_bits::F32ToBf16(3.0f);                // an outlier in block (0, 1)
  for (int64_t c = 0; c < 128; ++c) w[(256 + 3) * cols + c] = 0;  // block (2, 0) row of zeros
  const int64_t n_scales = Fp8ScaleCount(rows, cols, Fp8Scaling::kBlock128);
  ASSERT_EQ(n_scales, 9);
  std::vector<uint8_t> q(rows * cols);
  std::vector<float> scales(n_scales);
  ASSERT_TRUE(
      QuantizeE4m3(DType::kBF16, w.data(), rows, cols, Fp8Scaling::kBlock128, q.data(), scales.data()).ok());
  for (int64_t br = 0; br < 3; ++br)
    for (int64_t bc = 0; bc < 3; ++bc) {
      float amax = 0;
      for (int64_t r = br * 128; r < std::min<int64_t>(rows, br * 128 + 128); ++r)
        for (int64_t c = bc * 128; c < std::min<int64_t>(cols, bc * 128 + 128); ++c)
          amax = std::max(amax, std::fabs(float_bits::Bf16ToF32(w[r * cols + c])));
      EXPECT_EQ(scales[br * 3 + bc], amax / 448.0f) << br << "," << bc;
    }
  EXPECT_EQ(scales[1], 3.0f / 448.0f);
  std::vector<float> back(rows * cols);
  ASSERT_TRUE(
      DequantizeE4m3(q.data(), scales.data(), rows, cols, Fp8Scaling::kBlock128, DType::kF32, back.data())
          .ok());
  for (int64_t i = 0; i < rows * cols; ++i) {
    const float x = float_bits::Bf16ToF32(w[i]);
    const float s = scales[(i / cols / 128) * 3 + (i % cols) / 128];
    // Every element is x / s rounded: the error is at most half a step of e4m3 at that magnitude.
    const float scaled = std::fabs(x / s);
    const float step = scaled < 0x1p-6f ? 0x1p-9f : std::ldexp(1.0f, std::ilogb(scaled) - 3);
    ASSERT_LE(std::fabs(back[i] - x), 0.5f * step * s * 1.0001f) << i;
  }
}

// The row kernels (AVX-512 intrinsics where the CPU has them, else the auto-vectorised rows, else
// the per-segment loops) give, element for element, F32ToE4m3(x / scale of x's block): every bf16
// input, and random f32 bit patterns, with 128x128 blocks and a partial block at each row's end, and
// with one scale for the tensor (amax / 448 over its finite values), which goes through the same rows.
TEST(Fp8, RowKernelsRoundEveryElementAsTheScalarCodeDoes) {
  const int64_t cols = 128 * 4 + 32, rows = (65536 + cols - 1) / cols;  // every bf16 value once
  std::vector<uint16_t> w16(rows * cols);
  for (size_t i = 0; i < w16.size(); ++i) w16[i] = static_cast<uint16_t>(i * 40503u);  // odd: a permutation
  std::mt19937 rng(11);
  std::vector<uint32_t> w32(rows * cols);
  for (auto& x : w32) x = static_cast<uint32_t>(rng()) >> (rng() % 4 == 0 ? 3 : 0);  // also small magnitudes
  for (const Fp8Scaling scaling : {Fp8Scaling::kBlock128, Fp8Scaling::kPerTensor})
    for (const bool intrinsics : {true, false})
      for (DType from : {DType::kBF16, DType::kF32}) {
        const bool per_tensor = scaling == Fp8Scaling::kPerTensor;
        SCOPED_TRACE(std::string(DTypeName(from)) + (intrinsics ? "" : ", portable loops") +
                     (per_tensor ? ", per tensor" : ""));
        avx512::DisableForTesting(!intrinsics);
        std::vector<uint8_t> q(rows * cols);
        std::vector<float> scales(Fp8ScaleCount(rows, cols, scaling));
        const void* src = from == DType::kBF16 ? static_cast<const void*>(w16.data()) : w32.data();
        ASSERT_TRUE(QuantizeE4m3(from, src, rows, cols, scaling, q.data(), scales.data()).ok());
        auto value = [&](int64_t i) {
          return from == DType::kBF16 ? float_bits::Bf16ToF32(w16[i]) : std::bit_cast<float>(w32[i]);
        };
        if (per_tensor) {
          ASSERT_EQ(scales.size(), 1u);
          float amax = 0;
          for (int64_t i = 0; i < rows * cols; ++i)
            if (std::isfinite(value(i))) amax = std::max(amax, std::fabs(value(i)));
          EXPECT_EQ(scales[0], std::max(amax / 448.0f, std::numeric_limits<float>::min()));
        }
        const int64_t blocks_per_row = (cols + 127) / 128;
        for (int64_t i = 0; i < rows * cols; ++i) {
          const float s =
              per_tensor ? scales[0] : scales[(i / cols / 128) * blocks_per_row + (i % cols) / 128];
          ASSERT_EQ(q[i], F32ToE4m3(value(i) / s))
              << "element " << i << " = " << std::hexfloat << value(i) << " / " << s;
        }
      }
  avx512::DisableForTesting(false);
}

TEST(Fp8, PerTensorScaleZerosAndErrors) {
  std::vector<float> w = {0.0f, -0.0f, 0.0f};
  std::vector<uint8_t> q(3);
  float scale = 0;
  ASSERT_TRUE(QuantizeE4m3(DType::kF32, w.data(), 1, 3, Fp8Scaling::kPerTensor, q.data(), &scale).ok());
  EXPECT_EQ(scale, 1.0f);  // nothing to scale: 1
  EXPECT_EQ(q, (std::vector<uint8_t>{0x00, 0x80, 0x00}));
  w = {INFINITY, 2.0f, NAN};
  ASSERT_TRUE(QuantizeE4m3(DType::kF32, w.data(), 1, 3, Fp8Scaling::kPerTensor, q.data(), &scale).ok());
  EXPECT_EQ(scale, 2.0f / 448.0f);  // amax over finite values
  EXPECT_EQ(q[0], 0x7e);            // inf saturates
  EXPECT_EQ(q[1], 0x7e);
  EXPECT_EQ(q[2] & 0x7f, 0x7f);  // NaN
  // An amax so small that amax / 448 underflows: the scale stays a normal float, nothing is NaN.
  w = {0.0f, 1e-45f, -1e-45f};
  ASSERT_TRUE(QuantizeE4m3(DType::kF32, w.data(), 1, 3, Fp8Scaling::kPerTensor, q.data(), &scale).ok());
  EXPECT_GT(scale, 0.0f);
  for (uint8_t code : q) EXPECT_NE(code & 0x7f, 0x7f);
  EXPECT_EQ(Fp8ScaleCount(0, 3, Fp8Scaling::kBlock128), 0);
  EXPECT_FALSE(QuantizeE4m3(DType::kF32, w.data(), int64_t{1} << 40, int64_t{1} << 40, Fp8Scaling::kPerTensor,
                            q.data(), &scale)
                   .ok());
  EXPECT_FALSE(QuantizeE4m3(DType::kF32, nullptr, 1, 3, Fp8Scaling::kPerTensor, q.data(), &scale).ok());
  EXPECT_FALSE(QuantizeE4m3(DType::kF16, w.data(), 1, 3, Fp8Scaling::kPerTensor, q.data(), &scale).ok());
  EXPECT_FALSE(QuantizeE4m3(DType::kF32, w.data(), 0, 3, Fp8Scaling::kPerTensor, q.data(), &scale).ok());
  EXPECT_FALSE(DequantizeE4m3(q.data(), &scale, 1, 3, Fp8Scaling::kPerTensor, DType::kF16, w.data()).ok());
}

}  // namespace
}  // namespace weightport::kernels
