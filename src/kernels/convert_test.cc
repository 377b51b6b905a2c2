#include "weightport/kernels/convert.h"

#include <gtest/gtest.h>

#include <bit>
#include <cstring>
#include <random>
#include <vector>

#include "format/float_bits.h"

namespace weightport::kernels {
namespace {

// Every 16-bit pattern, in an odd-sized buffer at an odd address so tails and unaligned loads run.
std::vector<uint16_t> All16() {
  std::vector<uint16_t> v(65536);
  for (uint32_t i = 0; i < 65536; ++i) v[i] = static_cast<uint16_t>(i);
  return v;
}

template <class Out, class In>
std::vector<Out> Converted(DType from, DType to, const std::vector<In>& in) {
  std::vector<std::byte> src(in.size() * sizeof(In) + 1), dst(in.size() * sizeof(Out) + 1);
  std::memcpy(src.data() + 1, in.data(), in.size() * sizeof(In));
  Status st = Convert(from, to, src.data() + 1, dst.data() + 1, in.size());
  EXPECT_TRUE(st.ok()) << st.ToString();
  std::vector<Out> out(in.size());
  std::memcpy(out.data(), dst.data() + 1, out.size() * sizeof(Out));
  return out;
}

TEST(Convert, EverySixteenBitInputMatchesTheScalarReference) {
  const std::vector<uint16_t> all = All16();
  const auto f16_to_f32 = Converted<uint32_t>(DType::kF16, DType::kF32, all);
  const auto bf16_to_f32 = Converted<uint32_t>(DType::kBF16, DType::kF32, all);
  const auto f16_to_bf16 = Converted<uint16_t>(DType::kF16, DType::kBF16, all);
  const auto bf16_to_f16 = Converted<uint16_t>(DType::kBF16, DType::kF16, all);
  for (uint32_t i = 0; i < 65536; ++i) {
    const auto h = static_cast<uint16_t>(i);
    ASSERT_EQ(f16_to_f32[i], std::bit_cast<uint32_t>(float_bits::F16ToF32(h))) << std::hex << i;
    ASSERT_EQ(bf16_to_f32[i], std::bit_cast<uint32_t>(float_bits::Bf16ToF32(h))) << std::hex << i;
    ASSERT_EQ(f16_to_bf16[i], float_bits::F32ToBf16(float_bits::F16ToF32(h))) << std::hex << i;
    ASSERT_EQ(bf16_to_f16[i], float_bits::F32ToF16(float_bits::Bf16ToF32(h))) << std::hex << i;
  }
}

TEST(Convert, F32InputsRoundToNearestEvenAtEveryBoundary) {
  // Every sign/exponent/high-mantissa prefix, with the low bits that decide rounding for bf16
  // (16 bits) and f16 (13 bits): zero, just below, at and just above half, and all ones.
  std::vector<uint32_t> in;
  for (uint32_t hi = 0; hi < (1u << 19); ++hi)
    for (uint32_t lo : {0x0u, 0x1u, 0xfffu, 0x1000u, 0x1001u, 0x1fffu}) in.push_back((hi << 13) | lo);
  for (uint32_t hi = 0; hi < (1u << 16); ++hi)
    for (uint32_t lo : {0x7fffu, 0x8000u, 0x8001u, 0xffffu}) in.push_back((hi << 16) | lo);
  const auto bf16 = Converted<uint16_t>(DType::kF32, DType::kBF16, in);
  const auto f16 = Converted<uint16_t>(DType::kF32, DType::kF16, in);
  for (size_t i = 0; i < in.size(); ++i) {
    const float f = std::bit_cast<float>(in[i]);
    ASSERT_EQ(bf16[i], float_bits::F32ToBf16(f)) << std::hex << in[i];
    ASSERT_EQ(f16[i], float_bits::F32ToF16(f)) << std::hex << in[i];
  }
  // Spot checks against IEEE: 65520 is the first f32 that rounds to f16 inf; 2^-25 rounds to 0.
  EXPECT_EQ(
      Converted<uint16_t>(DType::kF32, DType::kF16,
                          std::vector<float>{65504.f, 65519.f, 65520.f, 0x1p-25f, 0x1.000002p-25f, -0.0f}),
      (std::vector<uint16_t>{0x7bff, 0x7bff, 0x7c00, 0x0000, 0x0001, 0x8000}));
}

TEST(Convert, CopiesUnsupportedPairsAndEmptyInput) {
  std::vector<uint16_t> in = {1, 2, 3}, out(3);
  ASSERT_TRUE(Convert(DType::kBF16, DType::kBF16, in.data(), out.data(), 3).ok());
  EXPECT_EQ(out, in);
  Status st = Convert(DType::kI32, DType::kF32, in.data(), out.data(), 1);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("no conversion from i32 to f32"), std::string::npos) << st.ToString();
  EXPECT_FALSE(CanConvert(DType::kF8E4M3, DType::kBF16));
  EXPECT_TRUE(Convert(DType::kF32, DType::kBF16, nullptr, nullptr, 0).ok());
  EXPECT_FALSE(Convert(DType::kF32, DType::kBF16, nullptr, out.data(), 1).ok());
}

}  // namespace
}  // namespace weightport::kernels
