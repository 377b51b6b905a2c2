#include "weightport/store/coordinator_election.h"

#include <atomic>
#include <chrono>
#include <mutex>
#include <string>
#include <thread>

#include <gtest/gtest.h>

#include "etcd_test_util.h"
#include "weightport/store/session_keys.h"

namespace weightport {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;
using std::chrono::seconds;

// An etcd and a client of the test's own (etcd_test_util.h).
class ElectionTest : public store_test::EtcdTest {};

// Waits (bounded: 30 s and 3000 looks) until `done` holds.
template <typename F>
bool Eventually(F done) {
  const auto deadline = Clock::now() + seconds(30);
  for (int i = 0; i < 3000 && Clock::now() < deadline; ++i) {
    if (done()) return true;
    std::this_thread::sleep_for(milliseconds(10));
  }
  return done();
}

// Records on_lost calls from the renewal thread.
struct LostLog {
  std::mutex mu;
  int calls = 0;
  Status last;
  ElectionOptions Options() {
    ElectionOptions o;
    o.poll_interval = milliseconds(50);
    o.on_lost = [this](const Status& s) {
      std::lock_guard<std::mutex> lock(mu);
      ++calls;
      last = s;
    };
    return o;
  }
  int Calls() {
    std::lock_guard<std::mutex> lock(mu);
    return calls;
  }
};

ElectionOptions FastPolling() {
  ElectionOptions o;
  o.poll_interval = milliseconds(50);
  return o;
}

TEST_F(ElectionTest, OneOfTwoCandidatesWins) {
  auto a = CoordinatorElection::Campaign(*client_, "s1", "10.0.0.1:7000", seconds(10));
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  auto b = CoordinatorElection::Campaign(*client_, "s1", "10.0.0.2:7000", seconds(10));
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  EXPECT_TRUE((*a)->is_leader());
  EXPECT_FALSE((*b)->is_leader());
  EXPECT_EQ(*CoordinatorElection::Leader(*client_, "s1"), "10.0.0.1:7000");
  auto kv = client_->Get(session_keys::Coordinator("s1"));
  ASSERT_TRUE(kv.ok() && kv->has_value());
  EXPECT_EQ((*kv)->key, "/weightport/s1/coordinator");
  EXPECT_EQ((*kv)->lease, (*a)->lease());
  // Another session has its own election.
  auto c = CoordinatorElection::Campaign(*client_, "s2", "10.0.0.2:7000", seconds(10));
  ASSERT_TRUE(c.ok());
  EXPECT_TRUE((*c)->is_leader());
}

TEST_F(ElectionTest, TheOtherCandidateTakesOverWithinTheTtlWhenTheLeaderDies) {
  auto a = CoordinatorElection::Campaign(*client_, "s", "a:1", seconds(2), FastPolling());
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  auto b = CoordinatorElection::Campaign(*client_, "s", "b:1", seconds(2), FastPolling());
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  ASSERT_TRUE((*a)->is_leader());
  // The leader stays while it renews: several TTLs later it still leads.
  std::this_thread::sleep_for(seconds(3));
  EXPECT_TRUE((*a)->is_leader());
  EXPECT_EQ(*CoordinatorElection::Leader(*client_, "s"), "a:1");

  a->reset();  // a crash: renewals stop, nothing is revoked
  const auto died = Clock::now();
  Status took_over = (*b)->WaitForLeadership(seconds(30));
  const auto waited = Clock::now() - died;
  ASSERT_TRUE(took_over.ok()) << took_over.ToString();
  EXPECT_TRUE((*b)->is_leader());
  EXPECT_EQ(*CoordinatorElection::Leader(*client_, "s"), "b:1");
  // Not before the dead leader's lease ran out (at least 2/3 of the TTL after its last renewal),
  // and well within a few TTLs (bounds generous for a loaded machine).
  EXPECT_GE(waited, milliseconds(1000));
  EXPECT_LT(waited, seconds(15));
}

TEST_F(ElectionTest, ResignHandsOverAtOnce) {
  auto a = CoordinatorElection::Campaign(*client_, "s", "a:1", seconds(60), FastPolling());
  auto b = CoordinatorElection::Campaign(*client_, "s", "b:1", seconds(60), FastPolling());
  ASSERT_TRUE(a.ok() && b.ok());
  ASSERT_TRUE((*a)->is_leader());
  ASSERT_TRUE((*a)->Resign().ok());
  EXPECT_FALSE((*a)->is_leader());
  EXPECT_EQ((*a)->lease(), 0);
  const auto start = Clock::now();
  Status took_over = (*b)->WaitForLeadership(seconds(30));
  ASSERT_TRUE(took_over.ok()) << took_over.ToString();
  EXPECT_LT(Clock::now() - start, seconds(10));  // far less than the 60 s TTL
  EXPECT_TRUE((*a)->Resign().ok());              // idempotent
  EXPECT_EQ((*a)->WaitForLeadership(milliseconds(100)).code(), StatusCode::kFailedPrecondition);
}

TEST_F(ElectionTest, WaitForLeadershipTimesOutNamingTheLeader) {
  auto a = CoordinatorElection::Campaign(*client_, "s", "a:1", seconds(30), FastPolling());
  auto b = CoordinatorElection::Campaign(*client_, "s", "b:1", seconds(30), FastPolling());
  ASSERT_TRUE(a.ok() && b.ok());
  const auto start = Clock::now();
  Status waited = (*b)->WaitForLeadership(milliseconds(600));
  EXPECT_GE(Clock::now() - start, milliseconds(550));
  EXPECT_LT(Clock::now() - start, seconds(10));
  EXPECT_EQ(waited.code(), StatusCode::kTimeout);
  EXPECT_NE(waited.message().find("the leader is a:1"), std::string::npos) << waited.ToString();
  EXPECT_TRUE((*a)->WaitForLeadership(milliseconds(0)).ok());  // already leading
}

TEST_F(ElectionTest, TheLeaderLearnsWhenItsLeaseIsGone) {
  LostLog log;
  auto a = CoordinatorElection::Campaign(*client_, "s", "a:1", seconds(3), log.Options());
  ASSERT_TRUE(a.ok());
  ASSERT_TRUE((*a)->is_leader());
  // Someone (an operator, or etcd after a long pause) ends the lease: the next renewal finds it gone.
  ASSERT_TRUE(client_->Revoke((*a)->lease()).ok());
  ASSERT_TRUE(Eventually([&] { return log.Calls() > 0; }));
  EXPECT_FALSE((*a)->is_leader());
  EXPECT_EQ(log.Calls(), 1);
  EXPECT_EQ(log.last.code(), StatusCode::kNotFound);
  EXPECT_NE(log.last.message().find("a:1 lost leadership"), std::string::npos) << log.last.ToString();
  // It may win again, on a fresh lease.
  ASSERT_TRUE((*a)->WaitForLeadership(seconds(30)).ok());
  EXPECT_TRUE((*a)->is_leader());
  EXPECT_EQ((*client_->Get(session_keys::Coordinator("s")))->lease, (*a)->lease());
}

TEST_F(ElectionTest, TheLeaderStopsLeadingWhenEtcdIsUnreachable) {
  EtcdClientOptions options;
  options.request_timeout = milliseconds(500);  // under ttl/3
  auto client = EtcdClient::Create(etcd_.endpoint(), options);
  ASSERT_TRUE(client.ok());
  LostLog log;
  auto a = CoordinatorElection::Campaign(**client, "s", "a:1", seconds(2), log.Options());
  ASSERT_TRUE(a.ok());
  ASSERT_TRUE((*a)->is_leader());
  ASSERT_TRUE(etcd_.Kill().ok());
  const auto killed = Clock::now();
  ASSERT_TRUE(Eventually([&] { return !(*a)->is_leader(); }));
  EXPECT_LT(Clock::now() - killed, seconds(10));
  ASSERT_TRUE(Eventually([&] { return log.Calls() > 0; }));
  EXPECT_EQ(log.last.code(), StatusCode::kUnavailable) << log.last.ToString();
  EXPECT_NE(log.last.message().find(etcd_.endpoint()), std::string::npos);
  Status waited = (*a)->WaitForLeadership(milliseconds(300));
  EXPECT_EQ(waited.code(), StatusCode::kTimeout);
  EXPECT_NE(waited.message().find("last error: Unavailable"), std::string::npos) << waited.ToString();
}

TEST_F(ElectionTest, CampaignChecksItsArguments) {
  EXPECT_EQ(CoordinatorElection::Campaign(*client_, "a/b", "a:1", seconds(5)).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(CoordinatorElection::Campaign(*client_, "", "a:1", seconds(5)).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(CoordinatorElection::Campaign(*client_, "s", "", seconds(5)).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(CoordinatorElection::Campaign(*client_, "s", "a:1", seconds(0)).status().code(),
            StatusCode::kInvalidArgument);
  auto none = CoordinatorElection::Leader(*client_, "s");
  EXPECT_EQ(none.status().code(), StatusCode::kNotFound);
  EXPECT_NE(none.status().message().find("'s'"), std::string::npos);
}

TEST_F(ElectionTest, ManyCandidatesRacingElectExactlyOne) {
  constexpr int kCandidates = 6;
  std::vector<std::unique_ptr<CoordinatorElection>> elections(kCandidates);
  std::vector<Status> errors(kCandidates);
  std::vector<std::thread> threads;
  for (int i = 0; i < kCandidates; ++i) {
    threads.emplace_back([&, i] {
      auto e = CoordinatorElection::Campaign(*client_, "race", "c:" + std::to_string(i), seconds(10));
      if (e.ok()) {
        elections[i] = std::move(e).value();
      } else {
        errors[i] = e.status();
      }
    });
  }
  for (auto& t : threads) t.join();
  int leaders = 0;
  std::string leader;
  for (int i = 0; i < kCandidates; ++i) {
    ASSERT_TRUE(errors[i].ok()) << errors[i].ToString();
    if (elections[i]->is_leader()) {
      ++leaders;
      leader = elections[i]->address();
    }
  }
  EXPECT_EQ(leaders, 1);
  EXPECT_EQ(*CoordinatorElection::Leader(*client_, "race"), leader);
}

}  // namespace
}  // namespace weightport
