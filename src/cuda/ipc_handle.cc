// CudaIpcHandle as text: 128 hex digits of handle, 16 of byte count, 8 of device, so that a
// truncated or mistyped copy is refused rather than mapping the wrong memory.
#include <cstdio>
#include <string>

#include "weightport/cuda/ipc.h"

namespace weightport {
namespace {
constexpr size_t kHexDigits = 2 * 64 + 16 + 8;

int HexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}
}  // namespace

std::string CudaIpcHandle::ToHex() const {
  std::string out;
  out.reserve(kHexDigits);
  char buf[17];
  for (uint8_t b : handle) {
    std::snprintf(buf, sizeof buf, "%02x", b);
    out += buf;
  }
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(bytes));
  out += buf;
  std::snprintf(buf, sizeof buf, "%08x", static_cast<uint32_t>(device));
  out += buf;
  return out;
}

Result<CudaIpcHandle> CudaIpcHandle::FromHex(std::string_view hex) {
  if (hex.size() != kHexDigits)
    return InvalidArgument("CUDA IPC handle: " + std::to_string(hex.size()) + " characters, expected " +
                           std::to_string(kHexDigits) + " hex digits");
  for (size_t i = 0; i < hex.size(); ++i)
    if (HexValue(hex[i]) < 0)
      return InvalidArgument("CUDA IPC handle: character " + std::to_string(i) + " ('" +
                             std::string(1, hex[i]) + "') is not a hex digit");
  const auto field = [&](size_t at, size_t digits) {
    uint64_t v = 0;
    for (size_t i = 0; i < digits; ++i) v = v << 4 | static_cast<uint64_t>(HexValue(hex[at + i]));
    return v;
  };
  CudaIpcHandle h;
  for (size_t i = 0; i < h.handle.size(); ++i) h.handle[i] = static_cast<uint8_t>(field(2 * i, 2));
  h.bytes = field(128, 16);
  h.device = static_cast<int32_t>(static_cast<uint32_t>(field(144, 8)));
  if (h.device < 0)
    return InvalidArgument("CUDA IPC handle: device " + std::to_string(h.device) + " is negative");
  return h;
}

}  // namespace weightport
