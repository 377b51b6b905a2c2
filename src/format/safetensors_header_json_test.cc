#include "safetensors_header_json.h"

#include <string>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

namespace weightport {
namespace {

struct Collected {
  HeaderJson result;
  std::vector<std::pair<std::string, nlohmann::json>> entries;
};

Collected Parse(std::string_view text, size_t max_depth = 32) {
  Collected c;
  c.result = ParseHeaderJson(text, max_depth, [&](std::string&& key, nlohmann::json&& value) {
    c.entries.emplace_back(std::move(key), std::move(value));
  });
  return c;
}

TEST(HeaderJson, HandsOverEachTopLevelEntryInTextOrder) {
  auto c = Parse(R"({"b":1,"a":{"x":[1,{"y":null}],"z":"s"},"c":[2.5,true],"d":{}})");
  ASSERT_TRUE(c.result.valid);
  EXPECT_EQ(c.result.root_type, "object");
  EXPECT_TRUE(c.result.duplicate.empty());
  ASSERT_EQ(c.entries.size(), 4u);
  EXPECT_EQ(c.entries[0].first, "b");
  EXPECT_EQ(c.entries[0].second, 1);
  EXPECT_EQ(c.entries[1].first, "a");
  EXPECT_EQ(c.entries[1].second, nlohmann::json::parse(R"({"x":[1,{"y":null}],"z":"s"})"));
  EXPECT_EQ(c.entries[2].first, "c");
  EXPECT_EQ(c.entries[2].second, nlohmann::json::parse("[2.5,true]"));
  EXPECT_EQ(c.entries[3].second, nlohmann::json::object());
  // Integers keep nlohmann's kinds (what the entry checks rely on).
  auto n = Parse(R"({"i":-1,"u":18446744073709551615,"f":1e300})");
  ASSERT_TRUE(n.result.valid);
  EXPECT_TRUE(n.entries[0].second.is_number_integer());
  EXPECT_TRUE(n.entries[1].second.is_number_unsigned());
  EXPECT_TRUE(n.entries[2].second.is_number_float());
}

TEST(HeaderJson, FindsTheFirstDuplicateAndWhereItIs) {
  auto top = Parse(R"({"w":1,"v":2,"w":3,"v":4})");
  EXPECT_TRUE(top.result.valid);
  EXPECT_EQ(top.result.duplicate, "w");
  EXPECT_EQ(top.result.duplicate_in, "");
  auto nested = Parse(R"({"w":{"a":1},"v":{"a":1,"b":{"c":1,"c":2},"a":2}})");
  EXPECT_EQ(nested.result.duplicate, "c");
  EXPECT_EQ(nested.result.duplicate_in, "v");
  auto apart = Parse(R"({"w":{"a":1},"v":{"a":[{"a":1}]}})");
  EXPECT_TRUE(apart.result.duplicate.empty());
}

TEST(HeaderJson, StopsAtTheDepthLimit) {
  EXPECT_TRUE(Parse(R"({"a":[[1]]})", 3).result.valid);
  auto deep = Parse(R"({"a":[[[1]]]})", 3);
  EXPECT_TRUE(deep.result.too_deep);
  EXPECT_FALSE(deep.result.valid);
  EXPECT_TRUE(deep.entries.empty());
  // Far past any limit: refused at the limit, nothing deeper built.
  auto hostile = Parse(std::string(1'000'000, '['), 32);
  EXPECT_TRUE(hostile.result.too_deep);
}

TEST(HeaderJson, ReportsInvalidTextAndOtherRoots) {
  EXPECT_FALSE(Parse("").result.valid);
  EXPECT_FALSE(Parse(R"({"a":1)").result.valid);
  EXPECT_FALSE(Parse(R"({"a":1} x)").result.valid);
  EXPECT_FALSE(Parse("{\"\xff\":1}").result.valid);
  auto array = Parse(R"([{"a":1},2])");
  EXPECT_TRUE(array.result.valid);
  EXPECT_EQ(array.result.root_type, "array");
  EXPECT_TRUE(array.entries.empty());
  EXPECT_EQ(Parse(R"("s")").result.root_type, "string");
}

// Every entry is handed over once, as it completes: a header of many tensors costs one pass.
TEST(HeaderJson, ManyEntriesArriveOnceEachInOrder) {
  constexpr int kEntries = 100'000;
  std::string text = "{";
  for (int i = 0; i < kEntries; ++i)
    text += (i ? ",\"t" : "\"t") + std::to_string(i) + R"(":{"dtype":"U8","shape":[1],"data_offsets":[0,1]})";
  text += "}";
  auto c = Parse(text);
  ASSERT_TRUE(c.result.valid);
  ASSERT_EQ(c.entries.size(), static_cast<size_t>(kEntries));
  for (int i = 0; i < kEntries; i += 9999) EXPECT_EQ(c.entries[i].first, "t" + std::to_string(i));
  EXPECT_EQ(c.entries.back().second.at("data_offsets"), nlohmann::json::parse("[0,1]"));
}

}  // namespace
}  // namespace weightport
