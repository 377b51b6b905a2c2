// Text from outside (a peer's refusal reason, a store's key or answer) made safe to log: every byte
// that is not printable ASCII, and the backslash, is written as \xNN, so no such text can forge a
// log line, move the terminal or break a JSON log; long text is cut. Internal to the library.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace weightport {

// `text` with its unprintable bytes escaped, at most `max_bytes` of it (then "...").
std::string Printable(std::string_view text, size_t max_bytes);
// `text` cut at `max_bytes` with every byte outside printable ASCII replaced by '?'. Unlike
// Printable it is idempotent, for text that is stored and compared after a round trip.
std::string ReplaceUnprintable(std::string_view text, size_t max_bytes);
// Whether every byte of `text` is printable ASCII (0x20-0x7e): what Printable's output always is.
bool IsPrintableAscii(std::string_view text);

}  // namespace weightport
