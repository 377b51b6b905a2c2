#include "weightport/control/validate_payload.h"

#include <string>

#include "weightport/control/fed_messages.h"
#include "weightport/control/handshake.h"
#include "weightport/control/plan_messages.h"
#include "weightport/control/pubsub_messages.h"
#include "weightport/control/version_messages.h"

namespace weightport {

Status ValidatePayload(MessageType type, ByteView payload) {
  auto check = [&](auto result) { return result.status(); };
  switch (type) {
    case MessageType::kHello:
      return check(HelloMsg::Decode(payload));
    case MessageType::kChallenge:
      return check(ChallengeMsg::Decode(payload));
    case MessageType::kProof:
      return check(ProofMsg::Decode(payload));
    case MessageType::kWelcome:
      return check(WelcomeMsg::Decode(payload));
    case MessageType::kRefused:
      return check(RefusedMsg::Decode(payload));
    case MessageType::kManifest:
      return check(ManifestMsg::Decode(payload));
    case MessageType::kRegionKeys:
      return check(RegionKeysMsg::Decode(payload));
    case MessageType::kPlacement:
      return check(PlacementMsg::Decode(payload));
    case MessageType::kUpdateBegin:
      return check(UpdateBeginMsg::Decode(payload));
    case MessageType::kChunksVerified:
      return check(ChunksVerifiedMsg::Decode(payload));
    case MessageType::kUpdateFailed:
      return check(UpdateFailedMsg::Decode(payload));
    case MessageType::kCommit:
      return check(CommitMsg::Decode(payload));
    case MessageType::kAbort:
      return check(AbortMsg::Decode(payload));
    case MessageType::kHeartbeat:
      return check(HeartbeatMsg::Decode(payload));
    case MessageType::kBye:
      return check(ByeMsg::Decode(payload));
    case MessageType::kCommitted:
      return check(CommittedMsg::Decode(payload));
    case MessageType::kPlanJoin:
      return check(PlanJoinMsg::Decode(payload));
    case MessageType::kPlanPeers:
      return check(PlanPeersMsg::Decode(payload));
    case MessageType::kPlanReady:
      return check(PlanReadyMsg::Decode(payload));
    case MessageType::kLayoutOffer:
      return check(LayoutOfferMsg::Decode(payload));
    case MessageType::kPlanAssign:
      return check(PlanAssignMsg::Decode(payload));
    case MessageType::kPeerLost:
      return check(PeerLostMsg::Decode(payload));
    case MessageType::kFed:
      return check(FedMsg::Decode(payload));
    case MessageType::kRekey:
      return check(RekeyMsg::Decode(payload));
    case MessageType::kRollback:
      return check(RollbackMsg::Decode(payload));
    case MessageType::kStagingReady:
      return check(StagingReadyMsg::Decode(payload));
  }
  return InvalidArgument("unknown message type " + std::to_string(static_cast<int>(type)));
}

}  // namespace weightport
