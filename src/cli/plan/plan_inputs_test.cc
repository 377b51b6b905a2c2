#include "cli/plan/plan_inputs.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "weightport/core/manifest.h"
#include "weightport/core/placement_builders.h"
#include "weightport/format/synthetic_model.h"

namespace weightport::cli {
namespace {

namespace fs = std::filesystem;
using Json = nlohmann::json;

std::vector<TensorMeta> Model(const char* preset = "tiny", ModelArch arch = ModelArch::kDense) {
  return ModelTensors(*PresetSpec(preset, arch));
}

Result<Placement> FromSpec(const std::string& text, std::vector<TensorMeta> tensors = Model()) {
  return PlacementFromLayoutSpec(Json::parse(text), std::move(tensors), "spec.json");
}

// The error of a spec that must fail; fails the test when it does not.
std::string SpecError(const std::string& text, std::vector<TensorMeta> tensors = Model()) {
  auto p = FromSpec(text, std::move(tensors));
  EXPECT_FALSE(p.ok()) << text;
  return p.ok() ? "" : p.status().message();
}

class PlanInputsFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string t = (fs::temp_directory_path() / "wp-plan-inputs-XXXXXX").string();
    ASSERT_NE(mkdtemp(t.data()), nullptr);
    dir_ = t;
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string Write(const std::string& name, const std::string& text) {
    const std::string path = (fs::path(dir_) / name).string();
    std::ofstream(path) << text;
    return path;
  }
  std::string dir_;
};

TEST(LayoutSpecTest, MeshMatchesTheBuilders) {
  auto p = FromSpec(
      R"({"mesh": [{"axis": "dp", "kind": "replica", "size": 2}, {"axis": "tp", "kind": "tp", "size": 2}],
          "rank_offset": 0, "description": "two TP-2 replicas"})");
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  const std::vector<MeshAxis> axes = {ReplicaAxis("dp", 2), TensorParallelAxis("tp", 2)};
  auto expected = BuildMesh(Model(), axes);
  ASSERT_TRUE(expected.ok());
  EXPECT_EQ(*p, *expected);
  EXPECT_EQ(p->ranks(), (std::vector<int>{0, 1, 2, 3}));
}

TEST(LayoutSpecTest, AxisNameDefaultsToKindAndRankOffsetShiftsRanks) {
  auto p = FromSpec(R"({"mesh": [{"kind": "fsdp2", "size": 3}], "rank_offset": 5})");
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  EXPECT_EQ(p->ranks(), (std::vector<int>{5, 6, 7}));
  auto expected = BuildMesh(Model(), std::vector<MeshAxis>{Fsdp2Axis("fsdp2", 3)}, 5);
  ASSERT_TRUE(expected.ok());
  EXPECT_EQ(*p, *expected);
}

