// The payloads of a version's update (version_messages.h).
#include "weightport/control/version_messages.h"

#include <string>

#include "codec_io.h"

namespace weightport {

using control_internal::Reader;
using control_internal::Writer;

namespace {

// A version followed by a reason string.
Bytes EncodeVersionReason(uint64_t version, std::string_view reason) {
  Writer w;
  w.U64(version);
  w.Str(reason);
  return w.Take();
}
template <typename T>
Result<T> DecodeVersionReason(ByteView payload, std::string_view msg) {
  Reader r(payload, msg);
  T m;
  WP_ASSIGN_OR_RETURN(m.version, r.U64("version"));
  WP_ASSIGN_OR_RETURN(m.reason, r.Str("reason", kMaxReasonSize));
  WP_RETURN_IF_ERROR(r.Done());
  return m;
}

}  // namespace

Bytes UpdateBeginMsg::Encode() const {
  Writer w;
  w.U64(version);
  w.U64(plan_id);
  w.U64(source_region);
  w.U64(min_subscribers);
  w.U64(wait_ms);
  return w.Take();
}
Result<UpdateBeginMsg> UpdateBeginMsg::Decode(ByteView payload) {
  Reader r(payload, "UpdateBegin");
  UpdateBeginMsg m;
  WP_ASSIGN_OR_RETURN(m.version, r.U64("version"));
  WP_ASSIGN_OR_RETURN(m.plan_id, r.U64("plan id"));
  WP_ASSIGN_OR_RETURN(m.source_region, r.U64("source region"));
  WP_ASSIGN_OR_RETURN(m.min_subscribers, r.U64("min subscribers"));
  WP_ASSIGN_OR_RETURN(m.wait_ms, r.U64("wait ms"));
  WP_RETURN_IF_ERROR(r.Done());
  return m;
}

Bytes ChunksVerifiedMsg::Encode() const {
  Writer w;
  w.U64(version);
  w.U64(count);
  w.U64(bytes);
  w.U64(elapsed_ns);
  w.U64(retries);
  return w.Take();
}
Result<ChunksVerifiedMsg> ChunksVerifiedMsg::Decode(ByteView payload) {
  Reader r(payload, "ChunksVerified");
  ChunksVerifiedMsg m;
  WP_ASSIGN_OR_RETURN(m.version, r.U64("version"));
  WP_ASSIGN_OR_RETURN(m.count, r.U64("count"));
  WP_ASSIGN_OR_RETURN(m.bytes, r.U64("bytes"));
  WP_ASSIGN_OR_RETURN(m.elapsed_ns, r.U64("elapsed"));
  WP_ASSIGN_OR_RETURN(m.retries, r.U64("retries"));
  WP_RETURN_IF_ERROR(r.Done());
  return m;
}

Bytes UpdateFailedMsg::Encode() const { return EncodeVersionReason(version, reason); }
Result<UpdateFailedMsg> UpdateFailedMsg::Decode(ByteView payload) {
  return DecodeVersionReason<UpdateFailedMsg>(payload, "UpdateFailed");
}

Bytes AbortMsg::Encode() const { return EncodeVersionReason(version, reason); }
Result<AbortMsg> AbortMsg::Decode(ByteView payload) {
  return DecodeVersionReason<AbortMsg>(payload, "Abort");
}

Bytes CommitMsg::Encode() const {
  Writer w;
  w.U64(version);
  w.U64(subscribers);
  return w.Take();
}
Result<CommitMsg> CommitMsg::Decode(ByteView payload) {
  Reader r(payload, "Commit");
  CommitMsg m;
  WP_ASSIGN_OR_RETURN(m.version, r.U64("version"));
  WP_ASSIGN_OR_RETURN(m.subscribers, r.U64("subscribers"));
  WP_RETURN_IF_ERROR(r.Done());
  return m;
}

Bytes CommittedMsg::Encode() const {
  Writer w;
  w.U64(version);
  w.U64(pause_ns);
  return w.Take();
}
Result<CommittedMsg> CommittedMsg::Decode(ByteView payload) {
  Reader r(payload, "Committed");
  CommittedMsg m;
  WP_ASSIGN_OR_RETURN(m.version, r.U64("version"));
  WP_ASSIGN_OR_RETURN(m.pause_ns, r.U64("pause"));
  WP_RETURN_IF_ERROR(r.Done());
  return m;
}

}  // namespace weightport
