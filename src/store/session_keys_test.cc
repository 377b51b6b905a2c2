#include "weightport/store/session_keys.h"

#include <string>
#include <vector>

#include <gtest/gtest.h>

namespace weightport {
namespace {

TEST(SessionKeysTest, KeysLiveUnderTheSessionsPrefix) {
  EXPECT_EQ(session_keys::Prefix("run-7"), "/weightport/run-7/");
  EXPECT_EQ(session_keys::Coordinator("run-7"), "/weightport/run-7/coordinator");
  EXPECT_EQ(session_keys::Decision("run-7", 42), "/weightport/run-7/decision/00000000000000000042");
  EXPECT_EQ(session_keys::Decision("s", UINT64_MAX), "/weightport/s/decision/18446744073709551615");
  EXPECT_LT(session_keys::Decision("s", 9), session_keys::Decision("s", 10));  // keys sort by version
  EXPECT_EQ(session_keys::Live("s"), "/weightport/s/live");
  EXPECT_EQ(session_keys::Members("s"), "/weightport/s/members");
  EXPECT_EQ(session_keys::KeyEpoch("s"), "/weightport/s/key_epoch");
}

TEST(SessionKeysTest, SessionNamesAreOnePathSegment) {
  for (const char* ok : {"s", "run-7", "a.b_c", "X9"})
    EXPECT_TRUE(session_keys::CheckSessionName(ok).ok()) << ok;
  for (const std::string& bad : std::vector<std::string>{"", ".", "..", "a/b", "a b", "caf\xc3\xa9",
                                                         std::string(129, 'a'), std::string("a\0b", 3)}) {
    Status s = session_keys::CheckSessionName(bad);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << bad;
    EXPECT_NE(s.message().find("session name"), std::string::npos);
  }
  EXPECT_TRUE(session_keys::CheckSessionName(std::string(128, 'a')).ok());
}

}  // namespace
}  // namespace weightport
