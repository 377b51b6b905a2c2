#include "weightport/core/tensor_meta.h"

#include <limits>

namespace weightport {

Result<int64_t> NumElements(const Shape& shape) {
  int64_t n = 1;
  for (size_t i = 0; i < shape.size(); ++i) {
    int64_t d = shape[i];
    if (d < 0)
      return InvalidArgument("dimension " + std::to_string(i) + " is negative (" + std::to_string(d) + ")");
    if (d != 0 && n > std::numeric_limits<int64_t>::max() / d)
      return InvalidArgument("shape " + ShapeToString(shape) + " overflows 64-bit element count");
    n *= d;
  }
  return n;
}

std::string ShapeToString(const Shape& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i) s += ", ";
    s += std::to_string(shape[i]);
  }
  return s + "]";
}

Result<TensorMeta> TensorMeta::Make(std::string name, DType dtype, Shape shape) {
  auto n = NumElements(shape);
  if (!n.ok()) return n.status().WithContext("tensor '" + name + "'");
  const auto size = static_cast<int64_t>(DTypeSize(dtype));
  if (*n > std::numeric_limits<int64_t>::max() / size)
    return InvalidArgument("tensor '" + name + "': " + ShapeToString(shape) + " x " +
                           std::string(DTypeName(dtype)) + " overflows 64-bit byte count");
  TensorMeta meta;
  meta.name = std::move(name);
  meta.dtype = dtype;
  meta.shape = std::move(shape);
  meta.bytes = static_cast<uint64_t>(*n * size);
  return meta;
}

}  // namespace weightport
