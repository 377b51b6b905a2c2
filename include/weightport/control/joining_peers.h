// Peers that have authenticated but not yet sent their first message (a join), waited on side by
// side, so that one peer slow to say what it wants holds up no other. For accept loops that read a
// join before admitting a peer: the federated server, the reshard coordinator, the plan rendezvous.
//
// Thread-safety: one thread at a time.
#pragma once

#include <chrono>
#include <deque>
#include <memory>
#include <vector>

#include "weightport/control/channel.h"
#include "weightport/core/status.h"

namespace weightport {

// How long an authenticated peer has to send its first message (its join) by default.
inline constexpr std::chrono::milliseconds kJoinMessageTimeout{5000};

class JoiningPeers {
 public:
  // Each peer has `timeout` from Add to send its first message.
  explicit JoiningPeers(std::chrono::milliseconds timeout) : timeout_(timeout) {}

  void Add(std::unique_ptr<ControlChannel> channel);
  bool empty() const { return waiting_.empty(); }

  struct Arrival {
    std::unique_ptr<ControlChannel> channel;
    // The first message; or why there is none: the channel failed, or Timeout naming the peer when
    // its time ran out (the channel is then closed).
    Result<ControlMessage> first;
  };
  // Looks at every waiting peer without blocking and returns, oldest first, those that are done
  // waiting; the others stay.
  std::vector<Arrival> Take();

 private:
  struct Waiting {
    std::unique_ptr<ControlChannel> channel;
    std::chrono::steady_clock::time_point deadline;
  };
  std::chrono::milliseconds timeout_;
  std::deque<Waiting> waiting_;
};

}  // namespace weightport
