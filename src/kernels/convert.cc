#include "weightport/kernels/convert.h"

#include <cstring>
#include <string>

#include "kernels/convert_lanes.h"

namespace weightport::kernels {
namespace {

using lanes::u16;
using lanes::u32;

WP_VECTOR_CLONES void F32ToBf16Loop(const u32* in, u16* out, size_t n) {
  for (size_t i = 0; i < n; ++i) out[i] = lanes::F32ToBf16(in[i]);
}
WP_VECTOR_CLONES void F32ToF16Loop(const u32* in, u16* out, size_t n) {
  for (size_t i = 0; i < n; ++i) out[i] = lanes::F32ToF16(in[i]);
}
WP_VECTOR_CLONES void Bf16ToF32Loop(const u16* in, u32* out, size_t n) {
  for (size_t i = 0; i < n; ++i) out[i] = lanes::Bf16ToF32(in[i]);
}
WP_VECTOR_CLONES void F16ToF32Loop(const u16* in, u32* out, size_t n) {
  for (size_t i = 0; i < n; ++i) out[i] = lanes::F16ToF32(in[i]);
}
WP_VECTOR_CLONES void F16ToBf16Loop(const u16* in, u16* out, size_t n) {
  for (size_t i = 0; i < n; ++i) out[i] = lanes::F32ToBf16(lanes::F16ToF32(in[i]));
}
WP_VECTOR_CLONES void Bf16ToF16Loop(const u16* in, u16* out, size_t n) {
  for (size_t i = 0; i < n; ++i) out[i] = lanes::F32ToF16(lanes::Bf16ToF32(in[i]));
}

bool IsFloat16Or32(DType t) { return t == DType::kF32 || t == DType::kBF16 || t == DType::kF16; }

}  // namespace

bool CanConvert(DType from, DType to) {
  if (from == to) return true;
  return IsFloat16Or32(from) && IsFloat16Or32(to);
}

Status Convert(DType from, DType to, const void* src, void* dst, size_t count) {
  if (!CanConvert(from, to))
    return InvalidArgument("no conversion from " + std::string(DTypeName(from)) + " to " +
                           std::string(DTypeName(to)));
  if (count == 0) return Status::Ok();
  if (src == nullptr || dst == nullptr) return InvalidArgument("conversion of a null buffer");
  if (from == to) {
    std::memcpy(dst, src, count * DTypeSize(from));
    return Status::Ok();
  }
  const auto* in16 = static_cast<const u16*>(src);
  const auto* in32 = static_cast<const u32*>(src);
  auto* out16 = static_cast<u16*>(dst);
  auto* out32 = static_cast<u32*>(dst);
  if (from == DType::kF32 && to == DType::kBF16) F32ToBf16Loop(in32, out16, count);
  if (from == DType::kF32 && to == DType::kF16) F32ToF16Loop(in32, out16, count);
  if (from == DType::kBF16 && to == DType::kF32) Bf16ToF32Loop(in16, out32, count);
  if (from == DType::kF16 && to == DType::kF32) F16ToF32Loop(in16, out32, count);
  if (from == DType::kF16 && to == DType::kBF16) F16ToBf16Loop(in16, out16, count);
  if (from == DType::kBF16 && to == DType::kF16) Bf16ToF16Loop(in16, out16, count);
  return Status::Ok();
}

}  // namespace weightport::kernels
