// Per-element conversions shared by the kernels, written without branches (selects only) so a
// loop over them vectorises. Bit patterns in, bit patterns out.
#pragma once

#include <bit>
#include <cstdint>

// Each kernel loop is compiled for AVX-512 (x86-64-v4), AVX2 and the baseline; the loader picks
// one for the CPU it runs on (GNU ifunc).
#if defined(__x86_64__) && defined(__GNUC__) && !defined(WEIGHTPORT_NO_TARGET_CLONES)
#define WP_VECTOR_CLONES __attribute__((target_clones("arch=x86-64-v4", "avx2", "default")))
#else
#define WP_VECTOR_CLONES
#endif

namespace weightport::kernels::lanes {

// Unaligned, aliasing-safe views of raw bytes.
typedef uint32_t u32 __attribute__((may_alias, aligned(1)));
typedef uint16_t u16 __attribute__((may_alias, aligned(1)));

// cond ? a : b as masks, which every vectoriser takes (nested ?: of computed values may become
// branches, which it does not).
inline uint32_t Select(bool cond, uint32_t a, uint32_t b) {
  const uint32_t mask = 0u - static_cast<uint32_t>(cond);
  return (a & mask) | (b & ~mask);
}

inline uint16_t F32ToBf16(uint32_t u) {
  const uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
  const uint32_t nan = (u >> 16) | 0x40u;
  return static_cast<uint16_t>(Select((u & 0x7fffffffu) > 0x7f800000u, nan, rounded));
}

inline uint32_t Bf16ToF32(uint16_t b) { return static_cast<uint32_t>(b) << 16; }

// Subnormals by adding a power of two whose ulp is the target's subnormal step: the FPU rounds
// to nearest even for us.
inline uint16_t F32ToF16(uint32_t u) {
  const uint32_t sign = (u >> 16) & 0x8000u;
  const uint32_t abs = u & 0x7fffffffu;
  const uint32_t rebased = abs - 0x38000000u;  // exponent 127 -> 15
  const uint32_t normal = (rebased + 0xfffu + ((rebased >> 13) & 1u)) >> 13;
  const float sub_f = std::bit_cast<float>(abs) + 0.5f;  // ulp(0.5) = 2^-24, f16's subnormal step
  const uint32_t sub = std::bit_cast<uint32_t>(sub_f) - 0x3f000000u;
  uint32_t r = Select(abs < 0x38800000u, sub, normal);                 // below 2^-14: subnormal
  r = Select(abs >= 0x477ff000u, 0x7c00u, r);                          // rounds to >= 65520: inf
  r = Select(abs > 0x7f800000u, 0x7e00u | ((abs >> 13) & 0x3ffu), r);  // NaN
  return static_cast<uint16_t>(sign | r);
}

inline uint32_t F16ToF32(uint16_t h) {
  const uint32_t shifted = (static_cast<uint32_t>(h) & 0x7fffu) << 13;
  const uint32_t exp = shifted & 0x0f800000u;
  const uint32_t normal = shifted + ((127u - 15u) << 23);
  const uint32_t special = normal + ((128u - 16u) << 23);  // inf / NaN: exponent all ones
  // Subnormal: 2^-14 x mantissa, renormalised by the FPU.
  const float sub_f = std::bit_cast<float>(normal + (1u << 23)) - std::bit_cast<float>(113u << 23);
  const uint32_t sub = std::bit_cast<uint32_t>(sub_f);
  const uint32_t r = Select(exp == 0x0f800000u, special, Select(exp == 0, sub, normal));
  return r | ((static_cast<uint32_t>(h) & 0x8000u) << 16);
}

// e4m3fn: bias 7, 3 mantissa bits, no infinities, 0x7f = NaN, largest finite 0x7e = 448.
inline uint8_t F32ToE4m3(uint32_t u) {
  const uint32_t sign = (u >> 24) & 0x80u;
  const uint32_t abs = u & 0x7fffffffu;
  const uint32_t rebased = abs - (120u << 23);  // exponent 127 -> 7
  const uint32_t normal = (rebased + 0x7ffffu + ((rebased >> 20) & 1u)) >> 20;
  const float sub_f = std::bit_cast<float>(abs) + 16384.0f;  // ulp(2^14) = 2^-9, e4m3's subnormal step
  const uint32_t sub = std::bit_cast<uint32_t>(sub_f) - 0x46800000u;
  uint32_t r = Select(abs < 0x3c800000u, sub, normal);  // below 2^-6: subnormal
  r = Select(abs >= 0x43e00000u, 0x7eu, r);             // >= 448 (and inf): saturate
  r = Select(abs > 0x7f800000u, 0x7fu, r);              // NaN
  return static_cast<uint8_t>(sign | r);
}

}  // namespace weightport::kernels::lanes
