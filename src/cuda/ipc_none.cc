// CUDA IPC in a build without CUDA: each call says so.
#include "weightport/cuda/ipc.h"

namespace weightport {
namespace {
Status NotBuilt() {
  return Unavailable("CUDA support is not compiled in (configure with -DWEIGHTPORT_CUDA=ON)");
}
}  // namespace

Result<CudaIpcHandle> ExportCudaIpc(const DeviceBuffer&) { return NotBuilt(); }
Result<CudaIpcMapping> CudaIpcMapping::Open(const CudaIpcHandle&) { return NotBuilt(); }

}  // namespace weightport
