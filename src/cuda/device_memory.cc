// CudaDeviceMemory over DeviceBuffer and CudaStager (each says Unavailable without CUDA), so this
// file is plain C++ built in every configuration.
#include "weightport/cuda/device_memory.h"

#include <algorithm>
#include <cstring>
#include <optional>

#include "weightport/core/hash.h"
#include "weightport/core/thread_annotations.h"
#include "weightport/cuda/device_buffer.h"
#include "weightport/cuda/device_query.h"
#include "weightport/cuda/hash.h"
#include "weightport/cuda/staging.h"

namespace weightport {
namespace {

class CudaMemory final : public DeviceMemory {
 public:
  CudaMemory(std::unique_ptr<CudaStager> stager, int device, std::string name)
      : stager_(std::move(stager)), device_(device), name_(std::move(name)) {}

  std::string name() const override { return name_; }
  std::string memory_type() const override { return "cuda"; }

  Result<std::shared_ptr<void>> Allocate(size_t bytes) override {
    WP_RETURN_IF_ERROR(CudaUseDevice(device_));
    WP_ASSIGN_OR_RETURN(DeviceBuffer buffer, DeviceBuffer::Allocate(bytes));
    auto owner = std::make_shared<DeviceBuffer>(std::move(buffer));
    return std::shared_ptr<void>(owner, owner->data());  // keeps the buffer alive
  }

  Status ToHost(const void* device, std::span<std::byte> host) override {
    WP_RETURN_IF_ERROR(CudaUseDevice(device_));
    MutexLock lock(mu_);
    return stager_->FromDevice(device, host.size(), [&](uint64_t at, std::span<const std::byte> chunk) {
      std::memcpy(host.data() + at, chunk.data(), chunk.size());
      return Status::Ok();
    });
  }

  Status ToDevice(std::span<const std::byte> host, void* device) override {
    WP_RETURN_IF_ERROR(CudaUseDevice(device_));
    MutexLock lock(mu_);
    return stager_->ToDevice(device, host.size(), [&](uint64_t at, std::span<std::byte> chunk) {
      std::memcpy(chunk.data(), host.data() + at, chunk.size());
      return Status::Ok();
    });
  }

  Status CopyOnDevice(const void* from, void* to, size_t bytes) override {
    WP_RETURN_IF_ERROR(CudaUseDevice(device_));
    MutexLock lock(mu_);
    return stager_->OnDevice(from, to, bytes);
  }

  Result<std::vector<uint64_t>> ChunkHashes(const void* device, size_t bytes, uint64_t chunk_bytes) override {
    if (chunk_bytes == 0) return InvalidArgument(name_ + ": chunk hashes of 0-byte chunks");
    if (bytes == 0) return std::vector<uint64_t>{};
    WP_RETURN_IF_ERROR(CudaUseDevice(device_));
    MutexLock lock(mu_);
    return HashChunksLocked(device, bytes, chunk_bytes);
  }

  // One part is hashed where it is; several are gathered on the device first (xxh3 of a whole is
  // no function of its parts' hashes). The engine merges adjacent parts, so one is the rule.
  Result<uint64_t> HashConcatenated(std::span<const DeviceBytes> parts) override {
    size_t total = 0;
    for (const DeviceBytes& p : parts) total += p.size;
    if (total == 0) return Xxh3(nullptr, 0);
    WP_RETURN_IF_ERROR(CudaUseDevice(device_));
    MutexLock lock(mu_);
    const void* whole = nullptr;  // the part that holds every byte, when one does
    for (const DeviceBytes& p : parts)
      if (p.size == total) whole = p.data;
    if (whole == nullptr) {
      WP_RETURN_IF_ERROR(Reserve(gather_, total));
      auto* at = static_cast<std::byte*>(gather_->data());
      for (const DeviceBytes& p : parts) {
        if (p.size > 0) WP_RETURN_IF_ERROR(stager_->OnDevice(p.data, at, p.size));
        at += p.size;
      }
      whole = gather_->data();
    }
    WP_ASSIGN_OR_RETURN(std::vector<uint64_t> hash, HashChunksLocked(whole, total, total));
    return hash.at(0);
  }

 private:
  static Status Reserve(std::optional<DeviceBuffer>& buffer, size_t bytes) {
    if (buffer && buffer->size() >= bytes) return Status::Ok();
    buffer.reset();  // freed before the larger one is taken
    WP_ASSIGN_OR_RETURN(DeviceBuffer grown, DeviceBuffer::Allocate(std::max<size_t>(bytes, 1)));
    buffer = std::move(grown);
    return Status::Ok();
  }

  // ChunkHashes of bytes > 0.
  Result<std::vector<uint64_t>> HashChunksLocked(const void* device, size_t bytes, uint64_t chunk_bytes)
      REQUIRES(mu_) {
    std::vector<uint64_t> out((bytes + chunk_bytes - 1) / chunk_bytes);
    // Buffers kept from call to call, grown as needed: a cudaFree per call would stall the device.
    WP_RETURN_IF_ERROR(Reserve(hashes_, out.size() * sizeof(uint64_t)));
    WP_RETURN_IF_ERROR(Reserve(scratch_, CudaChunkHashScratchBytes(bytes, chunk_bytes)));
    // On the default stream, which the copy back (a cudaMemcpy) waits for.
    WP_RETURN_IF_ERROR(CudaChunkHashes(device, bytes, chunk_bytes, static_cast<uint64_t*>(hashes_->data()),
                                       nullptr, scratch_->data()));
    WP_RETURN_IF_ERROR(hashes_->CopyTo(std::as_writable_bytes(std::span(out))));
    return out;
  }

  Mutex mu_;  // the stager serves one copy at a time; the hash buffers one hashing
  // ChunkHashes' output and scratch on the device.
  std::optional<DeviceBuffer> hashes_ GUARDED_BY(mu_), scratch_ GUARDED_BY(mu_);
  std::optional<DeviceBuffer> gather_ GUARDED_BY(mu_);  // HashConcatenated's parts, one after the other
  std::unique_ptr<CudaStager> stager_ PT_GUARDED_BY(mu_);
  const int device_;
  const std::string name_;
};

}  // namespace

Result<std::shared_ptr<DeviceMemory>> CudaDeviceMemory(size_t chunk_bytes) {
  WP_ASSIGN_OR_RETURN(std::vector<CudaDeviceInfo> devices, CudaDevices());
  WP_ASSIGN_OR_RETURN(int device, CudaCurrentDevice());
  WP_ASSIGN_OR_RETURN(std::unique_ptr<CudaStager> stager, CudaStager::Create(chunk_bytes));
  std::string name = "cuda:" + std::to_string(device);
  for (const CudaDeviceInfo& d : devices)
    if (d.index == device) name += " (" + d.name + ")";
  return std::shared_ptr<DeviceMemory>(
      std::make_shared<CudaMemory>(std::move(stager), device, std::move(name)));
}

}  // namespace weightport
