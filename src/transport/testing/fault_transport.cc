#include "weightport/transport/testing/fault_transport.h"

#include <algorithm>
#include <deque>
#include <functional>
#include <map>
#include <utility>
#include <vector>

#include "weightport/transport/transport_util.h"

namespace weightport {

// ---- FaultPlan -------------------------------------------------------------------------------

void FaultPlan::set_drop(FaultTrigger trigger) {
  MutexLock lock(mu_);
  drop_ = Rule{trigger};
}
void FaultPlan::set_delay(FaultTrigger trigger, std::chrono::milliseconds delay) {
  MutexLock lock(mu_);
  delay_ = Rule{trigger};
  delay_by_ = delay;
}
void FaultPlan::set_corrupt(FaultTrigger trigger) {
  MutexLock lock(mu_);
  corrupt_ = Rule{trigger};
}
void FaultPlan::set_fail_after(uint64_t n) {
  MutexLock lock(mu_);
  fail_budget_ = n;
}
void FaultPlan::KillPeer(const std::string& peer) {
  MutexLock lock(mu_);
  killed_.insert(peer);
}
void FaultPlan::KillAllPeers() {
  MutexLock lock(mu_);
  kill_all_ = true;
}
void FaultPlan::Clear() {
  MutexLock lock(mu_);
  drop_ = delay_ = corrupt_ = Rule{};
  fail_budget_ = UINT64_MAX;
}
FaultStats FaultPlan::stats() const {
  MutexLock lock(mu_);
  return stats_;
}
bool FaultPlan::killed(const std::string& peer) const {
  MutexLock lock(mu_);
  return kill_all_ || killed_.count(peer) > 0;
}
void FaultPlan::CountKilled(uint64_t n) {
  MutexLock lock(mu_);
  stats_.killed += n;
}

bool FaultPlan::Fires(Rule& rule, uint32_t op) {
  if ((rule.trigger.ops & op) == 0) return false;
  bool fire = rule.trigger.nth != 0 && ++rule.seen == rule.trigger.nth;
  // Draw only for probabilistic rules, so adding an nth rule does not shift the random sequence.
  if (rule.trigger.probability > 0)
    fire |= std::uniform_real_distribution<double>(0, 1)(rng_) < rule.trigger.probability;
  return fire;
}

FaultPlan::Decision FaultPlan::Next(uint32_t op, uint64_t length) {
  MutexLock lock(mu_);
  ++stats_.ops;
  Decision d;
  if (fail_budget_ == 0) {
    d.fail = true;
    ++stats_.failed;
    return d;
  }
  if (fail_budget_ != UINT64_MAX) --fail_budget_;
  d.drop = Fires(drop_, op);
  const bool corrupt = Fires(corrupt_, op);
  if (Fires(delay_, op)) d.delay = delay_by_;
  d.corrupt = corrupt && !d.drop && length > 0;
  d.draw = rng_();
  stats_.dropped += d.drop;
  stats_.corrupted += d.corrupt;
  stats_.delayed += d.delay.count() > 0;
  return d;
}

// ---- the decorator ---------------------------------------------------------------------------

namespace {

using transport_util::InBounds;
using transport_util::PeerError;
using Clock = std::chrono::steady_clock;
using Millis = std::chrono::milliseconds;

class FaultConnection;

// Loop-thread state of one decorated transport, shared with its connections.
struct FaultCore {
  Transport* inner = nullptr;  // null once the decorator is destroyed
  std::shared_ptr<FaultPlan> plan;
  bool closed = false;
  // Work for a later Progress(), by due time; equal times run in insertion order.
  std::multimap<Clock::time_point, std::function<void()>> timers;
  std::vector<std::weak_ptr<FaultConnection>> conns;
};

// One user operation. It finishes exactly once: the first of its real completion, an injected
// outcome, or a cancellation wins; later ones are ignored.
struct OpState {
  uint64_t seq = 0;
  bool flush = false;
  bool finished = false;
  Completion done;
};

// A 1-byte source for corrupting a put, registered with the inner transport.
struct Scratch {
  std::byte byte{};
  std::unique_ptr<MemoryRegion> region;  // declared after `byte`: deregistered before it goes
};

class FaultConnection final : public Connection, public std::enable_shared_from_this<FaultConnection> {
 public:
  FaultConnection(std::shared_ptr<FaultCore> core, std::shared_ptr<Connection> inner)
      : core_(std::move(core)), inner_(std::move(inner)) {}
  ~FaultConnection() override { Shutdown("connection closed"); }

