#include <algorithm>
#include <cstring>
#include <deque>
#include <utility>

#include "transport/testing/fake_fabric.h"
#include "weightport/transport/testing/fake_transport.h"
#include "weightport/transport/transport_util.h"

namespace weightport {

using fake_internal::Clock;
using fake_internal::Endpoint;
using fake_internal::FakeRegion;
using fake_internal::kAddressMagic;
using fake_internal::Region;
using transport_util::GetLe64;
using transport_util::InBounds;
using transport_util::PeerError;
using transport_util::PutLe64;
using transport_util::RangeText;

namespace {

struct ConnState {
  std::string peer;
  std::shared_ptr<Endpoint> target;
  bool closed = false;
  bool lost = false;  // an operation found the target gone
};

struct Op {
  enum class Kind { kPut, kGet, kFlush, kSend };
  explicit Op(Kind kind) : kind(kind) {}
  Kind kind;
  std::shared_ptr<ConnState> conn;
  Clock::time_point ready_at;
  std::shared_ptr<Region> local, remote;
  uint64_t local_offset = 0, remote_offset = 0, length = 0;
  Bytes message;
  Completion done;
};

// Loop-thread state of one transport. Connections share it, so they may outlive the transport
// (their operations then fail at once with kFailedPrecondition).
struct Core {
  std::shared_ptr<FakeFabric> fabric;
  std::shared_ptr<Endpoint> self;
  FakeOptions options;
  bool closed = false;
  std::deque<Op> ops;                               // issued, in order
  std::deque<std::pair<Completion, Status>> ready;  // cancellations to report in Progress()
  MessageHandler handler;

  // Moves every queued op of `conn` (all ops if null) to `ready`, failed with kCancelled.
  void Cancel(const ConnState* conn, const std::string& why) {
    std::deque<Op> keep;
    for (Op& op : ops) {
      if (conn == nullptr || op.conn.get() == conn) {
        ready.emplace_back(std::move(op.done), PeerError(StatusCode::kCancelled, op.conn->peer, why));
      } else {
        keep.push_back(std::move(op));
      }
    }
    ops.swap(keep);
  }
};

// A peer's region handed out by Map: pinned, so that it stays registered while it is read.
class FakeMapping final : public MappedPeerRegion {
 public:
  explicit FakeMapping(std::shared_ptr<Region> region) : region_(std::move(region)) {}
  ~FakeMapping() override { region_->Unpin(); }
  const std::byte* data() const override { return region_->data; }
  uint64_t size() const override { return region_->size; }

 private:
  std::shared_ptr<Region> region_;
};

class FakeConnection final : public Connection {
 public:
  FakeConnection(std::shared_ptr<Core> core, std::shared_ptr<ConnState> state)
      : core_(std::move(core)), state_(std::move(state)) {}
  ~FakeConnection() override { Close(); }

  const std::string& peer() const override { return state_->peer; }

  void Put(const MemoryRegion& src, uint64_t src_offset, const RemoteKey& dst, uint64_t dst_offset,
           uint64_t length, Completion done) override {
    Start(Op::Kind::kPut, src, src_offset, dst, dst_offset, length, std::move(done));
  }
  void Get(const MemoryRegion& dst, uint64_t dst_offset, const RemoteKey& src, uint64_t src_offset,
           uint64_t length, Completion done) override {
    Start(Op::Kind::kGet, dst, dst_offset, src, src_offset, length, std::move(done));
  }
  std::shared_ptr<const MappedPeerRegion> Map(const RemoteKey& key) override {
    if (!core_->options.mappable || !Usable().ok()) return nullptr;
    Result<std::shared_ptr<Region>> region = Resolve(key);
    if (!region.ok() || !(*region)->Pin()) return nullptr;
    return std::make_shared<FakeMapping>(std::move(*region));
  }
  void Flush(Completion done) override {
    if (Status s = Usable(); !s.ok()) return done(s);
    Enqueue(Op(Op::Kind::kFlush), std::move(done));
  }
  void Send(Bytes message, Completion done) override {
    if (Status s = Usable(); !s.ok()) return done(s);
    if (message.size() > core_->options.max_message_bytes)
      return done(PeerError(StatusCode::kInvalidArgument, peer(),
                            "message of " + std::to_string(message.size()) + " bytes exceeds the limit of " +
                                std::to_string(core_->options.max_message_bytes)));
    Op op(Op::Kind::kSend);
    op.message = std::move(message);
    Enqueue(std::move(op), std::move(done));
  }
  void Close() override {
    if (state_->closed) return;
    state_->closed = true;
    core_->Cancel(state_.get(), "connection closed");
  }
  bool healthy() const override {
    return !state_->closed && !core_->closed && !state_->lost && !state_->target->is_closed();
  }

