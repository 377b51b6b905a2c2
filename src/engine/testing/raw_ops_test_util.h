// A peer that ignores the protocol, for the key revocation tests of plans (plan_retire_test,
// plan_rekey_test): its own transport and loop, a landing buffer registered there, connections to
// whatever addresses it learnt, and raw one-sided Gets and Puts with whatever keys it holds.
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <future>
#include <memory>
#include <vector>

#include "weightport/core/placement_builders.h"
#include "weightport/engine/common/transport_factory.h"
#include "weightport/plan/planner.h"
#include "weightport/transport/progress_loop.h"

namespace weightport::engine_test {

// One source rank and one destination rank, each holding a whole 256x64 bf16 tensor "w": the
// source's shard starts at offset 0 of its arena.
inline std::shared_ptr<const Plan> OneToOnePlan() {
  std::vector<TensorMeta> t = {*TensorMeta::Make("w", DType::kBF16, {256, 64})};
  const std::vector<int> rank0 = {0};
  auto whole = Replicated(t, rank0);
  EXPECT_TRUE(whole.ok()) << whole.status().ToString();
  auto plan = MakePlan(*whole, *whole, Topology(), PlanOptions{});
  EXPECT_TRUE(plan.ok()) << plan.status().ToString();
  return std::make_shared<const Plan>(std::move(*plan));
}

class RawPeer {
 public:
  RawPeer(const TransportFactory& factory, const std::string& name, size_t landing_bytes = 4096)
      : landing_(landing_bytes) {
    auto t = factory(name);
    if (!t.ok()) Abort("transport", t.status());
    loop_ = std::make_unique<ProgressLoop>(std::move(*t));
    auto local = loop_->Call([this](Transport& t) { return t.Register(landing_.data(), landing_.size()); });
    if (!local.ok()) Abort("landing buffer", local.status());
    local_ = std::move(*local);
  }
  // Connections and the landing region belong to the loop's transport: released there.
  ~RawPeer() {
    loop_->Call([this](Transport&) {
      for (auto& c : connections_) c->Close();
      connections_.clear();
      local_.reset();
    });
    loop_->Stop();
  }

  Result<std::shared_ptr<Connection>> Connect(const Bytes& address, const std::string& peer) {
    auto conn = loop_->Call([&](Transport& t) { return t.Connect(address, peer); });
    if (conn.ok()) connections_.push_back(*conn);
    return conn;
  }
  // One raw Get (landing at offset 0 of the buffer, zeroed first) or Put (of the buffer's first
  // bytes) of 64 bytes at offset 0 of `key`: the status it completed with.
  Status Op(const std::shared_ptr<Connection>& conn, const RemoteKey& key, bool put) {
    std::memset(landing_.data(), 0, 64);
    auto done = std::make_shared<std::promise<Status>>();  // a late completion still finds it
    auto f = done->get_future();
    loop_->Post([this, done, conn, key, put](Transport&) {
      auto cb = [done](const Status& s) { done->set_value(s); };
      if (put)
        conn->Put(*local_, 0, key, 0, 64, cb);
      else
        conn->Get(*local_, 0, key, 0, 64, cb);
    });
    if (f.wait_for(std::chrono::seconds(30)) != std::future_status::ready)
      return Timeout("no completion in 30 s");
    return f.get();
  }
  // A Get and a Put with `key` both fail by refusal, not by timing out, the Get naming `peer` and
  // landing nothing. `why`: what the key is (in the failure messages).
  void ExpectRefused(const std::shared_ptr<Connection>& conn, const RemoteKey& key, const std::string& peer,
                     const std::string& why) {
    Status get = Op(conn, key, false);
    EXPECT_TRUE(LandedNothing()) << "bytes arrived with " << why;
    Status put = Op(conn, key, true);
    EXPECT_FALSE(get.ok()) << "a Get with " << why << " succeeded";
    EXPECT_NE(get.code(), StatusCode::kTimeout) << get.ToString();
    EXPECT_FALSE(put.ok()) << "a Put with " << why << " succeeded";
    EXPECT_NE(put.code(), StatusCode::kTimeout) << put.ToString();
    EXPECT_NE(get.message().find(peer), std::string::npos) << get.ToString();
  }
  bool LandedNothing() const {
    for (size_t i = 0; i < 64; ++i)
      if (landing_[i] != std::byte{0}) return false;
    return true;
  }

  ProgressLoop& loop() { return *loop_; }
  MemoryRegion& local() { return *local_; }
  std::vector<std::byte>& landing() { return landing_; }

 private:
  // Setup failed: nothing of the test can run.
  [[noreturn]] static void Abort(const char* what, const Status& s) {
    ADD_FAILURE() << "RawPeer: " << what << ": " << s.ToString();
    std::abort();
  }

  std::vector<std::byte> landing_;
  std::unique_ptr<ProgressLoop> loop_;
  std::unique_ptr<MemoryRegion> local_;
  std::vector<std::shared_ptr<Connection>> connections_;
};

}  // namespace weightport::engine_test
