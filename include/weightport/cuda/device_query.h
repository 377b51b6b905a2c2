// What CUDA devices this process can see. Works in every build: without CUDA support compiled in,
// CudaBuildEnabled() is false and CudaDeviceCount() reports Unavailable.
#pragma once

#include <string>
#include <vector>

#include "weightport/core/status.h"

namespace weightport {

struct CudaDeviceInfo {
  int index = 0;
  std::string name;
  int compute_major = 0;
  int compute_minor = 0;
  size_t total_memory = 0;
};

bool CudaBuildEnabled();
// Unavailable (with the reason from the CUDA runtime) when there is no usable GPU or driver.
Result<std::vector<CudaDeviceInfo>> CudaDevices();
// The calling thread's current device (cudaGetDevice), and making `index` current (cudaSetDevice).
Result<int> CudaCurrentDevice();
Status CudaUseDevice(int index);

}  // namespace weightport
