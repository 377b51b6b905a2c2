#include "number_checks.h"

#include <gtest/gtest.h>

namespace weightport::cli {
namespace {

std::string Check(const CLI::Validator& v, std::string input) { return v(input); }

TEST(NumberChecks, FiniteRangeRefusesNanInfinityAndOutOfRange) {
  const CLI::Validator v = FiniteRange(0, 1);
  EXPECT_EQ(Check(v, "0.5"), "");
  EXPECT_EQ(Check(v, "0"), "");
  EXPECT_EQ(Check(v, "1"), "");
  EXPECT_EQ(Check(v, "nan"), "Value nan not in range [0, 1]");
  EXPECT_EQ(Check(v, "inf"), "Value inf not in range [0, 1]");
  EXPECT_EQ(Check(v, "-0.1"), "Value -0.1 not in range [0, 1]");
  EXPECT_EQ(Check(v, "1e300"), "Value 1e300 not in range [0, 1]");
  EXPECT_EQ(Check(v, "x"), "Value x is not a number");
  // What it replaces: CLI::Range passes NaN.
  EXPECT_EQ(Check(CLI::Range(0.0, 1.0), "nan"), "");
}

TEST(NumberChecks, NonNegativeIntegerRefusesNegativeAndOverflowingValues) {
  const CLI::Validator v = NonNegativeInteger();
  EXPECT_EQ(Check(v, "0"), "");
  EXPECT_EQ(Check(v, "18446744073709551615"), "");
  EXPECT_EQ(Check(v, "-1"), "Value -1 is not an integer in [0, 2^64)");
  EXPECT_EQ(Check(v, "18446744073709551616"), "Value 18446744073709551616 is not an integer in [0, 2^64)");
  EXPECT_EQ(Check(v, "1.5"), "Value 1.5 is not an integer in [0, 2^64)");
}

}  // namespace
}  // namespace weightport::cli
