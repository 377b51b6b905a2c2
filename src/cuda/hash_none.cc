// The GPU chunk hashes in a build without CUDA: the call says so.
#include "weightport/cuda/hash.h"

namespace weightport {

Status CudaChunkHashes(const void*, size_t, uint64_t, uint64_t*, void*, void*) {
  return Unavailable("CUDA support is not compiled in (configure with -DWEIGHTPORT_CUDA=ON)");
}

size_t CudaChunkHashScratchBytes(size_t, uint64_t) { return 0; }

}  // namespace weightport
