// Chunk hashes on the GPU in two kernels built from cuda/xxh3_parts.h:
//   BlockSumsKernel  two threads per 1 KiB block of every chunk over 240 bytes, one per quartet of
//                    accumulator lanes, each reading 32 bytes of each of the block's stripes (a
//                    warp's loads cover 16 blocks x 64 contiguous bytes, so every sector fetched is
//                    used) and writing its 4 lanes' sums: 64 bytes out per block (a chunk's tail
//                    block included), 1/16 of the input.
//   FinishKernel     8 threads per chunk, one per accumulator lane: the block sums and scrambles in
//                    order (sums loaded 16 at a time, ahead of the dependent chain), the last stripe,
//                    the merge; chunks of at most 240 bytes take the short path on their first
//                    thread.
#include <cuda_runtime.h>

#include <algorithm>
#include <string>

#include "cuda/xxh3_parts.h"
#include "weightport/cuda/hash.h"

namespace weightport {
namespace {

namespace x = xxh3;

__constant__ uint8_t kSecret[x::kSecretSize] = WP_XXH3_SECRET_BYTES;

// Where chunk c's block sums start, and how the chunks split: `regular` chunks of chunk_bytes,
// then possibly one shorter last chunk of last_bytes.
struct Layout {
  const uint8_t* src;
  uint64_t chunk_bytes;
  uint64_t regular;            // chunks of exactly chunk_bytes
  uint64_t last_bytes;         // 0: none
  uint64_t slots_per_regular;  // full blocks + 1 (the tail block), 0 when chunk_bytes <= 240
  uint64_t total_slots;
  bool aligned16;  // src and chunk_bytes multiples of 16: vector loads

