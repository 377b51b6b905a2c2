// Helpers shared by the core tests: tensor metadata in one line, and a per-element reference for
// slices (which element of a tensor a slice holds), written the slow, obvious way.
#pragma once

#include <string>
#include <utility>

#include "weightport/core/slice.h"
#include "weightport/core/tensor_meta.h"

namespace weightport::core_test {

inline TensorMeta Meta(std::string name, Shape shape, DType dtype = DType::kBF16) {
  return TensorMeta::Make(std::move(name), dtype, std::move(shape)).value();
}

inline int64_t Numel(const Shape& s) { return NumElements(s).value(); }

// Whether element i (row-major) of a tensor of `shape` lies in `s`.
inline bool InSlice(int64_t i, const Slice& s, const Shape& shape) {
  if (s.is_flat()) return i >= s.flat().start && i < s.flat().end();
  for (size_t k = shape.size(); k-- > 0;) {
    const int64_t x = i % shape[k];
    i /= shape[k];
    if (x < s.box().start[k] || x >= s.box().start[k] + s.box().length[k]) return false;
  }
  return true;
}

}  // namespace weightport::core_test