 private:
  Status Usable() {
    if (state_->closed || core_->closed)
      return PeerError(StatusCode::kFailedPrecondition, peer(), "connection is closed");
    if (!state_->lost && state_->target->is_closed()) state_->lost = true;
    if (state_->lost)
      return PeerError(StatusCode::kUnavailable, peer(), "peer is gone (closed or destroyed)");
    return Status::Ok();
  }

  void Enqueue(Op op, Completion done) {
    op.conn = state_;
    op.done = std::move(done);
    op.ready_at = Clock::now() + core_->options.latency;
    core_->ops.push_back(std::move(op));
  }

  // Validates a Put or Get against both regions; on success queues it.
  void Start(Op::Kind kind, const MemoryRegion& local, uint64_t local_offset, const RemoteKey& key,
             uint64_t remote_offset, uint64_t length, Completion done) {
    if (Status s = Usable(); !s.ok()) return done(s);
    const char* verb = kind == Op::Kind::kPut ? "put: " : "get: ";
    const auto* fake = dynamic_cast<const FakeRegion*>(&local);
    if (fake == nullptr || fake->region()->owner != core_->self->id)
      return done(PeerError(StatusCode::kInvalidArgument, peer(),
                            std::string(verb) + "local region was not registered with this transport"));
    if (!InBounds(local_offset, length, local.size()))
      return done(PeerError(StatusCode::kOutOfRange, peer(),
                            verb + ("local " + RangeText(local_offset, length, local.size()))));
    Result<std::shared_ptr<Region>> remote = Resolve(key);
    if (!remote.ok()) return done(remote.status().WithContext("peer '" + peer() + "': " + verb));
    if (!InBounds(remote_offset, length, (*remote)->size))
      return done(PeerError(StatusCode::kOutOfRange, peer(),
                            verb + ("remote " + RangeText(remote_offset, length, (*remote)->size))));
    Op op(kind);
    op.local = fake->region();
    op.remote = std::move(*remote);
    op.local_offset = local_offset;
    op.remote_offset = remote_offset;
    op.length = length;
    Enqueue(std::move(op), std::move(done));
  }

  Result<std::shared_ptr<Region>> Resolve(const RemoteKey& key) {
    const FakeFabric::State& fabric = *core_->fabric->state();
    if (key.packed.size() != 16 || GetLe64(key.packed, 0) != fabric.fabric_id)
      return InvalidArgument("remote key is not from this fake fabric");
    std::shared_ptr<Region> region;
    {
      MutexLock lock(fabric.mu);
      auto it = fabric.regions.find(GetLe64(key.packed, 8));
      if (it != fabric.regions.end()) region = it->second;
    }
    if (region == nullptr) return InvalidArgument("remote key names no registered region (deregistered?)");
    if (region->owner != state_->target->id)
      return InvalidArgument("remote key belongs to another transport");
    if (key.address != reinterpret_cast<uintptr_t>(region->data) || key.length != region->size)
      return InvalidArgument("remote key does not match the region it names");
    return region;
  }

