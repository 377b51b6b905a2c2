#include "weightport/core/option_bounds.h"

#include <cmath>
#include <limits>
#include <set>

#include <gtest/gtest.h>

namespace weightport {
namespace {

TEST(OptionBounds, RefusesWhatNoOptionMeans) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const double inf = std::numeric_limits<double>::infinity();
  for (const OptionBound& b : kOptionBounds) {
    for (double bad : {nan, inf, -inf, -1.0, 1e308, b.hi + 1, b.lo - 1}) {
      if (bad == 0 && !b.zero.empty()) continue;
      Status s = CheckOption(b, bad);
      EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << b.name << " " << bad;
      EXPECT_NE(s.message().find(std::string(b.name) + " must be"), std::string::npos) << s.message();
    }
    EXPECT_TRUE(CheckOption(b, b.lo).ok()) << b.name;
    EXPECT_TRUE(CheckOption(b, b.hi).ok()) << b.name;
  }
}

TEST(OptionBounds, ZeroMeansTheDefaultOnlyWhereSaid) {
  EXPECT_TRUE(CheckOption(kChunkBytesBound, 0).ok());
  EXPECT_FALSE(CheckOption(kChunkBytesBound, 1).ok());  // 1-byte chunks: a 1 MiB tensor took 20 s
  EXPECT_EQ(CheckOption(kChunkBytesBound, 1).message(),
            "chunk_bytes must be a whole number from 4096 to 1073741824 bytes (0: the default), not 1");
  EXPECT_FALSE(CheckOption(kSessionTimeoutBound, 0).ok());
  EXPECT_FALSE(CheckOption(kRelayFanoutBound, 1.5).ok());
  EXPECT_TRUE(CheckOption(kSessionTimeoutBound, 1.5).ok());
}

TEST(OptionBounds, EveryNameIsListedOnce) {
  std::set<std::string_view> names;
  for (const OptionBound& b : kOptionBounds) EXPECT_TRUE(names.insert(b.name).second) << b.name;
}

}  // namespace
}  // namespace weightport
