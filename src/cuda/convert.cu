// The GPU conversions: the bit manipulations of src/kernels/convert_lanes.h, with every float
// operation the CPU code leaves to the FPU written as an explicitly rounded intrinsic (__fadd_rn,
// __fdiv_rn), so nvcc can neither contract nor approximate it and the bytes equal the CPU's.
#include <cuda_runtime.h>

#include <cfloat>
#include <cstdint>
#include <string>

#include "weightport/cuda/convert.h"

namespace weightport {
namespace {

__device__ __forceinline__ uint32_t Select(bool cond, uint32_t a, uint32_t b) { return cond ? a : b; }

__device__ __forceinline__ uint16_t F32ToBf16(uint32_t u) {
  const uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
  const uint32_t nan = (u >> 16) | 0x40u;
  return static_cast<uint16_t>(Select((u & 0x7fffffffu) > 0x7f800000u, nan, rounded));
}

__device__ __forceinline__ uint32_t Bf16ToF32(uint16_t b) { return static_cast<uint32_t>(b) << 16; }

__device__ __forceinline__ uint16_t F32ToF16(uint32_t u) {
  const uint32_t sign = (u >> 16) & 0x8000u;
  const uint32_t abs = u & 0x7fffffffu;
  const uint32_t rebased = abs - 0x38000000u;
  const uint32_t normal = (rebased + 0xfffu + ((rebased >> 13) & 1u)) >> 13;
  const uint32_t sub = __float_as_uint(__fadd_rn(__uint_as_float(abs), 0.5f)) - 0x3f000000u;
  uint32_t r = Select(abs < 0x38800000u, sub, normal);
  r = Select(abs >= 0x477ff000u, 0x7c00u, r);
  r = Select(abs > 0x7f800000u, 0x7e00u | ((abs >> 13) & 0x3ffu), r);
  return static_cast<uint16_t>(sign | r);
}

__device__ __forceinline__ uint32_t F16ToF32(uint16_t h) {
  const uint32_t shifted = (static_cast<uint32_t>(h) & 0x7fffu) << 13;
  const uint32_t exp = shifted & 0x0f800000u;
  const uint32_t normal = shifted + ((127u - 15u) << 23);
  const uint32_t special = normal + ((128u - 16u) << 23);
  const uint32_t sub =
      __float_as_uint(__fsub_rn(__uint_as_float(normal + (1u << 23)), __uint_as_float(113u << 23)));
  const uint32_t r = Select(exp == 0x0f800000u, special, Select(exp == 0, sub, normal));
  return r | ((static_cast<uint32_t>(h) & 0x8000u) << 16);
}

__device__ __forceinline__ uint8_t F32ToE4m3(uint32_t u) {
  const uint32_t sign = (u >> 24) & 0x80u;
  const uint32_t abs = u & 0x7fffffffu;
  const uint32_t rebased = abs - (120u << 23);
  const uint32_t normal = (rebased + 0x7ffffu + ((rebased >> 20) & 1u)) >> 20;
  const uint32_t sub = __float_as_uint(__fadd_rn(__uint_as_float(abs), 16384.0f)) - 0x46800000u;
  uint32_t r = Select(abs < 0x3c800000u, sub, normal);
  r = Select(abs >= 0x43e00000u, 0x7eu, r);
  r = Select(abs > 0x7f800000u, 0x7fu, r);
  return static_cast<uint8_t>(sign | r);
}

enum class Pair { kF32ToBf16, kF32ToF16, kBf16ToF32, kF16ToF32, kF16ToBf16, kBf16ToF16 };

__global__ void ConvertKernel(Pair pair, const void* src, void* dst, size_t n) {
  const auto* in16 = static_cast<const uint16_t*>(src);
  const auto* in32 = static_cast<const uint32_t*>(src);
  auto* out16 = static_cast<uint16_t*>(dst);
  auto* out32 = static_cast<uint32_t*>(dst);
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    switch (pair) {
      case Pair::kF32ToBf16:
        out16[i] = F32ToBf16(in32[i]);
        break;
      case Pair::kF32ToF16:
        out16[i] = F32ToF16(in32[i]);
        break;
      case Pair::kBf16ToF32:
        out32[i] = Bf16ToF32(in16[i]);
        break;
      case Pair::kF16ToF32:
        out32[i] = F16ToF32(in16[i]);
        break;
      case Pair::kF16ToBf16:
        out16[i] = F32ToBf16(F16ToF32(in16[i]));
        break;
      case Pair::kBf16ToF16:
        out16[i] = F32ToF16(Bf16ToF32(in16[i]));
        break;
    }
  }
}

// Quantisation regions: a CUDA block covers kRegionRows rows of at most `region_cols` columns, all
// within one scale block (block scaling: one 128 x 128 block; per tensor: a strip of the tensor).
constexpr int64_t kRegionRows = 128;
constexpr int kThreads = 256;

struct Geometry {
  int64_t rows, cols, block_rows, block_cols, count_cols, region_cols;
  __device__ int64_t ScaleIndex(int64_t r, int64_t c) const {
    return (r / block_rows) * count_cols + c / block_cols;
  }
};

__device__ __forceinline__ uint32_t LoadF32Bits(DType from, const void* src, int64_t at) {
  return from == DType::kF32 ? static_cast<const uint32_t*>(src)[at]
                             : Bf16ToF32(static_cast<const uint16_t*>(src)[at]);
}

// The largest finite |x| of each scale block, as bits, into `amax` (zeroed first).
__global__ void AmaxKernel(DType from, const void* src, Geometry g, uint32_t* amax) {
  __shared__ uint32_t block_max;
  if (threadIdx.x == 0) block_max = 0;
  __syncthreads();
  const int64_t r0 = blockIdx.y * kRegionRows, c0 = blockIdx.x * g.region_cols;
  const int64_t r1 = min(g.rows, r0 + kRegionRows), c1 = min(g.cols, c0 + g.region_cols);
  const int64_t width = c1 - c0;
  uint32_t m = 0;
  for (int64_t i = threadIdx.x; i < (r1 - r0) * width; i += blockDim.x) {
    const uint32_t abs = LoadF32Bits(from, src, (r0 + i / width) * g.cols + c0 + i % width) & 0x7fffffffu;
    m = max(m, Select(abs <= 0x7f7fffffu, abs, 0u));
  }
  atomicMax(&block_max, m);
  __syncthreads();
  if (threadIdx.x == 0) atomicMax(&amax[g.ScaleIndex(r0, c0)], block_max);
}

// In place: the amax bits become the scale, as kernels::QuantizeE4m3 computes it.
__global__ void ScaleKernel(float* scales, int64_t count) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i >= count) return;
  const float m = __uint_as_float(reinterpret_cast<uint32_t*>(scales)[i]);
  scales[i] = m > 0 ? fmaxf(__fdiv_rn(m, kernels::kE4m3Max), FLT_MIN) : 1.0f;
}

