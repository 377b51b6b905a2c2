// Option validators shared by commands (CLI11 ones that say too little, or miss a case).
#pragma once

#include <string>

#include <CLI/CLI.hpp>

namespace weightport::cli {

// For unsigned options: CLI11 converts "-1" into an unsigned type by wrapping it to 2^64-1, and
// CLI::NonNegativeNumber's message prints DBL_MAX. A leading '-' is a usage error here.
inline const CLI::Validator kNotNegative(
    [](std::string& value) {
      return value.find_first_not_of(" \t") != std::string::npos &&
                     value[value.find_first_not_of(" \t")] == '-'
                 ? "must not be negative, got " + value
                 : std::string();
    },
    "NONNEGATIVE");

}  // namespace weightport::cli
