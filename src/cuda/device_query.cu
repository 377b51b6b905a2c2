#include <cuda_runtime.h>

#include "weightport/cuda/device_query.h"

namespace weightport {

bool CudaBuildEnabled() { return true; }

Result<std::vector<CudaDeviceInfo>> CudaDevices() {
  int count = 0;
  cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess)
    return Unavailable(std::string("CUDA: cudaGetDeviceCount failed: ") + cudaGetErrorString(err));
  std::vector<CudaDeviceInfo> out;
  for (int i = 0; i < count; ++i) {
    cudaDeviceProp prop{};
    err = cudaGetDeviceProperties(&prop, i);
    if (err != cudaSuccess)
      return Unavailable("CUDA: device " + std::to_string(i) + ": " + cudaGetErrorString(err));
    out.push_back({i, prop.name, prop.major, prop.minor, prop.totalGlobalMem});
  }
  if (out.empty()) return Unavailable("CUDA: no GPU visible to this process");
  return out;
}

Result<int> CudaCurrentDevice() {
  int index = 0;
  if (cudaError_t err = cudaGetDevice(&index); err != cudaSuccess)
    return Unavailable(std::string("CUDA: the current device: ") + cudaGetErrorString(err));
  return index;
}

Status CudaUseDevice(int index) {
  if (cudaError_t err = cudaSetDevice(index); err != cudaSuccess)
    return Unavailable("CUDA: using device " + std::to_string(index) + ": " + cudaGetErrorString(err));
  return Status::Ok();
}

}  // namespace weightport
