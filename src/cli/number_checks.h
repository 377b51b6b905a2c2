// Validators for numeric command-line options that CLI11's own do not cover.
#pragma once

#include <CLI/CLI.hpp>

namespace weightport::cli {

// A finite number in [lo, hi]. CLI::Range lets "nan" through (every comparison with NaN is false),
// and a NaN reached byte counts, sampling loops and lround().
CLI::Validator FiniteRange(double lo, double hi);
// An integer >= 0 that fits 64 bits (a seed). CLI11 parses "-1" into an unsigned as 2^64 - 1, and
// CLI::Range and CLI::NonNegativeNumber let it through or print the double's full range.
CLI::Validator NonNegativeInteger();

}  // namespace weightport::cli
