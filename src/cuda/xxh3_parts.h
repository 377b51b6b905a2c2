// XXH3-64 (seed 0, the default secret) taken apart so that a GPU can compute it in parallel and
// still produce libxxhash's bytes: the GPU chunk hashes (cuda/hash.cu) are built from these
// functions, and xxh3_parts_test.cc checks on the CPU that the same parts, put together the way
// the kernels put them together, equal XXH3_64bits for every length class.
//
// Why it parallelises: inputs over 240 bytes are read in blocks of 16 stripes of 64 bytes. Within
// a block a stripe only ADDS to the 8 accumulators (mod 2^64) a value that depends on the stripe
// and the secret, never on the accumulators, and lanes interact only in pairs (i, i ^ 1). So every
// block's sum can be computed at once, in two independent quartets of lanes (two threads per
// block); only the per-block scramble, a few instructions per lane, runs in order. Follows the scalar code of
// xxhash 0.8 (XXH3_accumulate_512_scalar, XXH3_scrambleAcc_scalar, XXH3_hashLong_internal_loop,
// XXH3_mergeAccs, the short-input paths).
#pragma once

#include <cstddef>
#include <cstdint>

#if defined(__CUDACC__)
#define WP_XXH3_FN __host__ __device__ __forceinline__
#else
#define WP_XXH3_FN inline
#endif

