// CUDA IPC: export a cudaMalloc allocation, open a peer's (cudaIpcGetMemHandle / OpenMemHandle).
#include <cuda_runtime.h>

#include <cstring>
#include <string>

#include "weightport/cuda/ipc.h"

namespace weightport {
namespace {
Status CudaFailed(const std::string& what, cudaError_t err) {
  return Unavailable("CUDA IPC: " + what + ": " + cudaGetErrorString(err));
}
}  // namespace

Result<CudaIpcHandle> ExportCudaIpc(const DeviceBuffer& buffer) {
  if (buffer.data() == nullptr) return InvalidArgument("CUDA IPC: exporting an empty device buffer");
  cudaPointerAttributes attrs{};
  if (cudaError_t err = cudaPointerGetAttributes(&attrs, buffer.data()); err != cudaSuccess)
    return CudaFailed("which device holds the buffer", err);
  cudaIpcMemHandle_t raw;
  if (cudaError_t err = cudaIpcGetMemHandle(&raw, buffer.data()); err != cudaSuccess)
    return CudaFailed("exporting " + std::to_string(buffer.size()) + " bytes", err);
  static_assert(sizeof raw == sizeof(CudaIpcHandle::handle));
  CudaIpcHandle h;
  std::memcpy(h.handle.data(), &raw, sizeof raw);
  h.bytes = buffer.size();
  h.device = attrs.device;
  return h;
}

Result<CudaIpcMapping> CudaIpcMapping::Open(const CudaIpcHandle& handle) {
  cudaIpcMemHandle_t raw;
  std::memcpy(&raw, handle.handle.data(), sizeof raw);
  void* p = nullptr;
  // Lazy peer access: a buffer on another GPU of this host is mapped through NVLink or PCIe.
  if (cudaError_t err = cudaIpcOpenMemHandle(&p, raw, cudaIpcMemLazyEnablePeerAccess); err != cudaSuccess)
    return CudaFailed("opening the peer's " + std::to_string(handle.bytes) + " bytes on device " +
                          std::to_string(handle.device),
                      err);
  CudaIpcMapping m;
  m.data_ = std::shared_ptr<void>(p, [](void* q) { cudaIpcCloseMemHandle(q); });
  m.size_ = handle.bytes;
  return m;
}

}  // namespace weightport
