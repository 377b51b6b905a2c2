#include "weightport/core/tensor_meta.h"

#include <gtest/gtest.h>

namespace weightport {
namespace {

TEST(TensorMetaTest, BytesFromShapeAndDType) {
  auto m = TensorMeta::Make("w", DType::kBF16, {4096, 11008});
  ASSERT_TRUE(m.ok());
  EXPECT_EQ(m->bytes, 4096ull * 11008 * 2);
  EXPECT_EQ(m->num_elements(), 4096 * 11008);
}

TEST(TensorMetaTest, ScalarAndEmpty) {
  EXPECT_EQ(TensorMeta::Make("s", DType::kF32, {})->bytes, 4u);
  EXPECT_EQ(TensorMeta::Make("e", DType::kF32, {3, 0, 5})->bytes, 0u);
}

TEST(TensorMetaTest, NegativeDimensionNamesTensor) {
  auto m = TensorMeta::Make("layer.0.w", DType::kF32, {2, -1});
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.status().message().find("layer.0.w"), std::string::npos);
  EXPECT_NE(m.status().message().find("negative"), std::string::npos);
}

TEST(TensorMetaTest, OverflowIsAnError) {
  EXPECT_FALSE(TensorMeta::Make("big", DType::kF32, {1ll << 40, 1ll << 40}).ok());
  // Elements fit in int64 but bytes do not.
  EXPECT_FALSE(TensorMeta::Make("big", DType::kF64, {1ll << 61}).ok());
  EXPECT_TRUE(TensorMeta::Make("ok", DType::kU8, {1ll << 40}).ok());
}

TEST(TensorMetaTest, ShapeToString) { EXPECT_EQ(ShapeToString({2, 3}), "[2, 3]"); }

}  // namespace
}  // namespace weightport