  const std::string& peer() const override { return inner_->peer(); }

  void Put(const MemoryRegion& src, uint64_t src_offset, const RemoteKey& dst, uint64_t dst_offset,
           uint64_t length, Completion done) override {
    auto op = Begin(done, false);
    if (op == nullptr) return;
    const FaultPlan::Decision d = core_->plan->Next(kFaultPut, length);
    if (Injected(op, d)) return;
    Completion finish = Finisher(op, d.delay);
    if (!d.corrupt || !InBounds(src_offset, length, src.size()))
      return inner_->Put(src, src_offset, dst, dst_offset, length, std::move(finish));
    const uint64_t k = d.draw % length;
    const std::byte bad = src.data()[src_offset + k] ^ Mask(d.draw);
    inner_->Put(src, src_offset, dst, dst_offset, length,
                [w = weak_from_this(), op, finish, dst, at = dst_offset + k, bad](const Status& s) {
                  auto c = w.lock();
                  if (!s.ok() || c == nullptr || op->finished) return finish(s);
                  c->OverwriteRemoteByte(op, dst, at, bad, finish);
                });
  }

  void Get(const MemoryRegion& dst, uint64_t dst_offset, const RemoteKey& src, uint64_t src_offset,
           uint64_t length, Completion done) override {
    auto op = Begin(done, false);
    if (op == nullptr) return;
    const FaultPlan::Decision d = core_->plan->Next(kFaultGet, length);
    if (Injected(op, d)) return;
    Completion finish = Finisher(op, d.delay);
    if (!d.corrupt || !InBounds(dst_offset, length, dst.size()))
      return inner_->Get(dst, dst_offset, src, src_offset, length, std::move(finish));
    inner_->Get(dst, dst_offset, src, src_offset, length,
                [op, finish, base = dst.data(), at = dst_offset + d.draw % length,
                 mask = Mask(d.draw)](const Status& s) {
                  if (s.ok() && !op->finished) base[at] ^= mask;
                  finish(s);
                });
  }

  void Flush(Completion done) override {
    auto op = Begin(done, true);
    if (op == nullptr) return;
    waiting_flushes_.push_back(op);
    IssueFlushes();
  }

  void Send(Bytes message, Completion done) override {
    auto op = Begin(done, false);
    if (op == nullptr) return;
    const FaultPlan::Decision d = core_->plan->Next(kFaultSend, message.size());
    if (Injected(op, d)) return;
    if (d.corrupt) message[d.draw % message.size()] ^= Mask(d.draw);
    inner_->Send(std::move(message), Finisher(op, d.delay));
  }

  void Close() override { Shutdown("connection closed"); }

  bool healthy() const override {
    return !closed_ && !lost_ && !core_->closed && !core_->plan->killed(peer()) && inner_->healthy();
  }

  // Cancels every pending operation and closes the inner connection. Idempotent.
  void Shutdown(const std::string& why) {
    if (closed_) return;
    closed_ = true;
    CancelAll(PeerError(StatusCode::kCancelled, peer(), why));
    inner_->Close();
  }

  // Turns the connection lost if the plan killed its peer.
  void CheckKilled() {
    if (lost_ || closed_ || !core_->plan->killed(peer())) return;
    lost_ = true;
    core_->plan->CountKilled(CancelAll(PeerError(StatusCode::kUnavailable, peer(), "peer lost (injected)")));
    inner_->Close();  // its completions now find their operations finished
  }

 private:
  static std::byte Mask(uint64_t draw) { return static_cast<std::byte>(1u << ((draw >> 32) % 8)); }

