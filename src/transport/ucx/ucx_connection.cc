#include <algorithm>
#include <atomic>
#include <string>

#include "transport/ucx/ucx_internal.h"
#include "transport/ucx/ucx_status.h"
#include "weightport/transport/transport_util.h"

namespace weightport::ucx {
namespace {

using transport_util::InBounds;
using transport_util::RangeText;

}  // namespace

UcxConnection::UcxConnection(UcxTransport* transport, std::string peer, uint64_t peer_id, uint64_t stream_id,
                             ucp_ep_h ep)
    : transport_(transport), peer_(std::move(peer)), peer_id_(peer_id), stream_id_(stream_id), ep_(ep) {}

UcxConnection::~UcxConnection() {
  if (transport_ == nullptr) return;
  Close();
  transport_->Forget(this);
}

void UcxConnection::SetLiveness(ucp_rkey_h rkey, uint64_t* word) {
  liveness_rkey_ = rkey;
  liveness_ = word;
}

bool UcxConnection::PeerClosed() const {
  if (liveness_ == nullptr) return false;
  // The word lives in the peer's shared memory, written by the peer's process: atomic access.
  return std::atomic_ref<uint64_t>(*liveness_).load(std::memory_order_acquire) == kLivenessClosed;
}

bool UcxConnection::healthy() const {
  return transport_ != nullptr && !transport_->closed() && !closed_ && lost_.ok() && !PeerClosed();
}

Status UcxConnection::Usable() const {
  if (transport_ == nullptr || transport_->closed() || closed_)
    return FailedPrecondition(PeerPrefix(peer_) + "connection is closed");
  if (!lost_.ok()) return lost_;
  return Status::Ok();
}

void UcxConnection::Put(const MemoryRegion& src, uint64_t src_offset, const RemoteKey& dst,
                        uint64_t dst_offset, uint64_t length, Completion done) {
  Rma(true, src, src_offset, dst, dst_offset, length, std::move(done));
}

void UcxConnection::Get(const MemoryRegion& dst, uint64_t dst_offset, const RemoteKey& src,
                        uint64_t src_offset, uint64_t length, Completion done) {
  Rma(false, dst, dst_offset, src, src_offset, length, std::move(done));
}

void UcxConnection::Rma(bool put, const MemoryRegion& local, uint64_t local_offset, const RemoteKey& key,
                        uint64_t remote_offset, uint64_t length, Completion done) {
  const char* verb = put ? "put" : "get";
  const std::string prefix = PeerPrefix(peer_) + verb + ": ";
  if (Status s = Usable(); !s.ok()) return done(s);
  if (PeerClosed()) {
    MarkLost("peer transport closed");
    return done(lost_);
  }
  const auto* region = dynamic_cast<const UcxRegion*>(&local);
  if (region == nullptr || region->context() != transport_->context())
    return done(InvalidArgument(prefix + "local region was not registered with this transport"));
  if (!InBounds(local_offset, length, local.size()))
    return done(OutOfRange(prefix + "local " + RangeText(local_offset, length, local.size())));
  const std::optional<WireKey> wire = DecodeKey(key.packed);
  if (!wire) return done(InvalidArgument(prefix + "remote key is not a UCX transport key"));
  if (wire->owner_id != peer_id_)
    return done(InvalidArgument(prefix + "remote key belongs to another transport, not to this peer"));
  if (!InBounds(remote_offset, length, key.length))
    return done(OutOfRange(prefix + "remote " + RangeText(remote_offset, length, key.length)));
  if (length == 0) return Launch(transport_->NewOp(this, std::move(done), verb), nullptr);
  Result<ucp_rkey_h> rkey = Rkey(*wire, verb);
  if (!rkey.ok()) return done(rkey.status());
  if (!put) PopulateMapped(wire->region_id, *rkey, key, remote_offset, length);

  Op* op = transport_->NewOp(this, std::move(done), verb);
  ucp_request_param_t param = transport_->SendParam(op);
  param.op_attr_mask |= UCP_OP_ATTR_FIELD_MEMH;
  param.memh = region->memh();
  void* buffer = local.data() + local_offset;
  const uint64_t remote = key.address + remote_offset;
  Launch(op, put ? ucp_put_nbx(ep_, buffer, length, remote, *rkey, &param)
                 : ucp_get_nbx(ep_, buffer, length, remote, *rkey, &param));
}

Result<ucp_rkey_h> UcxConnection::Rkey(const WireKey& key, const char* verb) {
  auto it = rkeys_.find(key.region_id);
  if (it != rkeys_.end()) return it->second;
  if (key.ucp_rkey.empty()) return InvalidArgument(PeerPrefix(peer_) + verb + ": remote key has no UCX rkey");
  ucp_rkey_h rkey = nullptr;
  const ucs_status_t status = ucp_ep_rkey_unpack(ep_, key.ucp_rkey.data(), &rkey);
  if (status != UCS_OK) return UcxStatus(status, std::string(verb) + ": ucp_ep_rkey_unpack", peer_);
  rkeys_.emplace(key.region_id, rkey);
  return rkey;
}

// A Get from a region UCX mapped here is a memcpy in UCX: its pages are entered first (PagePopulator).
void UcxConnection::PopulateMapped(uint64_t region_id, ucp_rkey_h rkey, const RemoteKey& key, uint64_t offset,
                                   uint64_t length) {
  if (length < kPopulateMin) return;
  auto [it, fresh] = mappings_.try_emplace(region_id);
  if (fresh) {
    void* base = nullptr;
    if (ucp_rkey_ptr(rkey, key.address, &base) == UCS_OK && base != nullptr)
      it->second = std::make_unique<PagePopulator>(static_cast<const std::byte*>(base), key.length);
  }
  if (it->second != nullptr) it->second->Prepare(offset, length);
}

void UcxConnection::Flush(Completion done) {
  if (Status s = Usable(); !s.ok()) return done(s);
  Op* op = transport_->NewOp(this, std::move(done), "flush");
  const ucp_request_param_t param = transport_->SendParam(op);
  Launch(op, ucp_ep_flush_nbx(ep_, &param));
}

void UcxConnection::Send(Bytes message, Completion done) {
  if (Status s = Usable(); !s.ok()) return done(s);
  if (message.size() > transport_->max_message_bytes())
    return done(InvalidArgument(PeerPrefix(peer_) + "send: message of " + std::to_string(message.size()) +
                                " bytes exceeds the limit of " +
                                std::to_string(transport_->max_message_bytes())));
  if (PeerClosed()) {
    MarkLost("peer transport closed");
    return done(lost_);
  }
  Op* op = transport_->NewOp(this, std::move(done), "send");
  op->header = EncodeHeader(transport_->name(), stream_id_, next_seq_);
  op->payload = std::move(message);
  const ucp_request_param_t param = transport_->SendParam(op);
  const ucs_status_ptr_t started = ucp_am_send_nbx(ep_, kMessageId, op->header.data(), op->header.size(),
                                                   op->payload.data(), op->payload.size(), &param);
  // A send that fails at once never reaches the peer: its sequence number stays free, so the
  // peer's in-order delivery does not wait for it.
  if (!UCS_PTR_IS_ERR(started)) ++next_seq_;
  Launch(op, started);
}

void UcxConnection::Launch(Op* op, ucs_status_ptr_t started) {
  if (UCS_PTR_IS_ERR(started)) {
    Completion done = std::move(op->done);
    const Status status = OpStatus(*op, UCS_PTR_STATUS(started));
    transport_->DeleteOp(op);
    return done(status);
  }
  pending_.insert(op);
  if (started == nullptr) {
    // Done already; the contract wants a successful op reported from a later Progress().
    Finish(op, Status::Ok());
  } else {
    transport_->Track(op, started);
  }
}

void UcxConnection::Finish(Op* op, Status result) {
  op->finished = true;
  op->result = std::move(result);
  transport_->Finished(op);
}

Status UcxConnection::OpStatus(const Op& op, ucs_status_t status) const {
  if (status == UCS_OK) return Status::Ok();
  if (!lost_.ok()) return lost_;
  // We never cancel a request ourselves (Close abandons them), so UCX cancelled it because the
  // endpoint failed: the peer is lost.
  if (status == UCS_ERR_CANCELED)
    return Unavailable(PeerPrefix(peer_) + op.what + ": connection lost (UCX cancelled the request)");
  return UcxStatus(status, op.what, peer_);
}

void UcxConnection::Close() {
  if (closed_) return;
  closed_ = true;
  if (transport_ != nullptr) Shutdown(Cancelled(PeerPrefix(peer_) + "connection closed"));
}

void UcxConnection::MarkLost(const std::string& why) {
  if (closed_ || !lost_.ok() || transport_ == nullptr) return;
  lost_ = Unavailable(PeerPrefix(peer_) + "connection lost: " + why);
  Shutdown(lost_);
}

void UcxConnection::Shutdown(const Status& cancel) {
  for (Op* op : pending_) {
    transport_->Ready(std::move(op->done), cancel);
    op->conn = nullptr;  // UCX's callback, or the finished queue, will only free it
  }
  pending_.clear();
  ReleaseEndpoint();
}

void UcxConnection::ReleaseEndpoint() {
  if (ep_ == nullptr) return;
  // A forced close purges every request of the endpoint at once, so no request uses the rkeys
  // after it; ucp_rkey_destroy touches only the worker's pool, not the endpoint.
  transport_->CloseEndpoint(ep_);
  ep_ = nullptr;
  for (auto& [id, rkey] : rkeys_) ucp_rkey_destroy(rkey);
  rkeys_.clear();
  mappings_.clear();
  mapped_.clear();  // a reader still holding one keeps its mapping until it lets go
  liveness_ = nullptr;
  if (liveness_rkey_ != nullptr) ucp_rkey_destroy(liveness_rkey_);
  liveness_rkey_ = nullptr;
}

void UcxConnection::Detach() {
  Close();
  transport_ = nullptr;
}

}  // namespace weightport::ucx
