#include "weightport/core/json_util.h"

#include <gtest/gtest.h>

#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>

#include "weightport/core/printable.h"

namespace weightport::json_util {
namespace {

std::string TempFile(const std::string& name, const std::string& text) {
  const std::string path =
      (std::filesystem::temp_directory_path() / ("json_util_test_" + std::to_string(::getpid()) + "_" + name))
          .string();
  std::ofstream(path, std::ios::binary) << text;
  return path;
}

TEST(JsonUtil, ParseFileReadsAFile) {
  const std::string path = TempFile("ok.json", R"({"a": [1, 2]})");
  auto j = ParseFile(path);
  ASSERT_TRUE(j.ok()) << j.status().ToString();
  EXPECT_EQ((*j)["a"][1], 2);
  std::filesystem::remove(path);
}

TEST(JsonUtil, ARegularFileOverTheLimitIsRefusedBeforeReading) {
  const std::string path = TempFile("big.json", std::string(100, ' ') + "1");
  auto j = ParseFile(path, 100);
  ASSERT_FALSE(j.ok());
  EXPECT_EQ(j.status().message(), path + ": 101 bytes, over the limit of 100 bytes for an input file");
  EXPECT_TRUE(ParseFile(path, 101).ok());
  std::filesystem::remove(path);
}

// A device that never ends (`weightport plan --plan /dev/urandom` exhausted memory) is read only
// up to the limit.
TEST(JsonUtil, AnEndlessDeviceIsReadOnlyUpToTheLimit) {
  auto j = ParseFile("/dev/zero");
  ASSERT_FALSE(j.ok());
  EXPECT_EQ(j.status().message(), "/dev/zero: more than " + std::to_string(kMaxJsonFileBytes) +
                                      " bytes, over the limit of " + std::to_string(kMaxJsonFileBytes) +
                                      " bytes for an input file");
  auto small = ReadTextFile("/dev/zero", 1000);
  ASSERT_FALSE(small.ok());
}

TEST(JsonUtil, DumpNeverThrowsOnBytesThatAreNotUtf8) {
  EXPECT_EQ(Dump(Json{{"event", std::string("peer said \xff\xfe")}}),
            "{\"event\":\"peer said \xef\xbf\xbd\xef\xbf\xbd\"}");
  EXPECT_EQ(Dump(Json{{"n", 1}}), "{\"n\":1}");
}

TEST(JsonUtil, TextNestedTooDeepIsRefusedBeforeItIsParsed) {
  // 100,000 levels: parsed, then dumped or freed recursively, this overflowed the stack.
  const std::string deep = "{\"x\":" + std::string(100000, '[') + std::string(100000, ']') + "}";
  auto r = Parse(deep, "the answer");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("the answer: JSON nested deeper than 100 levels"), std::string::npos)
      << r.status().message();
  EXPECT_LT(r.status().message().size(), 200u);  // an excerpt, not the whole text

  const auto nested = [](size_t depth) { return std::string(depth, '[') + std::string(depth, ']'); };
  EXPECT_TRUE(Parse(nested(kMaxJsonDepth), "t").ok());
  EXPECT_FALSE(Parse(nested(kMaxJsonDepth + 1), "t").ok());
  // Brackets inside strings, escaped quotes included, are text, not nesting.
  const std::string in_string = "[\"" + std::string(500, '[') + "\\\"{{\"]";
  auto text = Parse(in_string, "t");
  ASSERT_TRUE(text.ok()) << text.status().ToString();
  EXPECT_EQ((*text)[0].get<std::string>(), std::string(500, '[') + "\"{{");
}

TEST(JsonUtil, AnErrorQuotesAShortPrintableExcerpt) {
  for (const std::string& bad :
       {std::string("{\"a\": \"\xff\xfe\"}"), std::string("\x1b[31m not json") + std::string(10000, 'x'),
        std::string("{\"a\":\n{\"event\":1}")}) {
    auto r = Parse(bad, "etcd answer");
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_TRUE(IsPrintableAscii(r.status().message())) << r.status().message();
    EXPECT_LT(r.status().message().size(), 200u);
    EXPECT_NE(r.status().message().find("etcd answer: not valid JSON: "), std::string::npos);
  }
  EXPECT_EQ(Excerpt(Json{{"k", std::string("\x1b\xff")}}, 100), "{\"k\":\"\\x5cu001b\\xef\\xbf\\xbd\"}");
}

}  // namespace
}  // namespace weightport::json_util
