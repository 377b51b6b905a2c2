#include "weightport/store/fleet_record.h"

#include <algorithm>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "etcd_test_util.h"
#include "weightport/store/session_keys.h"

namespace weightport {
namespace {

// An etcd and a client of the test's own (etcd_test_util.h), and session "s"'s record.
class FleetRecordTest : public store_test::EtcdTest {
 protected:
  void SetUp() override {
    store_test::EtcdTest::SetUp();
    if (IsSkipped() || HasFatalFailure()) return;
    auto record = FleetRecord::Open(*client_, "s");
    ASSERT_TRUE(record.ok()) << record.status().ToString();
    record_ = std::make_unique<FleetRecord>(std::move(record).value());
  }

  // A client of its own per thread, as separate coordinators would have.
  std::unique_ptr<EtcdClient> NewClient() {
    auto c = EtcdClient::Create(etcd_.endpoint());
    EXPECT_TRUE(c.ok()) << c.status().ToString();
    return c.ok() ? std::move(c).value() : nullptr;
  }

  std::unique_ptr<FleetRecord> record_;
};

TEST_F(FleetRecordTest, ADecisionIsWrittenOnce) {
  EXPECT_FALSE(record_->Decision(5)->has_value());
  auto first = record_->Decide(5, Outcome::kCommitted, "all 4 ranks staged");
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  EXPECT_EQ(*first, (DecisionRecord{5, Outcome::kCommitted, "all 4 ranks staged"}));
  // A second coordinator deciding otherwise gets the recorded decision back, unchanged.
  auto second = record_->Decide(5, Outcome::kAborted, "rank 2 timed out");
  ASSERT_TRUE(second.ok()) << second.status().ToString();
  EXPECT_EQ(*second, *first);
  auto read = record_->Decision(5);
  ASSERT_TRUE(read.ok() && read->has_value());
  EXPECT_EQ(**read, *first);
  // The stored form is the documented JSON.
  auto kv = client_->Get("/weightport/s/decision/00000000000000000005");
  ASSERT_TRUE(kv.ok() && kv->has_value());
  EXPECT_EQ((*kv)->value, R"({"outcome":"committed","reason":"all 4 ranks staged","version":5})");
  EXPECT_EQ((*client_->Get("/weightport/s/live"))->value, R"({"version":5})");
}

TEST_F(FleetRecordTest, RacingCoordinatorsRecordOneOutcomePerVersion) {
  constexpr int kWriters = 4;
  constexpr uint64_t kVersions = 8;
  std::vector<std::vector<DecisionRecord>> seen(kWriters);
  std::vector<Status> errors(kWriters);
  std::vector<std::thread> threads;
  for (int w = 0; w < kWriters; ++w) {
    threads.emplace_back([&, w, client = NewClient()] {
      if (client == nullptr) return;
      auto record = FleetRecord::Open(*client, "s");
      for (uint64_t v = 1; v <= kVersions && record.ok(); ++v) {
        Outcome mine = (w + v) % 2 == 0 ? Outcome::kCommitted : Outcome::kAborted;
        auto d = record->Decide(v, mine, "writer " + std::to_string(w));
        if (!d.ok()) {
          errors[w] = d.status();
          return;
        }
        seen[w].push_back(*d);
      }
    });
  }
  for (auto& t : threads) t.join();
  for (int w = 0; w < kWriters; ++w) {
    ASSERT_TRUE(errors[w].ok()) << errors[w].ToString();
    ASSERT_EQ(seen[w].size(), kVersions);
  }
  std::optional<uint64_t> highest_committed;
  for (uint64_t v = 1; v <= kVersions; ++v) {
    auto recorded = record_->Decision(v);
    ASSERT_TRUE(recorded.ok() && recorded->has_value());
    for (int w = 0; w < kWriters; ++w)
      EXPECT_EQ(seen[w][v - 1], **recorded) << "writer " << w << " version " << v;
    if ((*recorded)->outcome == Outcome::kCommitted) highest_committed = v;
  }
  EXPECT_EQ(*record_->LiveVersion(), highest_committed);
}

TEST_F(FleetRecordTest, LiveIsTheHighestCommittedVersion) {
  EXPECT_FALSE(record_->LiveVersion()->has_value());
  ASSERT_TRUE(record_->Decide(3, Outcome::kCommitted, "").ok());
  EXPECT_EQ(*record_->LiveVersion(), 3u);
  ASSERT_TRUE(record_->Decide(4, Outcome::kAborted, "rank 1 lost").ok());
  EXPECT_EQ(*record_->LiveVersion(), 3u);
  ASSERT_TRUE(record_->Decide(2, Outcome::kCommitted, "late").ok());  // a lower one does not lower it
  EXPECT_EQ(*record_->LiveVersion(), 3u);
  ASSERT_TRUE(record_->Decide(6, Outcome::kCommitted, "").ok());
  EXPECT_EQ(*record_->LiveVersion(), 6u);
  // Sessions are apart.
  auto other = FleetRecord::Open(*client_, "other");
  ASSERT_TRUE(other.ok());
  EXPECT_FALSE(other->LiveVersion()->has_value());
  EXPECT_FALSE(other->Decision(3)->has_value());
}

TEST_F(FleetRecordTest, MembershipOnlyMovesToHigherEpochs) {
  EXPECT_FALSE(record_->Members()->has_value());
  ASSERT_TRUE(record_->SetMembers(1, {"rank-0", "rank-1"}).ok());
  EXPECT_EQ(**record_->Members(), (Membership{1, {"rank-0", "rank-1"}}));
  EXPECT_TRUE(record_->SetMembers(1, {"rank-0", "rank-1"}).ok());  // the same again: OK
  Status other_ranks = record_->SetMembers(1, {"rank-0"});
  EXPECT_EQ(other_ranks.code(), StatusCode::kFailedPrecondition) << other_ranks.ToString();
  ASSERT_TRUE(record_->SetMembers(3, {"rank-0", "rank-2", "rank-1"}).ok());
  Status older = record_->SetMembers(2, {"rank-9"});
  EXPECT_EQ(older.code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(older.message().find("epoch 3 is recorded already"), std::string::npos) << older.ToString();
  EXPECT_EQ(**record_->Members(), (Membership{3, {"rank-0", "rank-2", "rank-1"}}));
  EXPECT_EQ(record_->SetMembers(4, {"a", "a"}).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(record_->SetMembers(4, {""}).code(), StatusCode::kInvalidArgument);
}

TEST_F(FleetRecordTest, ConcurrentKeyEpochBumpsAllCount) {
  EXPECT_EQ(*record_->KeyEpoch(), 0u);
  constexpr int kThreads = 4, kEach = 10;
  std::vector<std::vector<uint64_t>> got(kThreads);
  std::vector<Status> errors(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t, client = NewClient()] {
      if (client == nullptr) return;
      auto record = FleetRecord::Open(*client, "s");
      for (int i = 0; i < kEach && record.ok(); ++i) {
        auto e = record->BumpKeyEpoch();
        if (!e.ok()) {
          errors[t] = e.status();
          return;
        }
        got[t].push_back(*e);
      }
    });
  }
  for (auto& th : threads) th.join();
  std::set<uint64_t> all;
  for (int t = 0; t < kThreads; ++t) {
    ASSERT_TRUE(errors[t].ok()) << errors[t].ToString();
    EXPECT_TRUE(std::is_sorted(got[t].begin(), got[t].end()));
    all.insert(got[t].begin(), got[t].end());
  }
  // No bump lost, none counted twice: each saw a distinct value, 1 to 40.
  EXPECT_EQ(all.size(), static_cast<size_t>(kThreads * kEach));
  EXPECT_EQ(*all.begin(), 1u);
  EXPECT_EQ(*all.rbegin(), static_cast<uint64_t>(kThreads * kEach));
  EXPECT_EQ(*record_->KeyEpoch(), static_cast<uint64_t>(kThreads * kEach));
}

TEST_F(FleetRecordTest, TheRecordSurvivesAnEtcdCrash) {
  ASSERT_TRUE(record_->Decide(7, Outcome::kCommitted, "staged").ok());
  ASSERT_TRUE(record_->Decide(8, Outcome::kAborted, "rank 3 gone").ok());
  ASSERT_TRUE(record_->SetMembers(2, {"r0", "r1"}).ok());
  ASSERT_TRUE(record_->BumpKeyEpoch().ok());
  ASSERT_TRUE(etcd_.Kill().ok());  // SIGKILL: what etcd acknowledged must be on disk
  EXPECT_EQ(record_->Decision(7).status().code(), StatusCode::kUnavailable);
  Status restarted = etcd_.Restart();
  ASSERT_TRUE(restarted.ok()) << restarted.ToString();

  auto client = NewClient();  // as a coordinator started after the crash
  ASSERT_NE(client, nullptr);
  auto record = FleetRecord::Open(*client, "s");
  ASSERT_TRUE(record.ok());
  EXPECT_EQ(**record->Decision(7), (DecisionRecord{7, Outcome::kCommitted, "staged"}));
  EXPECT_EQ(**record->Decision(8), (DecisionRecord{8, Outcome::kAborted, "rank 3 gone"}));
  EXPECT_EQ(*record->LiveVersion(), 7u);
  EXPECT_EQ(**record->Members(), (Membership{2, {"r0", "r1"}}));
  EXPECT_EQ(*record->KeyEpoch(), 1u);
  // Still write-once after the restart.
  EXPECT_EQ(record->Decide(8, Outcome::kCommitted, "retry")->outcome, Outcome::kAborted);
}

TEST_F(FleetRecordTest, AReasonReadsBackAsDecided) {
  const std::string long_reason(5000, 'r');
  auto d = record_->Decide(1, Outcome::kAborted, long_reason);
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d->reason.size(), 4096u);
  EXPECT_EQ(**record_->Decision(1), *d);
  auto bad_utf8 = record_->Decide(2, Outcome::kAborted, "rank \xff lost");
  ASSERT_TRUE(bad_utf8.ok()) << bad_utf8.status().ToString();
  EXPECT_EQ(**record_->Decision(2), *bad_utf8);
  EXPECT_EQ(bad_utf8->reason, "rank ? lost");
}

TEST_F(FleetRecordTest, AHostileStoredReasonReadsBackPrintable) {
  // Written by someone else: a line break that would forge a log line, an escape sequence.
  ASSERT_TRUE(client_
                  ->Put(session_keys::Decision("s", 3),
                        R"({"version":3,"outcome":"aborted","reason":"x\n{\"event\":\"version\"}\u001b[2J"})")
                  .ok());
  auto d = record_->Decision(3);
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  EXPECT_EQ((*d)->reason, "x?{\"event\":\"version\"}?[2J");
  ASSERT_TRUE(client_->Put(session_keys::Decision("s", 4), "{\"version\":4,\"outcome\":\"\x1b]0;\"}").ok());
  auto bad = record_->Decision(4);
  EXPECT_EQ(bad.status().code(), StatusCode::kDataLoss);
  EXPECT_EQ(bad.status().message().find('\x1b'), std::string::npos) << bad.status().message();
}

TEST_F(FleetRecordTest, AMalformedValueIsDataLossNamingItsKey) {
  ASSERT_TRUE(client_->Put(session_keys::Live("s"), "not json").ok());
  auto live = record_->LiveVersion();
  EXPECT_EQ(live.status().code(), StatusCode::kDataLoss);
  EXPECT_NE(live.status().message().find("'/weightport/s/live'"), std::string::npos)
      << live.status().ToString();
  ASSERT_TRUE(
      client_->Put(session_keys::Decision("s", 9), R"({"version":9,"outcome":"maybe","reason":""})").ok());
  auto d = record_->Decision(9);
  EXPECT_EQ(d.status().code(), StatusCode::kDataLoss);
  EXPECT_NE(d.status().message().find("unknown outcome 'maybe'"), std::string::npos) << d.status().ToString();
  // A decision already there, even malformed, is never overwritten.
  EXPECT_EQ(record_->Decide(9, Outcome::kAborted, "").status().code(), StatusCode::kDataLoss);
  ASSERT_TRUE(client_->Put(session_keys::KeyEpoch("s"), R"({"epoch":-1})").ok());
  EXPECT_EQ(record_->BumpKeyEpoch().status().code(), StatusCode::kDataLoss);
  EXPECT_EQ(FleetRecord::Open(*client_, "../x").status().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace weightport
