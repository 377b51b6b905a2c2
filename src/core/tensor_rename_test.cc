#include "weightport/core/tensor_rename.h"
#include "core/core_test_util.h"

#include <gtest/gtest.h>

namespace weightport {
namespace {

using core_test::Meta;

std::vector<TensorRename> Renames(std::vector<std::string> specs) {
  return ParseTensorRenames(specs).value();
}

std::string Renamed(std::string_view name, std::vector<std::string> specs) {
  return RenameTensor(name, Renames(std::move(specs)));
}

bool HasSubstr(const Status& s, const std::string& sub) { return s.message().find(sub) != std::string::npos; }

TEST(TensorRename, APrefixReplacesWholeLeadingSegmentsOnly) {
  EXPECT_EQ(Renamed("model.decoder.fc.w", {"model.decoder=decoder"}), "decoder.fc.w");
  EXPECT_EQ(Renamed("model.decoders.w", {"model.decoder=decoder"}), "model.decoders.w");
  EXPECT_EQ(Renamed("x.model.decoder.w", {"model.decoder=decoder"}), "x.model.decoder.w");
  EXPECT_EQ(Renamed("model.decoder", {"model.decoder=decoder"}), "decoder");
}

TEST(TensorRename, ATrailingDotIsOptionalAndAnEmptyReplacementRemoves) {
  for (const char* spec : {"module=", "module.=", "module=.", "module.=."})
    EXPECT_EQ(Renamed("module.fc.weight", {spec}), "fc.weight") << spec;
  EXPECT_EQ(Renamed("module.fc.weight", {"module.=net."}), "net.fc.weight");
  EXPECT_EQ(Renamed("modules.fc", {"module=net"}), "modules.fc");
}

TEST(TensorRename, AStarPrefixReplacesTheSegmentsAnywhereLeftToRight) {
  EXPECT_EQ(Renamed("_orig_mod.a._orig_mod.b", {"*._orig_mod="}), "a.b");
  EXPECT_EQ(Renamed("a.x_orig_mod.b", {"*._orig_mod="}), "a.x_orig_mod.b");
  EXPECT_EQ(Renamed("layers.0.attn.qkv.weight", {"*.attn.qkv=self_attn.qkv_proj"}),
            "layers.0.self_attn.qkv_proj.weight");
  EXPECT_EQ(Renamed("a.b.a.b.a", {"*.a.b=c"}), "c.c.a");
}

TEST(TensorRename, RenamesApplyInOrderEachToTheLastResult) {
  EXPECT_EQ(Renamed("a.x", {"a=b", "b=c"}), "c.x");
  EXPECT_EQ(Renamed("a.x", {"b=c", "a=b"}), "b.x");
}

TEST(TensorRename, UnwrapsDdpFsdpAndCompileNames) {
  const std::vector<std::string> unwrap = {"*._orig_mod=", "*._fsdp_wrapped_module=", "module="};
  EXPECT_EQ(Renamed("module._orig_mod.layers.0._fsdp_wrapped_module.w", unwrap), "layers.0.w");
  EXPECT_EQ(Renamed("_orig_mod.module.w", unwrap), "w");
  EXPECT_EQ(Renamed("encoder.module.w", unwrap), "encoder.module.w");
}

TEST(TensorRename, BadSpecsAreRefusedNamingThem) {
  for (const char* spec : {"module", "=x", ".=x", "*.=x", "a..b=x", "a.*.b=x", "*.*=x"}) {
    auto r = ParseTensorRename(spec);
    ASSERT_FALSE(r.ok()) << spec;
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
    EXPECT_TRUE(HasSubstr(r.status(), std::string("rename '") + spec + "'")) << r.status().message();
  }
  EXPECT_EQ(Renamed("a.w", {"a=b=c"}), "b=c.w");  // split at the first '='
}

TEST(TensorRename, TwoTensorsRenamedAlikeAreAnErrorNamingBoth) {
  auto r = RenameTensors({Meta("module.fc.weight", {2}), Meta("fc.weight", {2})}, Renames({"module.="}));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(
      HasSubstr(r.status(), "tensors 'module.fc.weight' and 'fc.weight' are both renamed 'fc.weight'"))
      << r.status().message();
}

TEST(TensorRename, ATensorRenamedToNothingIsAnErrorNamingIt) {
  auto r = RenameTensors({Meta("module.w", {2}), Meta("module", {2})}, Renames({"module="}));
  ASSERT_FALSE(r.ok());
  EXPECT_TRUE(HasSubstr(r.status(), "tensor 'module': the renames map it to an empty name"))
      << r.status().message();
}

TEST(TensorRename, APlacementKeepsItsRanksShardsAndOrderUnderNewNames) {
  Placement p = Placement::Make({Meta("module.w", {4, 6}), Meta("module.b", {6})}).value();
  p.AddShard(3, "module.w", Slice::MakeBox({0, 0}, {2, 6}));
  p.AddShard(3, "module.b", Slice::Full({6}));
  p.AddShard(7, "module.w", Slice::MakeBox({2, 0}, {2, 6}));
  p.AddRank(10);
  Placement q = RenameTensors(p, Renames({"module="})).value();
  ASSERT_EQ(q.tensors().size(), 2u);
  EXPECT_EQ(q.tensors()[0], Meta("w", {4, 6}));
  EXPECT_EQ(q.tensors()[1], Meta("b", {6}));
  EXPECT_EQ(q.ranks(), (std::vector<int>{3, 7, 10}));
  ASSERT_EQ(q.shards(3).size(), 2u);
  EXPECT_EQ(q.shards(3)[0], (Shard{"w", Slice::MakeBox({0, 0}, {2, 6})}));
  EXPECT_EQ(q.shards(3)[1], (Shard{"b", Slice::Full({6})}));
  EXPECT_EQ(q.shards(7)[0], (Shard{"w", Slice::MakeBox({2, 0}, {2, 6})}));
  EXPECT_TRUE(q.shards(10).empty());
  EXPECT_TRUE(q.Validate().ok());
  EXPECT_EQ(RenameTensors(p, {}).value(), p);  // no renames: the same placement
}

}  // namespace
}  // namespace weightport
