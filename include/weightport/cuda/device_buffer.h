// DeviceBuffer: device memory owned by one object (cudaMalloc / cudaFree), with blocking copies
// to and from host memory. Works in every build: without CUDA compiled in, Allocate says so.
//
// Thread-safety: one owner; the copies are the CUDA runtime's.
#pragma once

#include <cstddef>
#include <memory>
#include <span>

#include "weightport/core/status.h"

namespace weightport {

class DeviceBuffer {
 public:
  // Unavailable without CUDA or a GPU, ResourceExhausted when the device is full.
  static Result<DeviceBuffer> Allocate(size_t bytes);

  void* data() const { return data_.get(); }
  size_t size() const { return size_; }
  // The first bytes of the buffer from or to `host`; InvalidArgument when it does not fit.
  Status CopyFrom(std::span<const std::byte> host);
  Status CopyTo(std::span<std::byte> host) const;

 private:
  std::shared_ptr<void> data_;
  size_t size_ = 0;
};

// Waits for all work on the device (cudaDeviceSynchronize); the error of a kernel that failed.
Status CudaSynchronize();

}  // namespace weightport
