#include "weightport/core/printable.h"

#include <gtest/gtest.h>

namespace weightport {
namespace {

TEST(Printable, EscapesWhatCouldForgeALineOrBreakJson) {
  EXPECT_EQ(Printable("plain reason: tensor 'a.b'", 100), "plain reason: tensor 'a.b'");
  EXPECT_EQ(Printable("\xff\xfe", 100), "\\xff\\xfe");
  EXPECT_EQ(Printable("x\n{\"event\":1}", 100), "x\\x0a{\"event\":1}");
  EXPECT_EQ(Printable("a\\b\x1b[2J", 100), "a\\x5cb\\x1b[2J");
  EXPECT_EQ(Printable(std::string_view("n\0l", 3), 100), "n\\x00l");
}

TEST(Printable, CutsLongTextAtTheLimit) {
  EXPECT_EQ(Printable("abcdef", 3), "abc...");
  EXPECT_EQ(Printable("abc", 3), "abc");
  EXPECT_EQ(Printable("", 0), "");
}

TEST(Printable, ReplaceUnprintableIsIdempotent) {
  const std::string hostile = "ok \xff\n{\"event\":1}\x1b[2J\\";
  const std::string once = ReplaceUnprintable(hostile, 100);
  EXPECT_EQ(once, "ok ??{\"event\":1}?[2J\\");
  EXPECT_EQ(ReplaceUnprintable(once, 100), once);
  EXPECT_EQ(ReplaceUnprintable("abcdef", 3), "abc");
}

}  // namespace
}  // namespace weightport
