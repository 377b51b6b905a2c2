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

// f32 <-> f16 through the compiler's _Float16, which rounds to nearest even.
inline uint16_t F32ToF16(float f) { return std::bit_cast<uint16_t>(static_cast<_Float16>(f)); }
inline float F16ToF32(uint16_t h) { return static_cast<float>(std::bit_cast<_Float16>(h)); }

}  // namespace weightport::float_bits
