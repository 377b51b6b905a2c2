#include "weightport/core/option_bounds.h"

#include <cmath>
#include <cstdio>

namespace weightport {
namespace {

std::string Number(double v) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.15g", v);
  return buf;
}

}  // namespace

std::string DescribeBound(const OptionBound& bound) {
  std::string s = std::string(bound.name) + " must be " +
                  (bound.integer ? "a whole number" : "a finite number") + " from " + Number(bound.lo) +
                  " to " + Number(bound.hi);
  if (!bound.unit.empty()) s += " " + std::string(bound.unit);
  if (!bound.zero.empty()) s += " (0: " + std::string(bound.zero) + ")";
  return s;
}

Status CheckOption(const OptionBound& bound, double value) {
  const bool zero_ok = !bound.zero.empty() && value == 0;
  const bool in_range = std::isfinite(value) && value >= bound.lo && value <= bound.hi;
  const bool whole = !bound.integer || (std::isfinite(value) && std::trunc(value) == value);
  if ((zero_ok || in_range) && whole) return Status::Ok();
  return InvalidArgument(DescribeBound(bound) + ", not " + Number(value));
}

}  // namespace weightport
