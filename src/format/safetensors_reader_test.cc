#include <fcntl.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include <gtest/gtest.h>

#include "weightport/format/safetensors_reader.h"

// A namespace of its own: the unity build compiles this file together with other tests.
namespace weightport::safetensors_reader_test {
namespace {

// A file: 8-byte little-endian length, the header text as given, then `data`.
std::string Build(std::string_view header, std::string_view data = "") {
  std::string out(8, '\0');
  const uint64_t n = header.size();
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>((n >> (8 * i)) & 0xFF);
  return out + std::string(header) + std::string(data);
}

std::span<const std::byte> Bytes(const std::string& s) {
  return {reinterpret_cast<const std::byte*>(s.data()), s.size()};
}

Result<SafetensorsHeader> Parse(const std::string& file) {
  return ParseSafetensorsHeader(Bytes(file), "bad.safetensors");
}

// Expects a parse failure whose message contains the file name and `needle`.
void ExpectError(const std::string& file, std::string_view needle) {
  auto r = Parse(file);
  ASSERT_FALSE(r.ok()) << "parsed: " << file.substr(8);
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("bad.safetensors"), std::string::npos) << r.status().message();
  EXPECT_NE(r.status().message().find(needle), std::string::npos) << r.status().message();
}

// One F32 [2] tensor 'w' with the given entry fields, and `data` bytes of data.
std::string WithEntry(std::string_view entry, size_t data = 8) {
  return Build(R"({"w":)" + std::string(entry) + "}", std::string(data, 'x'));
}

TEST(SafetensorsHeader, ParsesTensorsInHeaderOrderWithMetadata) {
  const std::string file = Build(
      R"({"__metadata__":{"format":"pt","k":"v"},"zeta":{"dtype":"F32","shape":[2],"data_offsets":[8,16]},)"
      R"("alpha":{"dtype":"BF16","shape":[2,2],"data_offsets":[0,8]}})",
      std::string(16, 'd'));
  auto r = Parse(file);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_EQ(r->tensors.size(), 2u);
  EXPECT_EQ(r->tensors[0].meta.name, "zeta");
  EXPECT_EQ(r->tensors[0].meta.dtype, DType::kF32);
  EXPECT_EQ(r->tensors[0].meta.shape, (Shape{2}));
  EXPECT_EQ(r->tensors[0].data, (ByteRange{8, 8}));
  EXPECT_EQ(r->tensors[1].meta.name, "alpha");
  EXPECT_EQ(r->tensors[1].meta.dtype, DType::kBF16);
  EXPECT_EQ(r->tensors[1].data, (ByteRange{0, 8}));
  EXPECT_EQ(r->metadata.at("format"), "pt");
  EXPECT_EQ(r->metadata.at("k"), "v");
  EXPECT_EQ(r->data_start, file.size() - 16);
}

TEST(SafetensorsHeader, AcceptsEmptyHeaderScalarsZeroElementsAndPadding) {
  auto empty = Parse(Build("{}"));
  ASSERT_TRUE(empty.ok()) << empty.status().ToString();
  EXPECT_TRUE(empty->tensors.empty());

  auto r = Parse(Build(R"({"s":{"dtype":"F64","shape":[],"data_offsets":[0,8]},)"
                       R"("z":{"dtype":"I32","shape":[0,3],"data_offsets":[8,8]},)"
                       R"("e":{"dtype":"U8","shape":[0],"data_offsets":[0,0],"extra":[1]}})"
                       "     ",
                       std::string(8, 's')));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_EQ(r->tensors.size(), 3u);
  EXPECT_EQ(r->tensors[0].meta.bytes, 8u);
  EXPECT_TRUE(r->tensors[0].meta.shape.empty());
  EXPECT_EQ(r->tensors[1].meta.bytes, 0u);
  EXPECT_EQ(r->tensors[2].data, (ByteRange{0, 0}));
}

TEST(SafetensorsHeader, KeysRepeatedInDifferentObjectsAreNotDuplicates) {
  auto r = Parse(Build(R"({"dtype":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},)"
                       R"("shape":{"dtype":"U8","shape":[1],"data_offsets":[1,2]}})",
                       "ab"));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->tensors[0].meta.name, "dtype");
  EXPECT_EQ(r->tensors[1].meta.name, "shape");
}

