#include "weightport/format/checkpoint.h"

#include <unistd.h>

#include <cstdlib>
#include <deque>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "weightport/core/hash.h"
#include "weightport/format/safetensors_writer.h"

namespace weightport {
namespace {

namespace fs = std::filesystem;

std::span<const std::byte> Bytes(const std::string& s) {
  return {reinterpret_cast<const std::byte*>(s.data()), s.size()};
}

class CheckpointTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = ::testing::TempDir() + "/wp_ckpt_XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl.data()), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override { fs::remove_all(dir_); }

  // Writes a shard holding U8 tensors named `names`, each 4 bytes of "<name>" padded with '.'.
  void WriteShard(const std::string& file, const std::vector<std::string>& names,
                  const std::map<std::string, std::string>& metadata = {}) {
    std::vector<TensorBytes> tensors;
    for (const auto& n : names) {
      data_.push_back((n + "....").substr(0, 4));
      tensors.push_back({*TensorMeta::Make(n, DType::kU8, {4}), Bytes(data_.back())});
    }
    ASSERT_TRUE(WriteSafetensors(dir_ + "/" + file, tensors, metadata).ok());
  }

  void WriteIndex(const std::map<std::string, std::string>& weight_map) {
    ShardIndex index;
    index.total_size = 4 * weight_map.size();
    index.weight_map = weight_map;
    ASSERT_TRUE(index.Write(dir_ + "/" + std::string(kShardIndexFileName)).ok());
  }

  void ExpectOpenError(std::string_view needle1, std::string_view needle2 = "") {
    auto c = Checkpoint::Open(dir_);
    ASSERT_FALSE(c.ok());
    EXPECT_NE(c.status().message().find(needle1), std::string::npos) << c.status().message();
    EXPECT_NE(c.status().message().find(needle2), std::string::npos) << c.status().message();
  }

  std::string dir_;
  std::deque<std::string> data_;
};

TEST(ShardFileName, FormatsLikeTransformers) {
  EXPECT_EQ(ShardFileName(1, 1), "model.safetensors");
  EXPECT_EQ(ShardFileName(2, 4), "model-00002-of-00004.safetensors");
  EXPECT_EQ(ShardFileName(12, 123), "model-00012-of-00123.safetensors");
}

TEST(ShardIndex, JsonRoundTripAndValidation) {
  ShardIndex index;
  index.total_size = 1234;
  index.metadata["format"] = "pt";
  index.weight_map = {{"a", "model-00001-of-00002.safetensors"}, {"b", "model-00002-of-00002.safetensors"}};
  const nlohmann::json j = index.ToJson();
  EXPECT_EQ(j["metadata"]["total_size"], 1234);
  auto back = ShardIndex::FromJson(j, "idx.json");
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->total_size, 1234u);
  EXPECT_EQ(back->weight_map, index.weight_map);
  EXPECT_EQ(back->metadata.at("format"), "pt");
  EXPECT_EQ(back->metadata.at("total_size"), "1234");

  auto bad = [](const nlohmann::json& json, std::string_view needle) {
    auto r = ShardIndex::FromJson(json, "idx.json");
    ASSERT_FALSE(r.ok());
    EXPECT_NE(r.status().message().find("idx.json"), std::string::npos) << r.status().message();
    EXPECT_NE(r.status().message().find(needle), std::string::npos) << r.status().message();
  };
  bad(nlohmann::json::array(), "must be a JSON object");
  bad({{"metadata", {{"total_size", 1u}}}}, "'weight_map' is missing");
  bad({{"metadata", {{"total_size", -1}}}, {"weight_map", nlohmann::json::object()}}, "total_size");
  bad({{"metadata", 3}, {"weight_map", nlohmann::json::object()}}, "'metadata' must be an object");
  bad({{"weight_map", {{"a", 1}}}}, "tensor 'a' must be a file name");
  bad({{"weight_map", {{"a", "../x.safetensors"}}}}, "not a plain file name");
  bad({{"weight_map", {{"a", ".."}}}}, "not a plain file name");
}

