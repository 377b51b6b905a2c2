// The GPU conversions in a build without CUDA: each call says so.
#include "weightport/cuda/convert.h"

namespace weightport {

Status CudaConvert(DType, DType, const void*, void*, size_t, void*) {
  return Unavailable("CUDA support is not compiled in (configure with -DWEIGHTPORT_CUDA=ON)");
}

Status CudaQuantizeE4m3(DType, const void*, int64_t, int64_t, kernels::Fp8Scaling, uint8_t*, float*, void*) {
  return Unavailable("CUDA support is not compiled in (configure with -DWEIGHTPORT_CUDA=ON)");
}

}  // namespace weightport
