#include "weightport/kernels/compress.h"

#include <algorithm>
#include <string>

#include <zstd.h>

namespace weightport::kernels {

Status ZstdCompress(std::span<const std::byte> src, int level, std::vector<std::byte>& out) {
  if (level < ZSTD_minCLevel() || level > ZSTD_maxCLevel() || level == 0)
    return InvalidArgument("zstd level " + std::to_string(level) + " is outside " +
                           std::to_string(ZSTD_minCLevel()) + ".." + std::to_string(ZSTD_maxCLevel()) +
                           " (0 excluded)");
  out.resize(ZSTD_compressBound(src.size()));
  const size_t n = ZSTD_compress(out.data(), out.size(), src.data(), src.size(), level);
  if (ZSTD_isError(n)) return Internal(std::string("zstd compression failed: ") + ZSTD_getErrorName(n));
  out.resize(n);
  return Status::Ok();
}

size_t ZstdBound(size_t bytes) { return ZSTD_compressBound(bytes); }

Status ZstdDecompress(std::span<const std::byte> frame, std::span<std::byte> dst) {
  const unsigned long long size = ZSTD_getFrameContentSize(frame.data(), frame.size());
  if (size == ZSTD_CONTENTSIZE_ERROR) return DataLoss("zstd: not a zstd frame");
  if (size != ZSTD_CONTENTSIZE_UNKNOWN && size != dst.size())
    return DataLoss("zstd: the frame holds " + std::to_string(size) + " bytes, the chunk is " +
                    std::to_string(dst.size()));
  const size_t n = ZSTD_decompress(dst.data(), dst.size(), frame.data(), frame.size());
  if (ZSTD_isError(n)) return DataLoss(std::string("zstd: ") + ZSTD_getErrorName(n));
  if (n != dst.size())
    return DataLoss("zstd: the frame decompressed to " + std::to_string(n) + " bytes, the chunk is " +
                    std::to_string(dst.size()));
  return Status::Ok();
}

double CompressedRate(const CompressionRates& rates, double ratio) {
  return std::min({rates.compress_bytes_per_s, rates.link_bytes_per_s * std::max(ratio, 0.0),
                   rates.decompress_bytes_per_s});
}

bool WorthCompressing(const CompressionRates& rates, double ratio, double margin) {
  return CompressedRate(rates, ratio) > rates.link_bytes_per_s * (1.0 + margin);
}

Result<double> CompressionRatio(std::span<const std::byte> sample, int level) {
  if (sample.empty()) return 1.0;
  std::vector<std::byte> frame;
  WP_RETURN_IF_ERROR(ZstdCompress(sample, level, frame));
  return std::max(1.0, static_cast<double>(sample.size()) / static_cast<double>(frame.size()));
}

}  // namespace weightport::kernels
