// A plan session of 1,024 ranks in one process: 512 sources to 512 destinations, 10,240 small
// tensors, every rank a PlanPublisher or PlanSubscriber with its own progress thread, control
// connection and fake transport, exactly as separate processes would run them. It checks that the
// session reaches a committed, verified version, that no rank received more than its part, and
// prints what the rendezvous cost (the figures docs/PERFORMANCE.md records).
//
// Under a sanitizer the same session runs at 64 ranks: the instrumented threads would take minutes.
#include <sys/resource.h>

#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <thread>

#include <nlohmann/json.hpp>

#include "engine/pubsub/pubsub_test_util.h"
#include "weightport/core/sanitizer_build.h"
#include "weightport/engine/session/plan_publisher.h"
#include "weightport/engine/session/plan_service.h"
#include "weightport/engine/session/plan_subscriber.h"
#include "weightport/plan/plan_binary.h"
#include "weightport/transport/testing/fake_transport.h"

// A namespace of its own: the unity build compiles this file together with other tests.
namespace weightport::plan_scale_test {
namespace {

using std::chrono::milliseconds;
using Clock = std::chrono::steady_clock;

constexpr int kSideRanks = kUnderSanitizer ? 32 : 512;
constexpr int kTensorsPerRank = 20;
constexpr int kTensors = kSideRanks * kTensorsPerRank;
constexpr int64_t kElements = 8;  // f32: 32 bytes a tensor

std::string TensorName(int t) { return "layers." + std::to_string(t / 16) + ".w" + std::to_string(t % 16); }

// Tensor t = q * n + r (n ranks a side): source r holds it, destination (r + q) % n wants it, so
// every rank talks to kTensorsPerRank ranks of the other side.
LayoutOffer Offer(PlanSide side, int rank) {
  LayoutOffer o;
  o.endpoint = {side, rank};
  o.side_ranks = kSideRanks;
  o.host = (side == PlanSide::kSource ? "trainer" : "server") + std::to_string(rank / 8);
  std::vector<TensorMeta> tensors;
  std::vector<int> mine;
  for (int t = 0; t < kTensors; ++t) {
    const int owner =
        side == PlanSide::kSource ? t % kSideRanks : (t % kSideRanks + t / kSideRanks) % kSideRanks;
    if (owner != rank) continue;
    mine.push_back(t);
    tensors.push_back(*TensorMeta::Make(TensorName(t), DType::kF32, {kElements}));
  }
  o.placement = *Placement::Make(tensors);
  for (int t : mine) o.placement.AddShard(rank, TensorName(t), Slice::MakeBox({0}, {kElements}));
  return o;
}

float Value(const std::string& tensor, int64_t i, uint64_t v) {
  return static_cast<float>(v * 1000 + i) + static_cast<float>(std::hash<std::string>{}(tensor) % 997);
}

double PeakRssMiB() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_maxrss) / 1024.0;
}

