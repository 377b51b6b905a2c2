// DeviceBuffer in a build without CUDA: nothing can be allocated.
#include "weightport/cuda/device_buffer.h"

namespace weightport {

Result<DeviceBuffer> DeviceBuffer::Allocate(size_t) {
  return Unavailable("CUDA support is not compiled in (configure with -DWEIGHTPORT_CUDA=ON)");
}
Status DeviceBuffer::CopyFrom(std::span<const std::byte>) {
  return Unavailable("CUDA support is not compiled in");
}
Status DeviceBuffer::CopyTo(std::span<std::byte>) const {
  return Unavailable("CUDA support is not compiled in");
}
Status CudaSynchronize() { return Unavailable("CUDA support is not compiled in"); }

}  // namespace weightport
