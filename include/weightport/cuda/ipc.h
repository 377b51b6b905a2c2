// CUDA IPC: another process on the same host maps a DeviceBuffer of this one and reads or writes
// it directly, GPU to GPU (over NVLink between GPUs, in place on the same one), with no host copy.
// This is how same-host ranks move weights between processes when both sides hold them on GPUs.
//
// The exporter keeps its DeviceBuffer alive while peers have it open. A handle travels as 152
// hex digits (a 64-byte cudaIpcMemHandle_t, the byte count, the device), e.g. in a control message
// or on a command line. Works in every build: without CUDA compiled in, Export and Open say so.
//
// Thread-safety: as the CUDA runtime's.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "weightport/core/status.h"
#include "weightport/cuda/device_buffer.h"

namespace weightport {

struct CudaIpcHandle {
  std::array<uint8_t, 64> handle{};  // cudaIpcMemHandle_t, opaque
  uint64_t bytes = 0;
  int32_t device = 0;  // the exporter's device ordinal

  std::string ToHex() const;
  // InvalidArgument naming what is wrong (length, a non-hex digit) for anything ToHex did not make.
  static Result<CudaIpcHandle> FromHex(std::string_view hex);
};

// The handle of the allocation `buffer` owns (cudaIpcGetMemHandle).
Result<CudaIpcHandle> ExportCudaIpc(const DeviceBuffer& buffer);

// A peer's buffer mapped into this process (cudaIpcOpenMemHandle); unmapped when the last copy
// goes. Device pointers, valid on the current device (which may differ from the exporter's:
// peer access is enabled as needed).
class CudaIpcMapping {
 public:
  static Result<CudaIpcMapping> Open(const CudaIpcHandle& handle);
  void* data() const { return data_.get(); }
  size_t size() const { return size_; }

 private:
  std::shared_ptr<void> data_;
  size_t size_ = 0;
};

}  // namespace weightport