TEST(SafetensorsHeader, RejectsBadFraming) {
  ExpectError("", "too short");
  ExpectError(std::string(7, '\0'), "too short");
  ExpectError(Build("{}").substr(0, 9), "past the end");
  std::string big(8, '\0');
  const uint64_t n = kMaxSafetensorsHeaderBytes + 1;
  for (int i = 0; i < 8; ++i) big[i] = static_cast<char>((n >> (8 * i)) & 0xFF);
  ExpectError(big + "{}", "absurdly large");
  ExpectError(std::string(8, '\xff') + "{}", "absurdly large");
  ExpectError(Build(""), "not valid JSON");
  ExpectError(Build("{\"w\":"), "not valid JSON");
  ExpectError(Build("{} x"), "not valid JSON");
  ExpectError(Build("{\"\xff\":1}"), "not valid JSON");  // invalid UTF-8
  ExpectError(Build("[1, 2]"), "must be a JSON object");
  ExpectError(Build("\"s\""), "must be a JSON object");
  ExpectError(Build(" {}"), "must start with '{'");
  ExpectError(Build("\n{}"), "must start with '{'");
  ExpectError(Build("{\"w\":" + std::string(100, '[') + std::string(100, ']') + "}"), "nests deeper");
}

TEST(SafetensorsHeader, RejectsBadEntries) {
  ExpectError(WithEntry("5"), "tensor 'w': entry must be an object");
  ExpectError(WithEntry(R"({"shape":[2],"data_offsets":[0,8]})"), "tensor 'w': field 'dtype' is missing");
  ExpectError(WithEntry(R"({"dtype":1,"shape":[2],"data_offsets":[0,8]})"), "'dtype' must be a string");
  ExpectError(WithEntry(R"({"dtype":"F128","shape":[2],"data_offsets":[0,8]})"),
              "unknown safetensors dtype 'F128'");
  ExpectError(WithEntry(R"({"dtype":"f32","shape":[2],"data_offsets":[0,8]})"), "unknown safetensors dtype");
  ExpectError(WithEntry(R"({"dtype":"F32","data_offsets":[0,8]})"), "field 'shape' is missing");
  ExpectError(WithEntry(R"({"dtype":"F32","shape":2,"data_offsets":[0,8]})"), "'shape' must be an array");
  ExpectError(WithEntry(R"({"dtype":"F32","shape":[-2],"data_offsets":[0,8]})"), "negative");
  ExpectError(WithEntry(R"({"dtype":"F32","shape":[2.0],"data_offsets":[0,8]})"), "must be an integer");
  ExpectError(WithEntry(R"({"dtype":"F32","shape":["2"],"data_offsets":[0,8]})"), "must be an integer");
  ExpectError(WithEntry(R"({"dtype":"F32","shape":[18446744073709551615],"data_offsets":[0,8]})"),
              "too large");
  ExpectError(WithEntry(R"({"dtype":"U8","shape":[4294967296,4294967296],"data_offsets":[0,8]})"),
              "overflows 64-bit element count");
  ExpectError(WithEntry(R"({"dtype":"F64","shape":[4611686018427387904],"data_offsets":[0,8]})"),
              "overflows 64-bit byte count");
  ExpectError(WithEntry(R"({"dtype":"F32","shape":[2]})"), "field 'data_offsets' is missing");
  ExpectError(WithEntry(R"({"dtype":"F32","shape":[2],"data_offsets":{"a":1}})"), "must be an array");
  ExpectError(WithEntry(R"({"dtype":"F32","shape":[2],"data_offsets":[0]})"), "must be [begin, end]");
  ExpectError(WithEntry(R"({"dtype":"F32","shape":[2],"data_offsets":[0,4,8]})"), "must be [begin, end]");
  ExpectError(WithEntry(R"({"dtype":"F32","shape":[2],"data_offsets":[-1,8]})"), "is negative");
  ExpectError(WithEntry(R"({"dtype":"F32","shape":[2],"data_offsets":[0,8.0]})"), "non-negative integer");
  ExpectError(WithEntry(R"({"dtype":"F32","shape":[2],"data_offsets":[8,0]})"), "begin after end");
}

