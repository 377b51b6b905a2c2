#include "cli/option_checks.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

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

TEST(OptionChecks, ByteSizesTakeUnitsAndRefuseSignsFractionsAndOverflow) {
  EXPECT_EQ(*ParseByteSize("4096", 1, 1ull << 50), 4096u);
  EXPECT_EQ(*ParseByteSize("256MiB", 1, 1ull << 50), 256ull << 20);
  EXPECT_EQ(*ParseByteSize("2 GiB", 1, 1ull << 50), 2ull << 30);
  EXPECT_EQ(*ParseByteSize("64k", 1, 1ull << 50), 64ull << 10);
  EXPECT_EQ(*ParseByteSize("1.5G", 1, 1ull << 50), 3ull << 29);
  EXPECT_EQ(*ParseByteSize("0.5KiB", 1, 1ull << 50), 512u);
  EXPECT_EQ(ParseByteSize("16EiB", 0, UINT64_MAX).status().code(), StatusCode::kInvalidArgument);  // no E
  for (const char* bad :
       {"-5", "", "MiB", "1.5", "0.3", "18446744073709551616", "16777216TiB", "1..5G", "12 parsecs", "nan"}) {
    EXPECT_FALSE(ParseByteSize(bad, 0, UINT64_MAX).ok()) << bad;
  }
  EXPECT_FALSE(ParseByteSize("0", 1, 10).ok());
  EXPECT_FALSE(ParseByteSize("11", 1, 10).ok());
  Result<uint64_t> refused = ParseByteSize("-5", 2, 100);
  EXPECT_NE(refused.status().message().find("'-5' is not a size in bytes from 2 to 100"), std::string::npos)
      << refused.status().message();
}

TEST(OptionChecks, EveryUnsignedAndFloatingOptionRefusesWhatNoneMeans) {
  CLI::App app;
  uint64_t count = 0;
  double seconds = 0;
  int offset = 0;
  auto* sub = app.add_subcommand("cmd");
  sub->add_option("--count", count);
  sub->add_option("--seconds", seconds);
  sub->add_option("--offset", offset);
  RefuseMeaninglessNumbers(app);
  auto parse = [&](std::vector<std::string> args) {
    std::reverse(args.begin(), args.end());
    try {
      app.parse(args);
      return std::string();
    } catch (const CLI::ParseError& e) {
      return std::string(e.what());
    }
  };
  EXPECT_EQ(parse({"cmd", "--count", "7", "--seconds", "0.5", "--offset", "-3"}), "");
  EXPECT_EQ(count, 7u);
  EXPECT_EQ(offset, -3);  // signed options keep their sign
  EXPECT_NE(parse({"cmd", "--count", "-1"}), "");
  EXPECT_NE(parse({"cmd", "--count", "18446744073709551616"}), "");
  EXPECT_EQ(parse({"cmd", "--count", "18446744073709551615"}), "");
  EXPECT_NE(parse({"cmd", "--seconds", "nan"}), "");
  EXPECT_NE(parse({"cmd", "--seconds", "-inf"}), "");
}

}  // namespace
}  // namespace weightport::cli
