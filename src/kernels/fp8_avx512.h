// e4m3fn quantisation of rows of 128-element blocks with AVX-512 intrinsics: the same rounding as
// lanes::F32ToE4m3, element for element, in 16 lanes of 32 bits narrowed once at the end. The
// auto-vectorised loops narrowed every intermediate select to bytes separately and ran at about
// 1.7 G elements/s; see PERFORMANCE.md. Used only where the CPU has AVX-512 F and BW.
#pragma once

#include <cstdint>

namespace weightport::kernels::avx512 {

// True when this build has the kernels, the CPU runs them and a test has not turned them off.
bool Available();
// Tests turn the kernels off to check the portable loops on the same machine.
void DisableForTesting(bool disabled);
// Quantises `blocks` consecutive 128-element blocks of one row, block bc divided by scales[bc].
void QuantizeRowF32(const void* in, int64_t blocks, const float* scales, uint8_t* out);
void QuantizeRowBf16(const void* in, int64_t blocks, const float* scales, uint8_t* out);

}  // namespace weightport::kernels::avx512
