// CudaStager: device memory to and from host memory through two pinned host buffers, so that the
// GPU copies one chunk while the caller works on the other (sends it, hashes it, fills it). This is
// how weights in GPU memory travel when the transport cannot read device memory itself.
//
// Without CUDA compiled in, Create says so. Thread-safety: one thread at a time per stager.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>

#include "weightport/core/status.h"

namespace weightport {

class CudaStager {
 public:
  // Two pinned buffers of `chunk_bytes` and two streams. Unavailable without CUDA or a GPU.
  static Result<std::unique_ptr<CudaStager>> Create(size_t chunk_bytes);
  ~CudaStager();
  CudaStager(const CudaStager&) = delete;
  CudaStager& operator=(const CudaStager&) = delete;

  // Device -> host: consume(offset, bytes) sees [src, src + bytes) chunk by chunk, in order, while
  // the next chunk is copied. A consume error stops the run (the copy in flight is waited for) and
  // is returned.
  using Consume = std::function<Status(uint64_t offset, std::span<const std::byte> chunk)>;
  Status FromDevice(const void* src, size_t bytes, const Consume& consume);
  // Host -> device: produce(offset, buffer) fills each chunk of [dst, dst + bytes), in order, while
  // the one before is copied. Returns once every byte is on the device.
  using Produce = std::function<Status(uint64_t offset, std::span<std::byte> chunk)>;
  Status ToDevice(void* dst, size_t bytes, const Produce& produce);

  // Device -> device, [src, src + bytes) to dst (not overlapping), on the stager's first stream
  // (non-blocking: it does not wait for, or hold up, the default stream's work); complete when it
  // returns. For callers that keep a copy on the device and stage the rest (a delta's kept bytes).
  Status OnDevice(const void* src, void* dst, size_t bytes);

  size_t chunk_bytes() const;

 private:
  struct Impl;
  explicit CudaStager(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace weightport