TEST(PlanScale, AThousandRanksCommitAVerifiedVersion) {
  const Secret secret = engine_test::MakeSecret('k');
  auto fabric = std::make_shared<FakeFabric>();
  PlanServiceOptions so;
  so.rendezvous.timeout = so.join_timeout = so.update_timeout = milliseconds(300'000);
  so.rendezvous.plan.chunk_bytes = 1 << 20;
  auto service = PlanService::Start(secret, so);
  ASSERT_TRUE(service.ok()) << service.status().ToString();
  const std::string address = (*service)->address();

  std::vector<std::unique_ptr<PlanPublisher>> pubs(kSideRanks);
  std::vector<std::unique_ptr<PlanSubscriber>> subs(kSideRanks);
  std::vector<Status> errors(2 * kSideRanks);
  const auto start = Clock::now();
  {
    std::vector<std::thread> joining;
    for (int i = 0; i < 2 * kSideRanks; ++i)
      joining.emplace_back([&, i] {
        const PlanSide side = i < kSideRanks ? PlanSide::kSource : PlanSide::kDestination;
        const int rank = i % kSideRanks;
        PlanMemberOptions o;
        o.coordinator = address;
        o.offer = Offer(side, rank);
        o.make_transport = [&fabric](const std::string& name) { return MakeFakeTransport(fabric, name); };
        o.connect_timeout = o.update_timeout = milliseconds(300'000);
        o.rank.timeout = milliseconds(120'000);
        o.rank.worker_threads = 1;
        if (side == PlanSide::kSource) {
          auto p = PlanPublisher::Join(secret, o);
          if (p.ok()) pubs[rank] = std::move(*p);
          errors[i] = p.status();
        } else {
          auto s = PlanSubscriber::Join(secret, o);
          if (s.ok()) subs[rank] = std::move(*s);
          errors[i] = s.status();
        }
      });
    for (auto& t : joining) t.join();
  }
  for (const Status& e : errors) ASSERT_TRUE(e.ok()) << e.ToString();
  const double joined_s = std::chrono::duration<double>(Clock::now() - start).count();
  // The ranks hear their peer tables a moment before the coordinator notes that all joined.
  for (int i = 0; i < 500 && !(*service)->stats().joined; ++i) std::this_thread::sleep_for(milliseconds(20));
  const PlanSessionStats stats = (*service)->stats();
  ASSERT_TRUE(stats.joined);
  EXPECT_EQ(stats.ranks, 2u * kSideRanks);

  // Version 1: every source fills its shards and publishes; every destination checks its own.
  const auto publish = Clock::now();
  for (auto& p : pubs) {
    ASSERT_TRUE(p->WaitIdle(milliseconds(60'000)).ok());
    for (size_t i = 0; i < p->num_shards(); ++i) {
      PlanShardView s = p->shard(i);
      auto* out = reinterpret_cast<float*>(s.bytes.data());
      for (int64_t k = 0; k < kElements; ++k) out[k] = Value(s.tensor, k, 1);
    }
    ASSERT_TRUE(p->Publish(1).ok());
  }
  auto outcome = (*service)->WaitForOutcome(1, milliseconds(300'000));
  ASSERT_TRUE(outcome.ok()) << outcome.status().ToString();
  ASSERT_TRUE(outcome->committed) << outcome->reason;
  const double version_s = std::chrono::duration<double>(Clock::now() - publish).count();
  size_t checked = 0;
  for (auto& s : subs) {
    ASSERT_TRUE(s->WaitForVersion(1, milliseconds(60'000)).ok());
    auto pin = s->Acquire();
    ASSERT_TRUE(pin.ok()) << pin.status().ToString();
    for (size_t i = 0; i < s->num_shards(); ++i) {
      const PlanShardView v = s->shard_info(i);
      const auto* in = reinterpret_cast<const float*>(pin->shard(i).data());
      for (int64_t k = 0; k < kElements; ++k) ASSERT_EQ(in[k], Value(v.tensor, k, 1)) << v.tensor;
      ++checked;
    }
  }
  EXPECT_EQ(checked, static_cast<size_t>(kTensors));

  // No rank got the whole plan: a part is a sliver of it, and a peer table lists a rank's peers only.
  const uint64_t whole_binary = EncodePlanBinary(*(*service)->plan()).size();
  const uint64_t whole_json = (*service)->plan()->ToJson().dump().size();  // what every rank got before
  EXPECT_LT(stats.max_part_bytes * (kSideRanks / 8), whole_binary);
  EXPECT_EQ(stats.max_peers, static_cast<size_t>(kTensorsPerRank));
  std::printf(
      "plan session: %d ranks, %d tensors, %zu steps; plan %.3f s, parts %.3f s (largest %llu B, all "
      "%llu B; the whole plan is %llu B binary, %llu B JSON), joins %.3f s; offers-to-ready %.3f s; all "
      "joined after "
      "%.2f s; version 1 committed %.2f s after publishing; peak RSS %.0f MiB; most peers %zu\n",
      2 * kSideRanks, kTensors, stats.plan_steps, stats.plan_seconds, stats.send_seconds,
      static_cast<unsigned long long>(stats.max_part_bytes),
      static_cast<unsigned long long>(stats.total_part_bytes), static_cast<unsigned long long>(whole_binary),
      static_cast<unsigned long long>(whole_json), stats.join_seconds,
      stats.plan_seconds + stats.send_seconds + stats.join_seconds, joined_s, version_s, PeakRssMiB(),
      stats.max_peers);
  RecordProperty("offers_to_ready_ms",
                 static_cast<int>(1000 * (stats.plan_seconds + stats.send_seconds + stats.join_seconds)));
  RecordProperty("peak_rss_mib", static_cast<int>(PeakRssMiB()));
  const auto closing = Clock::now();
  for (auto& p : pubs) p->Close();
  const auto pubs_closed = Clock::now();
  for (auto& s : subs) s->Close();
  const auto subs_closed = Clock::now();
  (*service)->Stop();
  std::printf("closing: publishers %.2f s, subscribers %.2f s, service %.2f s\n",
              std::chrono::duration<double>(pubs_closed - closing).count(),
              std::chrono::duration<double>(subs_closed - pubs_closed).count(),
              std::chrono::duration<double>(Clock::now() - subs_closed).count());
}

}  // namespace
}  // namespace weightport::plan_scale_test