TEST_F(CheckpointTest, OpensSingleFile) {
  WriteShard("one.safetensors", {"w", "b"}, {{"format", "pt"}});
  auto c = Checkpoint::Open(dir_ + "/one.safetensors");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->files().size(), 1u);
  ASSERT_EQ(c->tensors().size(), 2u);
  EXPECT_EQ(c->tensors()[0].meta().name, "w");
  EXPECT_EQ(c->metadata().at("format"), "pt");
  EXPECT_EQ(c->total_bytes(), 8u);
  const CheckpointTensor* b = c->Find("b");
  ASSERT_NE(b, nullptr);
  auto data = c->Data(*b);
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(data.data()), data.size()), "b...");
  EXPECT_EQ(c->Find("nope"), nullptr);
}

TEST_F(CheckpointTest, OpensDirectoryWithoutIndexInNameOrder) {
  WriteShard("b.safetensors", {"z"});
  WriteShard("a.safetensors", {"y", "x"}, {{"first", "yes"}});
  std::ofstream(dir_ + "/notes.txt") << "ignored";
  auto c = Checkpoint::Open(dir_);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  ASSERT_EQ(c->files().size(), 2u);
  ASSERT_EQ(c->tensors().size(), 3u);
  EXPECT_EQ(c->tensors()[0].meta().name, "y");
  EXPECT_EQ(c->tensors()[1].meta().name, "x");
  EXPECT_EQ(c->tensors()[2].meta().name, "z");
  EXPECT_EQ(c->tensors()[2].file, 1u);
  EXPECT_EQ(c->metadata().at("first"), "yes");

  // Moving the checkpoint keeps tensor views valid.
  Checkpoint moved = std::move(*c);
  auto z = moved.Data(*moved.Find("z"));
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(z.data()), z.size()), "z...");
}

TEST_F(CheckpointTest, RejectsTensorInTwoShards) {
  WriteShard("a.safetensors", {"x", "dup"});
  WriteShard("b.safetensors", {"dup"});
  ExpectOpenError("tensor 'dup' is in two shards", "a.safetensors and " + dir_ + "/b.safetensors");
}

TEST_F(CheckpointTest, EmptyOrMissingDirectory) {
  ExpectOpenError("no .safetensors files");
  auto missing = Checkpoint::Open(dir_ + "/missing");
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("missing"), std::string::npos);
}

TEST_F(CheckpointTest, OpensDirectoryWithIndex) {
  WriteShard(ShardFileName(1, 2), {"a", "b"}, {{"format", "pt"}});
  WriteShard(ShardFileName(2, 2), {"c"});
  WriteShard("stray.safetensors", {"a"});  // not in the index: ignored
  WriteIndex({{"a", ShardFileName(1, 2)}, {"b", ShardFileName(1, 2)}, {"c", ShardFileName(2, 2)}});
  auto c = Checkpoint::Open(dir_);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  ASSERT_EQ(c->files().size(), 2u);
  EXPECT_EQ(c->tensors().size(), 3u);
  EXPECT_EQ(c->metadata().at("format"), "pt");
  EXPECT_EQ(c->Find("c")->file, 1u);

  auto manifest = c->BuildManifest(7, 2);
  ASSERT_TRUE(manifest.ok()) << manifest.status().ToString();
  EXPECT_EQ(manifest->version(), 7u);
  EXPECT_EQ(manifest->total_bytes(), 12u);
  ASSERT_EQ(manifest->tensors().size(), 3u);
  EXPECT_EQ(manifest->tensors()[2].meta.name, "c");
  EXPECT_EQ(manifest->tensors()[2].hash, Xxh3("c...", 4));
  EXPECT_EQ(manifest->tensors()[2].chunk_hashes.size(), 2u);
}