__global__ void QuantizeKernel(DType from, const void* src, Geometry g, const float* scales, uint8_t* dst) {
  const int64_t r0 = blockIdx.y * kRegionRows, c0 = blockIdx.x * g.region_cols;
  const int64_t r1 = min(g.rows, r0 + kRegionRows), c1 = min(g.cols, c0 + g.region_cols);
  const int64_t width = c1 - c0;
  const float scale = scales[g.ScaleIndex(r0, c0)];
  for (int64_t i = threadIdx.x; i < (r1 - r0) * width; i += blockDim.x) {
    const int64_t at = (r0 + i / width) * g.cols + c0 + i % width;
    dst[at] = F32ToE4m3(__float_as_uint(__fdiv_rn(__uint_as_float(LoadF32Bits(from, src, at)), scale)));
  }
}

Status Launched(const char* what) {
  const cudaError_t err = cudaGetLastError();
  if (err == cudaSuccess) return Status::Ok();
  return Unavailable(std::string("CUDA: launching ") + what + ": " + cudaGetErrorString(err));
}

}  // namespace

Status CudaConvert(DType from, DType to, const void* src, void* dst, size_t count, void* stream) {
  if (!kernels::CanConvert(from, to))
    return InvalidArgument("no conversion from " + std::string(DTypeName(from)) + " to " +
                           std::string(DTypeName(to)));
  if (count == 0) return Status::Ok();
  if (src == nullptr || dst == nullptr) return InvalidArgument("conversion of a null buffer");
  auto s = static_cast<cudaStream_t>(stream);
  if (from == to) {
    const cudaError_t err = cudaMemcpyAsync(dst, src, count * DTypeSize(from), cudaMemcpyDeviceToDevice, s);
    if (err != cudaSuccess) return Unavailable(std::string("CUDA: device copy: ") + cudaGetErrorString(err));
    return Status::Ok();
  }
  Pair pair = Pair::kF32ToBf16;
  if (from == DType::kF32 && to == DType::kF16) pair = Pair::kF32ToF16;
  if (from == DType::kBF16 && to == DType::kF32) pair = Pair::kBf16ToF32;
  if (from == DType::kF16 && to == DType::kF32) pair = Pair::kF16ToF32;
  if (from == DType::kF16 && to == DType::kBF16) pair = Pair::kF16ToBf16;
  if (from == DType::kBF16 && to == DType::kF16) pair = Pair::kBf16ToF16;
  const size_t blocks = std::min<size_t>((count + kThreads - 1) / kThreads, 65535u * 16u);
  ConvertKernel<<<static_cast<unsigned>(blocks), kThreads, 0, s>>>(pair, src, dst, count);
  return Launched("a conversion");
}

