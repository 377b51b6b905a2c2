#include "weightport/core/printable.h"

#include <cstdio>

namespace weightport {

std::string Printable(std::string_view text, size_t max_bytes) {
  std::string out;
  out.reserve(text.size() < max_bytes ? text.size() : max_bytes);
  for (size_t i = 0; i < text.size(); ++i) {
    if (i == max_bytes) return out + "...";
    const auto u = static_cast<unsigned char>(text[i]);
    if (u >= 0x20 && u < 0x7f && u != '\\') {
      out += static_cast<char>(u);
    } else {
      char buf[5];
      std::snprintf(buf, sizeof(buf), "\\x%02x", u);
      out += buf;
    }
  }
  return out;
}

bool IsPrintableAscii(std::string_view text) {
  for (char c : text)
    if (static_cast<unsigned char>(c) < 0x20 || static_cast<unsigned char>(c) >= 0x7f) return false;
  return true;
}

std::string ReplaceUnprintable(std::string_view text, size_t max_bytes) {
  std::string out(text.substr(0, max_bytes));
  for (char& c : out) {
    const auto u = static_cast<unsigned char>(c);
    if (u < 0x20 || u >= 0x7f) c = '?';
  }
  return out;
}

}  // namespace weightport
