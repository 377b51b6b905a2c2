// safetensors files: a strict header parser and an mmap reader with zero-copy tensor views (the
// writer: safetensors_writer.h).
//
// File layout: 8-byte little-endian header length N, N bytes of JSON header (an object mapping
// tensor name -> {"dtype", "shape", "data_offsets": [begin, end]}, plus an optional "__metadata__"
// string-to-string map), then the data area. Offsets are relative to the start of the data area.
//
// Validation follows the reference implementation: the tensors, sorted by offset, must tile the
// data area exactly (no overlap, no gap, nothing after the last tensor). Errors name the file and
// the tensor at fault.
//
// Thread-safety: a SafetensorsFile is immutable after Open and may be read from any thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "weightport/core/byte_range.h"
#include "weightport/core/status.h"
#include "weightport/core/tensor_meta.h"

namespace weightport {

// Headers above this size are refused (the reference implementation's limit).
inline constexpr uint64_t kMaxSafetensorsHeaderBytes = 100ull << 20;

struct SafetensorsTensor {
  TensorMeta meta;
  ByteRange data;  // relative to the start of the data area
};

struct SafetensorsHeader {
  std::vector<SafetensorsTensor> tensors;  // in header order
  std::map<std::string, std::string> metadata;
  uint64_t data_start = 0;  // absolute file offset of the data area (8 + header length)
};

// Parses and validates the header of a safetensors file whose complete bytes are `file`.
// `file_name` is used in error messages only. Never reads outside `file`.
Result<SafetensorsHeader> ParseSafetensorsHeader(std::span<const std::byte> file, std::string_view file_name);

// A safetensors file mapped read-only into memory. Move-only.
class SafetensorsFile {
 public:
  static Result<SafetensorsFile> Open(const std::string& path);

  SafetensorsFile(SafetensorsFile&& other) noexcept;
  SafetensorsFile& operator=(SafetensorsFile&& other) noexcept;
  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;
  ~SafetensorsFile();

  const std::string& path() const { return path_; }
  const std::vector<SafetensorsTensor>& tensors() const { return header_.tensors; }
  const std::map<std::string, std::string>& metadata() const { return header_.metadata; }
  uint64_t file_size() const { return size_; }

  // nullptr when absent.
  const SafetensorsTensor* Find(std::string_view name) const;
  // Zero-copy view of a tensor's bytes (valid while this object lives).
  std::span<const std::byte> Data(const SafetensorsTensor& tensor) const;

 private:
  SafetensorsFile() = default;
  void Release();

  std::string path_;
  const std::byte* base_ = nullptr;
  uint64_t size_ = 0;
  SafetensorsHeader header_;
};

}  // namespace weightport
