// Content hashes: xxh3-64 over bytes, whole or in fixed-size chunks.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace weightport {

uint64_t Xxh3(std::span<const std::byte> data);
uint64_t Xxh3(const void* data, size_t size);

// Hash of each chunk of `chunk_size` bytes (the last one may be shorter). Empty data: no chunks.
std::vector<uint64_t> ChunkHashes(std::span<const std::byte> data, uint64_t chunk_size);
// The same, and Xxh3(data) in `whole`, in one pass over memory: each chunk feeds the whole-data hash
// while it is still in cache.
std::vector<uint64_t> ChunkHashes(std::span<const std::byte> data, uint64_t chunk_size, uint64_t& whole);

// xxh3-64 over pieces fed in order: Digest() equals Xxh3 of their concatenation. Lets a copy hash
// each piece it has just written while the piece is still in cache.
class Xxh3Stream {
 public:
  Xxh3Stream();
  void Update(const void* data, size_t size);
  uint64_t Digest() const;

 private:
  // xxhash's XXH3_state_t, kept opaque so that only hash.cc includes xxhash (checked there).
  alignas(64) unsigned char state_[576];
};

// 16 lower-case hex digits, as xxhsum prints xxh3-64.
std::string HashToHex(uint64_t hash);

}  // namespace weightport