TEST(SafetensorsHeader, RejectsSizeMismatchWithExactMessage) {
  auto r = Parse(WithEntry(R"({"dtype":"F32","shape":[2,3],"data_offsets":[0,20]})", 20));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().message(),
            "bad.safetensors: tensor 'w': shape [2, 3] x F32 = 24 bytes but data_offsets span 20");
}

TEST(SafetensorsHeader, RejectsBadLayout) {
  ExpectError(WithEntry(R"({"dtype":"F32","shape":[2],"data_offsets":[0,8]})", 4),
              "extend past the data area");
  ExpectError(WithEntry(R"({"dtype":"F32","shape":[2],"data_offsets":[4,12]})", 8), "tensor 'w'");
  ExpectError(WithEntry(R"({"dtype":"F32","shape":[2],"data_offsets":[0,8]})", 9),
              "after the end of the last tensor 'w'");
  ExpectError(Build("{}", "x"), "1 bytes after the end");
  ExpectError(WithEntry(R"({"dtype":"F32","shape":[2],"data_offsets":[2,10]})", 10), "gap of 2");
  ExpectError(Build(R"({"a":{"dtype":"U8","shape":[4],"data_offsets":[0,4]},)"
                    R"("b":{"dtype":"U8","shape":[4],"data_offsets":[2,6]}})",
                    "123456"),
              "tensor 'b' data_offsets [2, 6] overlap tensor 'a' [0, 4]");
  ExpectError(Build(R"({"a":{"dtype":"U8","shape":[4],"data_offsets":[0,4]},)"
                    R"("b":{"dtype":"U8","shape":[4],"data_offsets":[0,4]}})",
                    "1234"),
              "overlap tensor 'a'");
  ExpectError(Build(R"({"a":{"dtype":"U8","shape":[4],"data_offsets":[0,4]},)"
                    R"("b":{"dtype":"U8","shape":[0],"data_offsets":[2,2]}})",
                    "1234"),
              "tensor 'b' data_offsets [2, 2] overlap tensor 'a'");
  ExpectError(Build(R"({"a":{"dtype":"U8","shape":[2],"data_offsets":[0,2]},)"
                    R"("b":{"dtype":"U8","shape":[2],"data_offsets":[4,6]}})",
                    "123456"),
              "gap of 2 unused bytes after tensor 'a' (the reference implementation rejects gaps)");
}

TEST(SafetensorsHeader, RejectsDuplicateKeys) {
  const std::string entry = R"({"dtype":"U8","shape":[2],"data_offsets":[0,2]})";
  // nlohmann alone would keep the last 'w' and accept this file.
  ExpectError(Build(R"({"w":)" + entry + R"(,"w":)" + entry + "}", "ab"),
              "tensor 'w' appears more than once");
  ExpectError(
      Build(R"({"w":{"dtype":"U8","shape":[4],"data_offsets":[0,4]},"v":)" + entry + R"(,"w":)" + entry + "}",
            "abcdef"),
      "tensor 'w' appears more than once");
  ExpectError(Build(R"({"w":{"dtype":"U8","dtype":"U8","shape":[2],"data_offsets":[0,2]}})", "ab"),
              "duplicate key 'dtype' in the entry of 'w'");
  ExpectError(Build(R"({"__metadata__":{"a":"1"},"__metadata__":{"a":"2"}})"),
              "'__metadata__' appears more than once");
  ExpectError(Build(R"({"__metadata__":{"a":"1","a":"2"}})"),
              "duplicate key 'a' in the entry of '__metadata__'");
}

