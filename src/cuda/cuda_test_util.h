// For GPU tests: why they cannot run in this process, or "" when they can.
#pragma once

#include <string>

#include "weightport/cuda/device_query.h"

namespace weightport::cuda_test {

inline std::string NoGpuReason() {
  if (!CudaBuildEnabled()) return "CUDA support is not compiled in";
  auto devices = CudaDevices();
  return devices.ok() ? "" : "no GPU: " + devices.status().message();
}

}  // namespace weightport::cuda_test