TEST(LayoutSpecTest, EveryKindAndOptionBuilds) {
  const auto tiny = Model();
  const int layers = PresetSpec("tiny", ModelArch::kDense)->layers;  // 6
  ASSERT_EQ(layers, 6);
  {
    auto p = FromSpec(R"({"mesh": [{"kind": "pp", "size": 2, "layers_per_stage": [4, 2],
                                     "first_stage": ["*embed_tokens*"],
                                     "last_stage": ["*lm_head*", "model.norm.*"]}]})");
    ASSERT_TRUE(p.ok()) << p.status().ToString();
    PipelineOptions o;
    o.layers_per_stage = {4, 2};
    EXPECT_EQ(*p, *PipelineStages(tiny, 2, o));
  }
  {
    auto p = FromSpec(R"({"mesh": [{"kind": "fsdp", "size": 4, "unit_per_layer": true}]})");
    ASSERT_TRUE(p.ok()) << p.status().ToString();
    EXPECT_EQ(*p, *FsdpFlat(tiny, 4, FsdpFlatOptions{.unit_per_layer = true}));
    EXPECT_NE(*p, *FsdpFlat(tiny, 4));
  }
  {
    const auto moe = Model("tiny", ModelArch::kMoe);
    auto p = FromSpec(
        R"({"mesh": [{"kind": "ep", "size": 4, "assignment": "round_robin", "non_expert": "tp"}]})", moe);
    ASSERT_TRUE(p.ok()) << p.status().ToString();
    ExpertOptions o;
    o.assignment = ExpertAssignment::kRoundRobin;
    o.non_expert_tp = LlamaTpRules();
    EXPECT_EQ(*p, *ExpertParallel(moe, 4, o));
    auto contiguous = FromSpec(R"({"mesh": [{"kind": "ep", "size": 4, "assignment": "contiguous"}]})", moe);
    ASSERT_TRUE(contiguous.ok());
    EXPECT_EQ(*contiguous, *ExpertParallel(moe, 4));
  }
  {
    // Custom rules: only q_proj split, everything else replicated.
    auto p = FromSpec(R"({"mesh": [{"kind": "tp", "size": 2, "replicate_unmatched": true,
                                     "rules": [{"glob": "*.q_proj.*", "kind": "column", "granule": 64}]}]})");
    ASSERT_TRUE(p.ok()) << p.status().ToString();
    const std::vector<TpPattern> rules = {{"*.q_proj.*", {TpKind::kColumn, 64}},
                                          {"*", {TpKind::kReplicated}}};
    EXPECT_EQ(*p, *TensorParallel(tiny, 2, rules));
  }
}

TEST(LayoutSpecTest, ErrorsNameTheFileAndPath) {
  std::string e = SpecError(R"({"mesh": [{"kind": "replica", "size": 2}], "rank_ofset": 1})");
  EXPECT_NE(e.find("spec.json"), std::string::npos) << e;
  EXPECT_NE(e.find("unknown key 'rank_ofset'"), std::string::npos) << e;

  e = SpecError(R"({"mesh": [{"kind": "replica", "size": 2}, {"axis": "tp", "kind": "tpp", "size": 2}]})");
  EXPECT_NE(e.find("spec.json: mesh[1].kind: unknown kind 'tpp'"), std::string::npos) << e;

  e = SpecError(R"({"mesh": [{"kind": "ep", "size": 2, "asignment": "contiguous"}]})");
  EXPECT_NE(e.find("mesh[0]: unknown key 'asignment'"), std::string::npos) << e;

  e = SpecError(R"({"mesh": [{"kind": "ep", "size": 2, "assignment": "striped"}]})");
  EXPECT_NE(e.find("mesh[0].assignment: unknown assignment 'striped'"), std::string::npos) << e;

  e = SpecError(R"({"mesh": [{"kind": "replica", "size": 0}]})");
  EXPECT_NE(e.find("mesh[0].size: must be in [1, "), std::string::npos) << e;

  e = SpecError(R"({"mesh": [{"kind": "replica", "size": "2"}]})");
  EXPECT_NE(e.find("mesh[0].size: must be an integer"), std::string::npos) << e;

  e = SpecError(R"({"mesh": [{"kind": "replica"}]})");
  EXPECT_NE(e.find("mesh[0]: needs 'size'"), std::string::npos) << e;

  e = SpecError(R"({"mesh": []})");
  EXPECT_NE(e.find("mesh: must be a non-empty array"), std::string::npos) << e;

  e = SpecError(
      R"({"mesh": [{"axis": "a", "kind": "replica", "size": 2}, {"axis": "a", "kind": "tp", "size": 2}]})");
  EXPECT_NE(e.find("mesh[1]: axis name 'a' is used twice"), std::string::npos) << e;

  e = SpecError(R"({"mesh": [{"kind": "pp", "size": 2, "layers_per_stage": [6]}]})");
  EXPECT_NE(e.find("mesh[0].layers_per_stage: has 1 entries for 2 stages"), std::string::npos) << e;

  e = SpecError(R"({"mesh": [{"kind": "pp", "size": 2, "layers_per_stage": [3, -3]}]})");
  EXPECT_NE(e.find("mesh[0].layers_per_stage[1]: must be in [0, "), std::string::npos) << e;

  e = SpecError(R"({"mesh": [{"kind": "tp", "size": 2, "rules": [{"glob": "*", "kind": "diagonal"}]}]})");
  EXPECT_NE(e.find("mesh[0].rules[0].kind: unknown rule kind 'diagonal'"), std::string::npos) << e;

  e = SpecError(R"({"mesh": [{"kind": "fsdp", "size": 2, "unit_per_layer": 1}]})");
  EXPECT_NE(e.find("mesh[0].unit_per_layer: must be true or false"), std::string::npos) << e;

  // A builder error (a tensor no TP rule matches) names the tensor.
  e = SpecError(
      R"({"mesh": [{"kind": "tp", "size": 2, "rules": [{"glob": "*.q_proj.*", "kind": "column"}]}]})");
  EXPECT_NE(e.find("spec.json: mesh: "), std::string::npos) << e;
  EXPECT_NE(e.find("model.embed_tokens.weight"), std::string::npos) << e;
}