// A header of many tensors (a large MoE lists ~70,000) keeps header order and names a fault at its
// end. The parse is one pass; bench/run-header-bench checks that its time grows linearly.
TEST(SafetensorsHeader, ParsesManyTensorsInHeaderOrder) {
  constexpr int kTensors = 50'000;
  std::string header = "{";
  for (int i = kTensors - 1; i >= 0; --i)  // names in reverse of the data order
    header += "\"t" + std::to_string(i) + R"(":{"dtype":"U8","shape":[1],"data_offsets":[)" +
              std::to_string(i) + "," + std::to_string(i + 1) + "]},";
  const std::string good = header + R"("__metadata__":{"k":"v"}})";
  auto r = Parse(Build(good, std::string(kTensors, 'x')));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_EQ(r->tensors.size(), static_cast<size_t>(kTensors));
  EXPECT_EQ(r->tensors.front().meta.name, "t" + std::to_string(kTensors - 1));
  EXPECT_EQ(r->tensors.back().meta.name, "t0");
  EXPECT_EQ(r->tensors.back().data, (ByteRange{0, 1}));
  EXPECT_EQ(r->metadata.at("k"), "v");
  ExpectError(
      Build(header + R"("t7":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}})", std::string(kTensors, 'x')),
      "tensor 't7' appears more than once");
}

TEST(SafetensorsHeader, RejectsBadMetadata) {
  ExpectError(Build(R"({"__metadata__":["a"]})"), "__metadata__ must be an object");
  ExpectError(Build(R"({"__metadata__":"a"})"), "__metadata__ must be an object");
  ExpectError(Build(R"({"__metadata__":{"a":1}})"), "value of 'a' must be a string");
  ExpectError(Build(R"({"__metadata__":{"a":{"b":"c"}}})"), "value of 'a' must be a string");
}

class SafetensorsFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = ::testing::TempDir() + "/wp_reader_XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl.data()), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string WriteFile(const std::string& name, const std::string& bytes) {
    std::string path = dir_ + "/" + name;
    std::ofstream(path, std::ios::binary) << bytes;
    return path;
  }
  std::string dir_;
};

TEST_F(SafetensorsFileTest, MapsFileAndViewsTensorData) {
  const std::string path =
      WriteFile("m.safetensors", Build(R"({"a":{"dtype":"U8","shape":[3],"data_offsets":[0,3]},)"
                                       R"("b":{"dtype":"I16","shape":[2],"data_offsets":[3,7]}})",
                                       "abcdefg"));
  auto f = SafetensorsFile::Open(path);
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  SafetensorsFile file = std::move(*f);
  EXPECT_EQ(file.path(), path);
  ASSERT_EQ(file.tensors().size(), 2u);
  const SafetensorsTensor* b = file.Find("b");
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(file.Find("c"), nullptr);
  auto data = file.Data(*b);
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(data.data()), data.size()), "defg");
  SafetensorsFile moved = std::move(file);
  EXPECT_EQ(moved.Data(*moved.Find("a")).size(), 3u);
  SafetensorsTensor bogus{b->meta, ByteRange{5, 100}};
  EXPECT_TRUE(moved.Data(bogus).empty());
}

TEST_F(SafetensorsFileTest, RejectsShortMissingAndNonRegularFiles) {
  auto empty = SafetensorsFile::Open(WriteFile("empty.safetensors", ""));
  ASSERT_FALSE(empty.ok());
  EXPECT_NE(empty.status().message().find("empty.safetensors: file is 0 bytes"), std::string::npos);
  auto shortf = SafetensorsFile::Open(WriteFile("short.safetensors", "abcde"));
  ASSERT_FALSE(shortf.ok());
  EXPECT_NE(shortf.status().message().find("short.safetensors: file is 5 bytes"), std::string::npos);
  auto missing = SafetensorsFile::Open(dir_ + "/missing.safetensors");
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), StatusCode::kIoError);
  EXPECT_NE(missing.status().message().find("missing.safetensors"), std::string::npos);
  auto dir = SafetensorsFile::Open(dir_);
  ASSERT_FALSE(dir.ok());
  EXPECT_NE(dir.status().message().find("not a regular file"), std::string::npos);
  auto bad = SafetensorsFile::Open(WriteFile("bad.safetensors", Build("{\"w\":1}")));
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("bad.safetensors: tensor 'w'"), std::string::npos);
}

}  // namespace
}  // namespace weightport::safetensors_reader_test
