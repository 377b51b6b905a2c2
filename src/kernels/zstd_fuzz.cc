// libFuzzer target: a chunk frame from a peer must decompress into exactly the chunk's bytes or be
// an error; never a crash, a read outside the frame or a write outside the chunk. The first two
// input bytes choose the chunk size, the rest is the frame.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <span>
#include <vector>

#include "weightport/kernels/compress.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 2) return 0;
  const size_t chunk = (static_cast<size_t>(data[0]) << 8 | data[1]) * 16;
  const std::span<const std::byte> frame(reinterpret_cast<const std::byte*>(data + 2), size - 2);
  std::vector<std::byte> out(chunk);
  weightport::Status st = weightport::kernels::ZstdDecompress(frame, out);
  if (!st.ok() && st.message().empty()) std::abort();
  if (st.ok()) {
    // A frame that decoded must re-encode and decode to the same bytes.
    std::vector<std::byte> again, back(chunk);
    if (!weightport::kernels::ZstdCompress(out, 1, again).ok()) std::abort();
    if (!weightport::kernels::ZstdDecompress(again, back).ok() || back != out) std::abort();
  }
  return 0;
}
