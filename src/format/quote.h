// A tensor or key name quoted for an error message.
#pragma once

#include <string>
#include <string_view>

namespace weightport::format_util {

inline std::string Quote(std::string_view s) { return "'" + std::string(s) + "'"; }

}  // namespace weightport::format_util
