#include "weightport/engine/common/arena.h"
#include "weightport/core/memory_check.h"

#include <sys/mman.h>

#include <cerrno>
#include <cstring>
#include <string>

namespace weightport {
namespace {

// An anonymous mapping registered with a transport; unregisters before unmapping.
class MappedRegion final : public MemoryRegion {
 public:
  MappedRegion(void* data, size_t size, std::unique_ptr<MemoryRegion> inner)
      : data_(data), size_(size), inner_(std::move(inner)) {}
  ~MappedRegion() override {
    inner_.reset();
    if (data_ != nullptr && size_ > 0) munmap(data_, size_);
  }
  std::byte* data() const override { return static_cast<std::byte*>(data_); }
  size_t size() const override { return size_; }
  const RemoteKey& remote_key() const override { return inner_->remote_key(); }

 private:
  void* data_;
  size_t size_;
  std::unique_ptr<MemoryRegion> inner_;
};

}  // namespace

Result<std::unique_ptr<MemoryRegion>> AllocateArena(Transport& transport, size_t size, const char* what) {
  if (size == 0) return InvalidArgument(std::string(what) + ": an arena needs at least one byte");
  auto own = transport.Allocate(size);
  if (own.ok()) return std::move(*own);
  if (own.status().code() != StatusCode::kUnimplemented)  // a transport that allocates, and failed to
    return own.status().WithContext(std::string(what) + ": allocating " + std::to_string(size) + " bytes");
  WP_RETURN_IF_ERROR(CheckMemoryFits(size, false, what));
  void* data = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (data == MAP_FAILED)
    return ResourceExhausted(std::string(what) + ": mmap of " + std::to_string(size) +
                             " bytes failed: " + std::strerror(errno));
  auto inner = transport.Register(data, size);
  if (!inner.ok()) {
    munmap(data, size);
    return inner.status().WithContext(std::string(what) + ": registering " + std::to_string(size) + " bytes");
  }
  return std::unique_ptr<MemoryRegion>(std::make_unique<MappedRegion>(data, size, std::move(*inner)));
}

Result<std::unique_ptr<MemoryRegion>> RegisterArena(Transport& transport, void* data, size_t size,
                                                    const char* what) {
  auto region = transport.Register(data, size);
  if (!region.ok())
    return region.status().WithContext(std::string(what) + ": registering " + std::to_string(size) +
                                       " bytes");
  return region;
}

}  // namespace weightport
