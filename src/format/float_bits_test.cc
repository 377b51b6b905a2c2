#include "float_bits.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>

namespace weightport::float_bits {
namespace {

TEST(FloatBitsTest, Bf16RoundsToNearestEven) {
  EXPECT_EQ(F32ToBf16(1.0f), 0x3f80);
  // 1 + 2^-8 is exactly halfway between bf16 1.0 and 1.0078125: ties to even (1.0).
  EXPECT_EQ(F32ToBf16(std::bit_cast<float>(0x3f808000u)), 0x3f80);
  // Halfway above an odd mantissa rounds up to even.
  EXPECT_EQ(F32ToBf16(std::bit_cast<float>(0x3f818000u)), 0x3f82);
  EXPECT_EQ(F32ToBf16(std::bit_cast<float>(0x3f808001u)), 0x3f81);
  EXPECT_EQ(F32ToBf16(std::numeric_limits<float>::infinity()), 0x7f80);
  EXPECT_EQ(F32ToBf16(std::numeric_limits<float>::max()), 0x7f80);  // overflows to inf
  EXPECT_TRUE(std::isnan(Bf16ToF32(F32ToBf16(std::numeric_limits<float>::quiet_NaN()))));
  // A NaN whose payload sits only in the low bits must not become inf.
  EXPECT_TRUE(std::isnan(Bf16ToF32(F32ToBf16(std::bit_cast<float>(0x7f800001u)))));
}

TEST(FloatBitsTest, F16RoundTripsExactlyRepresentableValues) {
  for (float v : {0.0f, 1.0f, -2.5f, 65504.0f, 0.000061035156f}) EXPECT_EQ(F16ToF32(F32ToF16(v)), v);
  EXPECT_EQ(F32ToF16(1.0f), 0x3c00);
  EXPECT_TRUE(std::isinf(F16ToF32(F32ToF16(1e6f))));
}

// Every f16 value converts to f32 and back unchanged (NaN payloads kept quiet).
TEST(FloatBitsTest, F16ExhaustiveRoundTrip) {
  for (uint32_t h = 0; h < 0x10000; ++h) {
    const float f = F16ToF32(static_cast<uint16_t>(h));
    if (std::isnan(f)) {
      EXPECT_TRUE(std::isnan(F16ToF32(F32ToF16(f)))) << h;
      continue;
    }
    EXPECT_EQ(F32ToF16(f), h) << std::hex << h;
  }
}

// Rounding: compare with round-to-nearest-even computed in double over f16 neighbours.
TEST(FloatBitsTest, F16RoundsToNearestEvenAgainstReference) {
  auto reference = [](float f) -> uint16_t {
    // Find the two f16 neighbours by search over all positive finite f16 values.
    const float a = std::fabs(f);
    uint16_t best = 0;
    double best_err = 1e300;
    for (uint32_t h = 0; h < 0x7c00; ++h) {
      const double err = std::fabs(static_cast<double>(F16ToF32(static_cast<uint16_t>(h))) - a);
      if (err < best_err || (err == best_err && (h & 1) == 0))
        best_err = err, best = static_cast<uint16_t>(h);
    }
    if (a >= 65520.0f) best = 0x7c00;
    return static_cast<uint16_t>(best | (std::signbit(f) ? 0x8000 : 0));
  };
  uint64_t state = 12345;
  for (int i = 0; i < 300; ++i) {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    // Random f32 across the f16 range, including subnormals and halfway cases.
    const uint32_t bits = static_cast<uint32_t>(state >> 32);
    float f = std::bit_cast<float>((bits & 0x807fffffu) | ((100u + (bits >> 8) % 45u) << 23));
    if (i % 3 == 0)
      f = std::bit_cast<float>((std::bit_cast<uint32_t>(f) & 0xffffe000u) | 0x1000u);  // exact tie
    EXPECT_EQ(F32ToF16(f), reference(f)) << f;
  }
}

}  // namespace
}  // namespace weightport::float_bits