  // Starts tracking an operation, or fails it at once (nullptr) if the connection is unusable.
  std::shared_ptr<OpState> Begin(Completion& done, bool flush) {
    if (closed_ || core_->closed) {
      done(PeerError(StatusCode::kFailedPrecondition, peer(), "connection is closed"));
      return nullptr;
    }
    CheckKilled();
    if (lost_) {
      core_->plan->CountKilled(1);
      done(PeerError(StatusCode::kUnavailable, peer(), "peer lost (injected)"));
      return nullptr;
    }
    auto op = std::make_shared<OpState>();
    op->seq = next_seq_++;
    op->flush = flush;
    op->done = std::move(done);
    pending_.emplace(op->seq, op);
    return op;
  }

  // Handles the faults that replace the operation entirely; true if it was replaced.
  bool Injected(const std::shared_ptr<OpState>& op, const FaultPlan::Decision& d) {
    if (d.fail) {
      Later(Clock::now(), op, PeerError(StatusCode::kIoError, peer(), "injected failure"));
    } else if (d.drop) {
      Later(Clock::now() + d.delay, op, Status::Ok());
    }
    return d.fail || d.drop;
  }

  void Later(Clock::time_point when, const std::shared_ptr<OpState>& op, Status status) {
    core_->timers.emplace(when, [w = weak_from_this(), op, status = std::move(status)] {
      if (auto c = w.lock()) c->Finish(op, status);
    });
  }

  // The inner operation's completion: finishes `op`, no earlier than `delay` from now.
  Completion Finisher(std::shared_ptr<OpState> op, Millis delay) {
    return [w = weak_from_this(), op = std::move(op), due = Clock::now() + delay](const Status& s) {
      auto c = w.lock();
      if (c == nullptr || op->finished) return;
      if (Clock::now() < due) return c->Later(due, op, s);
      c->Finish(op, s);
    };
  }

  void Finish(const std::shared_ptr<OpState>& op, const Status& status) {
    if (op->finished) return;
    op->finished = true;
    pending_.erase(op->seq);
    Completion done = std::move(op->done);
    done(status);
    IssueFlushes();
  }

  // Corrupting put, second half: once the put is flushed, overwrite one byte of it at the peer.
  void OverwriteRemoteByte(std::shared_ptr<OpState> op, RemoteKey dst, uint64_t at, std::byte bad,
                           Completion finish) {
    inner_->Flush([w = weak_from_this(), op, dst, at, bad, finish, core = core_](const Status& s) {
      auto c = w.lock();
      if (!s.ok() || c == nullptr || op->finished || core->inner == nullptr) return finish(s);
      auto scratch = std::make_shared<Scratch>();
      scratch->byte = bad;
      auto region = core->inner->Register(&scratch->byte, 1);
      if (!region.ok())
        return finish(region.status().WithContext("peer '" + c->peer() + "': corrupting a put"));
      scratch->region = std::move(region).value();
      c->inner_->Put(*scratch->region, 0, dst, at, 1, [scratch, finish](const Status& s2) { finish(s2); });
    });
  }

  // Issues the oldest waiting flushes once every operation issued before each has finished.
  void IssueFlushes() {
    while (!waiting_flushes_.empty() && !closed_ && !lost_) {
      std::shared_ptr<OpState> f = waiting_flushes_.front();
      for (const auto& [seq, op] : pending_) {
        if (seq >= f->seq) break;
        if (!op->flush) return;
      }
      waiting_flushes_.pop_front();
      inner_->Flush(Finisher(f, Millis(0)));
    }
  }

  // Fails every pending operation with `status` from the next Progress(); returns how many.
  size_t CancelAll(const Status& status) {
    const size_t n = pending_.size();
    for (auto& [seq, op] : pending_) {
      op->finished = true;
      core_->timers.emplace(Clock::now(), [done = std::move(op->done), status] { done(status); });
    }
    pending_.clear();
    waiting_flushes_.clear();
    return n;
  }

