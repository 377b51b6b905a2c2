#include "weightport/engine/fed/fed_client.h"
#include "weightport/engine/fed/fed_codec.h"
#include "weightport/engine/fed/fed_report.h"
#include "weightport/engine/fed/fed_server.h"

#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <limits>
#include <mutex>
#include <thread>

namespace weightport {
namespace {

using std::chrono::milliseconds;

Secret TestSecret() {
  std::string s(32, 'f');
  return *Secret::FromBytes(std::as_bytes(std::span(s.data(), s.size())), "test secret");
}

std::vector<float> Ramp(size_t n, float scale, float offset = 0) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = offset + scale * std::sin(0.37f * static_cast<float>(i));
  return v;
}

// Error feedback: whatever one round's encoding loses is sent in a later one, so the sum of what
// was sent over many rounds follows the sum of the updates to within one round's rounding.
TEST(FedCodec, ErrorFeedbackKeepsTheSumOfUpdates) {
  for (FedEncoding e : {FedEncoding::kF32, FedEncoding::kBF16, FedEncoding::kFP8}) {
    SCOPED_TRACE(FedEncodingName(e));
    const std::vector<float> update = Ramp(4096, 1e-3f);
    std::vector<float> residual(update.size(), 0), sent(update.size()), total(update.size(), 0);
    double one_round_error = 0;
    for (int round = 0; round < 50; ++round) {
      FedChunk chunk = EncodeUpdateChunk(update, residual, e, true, sent);
      std::vector<float> decoded(update.size());
      ASSERT_TRUE(DecodeUpdateChunk(chunk, decoded).ok());
      EXPECT_EQ(decoded, sent);
      for (size_t i = 0; i < update.size(); ++i) {
        total[i] += decoded[i];
        if (round == 0)
          one_round_error = std::max(one_round_error, std::fabs(double(decoded[i]) - update[i]));
      }
    }
    double drift = 0;
    for (size_t i = 0; i < update.size(); ++i)
      drift = std::max(drift, std::fabs(double(total[i]) - 50.0 * update[i]));
    // Without feedback the errors of 50 rounds would add up; with it the drift stays about one round's.
    EXPECT_LE(drift, 2 * one_round_error + 1e-6) << "one round's error " << one_round_error;
    if (e == FedEncoding::kF32) {
      EXPECT_EQ(one_round_error, 0);
    }
  }
}

TEST(FedCodec, MalformedOrNonFiniteChunksAreRefused) {
  std::vector<float> values = Ramp(1000, 1), residual(1000, 0), out(1000);
  FedChunk good = EncodeUpdateChunk(values, residual, FedEncoding::kBF16, false);
  ASSERT_TRUE(DecodeUpdateChunk(good, out).ok());
  std::vector<float> fewer(999);
  EXPECT_FALSE(DecodeUpdateChunk(good, fewer).ok());  // another element count
  FedChunk cut = good;
  cut.data.resize(10);
  EXPECT_FALSE(DecodeUpdateChunk(cut, out).ok());
  FedChunk bad_frame = good;
  bad_frame.compressed = true;
  EXPECT_FALSE(DecodeUpdateChunk(bad_frame, out).ok());
  std::vector<float> nan(1000, std::numeric_limits<float>::quiet_NaN()), r2(1000, 0);
  Status s = DecodeUpdateChunk(EncodeUpdateChunk(nan, r2, FedEncoding::kF32, true), out);
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("not finite"), std::string::npos) << s.ToString();
}

TEST(FedAggregator, FoldsAWeightedMeanPerChunk) {
  FedAggregator a(10, 4);  // chunks of 4, 4, 2
  ASSERT_EQ(a.chunks(), 3u);
  std::vector<float> global(10, 1.0f);
  const std::vector<float> u1(4, 2.0f), u2(4, 5.0f), tail(2, 3.0f);
  a.Fold(0, 1, u1);
  a.Fold(0, 2, u2);  // chunk 0: (1*2 + 2*5) / 3 = 4
  a.Fold(2, 4, tail);
  a.ApplyTo(global);
  EXPECT_FLOAT_EQ(global[0], 5.0f);
  EXPECT_FLOAT_EQ(global[3], 5.0f);
  EXPECT_FLOAT_EQ(global[4], 1.0f);  // chunk 1 received nothing: unchanged
  EXPECT_FLOAT_EQ(global[9], 4.0f);
  a.ApplyTo(global);  // the sums were emptied
  EXPECT_FLOAT_EQ(global[0], 5.0f);
}

