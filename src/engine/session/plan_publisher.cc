// PlanPublisher: a source rank; a thread reads the coordinator's verdicts.
#include "weightport/engine/session/plan_publisher.h"

#include <condition_variable>
#include <map>
#include <optional>
#include <thread>

#include "engine/session/session_timing.h"
#include "weightport/core/thread_annotations.h"
#include "weightport/engine/session/plan_control.h"
#include "weightport/engine/session/plan_member.h"
#include "weightport/engine/session/plan_source.h"

namespace weightport {

struct PlanPublisher::Impl {
  PlanMemberOptions options;
  std::optional<Secret> secret;  // to join a coordinator that takes over
  std::unique_ptr<JoinedRank> joined;
  Endpoint me;
  std::thread verdicts_thread;
  std::atomic<bool> closing{false};
  Mutex mu;
  std::condition_variable cv;
  std::map<uint64_t, Status> verdicts GUARDED_BY(mu);
  uint64_t in_flight GUARDED_BY(mu) = 0;  // 0: none
  uint64_t last_published GUARDED_BY(mu) = 0;
  std::vector<std::pair<uint32_t, uint64_t>> replica_digests GUARDED_BY(mu);  // of last_published
  bool ended GUARDED_BY(mu) = false;                                          // Bye or a lost connection
  Status end_status GUARDED_BY(mu);

  // With rotate_keys the coordinator follows every decided version with a Rekey. The verdict is
  // released to the caller only once this rank has moved (SourceFollower): until then a dropped
  // peer's old key still reaches the arena, and the caller's next version must not be written there
  // before.
  std::map<uint64_t, Status> held GUARDED_BY(mu);  // verdicts waiting for their Rekey

  static Status VerdictOf(const PlanControl::Event& e) {
    if (e.kind == PlanControl::Event::kAbort)
      return Unavailable("version " + std::to_string(e.version) + " aborted: " + e.reason);
    return Status::Ok();
  }

