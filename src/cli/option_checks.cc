#include "cli/option_checks.h"

#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <sstream>

namespace weightport::cli {
namespace {

std::string Lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

// "" / "b" -> 1, "k" / "kb" / "kib" -> 1024, ... "p" -> 1024^5; 0 for an unknown unit.
uint64_t UnitMultiplier(const std::string& unit) {
  const std::string u = Lower(unit);
  if (u.empty() || u == "b") return 1;
  static const char kPrefixes[] = "kmgtp";
  for (int i = 0; kPrefixes[i] != '\0'; ++i) {
    const std::string p(1, kPrefixes[i]);
    if (u == p || u == p + "b" || u == p + "ib") return uint64_t{1} << (10 * (i + 1));
  }
  return 0;
}

std::string Bounds(uint64_t lo, uint64_t hi) {
  return "a size in bytes from " + std::to_string(lo) + " to " + std::to_string(hi) +
         " (units k, M, G, T, P are powers of 1024, e.g. 256MiB)";
}

bool IsFloatOption(const std::string& type) { return type.rfind("FLOAT", 0) == 0; }
bool IsUnsignedOption(const std::string& type) { return type.rfind("UINT", 0) == 0; }

}  // namespace

Result<uint64_t> ParseByteSize(const std::string& text, uint64_t lo, uint64_t hi) {
  const auto refuse = [&] { return InvalidArgument("'" + text + "' is not " + Bounds(lo, hi)); };
  size_t i = 0;
  while (i < text.size() && std::isspace(static_cast<unsigned char>(text[i]))) ++i;
  const size_t digits_begin = i;
  while (i < text.size() && (std::isdigit(static_cast<unsigned char>(text[i])) || text[i] == '.')) ++i;
  const std::string number = text.substr(digits_begin, i - digits_begin);
  while (i < text.size() && std::isspace(static_cast<unsigned char>(text[i]))) ++i;
  const uint64_t multiplier = UnitMultiplier(text.substr(i));
  if (number.empty() || number == "." || multiplier == 0 || number.find('.') != number.rfind('.'))
    return refuse();
  const size_t dot = number.find('.');
  const std::string whole = number.substr(0, dot);
  const std::string fraction = dot == std::string::npos ? "" : number.substr(dot + 1);
  // Whole part exactly, with overflow checks; a fraction only through long double, then checked
  // to land on a whole byte.
  uint64_t value = 0;
  for (char c : whole) {
    const uint64_t digit = static_cast<uint64_t>(c - '0');
    if (value > (std::numeric_limits<uint64_t>::max() - digit) / 10) return refuse();
    value = value * 10 + digit;
  }
  if (value > std::numeric_limits<uint64_t>::max() / multiplier) return refuse();
  value *= multiplier;
  if (!fraction.empty() && fraction.find_first_not_of('0') != std::string::npos) {
    const long double part = std::strtold(("0." + fraction).c_str(), nullptr) * multiplier;
    const long double rounded = std::floor(part + 0.5L);
    if (std::fabs(part - rounded) > 1e-6L) return refuse();  // a fraction of a byte
    const auto extra = static_cast<uint64_t>(rounded);
    if (value > std::numeric_limits<uint64_t>::max() - extra) return refuse();
    value += extra;
  }
  if (value < lo || value > hi) return refuse();
  return value;
}

CLI::Validator ByteSize(uint64_t lo, uint64_t hi) {
  return CLI::Validator(
      [lo, hi](std::string& text) -> std::string {
        Result<uint64_t> bytes = ParseByteSize(text, lo, hi);
        if (!bytes.ok()) return bytes.status().message();
        text = std::to_string(*bytes);
        return {};
      },
      "SIZE in [" + std::to_string(lo) + " - " + std::to_string(hi) + "] bytes (e.g. 64KiB, 2GiB)");
}

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

CLI::Validator Bounded(const OptionBound& bound) {
  return CLI::Validator(
      [bound](std::string& input) -> std::string {
        double x = 0;
        if (!CLI::detail::lexical_cast(input, x)) return "Value " + input + " is not a number";
        Status s = CheckOption(bound, x);
        return s.ok() ? std::string() : s.message();
      },
      std::string(bound.integer ? "INT" : "FLOAT") + " in [" + CLI::detail::to_string(bound.lo) + ", " +
          CLI::detail::to_string(bound.hi) + "]");
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

void RefuseMeaninglessNumbers(CLI::App& app) {
  for (CLI::Option* opt : app.get_options()) {
    const std::string type = opt->get_type_name();
    if (IsUnsignedOption(type)) {
      opt->check(CLI::Validator(
          [](std::string& text) -> std::string {
            if (text.find('-') != std::string::npos)
              return "'" + text + "' is negative; this option counts up from 0";
            // A plain integer past 2^64 - 1 (CLI11 would saturate it); sizes with units and other
            // forms are left to the option's own conversion and checks.
            if (!text.empty() && text.find_first_not_of("0123456789") == std::string::npos &&
                !NonNegativeInteger()(text).empty())
              return "'" + text + "' does not fit 64 bits";
            return {};
          },
          ""));
    } else if (IsFloatOption(type)) {
      opt->check(CLI::Validator(
          [](std::string& text) -> std::string {
            char* end = nullptr;
            const double v = std::strtod(text.c_str(), &end);
            if (end != text.c_str() && *end == '\0' && !std::isfinite(v))
              return "'" + text + "' is not a finite number";
            return {};
          },
          ""));
    }
  }
  for (CLI::App* sub : app.get_subcommands({})) RefuseMeaninglessNumbers(*sub);
}

}  // namespace weightport::cli
