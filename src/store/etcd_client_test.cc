#include "weightport/store/etcd_client.h"

#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "etcd_test_util.h"

namespace weightport {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

// An etcd and a client of the test's own (etcd_test_util.h).
class EtcdClientTest : public store_test::EtcdTest {};

// Every byte value, NUL and 0xff included.
std::string AllBytes() {
  std::string s;
  for (int i = 0; i < 256; ++i) s += static_cast<char>(i);
  return s;
}

TEST(EtcdEndpointTest, AcceptsHostPortAndItsSchemes) {
  EXPECT_EQ(*ParseEtcdEndpoint("127.0.0.1:2379"), "127.0.0.1:2379");
  EXPECT_EQ(*ParseEtcdEndpoint("etcd://etcd-0.fleet:2379"), "etcd-0.fleet:2379");
  EXPECT_EQ(*ParseEtcdEndpoint("http://127.0.0.1:2379/"), "127.0.0.1:2379");
  EXPECT_EQ(*ParseEtcdEndpoint("[::1]:2379"), "[::1]:2379");
  EXPECT_EQ(*ParseEtcdEndpoint("etcd_0.fleet-a:2379"), "etcd_0.fleet-a:2379");
  for (const char* bad :
       {"", "127.0.0.1", "127.0.0.1:", "h:0", "h:65536", "h:12x", "https://h:2379", "a b:1", "h:1/v3",
        "::1:2379", "etcd://[]:2379", "etcd://-:1", "a..b:1", "-a:1", "a-:1", "[1:2:z]:1", "[::1:1"}) {
    auto r = ParseEtcdEndpoint(bad);
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << bad;
    EXPECT_NE(r.status().message().find("etcd endpoint"), std::string::npos);
  }
}

TEST(EtcdClientDownTest, ConnectionRefusedIsUnavailableAtOnceAndNamesTheEndpoint) {
  auto port = store_test::FreeLoopbackPort();  // nothing listens on it
  ASSERT_TRUE(port.ok());
  auto client = EtcdClient::Create("127.0.0.1:" + std::to_string(*port));
  ASSERT_TRUE(client.ok());
  const auto start = Clock::now();
  auto got = (*client)->Get("/weightport/s/live");
  EXPECT_LT(Clock::now() - start, milliseconds(1500));  // not the 5 s request timeout
  ASSERT_FALSE(got.ok());
  EXPECT_EQ(got.status().code(), StatusCode::kUnavailable);
  const std::string& msg = got.status().message();
  EXPECT_NE(msg.find("etcd 127.0.0.1:" + std::to_string(*port)), std::string::npos) << msg;
  EXPECT_NE(msg.find("'/weightport/s/live'"), std::string::npos) << msg;
  auto lease = (*client)->GrantLease(5);
  ASSERT_FALSE(lease.ok());
  EXPECT_EQ(lease.status().code(), StatusCode::kUnavailable);
}

TEST_F(EtcdClientTest, PutGetDeleteRoundTripBinaryKeysAndValues) {
  const std::string key = "/weightport/t/" + AllBytes();
  const std::string value = AllBytes() + AllBytes();
  auto rev = client_->Put(key, value);
  ASSERT_TRUE(rev.ok()) << rev.status().ToString();
  auto got = client_->Get(key);
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  ASSERT_TRUE(got->has_value());
  EXPECT_EQ((*got)->key, key);
  EXPECT_EQ((*got)->value, value);
  EXPECT_EQ((*got)->mod_revision, *rev);
  EXPECT_EQ((*got)->create_revision, *rev);
  EXPECT_EQ((*got)->version, 1);
  EXPECT_EQ((*got)->lease, 0);

  ASSERT_TRUE(client_->Put(key, "").ok());  // an empty value: the gateway leaves "value" out
  got = client_->Get(key);
  ASSERT_TRUE(got.ok() && got->has_value());
  EXPECT_EQ((*got)->value, "");
  EXPECT_EQ((*got)->version, 2);

  EXPECT_TRUE(*client_->Delete(key));
  EXPECT_FALSE(*client_->Delete(key));
  got = client_->Get(key);
  ASSERT_TRUE(got.ok());
  EXPECT_FALSE(got->has_value());
}

TEST_F(EtcdClientTest, GetPrefixReturnsOnlyThePrefixInKeyOrder) {
  const std::string prefix = std::string("/p\xff", 3);
  for (const std::string& k : {prefix + "b", prefix + "a", prefix + std::string("\xff\xff", 2),
                               std::string("/p"), std::string("/q"), prefix.substr(0, 2) + "\xfe"}) {
    ASSERT_TRUE(client_->Put(k, "v:" + k).ok());
  }
  auto kvs = client_->GetPrefix(prefix);
  ASSERT_TRUE(kvs.ok()) << kvs.status().ToString();
  std::vector<std::string> keys;
  for (const auto& kv : *kvs) {
    keys.push_back(kv.key);
    EXPECT_EQ(kv.value, "v:" + kv.key);
  }
  EXPECT_EQ(keys,
            (std::vector<std::string>{prefix + "a", prefix + "b", prefix + std::string("\xff\xff", 2)}));
  auto all = client_->GetPrefix("");
  ASSERT_TRUE(all.ok());
  EXPECT_EQ(all->size(), 6u);
  auto none = client_->GetPrefix("/none/");
  ASSERT_TRUE(none.ok());
  EXPECT_TRUE(none->empty());
}

TEST_F(EtcdClientTest, PutIfWritesOnlyAtTheExpectedRevision) {
  const std::string key = "/weightport/t/cas";
  auto created = client_->PutIf(key, "one", 0);  // 0: only when absent
  ASSERT_TRUE(created.ok()) << created.status().ToString();
  EXPECT_TRUE(*created);
  EXPECT_FALSE(*client_->PutIf(key, "again", 0));
  auto kv = client_->Get(key);
  ASSERT_TRUE(kv.ok() && kv->has_value());
  EXPECT_EQ((*kv)->value, "one");
  const int64_t rev = (*kv)->mod_revision;
  EXPECT_FALSE(*client_->PutIf(key, "stale", rev - 1));
  EXPECT_TRUE(*client_->PutIf(key, "two", rev));
  EXPECT_FALSE(*client_->PutIf(key, "three", rev));  // the revision moved on
  EXPECT_EQ((*client_->Get(key))->value, "two");
}

TEST_F(EtcdClientTest, AFailedTxnWritesNothingAndReadsItsKeys) {
  ASSERT_TRUE(client_->Put("/t/a", "A").ok());
  EtcdTxn txn;
  txn.compares = {{"/t/a", 0}};  // fails: /t/a exists
  txn.puts = {{"/t/a", "new"}, {"/t/b", "new"}};
  txn.reads = {"/t/a", "/t/b"};
  auto r = client_->Txn(txn);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_FALSE(r->succeeded);
  ASSERT_EQ(r->reads.size(), 2u);
  ASSERT_TRUE(r->reads[0].has_value());
  EXPECT_EQ(r->reads[0]->value, "A");
  EXPECT_FALSE(r->reads[1].has_value());
  EXPECT_FALSE((*client_->Get("/t/b")).has_value());

  txn.compares = {{"/t/a", r->reads[0]->mod_revision}, {"/t/b", 0}};
  auto ok = client_->Txn(txn);
  ASSERT_TRUE(ok.ok());
  EXPECT_TRUE(ok->succeeded);
  EXPECT_EQ((*client_->Get("/t/a"))->mod_revision, ok->revision);
  EXPECT_EQ((*client_->Get("/t/b"))->mod_revision, ok->revision);  // both in one revision
}

TEST_F(EtcdClientTest, LeaseExpiryRemovesItsKeys) {
  auto lease = client_->GrantLease(1);
  ASSERT_TRUE(lease.ok()) << lease.status().ToString();
  ASSERT_TRUE(client_->Put("/t/leased", "x", *lease).ok());
  EXPECT_EQ((*client_->Get("/t/leased"))->lease, *lease);
  // Gone within the TTL plus etcd's expiry sweep (every 500 ms); 30 s is the bound on a busy machine.
  const auto deadline = Clock::now() + std::chrono::seconds(30);
  bool gone = false;
  for (int i = 0; i < 600 && Clock::now() < deadline && !gone; ++i) {
    auto kv = client_->Get("/t/leased");
    ASSERT_TRUE(kv.ok()) << kv.status().ToString();
    gone = !kv->has_value();
    if (!gone) std::this_thread::sleep_for(milliseconds(50));
  }
  EXPECT_TRUE(gone);
  auto ttl = client_->KeepAliveOnce(*lease);
  ASSERT_FALSE(ttl.ok());
  EXPECT_EQ(ttl.status().code(), StatusCode::kNotFound);
  EXPECT_NE(ttl.status().message().find("lease " + std::to_string(*lease)), std::string::npos);
  EXPECT_EQ(client_->Revoke(*lease).code(), StatusCode::kNotFound);
  // A put on a lease that is gone is refused, naming the key.
  auto put = client_->Put("/t/leased", "x", *lease);
  ASSERT_FALSE(put.ok());
  EXPECT_EQ(put.status().code(), StatusCode::kNotFound);
  EXPECT_NE(put.status().message().find("'/t/leased'"), std::string::npos);
}

TEST_F(EtcdClientTest, KeepAliveRenewsAndRevokeDeletesTheKeys) {
  auto lease = client_->GrantLease(30);
  ASSERT_TRUE(lease.ok());
  ASSERT_TRUE(client_->Put("/t/held", "x", *lease).ok());
  auto ttl = client_->KeepAliveOnce(*lease);
  ASSERT_TRUE(ttl.ok()) << ttl.status().ToString();
  EXPECT_GT(*ttl, 20);
  EXPECT_LE(*ttl, 30);
  ASSERT_TRUE(client_->Revoke(*lease).ok());
  EXPECT_FALSE((*client_->Get("/t/held")).has_value());
  EXPECT_EQ(client_->KeepAliveOnce(*lease).status().code(), StatusCode::kNotFound);
}

TEST_F(EtcdClientTest, KilledServerIsUnavailableAtOnceAndServesAgainAfterRestart) {
  ASSERT_TRUE(client_->Put("/t/durable", "kept").ok());
  ASSERT_TRUE(etcd_.Kill().ok());
  const auto start = Clock::now();
  auto got = client_->Get("/t/durable");
  EXPECT_LT(Clock::now() - start, milliseconds(1500));
  ASSERT_FALSE(got.ok());
  EXPECT_EQ(got.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(got.status().message().find(etcd_.endpoint()), std::string::npos) << got.status().ToString();

  Status restarted = etcd_.Restart();
  ASSERT_TRUE(restarted.ok()) << restarted.ToString();
  got = client_->Get("/t/durable");  // the same client: it connects again
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  ASSERT_TRUE(got->has_value());
  EXPECT_EQ((*got)->value, "kept");
}

TEST_F(EtcdClientTest, AHungServerTimesOutWithinTheRequestTimeout) {
  EtcdClientOptions options;
  options.request_timeout = milliseconds(500);
  auto client = EtcdClient::Create(etcd_.endpoint(), options);
  ASSERT_TRUE(client.ok());
  ASSERT_TRUE((*client)->Put("/t/k", "v").ok());  // connected before etcd stops answering
  ASSERT_TRUE(etcd_.Pause().ok());
  const auto start = Clock::now();
  auto got = (*client)->Get("/t/k");
  const auto took = Clock::now() - start;
  ASSERT_TRUE(etcd_.Resume().ok());
  EXPECT_GE(took, milliseconds(450));
  EXPECT_LT(took, milliseconds(5000));
  ASSERT_FALSE(got.ok());
  EXPECT_EQ(got.status().code(), StatusCode::kTimeout);
  EXPECT_NE(got.status().message().find("etcd " + etcd_.endpoint() + ": get '/t/k'"), std::string::npos)
      << got.status().ToString();
}

TEST_F(EtcdClientTest, CallsFromManyThreadsAllLand) {
  constexpr int kThreads = 4, kEach = 25;
  std::vector<std::thread> threads;
  std::vector<int> failures(kThreads, 0);
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kEach; ++i) {
        if (!client_->Put("/t/many/" + std::to_string(t) + "/" + std::to_string(i), "v").ok()) ++failures[t];
      }
    });
  }
  for (auto& th : threads) th.join();
  for (int t = 0; t < kThreads; ++t) EXPECT_EQ(failures[t], 0);
  auto kvs = client_->GetPrefix("/t/many/");
  ASSERT_TRUE(kvs.ok());
  EXPECT_EQ(kvs->size(), static_cast<size_t>(kThreads * kEach));
}

}  // namespace
}  // namespace weightport
