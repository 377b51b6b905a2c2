#include "weightport/core/hash.h"

#define XXH_STATIC_LINKING_ONLY  // XXH3_state_t on the stack
#include <xxhash.h>

#include <cstdio>

namespace weightport {

uint64_t Xxh3(const void* data, size_t size) { return XXH3_64bits(data, size); }
uint64_t Xxh3(std::span<const std::byte> data) { return XXH3_64bits(data.data(), data.size()); }

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
  XXH3_state_t state;
  XXH3_64bits_reset(&state);
  out.reserve((data.size() + chunk_size - 1) / chunk_size);
  for (uint64_t off = 0; off < data.size(); off += chunk_size) {
    uint64_t n = std::min<uint64_t>(chunk_size, data.size() - off);
    out.push_back(XXH3_64bits(data.data() + off, n));
    XXH3_64bits_update(&state, data.data() + off, n);
  }
  whole = XXH3_64bits_digest(&state);
  return out;
}

std::string HashToHex(uint64_t hash) {
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(hash));
  return buf;
}

}  // namespace weightport
