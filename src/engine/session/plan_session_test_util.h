// Plan sessions in one process for tests: ranks offering their part of two f32 tensors, a Group
// that starts a PlanService and joins its publishers and subscribers over a fake fabric, and the
// values each version holds.
#pragma once

#include <gtest/gtest.h>

#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "engine/pubsub/pubsub_test_util.h"
#include "weightport/engine/session/plan_member.h"
#include "weightport/engine/session/plan_publisher.h"
#include "weightport/engine/session/plan_service.h"
#include "weightport/engine/session/plan_subscriber.h"
#include "weightport/transport/testing/fake_transport.h"
#include "weightport/transport/testing/fault_transport.h"

namespace weightport::plan_session_test {

using std::chrono::milliseconds;

inline Secret TestSecret() { return engine_test::MakeSecret('s'); }

inline constexpr int64_t kRows = 48, kCols = 40;

// Rank `rank` holding `slice` of two f32 tensors: "w" [kRows, kCols] and "b" [kCols] (b whole).
inline LayoutOffer Offer(PlanSide side, int rank, int side_ranks, std::string host, Slice w_slice,
                         DType dtype = DType::kF32) {
  LayoutOffer o;
  o.endpoint = {side, rank};
  o.side_ranks = side_ranks;
  o.host = std::move(host);
  o.placement = *Placement::Make(
      {*TensorMeta::Make("w", dtype, {kRows, kCols}), *TensorMeta::Make("b", dtype, {kCols})});
  o.placement.AddShard(rank, "w", std::move(w_slice));
  o.placement.AddShard(rank, "b", Slice::MakeBox({0}, {kCols}));
  return o;
}

// Element (r, c) of version v: distinct per version, tensor and position.
inline float Value(const std::string& tensor, int64_t flat, uint64_t v) {
  return static_cast<float>(v * 100000 + flat) + (tensor == "b" ? 0.5f : 0.f);
}

// Visits the elements of a box slice of a 1-D or 2-D tensor in row-major order with their flat index.
template <typename F>
void ForEachElement(const PlanShardView& s, F f) {
  const Box& box = s.slice.box();
  const int64_t cols = s.shape.size() == 2 ? s.shape[1] : 1;
  const int64_t r0 = box.start[0], rn = box.length[0];
  const int64_t c0 = box.rank() == 2 ? box.start[1] : 0, cn = box.rank() == 2 ? box.length[1] : 1;
  size_t i = 0;
  for (int64_t r = r0; r < r0 + rn; ++r)
    for (int64_t c = c0; c < c0 + cn; ++c) f(i++, s.shape.size() == 2 ? r * cols + c : r);
}

inline void Fill(PlanPublisher& pub, uint64_t v) {
  for (size_t i = 0; i < pub.num_shards(); ++i) {
    PlanShardView s = pub.shard(i);
    auto* out = reinterpret_cast<float*>(s.bytes.data());
    ForEachElement(s, [&](size_t k, int64_t flat) { out[k] = Value(s.tensor, flat, v); });
  }
}

inline Status Check(PlanSubscriber& sub, const PlanSubscriber::Pin& pin) {
  for (size_t i = 0; i < sub.num_shards(); ++i) {
    PlanShardView s = sub.shard_info(i);
    const auto* in = reinterpret_cast<const float*>(pin.shard(i).data());
    Status bad;
    ForEachElement(s, [&](size_t k, int64_t flat) {
      if (bad.ok() && in[k] != Value(s.tensor, flat, pin.version()))
        bad = DataLoss("tensor " + s.tensor + " element " + std::to_string(flat) + " wrong");
    });
    WP_RETURN_IF_ERROR(bad);
  }
  return Status::Ok();
}

struct Group {
  std::shared_ptr<FakeFabric> fabric = std::make_shared<FakeFabric>();
  std::unique_ptr<PlanService> service;
  std::vector<std::unique_ptr<PlanPublisher>> pubs;
  std::vector<std::unique_ptr<PlanSubscriber>> subs;
  std::vector<Status> errors;
  bool rotate_keys = false;     // every rank moves to a fresh transport after each version
  size_t quorum = 0;            // PlanServiceOptions::quorum
  bool service_rotates = true;  // with rotate_keys: false gives only the ranks rotate_keys
  size_t keep_versions = 0;     // the subscribers' PlanRankOptions::keep_versions
  // Where it gives a plan, the rank's transport injects that plan's faults (fault_transport.h).
  std::function<std::shared_ptr<FaultPlan>(Endpoint)> faults;

