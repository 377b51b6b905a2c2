#include "weightport/engine/pubsub/fetch_executor.h"

#include <gtest/gtest.h>

#include <future>
#include <random>

#include "weightport/core/hash.h"
#include "weightport/transport/testing/fake_transport.h"
#include "weightport/transport/testing/fault_transport.h"

// A namespace of its own: the unity build compiles this file together with other tests.
namespace weightport::fetch_executor_test {
namespace {

constexpr uint64_t kBytes = 4 << 20;
constexpr uint64_t kChunk = 64 << 10;

struct Result2 {
  Status status;
  FetchStats stats;
};

class FetchExecutorTest : public ::testing::Test {
 protected:
  // The subscriber's transport: the fake behind the fault injector (whose connections map nothing).
  virtual std::unique_ptr<Transport> MakeSubscriberTransport() {
    auto inner = MakeFakeTransport(fabric_, "sub");
    return std::move(MakeFaultInjectingTransport(std::move(inner).value(), plan_)).value();
  }
  void SetUp() override {
    fabric_ = std::make_shared<FakeFabric>();
    plan_ = std::make_shared<FaultPlan>(7);
    pub_ = std::make_unique<ProgressLoop>(*MakeFakeTransport(fabric_, "pub"));
    sub_ = std::make_unique<ProgressLoop>(MakeSubscriberTransport());
    source_.resize(kBytes);
    std::mt19937_64 rng(3);
    for (auto& b : source_) b = std::byte(rng());
    dest_.assign(kBytes, std::byte{0});
    src_region_ =
        pub_->Call([&](Transport& t) { return std::move(t.Register(source_.data(), kBytes)).value(); });
    dst_region_ =
        sub_->Call([&](Transport& t) { return std::move(t.Register(dest_.data(), kBytes)).value(); });
    const Bytes address = pub_->Call([](Transport& t) { return t.address(); });
    connection_ = sub_->Call([&](Transport& t) { return std::move(t.Connect(address, "pub")).value(); });
    for (uint64_t off = 0; off < kBytes; off += kChunk)
      chunks_.push_back({off, off, kChunk, Xxh3(source_.data() + off, kChunk),
                         "tensor 'w' chunk " + std::to_string(off / kChunk)});
  }
  void TearDown() override {
    sub_->Call([&](Transport&) {
      connection_.reset();
      dst_region_.reset();
    });
    pub_->Call([&](Transport&) { src_region_.reset(); });
    sub_.reset();
    pub_.reset();
  }

  Result2 Fetch(FetchOptions options, std::vector<ChunkFetch> chunks,
                std::function<void()> midway = nullptr) {
    auto promise = std::make_shared<std::promise<Result2>>();
    auto future = promise->get_future();
    sub_->Post([&, promise, chunks, options](Transport&) {
      FetchExecutor::Start(*sub_, connection_, *dst_region_, src_region_->remote_key(), chunks, options,
                           [promise](const Status& s, const FetchStats& st) {
                             promise->set_value({s, st});
                           });
    });
    if (midway) midway();
    EXPECT_EQ(future.wait_for(std::chrono::seconds(20)), std::future_status::ready);
    return future.get();
  }
  Result2 Fetch(FetchOptions options = {}) { return Fetch(options, chunks_); }
  // The same bytes in chunks of `size` (more batches on the mapped path, which takes 64 at a time).
  std::vector<ChunkFetch> ChunksOf(uint64_t size) const {
    std::vector<ChunkFetch> out;
    for (uint64_t off = 0; off < kBytes; off += size)
      out.push_back(
          {off, off, size, Xxh3(source_.data() + off, size), "chunk " + std::to_string(off / size)});
    return out;
  }
  // The 11th and later Gets fail for 30 ms, then the fabric heals; retries come back quickly.
  Result2 FetchThroughAnOutage(size_t window) {
    plan_->set_fail_after(10);
    return Fetch({.window = window,
                  .max_attempts = 50,
                  .backoff_initial = std::chrono::milliseconds(1),
                  .backoff_max = std::chrono::milliseconds(5)},
                 chunks_, [&] {
                   std::this_thread::sleep_for(std::chrono::milliseconds(30));
                   plan_->Clear();
                 });
  }