  std::shared_ptr<Core> core_;
  std::shared_ptr<ConnState> state_;
};

class FakeTransport final : public Transport {
 public:
  explicit FakeTransport(std::shared_ptr<Core> core) : core_(std::move(core)) {}
  ~FakeTransport() override {
    Close();
    // Nobody will call Progress() again: report the cancellations now, exactly once.
    while (!core_->ready.empty()) RunReady();
    auto& fabric = *core_->fabric->state();
    MutexLock lock(fabric.mu);
    fabric.endpoints.erase(core_->self->id);
  }

  const std::string& name() const override { return core_->self->name; }
  Bytes address() const override {
    Bytes out;
    PutLe64(out, kAddressMagic);
    PutLe64(out, core_->fabric->state()->fabric_id);
    PutLe64(out, core_->self->id);
    return out;
  }
  size_t max_message_bytes() const override { return core_->options.max_message_bytes; }

  // The fake moves bytes with memcpy: host memory only.
  bool TakesMemory(std::string_view memory_type) const override { return memory_type == "host"; }
  Result<std::unique_ptr<MemoryRegion>> Register(void* data, size_t size) override {
    if (core_->closed) return FailedPrecondition("transport '" + name() + "' is closed");
    if (data == nullptr && size > 0)
      return InvalidArgument("transport '" + name() + "': register of null memory");
    auto& fabric = core_->fabric->state();
    RemoteKey key;
    key.address = reinterpret_cast<uintptr_t>(data);
    key.length = size;
    std::shared_ptr<Region> region;
    {
      MutexLock lock(fabric->mu);
      region =
          std::make_shared<Region>(fabric->next_id++, core_->self->id, static_cast<std::byte*>(data), size);
      fabric->regions.emplace(region->id, region);
    }
    PutLe64(key.packed, fabric->fabric_id);
    PutLe64(key.packed, region->id);
    return std::unique_ptr<MemoryRegion>(
        std::make_unique<FakeRegion>(fabric, std::move(region), std::move(key)));
  }

  Result<std::shared_ptr<Connection>> Connect(std::span<const std::byte> peer_address,
                                              const std::string& peer_name) override {
    if (core_->closed) return FailedPrecondition("transport '" + name() + "' is closed");
    const auto& fabric = *core_->fabric->state();
    if (peer_address.size() != 24 || GetLe64(peer_address, 0) != kAddressMagic)
      return PeerError(StatusCode::kInvalidArgument, peer_name, "not a fake transport address");
    if (GetLe64(peer_address, 8) != fabric.fabric_id)
      return PeerError(StatusCode::kInvalidArgument, peer_name, "address is from another fake fabric");
    std::shared_ptr<Endpoint> target;
    {
      MutexLock lock(fabric.mu);
      auto it = fabric.endpoints.find(GetLe64(peer_address, 16));
      if (it != fabric.endpoints.end()) target = it->second;
    }
    if (target == nullptr || target->is_closed())
      return PeerError(StatusCode::kUnavailable, peer_name, "no live transport at that address");
    auto state = std::make_shared<ConnState>();
    state->peer = peer_name;
    state->target = std::move(target);
    return std::shared_ptr<Connection>(std::make_shared<FakeConnection>(core_, std::move(state)));
  }

  void SetMessageHandler(MessageHandler handler) override {
    core_->handler = std::move(handler);
    core_->self->Wake();  // messages may be waiting for a handler
  }

  size_t Progress() override {
    size_t events = RunReady();
    const auto now = Clock::now();
    // Only ops queued before this call: completions may queue more, which wait for the next call.
    for (size_t n = core_->ops.size(); n > 0 && !core_->ops.empty(); --n) {
      if (core_->ops.front().ready_at > now) break;
      Op op = std::move(core_->ops.front());
      core_->ops.pop_front();
      const Status status = Execute(op);
      op.done(status);
      ++events;
    }
    if (core_->handler && !core_->closed) {
      std::deque<std::pair<std::string, Bytes>> batch;
      {
        MutexLock lock(core_->self->mu);
        batch.swap(core_->self->inbox);
      }
      MessageHandler handler = core_->handler;  // the handler may replace itself
      for (auto& [from, message] : batch) {
        handler(from, std::move(message));
        ++events;
      }
    }
    return events;
  }

