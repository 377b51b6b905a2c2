#include <cuda_runtime.h>

#include <string>

#include "weightport/cuda/device_buffer.h"

namespace weightport {
namespace {
Status CudaError(const char* what, cudaError_t err) {
  const StatusCode code =
      err == cudaErrorMemoryAllocation ? StatusCode::kResourceExhausted : StatusCode::kUnavailable;
  return Status(code, std::string("CUDA: ") + what + ": " + cudaGetErrorString(err));
}
}  // namespace

Result<DeviceBuffer> DeviceBuffer::Allocate(size_t bytes) {
  void* p = nullptr;
  const cudaError_t err = cudaMalloc(&p, bytes == 0 ? 1 : bytes);
  if (err != cudaSuccess) return CudaError(("allocating " + std::to_string(bytes) + " bytes").c_str(), err);
  DeviceBuffer b;
  b.data_ = std::shared_ptr<void>(p, [](void* q) { cudaFree(q); });
  b.size_ = bytes;
  return b;
}

Status DeviceBuffer::CopyFrom(std::span<const std::byte> host) {
  if (host.size() > size_)
    return InvalidArgument("device buffer: " + std::to_string(host.size()) + " bytes into " +
                           std::to_string(size_));
  const cudaError_t err = cudaMemcpy(data_.get(), host.data(), host.size(), cudaMemcpyHostToDevice);
  return err == cudaSuccess ? Status::Ok() : CudaError("copy to the device", err);
}

Status DeviceBuffer::CopyTo(std::span<std::byte> host) const {
  if (host.size() > size_)
    return InvalidArgument("device buffer: " + std::to_string(host.size()) + " bytes out of " +
                           std::to_string(size_));
  const cudaError_t err = cudaMemcpy(host.data(), data_.get(), host.size(), cudaMemcpyDeviceToHost);
  return err == cudaSuccess ? Status::Ok() : CudaError("copy from the device", err);
}

Status CudaSynchronize() {
  const cudaError_t err = cudaDeviceSynchronize();
  return err == cudaSuccess ? Status::Ok() : CudaError("synchronize", err);
}

}  // namespace weightport
