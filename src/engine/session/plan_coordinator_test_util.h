// Test helpers for a rank's end of a reshard: the coordinator played by hand over a real control
// channel.
#pragma once

#include <gtest/gtest.h>

#include <memory>
#include <string>

#include "control/control_test_util.h"
#include "weightport/control/auth.h"
#include "weightport/control/channel.h"
#include "weightport/control/plan_messages.h"
#include "weightport/core/status.h"
#include "weightport/engine/rank/plan_rank.h"

namespace weightport::engine_test {

// The coordinator's side of one rank's control channel.
class HandCoordinator {
 public:
  explicit HandCoordinator(const Secret& secret) {
    auto l = ControlListener::Listen("127.0.0.1", 0, "coordinator", secret);
    EXPECT_TRUE(l.ok()) << l.status().ToString();
    listener_ = std::move(*l);
  }
  const std::string& address() const { return listener_->address(); }

  Status Accept() {
    WP_ASSIGN_OR_RETURN(channel_, listener_->Accept(control_test::kWait));
    WP_ASSIGN_OR_RETURN(ControlMessage join, channel_->Receive(control_test::kWait));
    return join.type == MessageType::kPlanJoin ? Status::Ok() : Internal("expected PlanJoin");
  }
  // A table naming source rank 0 at `source`.
  Status SendPeers(const PlanPeer& source) {
    PlanPeersMsg m;
    m.peers.push_back({0, 0, source.address, source.key.Serialize(), {}, ""});
    return channel_->Send(m);
  }
  template <typename Msg>
  Status Send(const Msg& m) {
    return channel_->Send(m);
  }
  Status Bye() { return channel_->Send(MessageType::kBye, {}); }
  // The next message of `type`, the others skipped.
  Result<ControlMessage> Expect(MessageType type) {
    while (true) {
      WP_ASSIGN_OR_RETURN(ControlMessage m, channel_->Receive(control_test::kWait));
      if (m.type == type) return m;
    }
  }
  // The destination's answer to an UpdateBegin: ChunksVerified or UpdateFailed.
  Result<ControlMessage> Answer() {
    while (true) {
      WP_ASSIGN_OR_RETURN(ControlMessage m, channel_->Receive(control_test::kWait));
      if (m.type == MessageType::kChunksVerified || m.type == MessageType::kUpdateFailed ||
          m.type == MessageType::kCommitted)
        return m;
    }
  }

 private:
  std::unique_ptr<ControlListener> listener_;
  std::unique_ptr<ControlChannel> channel_;
};

}  // namespace weightport::engine_test