  __host__ __device__ uint64_t chunks() const { return regular + (last_bytes ? 1 : 0); }
  __device__ uint64_t length(uint64_t c) const { return c < regular ? chunk_bytes : last_bytes; }
  __device__ uint64_t first_slot(uint64_t c) const { return c * slots_per_regular; }
};

__device__ __forceinline__ void LoadQuartet(const uint8_t* p, bool aligned16, uint64_t w[4]) {
  if (aligned16) {
    const ulonglong2 a = reinterpret_cast<const ulonglong2*>(p)[0];
    const ulonglong2 b = reinterpret_cast<const ulonglong2*>(p)[1];
    w[0] = a.x, w[1] = a.y, w[2] = b.x, w[3] = b.y;
  } else {
    for (int j = 0; j < 4; ++j) w[j] = x::Read64(p + 8 * j);
  }
}

__global__ void BlockSumsKernel(Layout l, uint64_t* sums) {
  // The secret's first 24 words: the keys of every stripe of a block (StripeKey).
  __shared__ uint64_t keys[x::kSecretSize / 8];
  if (threadIdx.x < x::kSecretSize / 8) keys[threadIdx.x] = x::Read64(kSecret + 8 * threadIdx.x);
  __syncthreads();
  const uint64_t threads = static_cast<uint64_t>(gridDim.x) * blockDim.x;
  for (uint64_t g = static_cast<uint64_t>(blockIdx.x) * blockDim.x + threadIdx.x; g < 2 * l.total_slots;
       g += threads) {
    const uint64_t w = g / 2;
    const int first = 4 * static_cast<int>(g % 2);
    uint64_t c = l.slots_per_regular ? w / l.slots_per_regular : l.regular;
    if (c > l.regular) c = l.regular;  // the last, shorter chunk
    const uint64_t b = w - l.first_slot(c);
    const x::LongShape shape = x::ShapeOf(l.length(c));
    const size_t stripes = b < shape.full_blocks ? x::kStripesPerBlock : shape.tail_stripes;
    const uint8_t* block = l.src + c * l.chunk_bytes + b * x::kBlock + 8 * first;
    uint64_t part[4] = {0, 0, 0, 0};
    for (size_t stripe = 0; stripe < stripes; ++stripe) {
      uint64_t words[4];
      LoadQuartet(block + stripe * x::kStripe, l.aligned16, words);
      const uint64_t k[4] = {keys[stripe + first], keys[stripe + first + 1], keys[stripe + first + 2],
                             keys[stripe + first + 3]};
      x::AddQuartet(words, k, part);
    }
    for (int j = 0; j < 4; ++j) sums[w * 8 + first + j] = part[j];
  }
}

__global__ void FinishKernel(Layout l, const uint64_t* sums, uint64_t* hashes) {
  const uint64_t gid = static_cast<uint64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const uint64_t c = gid / 8;
  const int lane = static_cast<int>(gid % 8);
  // Every thread of a warp reaches the shuffles; those past the last chunk carry nothing.
  const bool real = c < l.chunks();
  const uint64_t len = real ? l.length(c) : 0;
  const bool is_long = len > x::kMidSizeMax;
  const uint8_t* in = l.src + c * l.chunk_bytes;
  uint64_t acc = 0, raw = 0;
  if (is_long) {
    acc = x::InitialAccumulator(lane);
    const x::LongShape shape = x::ShapeOf(len);
    const uint64_t* s = sums + l.first_slot(c) * 8 + lane;
    const uint64_t key = x::ScrambleKey(lane, kSecret);
    // The sums do not depend on the chain: load the next 16 while scrambling these 16.
    constexpr size_t kAhead = 16;
    const size_t batches = shape.full_blocks / kAhead;
    uint64_t now[kAhead], next[kAhead];
    if (batches > 0) {
#pragma unroll
      for (size_t i = 0; i < kAhead; ++i) next[i] = s[i * 8];
    }
    for (size_t batch = 0; batch < batches; ++batch) {
#pragma unroll
      for (size_t i = 0; i < kAhead; ++i) now[i] = next[i];
      if (batch + 1 < batches) {
#pragma unroll
        for (size_t i = 0; i < kAhead; ++i) next[i] = s[((batch + 1) * kAhead + i) * 8];
      }
#pragma unroll
      for (size_t i = 0; i < kAhead; ++i) acc = x::ScrambleLane(acc + now[i], key);
    }
    for (size_t b = batches * kAhead; b < shape.full_blocks; ++b) acc = x::ScrambleLane(acc + s[b * 8], key);
    acc += s[shape.full_blocks * 8];
    raw = x::Read64(in + len - x::kStripe + 8 * lane);
    const uint64_t keyed = raw ^ x::Read64(kSecret + x::kSecretSize - x::kStripe - 7 + 8 * lane);
    acc += (keyed & 0xFFFFFFFFull) * (keyed >> 32);
  }
  // The last stripe gives each lane its neighbour's raw word (lane ^ 1), then lane 0 merges.
  acc += __shfl_xor_sync(0xffffffffu, raw, 1, 8);
  uint64_t all[8];
  for (int i = 0; i < 8; ++i) all[i] = __shfl_sync(0xffffffffu, acc, i, 8);
  if (!real || lane != 0) return;
  hashes[c] = is_long ? x::MergeAccumulators(all, len, kSecret) : x::HashShort(in, len, kSecret);
}

Status CudaFailed(const char* what, cudaError_t err) {
  return Unavailable(std::string("CUDA: ") + what + ": " + cudaGetErrorString(err));
}

// How [0, bytes) splits into chunks and their block sums.
Layout LayoutOf(const void* src, size_t bytes, uint64_t chunk_bytes) {
  Layout l{};
  l.src = static_cast<const uint8_t*>(src);
  l.chunk_bytes = chunk_bytes;
  l.regular = bytes / chunk_bytes;
  l.last_bytes = bytes % chunk_bytes;
  const auto slots_of = [](uint64_t len) {
    return len > x::kMidSizeMax ? x::ShapeOf(len).full_blocks + 1 : 0;
  };
  l.slots_per_regular = slots_of(chunk_bytes);
  l.total_slots = l.regular * l.slots_per_regular + slots_of(l.last_bytes);
  l.aligned16 = reinterpret_cast<uintptr_t>(src) % 16 == 0 && chunk_bytes % 16 == 0;
  return l;
}

}  // namespace

size_t CudaChunkHashScratchBytes(size_t bytes, uint64_t chunk_bytes) {
  return chunk_bytes == 0 ? 0 : LayoutOf(nullptr, bytes, chunk_bytes).total_slots * 64;
}

Status CudaChunkHashes(const void* src, size_t bytes, uint64_t chunk_bytes, uint64_t* hashes, void* stream,
                       void* scratch) {
  if (chunk_bytes == 0) return InvalidArgument("chunk hashes: the chunk size is 0");
  if (bytes == 0) return Status::Ok();
  if (src == nullptr || hashes == nullptr) return InvalidArgument("chunk hashes: a null buffer");
  if (reinterpret_cast<uintptr_t>(hashes) % 8 != 0 || reinterpret_cast<uintptr_t>(scratch) % 8 != 0)
    return InvalidArgument("chunk hashes: the hashes and the scratch must be 8-byte aligned");
  const Layout l = LayoutOf(src, bytes, chunk_bytes);
  const uint64_t chunks = l.chunks();
  constexpr unsigned kThreads = 256;
  if ((chunks * 8 + kThreads - 1) / kThreads > 0x7fffffffull)
    return InvalidArgument("chunk hashes: " + std::to_string(chunks) + " chunks are too many for one launch");
  auto s = static_cast<cudaStream_t>(stream);
  cudaGetLastError();  // an earlier, unrelated launch's error is not this call's
  auto* sums = static_cast<uint64_t*>(scratch);
  const bool own = sums == nullptr && l.total_slots > 0;
  if (own) {
    if (cudaError_t err = cudaMallocAsync(reinterpret_cast<void**>(&sums), l.total_slots * 64, s);
        err != cudaSuccess)
      return CudaFailed("chunk hashes: allocating the block sums", err);
  }
  if (l.total_slots > 0) {
    const uint64_t blocks = std::min<uint64_t>((2 * l.total_slots + kThreads - 1) / kThreads, 1u << 20);
    BlockSumsKernel<<<static_cast<unsigned>(blocks), kThreads, 0, s>>>(l, sums);
    if (cudaError_t err = cudaGetLastError(); err != cudaSuccess) {
      if (own) cudaFreeAsync(sums, s);
      return CudaFailed("launching the block sums", err);
    }
  }
  FinishKernel<<<static_cast<unsigned>((chunks * 8 + kThreads - 1) / kThreads), kThreads, 0, s>>>(l, sums,
                                                                                                  hashes);
  const cudaError_t launched = cudaGetLastError();
  if (own) cudaFreeAsync(sums, s);
  return launched == cudaSuccess ? Status::Ok() : CudaFailed("launching the chunk hash finish", launched);
}

}  // namespace weightport
