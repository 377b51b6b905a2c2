#include "weightport/format/model_files.h"

#include <gtest/gtest.h>

namespace weightport::model_files {
namespace {

std::vector<TensorMeta> Tensors(std::initializer_list<int64_t> sizes) {
  std::vector<TensorMeta> out;
  int i = 0;
  for (int64_t s : sizes) out.push_back(*TensorMeta::Make("t" + std::to_string(i++), DType::kU8, {s}));
  return out;
}

TEST(ModelFilesTest, SplitKeepsOrderAndBalances) {
  auto groups = SplitIntoShards(Tensors({10, 10, 10, 10, 10, 10}), 3);
  ASSERT_TRUE(groups.ok());
  ASSERT_EQ(groups->size(), 3u);
  for (const auto& g : *groups) EXPECT_EQ(g.size(), 2u);
  EXPECT_EQ((*groups)[2][1].name, "t5");
}

TEST(ModelFilesTest, SplitNeverLeavesAShardEmpty) {
  auto groups = SplitIntoShards(Tensors({1000, 1, 1}), 3);
  ASSERT_TRUE(groups.ok());
  for (const auto& g : *groups) EXPECT_EQ(g.size(), 1u);
  groups = SplitIntoShards(Tensors({1, 1, 1000}), 3);
  ASSERT_TRUE(groups.ok());
  for (const auto& g : *groups) EXPECT_EQ(g.size(), 1u);
}

TEST(ModelFilesTest, SplitRejectsImpossibleCounts) {
  EXPECT_FALSE(SplitIntoShards(Tensors({1, 2}), 3).ok());
  EXPECT_FALSE(SplitIntoShards(Tensors({1, 2}), 0).ok());
  EXPECT_EQ(SplitIntoShards(Tensors({1, 2}), 1)->at(0).size(), 2u);
}

}  // namespace
}  // namespace weightport::model_files
