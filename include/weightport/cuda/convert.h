// Dtype conversions and fp8 e4m3 quantisation on the GPU, bit-identical to kernels::Convert and
// kernels::QuantizeE4m3 (the same bit manipulations, with explicitly rounded float operations), for
// weights that live in device memory.
//
// Every call works in every build: without CUDA compiled in (CudaBuildEnabled() false) each
// returns Unavailable saying so. Pointers are device pointers; `stream` is a cudaStream_t (nullptr:
// the default stream); the calls enqueue work on it and return without waiting.
//
// Thread-safety: as the CUDA runtime's: any thread, any stream.
#pragma once

#include <cstddef>
#include <cstdint>

#include "weightport/core/dtype.h"
#include "weightport/core/status.h"
#include "weightport/kernels/convert.h"

namespace weightport {

// kernels::CanConvert pairs (f32, bf16, f16); `count` elements.
Status CudaConvert(DType from, DType to, const void* src, void* dst, size_t count, void* stream = nullptr);

// A rows x cols tensor (f32 or bf16) to e4m3 bytes and fp32 scales (kernels::Fp8ScaleCount of them),
// per tensor or per 128x128 block, as kernels::QuantizeE4m3 does.
Status CudaQuantizeE4m3(DType from, const void* src, int64_t rows, int64_t cols, kernels::Fp8Scaling scaling,
                        uint8_t* dst, float* scales, void* stream = nullptr);

}  // namespace weightport
