// DeviceMemory: memory besides the host where a rank's shards also live (a GPU's), and the copies
// between it and the host. The engine keeps a rank's arena in host memory (what its transport
// registers and peers read and write); with a DeviceMemory (PlanRankOptions::device) a source's
// trainer writes its shards on the device and Publish copies them into the arena, and a
// destination's verified shards are copied to the device before Receive returns, into a second
// device copy that Commit makes live (what a delta update kept from the version before is copied
// from the live device copy on the device). A source's Publish copies only the blocks whose hash on
// the device changed since its Publish before. With PlanRankOptions::device_direct a destination's
// transport writes chunks straight into the device copy (memory_type() must be one the transport
// takes), and they are verified there (HashConcatenated).
//
// Implementations: CudaDeviceMemory (weightport/cuda/device_memory.h: cudaMalloc, copies through
// pinned double buffers) and HostStandInMemory (host memory standing in for a device: memcpy; for
// tests and machines without a GPU).
//
// Thread-safety: implementations are safe to call from any thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "weightport/core/status.h"

namespace weightport {

// Bytes in a device's memory: where they start, how many.
struct DeviceBytes {
  const void* data = nullptr;
  size_t size = 0;
};

class DeviceMemory {
 public:
  virtual ~DeviceMemory() = default;
  // "cuda:0 (NVIDIA H200)", "host stand-in": for messages.
  virtual std::string name() const = 0;
  // What a transport calls this memory (Transport::TakesMemory): "cuda"; "host" for the stand-in.
  virtual std::string memory_type() const = 0;
  // `bytes` of device memory, freed when the last reference goes.
  virtual Result<std::shared_ptr<void>> Allocate(size_t bytes) = 0;
  // host.size() bytes from `device` into `host`, complete when it returns.
  virtual Status ToHost(const void* device, std::span<std::byte> host) = 0;
  // host.size() bytes from `host` to `device`, complete when it returns.
  virtual Status ToDevice(std::span<const std::byte> host, void* device) = 0;
  // `bytes` from `from` to `to`, both on the device (not overlapping), complete when it returns.
  virtual Status CopyOnDevice(const void* from, void* to, size_t bytes) = 0;
  // A 64-bit hash of each `chunk_bytes` chunk of [device, device + bytes) (the last may be shorter),
  // computed where the memory is: equal hashes mean equal bytes (to 2^-64) between two calls of the
  // same DeviceMemory (xxh3-64 of each chunk, as ChunkHashes, for both implementations here).
  virtual Result<std::vector<uint64_t>> ChunkHashes(const void* device, size_t bytes,
                                                    uint64_t chunk_bytes) = 0;
  // xxh3-64 of the bytes of `parts`, one after the other, computed where the memory is: equal to
  // Xxh3 of the same bytes on the host. Verifies what a transport wrote there.
  virtual Result<uint64_t> HashConcatenated(std::span<const DeviceBytes> parts) = 0;
};

std::shared_ptr<DeviceMemory> HostStandInMemory();

}  // namespace weightport
