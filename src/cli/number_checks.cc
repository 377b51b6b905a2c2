#include "number_checks.h"

#include <charconv>
#include <cmath>
#include <cstdint>
#include <sstream>
#include <string>

namespace weightport::cli {

CLI::Validator FiniteRange(double lo, double hi) {
  std::ostringstream range;
  range << "[" << lo << ", " << hi << "]";
  return CLI::Validator(
      [lo, hi, range = range.str()](std::string& input) -> std::string {
        double x = 0;
        if (!CLI::detail::lexical_cast(input, x)) return "Value " + input + " is not a number";
        if (!std::isfinite(x) || x < lo || x > hi) return "Value " + input + " not in range " + range;
        return std::string();
      },
      "FLOAT in " + range.str());
}

CLI::Validator NonNegativeInteger() {
  return CLI::Validator(
      [](std::string& input) -> std::string {
        uint64_t x = 0;
        const char* end = input.data() + input.size();
        const auto [ptr, ec] = std::from_chars(input.data(), end, x);
        if (input.empty() || ec != std::errc() || ptr != end)
          return "Value " + input + " is not an integer in [0, 2^64)";
        return std::string();
      },
      "UINT");
}

}  // namespace weightport::cli
