#include "weightport/core/status.h"

#include <gtest/gtest.h>

namespace weightport {
namespace {

TEST(StatusTest, OkIsCheapAndEmpty) {
  Status s;
  EXPECT_TRUE(s.ok());
  EXPECT_EQ(s.code(), StatusCode::kOk);
  EXPECT_EQ(s.message(), "");
  EXPECT_EQ(s.ToString(), "OK");
  EXPECT_EQ(sizeof(Status), sizeof(void*) * 2);  // one shared_ptr
}

TEST(StatusTest, ErrorCarriesCodeAndMessage) {
  Status s = InvalidArgument("model.safetensors: tensor 'w': bad shape");
  EXPECT_FALSE(s.ok());
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(s.ToString(), "InvalidArgument: model.safetensors: tensor 'w': bad shape");
}

TEST(StatusTest, WithContextPrefixesAndKeepsCode) {
  Status s = NotFound("tensor 'x'").WithContext("rank 3");
  EXPECT_EQ(s.code(), StatusCode::kNotFound);
  EXPECT_EQ(s.message(), "rank 3: tensor 'x'");
  EXPECT_TRUE(Status::Ok().WithContext("anything").ok());
}

TEST(StatusTest, ErrnoErrorNamesTheCause) {
  Status s = ErrnoError("cannot open /nope", ENOENT);
  EXPECT_EQ(s.code(), StatusCode::kIoError);
  EXPECT_NE(s.message().find("/nope"), std::string::npos);
  EXPECT_NE(s.message().find("No such file"), std::string::npos);
}

TEST(StatusTest, EveryCodeHasAName) {
  for (int c = 0; c <= static_cast<int>(StatusCode::kInternal); ++c)
    EXPECT_NE(StatusCodeName(static_cast<StatusCode>(c)), "Unknown") << c;
}

Result<int> Half(int x) {
  if (x % 2) return InvalidArgument(std::to_string(x) + " is odd");
  return x / 2;
}

Result<int> Quarter(int x) {
  WP_ASSIGN_OR_RETURN(int h, Half(x));
  WP_ASSIGN_OR_RETURN(int q, Half(h));
  return q;
}

Status CheckEven(int x) {
  WP_RETURN_IF_ERROR(Half(x).status());
  return Status::Ok();
}

TEST(ResultTest, ValueOrStatusPropagates) {
  auto r = Quarter(8);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(*r, 2);
  auto bad = Quarter(6);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().message(), "3 is odd");
  EXPECT_TRUE(CheckEven(4).ok());
  EXPECT_EQ(CheckEven(5).code(), StatusCode::kInvalidArgument);
}

TEST(ResultTest, OkStatusBecomesInternalError) {
  Result<int> r = Status::Ok();
  EXPECT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInternal);
}

TEST(ResultTest, MoveOnlyValues) {
  Result<std::unique_ptr<int>> r = std::make_unique<int>(7);
  ASSERT_TRUE(r.ok());
  std::unique_ptr<int> p = std::move(r).value();
  EXPECT_EQ(*p, 7);
}

}  // namespace
}  // namespace weightport
