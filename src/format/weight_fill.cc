// Deterministic weight-like content for synthetic tensors.
//
// Each tensor is cut into blocks of kBlockElems elements; block b draws from a splitmix64 stream
// seeded by (seed, tensor name, b). Blocks are independent, so they fill in parallel and the bytes
// do not depend on the thread count.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <thread>
#include <vector>

#include "float_bits.h"
#include "weightport/core/hash.h"
#include "weightport/format/synthetic_model.h"

namespace weightport {
namespace {

constexpr uint64_t kBlockElems = 1u << 16;

inline uint64_t SplitMix64(uint64_t& state) {
  uint64_t z = (state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

// Approximately standard normal: Irwin-Hall sum of four 16-bit uniforms, rescaled to unit variance.
// Bell-shaped, bounded at +-3.46, one random draw per value.
inline float NearNormal(uint64_t r) {
  const uint32_t s = static_cast<uint32_t>(r & 0xffff) + static_cast<uint32_t>((r >> 16) & 0xffff) +
                     static_cast<uint32_t>((r >> 32) & 0xffff) + static_cast<uint32_t>(r >> 48);
  constexpr float kScale = 1.7320508f / 65536.0f;  // sqrt(3) / 2^16
  return (static_cast<float>(s) + 2.0f - 2.0f * 65536.0f) * kScale;
}

struct Distribution {
  float mean;
  float stddev;
};

Distribution ForTensor(const std::string& name) {
  // RMSNorm scales sit around 1; projections and embeddings around 0 with std 0.02 (the common
  // initialiser range, and close to trained Llama weights).
  if (name.find("norm") != std::string::npos) return {1.0f, 0.1f};
  return {0.0f, 0.02f};
}

void FillBlocks(const TensorMeta& meta, uint64_t tensor_seed, Distribution dist, uint64_t first_block,
                uint64_t end_block, std::byte* out) {
  const uint64_t n = static_cast<uint64_t>(meta.num_elements());
  for (uint64_t b = first_block; b < end_block; ++b) {
    uint64_t state = tensor_seed ^ (b * 0xd1b54a32d192ed03ull);
    const uint64_t begin = b * kBlockElems, end = std::min(n, begin + kBlockElems);
    for (uint64_t i = begin; i < end; ++i) {
      const float v = dist.mean + dist.stddev * NearNormal(SplitMix64(state));
      switch (meta.dtype) {
        case DType::kF32:
          std::memcpy(out + i * 4, &v, 4);
          break;
        case DType::kBF16: {
          const uint16_t h = float_bits::F32ToBf16(v);
          std::memcpy(out + i * 2, &h, 2);
          break;
        }
        default: {  // kF16, checked by the caller
          const uint16_t h = float_bits::F32ToF16(v);
          std::memcpy(out + i * 2, &h, 2);
          break;
        }
      }
    }
  }
}

}  // namespace

Status FillTensor(const TensorMeta& meta, uint64_t seed, std::span<std::byte> out) {
  if (meta.dtype != DType::kF32 && meta.dtype != DType::kBF16 && meta.dtype != DType::kF16)
    return InvalidArgument("tensor '" + meta.name + "': synthetic weights support f32, bf16 and f16, not " +
                           std::string(DTypeName(meta.dtype)));
  if (out.size() != meta.bytes)
    return InvalidArgument("tensor '" + meta.name + "': output buffer holds " + std::to_string(out.size()) +
                           " bytes, tensor needs " + std::to_string(meta.bytes));
  const uint64_t tensor_seed = seed * 0x9e3779b97f4a7c15ull ^ Xxh3(meta.name.data(), meta.name.size());
  const Distribution dist = ForTensor(meta.name);
  const uint64_t n = static_cast<uint64_t>(meta.num_elements());
  const uint64_t blocks = (n + kBlockElems - 1) / kBlockElems;
  const unsigned threads = static_cast<unsigned>(
      std::min<uint64_t>({blocks / 8 + 1, std::max(1u, std::thread::hardware_concurrency()), 16}));
  if (threads <= 1) {
    FillBlocks(meta, tensor_seed, dist, 0, blocks, out.data());
    return Status::Ok();
  }
  std::vector<std::thread> pool;
  const uint64_t per = (blocks + threads - 1) / threads;
  for (unsigned t = 0; t < threads; ++t) {
    const uint64_t b0 = t * per, b1 = std::min(blocks, b0 + per);
    if (b0 >= b1) break;
    pool.emplace_back(FillBlocks, std::cref(meta), tensor_seed, dist, b0, b1, out.data());
  }
  for (auto& th : pool) th.join();
  return Status::Ok();
}

}  // namespace weightport