  std::shared_ptr<FaultCore> core_;
  std::shared_ptr<Connection> inner_;
  bool closed_ = false;
  bool lost_ = false;
  uint64_t next_seq_ = 0;
  std::map<uint64_t, std::shared_ptr<OpState>> pending_;  // by issue order
  std::deque<std::shared_ptr<OpState>> waiting_flushes_;  // not yet issued to the inner connection
};

class FaultTransport final : public Transport {
 public:
  FaultTransport(std::unique_ptr<Transport> inner, std::shared_ptr<FaultPlan> plan)
      : inner_(std::move(inner)), core_(std::make_shared<FaultCore>()) {
    core_->inner = inner_.get();
    core_->plan = std::move(plan);
  }
  ~FaultTransport() override {
    Close();
    // Nobody calls Progress() again: report the cancellations now, exactly once each.
    while (!core_->timers.empty()) RunTimers(Clock::time_point::max());
    core_->inner = nullptr;
    inner_.reset();  // reports its own cancellations; their operations are finished already
  }

  const std::string& name() const override { return inner_->name(); }
  Bytes address() const override { return inner_->address(); }
  size_t max_message_bytes() const override { return inner_->max_message_bytes(); }
  Result<std::unique_ptr<MemoryRegion>> Register(void* data, size_t size) override {
    return inner_->Register(data, size);
  }
  bool TakesMemory(std::string_view memory_type) const override { return inner_->TakesMemory(memory_type); }
  Result<std::shared_ptr<Connection>> Connect(std::span<const std::byte> peer_address,
                                              const std::string& peer_name) override {
    if (core_->closed) return FailedPrecondition("transport '" + name() + "' is closed");
    WP_ASSIGN_OR_RETURN(std::shared_ptr<Connection> inner, inner_->Connect(peer_address, peer_name));
    auto conn = std::make_shared<FaultConnection>(core_, std::move(inner));
    core_->conns.push_back(conn);
    return std::shared_ptr<Connection>(std::move(conn));
  }
  void SetMessageHandler(MessageHandler handler) override { inner_->SetMessageHandler(std::move(handler)); }

  size_t Progress() override {
    std::erase_if(core_->conns, [](const std::weak_ptr<FaultConnection>& w) { return w.expired(); });
    for (const auto& w : std::vector(core_->conns))
      if (auto c = w.lock()) c->CheckKilled();
    size_t events = inner_->Progress();
    return events + RunTimers(Clock::now());
  }

  void WaitForEvent(std::chrono::milliseconds timeout) override {
    if (!core_->timers.empty()) {
      const auto now = Clock::now();
      const auto first = core_->timers.begin()->first;
      if (first <= now) return;
      timeout = std::min(timeout, std::chrono::ceil<Millis>(first - now));
    }
    inner_->WaitForEvent(timeout);
  }

  void Wake() override { inner_->Wake(); }

  void Close() override {
    if (core_->closed) return;
    core_->closed = true;
    for (const auto& w : std::vector(core_->conns))
      if (auto c = w.lock()) c->Shutdown("transport '" + name() + "' closed");
    inner_->Close();
  }

 private:
  size_t RunTimers(Clock::time_point until) {
    std::vector<std::function<void()>> due;
    auto& timers = core_->timers;
    for (auto it = timers.begin(); it != timers.end() && it->first <= until; it = timers.erase(it))
      due.push_back(std::move(it->second));
    for (auto& fn : due) fn();
    return due.size();
  }

  std::unique_ptr<Transport> inner_;
  std::shared_ptr<FaultCore> core_;
};

}  // namespace

Result<std::unique_ptr<Transport>> MakeFaultInjectingTransport(std::unique_ptr<Transport> inner,
                                                               std::shared_ptr<FaultPlan> plan) {
  if (inner == nullptr) return InvalidArgument("fault-injecting transport: no inner transport");
  if (plan == nullptr) return InvalidArgument("fault-injecting transport '" + inner->name() + "': no plan");
  return std::unique_ptr<Transport>(std::make_unique<FaultTransport>(std::move(inner), std::move(plan)));
}

}  // namespace weightport