struct FedRun {
  std::vector<FedRoundReport> reports;
  std::vector<float> initial, global;
  std::vector<std::vector<std::vector<float>>> sent;  // [client][round - 1]: what it sent, decoded
  std::vector<std::vector<FedClientRound>> rounds;    // [client]: its rounds that sent an update
  std::vector<std::string> log;
};

constexpr size_t kElements = 3000;
constexpr uint32_t kChunk = 1024;  // 3 chunks

const FedClientReport& Named(const FedRoundReport& r, const std::string& name) {
  for (const auto& c : r.clients)
    if (c.name == name) return c;
  static const FedClientReport none;
  ADD_FAILURE() << "no client " << name << " in round " << r.round;
  return none;
}
std::string NameOf(size_t i) { return std::string(1, static_cast<char>('a' + i)); }

// Clients (one per encoding) over real control channels for `rounds` rounds; client `garbage`
// sends garbage in round 1. `update_of(i, r)` is client i's update in round r.
// `garbage_valid`: the garbage update's first chunks are valid (and folded before the garbage shows).
FedRun RunFed(std::vector<FedEncoding> encodings, int garbage, uint64_t rounds,
              std::function<std::vector<float>(int, uint64_t)> update_of, const std::vector<double>& samples,
              std::function<void(FedServerOptions&)> configure = nullptr,
              std::function<void(int, uint64_t)> before_send = nullptr, uint32_t garbage_valid = 0) {
  FedRun run;
  auto listener = ControlListener::Listen("127.0.0.1", 0, "fed-server", TestSecret());
  EXPECT_TRUE(listener.ok());
  FedServerOptions o;
  o.clients = encodings.size();
  o.rounds = rounds;
  o.chunk_elements = kChunk;
  o.deadline = milliseconds(20'000);
  if (configure) configure(o);
  std::mutex log_mu;
  o.log = [&](const std::string& l) {
    std::lock_guard<std::mutex> lock(log_mu);
    run.log.push_back(l);
  };
  run.initial = Ramp(kElements, 0.5f);
  FedServer server(std::move(*listener), run.initial, o);
  const std::string address = server.address();
  const size_t n = encodings.size();
  run.sent.resize(n);
  run.rounds.resize(n);
  std::vector<std::thread> threads;
  for (size_t i = 0; i < n; ++i)
    threads.emplace_back([&, i] {
      FedClientOptions co;
      co.name = NameOf(i);
      co.encoding = encodings[i];
      co.keep_sent = true;
      auto c = FedClient::Connect(address, TestSecret(), co);
      ASSERT_TRUE(c.ok()) << c.status().ToString();
      while (true) {
        auto start = (*c)->NextRound();
        if (!start.ok()) {
          EXPECT_EQ(start.status().code(), StatusCode::kNotFound) << start.status().ToString();
          return;
        }
        const uint64_t r = (*c)->round();
        if (static_cast<int>(i) == garbage && r == 1) {
          ASSERT_TRUE((*c)->SendGarbage(samples[i], garbage_valid).ok());
          run.sent[i].emplace_back();
          continue;
        }
        if (before_send) before_send(static_cast<int>(i), r);
        auto report = (*c)->SendUpdate(update_of(static_cast<int>(i), r), samples[i]);
        ASSERT_TRUE(report.ok()) << report.status().ToString();
        run.rounds[i].push_back(*report);
        const auto s = (*c)->last_sent();
        run.sent[i].emplace_back(s.begin(), s.end());
      }
    });
  auto reports = server.Run();
  for (auto& t : threads) t.join();
  EXPECT_TRUE(reports.ok()) << reports.status().ToString();
  if (reports.ok()) run.reports = *reports;
  run.global.assign(server.global().begin(), server.global().end());
  return run;
}

// The reference FedAvg, in double: each round adds the weighted mean of what the folded clients sent.
std::vector<double> Reference(const FedRun& run, const std::vector<double>& samples) {
  std::vector<double> g(run.initial.begin(), run.initial.end());
  for (size_t r = 0; r < run.reports.size(); ++r) {
    double w = 0;
    std::vector<double> sum(g.size(), 0);
    for (size_t i = 0; i < run.sent.size(); ++i) {
      if (!Named(run.reports[r], NameOf(i)).folded) continue;
      w += samples[i];
      for (size_t k = 0; k < g.size(); ++k) sum[k] += samples[i] * run.sent[i][r][k];
    }
    for (size_t k = 0; k < g.size() && w > 0; ++k) g[k] += sum[k] / w;
  }
  return g;
}

// The global model the server ended with is the reference FedAvg of what was sent.
void ExpectReference(const FedRun& run, const std::vector<double>& samples) {
  const std::vector<double> want = Reference(run, samples);
  for (size_t k = 0; k < want.size(); ++k) ASSERT_NEAR(run.global[k], want[k], 1e-5) << "element " << k;
}

bool Logged(const FedRun& run, std::string_view needle) {
  for (const auto& l : run.log)
    if (l.find(needle) != std::string::npos) return true;
  return false;
}

// Client "c" sends garbage in round 1: it is excluded, named, and each round's aggregate is the
// weighted mean of what the others sent (f32, bf16 and fp8 with error feedback).
TEST(FedServer, RoundsFoldTheWeightedMeanAndExcludeGarbageByName) {
  const std::vector<double> samples = {10, 30, 5};
  FedRun run = RunFed(
      {FedEncoding::kF32, FedEncoding::kFP8, FedEncoding::kBF16}, 2, 2,
      [](int i, uint64_t r) { return Ramp(kElements, 0.01f * (i + 1), 0.001f * r); }, samples);
  ASSERT_EQ(run.reports.size(), 2u);
  const FedRoundReport& first = run.reports[0];
  ASSERT_EQ(first.clients.size(), 3u);
  EXPECT_TRUE(Named(first, "a").folded && Named(first, "b").folded);
  EXPECT_FALSE(Named(first, "c").folded);
  EXPECT_NE(Named(first, "c").excluded.find("not finite"), std::string::npos) << Named(first, "c").excluded;
  EXPECT_TRUE(Logged(run, "c excluded"));
  for (const auto& c : run.reports[1].clients) EXPECT_TRUE(c.folded) << c.name << ": " << c.excluded;
  ExpectReference(run, samples);
}

// Updates that touch only the first chunk change only that chunk of the global model, and the next
// round sends every client that chunk alone.
TEST(FedServer, TheNextRoundSendsOnlyTheChunksThatChanged) {
  const std::vector<double> samples = {1, 1};
  FedRun run = RunFed(
      {FedEncoding::kF32, FedEncoding::kF32}, -1, 3,
      [](int i, uint64_t r) {
        std::vector<float> u = Ramp(kElements, 0.01f * (i + 1), 0.001f * r);
        if (r >= 2) std::fill(u.begin() + kChunk, u.end(), 0.0f);
        return u;
      },
      samples);
  ASSERT_EQ(run.reports.size(), 3u);
  EXPECT_EQ(run.reports[0].model_chunks_changed, 3u);
  EXPECT_EQ(run.reports[2].model_chunks_changed, 1u);
  for (size_t i = 0; i < 2; ++i) {
    ASSERT_EQ(run.rounds[i].size(), 3u);
    EXPECT_EQ(run.rounds[i][0].chunks_received, 3u);
    EXPECT_EQ(run.rounds[i][2].chunks_received, 1u);
  }
  EXPECT_LT(run.reports[2].bytes_down * 2, run.reports[0].bytes_down);
  ExpectReference(run, samples);
}

// Garbage in the last chunk of an update whose first two chunks were valid and folded: the client
// is excluded and those two chunks are taken back out, so the round is the mean of the others.
TEST(FedServer, AnExcludedClientsFoldedChunksAreTakenBackOut) {
  const std::vector<double> samples = {10, 30, 5};
  FedRun run = RunFed(
      {FedEncoding::kBF16, FedEncoding::kFP8, FedEncoding::kF32}, 2, 1,
      [](int i, uint64_t r) { return Ramp(kElements, 0.01f * (i + 1), 0.001f * r); }, samples, nullptr,
      nullptr, 2);
  ASSERT_EQ(run.reports.size(), 1u);
  const FedClientReport& c = Named(run.reports[0], "c");
  EXPECT_FALSE(c.folded);
  EXPECT_NE(c.excluded.find("chunk 2"), std::string::npos) << c.excluded;
  EXPECT_TRUE(Logged(run, "2 folded chunk(s) taken back out"));
  ExpectReference(run, samples);
}

// A client that misses round 1's deadline is excluded from it as late; under kFold its chunks,
// arriving during round 2, are folded there at its weight times the staleness factor.
TEST(FedServer, LateChunksFoldIntoTheNextRoundWithAStalenessWeight) {
  const std::vector<double> samples = {1, 2};
  FedRun run = RunFed(
      {FedEncoding::kF32, FedEncoding::kF32}, -1, 2,
      [](int i, uint64_t r) { return Ramp(kElements, 0.01f * (i + 1), 0.001f * r); }, samples,
      [](FedServerOptions& o) {
        o.deadline = milliseconds(2000);
        o.late = FedLatePolicy::kFold;
        o.staleness = 0.5;
      },
      [](int i, uint64_t r) {
        if (i == 1 && r == 1) std::this_thread::sleep_for(milliseconds(3000));
      });
  ASSERT_EQ(run.reports.size(), 2u);
  const FedClientReport& late = Named(run.reports[0], "b");
  EXPECT_FALSE(late.folded);
  EXPECT_NE(late.excluded.find("late"), std::string::npos) << late.excluded;
  EXPECT_TRUE(run.reports[0].deadline_hit);
  EXPECT_EQ(run.reports[1].stale_chunks_folded, 3u);
  EXPECT_TRUE(Named(run.reports[1], "a").folded && Named(run.reports[1], "b").folded);
  // Round 1: a alone. Round 2: a and b, and b's round-1 update at half its weight.
  std::vector<double> want(run.initial.begin(), run.initial.end());
  for (size_t k = 0; k < want.size(); ++k) want[k] += run.sent[0][0][k];
  const double w = samples[0] + samples[1] + 0.5 * samples[1];
  for (size_t k = 0; k < want.size(); ++k)
    want[k] += (samples[0] * run.sent[0][1][k] + samples[1] * run.sent[1][1][k] +
                0.5 * samples[1] * run.sent[1][0][k]) /
               w;
  for (size_t k = 0; k < want.size(); ++k) ASSERT_NEAR(run.global[k], want[k], 1e-5) << "element " << k;
}

// A client that authenticates and then says nothing must not hold up the join of the next one.
TEST(FedServer, AMuteClientDoesNotHoldUpTheJoinsBehindIt) {
  auto listener = ControlListener::Listen("127.0.0.1", 0, "fed-server", TestSecret());
  ASSERT_TRUE(listener.ok());
  FedServerOptions o;
  o.clients = 1;
  o.rounds = 1;
  o.chunk_elements = kChunk;
  o.join_timeout = milliseconds(10'000);
  FedServer server(std::move(*listener), Ramp(kElements, 0.5f), o);
  const std::string address = server.address();
  milliseconds joined_after{-1};
  std::thread clients([&] {
    auto mute =
        ControlChannel::Connect(address, "mute", PeerRole::kSubscriber, TestSecret(), milliseconds(5000));
    ASSERT_TRUE(mute.ok()) << mute.status().ToString();
    std::this_thread::sleep_for(milliseconds(200));  // the server has taken it in and waits for its join
    const auto start = std::chrono::steady_clock::now();
    FedClientOptions co;
    co.name = "a";
    auto c = FedClient::Connect(address, TestSecret(), co);
    ASSERT_TRUE(c.ok()) << c.status().ToString();
    auto round = (*c)->NextRound();
    ASSERT_TRUE(round.ok()) << round.status().ToString();
    joined_after = std::chrono::duration_cast<milliseconds>(std::chrono::steady_clock::now() - start);
    ASSERT_TRUE((*c)->SendUpdate(std::vector<float>(kElements, 0.25f), 1).ok());
    EXPECT_EQ((*c)->NextRound().status().code(), StatusCode::kNotFound);
  });
  auto reports = server.Run();
  clients.join();
  ASSERT_TRUE(reports.ok()) << reports.status().ToString();
  EXPECT_GE(joined_after.count(), 0);
  EXPECT_LT(joined_after, milliseconds(2000)) << "joined after " << joined_after.count() << " ms";
}

}  // namespace
}  // namespace weightport
