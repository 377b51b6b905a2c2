// The GPU conversions against the CPU kernels, byte for byte. Skipped, with the reason, where CUDA
// is not compiled in or no GPU is visible.
#include "weightport/cuda/convert.h"

#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <vector>

#include "cuda/cuda_test_util.h"
#include "weightport/cuda/device_buffer.h"
#include "weightport/cuda/device_query.h"

namespace weightport {
namespace {

class CudaConvertTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (const std::string why = cuda_test::NoGpuReason(); !why.empty()) GTEST_SKIP() << why;
  }

  // `in` through CudaConvert, back on the host.
  std::vector<std::byte> OnGpu(DType from, DType to, const std::vector<std::byte>& in) {
    const size_t n = in.size() / DTypeSize(from);
    auto src = DeviceBuffer::Allocate(in.size());
    auto dst = DeviceBuffer::Allocate(n * DTypeSize(to));
    EXPECT_TRUE(src.ok() && dst.ok());
    EXPECT_TRUE(src->CopyFrom(in).ok());
    EXPECT_TRUE(CudaConvert(from, to, src->data(), dst->data(), n).ok());
    EXPECT_TRUE(CudaSynchronize().ok());
    std::vector<std::byte> out(n * DTypeSize(to));
    EXPECT_TRUE(dst->CopyTo(out).ok());
    return out;
  }

  static std::vector<std::byte> OnCpu(DType from, DType to, const std::vector<std::byte>& in) {
    const size_t n = in.size() / DTypeSize(from);
    std::vector<std::byte> out(n * DTypeSize(to));
    EXPECT_TRUE(kernels::Convert(from, to, in.data(), out.data(), n).ok());
    return out;
  }
};

std::vector<std::byte> Every16BitPattern() {
  std::vector<std::byte> out(2 * 65536);
  for (uint32_t v = 0; v < 65536; ++v) std::memcpy(out.data() + 2 * v, &v, 2);
  return out;
}

// 2^24 f32 patterns: every exponent and sign with mantissas that cover each rounding case (the low
// bits, the half-way points, the top), plus the specials.
std::vector<std::byte> F32Patterns() {
  std::vector<uint32_t> v;
  for (uint32_t hi = 0; hi < 512; ++hi)  // sign and exponent
    for (uint32_t m = 0; m < 32768; ++m) {
      const uint32_t mantissa = (m & 0x7f) | ((m >> 7) << 16) | ((m * 2654435761u) & 0xff80u);
      v.push_back((hi << 23) | (mantissa & 0x7fffffu));
    }
  std::vector<std::byte> out(4 * v.size());
  std::memcpy(out.data(), v.data(), out.size());
  return out;
}

TEST_F(CudaConvertTest, Every16BitInputMatchesTheCpu) {
  const std::vector<std::byte> in = Every16BitPattern();
  for (auto [from, to] : {std::pair{DType::kBF16, DType::kF32},
                          {DType::kF16, DType::kF32},
                          {DType::kBF16, DType::kF16},
                          {DType::kF16, DType::kBF16}}) {
    SCOPED_TRACE(std::string(DTypeName(from)) + " -> " + std::string(DTypeName(to)));
    EXPECT_TRUE(OnGpu(from, to, in) == OnCpu(from, to, in));
  }
}

TEST_F(CudaConvertTest, F32InputsMatchTheCpu) {
  const std::vector<std::byte> in = F32Patterns();
  for (DType to : {DType::kBF16, DType::kF16}) {
    SCOPED_TRACE(DTypeName(to));
    EXPECT_TRUE(OnGpu(DType::kF32, to, in) == OnCpu(DType::kF32, to, in));
  }
}

TEST_F(CudaConvertTest, E4m3QuantisationMatchesTheCpu) {
  constexpr int64_t rows = 300, cols = 200;  // partial blocks on both edges
  std::mt19937 rng(7);
  std::normal_distribution<float> normal(0, 0.02f);
  std::vector<float> f32(rows * cols);
  for (float& x : f32) x = normal(rng);
  f32[5] = 1e-42f;                                  // subnormal
  f32[7] = std::numeric_limits<float>::infinity();  // skipped by the block's amax
  f32[9] = std::numeric_limits<float>::quiet_NaN();
  f32[rows * cols - 1] = 900.0f;  // saturates its block's neighbours' scale
  std::vector<std::byte> bf16(rows * cols * 2);
  ASSERT_TRUE(kernels::Convert(DType::kF32, DType::kBF16, f32.data(), bf16.data(), f32.size()).ok());
  for (auto scaling : {kernels::Fp8Scaling::kBlock128, kernels::Fp8Scaling::kPerTensor})
    for (DType from : {DType::kF32, DType::kBF16}) {
      SCOPED_TRACE(std::string(DTypeName(from)) +
                   (scaling == kernels::Fp8Scaling::kPerTensor ? " per tensor" : " blocks"));
      const void* host = from == DType::kF32 ? static_cast<const void*>(f32.data()) : bf16.data();
      const size_t in_bytes = rows * cols * DTypeSize(from);
      const int64_t count = kernels::Fp8ScaleCount(rows, cols, scaling);
      std::vector<uint8_t> cpu(rows * cols), gpu(rows * cols);
      std::vector<float> cpu_scales(count), gpu_scales(count);
      ASSERT_TRUE(kernels::QuantizeE4m3(from, host, rows, cols, scaling, cpu.data(), cpu_scales.data()).ok());
      auto src = DeviceBuffer::Allocate(in_bytes);
      auto dst = DeviceBuffer::Allocate(gpu.size());
      auto scales = DeviceBuffer::Allocate(count * sizeof(float));
      ASSERT_TRUE(src.ok() && dst.ok() && scales.ok());
      ASSERT_TRUE(src->CopyFrom({static_cast<const std::byte*>(host), in_bytes}).ok());
      ASSERT_TRUE(CudaQuantizeE4m3(from, src->data(), rows, cols, scaling, static_cast<uint8_t*>(dst->data()),
                                   static_cast<float*>(scales->data()))
                      .ok());
      ASSERT_TRUE(CudaSynchronize().ok());
      ASSERT_TRUE(dst->CopyTo(std::as_writable_bytes(std::span(gpu))).ok());
      ASSERT_TRUE(scales->CopyTo(std::as_writable_bytes(std::span(gpu_scales))).ok());
      EXPECT_EQ(std::memcmp(gpu_scales.data(), cpu_scales.data(), count * sizeof(float)), 0);
      EXPECT_TRUE(gpu == cpu);
    }
}

TEST(CudaConvertBuild, WithoutAGpuEveryCallSaysWhy) {
  if (cuda_test::NoGpuReason().empty()) GTEST_SKIP() << "a GPU is present";
  int x = 0;
  Status s = CudaConvert(DType::kF32, DType::kBF16, &x, &x, 1);
  if (!CudaBuildEnabled()) {
    EXPECT_EQ(s.code(), StatusCode::kUnavailable);
    EXPECT_NE(s.message().find("not compiled in"), std::string::npos) << s.ToString();
  }
  EXPECT_FALSE(DeviceBuffer::Allocate(16).ok());
  EXPECT_EQ(CudaConvert(DType::kF32, DType::kI8, &x, &x, 1).code(),
            CudaBuildEnabled() ? StatusCode::kInvalidArgument : StatusCode::kUnavailable);
}

}  // namespace
}  // namespace weightport
