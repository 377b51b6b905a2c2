#include "weightport/format/synthetic_model.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <set>

#include "float_bits.h"
#include "weightport/format/checkpoint.h"

namespace weightport {
namespace {

namespace fs = std::filesystem;

class TempDir {
 public:
  TempDir() {
    std::string t = (fs::temp_directory_path() / "wp-synth-XXXXXX").string();
    path_ = mkdtemp(t.data());
  }
  ~TempDir() { fs::remove_all(path_); }
  std::string operator/(const std::string& s) const { return (fs::path(path_) / s).string(); }

 private:
  std::string path_;
};

TEST(SyntheticModelTest, PresetSizesMatchTheirNames) {
  struct Want {
    const char* preset;
    double lo_mb, hi_mb;
  };
  for (ModelArch arch : {ModelArch::kDense, ModelArch::kMoe}) {
    for (Want w : {Want{"tiny", 40, 60}, Want{"small", 450, 550}, Want{"1b", 2200, 2700}}) {
      auto spec = PresetSpec(w.preset, arch);
      ASSERT_TRUE(spec.ok());
      const double mb = static_cast<double>(ModelBytes(*spec)) / 1e6;
      EXPECT_GE(mb, w.lo_mb) << w.preset << " " << ModelArchName(arch);
      EXPECT_LE(mb, w.hi_mb) << w.preset << " " << ModelArchName(arch);
    }
  }
  EXPECT_FALSE(PresetSpec("70b", ModelArch::kDense).ok());
}

TEST(SyntheticModelTest, TensorNamesFollowHuggingFaceLayouts) {
  auto dense = ModelTensors(*PresetSpec("tiny", ModelArch::kDense));
  std::set<std::string> names;
  for (const auto& t : dense) names.insert(t.name);
  EXPECT_EQ(names.size(), dense.size());
  EXPECT_TRUE(names.count("model.embed_tokens.weight"));
  EXPECT_TRUE(names.count("model.layers.0.self_attn.q_proj.weight"));
  EXPECT_TRUE(names.count("model.layers.5.mlp.down_proj.weight"));
  EXPECT_TRUE(names.count("lm_head.weight"));
  auto spec = *PresetSpec("tiny", ModelArch::kMoe);
  names.clear();
  for (const auto& t : ModelTensors(spec)) names.insert(t.name);
  EXPECT_TRUE(names.count("model.layers.0.mlp.gate.weight"));
  EXPECT_TRUE(names.count("model.layers.2.mlp.experts.7.up_proj.weight"));
  EXPECT_TRUE(names.count("model.layers.1.mlp.shared_experts.down_proj.weight"));
  EXPECT_FALSE(names.count("model.layers.0.mlp.experts.8.up_proj.weight"));
}

TEST(SyntheticModelTest, OverridesRescale) {
  auto spec = *PresetSpec("tiny", ModelArch::kMoe);
  auto o = ApplyOverrides(spec, {.layers = 2, .hidden = 1024, .experts = 4});
  ASSERT_TRUE(o.ok());
  EXPECT_EQ(o->layers, 2);
  EXPECT_EQ(o->experts, 4);
  EXPECT_EQ(o->heads, 16);
  EXPECT_EQ(o->moe_intermediate, 768);
  EXPECT_EQ(o->preset, "custom");
  EXPECT_FALSE(ApplyOverrides(spec, {.hidden = 100}).ok());
  EXPECT_FALSE(ApplyOverrides(*PresetSpec("tiny", ModelArch::kDense), {.experts = 4}).ok());
}

TEST(SyntheticModelTest, FillIsDeterministicAndWeightLike) {
  auto meta = *TensorMeta::Make("model.layers.0.mlp.up_proj.weight", DType::kF32, {512, 1000});
  std::vector<std::byte> a(meta.bytes), b(meta.bytes), c(meta.bytes);
  ASSERT_TRUE(FillTensor(meta, 5, a).ok());
  ASSERT_TRUE(FillTensor(meta, 5, b).ok());
  ASSERT_TRUE(FillTensor(meta, 6, c).ok());
  EXPECT_EQ(a, b);
  EXPECT_NE(a, c);
  const float* v = reinterpret_cast<const float*>(a.data());
  double sum = 0, sq = 0;
  std::set<float> distinct;
  const size_t n = meta.bytes / 4;
  for (size_t i = 0; i < n; ++i) sum += v[i], sq += double(v[i]) * v[i], distinct.insert(v[i]);
  const double mean = sum / n, sd = std::sqrt(sq / n - mean * mean);
  EXPECT_NEAR(mean, 0.0, 0.001);
  EXPECT_NEAR(sd, 0.02, 0.001);
  EXPECT_GT(distinct.size(), n / 4);  // not a constant, not a handful of values

  auto norm = *TensorMeta::Make("model.norm.weight", DType::kBF16, {4096});
  std::vector<std::byte> nb(norm.bytes);
  ASSERT_TRUE(FillTensor(norm, 5, nb).ok());
  double nsum = 0;
  for (size_t i = 0; i < 4096; ++i) {
    uint16_t h;
    std::memcpy(&h, nb.data() + 2 * i, 2);
    nsum += float_bits::Bf16ToF32(h);
  }
  EXPECT_NEAR(nsum / 4096, 1.0, 0.01);
}

TEST(SyntheticModelTest, FillRejectsUnsupportedDtypeAndWrongSize) {
  auto meta = *TensorMeta::Make("w", DType::kI32, {4});
  std::vector<std::byte> out(16);
  EXPECT_FALSE(FillTensor(meta, 1, out).ok());
  auto f = *TensorMeta::Make("w", DType::kF32, {4});
  std::vector<std::byte> small(8);
  EXPECT_FALSE(FillTensor(f, 1, small).ok());
}

TEST(SyntheticModelTest, GenerateWritesAReadableShardedCheckpoint) {
  TempDir dir;
  auto spec = *ApplyOverrides(*PresetSpec("tiny", ModelArch::kDense), {.layers = 2, .hidden = 128});
  uint64_t last = 0;
  GenerateOptions g{
      .out_dir = dir / "m", .seed = 9, .shards = 3, .progress = [&](uint64_t d, uint64_t) { last = d; }};
  ASSERT_TRUE(GenerateModel(spec, g).ok());
  EXPECT_EQ(last, ModelBytes(spec));
  auto ckpt = Checkpoint::Open(dir / "m");
  ASSERT_TRUE(ckpt.ok()) << ckpt.status().ToString();
  EXPECT_EQ(ckpt->files().size(), 3u);
  EXPECT_TRUE(fs::exists(dir / "m/model.safetensors.index.json"));
  EXPECT_EQ(ckpt->total_bytes(), ModelBytes(spec));
  EXPECT_EQ(ckpt->metadata().at("weightport.seed"), "9");
  // Contents equal FillTensor's for every tensor.
  for (const auto& meta : ModelTensors(spec)) {
    const auto* t = ckpt->Find(meta.name);
    ASSERT_NE(t, nullptr) << meta.name;
    std::vector<std::byte> want(meta.bytes);
    ASSERT_TRUE(FillTensor(meta, 9, want).ok());
    auto got = ckpt->Data(*t);
    ASSERT_TRUE(std::equal(got.begin(), got.end(), want.begin(), want.end())) << meta.name;
  }
  // A second generate into the same place is refused unless overwrite.
  Status again = GenerateModel(spec, g);
  EXPECT_EQ(again.code(), StatusCode::kAlreadyExists);
  g.overwrite = true, g.shards = 1;
  ASSERT_TRUE(GenerateModel(spec, g).ok());
  EXPECT_EQ(Checkpoint::Open(dir / "m")->files().size(), 1u);
}

// Counts elements whose bits differ between two checkpoints, and the runs they form.
std::pair<uint64_t, uint64_t> DiffElements(const Checkpoint& a, const Checkpoint& b) {
  uint64_t changed = 0, runs = 0;
  for (const auto& t : a.tensors()) {
    auto x = a.Data(t), y = b.Data(*b.Find(t.meta().name));
    const size_t es = DTypeSize(t.meta().dtype);
    bool prev = false;
    for (size_t i = 0; i < x.size(); i += es) {
      const bool diff = std::memcmp(x.data() + i, y.data() + i, es) != 0;
      changed += diff;
      runs += diff && !prev;
      prev = diff;
    }
  }
  return {changed, runs};
}

TEST(SyntheticModelTest, PerturbChangesExactlyTheFractionInRuns) {
  TempDir dir;
  auto spec =
      *ApplyOverrides(*PresetSpec("tiny", ModelArch::kMoe), {.layers = 1, .hidden = 128, .experts = 2});
  ASSERT_TRUE(GenerateModel(spec, {.out_dir = dir / "v1", .seed = 1, .shards = 2}).ok());
  auto report = PerturbModel(
      {.from_dir = dir / "v1", .out_dir = dir / "v2", .fraction = 0.05, .block = 256, .seed = 3});
  ASSERT_TRUE(report.ok()) << report.status().ToString();
  auto a = *Checkpoint::Open(dir / "v1");
  auto b = *Checkpoint::Open(dir / "v2");
  uint64_t total = 0;
  for (const auto& t : a.tensors()) total += t.meta().num_elements();
  const uint64_t want = static_cast<uint64_t>(std::llround(0.05 * static_cast<double>(total)));
  EXPECT_EQ(report->elements_total, total);
  EXPECT_EQ(report->elements_changed, want);
  auto [changed, runs] = DiffElements(a, b);
  EXPECT_EQ(changed, want);
  EXPECT_LE(runs, want / 256 + 2 * a.tensors().size());  // clustered, not scattered
  EXPECT_EQ(b.metadata().at("weightport.step"), "1");
  EXPECT_EQ(b.files().size(), 2u);
  EXPECT_TRUE(fs::exists(dir / "v2/model.safetensors.index.json"));

  auto scattered =
      PerturbModel({.from_dir = dir / "v1", .out_dir = dir / "v3", .fraction = 0.01, .block = 1});
  ASSERT_TRUE(scattered.ok());
  EXPECT_EQ(DiffElements(a, *Checkpoint::Open(dir / "v3")).first, scattered->elements_changed);

  // Exact for every seed and for runs much larger than the change (the sampler must not skip
  // past the point where the rest of the model can still hold what is needed).
  for (uint64_t seed = 1; seed <= 8; ++seed) {
    auto r = PerturbModel({.from_dir = dir / "v1",
                           .out_dir = dir / "v4",
                           .fraction = 0.001,
                           .block = 1u << 16,
                           .seed = seed,
                           .overwrite = true});
    ASSERT_TRUE(r.ok());
    const uint64_t need = static_cast<uint64_t>(std::llround(0.001 * static_cast<double>(total)));
    EXPECT_EQ(r->elements_changed, need) << "seed " << seed;
    EXPECT_EQ(DiffElements(a, *Checkpoint::Open(dir / "v4")).first, need) << "seed " << seed;
  }
}

// Sizes come from the command line: a tensor too large to fill in memory, or a model larger than
// the disk, is refused before anything is allocated or written.
TEST(SyntheticModelTest, GenerateRefusesModelsTooLargeToHoldOrStore) {
  TempDir dir;
  auto huge_tensor = *ApplyOverrides(*PresetSpec("1b", ModelArch::kDense), {.hidden = 65536});
  Status s = GenerateModel(huge_tensor, {.out_dir = dir / "a"});
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.ToString();
  EXPECT_NE(s.message().find("tensor 'model.layers.0.mlp.gate_proj.weight' would be 23622320128 bytes"),
            std::string::npos)
      << s.message();
  // About 6 TB: more than any disk these tests run on.
  auto huge_model = *ApplyOverrides(*PresetSpec("1b", ModelArch::kDense), {.layers = 1024, .hidden = 16384});
  s = GenerateModel(huge_model, {.out_dir = dir / "b/c"});
  EXPECT_EQ(s.code(), StatusCode::kResourceExhausted) << s.ToString();
  EXPECT_NE(s.message().find("bytes free"), std::string::npos) << s.message();
  EXPECT_FALSE(fs::exists(dir / "a"));
  EXPECT_FALSE(fs::exists(dir / "b"));
}

TEST(SyntheticModelTest, PerturbRejectsBadArguments) {
  TempDir dir;
  EXPECT_FALSE(PerturbModel({.from_dir = dir / "none", .out_dir = dir / "x", .fraction = 0.1}).ok());
  EXPECT_FALSE(PerturbModel({.from_dir = dir / "none", .out_dir = dir / "x", .fraction = 1.5}).ok());
  EXPECT_FALSE(
      PerturbModel({.from_dir = dir / "none", .out_dir = dir / "x", .fraction = 0.1, .block = 0}).ok());
}

TEST(SyntheticModelTest, PerturbInMemoryChangesExactlyTheFractionOfFloatElements) {
  std::vector<TensorMeta> tensors = {*TensorMeta::Make("a", DType::kBF16, {64, 100}),
                                     *TensorMeta::Make("ids", DType::kI32, {50}),
                                     *TensorMeta::Make("b", DType::kF32, {300})};
  uint64_t bytes = 0;
  for (const auto& t : tensors) bytes += t.bytes;
  std::vector<std::byte> before(bytes);
  uint64_t offset = 0;
  bool filled = true;
  for (const auto& t : tensors) {
    if (t.dtype != DType::kI32)
      filled = filled && FillTensor(t, 5, std::span(before).subspan(offset, t.bytes)).ok();
    offset += t.bytes;
  }
  ASSERT_TRUE(filled);
  std::vector<std::byte> after = before;
  auto report = PerturbInMemory(tensors, after, 0.1, 16, 9);
  ASSERT_TRUE(report.ok()) << report.status().ToString();
  EXPECT_EQ(report->elements_total, 6400u + 300u);
  EXPECT_EQ(report->elements_changed, 670u);  // round(0.1 x 6700)
  // Count changed elements per tensor; the integer tensor is untouched.
  uint64_t changed = 0;
  offset = 0;
  for (const auto& t : tensors) {
    const size_t es = DTypeSize(t.dtype);
    for (uint64_t i = 0; i < t.bytes; i += es) {
      const bool differs = std::memcmp(before.data() + offset + i, after.data() + offset + i, es) != 0;
      if (t.dtype == DType::kI32) {
        EXPECT_FALSE(differs);
      }
      changed += differs ? 1 : 0;
    }
    offset += t.bytes;
  }
  EXPECT_EQ(changed, 670u);
  EXPECT_FALSE(PerturbInMemory(tensors, std::span(after).first(bytes - 1), 0.1).ok());  // wrong size
  EXPECT_FALSE(PerturbInMemory(tensors, after, 2.0).ok());
}

}  // namespace
}  // namespace weightport
