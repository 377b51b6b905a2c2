#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "weightport/format/safetensors_reader.h"
#include "weightport/format/safetensors_writer.h"

// A namespace of its own: the unity build compiles this file together with other tests.
namespace weightport::safetensors_writer_test {
namespace {

namespace fs = std::filesystem;

std::span<const std::byte> Bytes(const std::string& s) {
  return {reinterpret_cast<const std::byte*>(s.data()), s.size()};
}

TensorMeta Meta(const std::string& name, DType dtype, Shape shape) {
  auto m = TensorMeta::Make(name, dtype, std::move(shape));
  EXPECT_TRUE(m.ok()) << m.status().ToString();
  return *m;
}

std::string ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

class SafetensorsWriterTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = ::testing::TempDir() + "/wp_writer_XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl.data()), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string dir_;
};

TEST(EncodeSafetensorsHeader, MatchesReferenceLayout) {
  const TensorMeta a = Meta("a", DType::kF16, {2});
  auto h = EncodeSafetensorsHeader({&a, 1}, {});
  ASSERT_TRUE(h.ok()) << h.status().ToString();
  // Byte-for-byte what safetensors 0.8 serialize() writes for this tensor.
  const std::string json = R"({"a":{"dtype":"F16","shape":[2],"data_offsets":[0,4]}}  )";
  EXPECT_EQ(h->substr(8), json);
  EXPECT_EQ(static_cast<uint8_t>((*h)[0]), json.size());
  EXPECT_EQ(h->substr(1, 7), std::string(7, '\0'));
}

TEST(EncodeSafetensorsHeader, PutsMetadataFirstKeepsOrderAndPads) {
  std::vector<TensorMeta> metas = {Meta("z", DType::kF32, {3}), Meta("a", DType::kBF16, {}),
                                   Meta("m", DType::kU8, {0, 5})};
  for (size_t extra = 0; extra < 9; ++extra) {
    const std::map<std::string, std::string> metadata = {{"format", "pt"}, {"pad", std::string(extra, 'p')}};
    auto h = EncodeSafetensorsHeader(metas, metadata);
    ASSERT_TRUE(h.ok()) << h.status().ToString();
    EXPECT_EQ(h->size() % 8, 0u);
    const std::string json = h->substr(8);
    EXPECT_EQ(json.rfind(R"({"__metadata__":{"format":"pt","pad":")", 0), 0u) << json;
    EXPECT_LT(json.find("\"z\""), json.find("\"a\""));
    EXPECT_LT(json.find("\"a\""), json.find("\"m\""));
    EXPECT_NE(json.find(R"("z":{"dtype":"F32","shape":[3],"data_offsets":[0,12]})"), std::string::npos);
    EXPECT_NE(json.find(R"("a":{"dtype":"BF16","shape":[],"data_offsets":[12,14]})"), std::string::npos);
    EXPECT_NE(json.find(R"("m":{"dtype":"U8","shape":[0,5],"data_offsets":[14,14]})"), std::string::npos);
    EXPECT_LT(json.size() - (json.find_last_not_of(' ') + 1), 8u);  // minimal padding
  }
}

TEST(EncodeSafetensorsHeader, RejectsBadNames) {
  auto check = [](std::vector<TensorMeta> metas, std::string_view needle) {
    auto h = EncodeSafetensorsHeader(metas, {});
    ASSERT_FALSE(h.ok());
    EXPECT_EQ(h.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(h.status().message().find(needle), std::string::npos) << h.status().message();
  };
  check({Meta("w", DType::kF32, {1}), Meta("v", DType::kF32, {1}), Meta("w", DType::kF32, {2})},
        "tensor 'w': name appears more than once");
  check({Meta("", DType::kF32, {1})}, "name must not be empty");
  check({Meta("__metadata__", DType::kF32, {1})}, "tensor '__metadata__': name is reserved");
  check({Meta("bad\xff", DType::kF32, {1})}, "not valid UTF-8");
  TensorMeta lying = Meta("w", DType::kF32, {2});
  lying.bytes = 7;
  check({lying}, "tensor 'w': bytes is 7 but shape [2] x F32 = 8");
  auto meta = EncodeSafetensorsHeader({}, {{"k", "\xc0\x80"}});
  ASSERT_FALSE(meta.ok());
  EXPECT_NE(meta.status().message().find("metadata 'k'"), std::string::npos);
}

// Random tensors of every dtype, scalars and 0-element ones included, through the writer and back.
TEST_F(SafetensorsWriterTest, RoundTripsEveryDType) {
  std::mt19937_64 rng(42);
  std::vector<TensorMeta> metas;
  std::vector<std::string> data;
  for (DType dtype : AllDTypes()) {
    const std::string base(DTypeName(dtype));
    metas.push_back(Meta(base + ".scalar", dtype, {}));
    metas.push_back(Meta(base + ".empty", dtype, {3, 0}));
    metas.push_back(Meta(base + ".matrix", dtype, {static_cast<int64_t>(rng() % 7 + 1), 5}));
    metas.push_back(Meta(base + ".cube", dtype, {2, 3, static_cast<int64_t>(rng() % 4 + 1)}));
  }
  std::vector<TensorBytes> tensors;
  for (const auto& m : metas) {
    std::string d(m.bytes, '\0');
    for (auto& c : d) c = static_cast<char>(rng());
    data.push_back(std::move(d));
  }
  for (size_t i = 0; i < metas.size(); ++i) tensors.push_back({metas[i], Bytes(data[i])});
  const std::map<std::string, std::string> metadata = {{"format", "pt"}, {"note", "ünïcödé \"quoted\""}};
  const std::string path = dir_ + "/all.safetensors";
  ASSERT_TRUE(WriteSafetensors(path, tensors, metadata).ok());
  EXPECT_FALSE(fs::exists(path + ".tmp"));

  auto f = SafetensorsFile::Open(path);
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  EXPECT_EQ(f->metadata(), metadata);
  ASSERT_EQ(f->tensors().size(), metas.size());
  uint64_t offset = 0;
  for (size_t i = 0; i < metas.size(); ++i) {
    const SafetensorsTensor& t = f->tensors()[i];
    EXPECT_EQ(t.meta, metas[i]);
    EXPECT_EQ(t.data, (ByteRange{offset, metas[i].bytes}));
    auto view = f->Data(t);
    EXPECT_EQ(std::string(reinterpret_cast<const char*>(view.data()), view.size()), data[i]) << t.meta.name;
    offset += metas[i].bytes;
  }
  EXPECT_EQ(f->file_size(), ReadAll(path).size());
}

TEST_F(SafetensorsWriterTest, AppendsInPiecesAndEnforcesSizes) {
  const std::string path = dir_ + "/pieces.safetensors";
  std::vector<TensorMeta> metas = {Meta("a", DType::kU8, {10}), Meta("zero", DType::kF32, {0}),
                                   Meta("b", DType::kI16, {3})};
  auto w = SafetensorsWriter::Create(path, metas);
  ASSERT_TRUE(w.ok()) << w.status().ToString();
  const std::string a = "0123456789", b = "abcdef";
  ASSERT_TRUE(w->Append(Bytes(a).subspan(0, 3)).ok());
  ASSERT_TRUE(w->Append({}).ok());
  ASSERT_TRUE(w->Append(Bytes(a).subspan(3, 6)).ok());
  Status cross = w->Append(Bytes(a.substr(9) + "ab"));  // would cross into 'b'
  ASSERT_FALSE(cross.ok());
  EXPECT_NE(cross.message().find("tensor 'a': 3 bytes appended but only 1 of its 10 bytes remain"),
            std::string::npos)
      << cross.message();
  ASSERT_TRUE(w->Append(Bytes(a).subspan(9)).ok());
  Status short_finish = w->Finish();
  ASSERT_FALSE(short_finish.ok());
  EXPECT_NE(short_finish.message().find("tensor 'b' has 0 of its 6 bytes"), std::string::npos)
      << short_finish.message();
  EXPECT_FALSE(fs::exists(path));
  ASSERT_TRUE(w->Append(Bytes(b).subspan(0, 1)).ok());
  ASSERT_TRUE(w->Append(Bytes(b).subspan(1)).ok());
  Status extra = w->Append(Bytes(b));
  ASSERT_FALSE(extra.ok());
  EXPECT_NE(extra.message().find("after the last tensor 'b'"), std::string::npos) << extra.message();
  ASSERT_TRUE(w->Finish().ok());
  EXPECT_EQ(w->Finish().code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(w->Append(Bytes(b)).code(), StatusCode::kFailedPrecondition);

  auto f = SafetensorsFile::Open(path);
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  auto view = f->Data(*f->Find("a"));
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(view.data()), view.size()), a);
  view = f->Data(*f->Find("b"));
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(view.data()), view.size()), b);
}

