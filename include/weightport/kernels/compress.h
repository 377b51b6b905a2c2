// Per-chunk zstd compression for slow links, and the rule for when it pays.
//
// A chunk travels compressed only when that is faster end to end. Chunks stream through a
// pipeline (compress at the sender, the link, decompress at the receiver), so the rate of a long
// transfer is the slowest stage: compressed, min(compressor, link x ratio, decompressor) source
// bytes per second; plain, the link rate. Weights in bf16 compress little (their exponent bytes
// do, their mantissas do not); deltas between versions compress well.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "weightport/core/status.h"

namespace weightport::kernels {

// Appends nothing; replaces `out` with the zstd frame of `src` at `level` (1..19; negative levels
// are zstd's fast modes). Errors name the level or zstd's reason.
Status ZstdCompress(std::span<const std::byte> src, int level, std::vector<std::byte>& out);
// The largest frame ZstdCompress can make of `bytes` bytes.
size_t ZstdBound(size_t bytes);
// Decompresses a frame into exactly `dst.size()` bytes: a frame that is corrupt, truncated or of
// another size is an error, and `dst` may then hold garbage.
Status ZstdDecompress(std::span<const std::byte> frame, std::span<std::byte> dst);

struct CompressionRates {
  double link_bytes_per_s = 0;        // the slowest link on the chunk's path
  double compress_bytes_per_s = 0;    // source bytes per second, one sender thread
  double decompress_bytes_per_s = 0;  // source bytes per second, one receiver thread
};
// Source bytes per second of a long transfer of chunks that compress by `ratio` (source bytes /
// compressed bytes), compressed and plain.
double CompressedRate(const CompressionRates& rates, double ratio);
// Compress when the compressed pipeline beats the plain link by at least `margin` (0.1 = 10%):
// the link is slower than the compressor and the chunk compresses.
bool WorthCompressing(const CompressionRates& rates, double ratio, double margin = 0.1);

// The ratio of `sample` (a chunk, or its first bytes) at `level`; 1 when it does not compress.
Result<double> CompressionRatio(std::span<const std::byte> sample, int level = 1);

}  // namespace weightport::kernels
