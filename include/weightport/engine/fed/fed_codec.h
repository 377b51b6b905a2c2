// Federated rounds' numbers (fed_server.h): a client's update chunk encoded on the wire (f32, bf16
// or fp8 e4m3 with one scale per chunk, zstd where it shrinks, with error feedback), and the
// server's streaming FedAvg sum.
//
// Thread-safety: free functions; a FedAggregator from one thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "weightport/control/protocol.h"
#include "weightport/core/status.h"

namespace weightport {

enum class FedEncoding : uint8_t { kF32 = 0, kBF16 = 1, kFP8 = 2 };
const char* FedEncodingName(FedEncoding e);  // "f32", "bf16", "fp8"
Result<FedEncoding> ParseFedEncoding(std::string_view name);

// One chunk of an update on the wire.
struct FedChunk {
  FedEncoding encoding = FedEncoding::kF32;
  float scale = 1;          // fp8: the factor that dequantises
  uint32_t raw_bytes = 0;   // encoded size before compression
  bool compressed = false;  // `data` is a zstd frame of the raw bytes
  Bytes data;
};

// Encodes `update` (one chunk of f32) with error feedback: `residual` (same length, kept by the
// client across rounds) is added first and receives what the encoding lost. zstd when it shrinks
// the bytes by 10% or more and `compress`. `sent`, when not empty, receives what the chunk decodes
// to: what the aggregator folds.
FedChunk EncodeUpdateChunk(std::span<const float> update, std::span<float> residual, FedEncoding encoding,
                           bool compress, std::span<float> sent = {});
// Decodes into `out` (the chunk's element count). InvalidArgument when the chunk is malformed, of
// another size, or holds a value that is not finite.
Status DecodeUpdateChunk(const FedChunk& chunk, std::span<float> out);

// The streaming FedAvg: a running weighted sum and weight per chunk.
class FedAggregator {
 public:
  FedAggregator(uint64_t elements, uint32_t chunk_elements);
  uint32_t chunks() const { return chunks_; }
  std::span<const float> ChunkOf(std::span<const float> model, uint32_t chunk) const;
  // Adds weight * values (chunk `chunk`'s elements) to the sum.
  void Fold(uint32_t chunk, double weight, std::span<const float> values);
  // global += sum / weight, per chunk that received anything; then empties the sums.
  void ApplyTo(std::span<float> global);
  double weight(uint32_t chunk) const { return weights_[chunk]; }
  uint64_t bytes() const { return sum_.size() * sizeof(float) + weights_.size() * sizeof(double); }

 private:
  uint64_t elements_;
  uint32_t chunk_elements_, chunks_;
  std::vector<float> sum_;
  std::vector<double> weights_;
};

}  // namespace weightport
