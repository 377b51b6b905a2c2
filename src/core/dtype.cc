#include "weightport/core/dtype.h"

#include <algorithm>
#include <array>
#include <cctype>
#include <string>

namespace weightport {
namespace {

struct DTypeInfo {
  DType dtype;
  size_t size;
  std::string_view name;
  std::string_view safetensors;
  bool floating;
};

constexpr std::array<DTypeInfo, 15> kInfo = {{
    {DType::kF64, 8, "f64", "F64", true},
    {DType::kF32, 4, "f32", "F32", true},
    {DType::kF16, 2, "f16", "F16", true},
    {DType::kBF16, 2, "bf16", "BF16", true},
    {DType::kF8E4M3, 1, "f8e4m3", "F8_E4M3", true},
    {DType::kF8E5M2, 1, "f8e5m2", "F8_E5M2", true},
    {DType::kI64, 8, "i64", "I64", false},
    {DType::kI32, 4, "i32", "I32", false},
    {DType::kI16, 2, "i16", "I16", false},
    {DType::kI8, 1, "i8", "I8", false},
    {DType::kU64, 8, "u64", "U64", false},
    {DType::kU32, 4, "u32", "U32", false},
    {DType::kU16, 2, "u16", "U16", false},
    {DType::kU8, 1, "u8", "U8", false},
    {DType::kBool, 1, "bool", "BOOL", false},
}};

constexpr std::array<DType, 15> kAll = [] {
  std::array<DType, 15> all{};
  for (size_t i = 0; i < kInfo.size(); ++i) all[i] = kInfo[i].dtype;
  return all;
}();

const DTypeInfo& Info(DType dtype) { return kInfo[static_cast<size_t>(dtype)]; }

struct Alias {
  std::string_view alias;
  DType dtype;
};
constexpr std::array<Alias, 14> kAliases = {{
    {"float64", DType::kF64},
    {"double", DType::kF64},
    {"float32", DType::kF32},
    {"float", DType::kF32},
    {"float16", DType::kF16},
    {"half", DType::kF16},
    {"bfloat16", DType::kBF16},
    {"float8_e4m3fn", DType::kF8E4M3},
    {"fp8", DType::kF8E4M3},
    {"e4m3", DType::kF8E4M3},
    {"float8_e5m2", DType::kF8E5M2},
    {"e5m2", DType::kF8E5M2},
    {"fp32", DType::kF32},
    {"fp16", DType::kF16},
}};

}  // namespace

static_assert(
    [] {
      for (size_t i = 0; i < kInfo.size(); ++i)
        if (static_cast<size_t>(kInfo[i].dtype) != i) return false;
      return true;
    }(),
    "kInfo must be in DType declaration order");

std::span<const DType> AllDTypes() { return kAll; }
size_t DTypeSize(DType dtype) { return Info(dtype).size; }
std::string_view DTypeName(DType dtype) { return Info(dtype).name; }
std::string_view SafetensorsDTypeName(DType dtype) { return Info(dtype).safetensors; }
bool IsFloatingPoint(DType dtype) { return Info(dtype).floating; }

Result<DType> ParseSafetensorsDType(std::string_view name) {
  for (const auto& info : kInfo)
    if (info.safetensors == name) return info.dtype;
  return InvalidArgument("unknown safetensors dtype '" + std::string(name) + "'");
}

Result<DType> ParseDTypeName(std::string_view name) {
  std::string lower(name);
  std::transform(lower.begin(), lower.end(), lower.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  for (const auto& info : kInfo) {
    if (info.name == lower) return info.dtype;
    std::string st(info.safetensors);
    std::transform(st.begin(), st.end(), st.begin(),
                   [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
    if (st == lower) return info.dtype;
  }
  for (const auto& a : kAliases)
    if (a.alias == lower) return a.dtype;
  return InvalidArgument("unknown dtype '" + std::string(name) +
                         "' (expected one of f64 f32 f16 bf16 f8e4m3 f8e5m2 i64 i32 i16 i8 u64 u32 "
                         "u16 u8 bool)");
}

}  // namespace weightport
