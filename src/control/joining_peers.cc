#include "weightport/control/joining_peers.h"

#include <string>

namespace weightport {

using Clock = std::chrono::steady_clock;

void JoiningPeers::Add(std::unique_ptr<ControlChannel> channel) {
  waiting_.push_back(Waiting{std::move(channel), Clock::now() + timeout_});
}

std::vector<JoiningPeers::Arrival> JoiningPeers::Take() {
  std::vector<Arrival> done;
  for (auto it = waiting_.begin(); it != waiting_.end();) {
    // Zero wait: only a frame that has already arrived (a partial one is kept for the next look).
    Result<ControlMessage> first = it->channel->Receive(std::chrono::milliseconds(0));
    if (!first.ok() && first.status().code() == StatusCode::kTimeout) {
      if (Clock::now() < it->deadline) {
        ++it;
        continue;
      }
      first = Timeout(it->channel->peer() + " sent nothing within " + std::to_string(timeout_.count()) +
                      " ms of its handshake");
      it->channel->Close();
    }
    done.push_back(Arrival{std::move(it->channel), std::move(first)});
    it = waiting_.erase(it);
  }
  return done;
}

}  // namespace weightport