  void ReadVerdicts() {
    SourceHooks hooks;
    // SourceFollower sends the new keys itself; memory stays where it is.
    hooks.rekey = [this](uint64_t) {
      return MoveToFreshTransport(*joined->rank, joined->loop, options.make_transport);
    };
    hooks.held = [this](const PlanControl::Event& verdict) {
      MutexLock lock(mu);
      held[verdict.version] = VerdictOf(verdict);
      return Status::Ok();
    };
    hooks.should_stop = [this] { return closing.load(); };
    // A leader frozen past its lease keeps the connection open: the store says its term is over.
    TermWatch term(options.find_coordinator);
    if (options.find_coordinator)
      hooks.replaced = [this, &term] { return term.Replaced(joined->coordinator); };
    SourceFollower follower(*joined->rank, *joined->member, options.rank.rotate_keys, hooks);
    while (true) {
      auto e = follower.Next(session_timing::kMessagePoll);
      if (!e.ok() && closing.load()) return;  // Close stopped it, or interrupted its wait
      if (!e.ok() && follower.connection_failed() && options.find_coordinator) {
        auto fresh = RejoinPlan(*joined->rank, *secret, options, joined->coordinator);
        if (fresh.ok()) {
          MutexLock lock(mu);
          joined->member = std::move(*fresh);
          follower.Rebind(*joined->member);
          // The new coordinator hears of the version this rank announced and has no verdict for.
          if (in_flight != 0) joined->member->Ready(in_flight, replica_digests).IgnoreError();
          continue;
        }
        e = fresh.status().WithContext("lost the coordinator: " + e.status().message());
      }
      MutexLock lock(mu);
      if (!e.ok() || e->kind == PlanControl::Event::kBye) {
        ended = true;
        if (e.ok())
          end_status = Status::Ok();
        else if (follower.connection_failed())
          end_status = e.status().WithContext(me.ToString() + ": the coordinator");
        else
          end_status = e.status();  // a move to a fresh transport or to a new peer table failed
        cv.notify_all();
        return;
      }
      if (e->kind == PlanControl::Event::kCommit || e->kind == PlanControl::Event::kAbort) {
        held.erase(e->version);
        verdicts[e->version] = VerdictOf(*e);
      }
      if (verdicts.count(in_flight)) in_flight = 0;
      cv.notify_all();
    }
  }
};

PlanPublisher::PlanPublisher(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

Result<std::unique_ptr<PlanPublisher>> PlanPublisher::Join(const Secret& secret, PlanMemberOptions options) {
  if (options.offer.endpoint.side != PlanSide::kSource)
    return InvalidArgument("PlanPublisher: " + options.offer.endpoint.ToString() + " is not a source rank");
  auto impl = std::make_unique<Impl>();
  impl->me = options.offer.endpoint;
  WP_ASSIGN_OR_RETURN(impl->joined, JoinPlan(secret, options));
  impl->options = std::move(options);
  impl->secret = secret;
  Impl* raw = impl.get();
  raw->verdicts_thread = std::thread([raw] { raw->ReadVerdicts(); });
  return std::unique_ptr<PlanPublisher>(new PlanPublisher(std::move(impl)));
}

PlanPublisher::~PlanPublisher() { Close(); }

const Plan& PlanPublisher::plan() const { return *impl_->joined->plan; }
size_t PlanPublisher::num_shards() const { return impl_->joined->rank->num_shards(); }
PlanShardView PlanPublisher::shard(size_t i) {
  return ShardView(plan(), impl_->me, i, impl_->joined->rank->shard_bytes(i));
}

Status PlanPublisher::WaitIdle(std::chrono::milliseconds timeout) {
  uint64_t v = 0;
  {
    MutexLock lock(impl_->mu);
    v = impl_->in_flight;
  }
  return v == 0 ? Status::Ok() : Wait(v, timeout);
}

Status PlanPublisher::Publish(uint64_t version) {
  Impl& m = *impl_;
  {
    MutexLock lock(m.mu);
    if (m.ended) return FailedPrecondition(m.me.ToString() + ": the session has ended");
    if (m.in_flight != 0)
      return FailedPrecondition(m.me.ToString() + ": version " + std::to_string(m.in_flight) +
                                " is still in flight (wait for it first)");
    if (version <= m.last_published)
      return InvalidArgument(m.me.ToString() + ": version " + std::to_string(version) +
                             " is not newer than " + std::to_string(m.last_published));
  }
  WP_RETURN_IF_ERROR(m.joined->rank->Publish(version));
  MutexLock lock(m.mu);
  m.in_flight = version;
  m.last_published = version;
  m.replica_digests = m.joined->rank->replica_digests();
  Status sent = m.joined->member->Ready(version, m.replica_digests);
  // With a coordinator that can fail, the announcement goes again to the one that takes over.
  return m.options.find_coordinator ? Status::Ok() : sent;
}

Status PlanPublisher::Wait(uint64_t version, std::chrono::milliseconds timeout) {
  Impl& m = *impl_;
  MutexLock lock(m.mu);
  if (!m.cv.wait_for(lock.native(), timeout,
                     [&]() REQUIRES(m.mu) { return m.verdicts.count(version) || m.ended; })) {
    if (m.held.count(version))
      return Timeout(m.me.ToString() + ": version " + std::to_string(version) +
                     " was decided, but the coordinator sent no Rekey after it within " +
                     std::to_string(timeout.count()) +
                     " ms (this rank rotates keys: does the coordinator, PlanServiceOptions::rotate_keys?)");
    return Timeout(m.me.ToString() + ": no verdict on version " + std::to_string(version) + " within " +
                   std::to_string(timeout.count()) + " ms");
  }
  if (auto it = m.verdicts.find(version); it != m.verdicts.end()) return it->second;
  if (m.held.count(version))
    return FailedPrecondition(m.me.ToString() + ": version " + std::to_string(version) +
                              " was decided, but the session ended with no Rekey after it (this rank "
                              "rotates keys: does the coordinator, PlanServiceOptions::rotate_keys?)");
  return m.end_status.ok()
             ? Cancelled(m.me.ToString() + ": the coordinator ended the session before version " +
                         std::to_string(version) + "'s verdict")
             : m.end_status;
}

Status PlanPublisher::Rollback(uint64_t version, std::chrono::milliseconds timeout) {
  Impl& m = *impl_;
  WP_RETURN_IF_ERROR(WaitIdle(timeout));
  {
    MutexLock lock(m.mu);
    if (m.ended) return FailedPrecondition(m.me.ToString() + ": the session has ended");
    if (version == 0 || version > m.last_published)
      return InvalidArgument(m.me.ToString() + ": cannot roll back to version " + std::to_string(version) +
                             ": the last published is " + std::to_string(m.last_published));
    // The verdict on the rollback replaces the version's own; in flight until it comes.
    m.verdicts.erase(version);
    m.held.erase(version);
    Status sent = m.joined->member->RequestRollback(version);
    if (!sent.ok()) return sent.WithContext(m.me.ToString() + ": asking for a rollback");
    m.in_flight = version;
  }
  return Wait(version, timeout);
}

void PlanPublisher::Close() {
  Impl& m = *impl_;
  m.closing = true;
  // Its wait for the coordinator ends now rather than at its next poll: closing many ranks one
  // after another takes no poll interval each.
  {
    MutexLock lock(m.mu);  // a reconnect swaps the member under it
    if (m.joined && m.joined->member) m.joined->member->Interrupt();
  }
  if (m.verdicts_thread.joinable()) m.verdicts_thread.join();
  if (m.joined) m.joined->Reset();
}

}  // namespace weightport