  // Starts the service and joins every offer concurrently (each Join waits for all the others).
  Status Start(std::vector<LayoutOffer> offers, milliseconds pin_timeout = milliseconds(10'000)) {
    PlanServiceOptions so;
    so.rendezvous.timeout = so.join_timeout = so.update_timeout = milliseconds(10'000);
    so.rendezvous.plan.chunk_bytes = 1024;
    so.rotate_keys = rotate_keys && service_rotates;
    so.quorum = quorum;
    WP_ASSIGN_OR_RETURN(service, PlanService::Start(TestSecret(), so));
    std::vector<std::thread> threads;
    std::mutex mu;
    for (const LayoutOffer& offer : offers) {
      threads.emplace_back([&, offer] {
        PlanMemberOptions o;
        o.coordinator = service->address();
        o.offer = offer;
        o.make_transport =
            [this, ep = offer.endpoint](const std::string& name) -> Result<std::unique_ptr<Transport>> {
          WP_ASSIGN_OR_RETURN(auto t, MakeFakeTransport(fabric, name));
          std::shared_ptr<FaultPlan> plan = faults ? faults(ep) : nullptr;
          if (!plan) return t;
          return MakeFaultInjectingTransport(std::move(t), std::move(plan));
        };
        o.connect_timeout = o.update_timeout = milliseconds(10'000);
        o.pin_timeout = pin_timeout;
        o.rank.timeout = milliseconds(10'000);
        o.rank.rotate_keys = rotate_keys;
        if (offer.endpoint.side == PlanSide::kDestination) o.rank.keep_versions = keep_versions;
        if (offer.endpoint.side == PlanSide::kSource) {
          auto p = PlanPublisher::Join(TestSecret(), o);
          std::lock_guard<std::mutex> l(mu);
          if (p.ok())
            pubs.push_back(std::move(*p));
          else
            errors.push_back(p.status());
        } else {
          auto s = PlanSubscriber::Join(TestSecret(), o);
          std::lock_guard<std::mutex> l(mu);
          if (s.ok())
            subs.push_back(std::move(*s));
          else
            errors.push_back(s.status());
        }
      });
    }
    for (auto& t : threads) t.join();
    return errors.empty() ? Status::Ok() : errors.front();
  }

  Status PublishAll(uint64_t v) {
    for (auto& p : pubs) {
      WP_RETURN_IF_ERROR(p->WaitIdle(milliseconds(10'000)));
      Fill(*p, v);
      WP_RETURN_IF_ERROR(p->Publish(v));
    }
    return Status::Ok();
  }
  Status WaitAll(uint64_t v) {
    Status first;
    for (auto& p : pubs) {
      Status s = p->Wait(v, milliseconds(10'000));
      if (first.ok()) first = s;
    }
    return first;
  }
};

inline std::vector<LayoutOffer> TwoByTwo() {
  return {Offer(PlanSide::kSource, 0, 2, "trainer", Slice::MakeBox({0, 0}, {kRows / 2, kCols})),
          Offer(PlanSide::kSource, 1, 2, "trainer", Slice::MakeBox({kRows / 2, 0}, {kRows / 2, kCols})),
          Offer(PlanSide::kDestination, 0, 2, "server", Slice::MakeBox({0, 0}, {kRows, kCols})),
          Offer(PlanSide::kDestination, 1, 2, "server", Slice::MakeBox({0, kCols / 2}, {kRows, kCols / 2}))};
}

// Two sources that each hold everything (DDP replicas) on hosts of their own, to a whole replica and
// a half of 'w' beside it.
inline std::vector<LayoutOffer> TwoReplicasToTwo() {
  const Slice whole = Slice::MakeBox({0, 0}, {kRows, kCols});
  return {Offer(PlanSide::kSource, 0, 2, "trainer0", whole),
          Offer(PlanSide::kSource, 1, 2, "trainer1", whole),
          Offer(PlanSide::kDestination, 0, 2, "server", whole),
          Offer(PlanSide::kDestination, 1, 2, "server", Slice::MakeBox({0, kCols / 2}, {kRows, kCols / 2}))};
}

}  // namespace weightport::plan_session_test