TEST_F(CheckpointTest, IndexIsCheckedBothWays) {
  WriteShard("s1.safetensors", {"a", "b"});
  WriteShard("s2.safetensors", {"c"});
  WriteIndex(
      {{"a", "s1.safetensors"}, {"b", "s1.safetensors"}, {"c", "s2.safetensors"}, {"d", "s3.safetensors"}});
  ExpectOpenError("s3.safetensors");  // missing file

  WriteIndex(
      {{"a", "s1.safetensors"}, {"b", "s1.safetensors"}, {"c", "s2.safetensors"}, {"d", "s2.safetensors"}});
  ExpectOpenError("tensor 'd' is listed in s2.safetensors but that file lacks it");

  WriteIndex({{"a", "s1.safetensors"}, {"b", "s2.safetensors"}, {"c", "s2.safetensors"}});
  ExpectOpenError("tensor 'b' is listed in s2.safetensors but that file lacks it");

  WriteIndex({{"a", "s1.safetensors"}, {"c", "s2.safetensors"}});
  ExpectOpenError("s1.safetensors: tensor 'b' is not listed in", std::string(kShardIndexFileName));

  std::ofstream(dir_ + "/" + std::string(kShardIndexFileName)) << "{not json";
  ExpectOpenError(std::string(kShardIndexFileName), "not valid JSON");
}

TEST(FirstMissingShard, NamesTheFirstGapOfEachNumberedSet) {
  EXPECT_EQ(FirstMissingShard({}), "");
  EXPECT_EQ(FirstMissingShard({"model.safetensors", "a.safetensors", "x-1.safetensors"}), "");
  EXPECT_EQ(FirstMissingShard({ShardFileName(1, 2), ShardFileName(2, 2)}), "");
  EXPECT_EQ(FirstMissingShard({ShardFileName(1, 4)}), ShardFileName(2, 4));
  EXPECT_EQ(FirstMissingShard({ShardFileName(2, 3), ShardFileName(3, 3)}), ShardFileName(1, 3));
  // Other prefixes and widths keep their own; each numbered set is checked on its own.
  EXPECT_EQ(FirstMissingShard({"unet-1-of-2.safetensors"}), "unet-2-of-2.safetensors");
  EXPECT_EQ(FirstMissingShard({"a-001-of-002.safetensors", "a-002-of-002.safetensors", "b-1-of-3.safetensors",
                               "b-2-of-3.safetensors"}),
            "b-3-of-3.safetensors");
  // A name claiming an absurd count costs one step: the walk stops at the first gap.
  EXPECT_EQ(FirstMissingShard({"m-1-of-999999999.safetensors"}), "m-2-of-999999999.safetensors");
}

// A writer killed after its first shards (or a copy that lost one) must not pass for a checkpoint.
TEST_F(CheckpointTest, RefusesAnIncompleteShardSet) {
  WriteShard(ShardFileName(1, 3), {"a"});
  WriteShard(ShardFileName(3, 3), {"c"});
  ExpectOpenError("checkpoint is incomplete: " + ShardFileName(2, 3) + " is missing");
  fs::remove(dir_ + "/" + ShardFileName(3, 3));
  ExpectOpenError("checkpoint is incomplete: " + ShardFileName(2, 3) + " is missing");

  // With an index: a file it lists is missing, or its -of-N names say one is.
  WriteShard(ShardFileName(2, 3), {"b"});
  WriteIndex({{"a", ShardFileName(1, 3)}, {"b", ShardFileName(2, 3)}, {"c", ShardFileName(3, 3)}});
  ExpectOpenError("checkpoint is incomplete: " + ShardFileName(3, 3) + " is missing", kShardIndexFileName);
  WriteIndex({{"a", ShardFileName(1, 3)}, {"b", ShardFileName(2, 3)}});
  ExpectOpenError("checkpoint is incomplete: " + ShardFileName(3, 3) + " is missing", kShardIndexFileName);

  WriteShard(ShardFileName(3, 3), {"c"});
  WriteIndex({{"a", ShardFileName(1, 3)}, {"b", ShardFileName(2, 3)}, {"c", ShardFileName(3, 3)}});
  auto c = Checkpoint::Open(dir_);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->tensors().size(), 3u);
}

TEST_F(CheckpointTest, ReportsTheCorruptShard) {
  WriteShard("good.safetensors", {"a"});
  std::ofstream(dir_ + "/zbad.safetensors", std::ios::binary) << std::string("\x02\0\0\0\0\0\0\0[]", 10);
  ExpectOpenError("zbad.safetensors: header must be a JSON object");
}

}  // namespace
}  // namespace weightport
