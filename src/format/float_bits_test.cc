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

}  // namespace
}  // namespace weightport::float_bits