namespace weightport::xxh3 {

// The default secret (XXH3_kSecret), as an initializer so that the GPU side can place a copy in
// constant memory. Every function below takes the secret as an argument for the same reason.
#define WP_XXH3_SECRET_BYTES                                                                              \
  {                                                                                                       \
    0xb8, 0xfe, 0x6c, 0x39, 0x23, 0xa4, 0x4b, 0xbe, 0x7c, 0x01, 0x81, 0x2c, 0xf7, 0x21, 0xad, 0x1c, 0xde, \
        0xd4, 0x6d, 0xe9, 0x83, 0x90, 0x97, 0xdb, 0x72, 0x40, 0xa4, 0xa4, 0xb7, 0xb3, 0x67, 0x1f, 0xcb,   \
        0x79, 0xe6, 0x4e, 0xcc, 0xc0, 0xe5, 0x78, 0x82, 0x5a, 0xd0, 0x7d, 0xcc, 0xff, 0x72, 0x21, 0xb8,   \
        0x08, 0x46, 0x74, 0xf7, 0x43, 0x24, 0x8e, 0xe0, 0x35, 0x90, 0xe6, 0x81, 0x3a, 0x26, 0x4c, 0x3c,   \
        0x28, 0x52, 0xbb, 0x91, 0xc3, 0x00, 0xcb, 0x88, 0xd0, 0x65, 0x8b, 0x1b, 0x53, 0x2e, 0xa3, 0x71,   \
        0x64, 0x48, 0x97, 0xa2, 0x0d, 0xf9, 0x4e, 0x38, 0x19, 0xef, 0x46, 0xa9, 0xde, 0xac, 0xd8, 0xa8,   \
        0xfa, 0x76, 0x3f, 0xe3, 0x9c, 0x34, 0x3f, 0xf9, 0xdc, 0xbb, 0xc7, 0xc7, 0x0b, 0x4f, 0x1d, 0x8a,   \
        0x51, 0xe0, 0x4b, 0xcd, 0xb4, 0x59, 0x31, 0xc8, 0x9f, 0x7e, 0xc9, 0xd9, 0x78, 0x73, 0x64, 0xea,   \
        0xc5, 0xac, 0x83, 0x34, 0xd3, 0xeb, 0xc3, 0xc5, 0x81, 0xa0, 0xff, 0xfa, 0x13, 0x63, 0xeb, 0x17,   \
        0x0d, 0xdd, 0x51, 0xb7, 0xf0, 0xda, 0x49, 0xd3, 0x16, 0x55, 0x26, 0x29, 0xd4, 0x68, 0x9e, 0x2b,   \
        0x16, 0xbe, 0x58, 0x7d, 0x47, 0xa1, 0xfc, 0x8f, 0xf8, 0xb8, 0xd1, 0x7a, 0xd0, 0x31, 0xce, 0x45,   \
        0xcb, 0x3a, 0x8f, 0x95, 0x16, 0x04, 0x28, 0xaf, 0xd7, 0xfb, 0xca, 0xbb, 0x4b, 0x40, 0x7e          \
  }

inline constexpr size_t kSecretSize = 192;
inline constexpr size_t kStripe = 64;
inline constexpr size_t kStripesPerBlock = (kSecretSize - kStripe) / 8;  // 16
inline constexpr size_t kBlock = kStripe * kStripesPerBlock;             // 1024
inline constexpr size_t kMidSizeMax = 240;                               // longer inputs take the block path
inline constexpr uint64_t kPrime32_1 = 0x9E3779B1u, kPrime32_2 = 0x85EBCA77u, kPrime32_3 = 0xC2B2AE3Du;
inline constexpr uint64_t kPrime64_1 = 0x9E3779B185EBCA87ull, kPrime64_2 = 0xC2B2AE3D27D4EB4Full,
                          kPrime64_3 = 0x165667B19E3779F9ull, kPrime64_4 = 0x85EBCA77C2B2AE63ull,
                          kPrime64_5 = 0x27D4EB2F165667C5ull;

// Little-endian reads at any alignment, byte by byte (the inputs of the short paths, the last
// stripe and the secret's odd offsets are not aligned).
WP_XXH3_FN uint64_t Read64(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}
WP_XXH3_FN uint32_t Read32(const uint8_t* p) {
  return static_cast<uint32_t>(p[0]) | static_cast<uint32_t>(p[1]) << 8 | static_cast<uint32_t>(p[2]) << 16 |
         static_cast<uint32_t>(p[3]) << 24;
}

WP_XXH3_FN uint64_t Mul128Fold64(uint64_t a, uint64_t b) {
#if defined(__CUDA_ARCH__)
  return (a * b) ^ __umul64hi(a, b);
#else
  const unsigned __int128 p = static_cast<unsigned __int128>(a) * b;
  return static_cast<uint64_t>(p) ^ static_cast<uint64_t>(p >> 64);
#endif
}
WP_XXH3_FN uint64_t Rotl64(uint64_t v, int r) { return (v << r) | (v >> (64 - r)); }
WP_XXH3_FN uint64_t Swap64(uint64_t v) {
  uint64_t r = 0;
  for (int i = 0; i < 8; ++i) r = (r << 8) | ((v >> (8 * i)) & 0xff);
  return r;
}
WP_XXH3_FN uint64_t Avalanche(uint64_t h) {
  h ^= h >> 37;
  h *= 0x165667919E3779F9ull;
  return h ^ (h >> 32);
}
WP_XXH3_FN uint64_t Xxh64Avalanche(uint64_t h) {
  h ^= h >> 33;
  h *= kPrime64_2;
  h ^= h >> 29;
  h *= kPrime64_3;
  return h ^ (h >> 32);
}
WP_XXH3_FN uint64_t Rrmxmx(uint64_t h, uint64_t len) {
  h ^= Rotl64(h, 49) ^ Rotl64(h, 24);
  h *= 0x9FB21C651E98DF25ull;
  h ^= (h >> 35) + len;
  h *= 0x9FB21C651E98DF25ull;
  return h ^ (h >> 28);
}
WP_XXH3_FN uint64_t Mix16(const uint8_t* in, const uint8_t* secret) {
  return Mul128Fold64(Read64(in) ^ Read64(secret), Read64(in + 8) ^ Read64(secret + 8));
}

// Inputs of at most 240 bytes: one thread, straight through.
WP_XXH3_FN uint64_t HashShort(const uint8_t* in, size_t len, const uint8_t* secret) {
  if (len > 128) {
    uint64_t acc = len * kPrime64_1;
    for (int i = 0; i < 8; ++i) acc += Mix16(in + 16 * i, secret + 16 * i);
    acc = Avalanche(acc);
    const int rounds = static_cast<int>(len) / 16;
    for (int i = 8; i < rounds; ++i) acc += Mix16(in + 16 * i, secret + 16 * (i - 8) + 3);
    acc += Mix16(in + len - 16, secret + 136 - 17);
    return Avalanche(acc);
  }
  if (len > 16) {
    uint64_t acc = len * kPrime64_1;
    if (len > 32) {
      if (len > 64) {
        if (len > 96) {
          acc += Mix16(in + 48, secret + 96);
          acc += Mix16(in + len - 64, secret + 112);
        }
        acc += Mix16(in + 32, secret + 64);
        acc += Mix16(in + len - 48, secret + 80);
      }
      acc += Mix16(in + 16, secret + 32);
      acc += Mix16(in + len - 32, secret + 48);
    }
    acc += Mix16(in, secret);
    acc += Mix16(in + len - 16, secret + 16);
    return Avalanche(acc);
  }
  if (len > 8) {
    const uint64_t lo = Read64(in) ^ (Read64(secret + 24) ^ Read64(secret + 32));
    const uint64_t hi = Read64(in + len - 8) ^ (Read64(secret + 40) ^ Read64(secret + 48));
    return Avalanche(len + Swap64(lo) + hi + Mul128Fold64(lo, hi));
  }
  if (len >= 4) {
    const uint64_t in64 = Read32(in + len - 4) + (static_cast<uint64_t>(Read32(in)) << 32);
    return Rrmxmx(in64 ^ (Read64(secret + 8) ^ Read64(secret + 16)), len);
  }
  if (len > 0) {
    const uint32_t combined = static_cast<uint32_t>(in[0]) << 16 | static_cast<uint32_t>(in[len >> 1]) << 24 |
                              static_cast<uint32_t>(in[len - 1]) | static_cast<uint32_t>(len) << 8;
    return Xxh64Avalanche(combined ^ static_cast<uint64_t>(Read32(secret) ^ Read32(secret + 4)));
  }
  return Xxh64Avalanche(Read64(secret + 56) ^ Read64(secret + 64));
}

// How an input over 240 bytes splits: `full_blocks` blocks of 16 stripes, each followed by a
// scramble, then `tail_stripes` stripes (0..15) and the last 64 bytes of the input.
struct LongShape {
  size_t full_blocks;
  size_t tail_stripes;
};
WP_XXH3_FN LongShape ShapeOf(size_t len) {
  const size_t blocks = (len - 1) / kBlock;
  return {blocks, ((len - 1) - kBlock * blocks) / kStripe};
}

// What one quartet of lanes, [first, first + 4) with first 0 or 4, of one stripe adds to those
// accumulators: data holds the stripe's 4 words there, keys the secret's words at the stripe's
// offset (Key(stripe_in_block, first + j)). Lane i adds to itself the product of its keyed halves
// and gives its raw value to lane i ^ 1, which stays within the quartet.
WP_XXH3_FN void AddQuartet(const uint64_t data[4], const uint64_t keys[4], uint64_t sum[4]) {
  for (int j = 0; j < 4; ++j) {
    const uint64_t key = data[j] ^ keys[j];
    sum[j ^ 1] += data[j];
    sum[j] += (key & 0xFFFFFFFFull) * (key >> 32);
  }
}
// The secret word lane `lane` of stripe `stripe_in_block` is keyed with: word stripe + lane of the
// secret, always 8-byte aligned, so the GPU keeps the secret as 24 words in shared memory.
WP_XXH3_FN uint64_t StripeKey(size_t stripe_in_block, int lane, const uint8_t* secret) {
  return Read64(secret + 8 * (stripe_in_block + lane));
}

// The accumulators' starting values, lane by lane (a switch rather than a table: the GPU keeps a
// table indexed at run time in a stack frame).
WP_XXH3_FN uint64_t InitialAccumulator(int lane) {
  switch (lane) {
    case 0:
      return kPrime32_3;
    case 1:
      return kPrime64_1;
    case 2:
      return kPrime64_2;
    case 3:
      return kPrime64_3;
    case 4:
      return kPrime64_4;
    case 5:
      return kPrime32_2;
    case 6:
      return kPrime64_5;
    default:
      return kPrime32_1;
  }
}

// One lane's scramble after a full block, with that lane's ScrambleKey.
WP_XXH3_FN uint64_t ScrambleKey(int lane, const uint8_t* secret) {
  return Read64(secret + kSecretSize - kStripe + 8 * lane);
}
WP_XXH3_FN uint64_t ScrambleLane(uint64_t acc, uint64_t key) {
  return ((acc ^ (acc >> 47)) ^ key) * kPrime32_1;
}

// The last stripe (the input's final 64 bytes, read with its own secret offset).
WP_XXH3_FN void AddLastStripe(uint64_t acc[8], const uint8_t* last64, const uint8_t* secret) {
  for (int i = 0; i < 8; ++i) {
    const uint64_t v = Read64(last64 + 8 * i);
    const uint64_t key = v ^ Read64(secret + kSecretSize - kStripe - 7 + 8 * i);
    acc[i ^ 1] += v;
    acc[i] += (key & 0xFFFFFFFFull) * (key >> 32);
  }
}

WP_XXH3_FN uint64_t MergeAccumulators(const uint64_t acc[8], size_t len, const uint8_t* secret) {
  uint64_t r = len * kPrime64_1;
  for (int i = 0; i < 4; ++i)
    r += Mul128Fold64(acc[2 * i] ^ Read64(secret + 11 + 16 * i),
                      acc[2 * i + 1] ^ Read64(secret + 11 + 16 * i + 8));
  return Avalanche(r);
}

}  // namespace weightport::xxh3
