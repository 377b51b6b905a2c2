// Describes one tensor: name, element type, shape (row-major) and size in bytes.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "weightport/core/dtype.h"
#include "weightport/core/status.h"

namespace weightport {

using Shape = std::vector<int64_t>;

// Product of dims; error when a dim is negative or the product overflows int64.
Result<int64_t> NumElements(const Shape& shape);
// "[4096, 11008]"
std::string ShapeToString(const Shape& shape);

struct TensorMeta {
  std::string name;
  DType dtype = DType::kF32;
  Shape shape;
  uint64_t bytes = 0;  // NumElements(shape) * DTypeSize(dtype)

  // Validates the shape (no negative dims, no overflow of elements or bytes) and fills `bytes`.
  // Errors name the tensor.
  static Result<TensorMeta> Make(std::string name, DType dtype, Shape shape);

  int64_t num_elements() const { return static_cast<int64_t>(bytes / DTypeSize(dtype)); }
  friend bool operator==(const TensorMeta&, const TensorMeta&) = default;
};

}  // namespace weightport
