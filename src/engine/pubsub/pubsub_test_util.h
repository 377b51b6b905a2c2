// Test helpers for end-to-end engine tests: a fake-transport cluster of one publisher and its
// subscribers, version content that identifies its version, and checks.
#pragma once

#include <cstring>
#include <mutex>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "control/control_test_util.h"
#include "weightport/engine/pubsub/coordinator.h"
#include "weightport/engine/pubsub/publisher.h"
#include "weightport/engine/pubsub/subscriber.h"
#include "weightport/transport/testing/fake_transport.h"
#include "weightport/transport/testing/fault_transport.h"

namespace weightport::engine_test {

using control_test::kWait;
using control_test::LogCapture;
using control_test::MakeSecret;

// A few tensors of uneven sizes; with 16 KiB chunks, tens of chunks in all.
inline std::vector<TensorMeta> SmallModel() {
  return {*TensorMeta::Make("model.embed_tokens.weight", DType::kBF16, {97, 256}),
          *TensorMeta::Make("model.layers.0.mlp.up_proj.weight", DType::kBF16, {256, 300}),
          *TensorMeta::Make("model.norm.weight", DType::kF32, {256})};
}

// Fills the weights so that every 8-byte word says (version, word index): a reader can tell from
// any word which version it belongs to.
inline void FillVersion(std::span<std::byte> bytes, uint64_t version) {
  const size_t words = bytes.size() / 8;
  for (size_t i = 0; i < words; ++i) {
    const uint64_t w = (version << 40) ^ i;
    std::memcpy(bytes.data() + i * 8, &w, 8);
  }
  for (size_t i = words * 8; i < bytes.size(); ++i) bytes[i] = std::byte(static_cast<uint8_t>(version));
}
inline void FillVersion(WholePublisher& pub, uint64_t version) { FillVersion(pub.weights(), version); }

// The version every word of `bytes` says it belongs to, or UINT64_MAX when they disagree.
inline uint64_t VersionOf(std::span<const std::byte> bytes) {
  const size_t words = bytes.size() / 8;
  uint64_t version = UINT64_MAX;
  for (size_t i = 0; i < words; ++i) {
    uint64_t w;
    std::memcpy(&w, bytes.data() + i * 8, 8);
    const uint64_t v = (w ^ i) >> 40;
    if (i == 0) version = v;
    if (v != version || ((w ^ i) & ((1ull << 40) - 1)) != 0) return UINT64_MAX;
  }
  return version;
}

inline void ExpectLive(WholeSubscriber& sub, WholePublisher& pub, uint64_t version) {
  ASSERT_TRUE(sub.WaitForVersion(version, kWait).ok()) << sub.WaitForVersion(version, kWait).ToString();
  auto pin = sub.Acquire();
  ASSERT_TRUE(pin.ok()) << pin.status().ToString();
  EXPECT_EQ(pin->version(), version);
  ASSERT_EQ(pin->bytes().size(), pub.model_bytes());
  std::vector<std::byte> expected(pub.model_bytes());
  FillVersion(expected, version);
  EXPECT_EQ(std::memcmp(pin->bytes().data(), expected.data(), expected.size()), 0) << "version " << version;
}

struct Cluster {
  explicit Cluster(WholeCoordinatorOptions coordinator = {}) : coordinator_options(std::move(coordinator)) {}

  Secret secret = MakeSecret('s');
  std::shared_ptr<FakeFabric> fabric = std::make_shared<FakeFabric>();
  LogCapture log;
  WholeCoordinatorOptions coordinator_options;

  WholeCoordinatorOptions CoordOpts() {
    WholeCoordinatorOptions o = coordinator_options;
    o.log = log.Sink();
    return o;
  }

  TransportFactory Factory(std::shared_ptr<FaultPlan> plan = nullptr) {
    auto fab = fabric;
    return [fab, plan](const std::string& name) -> Result<std::unique_ptr<Transport>> {
      WP_ASSIGN_OR_RETURN(std::unique_ptr<Transport> t, MakeFakeTransport(fab, name));
      if (!plan) return t;
      return MakeFaultInjectingTransport(std::move(t), plan);
    };
  }

  std::unique_ptr<WholePublisher> MakePublisher(
      std::vector<TensorMeta> tensors, std::chrono::milliseconds heartbeat = std::chrono::milliseconds(200),
      std::string coordinator = "") {
    WholePublisherOptions o;
    o.make_transport = Factory();
    o.chunk_size = 16 << 10;
    o.coordinator = std::move(coordinator);
    o.coordinator_options = CoordOpts();
    o.timing.heartbeat_interval = heartbeat;
    o.timing.connect_timeout = kWait;
    o.update_timeout = std::chrono::milliseconds(20'000);
    o.log = log.Sink();
    auto p = WholePublisher::Create(std::move(tensors), secret, o);
    EXPECT_TRUE(p.ok()) << p.status().ToString();
    return p.ok() ? std::move(*p) : nullptr;
  }

  WholeSubscriberOptions SubscriberOpts(WholePublisher& pub, std::string name,
                                        std::shared_ptr<FaultPlan> plan = nullptr) {
    return SubscriberOpts(pub.coordinator_address(), std::move(name), std::move(plan));
  }
  WholeSubscriberOptions SubscriberOpts(const std::string& coordinator, std::string name,
                                        std::shared_ptr<FaultPlan> plan = nullptr) {
    WholeSubscriberOptions o;
    o.name = std::move(name);
    o.coordinator = coordinator;
    o.make_transport = Factory(std::move(plan));
    o.timing.heartbeat_interval = std::chrono::milliseconds(200);
    o.timing.connect_timeout = kWait;
    o.fetch.window = 8;
    o.fetch.backoff_initial = std::chrono::milliseconds(1);
    o.fetch.timeout = std::chrono::milliseconds(8000);
    o.log = log.Sink();
    return o;
  }

  std::unique_ptr<WholeSubscriber> MakeSubscriber(WholePublisher& pub, std::string name,
                                                  std::shared_ptr<FaultPlan> plan = nullptr,
                                                  SwapMode mode = SwapMode::kDoubleBuffer) {
    WholeSubscriberOptions o = SubscriberOpts(pub, std::move(name), std::move(plan));
    o.swap_mode = mode;
    auto s = WholeSubscriber::Connect(secret, o);
    EXPECT_TRUE(s.ok()) << s.status().ToString();
    return s.ok() ? std::move(*s) : nullptr;
  }
};

}  // namespace weightport::engine_test
