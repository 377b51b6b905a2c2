// CudaDeviceMemory: DeviceMemory on a CUDA device. Allocations are cudaMalloc'd on the device current
// on the calling thread, and the stager's streams belong to the device current at creation: use one
// object per device, from threads on that device. Copies go through a CudaStager (two pinned
// buffers of `chunk_bytes`, the GPU copying one chunk while the CPU moves the other between the
// pinned buffer and the host memory given), one copy at a time per object. Unavailable without
// CUDA or a GPU.
#pragma once

#include <cstddef>
#include <memory>

#include "weightport/core/device_memory.h"
#include "weightport/core/status.h"

namespace weightport {

Result<std::shared_ptr<DeviceMemory>> CudaDeviceMemory(size_t chunk_bytes = 8 << 20);

}  // namespace weightport
