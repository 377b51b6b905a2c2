#include "weightport/core/hash.h"

#define XXH_STATIC_LINKING_ONLY  // XXH3_state_t on the stack
#include <xxhash.h>
#if WEIGHTPORT_XXH3_DISPATCH
// libxxhash's own runtime choice of AVX512 / AVX2 / SSE2 (its entry points of the same names are
// built for the baseline ISA only): it replaces XXH3_64bits and XXH3_64bits_update below. On this
// project's machines it hashes cold memory at ~32 GB/s against ~19 GB/s, which is what lets a
// subscriber verify each chunk at the speed it copies it.
#include <xxh_x86dispatch.h>
#endif

#include <cstdio>
#include <new>

namespace weightport {
namespace {

// The dispatch picks its implementation on first use and stores it without a lock; the first use
// happens here, before main starts any thread.
[[maybe_unused]] const uint64_t kWarmDispatch = XXH3_64bits("", 0);

XXH3_state_t* State(unsigned char* bytes) { return reinterpret_cast<XXH3_state_t*>(bytes); }
const XXH3_state_t* State(const unsigned char* bytes) { return reinterpret_cast<const XXH3_state_t*>(bytes); }

}  // namespace

static_assert(sizeof(XXH3_state_t) <= 576 && alignof(XXH3_state_t) <= 64, "Xxh3Stream::state_ is too small");

uint64_t Xxh3(const void* data, size_t size) { return XXH3_64bits(data, size); }
uint64_t Xxh3(std::span<const std::byte> data) { return XXH3_64bits(data.data(), data.size()); }

Xxh3Stream::Xxh3Stream() { XXH3_64bits_reset(new (state_) XXH3_state_t); }
void Xxh3Stream::Update(const void* data, size_t size) { XXH3_64bits_update(State(state_), data, size); }
uint64_t Xxh3Stream::Digest() const { return XXH3_64bits_digest(State(state_)); }

std::vector<uint64_t> ChunkHashes(std::span<const std::byte> data, uint64_t chunk_size) {
  uint64_t whole = 0;
  return ChunkHashes(data, chunk_size, whole);
}

std::vector<uint64_t> ChunkHashes(std::span<const std::byte> data, uint64_t chunk_size, uint64_t& whole) {
  std::vector<uint64_t> out;
  if (chunk_size == 0 || data.empty()) {
    whole = XXH3_64bits(data.data(), data.size());
    return out;
  }
  Xxh3Stream stream;
  out.reserve((data.size() + chunk_size - 1) / chunk_size);
  for (uint64_t off = 0; off < data.size(); off += chunk_size) {
    uint64_t n = std::min<uint64_t>(chunk_size, data.size() - off);
    out.push_back(XXH3_64bits(data.data() + off, n));
    stream.Update(data.data() + off, n);
  }
  whole = stream.Digest();
  return out;
}

std::string HashToHex(uint64_t hash) {
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(hash));
  return buf;
}

}  // namespace weightport
