// Parse-time checks for the numeric options of every command: sizes with units, finite ranges, and
// a last pass that refuses negative, non-finite and overflowing values wherever a command forgot.
#pragma once

#include <cstdint>
#include <string>

#include <CLI/CLI.hpp>

#include "weightport/core/option_bounds.h"
#include "weightport/core/status.h"

namespace weightport::cli {

// "4096", "256MiB", "2GiB", "1.5G", "64k" -> bytes. Units are powers of 1024 (k, K, KB and KiB all
// mean 1024). Refuses a sign, a fraction of a byte, a value that overflows 64 bits, and anything
// outside [lo, hi].
Result<uint64_t> ParseByteSize(const std::string& text, uint64_t lo, uint64_t hi);

// A transform for a byte-size option: the text becomes its number of bytes, or the option is
// refused (naming the bounds) at parse time.
CLI::Validator ByteSize(uint64_t lo, uint64_t hi);

// A check for a floating-point option: finite and within [lo, hi]. CLI::Range lets "nan" through
// (every comparison with NaN is false), and a NaN reached byte counts, sampling loops and lround().
CLI::Validator FiniteRange(double lo, double hi);

// A check from the shared table (core/option_bounds.h): the CLI refuses what the Python API
// refuses, with the same words.
CLI::Validator Bounded(const OptionBound& bound);

// An integer >= 0 that fits 64 bits (a seed, a version). CLI11 parses "-1" into an unsigned as
// 2^64 - 1 and saturates 2^64 to 2^64 - 1; CLI::Range and CLI::NonNegativeNumber let it through.
CLI::Validator NonNegativeInteger();

// Walks every option of `app` and its subcommands, and adds to those typed UINT, INT or FLOAT a
// check refusing what no such option means: a minus sign or more than 64 bits on an unsigned one
// (CLI11 would wrap "-5" to 2^64 - 5 and saturate 2^64), NaN and infinities on a floating one.
// Call after every command is added.
void RefuseMeaninglessNumbers(CLI::App& app);

}  // namespace weightport::cli
