// A streaming writer of safetensors files (the layout: safetensors_reader.h), and the header bytes
// it writes.
//
// Thread-safety: a SafetensorsWriter from one thread at a time.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <vector>

#include "weightport/core/manifest.h"
#include "weightport/core/status.h"
#include "weightport/core/tensor_meta.h"

namespace weightport {

// Writes a safetensors file tensor by tensor, without holding the data of all tensors.
// The header is fixed by the metas given to Create; Append must then be called with each tensor's
// bytes in the same order (possibly in several pieces). Finish renames the temporary file into
// place, so a reader never sees a half-written file. Move-only; destroying an unfinished writer
// removes the temporary file.
class SafetensorsWriter {
 public:
  static Result<SafetensorsWriter> Create(const std::string& path, std::vector<TensorMeta> tensors,
                                          const std::map<std::string, std::string>& metadata = {});
  SafetensorsWriter(SafetensorsWriter&& other) noexcept;
  SafetensorsWriter& operator=(SafetensorsWriter&& other) noexcept;
  SafetensorsWriter(const SafetensorsWriter&) = delete;
  SafetensorsWriter& operator=(const SafetensorsWriter&) = delete;
  ~SafetensorsWriter();

  // Appends bytes of the current tensor; moves to the next tensor once one is complete.
  Status Append(std::span<const std::byte> bytes);
  Status Finish();

 private:
  SafetensorsWriter() = default;
  void Abandon();

  std::string path_;
  std::string tmp_path_;
  int fd_ = -1;
  std::vector<TensorMeta> tensors_;
  size_t current_ = 0;  // index of the tensor being written
  uint64_t written_in_current_ = 0;
};

// Writes a whole file in one call.
Status WriteSafetensors(const std::string& path, std::span<const TensorBytes> tensors,
                        const std::map<std::string, std::string>& metadata = {});

// The header bytes (8-byte length + JSON padded with spaces to a multiple of 8) for these tensors,
// laid out in the given order. Exposed for tests and fuzz seeds.
Result<std::string> EncodeSafetensorsHeader(std::span<const TensorMeta> tensors,
                                            const std::map<std::string, std::string>& metadata);

}  // namespace weightport