TEST_F(SafetensorsWriterTest, UnfinishedWriterLeavesOldFileAndNoTemporary) {
  const std::string path = dir_ + "/keep.safetensors";
  const std::string old = "old";
  ASSERT_TRUE(
      WriteSafetensors(path, std::vector<TensorBytes>{{Meta("x", DType::kU8, {3}), Bytes(old)}}).ok());
  const std::string before = ReadAll(path);
  {
    auto w = SafetensorsWriter::Create(path, {Meta("y", DType::kU8, {4})});
    ASSERT_TRUE(w.ok());
    EXPECT_TRUE(fs::exists(path + ".tmp"));
    ASSERT_TRUE(w->Append(Bytes(old)).ok());
    SafetensorsWriter moved = std::move(*w);  // the moved-from writer must not remove the file
    EXPECT_TRUE(fs::exists(path + ".tmp"));
  }
  EXPECT_FALSE(fs::exists(path + ".tmp"));
  EXPECT_EQ(ReadAll(path), before);
}

TEST_F(SafetensorsWriterTest, EmptyFileAndErrors) {
  const std::string path = dir_ + "/empty.safetensors";
  ASSERT_TRUE(WriteSafetensors(path, {}).ok());
  EXPECT_EQ(ReadAll(path), std::string("\x08\0\0\0\0\0\0\0{}      ", 16));
  auto f = SafetensorsFile::Open(path);
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  EXPECT_TRUE(f->tensors().empty());

  const std::string three = "abc";
  Status mismatch =
      WriteSafetensors(path, std::vector<TensorBytes>{{Meta("w", DType::kF32, {1}), Bytes(three)}});
  ASSERT_FALSE(mismatch.ok());
  EXPECT_NE(mismatch.message().find("tensor 'w' has 3 bytes of data"), std::string::npos);
  auto no_dir = SafetensorsWriter::Create(dir_ + "/no/such/dir.safetensors", {});
  ASSERT_FALSE(no_dir.ok());
  EXPECT_EQ(no_dir.status().code(), StatusCode::kIoError);
  EXPECT_NE(no_dir.status().message().find("dir.safetensors.tmp"), std::string::npos);
  auto dup = SafetensorsWriter::Create(path, {Meta("w", DType::kU8, {1}), Meta("w", DType::kU8, {1})});
  ASSERT_FALSE(dup.ok());
  EXPECT_NE(dup.status().message().find(path + ": tensor 'w'"), std::string::npos) << dup.status().message();
}

}  // namespace
}  // namespace weightport::safetensors_writer_test