TEST(LayoutSpecTest, KindsListIsWhatTheParserAccepts) {
  for (const std::string& kind : LayoutKinds()) {
    auto p =
        FromSpec(R"({"mesh": [{"kind": ")" + kind + R"(", "size": 2}]})", Model("tiny", ModelArch::kMoe));
    EXPECT_TRUE(p.ok()) << kind << ": " << p.status().ToString();
  }
}

TEST_F(PlanInputsFileTest, PlacementJsonAndSpecFiles) {
  const auto tiny = Model();
  auto tp = TensorParallel(tiny, 2);
  ASSERT_TRUE(tp.ok());
  const std::string placement_path = Write("tp2.json", tp->ToJson().dump());
  // A placement JSON carries its own tensors; with a model it is checked against it.
  auto loaded = LoadPlacementFile(placement_path, std::nullopt);
  ASSERT_TRUE(loaded.ok()) << loaded.status().ToString();
  EXPECT_EQ(*loaded, *tp);
  EXPECT_TRUE(LoadPlacementFile(placement_path, tiny).ok());
  auto mismatch = LoadPlacementFile(placement_path, Model("small"));
  ASSERT_FALSE(mismatch.ok());
  EXPECT_NE(mismatch.status().message().find(placement_path + " does not match the model"), std::string::npos)
      << mismatch.status().message();

  const std::string spec_path = Write("spec.json", R"({"mesh": [{"axis": "tp", "kind": "tp", "size": 2}]})");
  auto spec = LoadPlacementFile(spec_path, tiny);
  ASSERT_TRUE(spec.ok()) << spec.status().ToString();
  EXPECT_EQ(*spec, *tp);
  auto no_model = LoadPlacementFile(spec_path, std::nullopt);
  ASSERT_FALSE(no_model.ok());
  EXPECT_NE(no_model.status().message().find(spec_path + ": a layout spec needs the model's tensors"),
            std::string::npos)
      << no_model.status().message();
}

