// CudaStager: two pinned buffers and two streams; chunk k uses buffer and stream k % 2.
#include <cuda_runtime.h>

#include <algorithm>
#include <string>

#include "weightport/cuda/staging.h"

namespace weightport {
namespace {
Status Cuda(const char* what, cudaError_t err) {
  if (err == cudaSuccess) return Status::Ok();
  return Unavailable(std::string("CUDA staging: ") + what + ": " + cudaGetErrorString(err));
}
}  // namespace

struct CudaStager::Impl {
  size_t chunk = 0;
  std::byte* host[2] = {nullptr, nullptr};
  cudaStream_t stream[2] = {nullptr, nullptr};
  ~Impl() {
    for (int i = 0; i < 2; ++i) {
      if (stream[i]) cudaStreamDestroy(stream[i]);
      if (host[i]) cudaFreeHost(host[i]);
    }
  }
};

CudaStager::CudaStager(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
CudaStager::~CudaStager() = default;
size_t CudaStager::chunk_bytes() const { return impl_->chunk; }

Result<std::unique_ptr<CudaStager>> CudaStager::Create(size_t chunk_bytes) {
  if (chunk_bytes == 0) return InvalidArgument("CUDA staging: chunk_bytes must be positive");
  auto impl = std::make_unique<Impl>();
  impl->chunk = chunk_bytes;
  for (int i = 0; i < 2; ++i) {
    void* p = nullptr;
    WP_RETURN_IF_ERROR(Cuda("pinned buffer", cudaMallocHost(&p, chunk_bytes)));
    impl->host[i] = static_cast<std::byte*>(p);
    WP_RETURN_IF_ERROR(Cuda("stream", cudaStreamCreateWithFlags(&impl->stream[i], cudaStreamNonBlocking)));
  }
  return std::unique_ptr<CudaStager>(new CudaStager(std::move(impl)));
}

Status CudaStager::FromDevice(const void* src, size_t bytes, const Consume& consume) {
  Impl& s = *impl_;
  const size_t chunks = (bytes + s.chunk - 1) / s.chunk;
  auto issue = [&](size_t k) {
    const size_t at = k * s.chunk, n = std::min(s.chunk, bytes - at);
    return Cuda("device to host", cudaMemcpyAsync(s.host[k % 2], static_cast<const std::byte*>(src) + at, n,
                                                  cudaMemcpyDeviceToHost, s.stream[k % 2]));
  };
  // Chunk k is consumed while chunk k + 1 is copied into the other buffer, consumed one step ago.
  auto step = [&](size_t k) -> Status {
    if (k == 0) WP_RETURN_IF_ERROR(issue(0));
    if (k + 1 < chunks) WP_RETURN_IF_ERROR(issue(k + 1));
    WP_RETURN_IF_ERROR(Cuda("device to host", cudaStreamSynchronize(s.stream[k % 2])));
    const size_t at = k * s.chunk, n = std::min(s.chunk, bytes - at);
    return consume(at, std::span<const std::byte>(s.host[k % 2], n));
  };
  for (size_t k = 0; k < chunks; ++k) {
    const Status st = step(k);
    if (!st.ok()) {
      // Nothing may still write into the buffers once this returns.
      for (int i = 0; i < 2; ++i) cudaStreamSynchronize(s.stream[i]);
      return st;
    }
  }
  return Status::Ok();
}

Status CudaStager::OnDevice(const void* src, void* dst, size_t bytes) {
  Impl& s = *impl_;
  WP_RETURN_IF_ERROR(
      Cuda("on the device", cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, s.stream[0])));
  return Cuda("on the device", cudaStreamSynchronize(s.stream[0]));
}

Status CudaStager::ToDevice(void* dst, size_t bytes, const Produce& produce) {
  Impl& s = *impl_;
  const size_t chunks = (bytes + s.chunk - 1) / s.chunk;
  auto step = [&](size_t k) -> Status {
    // The buffer's previous chunk (k - 2) must be on the device before it is filled again.
    WP_RETURN_IF_ERROR(Cuda("host to device", cudaStreamSynchronize(s.stream[k % 2])));
    const size_t at = k * s.chunk, n = std::min(s.chunk, bytes - at);
    WP_RETURN_IF_ERROR(produce(at, std::span<std::byte>(s.host[k % 2], n)));
    return Cuda("host to device", cudaMemcpyAsync(static_cast<std::byte*>(dst) + at, s.host[k % 2], n,
                                                  cudaMemcpyHostToDevice, s.stream[k % 2]));
  };
  for (size_t k = 0; k < chunks; ++k) {
    const Status st = step(k);
    if (!st.ok()) {
      for (int i = 0; i < 2; ++i) cudaStreamSynchronize(s.stream[i]);
      return st;
    }
  }
  for (int i = 0; i < 2; ++i) WP_RETURN_IF_ERROR(Cuda("host to device", cudaStreamSynchronize(s.stream[i])));
  return Status::Ok();
}

}  // namespace weightport