Status CudaQuantizeE4m3(DType from, const void* src, int64_t rows, int64_t cols, kernels::Fp8Scaling scaling,
                        uint8_t* dst, float* scales, void* stream) {
  if (from != DType::kF32 && from != DType::kBF16)
    return InvalidArgument("fp8: quantises f32 or bf16, not " + std::string(DTypeName(from)));
  if (rows < 1 || cols < 1)
    return InvalidArgument("fp8: a " + std::to_string(rows) + " x " + std::to_string(cols) +
                           " tensor has no elements to scale");
  if (src == nullptr || dst == nullptr || scales == nullptr) return InvalidArgument("fp8: a null buffer");
  const bool block = scaling == kernels::Fp8Scaling::kBlock128;
  Geometry g{rows, cols, block ? kernels::kFp8Block : rows, block ? kernels::kFp8Block : cols, 0, 0};
  g.count_cols = (cols + g.block_cols - 1) / g.block_cols;
  g.region_cols = block ? kernels::kFp8Block : std::min<int64_t>(cols, 4096);
  const int64_t count = kernels::Fp8ScaleCount(rows, cols, scaling);
  const dim3 grid(static_cast<unsigned>((cols + g.region_cols - 1) / g.region_cols),
                  static_cast<unsigned>((rows + kRegionRows - 1) / kRegionRows));
  if (grid.y > 65535u)
    return InvalidArgument("fp8: " + std::to_string(rows) + " rows are too many for one launch");
  auto s = static_cast<cudaStream_t>(stream);
  cudaError_t err = cudaMemsetAsync(scales, 0, count * sizeof(float), s);
  if (err != cudaSuccess)
    return Unavailable(std::string("CUDA: clearing scales: ") + cudaGetErrorString(err));
  AmaxKernel<<<grid, kThreads, 0, s>>>(from, src, g, reinterpret_cast<uint32_t*>(scales));
  WP_RETURN_IF_ERROR(Launched("the block maxima"));
  ScaleKernel<<<static_cast<unsigned>((count + kThreads - 1) / kThreads), kThreads, 0, s>>>(scales, count);
  WP_RETURN_IF_ERROR(Launched("the scales"));
  QuantizeKernel<<<grid, kThreads, 0, s>>>(from, src, g, scales, dst);
  return Launched("the quantisation");
}

}  // namespace weightport
