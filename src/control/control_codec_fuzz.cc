// libFuzzer target: arbitrary bytes through the control frame decoder and every payload decoder.
// Checks that decoding never reads out of bounds and that whatever decodes re-encodes to the same
// bytes (the encoding is canonical, so a strict decoder accepts exactly one form of each message),
// except a refusal's reason, which is decoded escaped (RefusedDecodesPrintable).
// Seeds: fuzz/control_codec/ (fuzz/make_control_codec_seeds.py), frames MACed with kHandshakeKey
// and numbered 0, so the fuzzer starts past the MAC check.
#include <cstdlib>

#include "weightport/control/fed_messages.h"
#include "weightport/control/handshake.h"
#include "weightport/control/plan_messages.h"
#include "weightport/control/protocol.h"
#include "weightport/control/pubsub_messages.h"
#include "weightport/control/validate_payload.h"
#include "weightport/control/version_messages.h"
#include "weightport/core/printable.h"

namespace weightport {
namespace {

template <typename M>
void RoundTrip(ByteView payload) {
  Result<M> m = M::Decode(payload);
  if (!m.ok()) return;
  Bytes again = m->Encode();
  if (again.size() != payload.size() || !std::equal(again.begin(), again.end(), payload.begin()))
    std::abort();
}

// A refusal may come before its sender proved the secret, so its reason is decoded escaped and cut
// (handshake.cc): not canonical. What decodes must be printable, fit a reason's bound when passed on,
// and encode to something that decodes; a plain reason short enough to need no cut round-trips.
void RefusedDecodesPrintable(ByteView payload) {
  Result<RefusedMsg> m = RefusedMsg::Decode(payload);
  if (!m.ok()) return;
  if (m->reason.size() > kMaxReasonSize || !IsPrintableAscii(m->reason)) std::abort();
  Bytes again = m->Encode();
  if (!RefusedMsg::Decode(again).ok()) std::abort();
  const bool plain = m->reason.find('\\') == std::string::npos && m->reason.find("...") == std::string::npos;
  if (plain && (again.size() != payload.size() || !std::equal(again.begin(), again.end(), payload.begin())))
    std::abort();
}

void AllPayloadDecoders(ByteView payload) {
  RoundTrip<HelloMsg>(payload);
  RoundTrip<ChallengeMsg>(payload);
  RoundTrip<ProofMsg>(payload);
  RoundTrip<WelcomeMsg>(payload);
  RefusedDecodesPrintable(payload);
  RoundTrip<ManifestMsg>(payload);
  RoundTrip<RegionKeysMsg>(payload);
  RoundTrip<PlacementMsg>(payload);
  RoundTrip<UpdateBeginMsg>(payload);
  RoundTrip<ChunksVerifiedMsg>(payload);
  RoundTrip<UpdateFailedMsg>(payload);
  RoundTrip<CommitMsg>(payload);
  RoundTrip<AbortMsg>(payload);
  RoundTrip<HeartbeatMsg>(payload);
  RoundTrip<ByeMsg>(payload);
  RoundTrip<CommittedMsg>(payload);
  RoundTrip<PlanJoinMsg>(payload);
  RoundTrip<PlanPeersMsg>(payload);
  RoundTrip<PlanReadyMsg>(payload);
  RoundTrip<LayoutOfferMsg>(payload);
  RoundTrip<PlanAssignMsg>(payload);
  RoundTrip<PeerLostMsg>(payload);
  RoundTrip<FedMsg>(payload);
  RoundTrip<RekeyMsg>(payload);
  RoundTrip<RollbackMsg>(payload);
}

}  // namespace
}  // namespace weightport

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace weightport;
  ByteView bytes(reinterpret_cast<const std::byte*>(data), size);
  if (size >= kFrameHeaderSize)
    DecodeFrameHeader(bytes.first(kFrameHeaderSize), 1 << 20).status().IgnoreError();
  Result<Frame> frame = DecodeFrame(bytes, kHandshakeKey, 0, 1 << 20);
  if (frame.ok()) {
    ValidatePayload(frame->type, frame->payload).IgnoreError();
    AllPayloadDecoders(frame->payload);
  }
  AllPayloadDecoders(bytes);
  return 0;
}