  std::shared_ptr<FakeFabric> fabric_;
  std::shared_ptr<FaultPlan> plan_;
  std::unique_ptr<ProgressLoop> pub_, sub_;
  std::vector<std::byte> source_, dest_;
  std::unique_ptr<MemoryRegion> src_region_, dst_region_;
  std::shared_ptr<Connection> connection_;
  std::vector<ChunkFetch> chunks_;
};

TEST_F(FetchExecutorTest, FetchesEveryChunkBitExact) {
  auto r = Fetch({.window = 8});
  ASSERT_TRUE(r.status.ok()) << r.status.ToString();
  EXPECT_EQ(dest_, source_);
  EXPECT_EQ(r.stats.chunks, chunks_.size());
  EXPECT_EQ(r.stats.bytes, kBytes);
  EXPECT_EQ(r.stats.corrupt_refetched, 0u);
}

TEST_F(FetchExecutorTest, EmptyListFinishesAtOnce) {
  auto r = Fetch({}, {});
  EXPECT_TRUE(r.status.ok());
  EXPECT_EQ(r.stats.chunks, 0u);
}

TEST_F(FetchExecutorTest, CorruptChunksAreDetectedAndFetchedAgain) {
  plan_->set_corrupt({.probability = 0.2, .ops = kFaultGet});
  auto r = Fetch();
  ASSERT_TRUE(r.status.ok()) << r.status.ToString();
  EXPECT_GT(plan_->stats().corrupted, 0u);
  EXPECT_EQ(r.stats.corrupt_refetched, plan_->stats().corrupted);
  EXPECT_EQ(dest_, source_);
}

TEST_F(FetchExecutorTest, DroppedGetsAreCaughtByTheHash) {
  plan_->set_drop({.probability = 0.2, .ops = kFaultGet});
  auto r = Fetch();
  ASSERT_TRUE(r.status.ok()) << r.status.ToString();
  EXPECT_GT(plan_->stats().dropped, 0u);
  EXPECT_EQ(dest_, source_);
}

TEST_F(FetchExecutorTest, PersistentCorruptionFailsNamingChunkAndPeer) {
  plan_->set_corrupt({.probability = 1.0, .ops = kFaultGet});
  auto r = Fetch({.max_attempts = 3});
  ASSERT_EQ(r.status.code(), StatusCode::kDataLoss) << r.status.ToString();
  EXPECT_NE(r.status.message().find("tensor 'w' chunk"), std::string::npos) << r.status.message();
  EXPECT_NE(r.status.message().find("pub"), std::string::npos);
  EXPECT_NE(r.status.message().find("after 3 attempts"), std::string::npos);
}

TEST_F(FetchExecutorTest, TransientErrorsAreRetriedWithBackoff) {
  auto r = FetchThroughAnOutage(4);
  ASSERT_TRUE(r.status.ok()) << r.status.ToString();
  EXPECT_GT(r.stats.errors_retried, 0u);
  EXPECT_EQ(dest_, source_);
}

TEST_F(FetchExecutorTest, LostPeerFailsTheFetchAndNamesIt) {
  plan_->set_delay({.probability = 1.0, .ops = kFaultGet}, std::chrono::milliseconds(20));
  auto r = Fetch({.window = 2}, chunks_, [&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    plan_->KillPeer("pub");
  });
  ASSERT_EQ(r.status.code(), StatusCode::kUnavailable) << r.status.ToString();
  EXPECT_NE(r.status.message().find("pub"), std::string::npos);
}

TEST_F(FetchExecutorTest, WholeFetchTimesOut) {
  plan_->set_delay({.probability = 1.0, .ops = kFaultGet}, std::chrono::milliseconds(300));
  auto r = Fetch({.window = 1, .timeout = std::chrono::milliseconds(100)});
  ASSERT_EQ(r.status.code(), StatusCode::kTimeout) << r.status.ToString();
  EXPECT_NE(r.status.message().find("pub"), std::string::npos);
}

// Gets that take far longer than the fastest (queueing on the path) cut the window; the fetch
// completes bit-exact.
TEST_F(FetchExecutorTest, SlowGetsShrinkTheWindow) {
  plan_->set_delay({.probability = 0.3, .ops = kFaultGet}, std::chrono::milliseconds(20));
  auto r = Fetch({.window = 16, .delay_factor = 4});
  ASSERT_TRUE(r.status.ok()) << r.status.ToString();
  EXPECT_GT(r.stats.delay_backoffs, 0u);
  EXPECT_LT(r.stats.min_window, 16u);
  EXPECT_EQ(dest_, source_);
  // Not watching delay (the default): the window stays where it was.
  auto off = Fetch({.window = 16});
  ASSERT_TRUE(off.status.ok()) << off.status.ToString();
  EXPECT_EQ(off.stats.delay_backoffs, 0u);
  EXPECT_EQ(off.stats.min_window, 16u);
}

// Lost Gets (the transport fails them for a while) cut the window too, and are fetched again.
TEST_F(FetchExecutorTest, LossShrinksTheWindow) {
  auto r = FetchThroughAnOutage(16);
  ASSERT_TRUE(r.status.ok()) << r.status.ToString();
  EXPECT_GT(r.stats.errors_retried, 0u);
  EXPECT_GT(r.stats.congestion_events, 0u);
  EXPECT_LT(r.stats.min_window, 16u);
  EXPECT_EQ(dest_, source_);
}

// The cap holds the rate: 4 MiB at 16 MiB/s takes at least a quarter of a second (less the one
// chunk of burst), however fast the fabric. A lower bound only: a slow machine cannot fail it.
TEST_F(FetchExecutorTest, TheCapHoldsTheRate) {
  constexpr double kRate = 16 << 20;
  const auto t0 = std::chrono::steady_clock::now();
  auto r = Fetch({.window = 8, .max_bytes_per_s = kRate});
  const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  ASSERT_TRUE(r.status.ok()) << r.status.ToString();
  EXPECT_GE(took, (kBytes - kChunk) / kRate);
  EXPECT_GT(r.stats.capped_waits, 0u);
  EXPECT_EQ(dest_, source_);
}

// A background priority already yielding to other traffic on its path: requests of a chunk were
// served in 1 ms with the path to themselves, then took 10 ms (another flow came), so it keeps 5% of
// that rate until one is served fast again.
std::shared_ptr<BackgroundYield> YieldingBackground() {
  using std::chrono::milliseconds;
  auto bg = std::make_shared<BackgroundYield>();
  const auto t0 = BackgroundYield::Clock::now() - std::chrono::seconds(1);
  bg->OnCompleted(kChunk, t0, t0 + milliseconds(1));                               // alone: the round trip
  for (int i = 2; i <= 4; ++i) bg->OnCompleted(kChunk, t0, t0 + milliseconds(i));  // queued: 1 ms each
  for (int i = 1; i <= 3; ++i) bg->OnCompleted(kChunk, t0, t0 + milliseconds(4 + 10 * i));  // 10 ms each
  return bg;
}

// Where Gets share a path, a yielding background holds them back.
TEST_F(FetchExecutorTest, AYieldingBackgroundHoldsBackGetsOnItsPath) {
  FetchOptions options{.window = 8};
  options.background = YieldingBackground();
  ASSERT_TRUE(options.background->yielding());
  auto r = Fetch(options);
  ASSERT_TRUE(r.status.ok()) << r.status.ToString();
  EXPECT_GT(r.stats.capped_waits, 0u);
  EXPECT_EQ(dest_, source_);
}

// A peer whose region the connection maps (a same-host peer): the verifier's threads copy and hash.
class MappedFetchTest : public FetchExecutorTest {
 protected:
  std::unique_ptr<Transport> MakeSubscriberTransport() override {
    return std::move(MakeFakeTransport(fabric_, "sub", {.mappable = true})).value();
  }
  FetchOptions Options() { return {.window = 8, .verifier = std::make_shared<WorkerPool>(2)}; }
};

TEST_F(MappedFetchTest, EveryChunkIsCopiedFromTheMappingBitExact) {
  auto r = Fetch(Options());
  ASSERT_TRUE(r.status.ok()) << r.status.ToString();
  EXPECT_EQ(dest_, source_);
  EXPECT_EQ(r.stats.chunks, chunks_.size());
  EXPECT_EQ(r.stats.direct_chunks, chunks_.size());
  EXPECT_EQ(r.stats.bytes, kBytes);
}

TEST_F(MappedFetchTest, WithoutDirectReadsOrAVerifierItGets) {
  FetchOptions no_direct = Options();
  no_direct.direct_reads = false;
  auto r = Fetch(no_direct);
  ASSERT_TRUE(r.status.ok()) << r.status.ToString();
  EXPECT_EQ(r.stats.direct_chunks, 0u);
  EXPECT_EQ(dest_, source_);
  dest_.assign(kBytes, std::byte{0});
  r = Fetch({.window = 8});  // no verifier: hashes on the loop thread, after Gets
  ASSERT_TRUE(r.status.ok()) << r.status.ToString();
  EXPECT_EQ(r.stats.direct_chunks, 0u);
  EXPECT_EQ(dest_, source_);
}

TEST_F(MappedFetchTest, AChunkThatNeverMatchesFailsNamingItAfterItsAttempts) {
  std::vector<ChunkFetch> chunks = chunks_;
  chunks[5].xxh3 ^= 1;  // what the manifest says differs from what the peer holds
  FetchOptions options = Options();
  options.backoff_initial = std::chrono::milliseconds(1);
  auto r = Fetch(options, chunks);
  EXPECT_EQ(r.status.code(), StatusCode::kDataLoss) << r.status.ToString();
  EXPECT_NE(r.status.message().find("chunk 5"), std::string::npos) << r.status.ToString();
  EXPECT_NE(r.status.message().find("after 4 attempts"), std::string::npos) << r.status.ToString();
  EXPECT_EQ(r.stats.corrupt_refetched, 4u);
}

TEST_F(MappedFetchTest, TheCapHoldsTheRateOfCopiesToo) {
  constexpr double kRate = 16 << 20;
  FetchOptions options = Options();
  options.max_bytes_per_s = kRate;
  const auto t0 = std::chrono::steady_clock::now();
  auto r = Fetch(options);
  const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  ASSERT_TRUE(r.status.ok()) << r.status.ToString();
  EXPECT_GE(took, (kBytes - kChunk) / kRate);
  EXPECT_GT(r.stats.capped_waits, 0u);
  EXPECT_EQ(r.stats.direct_chunks, chunks_.size());
  EXPECT_EQ(dest_, source_);
}

// Copies from a mapped peer share no network path with other traffic: the same yielding background
// never holds them back (paced, the second of 16 batches of copies would wait for its share).
TEST_F(MappedFetchTest, BackgroundPriorityNeverPacesCopiesFromAMappedPeer) {
  FetchOptions options = Options();
  options.background = YieldingBackground();
  ASSERT_TRUE(options.background->yielding());
  const std::vector<ChunkFetch> small = ChunksOf(4096);
  auto r = Fetch(options, small);
  ASSERT_TRUE(r.status.ok()) << r.status.ToString();
  EXPECT_EQ(r.stats.direct_chunks, small.size());
  EXPECT_EQ(r.stats.capped_waits, 0u);
  EXPECT_EQ(r.stats.yields, 0u);
  EXPECT_EQ(dest_, source_);
}

TEST_F(MappedFetchTest, APeerGoneBeforeTheFetchFailsItNamingThePeer) {
  pub_->Call([&](Transport& t) { t.Close(); });
  auto r = Fetch(Options());
  EXPECT_EQ(r.status.code(), StatusCode::kUnavailable) << r.status.ToString();
  EXPECT_NE(r.status.message().find("pub"), std::string::npos) << r.status.ToString();
}

}  // namespace
}  // namespace weightport::fetch_executor_test
