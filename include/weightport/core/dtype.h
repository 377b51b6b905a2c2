// Element types of model weights, with their sizes and their names in safetensors headers.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>

#include "weightport/core/status.h"

namespace weightport {

enum class DType : uint8_t {
  kF64,
  kF32,
  kF16,
  kBF16,
  kF8E4M3,  // float8 e4m3fn (no infinities; NaN = S.1111.111)
  kF8E5M2,
  kI64,
  kI32,
  kI16,
  kI8,
  kU64,
  kU32,
  kU16,
  kU8,
  kBool,
};

// Every DType, in declaration order.
std::span<const DType> AllDTypes();

// Bytes per element.
size_t DTypeSize(DType dtype);
// Short lower-case name used by the CLI and JSON: "f32", "bf16", "f8e4m3", "i64", "bool".
std::string_view DTypeName(DType dtype);
// Name in a safetensors header: "F32", "BF16", "F8_E4M3", "I64", "BOOL".
std::string_view SafetensorsDTypeName(DType dtype);

// Parses a safetensors dtype name (exact, upper case). Error names the unknown string.
Result<DType> ParseSafetensorsDType(std::string_view name);
// Parses a CLI/JSON dtype name; accepts the short name, the safetensors name and common aliases
// ("float32", "bfloat16", "float8_e4m3fn", "fp8").
Result<DType> ParseDTypeName(std::string_view name);

bool IsFloatingPoint(DType dtype);

}  // namespace weightport
