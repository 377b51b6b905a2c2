// CudaDeviceMemory: DeviceMemory on one CUDA device, the one current on the creating thread: every
// call makes it current on its own thread first (cudaSetDevice), so any thread may use the object.
// Allocations are cudaMalloc'd there; copies go through a CudaStager (two pinned buffers of
// `chunk_bytes`, the GPU copying one chunk while the CPU moves the other between the pinned buffer
// and the host memory given), one copy at a time per object. Named "cuda:<index> (<GPU>)".
// Unavailable without CUDA or a GPU.
#pragma once

#include <cstddef>
#include <memory>

#include "weightport/core/device_memory.h"
#include "weightport/core/status.h"

namespace weightport {

Result<std::shared_ptr<DeviceMemory>> CudaDeviceMemory(size_t chunk_bytes = 8 << 20);

}  // namespace weightport