TEST_F(PlanInputsFileTest, APlacementJsonIsRenamedBeforeTheModelCheck) {
  const auto tiny = Model();
  auto tp = TensorParallel(tiny, 2);
  ASSERT_TRUE(tp.ok());
  Json wrapped = tp->ToJson();  // as a DDP trainer names them
  for (Json& t : wrapped["tensors"]) t["name"] = "module." + t["name"].get<std::string>();
  for (Json& rank : wrapped["ranks"])
    for (Json& shard : rank["shards"]) shard["tensor"] = "module." + shard["tensor"].get<std::string>();
  const std::string path = Write("ddp-tp2.json", wrapped.dump());
  EXPECT_FALSE(LoadPlacementFile(path, tiny).ok());  // module.* is not the model's
  const auto renames = ParseTensorRenames(std::vector<std::string>{"module.="}).value();
  auto loaded = LoadPlacementFile(path, tiny, renames);
  ASSERT_TRUE(loaded.ok()) << loaded.status().ToString();
  EXPECT_EQ(*loaded, *tp);

  const std::string both = Write("both.json", R"({"tensors": [
      {"name": "module.w", "dtype": "f32", "shape": [2]}, {"name": "w", "dtype": "f32", "shape": [2]}],
      "ranks": [{"rank": 0, "shards": []}]})");
  auto r = LoadPlacementFile(both, std::nullopt, renames);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find(both + ": tensors 'module.w' and 'w' are both renamed 'w'"),
            std::string::npos)
      << r.status().message();
}

TEST_F(PlanInputsFileTest, BadFilesAreNamed) {
  const std::string garbage = Write("garbage.json", "{not json");
  auto r = LoadPlacementFile(garbage, Model());
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find(garbage), std::string::npos) << r.status().message();

  const std::string neither = Write("neither.json", R"({"layout": "tp2"})");
  r = LoadPlacementFile(neither, Model());
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find(neither + ": neither a layout spec"), std::string::npos)
      << r.status().message();

  const std::string bad_placement =
      Write("bad.json", R"({"tensors": [], "ranks": [{"rank": -1, "shards": []}]})");
  r = LoadPlacementFile(bad_placement, std::nullopt);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find(bad_placement + ": placement.ranks[0].rank"), std::string::npos)
      << r.status().message();

  r = LoadPlacementFile((fs::path(dir_) / "missing.json").string(), Model());
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("missing.json"), std::string::npos) << r.status().message();
}

TEST_F(PlanInputsFileTest, ManifestTensors) {
  const auto tiny = Model();
  auto manifest = Manifest::FromMetas(3, tiny);
  ASSERT_TRUE(manifest.ok());
  const std::string path = Write("manifest.json", manifest->ToJson().dump());
  auto tensors = LoadManifestTensors(path);
  ASSERT_TRUE(tensors.ok()) << tensors.status().ToString();
  EXPECT_EQ(*tensors, tiny);

  const std::string bad = Write("bad-manifest.json", R"({"version": 1})");
  auto r = LoadManifestTensors(bad);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find(bad), std::string::npos) << r.status().message();
}

TEST_F(PlanInputsFileTest, TopologyFile) {
  const std::string path = Write("topo.json", R"({"nic_gbps": 200, "intra_host_gbps": 800,
      "hosts": [{"name": "a", "nic_gbps": 400, "src_ranks": [0, 1], "dst_ranks": [0]},
                {"name": "b", "src_ranks": [2, 3], "dst_ranks": [1]}]})");
  auto t = LoadTopologyFile(path);
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  ASSERT_EQ(t->hosts().size(), 2u);
  EXPECT_EQ(t->hosts()[0].name, "a");
  EXPECT_DOUBLE_EQ(t->hosts()[0].nic_gbps, 400);
  EXPECT_DOUBLE_EQ(t->hosts()[1].nic_gbps, 200);  // the default
  EXPECT_EQ(t->HostOf({PlanSide::kSource, 3}), 1);
  EXPECT_EQ(t->HostOf({PlanSide::kDestination, 0}), 0);

  const std::string twice = Write("twice.json", R"({"hosts": [{"name": "a", "src_ranks": [0]},
                                                              {"name": "b", "src_ranks": [0]}]})");
  auto r = LoadTopologyFile(twice);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find(twice), std::string::npos) << r.status().message();
  const std::string typo = Write("typo.json", R"({"hosts": [], "nic_gbs": 100})");
  r = LoadTopologyFile(typo);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find(typo), std::string::npos) << r.status().message();
}

}  // namespace
}  // namespace weightport::cli
