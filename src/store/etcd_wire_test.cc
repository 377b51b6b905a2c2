#include "etcd_wire.h"

#include <string>

#include <gtest/gtest.h>

#include "weightport/core/json_util.h"

namespace weightport::store_internal {
namespace {

TEST(EtcdWireTest, Int64FieldsAreStringsNumbersOrAbsent) {
  Json j = Json::parse(R"({"a": "9007199254740993", "b": 7, "c": "-3", "d": "x", "e": 1.5, "f": ""})");
  EXPECT_EQ(*Int64Field(j, "a", "t"), 9007199254740993);  // past a double's exact integers
  EXPECT_EQ(*Int64Field(j, "b", "t"), 7);
  EXPECT_EQ(*Int64Field(j, "c", "t"), -3);
  EXPECT_EQ(*Int64Field(j, "absent", "t"), 0);  // proto3 leaves zero values out
  for (const char* bad : {"d", "e", "f"}) {
    auto r = Int64Field(j, bad, "answer");
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_EQ(r.status().code(), StatusCode::kDataLoss);
    EXPECT_NE(r.status().message().find("answer: field '" + std::string(bad) + "'"), std::string::npos);
  }
}

TEST(EtcdWireTest, PrefixEndIsTheFirstKeyPastThePrefix) {
  EXPECT_EQ(PrefixEnd("/a/"), "/a0");
  EXPECT_EQ(PrefixEnd(std::string("a\xff\xff", 3)), "b");
  EXPECT_EQ(PrefixEnd(std::string("\xff", 1)), std::string(1, '\0'));
  EXPECT_EQ(PrefixEnd(""), std::string(1, '\0'));
}

TEST(EtcdWireTest, PrintableKeyEscapesBytesAndCuts) {
  EXPECT_EQ(PrintableKey(std::string("a\0b\\", 4)), "a\\x00b\\x5c");
  std::string longer(500, 'k');
  EXPECT_EQ(PrintableKey(longer), std::string(120, 'k') + "...");
}

TEST(EtcdWireTest, ParsesAKeyValueWithItsZeroFieldsLeftOut) {
  // An empty value and no lease: the gateway leaves both out.
  Json kv = Json::parse(R"({"key":"Zm9v","create_revision":"5","mod_revision":"6","version":"2"})");
  auto parsed = ParseKeyValue(kv, "t");
  ASSERT_TRUE(parsed.ok()) << parsed.status().ToString();
  EXPECT_EQ(parsed->key, "foo");
  EXPECT_EQ(parsed->value, "");
  EXPECT_EQ(parsed->create_revision, 5);
  EXPECT_EQ(parsed->mod_revision, 6);
  EXPECT_EQ(parsed->version, 2);
  EXPECT_EQ(parsed->lease, 0);
  EXPECT_EQ(ParseKeyValue(Json::parse(R"({"key":"!!"})"), "t").status().code(), StatusCode::kDataLoss);
}

TEST(EtcdWireTest, AFailedTxnLeavesSucceededOutAndCarriesItsReads) {
  // As etcd 3.4 answers: no "succeeded" field when the compare failed.
  Json answer = Json::parse(R"({"header":{"revision":"9"},"responses":[
      {"response_range":{"header":{"revision":"9"},"kvs":[{"key":"Zm9v","mod_revision":"2","value":"YmFy"}],"count":"1"}},
      {"response_range":{"header":{"revision":"9"}}}]})");
  auto r = ParseTxnAnswer(answer, 2, "t");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_FALSE(r->succeeded);
  EXPECT_EQ(r->revision, 9);
  ASSERT_EQ(r->reads.size(), 2u);
  ASSERT_TRUE(r->reads[0].has_value());
  EXPECT_EQ(r->reads[0]->value, "bar");
  EXPECT_FALSE(r->reads[1].has_value());
  EXPECT_EQ(ParseTxnAnswer(answer, 1, "t").status().code(), StatusCode::kDataLoss);
  auto ok = ParseTxnAnswer(Json::parse(R"({"header":{"revision":"10"},"succeeded":true})"), 2, "t");
  ASSERT_TRUE(ok.ok());
  EXPECT_TRUE(ok->succeeded);
}

TEST(EtcdWireTest, TxnRequestComparesCreateRevisionForAbsentKeys) {
  EtcdTxn txn;
  txn.compares = {{"new", 0}, {"old", 42}};
  txn.puts = {{"new", "v", 7}};
  txn.reads = {"new"};
  Json req = TxnRequest(txn);
  EXPECT_EQ(req["compare"][0]["target"], "CREATE");
  EXPECT_EQ(req["compare"][0]["create_revision"], "0");
  EXPECT_EQ(req["compare"][1]["target"], "MOD");
  EXPECT_EQ(req["compare"][1]["mod_revision"], "42");
  EXPECT_EQ(req["success"][0]["request_put"]["lease"], "7");
  EXPECT_EQ(req["failure"][0]["request_range"]["key"], "bmV3");
}

TEST(EtcdWireTest, GatewayErrorsMapTheirGrpcCode) {
  auto s = GatewayError(
      404,
      R"({"error":"etcdserver: requested lease not found","message":"etcdserver: requested lease not found","code":5})",
      "etcd h:1: revoke lease 5");
  EXPECT_EQ(s.code(), StatusCode::kNotFound);
  EXPECT_EQ(s.message(), "etcd h:1: revoke lease 5: etcdserver: requested lease not found");
  EXPECT_EQ(GatewayError(400, R"({"message":"bad","code":3})", "c").code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(GatewayError(503, R"({"message":"no leader","code":14})", "c").code(), StatusCode::kUnavailable);
  // A streaming call's error, nested.
  EXPECT_EQ(GatewayError(200, R"({"error":{"grpc_code":4,"message":"deadline"}})", "c").code(),
            StatusCode::kTimeout);
  auto plain = GatewayError(404, "Not Found\n", "etcd h:1: get 'k'");
  EXPECT_EQ(plain.code(), StatusCode::kUnimplemented);
  EXPECT_NE(plain.message().find("HTTP 404"), std::string::npos);
  EXPECT_EQ(GatewayError(502, "<html>", "c").code(), StatusCode::kUnavailable);
}

TEST(EtcdWireTest, DumpNeverThrowsOnInvalidUtf8) {
  Json j = {{"reason", std::string("bad \xff byte")}};
  EXPECT_NE(json_util::Dump(j).find("bad"), std::string::npos);
}

}  // namespace
}  // namespace weightport::store_internal
