#include "weightport/core/dtype.h"

#include <gtest/gtest.h>

#include <set>

namespace weightport {
namespace {

TEST(DTypeTest, SizesAndSafetensorsNames) {
  struct Case {
    DType d;
    size_t size;
    const char* st;
  };
  const Case cases[] = {
      {DType::kF64, 8, "F64"},   {DType::kF32, 4, "F32"},        {DType::kF16, 2, "F16"},
      {DType::kBF16, 2, "BF16"}, {DType::kF8E4M3, 1, "F8_E4M3"}, {DType::kF8E5M2, 1, "F8_E5M2"},
      {DType::kI64, 8, "I64"},   {DType::kI32, 4, "I32"},        {DType::kI16, 2, "I16"},
      {DType::kI8, 1, "I8"},     {DType::kU8, 1, "U8"},          {DType::kBool, 1, "BOOL"},
      {DType::kU16, 2, "U16"},   {DType::kU32, 4, "U32"},        {DType::kU64, 8, "U64"}};
  for (const auto& c : cases) {
    EXPECT_EQ(DTypeSize(c.d), c.size) << c.st;
    EXPECT_EQ(SafetensorsDTypeName(c.d), c.st);
    auto parsed = ParseSafetensorsDType(c.st);
    ASSERT_TRUE(parsed.ok()) << c.st;
    EXPECT_EQ(*parsed, c.d);
  }
  EXPECT_EQ(AllDTypes().size(), std::size(cases));
}

TEST(DTypeTest, NamesRoundTripAndAreUnique) {
  std::set<std::string_view> names;
  for (DType d : AllDTypes()) {
    EXPECT_TRUE(names.insert(DTypeName(d)).second);
    auto r = ParseDTypeName(DTypeName(d));
    ASSERT_TRUE(r.ok());
    EXPECT_EQ(*r, d);
  }
}

TEST(DTypeTest, AliasesAndCase) {
  EXPECT_EQ(*ParseDTypeName("bfloat16"), DType::kBF16);
  EXPECT_EQ(*ParseDTypeName("BF16"), DType::kBF16);
  EXPECT_EQ(*ParseDTypeName("float8_e4m3fn"), DType::kF8E4M3);
  EXPECT_EQ(*ParseDTypeName("F8_E5M2"), DType::kF8E5M2);
  EXPECT_EQ(*ParseDTypeName("float32"), DType::kF32);
}

TEST(DTypeTest, UnknownNamesAreNamedInTheError) {
  auto r = ParseSafetensorsDType("F128");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("F128"), std::string::npos);
  EXPECT_FALSE(ParseSafetensorsDType("bf16").ok());  // safetensors names are exact upper case
  EXPECT_FALSE(ParseDTypeName("complex64").ok());
}

TEST(DTypeTest, FloatingPointClassification) {
  EXPECT_TRUE(IsFloatingPoint(DType::kBF16));
  EXPECT_TRUE(IsFloatingPoint(DType::kF8E4M3));
  EXPECT_FALSE(IsFloatingPoint(DType::kI32));
  EXPECT_FALSE(IsFloatingPoint(DType::kBool));
}

}  // namespace
}  // namespace weightport
