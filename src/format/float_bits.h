// Scalar float conversions with round-to-nearest-even, used by the synthetic model generator.
// (The vectorised transform kernels live in kernels/.)
#pragma once

#include <bit>
#include <cstdint>

namespace weightport::float_bits {

// f32 -> bf16: round to nearest even; NaN stays a (quiet) NaN; overflow rounds to inf as IEEE does.
inline uint16_t F32ToBf16(float f) {
  uint32_t u = std::bit_cast<uint32_t>(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x0040u);
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}

inline float Bf16ToF32(uint16_t b) { return std::bit_cast<float>(static_cast<uint32_t>(b) << 16); }

// f32 -> f16: round to nearest even, overflow to inf, subnormals kept, NaN stays a quiet NaN.
// Bit-level so that it behaves the same with every compiler (clang 14 lacks _Float16 on x86).
inline uint16_t F32ToF16(float f) {
  const uint32_t u = std::bit_cast<uint32_t>(f);
  const uint16_t sign = static_cast<uint16_t>((u >> 16) & 0x8000u);
  const uint32_t abs = u & 0x7fffffffu;
  if (abs > 0x7f800000u) return sign | 0x7e00u | static_cast<uint16_t>((abs >> 13) & 0x3ffu);  // NaN
  if (abs >= 0x477ff000u) return sign | 0x7c00u;  // rounds to >= 65520: inf
  if (abs < 0x38800000u) {                        // below the smallest normal f16 (2^-14)
    if (abs < 0x33000000u) return sign;           // below half the smallest subnormal: +-0
    // Subnormal: shift the full 24-bit significand to f16's 2^-24 grid, rounding to nearest even.
    const uint32_t exp = abs >> 23, mant = (abs & 0x7fffffu) | 0x800000u;
    const uint32_t shift = 126 - exp;  // 14..24 for exponents in [102, 112]
    const uint32_t half = 1u << (shift - 1), rest = mant & ((1u << shift) - 1);
    uint32_t r = mant >> shift;
    if (rest > half || (rest == half && (r & 1u))) ++r;
    return sign | static_cast<uint16_t>(r);
  }
  // Normal: rebias the exponent (127 -> 15), keep 10 mantissa bits, round to nearest even; a
  // mantissa carry correctly bumps the exponent.
  const uint32_t rebased = abs - 0x38000000u;
  const uint32_t r = (rebased + 0xfffu + ((rebased >> 13) & 1u)) >> 13;
  return sign | static_cast<uint16_t>(r);
}

inline float F16ToF32(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu, mant = h & 0x3ffu;
  if (exp == 0x1f) return std::bit_cast<float>(sign | 0x7f800000u | (mant << 13));  // inf / NaN
  if (exp == 0) {
    if (mant == 0) return std::bit_cast<float>(sign);
    // Subnormal: normalise.
    int e = -1;
    do ++e, mant <<= 1;
    while ((mant & 0x400u) == 0);
    return std::bit_cast<float>(sign | ((112u - e) << 23) | ((mant & 0x3ffu) << 13));
  }
  return std::bit_cast<float>(sign | ((exp + 112u) << 23) | (mant << 13));
}

}  // namespace weightport::float_bits
