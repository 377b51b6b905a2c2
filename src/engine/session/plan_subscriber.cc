// PlanSubscriber: a destination rank following the coordinator on a thread of its own, with pins
// that keep a version's copy from being written while readers use it.
#include "weightport/engine/session/plan_subscriber.h"

#include <condition_variable>
#include <map>
#include <optional>
#include <thread>

#include "engine/session/session_timing.h"
#include "weightport/core/thread_annotations.h"
#include "weightport/engine/session/plan_control.h"
#include "weightport/engine/session/plan_destination.h"
#include "weightport/engine/session/plan_member.h"

namespace weightport {

struct PlanSubscriber::Impl {
  PlanMemberOptions options;
  std::optional<Secret> secret;  // to join a coordinator that takes over
  std::unique_ptr<JoinedRank> joined;
  Endpoint me;
  std::thread follower;
  std::atomic<bool> closing{false};
  mutable Mutex mu;
  std::condition_variable cv;
  uint64_t live GUARDED_BY(mu) = 0;
  std::vector<uint64_t> kept GUARDED_BY(mu);  // the rank's kept_versions(), read after each commit
  std::vector<std::span<const std::byte>> live_shards GUARDED_BY(mu);
  std::map<uint64_t, int> pins GUARDED_BY(mu);  // version -> pins
  bool ended GUARDED_BY(mu) = false;
  Status end_status GUARDED_BY(mu);

  ~Impl() {
    closing = true;
    if (follower.joinable()) follower.join();
  }

  // Before version v is written into the copy not live: readers of that copy must be gone.
  Status WaitForStagingPins(uint64_t v) {
    MutexLock lock(mu);
    auto stale = [&]() REQUIRES(mu) {
      for (const auto& [version, n] : pins)
        if (version != live && n > 0) return version;
      return uint64_t{0};
    };
    if (cv.wait_for(lock.native(), options.pin_timeout,
                    [&]() REQUIRES(mu) { return stale() == 0 || closing.load(); }))
      return Status::Ok();
    return FailedPrecondition(me.ToString() + ": readers still hold version " + std::to_string(stale()) +
                              " after " + std::to_string(options.pin_timeout.count()) + " ms, so version " +
                              std::to_string(v) + " has nowhere to land");
  }

