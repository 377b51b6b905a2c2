#include "weightport/core/json_util.h"

#include <gtest/gtest.h>

#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>

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

}  // namespace
}  // namespace weightport::json_util
