// CudaStager in a build without CUDA: nothing to stage.
#include "weightport/cuda/staging.h"

namespace weightport {

struct CudaStager::Impl {};
CudaStager::CudaStager(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
CudaStager::~CudaStager() = default;
size_t CudaStager::chunk_bytes() const { return 0; }
Result<std::unique_ptr<CudaStager>> CudaStager::Create(size_t) {
  return Unavailable("CUDA support is not compiled in (configure with -DWEIGHTPORT_CUDA=ON)");
}
Status CudaStager::FromDevice(const void*, size_t, const Consume&) {
  return Unavailable("CUDA support is not compiled in");
}
Status CudaStager::OnDevice(const void*, void*, size_t) {
  return Unavailable("CUDA support is not compiled in");
}
Status CudaStager::ToDevice(void*, size_t, const Produce&) {
  return Unavailable("CUDA support is not compiled in");
}

}  // namespace weightport
