// The UCX transport's event side: Progress, WaitForEvent, Wake, UCX's callbacks, and in-order
// delivery of control messages.
#include <poll.h>

#include <algorithm>
#include <climits>
#include <cstring>
#include <thread>

#include "transport/ucx/ucx_internal.h"
#include "transport/ucx/ucx_status.h"

namespace weightport::ucx {
namespace {

constexpr int kMaxProgressRounds = 16;  // ucp_worker_progress calls per Progress(), while they find work
// While an operation waits on a peer whose liveness we watch, WaitForEvent wakes this often to look
// at it (a closed in-process peer raises no UCX event).
constexpr std::chrono::milliseconds kLivenessPoll{20};
// Adaptive polling. For UcxOptions::spin_window after UCX last made progress, WaitForEvent only
// yields: traffic tends to continue (a software-RMA Put arrives as a stream of messages that the
// owner copies in), and sleeping in poll() between them costs a wakeup each: such Puts ran at
// ~0.17 GB/s, ~4-6 GB/s with this. And while UCX holds requests of ours it may need polling to move
// them (a shared-memory send that found the peer's FIFO full waits in UCX's pending queue; no event
// says the peer drained it), so then WaitForEvent sleeps at most kBusyPoll.
constexpr std::chrono::milliseconds kBusyPoll{1};

}  // namespace

Op* UcxTransport::NewOp(UcxConnection* conn, Completion done, const char* what) {
  Op* op = new Op();
  op->transport = this;
  op->conn = conn;
  op->done = std::move(done);
  op->what = what;
  ops_.insert(op);
  return op;
}

void UcxTransport::DeleteOp(Op* op) {
  ops_.erase(op);
  delete op;
}

void UcxTransport::Track(Op* op, void* request) {
  op->request = request;
  ++in_flight_;
  last_activity_ = std::chrono::steady_clock::now();
}

void UcxTransport::Untrack(Op* op) {
  op->request = nullptr;
  --in_flight_;
}

ucp_request_param_t UcxTransport::SendParam(Op* op) const {
  ucp_request_param_t param{};
  param.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
  param.cb.send = &UcxTransport::OnSendDone;
  param.user_data = op;
  return param;
}

void UcxTransport::Ready(Completion done, Status status) {
  if (done) ready_.emplace_back(std::move(done), std::move(status));
}

// ---- UCX callbacks ---------------------------------------------------------------------------

void UcxTransport::OnSendDone(void* request, ucs_status_t status, void* user_data) {
  Op* op = static_cast<Op*>(user_data);
  UcxTransport* self = op->transport;
  self->Untrack(op);
  // Releasing inside the callback is allowed: UCX returns the request to its pool after we return.
  ucp_request_free(request);
  if (self->tearing_down_) return;                     // the destructor deletes the op
  if (op->conn == nullptr) return self->DeleteOp(op);  // abandoned: already reported
  op->conn->Finish(op, op->conn->OpStatus(*op, status));
}

void UcxTransport::OnCloseDone(void* request, ucs_status_t, void* user_data) {
  auto* self = static_cast<UcxTransport*>(user_data);
  ucp_request_free(request);
  --self->closing_endpoints_;
}

void UcxTransport::OnEndpointError(void* arg, ucp_ep_h ep, ucs_status_t status) {
  auto* self = static_cast<UcxTransport*>(arg);
  if (!self->tearing_down_) self->failed_endpoints_.emplace_back(ep, status);
}

ucs_status_t UcxTransport::OnMessage(void* arg, const void* header, size_t header_length, void* data,
                                     size_t length, const ucp_am_recv_param_t* param) {
  auto* self = static_cast<UcxTransport*>(arg);
  return self->HandleMessage(std::span(static_cast<const std::byte*>(header), header_length), data, length,
                             *param);
}

void UcxTransport::OnReceiveDone(void* request, ucs_status_t status, size_t, void* user_data) {
  Op* op = static_cast<Op*>(user_data);
  UcxTransport* self = op->transport;
  self->Untrack(op);
  ucp_request_free(request);
  if (self->tearing_down_) return;
  self->Settle(op->stream, op->seq, status == UCS_OK ? Parked::State::kReady : Parked::State::kDropped,
               std::move(op->buffer));
  self->DeleteOp(op);
}

// ---- messages --------------------------------------------------------------------------------

ucs_status_t UcxTransport::HandleMessage(std::span<const std::byte> header_bytes, void* data, size_t length,
                                         const ucp_am_recv_param_t& param) {
  const bool rendezvous = (param.recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV) != 0;
  std::optional<WireHeader> header = DecodeHeader(header_bytes);
  // Refusing a rendezvous message fails the sender's Send with our status; an eager one is dropped.
  if (!header) return rendezvous ? UCS_ERR_INVALID_PARAM : UCS_OK;
  if (closed_ || tearing_down_) return rendezvous ? UCS_ERR_REJECTED : UCS_OK;
  if (length > max_message_bytes_) {
    Park(header->stream, header->seq, Parked{Parked::State::kDropped, {}, {}});
    return rendezvous ? UCS_ERR_EXCEEDS_LIMIT : UCS_OK;
  }
  if (!rendezvous) {
    const auto* bytes = static_cast<const std::byte*>(data);
    Park(header->stream, header->seq,
         Parked{Parked::State::kReady, std::move(header->from), Bytes(bytes, bytes + length)});
    return UCS_OK;
  }
  // The data is still at the sender. Fetch it after ucp_worker_progress returns (StartReceives).
  Op* op = NewOp(nullptr, nullptr, "receive");
  op->stream = header->stream;
  op->seq = header->seq;
  op->buffer.resize(length);
  Park(header->stream, header->seq, Parked{Parked::State::kWaiting, std::move(header->from), {}});
  receives_to_start_.emplace_back(data, op);
  return UCS_INPROGRESS;
}

void UcxTransport::StartReceives() {
  std::vector<std::pair<void*, Op*>> batch;
  batch.swap(receives_to_start_);
  for (auto [descriptor, op] : batch) {
    ucp_request_param_t param{};
    param.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
    param.cb.recv_am = &UcxTransport::OnReceiveDone;
    param.user_data = op;
    const ucs_status_ptr_t started =
        ucp_am_recv_data_nbx(worker_, descriptor, op->buffer.data(), op->buffer.size(), &param);
    if (UCS_PTR_IS_PTR(started)) {
      Track(op, started);
      continue;
    }
    const bool ok = UCS_PTR_STATUS(started) == UCS_OK;
    Settle(op->stream, op->seq, ok ? Parked::State::kReady : Parked::State::kDropped, std::move(op->buffer));
    DeleteOp(op);
  }
}

void UcxTransport::Park(uint64_t stream_id, uint64_t seq, Parked parked) {
  Stream& stream = streams_[stream_id];
  if (seq < stream.next) return;  // a duplicate; cannot happen with a well-behaved sender
  stream.parked.insert_or_assign(seq, std::move(parked));
  Settle(stream_id, stream.next, Parked::State::kWaiting, {});  // delivers what is now in order
}

// Records how message `seq` of a stream ended (unless `state` is kWaiting), then moves every
// message that is now next in order to the inbox.
void UcxTransport::Settle(uint64_t stream_id, uint64_t seq, Parked::State state, Bytes data) {
  auto it = streams_.find(stream_id);
  if (it == streams_.end()) return;  // streams were dropped by Close()
  Stream& stream = it->second;
  if (state != Parked::State::kWaiting) {
    auto slot = stream.parked.find(seq);
    if (slot == stream.parked.end()) return;
    slot->second.state = state;
    slot->second.data = std::move(data);
  }
  while (!stream.parked.empty() && stream.parked.begin()->first == stream.next &&
         stream.parked.begin()->second.state != Parked::State::kWaiting) {
    Parked& next = stream.parked.begin()->second;
    if (next.state == Parked::State::kReady) inbox_.emplace_back(std::move(next.from), std::move(next.data));
    stream.parked.erase(stream.parked.begin());
    ++stream.next;
  }
}

size_t UcxTransport::Deliver() {
  if (!handler_ || closed_) return 0;
  size_t events = 0;
  MessageHandler handler = handler_;  // the handler may replace itself
  for (size_t n = inbox_.size(); n > 0 && !inbox_.empty() && !closed_; --n) {
    auto [from, message] = std::move(inbox_.front());
    inbox_.pop_front();
    handler(from, std::move(message));
    ++events;
  }
  return events;
}

// ---- progress --------------------------------------------------------------------------------

void UcxTransport::HandleLostPeers() {
  std::vector<std::pair<ucp_ep_h, ucs_status_t>> failed;
  failed.swap(failed_endpoints_);
  for (auto [ep, status] : failed) {
    auto it = by_endpoint_.find(ep);
    if (it != by_endpoint_.end()) it->second->MarkLost(ucs_status_string(status));
  }
  for (UcxConnection* conn : connections_) {
    if (conn->has_pending() && conn->PeerClosed()) conn->MarkLost("peer transport closed");
  }
}

size_t UcxTransport::RunReady() {
  size_t events = 0;
  for (size_t n = finished_.size(); n > 0 && !finished_.empty(); --n) {
    Op* op = finished_.front();
    finished_.pop_front();
    if (op->conn == nullptr) {  // abandoned: its cancellation is in ready_
      DeleteOp(op);
      continue;
    }
    op->conn->OpFinished(op);
    Completion done = std::move(op->done);
    const Status result = std::move(op->result);
    DeleteOp(op);
    done(result);
    ++events;
  }
  for (size_t n = ready_.size(); n > 0 && !ready_.empty(); --n) {
    auto [done, status] = std::move(ready_.front());
    ready_.pop_front();
    done(status);
    ++events;
  }
  return events;
}

size_t UcxTransport::Progress() {
  size_t events = 0;
  for (int round = 0; round < kMaxProgressRounds; ++round) {
    const unsigned n = ucp_worker_progress(worker_);
    if (n == 0) break;
    events += n;
  }
  if (events > 0) last_activity_ = std::chrono::steady_clock::now();
  StartReceives();
  HandleLostPeers();
  // After Close() only our own completions count: ProgressLoop drains until Progress() returns 0,
  // which traffic from peers must not prevent.
  if (closed_) events = 0;
  events += RunReady();
  events += Deliver();
  return events;
}

void UcxTransport::WaitForEvent(std::chrono::milliseconds timeout) {
  if (!ready_.empty() || !finished_.empty() || !receives_to_start_.empty() || !failed_endpoints_.empty() ||
      (handler_ && !closed_ && !inbox_.empty()))
    return;
  if (spin_window_.count() > 0 && std::chrono::steady_clock::now() - last_activity_ < spin_window_) {
    std::this_thread::yield();  // a peer on this host may need the CPU to make the progress we wait for
    return;
  }
  if (in_flight_ > 0) timeout = std::min<std::chrono::milliseconds>(timeout, kBusyPoll);
  for (UcxConnection* conn : connections_) {
    if (conn->has_pending() && conn->watches_liveness()) timeout = std::min(timeout, kLivenessPoll);
  }
  // Arming fails with BUSY while UCX holds unprocessed events (or a Wake() is pending): the caller
  // should call Progress() instead of sleeping.
  const ucs_status_t armed = ucp_worker_arm(worker_);
  if (armed == UCS_ERR_BUSY) return;
  pollfd fd{.fd = event_fd_, .events = POLLIN, .revents = 0};
  const int ms = static_cast<int>(std::clamp<int64_t>(timeout.count(), 0, INT_MAX));
  poll(&fd, 1, armed == UCS_OK ? ms : std::min(ms, 1));
}

void UcxTransport::Wake() {
  // Writes the worker's event fd: safe from any thread, and sticky until the next arm.
  ucp_worker_signal(worker_);
}

}  // namespace weightport::ucx
