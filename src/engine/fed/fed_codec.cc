// Update chunks on the wire (f32, bf16 or fp8 e4m3 with error feedback, zstd where it pays) and the
// streaming FedAvg sums.
#include "weightport/engine/fed/fed_codec.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "weightport/kernels/compress.h"
#include "weightport/kernels/convert.h"

namespace weightport {

const char* FedEncodingName(FedEncoding e) {
  switch (e) {
    case FedEncoding::kF32:
      return "f32";
    case FedEncoding::kBF16:
      return "bf16";
    case FedEncoding::kFP8:
      return "fp8";
  }
  return "?";
}

Result<FedEncoding> ParseFedEncoding(std::string_view name) {
  if (name == "f32") return FedEncoding::kF32;
  if (name == "bf16") return FedEncoding::kBF16;
  if (name == "fp8") return FedEncoding::kFP8;
  return InvalidArgument("update encoding must be f32, bf16 or fp8, got '" + std::string(name) + "'");
}

namespace {

size_t ElementBytes(FedEncoding e) { return e == FedEncoding::kF32 ? 4 : e == FedEncoding::kBF16 ? 2 : 1; }

// The encoded bytes of `values`, and what they decode to (into `decoded`).
Bytes Quantize(std::span<const float> values, FedEncoding encoding, float& scale, std::span<float> decoded) {
  const size_t n = values.size();
  Bytes raw(n * ElementBytes(encoding));
  scale = 1;
  switch (encoding) {
    case FedEncoding::kF32:
      std::memcpy(raw.data(), values.data(), raw.size());
      std::copy(values.begin(), values.end(), decoded.begin());
      break;
    case FedEncoding::kBF16:
      kernels::Convert(DType::kF32, DType::kBF16, values.data(), raw.data(), n).IgnoreError();
      kernels::Convert(DType::kBF16, DType::kF32, raw.data(), decoded.data(), n).IgnoreError();
      break;
    case FedEncoding::kFP8:
      // One scale for the chunk: a 1 x n tensor, per-tensor scaling.
      kernels::QuantizeE4m3(DType::kF32, values.data(), 1, static_cast<int64_t>(n),
                            kernels::Fp8Scaling::kPerTensor, reinterpret_cast<uint8_t*>(raw.data()), &scale)
          .IgnoreError();
      kernels::DequantizeE4m3(reinterpret_cast<const uint8_t*>(raw.data()), &scale, 1,
                              static_cast<int64_t>(n), kernels::Fp8Scaling::kPerTensor, DType::kF32,
                              decoded.data())
          .IgnoreError();
      break;
  }
  return raw;
}

}  // namespace

FedChunk EncodeUpdateChunk(std::span<const float> update, std::span<float> residual, FedEncoding encoding,
                           bool compress, std::span<float> sent) {
  const size_t n = update.size();
  std::vector<float> target(n), decoded(n);
  for (size_t i = 0; i < n; ++i) target[i] = update[i] + residual[i];
  FedChunk chunk;
  chunk.encoding = encoding;
  Bytes raw = Quantize(target, encoding, chunk.scale, decoded);
  for (size_t i = 0; i < n; ++i) residual[i] = target[i] - decoded[i];  // what this round could not send
  if (!sent.empty()) std::copy(decoded.begin(), decoded.end(), sent.begin());
  chunk.raw_bytes = static_cast<uint32_t>(raw.size());
  if (compress) {
    std::vector<std::byte> frame;
    if (kernels::ZstdCompress(raw, 1, frame).ok() && frame.size() * 10 <= raw.size() * 9) {
      chunk.compressed = true;
      chunk.data.assign(frame.begin(), frame.end());
      return chunk;
    }
  }
  chunk.data = std::move(raw);
  return chunk;
}

Status DecodeUpdateChunk(const FedChunk& chunk, std::span<float> out) {
  const size_t n = out.size();
  const size_t want = n * ElementBytes(chunk.encoding);
  if (chunk.raw_bytes != want)
    return InvalidArgument("update chunk of " + std::to_string(chunk.raw_bytes) + " bytes, " +
                           std::to_string(want) + " expected (" + std::to_string(n) + " " +
                           FedEncodingName(chunk.encoding) + " elements)");
  Bytes raw;
  ByteView bytes = chunk.data;
  if (chunk.compressed) {
    raw.resize(want);
    WP_RETURN_IF_ERROR(kernels::ZstdDecompress(chunk.data, raw).WithContext("update chunk"));
    bytes = raw;
  } else if (chunk.data.size() != want) {
    return InvalidArgument("update chunk carries " + std::to_string(chunk.data.size()) + " bytes, " +
                           std::to_string(want) + " expected");
  }
  switch (chunk.encoding) {
    case FedEncoding::kF32:
      std::memcpy(out.data(), bytes.data(), want);
      break;
    case FedEncoding::kBF16:
      WP_RETURN_IF_ERROR(kernels::Convert(DType::kBF16, DType::kF32, bytes.data(), out.data(), n));
      break;
    case FedEncoding::kFP8:
      if (!std::isfinite(chunk.scale) || chunk.scale <= 0)
        return InvalidArgument("fp8 update chunk with scale " + std::to_string(chunk.scale));
      WP_RETURN_IF_ERROR(kernels::DequantizeE4m3(reinterpret_cast<const uint8_t*>(bytes.data()), &chunk.scale,
                                                 1, static_cast<int64_t>(n), kernels::Fp8Scaling::kPerTensor,
                                                 DType::kF32, out.data()));
      break;
    default:
      return InvalidArgument("update chunk: unknown encoding " +
                             std::to_string(static_cast<int>(chunk.encoding)));
  }
  for (size_t i = 0; i < n; ++i)
    if (!std::isfinite(out[i]))
      return InvalidArgument("update chunk holds a value that is not finite at element " + std::to_string(i));
  return Status::Ok();
}

FedAggregator::FedAggregator(uint64_t elements, uint32_t chunk_elements)
    : elements_(elements),
      chunk_elements_(chunk_elements),
      chunks_(static_cast<uint32_t>((elements + chunk_elements - 1) / chunk_elements)),
      sum_(elements, 0.0f),
      weights_(chunks_, 0.0) {}

std::span<const float> FedAggregator::ChunkOf(std::span<const float> model, uint32_t chunk) const {
  const uint64_t begin = static_cast<uint64_t>(chunk) * chunk_elements_;
  return model.subspan(begin, std::min<uint64_t>(chunk_elements_, elements_ - begin));
}

void FedAggregator::Fold(uint32_t chunk, double weight, std::span<const float> values) {
  float* sum = sum_.data() + static_cast<uint64_t>(chunk) * chunk_elements_;
  const float w = static_cast<float>(weight);
  for (size_t i = 0; i < values.size(); ++i) sum[i] += w * values[i];
  weights_[chunk] += weight;
}

void FedAggregator::ApplyTo(std::span<float> global) {
  for (uint32_t c = 0; c < chunks_; ++c) {
    const uint64_t begin = static_cast<uint64_t>(c) * chunk_elements_;
    const uint64_t n = std::min<uint64_t>(chunk_elements_, elements_ - begin);
    if (weights_[c] > 0) {
      const float inv = static_cast<float>(1.0 / weights_[c]);
      for (uint64_t i = 0; i < n; ++i) global[begin + i] += sum_[begin + i] * inv;
    }
    std::fill_n(sum_.data() + begin, n, 0.0f);
    weights_[c] = 0;
  }
}

}  // namespace weightport
