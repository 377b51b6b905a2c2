#include "weightport/engine/session/plan_control.h"

#include <map>

#include "engine/session/wire_side.h"
#include "weightport/control/handshake.h"
#include "weightport/control/plan_messages.h"
#include "weightport/control/version_messages.h"
#include "weightport/engine/session/plan_coordinator.h"

namespace weightport {
namespace {

Result<std::map<Endpoint, PlanPeer>> DecodePeerTable(ByteView payload) {
  WP_ASSIGN_OR_RETURN(PlanPeersMsg peers, PlanPeersMsg::Decode(payload));
  std::map<Endpoint, PlanPeer> table;
  for (const auto& p : peers.peers) {
    const Endpoint ep = EndpointFromWire(p.side, p.rank);
    WP_ASSIGN_OR_RETURN(RemoteKey key, RemoteKey::Deserialize(p.remote_key, ep.ToString()));
    PlanPeer& peer = table[ep] = PlanPeer{p.transport_address, std::move(key), std::nullopt, p.device_memory};
    if (!p.device_key.empty()) {
      WP_ASSIGN_OR_RETURN(peer.device_key,
                          RemoteKey::Deserialize(p.device_key, ep.ToString() + " device copy"));
    }
  }
  return table;
}

PlanJoinMsg JoinOf(const PlanRank& rank) {
  const Endpoint me = rank.endpoint();
  const PlanPeer info = rank.peer_info();
  return PlanJoinMsg{WireSide(me.side),    static_cast<uint32_t>(me.rank),
                     rank.plan_digest(),   info.address,
                     info.key.Serialize(), info.device_key ? info.device_key->Serialize() : Bytes{},
                     info.device_memory};
}

}  // namespace

Result<std::unique_ptr<PlanControl>> PlanControl::Join(const std::string& coordinator, const Secret& secret,
                                                       PlanRank& rank, std::chrono::milliseconds timeout) {
  const Endpoint me = rank.endpoint();
  const PeerRole role = me.side == PlanSide::kSource ? PeerRole::kPublisher : PeerRole::kSubscriber;
  WP_ASSIGN_OR_RETURN(auto channel,
                      ControlChannel::Connect(coordinator, RankControlName(me), role, secret, timeout));
  WP_RETURN_IF_ERROR(channel->Send(JoinOf(rank)));
  WP_ASSIGN_OR_RETURN(ControlMessage reply, channel->Receive(timeout));
  // A rank joining a running session hears first the ranks it must go around (PeerLost).
  while (reply.type == MessageType::kPeerLost) {
    WP_ASSIGN_OR_RETURN(auto l, PeerLostMsg::Decode(reply.payload));
    rank.PeerLost(EndpointFromWire(l.side, l.rank));
    WP_ASSIGN_OR_RETURN(reply, channel->Receive(timeout));
  }
  if (reply.type == MessageType::kRefused) {
    auto r = RefusedMsg::Decode(reply.payload);
    return PermissionDenied(me.ToString() + " refused by the coordinator: " + (r.ok() ? r->reason : "?"));
  }
  if (reply.type != MessageType::kPlanPeers)
    return InvalidArgument("coordinator sent " + std::string(MessageTypeName(reply.type)) +
                           ", not PlanPeers");
  WP_ASSIGN_OR_RETURN(auto table, DecodePeerTable(reply.payload));
  WP_RETURN_IF_ERROR(rank.Connect(table));
  return std::unique_ptr<PlanControl>(new PlanControl(std::move(channel), std::move(table)));
}

PlanControl::~PlanControl() {
  if (channel_) channel_->Close();
}

void PlanControl::Interrupt() {
  if (channel_) channel_->Close();
}

Result<PlanControl::Event> PlanControl::Next(std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (true) {
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0)
      return Timeout("no instruction from the coordinator within " + std::to_string(timeout.count()) + " ms");
    WP_ASSIGN_OR_RETURN(ControlMessage m, channel_->Receive(left));
    switch (m.type) {
      case MessageType::kUpdateBegin: {
        WP_ASSIGN_OR_RETURN(auto b, UpdateBeginMsg::Decode(m.payload));
        return Event{Event::kBegin, b.version, ""};
      }
      case MessageType::kCommit: {
        WP_ASSIGN_OR_RETURN(auto c, CommitMsg::Decode(m.payload));
        return Event{Event::kCommit, c.version, ""};
      }
      case MessageType::kAbort: {
        WP_ASSIGN_OR_RETURN(auto a, AbortMsg::Decode(m.payload));
        return Event{Event::kAbort, a.version, a.reason};
      }
      case MessageType::kBye:
        return Event{Event::kBye, 0, ""};
      case MessageType::kPeerLost: {
        WP_ASSIGN_OR_RETURN(auto l, PeerLostMsg::Decode(m.payload));
        const Endpoint peer = EndpointFromWire(l.side, l.rank);
        return Event{Event::kPeerLost, 0, "", peer};
      }
      case MessageType::kRekey: {
        WP_ASSIGN_OR_RETURN(auto r, RekeyMsg::Decode(m.payload));
        return Event{Event::kRekey, r.version, ""};
      }
      case MessageType::kRollback: {
        WP_ASSIGN_OR_RETURN(auto r, RollbackMsg::Decode(m.payload));
        return Event{Event::kRollback, r.version, ""};
      }
      case MessageType::kPlanPeers: {
        Event e{Event::kPeers, 0, ""};
        WP_ASSIGN_OR_RETURN(e.peers, DecodePeerTable(m.payload));
        return e;
      }
      default:
        break;  // heartbeats and the like
    }
  }
}

Status PlanControl::Ready(uint64_t version, std::vector<std::pair<uint32_t, uint64_t>> replica_digests) {
  return channel_->Send(PlanReadyMsg{version, std::move(replica_digests)});
}
Status PlanControl::RequestRollback(uint64_t version) { return channel_->Send(RollbackMsg{version}); }
Status PlanControl::Verified(const ReceiveStats& s) {
  return channel_->Send(ChunksVerifiedMsg{s.version, s.chunks, s.bytes,
                                          static_cast<uint64_t>(s.elapsed.count()),
                                          s.corrupt_refetched + s.errors_retried});
}
Status PlanControl::Failed(uint64_t version, const std::string& why) {
  return channel_->Send(UpdateFailedMsg{version, why.substr(0, kMaxReasonSize)});
}
Status PlanControl::Committed(uint64_t version) { return channel_->Send(CommittedMsg{version, 0}); }
Status PlanControl::SendKeys(const PlanRank& rank) { return channel_->Send(JoinOf(rank)); }

Status MoveToFreshTransport(PlanRank& rank, std::unique_ptr<ProgressLoop>& loop,
                            const TransportFactory& make_transport) {
  const Endpoint me = rank.endpoint();
  auto transport = make_transport(RankControlName(me));
  if (!transport.ok()) return transport.status().WithContext(me.ToString() + ": a fresh transport");
  auto fresh = std::make_unique<ProgressLoop>(std::move(*transport));
  WP_RETURN_IF_ERROR(rank.Rekey(*fresh));
  loop->Stop();
  loop = std::move(fresh);  // the old transport is closed here
  return Status::Ok();
}

}  // namespace weightport