  void Follow() {
    DestinationHooks hooks;
    hooks.before_receive = [this](uint64_t v) { return WaitForStagingPins(v); };
    hooks.committed = [this](uint64_t v) {
      std::vector<std::span<const std::byte>> shards;
      for (size_t i = 0; i < joined->rank->num_shards(); ++i) shards.push_back(joined->rank->shard_bytes(i));
      std::vector<uint64_t> kept_now = joined->rank->kept_versions();
      MutexLock lock(mu);
      kept = std::move(kept_now);
      live = v;
      live_shards = std::move(shards);
      cv.notify_all();
      return Status::Ok();
    };
    hooks.aborted = [this](uint64_t v, const std::string& why) {
      if (options.log) options.log(me.ToString() + ": version " + std::to_string(v) + " aborted: " + why);
    };
    // FollowAsDestination sends the new keys itself.
    hooks.rekey = [this](uint64_t) {
      return MoveToFreshTransport(*joined->rank, joined->loop, options.make_transport);
    };
    hooks.should_stop = [this] { return closing.load(); };
    TermWatch term(options.find_coordinator);
    if (options.find_coordinator)
      hooks.replaced = [this, &term] { return term.Replaced(joined->coordinator); };
    if (options.find_coordinator)
      hooks.reconnect = [this]() -> Result<PlanControl*> {
        WP_ASSIGN_OR_RETURN(auto fresh, RejoinPlan(*joined->rank, *secret, options, joined->coordinator));
        MutexLock lock(mu);  // Close interrupts the member under it
        joined->member = std::move(fresh);
        return joined->member.get();
      };
    Status s = FollowAsDestination(*joined->rank, *joined->member, session_timing::kMessagePoll, hooks);
    MutexLock lock(mu);
    ended = true;
    end_status = closing.load() ? Status::Ok() : s;  // Close interrupts the wait: no error of the rank's
    cv.notify_all();
  }
};

PlanSubscriber::Pin::Pin(Pin&& o) noexcept
    : owner_(std::move(o.owner_)), version_(o.version_), shards_(std::move(o.shards_)) {}
PlanSubscriber::Pin& PlanSubscriber::Pin::operator=(Pin&& o) noexcept {
  if (this != &o) {
    Release();
    owner_ = std::move(o.owner_);
    version_ = o.version_;
    shards_ = std::move(o.shards_);
  }
  return *this;
}
PlanSubscriber::Pin::~Pin() { Release(); }
void PlanSubscriber::Pin::Release() {
  if (!owner_) return;
  {
    MutexLock lock(owner_->mu);
    if (--owner_->pins[version_] == 0) owner_->pins.erase(version_);
  }
  owner_->cv.notify_all();
  owner_.reset();
  shards_.clear();
}

PlanSubscriber::PlanSubscriber(std::shared_ptr<Impl> impl) : impl_(std::move(impl)) {}

Result<std::unique_ptr<PlanSubscriber>> PlanSubscriber::Join(const Secret& secret,
                                                             PlanMemberOptions options) {
  if (options.offer.endpoint.side != PlanSide::kDestination)
    return InvalidArgument("PlanSubscriber: " + options.offer.endpoint.ToString() +
                           " is not a destination rank");
  auto impl = std::make_shared<Impl>();
  impl->me = options.offer.endpoint;
  WP_ASSIGN_OR_RETURN(impl->joined, JoinPlan(secret, options));
  impl->options = std::move(options);
  impl->secret = secret;
  Impl* raw = impl.get();
  raw->follower = std::thread([raw] { raw->Follow(); });
  return std::unique_ptr<PlanSubscriber>(new PlanSubscriber(std::move(impl)));
}

PlanSubscriber::~PlanSubscriber() { Close(); }

const Plan& PlanSubscriber::plan() const { return *impl_->joined->plan; }
size_t PlanSubscriber::num_shards() const { return impl_->joined->plan->Buffer(impl_->me)->shards.size(); }
PlanShardView PlanSubscriber::shard_info(size_t i) const { return ShardView(plan(), impl_->me, i, {}); }

uint64_t PlanSubscriber::live_version() const {
  MutexLock lock(impl_->mu);
  return impl_->live;
}

std::vector<uint64_t> PlanSubscriber::kept_versions() const {
  MutexLock lock(impl_->mu);
  return impl_->kept;
}

uint64_t PlanSubscriber::kept_bytes() const { return impl_->joined->rank->kept_bytes(); }

Status PlanSubscriber::WaitForVersion(uint64_t version, std::chrono::milliseconds timeout) {
  Impl& m = *impl_;
  MutexLock lock(m.mu);
  if (m.cv.wait_for(lock.native(), timeout, [&]() REQUIRES(m.mu) { return m.live >= version || m.ended; }) &&
      m.live >= version)
    return Status::Ok();
  if (m.ended)
    return m.end_status.ok()
               ? Cancelled(m.me.ToString() + ": the session ended at version " + std::to_string(m.live) +
                           ", before version " + std::to_string(version))
               : m.end_status;
  return Timeout(m.me.ToString() + ": version " + std::to_string(version) + " not live within " +
                 std::to_string(timeout.count()) + " ms (live: " + std::to_string(m.live) + ")");
}

Result<PlanSubscriber::Pin> PlanSubscriber::Acquire() {
  MutexLock lock(impl_->mu);
  if (impl_->live == 0) return FailedPrecondition(impl_->me.ToString() + ": no version committed yet");
  Pin pin;
  pin.owner_ = impl_;
  pin.version_ = impl_->live;
  pin.shards_ = impl_->live_shards;
  ++impl_->pins[pin.version_];
  return pin;
}

Status PlanSubscriber::session_status() const {
  MutexLock lock(impl_->mu);
  return impl_->end_status;
}

bool PlanSubscriber::ended() const {
  MutexLock lock(impl_->mu);
  return impl_->ended;
}

void PlanSubscriber::Close() {
  Impl& m = *impl_;
  m.closing = true;
  m.cv.notify_all();
  {
    MutexLock lock(m.mu);                                             // a reconnect swaps the member under it
    if (m.joined && m.joined->member) m.joined->member->Interrupt();  // its Next returns at once
  }
  if (m.follower.joinable()) m.follower.join();
  // The control connection goes now; the arena stays until the last pin is released (~Impl).
  if (m.joined) m.joined->member.reset();
}

}  // namespace weightport
