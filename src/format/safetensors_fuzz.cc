// libFuzzer target: the safetensors header parser must never crash or read outside the input, and
// every tensor range it accepts must lie inside the input.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <span>

#include "weightport/core/hash.h"
#include "weightport/format/safetensors_reader.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::span<const std::byte> file(reinterpret_cast<const std::byte*>(data), size);
  auto header = weightport::ParseSafetensorsHeader(file, "fuzz.safetensors");
  if (!header.ok()) {
    if (header.status().message().empty()) std::abort();
    return 0;
  }
  if (header->data_start < 8 || header->data_start > size) std::abort();
  uint64_t total = 0;
  for (const auto& t : header->tensors) {
    if (t.data.length != t.meta.bytes) std::abort();
    if (t.data.offset > size - header->data_start ||
        t.data.length > size - header->data_start - t.data.offset)
      std::abort();
    // Touch every byte in instrumented code (libxxhash is not built with ASan) so ASan proves the
    // range lies inside the input; then hash it as a user of the range would.
    const auto bytes = file.subspan(header->data_start + t.data.offset, t.data.length);
    uint8_t sum = 0;
    for (std::byte b : bytes) sum ^= static_cast<uint8_t>(b);
    volatile uint64_t h = weightport::Xxh3(bytes) ^ sum;
    (void)h;
    total += t.data.length;
  }
  // Tensors tile the data area exactly.
  if (total != size - header->data_start) std::abort();
  return 0;
}
