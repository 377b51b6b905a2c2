// A half-open range of bytes [offset, offset + length).
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace weightport {

struct ByteRange {
  uint64_t offset = 0;
  uint64_t length = 0;

  uint64_t end() const { return offset + length; }
  bool empty() const { return length == 0; }
  bool Contains(const ByteRange& other) const { return other.offset >= offset && other.end() <= end(); }
  bool Overlaps(const ByteRange& other) const {
    return length && other.length && offset < other.end() && other.offset < end();
  }
  // The common part, or nullopt when they do not overlap.
  std::optional<ByteRange> Intersect(const ByteRange& other) const {
    uint64_t lo = offset > other.offset ? offset : other.offset;
    uint64_t hi = end() < other.end() ? end() : other.end();
    if (lo >= hi) return std::nullopt;
    return ByteRange{lo, hi - lo};
  }
  std::string ToString() const { return "[" + std::to_string(offset) + ", " + std::to_string(end()) + ")"; }
  friend bool operator==(const ByteRange&, const ByteRange&) = default;
};

}  // namespace weightport
