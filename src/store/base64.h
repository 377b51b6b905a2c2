// Standard base64 (RFC 4648, with padding), the form etcd's JSON gateway gives keys and values in.
// Internal to the store layer.
//
// Thread-safety: pure functions.
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace weightport::store_internal {

std::string Base64Encode(std::string_view bytes);
// nullopt when `text` is not padded base64 (a length not a multiple of 4, a character
// outside the alphabet, padding anywhere but the end).
std::optional<std::string> Base64Decode(std::string_view text);

}  // namespace weightport::store_internal
