#include "weightport/cuda/device_query.h"

namespace weightport {

bool CudaBuildEnabled() { return false; }

Result<std::vector<CudaDeviceInfo>> CudaDevices() {
  return Unavailable(
      "CUDA: this build of weightport has no CUDA support (nvcc was not found at configure time)");
}

Result<int> CudaCurrentDevice() { return Unavailable("CUDA: this build of weightport has no CUDA support"); }
Status CudaUseDevice(int) { return Unavailable("CUDA: this build of weightport has no CUDA support"); }

}  // namespace weightport
