// HostStandInMemory: host memory playing the device, so that the engine's device path runs (and is
// tested) where there is no GPU.
#include "weightport/core/device_memory.h"

#include <cstring>
#include <new>

#define XXH_STATIC_LINKING_ONLY  // XXH3_state_t on the stack
#include <xxhash.h>

#include "weightport/core/hash.h"

namespace weightport {
namespace {

class HostStandIn final : public DeviceMemory {
 public:
  std::string name() const override { return "host stand-in"; }
  std::string memory_type() const override { return "host"; }
  Result<std::shared_ptr<void>> Allocate(size_t bytes) override {
    void* p = ::operator new(bytes == 0 ? 1 : bytes, std::nothrow);
    if (p == nullptr)
      return ResourceExhausted("host stand-in: allocating " + std::to_string(bytes) + " bytes");
    // Touched now, as a device's memory is there from the start: no copy pays first-touch faults.
    std::memset(p, 0, bytes);
    return std::shared_ptr<void>(p, [](void* q) { ::operator delete(q); });
  }
  Status ToHost(const void* device, std::span<std::byte> host) override {
    std::memcpy(host.data(), device, host.size());
    return Status::Ok();
  }
  Status ToDevice(std::span<const std::byte> host, void* device) override {
    std::memcpy(device, host.data(), host.size());
    return Status::Ok();
  }
  Status CopyOnDevice(const void* from, void* to, size_t bytes) override {
    std::memcpy(to, from, bytes);
    return Status::Ok();
  }
  Result<std::vector<uint64_t>> ChunkHashes(const void* device, size_t bytes, uint64_t chunk_bytes) override {
    if (chunk_bytes == 0) return InvalidArgument("host stand-in: chunk hashes of 0-byte chunks");
    return weightport::ChunkHashes(std::span(static_cast<const std::byte*>(device), bytes), chunk_bytes);
  }
  Result<uint64_t> HashConcatenated(std::span<const DeviceBytes> parts) override {
    XXH3_state_t state;
    XXH3_64bits_reset(&state);
    for (const DeviceBytes& p : parts) XXH3_64bits_update(&state, p.data, p.size);
    return XXH3_64bits_digest(&state);
  }
};

}  // namespace

std::shared_ptr<DeviceMemory> HostStandInMemory() { return std::make_shared<HostStandIn>(); }

}  // namespace weightport
