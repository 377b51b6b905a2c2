#include "kernels/fp8_avx512.h"

#include <atomic>

#include "weightport/kernels/convert.h"

namespace weightport::kernels::avx512 {
namespace {
std::atomic<bool> disabled_for_testing{false};
bool CpuHasAvx512();
}  // namespace

bool Available() { return !disabled_for_testing.load(std::memory_order_relaxed) && CpuHasAvx512(); }
void DisableForTesting(bool disabled) { disabled_for_testing.store(disabled); }

}  // namespace weightport::kernels::avx512

#if defined(__x86_64__) && defined(__GNUC__)
// GCC 12 warns about the intrinsics header's own deliberately undefined vectors.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>
#pragma GCC diagnostic pop

#define WP_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl")))

namespace weightport::kernels::avx512 {
namespace {

static_assert(kFp8Block % 16 == 0);

// lanes::F32ToE4m3 on 16 lanes; the codes stay in 32-bit lanes.
WP_AVX512 inline __m512i E4m3Codes(__m512 x) {
  const __m512i u = _mm512_castps_si512(x);
  const __m512i sign = _mm512_and_si512(_mm512_srli_epi32(u, 24), _mm512_set1_epi32(0x80));
  const __m512i abs = _mm512_and_si512(u, _mm512_set1_epi32(0x7fffffff));
  const __m512i rebased = _mm512_sub_epi32(abs, _mm512_set1_epi32(120 << 23));  // exponent 127 -> 7
  const __m512i odd = _mm512_and_si512(_mm512_srli_epi32(rebased, 20), _mm512_set1_epi32(1));
  const __m512i normal =
      _mm512_srli_epi32(_mm512_add_epi32(_mm512_add_epi32(rebased, _mm512_set1_epi32(0x7ffff)), odd), 20);
  // Subnormals: adding 2^14, whose ulp is e4m3's subnormal step, lets the FPU round to even.
  const __m512 sub_f = _mm512_add_ps(_mm512_castsi512_ps(abs), _mm512_set1_ps(16384.0f));
  const __m512i sub = _mm512_sub_epi32(_mm512_castps_si512(sub_f), _mm512_set1_epi32(0x46800000));
  __m512i r =
      _mm512_mask_blend_epi32(_mm512_cmplt_epu32_mask(abs, _mm512_set1_epi32(0x3c800000)), normal, sub);
  r = _mm512_mask_mov_epi32(r, _mm512_cmpge_epu32_mask(abs, _mm512_set1_epi32(0x43e00000)),
                            _mm512_set1_epi32(0x7e));  // >= 448 (and inf): saturate
  r = _mm512_mask_mov_epi32(r, _mm512_cmpgt_epu32_mask(abs, _mm512_set1_epi32(0x7f800000)),
                            _mm512_set1_epi32(0x7f));  // NaN
  return _mm512_or_si512(r, sign);
}

WP_AVX512 inline void Store16(uint8_t* out, __m512i codes) {
  _mm_storeu_si128(reinterpret_cast<__m128i*>(out), _mm512_cvtepi32_epi8(codes));
}

bool CpuHasAvx512() {
  static const bool has = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                          __builtin_cpu_supports("avx512vl");
  return has;
}

}  // namespace

WP_AVX512 void QuantizeRowF32(const void* in, int64_t blocks, const float* scales, uint8_t* out) {
  const auto* src = static_cast<const float*>(in);
  for (int64_t bc = 0; bc < blocks; ++bc) {
    const __m512 scale = _mm512_set1_ps(scales[bc]);
    for (int64_t i = bc * kFp8Block; i < (bc + 1) * kFp8Block; i += 16)
      Store16(out + i, E4m3Codes(_mm512_div_ps(_mm512_loadu_ps(src + i), scale)));
  }
}

WP_AVX512 void QuantizeRowBf16(const void* in, int64_t blocks, const float* scales, uint8_t* out) {
  const auto* src = static_cast<const uint16_t*>(in);
  for (int64_t bc = 0; bc < blocks; ++bc) {
    const __m512 scale = _mm512_set1_ps(scales[bc]);
    for (int64_t i = bc * kFp8Block; i < (bc + 1) * kFp8Block; i += 16) {
      const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i));
      const __m512 x = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
      Store16(out + i, E4m3Codes(_mm512_div_ps(x, scale)));
    }
  }
}

}  // namespace weightport::kernels::avx512

#else

namespace weightport::kernels::avx512 {
namespace {
bool CpuHasAvx512() { return false; }
}  // namespace
void QuantizeRowF32(const void*, int64_t, const float*, uint8_t*) {}
void QuantizeRowBf16(const void*, int64_t, const float*, uint8_t*) {}
}  // namespace weightport::kernels::avx512

#endif
