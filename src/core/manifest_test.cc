#include "weightport/core/manifest.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <random>

#include "weightport/core/hash.h"

namespace weightport {
namespace {

struct Model {
  std::vector<TensorMeta> metas;
  std::vector<std::vector<std::byte>> data;
  std::vector<TensorBytes> Bytes() const {
    std::vector<TensorBytes> out;
    for (size_t i = 0; i < metas.size(); ++i) out.push_back({metas[i], data[i]});
    return out;
  }
};

Model MakeModel(uint64_t seed) {
  Model m;
  std::mt19937_64 rng(seed);
  const std::vector<std::pair<std::string, Shape>> shapes = {
      {"embed", {300, 17}}, {"norm", {17}}, {"empty", {0, 4}}, {"scalar", {}}, {"w", {64, 64}}};
  for (const auto& [name, shape] : shapes) {
    m.metas.push_back(*TensorMeta::Make(name, DType::kF32, shape));
    std::vector<std::byte> d(m.metas.back().bytes);
    for (auto& b : d) b = std::byte(rng());
    m.data.push_back(std::move(d));
  }
  return m;
}

TEST(ManifestTest, OffsetsTotalsAndChunks) {
  Model model = MakeModel(1);
  auto m = Manifest::Build(7, model.Bytes(), 1000);
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  EXPECT_EQ(m->version(), 7u);
  EXPECT_EQ(m->chunk_size(), 1000u);
  uint64_t offset = 0;
  size_t chunks = 0;
  for (size_t i = 0; i < model.metas.size(); ++i) {
    const ManifestTensor& t = m->tensors()[i];
    EXPECT_EQ(t.offset, offset);
    EXPECT_EQ(t.hash, Xxh3(model.data[i]));
    EXPECT_EQ(t.chunk_hashes.size(), (t.meta.bytes + 999) / 1000);
    for (size_t c = 0; c < t.chunk_hashes.size(); ++c) {
      ByteRange r = m->ChunkRange(t, c);
      EXPECT_EQ(t.chunk_hashes[c], Xxh3(model.data[i].data() + r.offset, r.length));
    }
    offset += t.meta.bytes;
    chunks += t.chunk_hashes.size();
  }
  EXPECT_EQ(m->total_bytes(), offset);
  EXPECT_EQ(m->num_chunks(), chunks);
  EXPECT_EQ(m->Find("w"), &m->tensors()[4]);
  EXPECT_EQ(m->Find("nope"), nullptr);
}

TEST(ManifestTest, RejectsBadInput) {
  Model model = MakeModel(1);
  EXPECT_FALSE(Manifest::Build(1, model.Bytes(), 0).ok());
  auto bytes = model.Bytes();
  bytes[1].data = bytes[1].data.subspan(1);
  auto r = Manifest::Build(1, bytes);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("'norm'"), std::string::npos);
  bytes = model.Bytes();
  bytes.push_back(bytes[0]);
  r = Manifest::Build(1, bytes);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("duplicate tensor 'embed'"), std::string::npos);
}

TEST(ManifestTest, ChangedChunksFindsExactlyTheModifiedOnes) {
  Model a = MakeModel(1), b = MakeModel(1);
  b.data[0][2500] ^= std::byte{0x10};  // embed, chunk 2
  b.data[4][0] ^= std::byte{1};        // w, chunk 0
  auto ma = *Manifest::Build(1, a.Bytes(), 1000), mb = *Manifest::Build(2, b.Bytes(), 1000);
  EXPECT_EQ(mb.ChangedChunks(mb.tensors()[0], ma), std::vector<size_t>{2});
  EXPECT_TRUE(mb.ChangedChunks(mb.tensors()[1], ma).empty());
  EXPECT_EQ(mb.ChangedChunks(mb.tensors()[4], ma), std::vector<size_t>{0});
  // A different chunk size makes every chunk count as changed.
  auto mc = *Manifest::Build(3, b.Bytes(), 500);
  EXPECT_EQ(mc.ChangedChunks(mc.tensors()[1], ma).size(), mc.tensors()[1].chunk_hashes.size());
}

TEST(ManifestTest, JsonRoundTrip) {
  Model model = MakeModel(3);
  auto m = *Manifest::Build(42, model.Bytes(), 333);
  auto back = Manifest::FromJson(m.ToJson());
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(*back, m);
  EXPECT_EQ(back->Find("norm")->meta.shape, (Shape{17}));
}

TEST(ManifestTest, JsonErrorsNameTheField) {
  Model model = MakeModel(3);
  nlohmann::json j = Manifest::Build(1, model.Bytes(), 333)->ToJson();
  auto expect_error = [](const nlohmann::json& bad, const std::string& needle) {
    auto r = Manifest::FromJson(bad);
    ASSERT_FALSE(r.ok());
    EXPECT_NE(r.status().message().find(needle), std::string::npos) << r.status().message();
  };
  auto bad = j;
  bad["tensors"][1]["dtype"] = "f128";
  expect_error(bad, "tensor 'norm'");
  bad = j;
  bad["tensors"][0]["bytes"] = 5;
  expect_error(bad, "bytes 5");
  bad = j;
  bad["tensors"][4]["chunk_xxh3"].erase(0);
  expect_error(bad, "chunk hashes");
  bad = j;
  bad["total_bytes"] = 1;
  expect_error(bad, "total_bytes");
  bad = j;
  bad["tensors"][0]["xxh3"] = "zz";
  expect_error(bad, "xxh3");
  bad = j;
  bad["tensors"][0]["shape"] = {-1, 2};
  expect_error(bad, "negative");
  expect_error(nlohmann::json::array(), "manifest");
}

TEST(ManifestTest, FromMetasHasLayoutWithoutHashes) {
  Model model = MakeModel(1);
  auto m = Manifest::FromMetas(1, model.metas, 1000);
  ASSERT_TRUE(m.ok());
  EXPECT_EQ(m->total_bytes(), Manifest::Build(1, model.Bytes(), 1000)->total_bytes());
  EXPECT_EQ(m->num_chunks(), Manifest::Build(1, model.Bytes(), 1000)->num_chunks());
}

}  // namespace
}  // namespace weightport
