// A plan session whose coordinator fails: two PlanServices campaign for the session in a real etcd
// (started by the test on loopback); the ranks find the leader there. The leader is abandoned in
// the middle of a version, as a killed process would be (no verdict, no Bye, its lease left to run
// out); the standby takes over, the ranks join it keeping what they hold, and the version is
// completed or aborted as the record says, the same on every rank. Then etcd itself is killed and
// restarted, and versions still commit.
#include <gtest/gtest.h>

#include <cstring>
#include <thread>

#include "engine/pubsub/pubsub_test_util.h"
#include "store/etcd_test_util.h"
#include "weightport/engine/session/plan_publisher.h"
#include "weightport/engine/session/plan_service.h"
#include "weightport/engine/session/plan_subscriber.h"
#include "weightport/store/fleet_record.h"
#include "weightport/transport/testing/fake_transport.h"

// A namespace of its own: the unity build compiles this file together with other tests.
namespace weightport::plan_failover_test {
namespace {

using std::chrono::milliseconds;
constexpr int64_t kRows = 32, kCols = 16;
constexpr milliseconds kWait(30'000);

// Two sources holding halves of "w" [kRows, kCols] f32 by rows; two destinations holding halves by
// columns (each reads from both sources).
LayoutOffer Offer(PlanSide side, int rank) {
  LayoutOffer o;
  o.endpoint = {side, rank};
  o.side_ranks = 2;
  o.host = side == PlanSide::kSource ? "trainer" : "server";
  o.placement = *Placement::Make({*TensorMeta::Make("w", DType::kF32, {kRows, kCols})});
  o.placement.AddShard(rank, "w",
                       side == PlanSide::kSource ? Slice::MakeBox({rank * kRows / 2, 0}, {kRows / 2, kCols})
                                                 : Slice::MakeBox({0, rank * kCols / 2}, {kRows, kCols / 2}));
  return o;
}

float Value(int64_t flat, uint64_t v) { return static_cast<float>(v * 10000 + flat); }

void Fill(PlanPublisher& pub, uint64_t v) {
  PlanShardView s = pub.shard(0);
  const Box& b = s.slice.box();
  auto* out = reinterpret_cast<float*>(s.bytes.data());
  size_t i = 0;
  for (int64_t r = b.start[0]; r < b.start[0] + b.length[0]; ++r)
    for (int64_t c = b.start[1]; c < b.start[1] + b.length[1]; ++c) out[i++] = Value(r * kCols + c, v);
}

// The live version of `sub` and whether its bytes are that version's.
std::pair<uint64_t, bool> Live(PlanSubscriber& sub) {
  auto pin = sub.Acquire();
  if (!pin.ok()) return {0, false};
  const PlanShardView s = sub.shard_info(0);
  const Box& b = s.slice.box();
  const auto* in = reinterpret_cast<const float*>(pin->shard(0).data());
  size_t i = 0;
  for (int64_t r = b.start[0]; r < b.start[0] + b.length[0]; ++r)
    for (int64_t c = b.start[1]; c < b.start[1] + b.length[1]; ++c)
      if (in[i++] != Value(r * kCols + c, pin->version())) return {pin->version(), false};
  return {pin->version(), true};
}

class PlanFailover : public store_test::EtcdTest {
 protected:
  const Secret secret_ = engine_test::MakeSecret('f');
  std::shared_ptr<FakeFabric> fabric_ = std::make_shared<FakeFabric>();
  std::string store_;
  std::unique_ptr<PlanService> a_, b_;
  std::vector<std::unique_ptr<PlanPublisher>> pubs_;
  std::vector<std::unique_ptr<PlanSubscriber>> subs_;

  void SetUp() override {
    store_test::EtcdTest::SetUp();
    if (IsSkipped()) return;
    store_ = "etcd://" + etcd_.endpoint();
  }
  void TearDown() override {
    for (auto& p : pubs_) p->Close();
    for (auto& s : subs_) s->Close();
    if (a_) a_->Stop();
    if (b_) b_->Stop();
  }

  std::unique_ptr<PlanService> StartService() { return StartServiceWith(secret_); }
  std::unique_ptr<PlanService> StartServiceWith(const Secret& secret) {
    PlanServiceOptions so;
    so.rendezvous.timeout = so.join_timeout = so.update_timeout = kWait;
    so.rendezvous.plan.chunk_bytes = 512;
    so.store = store_;
    so.session = "failover";
    so.lease_ttl = std::chrono::seconds(2);
    so.log = [](std::string line) { std::fprintf(stderr, "svc: %s\n", line.c_str()); };
    auto s = PlanService::Start(secret, so);
    EXPECT_TRUE(s.ok()) << s.status().ToString();
    return s.ok() ? std::move(*s) : nullptr;
  }

  void JoinRanks() {
    std::vector<std::thread> joining;
    std::mutex mu;
    for (int i = 0; i < 4; ++i)
      joining.emplace_back([&, i] {
        PlanMemberOptions o;
        o.offer = Offer(i < 2 ? PlanSide::kSource : PlanSide::kDestination, i % 2);
        o.find_coordinator = CoordinatorFinder(store_, "failover", secret_);
        o.make_transport = [this](const std::string& name) { return MakeFakeTransport(fabric_, name); };
        o.connect_timeout = o.update_timeout = kWait;
        o.rank.timeout = kWait;
        o.log = [](std::string line) { std::fprintf(stderr, "rank: %s\n", line.c_str()); };
        if (i < 2) {
          auto p = PlanPublisher::Join(secret_, o);
          ASSERT_TRUE(p.ok()) << p.status().ToString();
          std::lock_guard<std::mutex> lock(mu);
          pubs_.push_back(std::move(*p));
        } else {
          auto s = PlanSubscriber::Join(secret_, o);
          ASSERT_TRUE(s.ok()) << s.status().ToString();
          std::lock_guard<std::mutex> lock(mu);
          subs_.push_back(std::move(*s));
        }
      });
    for (auto& t : joining) t.join();
  }

  PlanPublisher& Source(int rank) {
    for (auto& p : pubs_)
      if (p->shard(0).slice.box().start[0] == rank * kRows / 2) return *p;
    return *pubs_.front();
  }

  void Publish(PlanPublisher& p, uint64_t v) {
    ASSERT_TRUE(p.WaitIdle(kWait).ok());
    Fill(p, v);
    ASSERT_TRUE(p.Publish(v).ok());
  }

  // Every source publishes v; every source hears the same verdict; every destination then holds v
  // intact (or, aborted, still the version before).
  void CommitEverywhere(uint64_t v) {
    for (auto& p : pubs_) Publish(*p, v);
    ExpectCommitted(v);
  }

  // A leader, a standby, the four ranks joined and version 1 committed everywhere.
  void StartSession() {
    a_ = StartService();
    ASSERT_TRUE(a_);
    for (int i = 0; i < 100 && !a_->leading(); ++i) std::this_thread::sleep_for(milliseconds(50));
    ASSERT_TRUE(a_->leading());
    b_ = StartService();  // stands by
    JoinRanks();
    ASSERT_EQ(pubs_.size(), 2u);
    ASSERT_EQ(subs_.size(), 2u);
    CommitEverywhere(1);
  }

  // Every source hears that v committed and every destination holds it intact.
  void ExpectCommitted(uint64_t v) {
    for (auto& p : pubs_) {
      Status w = p->Wait(v, kWait);
      ASSERT_TRUE(w.ok()) << "version " << v << ": " << w.ToString();
    }
    for (auto& s : subs_) {
      ASSERT_TRUE(s->WaitForVersion(v, kWait).ok());
      EXPECT_EQ(Live(*s), std::make_pair(v, true));
    }
  }

  std::optional<DecisionRecord> Recorded(uint64_t v) {
    auto record = FleetRecord::Open(*client_, "failover");
    EXPECT_TRUE(record.ok());
    auto d = record->Decision(v);
    EXPECT_TRUE(d.ok()) << d.status().ToString();
    return d.ok() ? *d : std::nullopt;
  }
};

// The leader dies while a version waits for its second source: the standby takes over, the first
// source's announcement reaches it again, the second source publishes, and the version commits on
// every rank; so does the next.
TEST_F(PlanFailover, AVersionInFlightCompletesUnderTheCoordinatorThatTakesOver) {
  StartSession();
  EXPECT_FALSE(b_->leading());

  Publish(Source(0), 2);                           // the version is in flight: one source of two
  std::this_thread::sleep_for(milliseconds(300));  // the leader runs it, waiting for source 1
  a_->Abandon();
  Publish(Source(1), 2);  // announced to whichever coordinator hears it
  ExpectCommitted(2);
  EXPECT_TRUE(b_->leading());
  // Each term records its members as the next epoch: the first leader's, then the standby's.
  auto record = FleetRecord::Open(*client_, "failover");
  ASSERT_TRUE(record.ok());
  auto members = record->Members();
  ASSERT_TRUE(members.ok() && members->has_value());
  EXPECT_EQ((*members)->epoch, 2u);
  EXPECT_EQ((*members)->ranks, (std::vector<std::string>{"src-0", "src-1", "dst-0", "dst-1"}));
  auto d = Recorded(2);
  ASSERT_TRUE(d.has_value());
  EXPECT_EQ(d->outcome, Outcome::kCommitted);
  CommitEverywhere(3);
}

// The leader recorded a version's abort and died before telling anyone: the coordinator that takes
// over sends the recorded abort, not a commit of its own; every destination keeps the version
// before, and the next version commits.
TEST_F(PlanFailover, AVerdictOnRecordIsTheOneEveryRankHears) {
  StartSession();

  Publish(Source(0), 2);
  std::this_thread::sleep_for(milliseconds(300));
  {  // what the leader wrote just before it died
    auto record = FleetRecord::Open(*client_, "failover");
    ASSERT_TRUE(record.ok());
    ASSERT_TRUE(record->Decide(2, Outcome::kAborted, "the trainer stopped").ok());
  }
  a_->Abandon();
  Publish(Source(1), 2);
  for (auto& p : pubs_) {
    Status verdict = p->Wait(2, kWait);
    EXPECT_EQ(verdict.code(), StatusCode::kUnavailable) << verdict.ToString();  // aborted
  }
  for (auto& s : subs_) EXPECT_EQ(Live(*s), std::make_pair(uint64_t{1}, true));
  EXPECT_EQ(Recorded(2)->outcome, Outcome::kAborted);
  CommitEverywhere(3);
  EXPECT_TRUE(b_->leading());
}

// etcd is killed in the middle of a version and restarted a second later: the outcome waits for
// the record (or a coordinator that lost its lead meanwhile hands over), and whichever coordinator
// leads afterwards, the version commits on every rank, as does the next.
TEST_F(PlanFailover, AVersionCommitsAcrossAnEtcdRestart) {
  StartSession();
  Publish(Source(0), 2);
  ASSERT_TRUE(etcd_.Kill().ok());
  Publish(Source(1), 2);  // every rank verifies it; the commit waits for the record
  std::this_thread::sleep_for(milliseconds(1000));
  ASSERT_TRUE(etcd_.Restart().ok());
  ExpectCommitted(2);
  CommitEverywhere(3);
  EXPECT_TRUE(a_->leading() || b_->leading());
  for (uint64_t v : {1, 2, 3}) {
    auto d = Recorded(v);
    ASSERT_TRUE(d.has_value()) << "version " << v;
    EXPECT_EQ(d->outcome, Outcome::kCommitted) << "version " << v;
  }
}

// A coordinator started with another secret never campaigns: it ends with PermissionDenied naming
// the session (it used to win the election when the leader died and end the session for every
// rank). The standby with the session's secret takes over and the next version commits; a rank
// with another secret is refused at once, not after its timeout.
TEST_F(PlanFailover, OnlyACoordinatorWithTheSessionsSecretMayLead) {
  StartSession();
  std::unique_ptr<PlanService> intruder = StartServiceWith(engine_test::MakeSecret('x'));
  ASSERT_TRUE(intruder);
  Status ended;
  for (int i = 0; i < 200 && (ended = intruder->error()).ok(); ++i)
    std::this_thread::sleep_for(milliseconds(50));
  EXPECT_EQ(ended.code(), StatusCode::kPermissionDenied) << ended.ToString();
  EXPECT_NE(ended.message().find("session 'failover'"), std::string::npos) << ended.ToString();
  EXPECT_FALSE(intruder->leading());

  a_->Abandon();  // the leader dies: only b_ may take over
  CommitEverywhere(2);
  EXPECT_TRUE(b_->leading());

  auto find = CoordinatorFinder(store_, "failover", engine_test::MakeSecret('x'));
  const auto start = std::chrono::steady_clock::now();
  auto found = find(std::chrono::milliseconds(30'000));
  EXPECT_EQ(found.status().code(), StatusCode::kPermissionDenied) << found.status().ToString();
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::milliseconds(15'000));  // half
  EXPECT_TRUE(CoordinatorFinder(store_, "failover", secret_)(kWait).ok());
}

}  // namespace
}  // namespace weightport::plan_failover_test