  void WaitForEvent(std::chrono::milliseconds timeout) override {
    if (!core_->ready.empty()) return;
    auto deadline = Clock::now() + timeout;
    if (!core_->ops.empty()) deadline = std::min(deadline, core_->ops.front().ready_at);
    const bool handling = core_->handler != nullptr;
    Endpoint& self = *core_->self;
    MutexLock lock(self.mu);
    self.cv.wait_until(lock.native(), deadline,
                       [&]() REQUIRES(self.mu) { return self.woken || (handling && !self.inbox.empty()); });
    self.woken = false;
  }

  void Wake() override { core_->self->Wake(); }

  void Close() override {
    if (core_->closed) return;
    core_->closed = true;
    {
      MutexLock lock(core_->self->mu);
      core_->self->closed = true;
      core_->self->inbox.clear();
    }
    core_->Cancel(nullptr, "transport '" + name() + "' closed");
  }

 private:
  size_t RunReady() {
    size_t events = 0;
    for (size_t n = core_->ready.size(); n > 0 && !core_->ready.empty(); --n) {
      auto [done, status] = std::move(core_->ready.front());
      core_->ready.pop_front();
      done(status);
      ++events;
    }
    return events;
  }

  Status Execute(Op& op) {
    ConnState& conn = *op.conn;
    if (conn.target->is_closed()) {
      conn.lost = true;
      return PeerError(StatusCode::kUnavailable, conn.peer, "peer is gone (closed or destroyed)");
    }
    switch (op.kind) {
      case Op::Kind::kFlush:
        return Status::Ok();
      case Op::Kind::kSend:
        if (conn.target->Deliver(name(), std::move(op.message))) return Status::Ok();
        conn.lost = true;
        return PeerError(StatusCode::kUnavailable, conn.peer, "peer is gone (closed or destroyed)");
      case Op::Kind::kPut:
      case Op::Kind::kGet:
        break;
    }
    if (!op.local->Pin())
      return PeerError(StatusCode::kFailedPrecondition, conn.peer, "local region deregistered");
    const bool same = op.local == op.remote;
    if (!same && !op.remote->Pin()) {
      op.local->Unpin();
      return PeerError(StatusCode::kInvalidArgument, conn.peer, "remote region deregistered");
    }
    std::byte* local = op.local->data + op.local_offset;
    std::byte* remote = op.remote->data + op.remote_offset;
    // memmove: a loopback connection may copy within one region.
    if (op.length > 0) {
      if (op.kind == Op::Kind::kPut) {
        std::memmove(remote, local, op.length);
      } else {
        std::memmove(local, remote, op.length);
      }
    }
    if (!same) op.remote->Unpin();
    op.local->Unpin();
    return Status::Ok();
  }

  std::shared_ptr<Core> core_;
};

}  // namespace

Result<std::unique_ptr<Transport>> MakeFakeTransport(std::shared_ptr<FakeFabric> fabric, std::string name,
                                                     FakeOptions options) {
  if (fabric == nullptr) return InvalidArgument("fake transport '" + name + "': no fabric");
  if (name.empty()) return InvalidArgument("fake transport: empty name");
  if (options.max_message_bytes == 0)
    return InvalidArgument("fake transport '" + name + "': max_message_bytes 0");
  if (options.latency.count() < 0) return InvalidArgument("fake transport '" + name + "': negative latency");
  auto core = std::make_shared<Core>();
  core->options = options;
  {
    auto& state = *fabric->state();
    MutexLock lock(state.mu);
    core->self = std::make_shared<Endpoint>(state.next_id++, std::move(name));
    state.endpoints.emplace(core->self->id, core->self);
  }
  core->fabric = std::move(fabric);
  return std::unique_ptr<Transport>(std::make_unique<FakeTransport>(std::move(core)));
}

}  // namespace weightport
