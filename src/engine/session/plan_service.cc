// PlanService: the rendezvous, the joins and then every version the sources announce, on one
// background thread.
#include "weightport/engine/session/plan_service.h"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <mutex>
#include <optional>
#include <random>
#include <thread>

#include "engine/session/session_timing.h"
#include "weightport/core/thread_annotations.h"
#include "weightport/engine/rank/source_replicas.h"
#include "weightport/engine/session/plan_coordinator.h"
#include "weightport/engine/session/store_health.h"
#include "weightport/store/coordinator_election.h"
#include "weightport/store/fleet_record.h"
#include "weightport/store/session_keys.h"

namespace weightport {

struct PlanService::Impl {
  PlanServiceOptions options;
  std::unique_ptr<ControlListener> listener;  // moved into the coordinator after the rendezvous
  std::string address;
  std::thread thread;
  std::atomic<bool> stopping{false};
  std::atomic<bool> abandoned{false};
  // With a store: this term as leader is over (the lead was lost, or the record could not be
  // written): no Bye, and the service stands by again on a fresh listener.
  std::atomic<bool> term_over{false};
  std::optional<Secret> secret;
  uint64_t term = 0;
  // With a store: the client, this service's candidacy and the session's record.
  std::unique_ptr<EtcdClient> store;
  std::unique_ptr<StoreHealth> store_health;
  // Set and reset on the service's thread (and by Stop once it ended) under `mu`, which leading()
  // takes to read it.
  std::unique_ptr<CoordinatorElection> election;
  std::optional<FleetRecord> record;
  mutable Mutex mu;
  mutable std::condition_variable cv;
  std::shared_ptr<const Plan> plan GUARDED_BY(mu);
  PlanSessionStats stats GUARDED_BY(mu);
  std::vector<PlanVersionOutcome> outcomes GUARDED_BY(mu);
  Status error GUARDED_BY(mu);
  bool ended GUARDED_BY(mu) = false;

  void Log(const std::string& line) const {
    if (options.log) options.log(line);
  }
  void Fail(const Status& s) {
    Log("coordinator: " + s.message());
    MutexLock lock(mu);
    error = s;
    ended = true;
    cv.notify_all();
  }

  // With a store: waits to lead the session (a standby), then opens its record.
  Status Lead() {
    if (options.store.empty()) return Status::Ok();
    ElectionOptions eo;
    eo.on_lost = [this](const Status& why) {
      Log("coordinator: lost the lead of session '" + options.session + "': " + why.message());
      store_health->SetLeading(false);
      term_over = true;  // another may lead now: this one sends nothing more, not even Bye
    };
    const std::string session_label = "(session '" + options.session + "')";
    eo.on_store_call = [this, session_label](const Status& s) {
      if (s.ok()) {
        store_health->Answered();
      } else {
        store_health->Failed(session_label, s);
      }
    };
    // The address with a term of its own: the ranks tell a new term from the one they lost even
    // when it listens on the same port (plan_member.h, ListenAddressOf).
    std::random_device rd;
    const uint64_t nonce = (uint64_t{rd()} << 32) ^ rd();
    const std::string candidate =
        listener->address() + "#" + std::to_string(++term) + "." + std::to_string(nonce);
    // A store that does not answer is waited for: a standby outlives an etcd restart.
    auto unreachable = [](const Status& s) {
      return s.code() == StatusCode::kUnavailable || s.code() == StatusCode::kTimeout ||
             s.code() == StatusCode::kIoError;
    };
    const std::string check = SessionSecretCheck(*secret, options.session);
    while (true) {
      // Only a coordinator with the session's secret may campaign (SessionSecretCheck).
      Status s = VerifySessionSecret(*store, options.session, check, /*record_if_absent=*/true).status();
      if (s.ok()) {
        auto campaign =
            CoordinatorElection::Campaign(*store, options.session, candidate, options.lease_ttl, eo);
        if (campaign.ok()) {
          MutexLock lock(mu);
          election = std::move(*campaign);
          break;
        }
        s = campaign.status();  // already reported to store_health through on_store_call
      } else if (unreachable(s)) {
        store_health->Failed(session_label, s);
      }
      if (!unreachable(s)) return s;
      if (stopping.load()) return Cancelled("stopped while the store was unreachable");
      std::this_thread::sleep_for(session_timing::kElectionRetry);
    }
    if (!election->is_leader()) Log("coordinator: standing by for session '" + options.session + "'");
    while (!election->is_leader()) {
      if (stopping.load()) return Cancelled("stopped while standing by");
      Status won = election->WaitForLeadership(session_timing::kElectionRetry);
      if (!won.ok() && !unreachable(won)) return won;
      if (!won.ok() && won.code() != StatusCode::kTimeout)
        std::this_thread::sleep_for(session_timing::kElectionRetry);
    }
    Log("coordinator: leading session '" + options.session + "' at " + listener->address());
    store_health->SetLeading(true);
    WP_ASSIGN_OR_RETURN(FleetRecord r, FleetRecord::Open(*store, options.session));
    record.emplace(std::move(r));
    return Status::Ok();
  }

  // The ranks of this term, as the next membership epoch of the session's record.
  Status RecordMembers(const std::vector<Endpoint>& ranks) {
    std::vector<std::string> names;
    for (const Endpoint& ep : ranks) names.push_back(RankControlName(ep));
    WP_ASSIGN_OR_RETURN(std::optional<Membership> now, record->Members());
    const uint64_t epoch = now ? now->epoch + 1 : 1;
    return record->SetMembers(epoch, names).WithContext("recording the members");
  }

  // A leader whose lease ran out (frozen past its TTL, say) ends its term the moment it looks, before
  // its renewer hears of the lapse: another may lead by now, so this one must not act.
  bool Stopping() {
    if (stopping.load() || term_over.load()) return true;
    MutexLock lock(mu);
    if (election == nullptr || election->is_leader()) return false;
    term_over = true;
    return true;
  }

  // Terms as the session's coordinator until Stop; without a store, one.
  void Run() {
    while (true) {
      Status s = Term();
      if (stopping.load()) break;
      if (!term_over.load()) {
        if (!s.ok()) return Fail(s);
        break;
      }
      // The lead was lost or the record could not be written: stand by again on a fresh listener
      // (the ranks wait for whoever leads next, perhaps this service again).
      Log("coordinator: the term ended (" + s.message() + "); standing by again");
      store_health->SetLeading(false);
      {
        MutexLock lock(mu);
        election.reset();
      }
      record.reset();
      auto fresh =
          ControlListener::Listen(options.listen_host, options.listen_port, "plan-coordinator", *secret);
      if (!fresh.ok()) return Fail(fresh.status().WithContext("listening for the next term"));
      listener = std::move(*fresh);
      term_over = false;
    }
    MutexLock lock(mu);
    ended = true;
    cv.notify_all();
  }

  Status Term() {
    WP_RETURN_IF_ERROR(Lead());
    RendezvousOptions ro = options.rendezvous;
    ro.log = options.log;
    ro.should_stop = [this] { return Stopping(); };
    auto planned = CollectLayoutsAndPlan(*listener, ro);
    if (!planned.ok()) return planned.status();
    const auto sent = std::chrono::steady_clock::now();
    {
      MutexLock lock(mu);
      plan = planned->plan;
      stats.ranks = planned->peers.size();
      stats.plan_steps = planned->plan->steps.size();
      stats.plan_seconds = planned->plan_seconds;
      stats.send_seconds = planned->send_seconds;
      stats.max_part_bytes = planned->max_part_bytes;
      stats.total_part_bytes = planned->total_part_bytes;
      for (const auto& [ep, peers] : planned->peers)
        stats.max_peers = std::max(stats.max_peers, peers.size());
    }
    PlanCoordinatorOptions co;
    co.plan_digest = planned->digest;
    co.ranks = PlanRanks(*planned->plan);
    co.peers_of = std::move(planned->peers);
    co.join_timeout = options.join_timeout;
    co.update_timeout = options.update_timeout;
    co.quorum = options.quorum;
    co.rotate_keys = options.rotate_keys;
    co.rejoin = options.rejoin;
    if (options.rejoin) {
      // A rank that comes back asks for its part again: cut from the same plan.
      auto cutter = std::make_shared<RankPlanCutter>(planned->plan);
      co.rejoin_offer = [cutter, plan = planned->plan](const ControlMessage& offer, const std::string& peer) {
        return AssignForRejoin(*plan, *cutter, offer, peer);
      };
    }
    co.replicas = SourceReplicaGroups(*planned->plan);
    for (const RankBuffer& b : planned->plan->sources) co.source_shards[b.endpoint] = b.shards.size();
    co.log = options.log;
    co.should_stop = [this] { return Stopping(); };
    if (record) {
      co.decide = [this](uint64_t v, bool commit, const std::string& reason) -> Result<bool> {
        WP_ASSIGN_OR_RETURN(DecisionRecord d,
                            record->Decide(v, commit ? Outcome::kCommitted : Outcome::kAborted, reason));
        return d.outcome == Outcome::kCommitted;
      };
      co.recorded = [this](uint64_t v) -> Result<std::optional<bool>> {
        WP_ASSIGN_OR_RETURN(std::optional<DecisionRecord> d, record->Decision(v));
        if (!d) return std::optional<bool>();
        return std::optional<bool>(d->outcome == Outcome::kCommitted);
      };
    }
    PlanCoordinator coordinator(std::move(listener), co);
    WP_RETURN_IF_ERROR(coordinator.WaitForJoins());
    {
      MutexLock lock(mu);
      stats.join_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - sent).count();
      stats.joined = true;
    }
    if (record) WP_RETURN_IF_ERROR(RecordMembers(co.ranks));
    uint64_t last = 0;
    Status end;
    while (!Stopping()) {
      auto next = coordinator.NextRequest(last, session_timing::kEventPoll);
      if (!next.ok()) continue;  // Timeout: nothing announced yet
      auto report =
          next->rollback ? coordinator.RunRollback(next->version) : coordinator.RunVersion(next->version);
      if (!report.ok()) {
        // With a store the ranks wait for the coordinator that takes over: no Bye.
        if (record) term_over = true;
        end = report.status();
        break;
      }
      if (!next->rollback) last = next->version;
      // Every rank moved to fresh keys after the version: the record counts the epochs.
      if (record && options.rotate_keys) {
        if (auto epoch = record->BumpKeyEpoch(); !epoch.ok())
          Log("coordinator: recording the key epoch: " + epoch.status().message());
      }
      MutexLock lock(mu);
      outcomes.push_back({report->version, report->committed, report->reason, report->bytes, report->seconds,
                          report->rekey_seconds, report->dropped, report->rollback});
      for (const Endpoint& ep : report->rejoined) outcomes.back().rejoined.push_back(ep.ToString());
      if (options.metrics != nullptr)
        options.metrics->Add(kVersionsMetric, {{"outcome", report->committed ? "committed" : "aborted"}});
      cv.notify_all();
    }
    if (!abandoned.load() && !term_over.load()) coordinator.Finish();
    return end;
  }
};

PlanService::PlanService(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

Result<std::unique_ptr<PlanService>> PlanService::Start(const Secret& secret, PlanServiceOptions options) {
  auto impl = std::make_unique<Impl>();
  WP_ASSIGN_OR_RETURN(impl->listener, ControlListener::Listen(options.listen_host, options.listen_port,
                                                              "plan-coordinator", secret));
  impl->address = impl->listener->address();
  impl->secret = secret;
  if (!options.store.empty()) {
    WP_RETURN_IF_ERROR(session_keys::CheckSessionName(options.session));
    WP_ASSIGN_OR_RETURN(std::string endpoint, ParseEtcdEndpoint(options.store));
    WP_ASSIGN_OR_RETURN(impl->store, EtcdClient::Create(endpoint));
    impl->store_health = std::make_unique<StoreHealth>("etcd://" + endpoint, options.metrics, options.log);
  }
  if (options.metrics != nullptr) {
    options.metrics->Describe(kVersionsMetric, MetricType::kCounter, "Versions decided, by outcome")
        .IgnoreError();
  }
  impl->options = std::move(options);
  Impl* raw = impl.get();
  std::unique_ptr<PlanService> service(new PlanService(std::move(impl)));
  raw->thread = std::thread([raw] { raw->Run(); });
  return service;
}

PlanService::~PlanService() { Stop(); }

const std::string& PlanService::address() const { return impl_->address; }

std::shared_ptr<const Plan> PlanService::plan() const {
  MutexLock lock(impl_->mu);
  return impl_->plan;
}

PlanSessionStats PlanService::stats() const {
  MutexLock lock(impl_->mu);
  return impl_->stats;
}

std::vector<PlanVersionOutcome> PlanService::outcomes() const {
  MutexLock lock(impl_->mu);
  return impl_->outcomes;
}

Result<PlanVersionOutcome> PlanService::WaitForOutcome(uint64_t version, std::chrono::milliseconds timeout,
                                                       bool rollback, size_t from) const {
  Impl& m = *impl_;
  MutexLock lock(m.mu);
  auto find = [&]() REQUIRES(m.mu) -> const PlanVersionOutcome* {
    for (size_t i = from; i < m.outcomes.size(); ++i)
      if (m.outcomes[i].version == version && m.outcomes[i].rollback == rollback) return &m.outcomes[i];
    return nullptr;
  };
  m.cv.wait_for(lock.native(), timeout, [&]() REQUIRES(m.mu) { return find() != nullptr || m.ended; });
  if (const PlanVersionOutcome* o = find()) return *o;
  if (!m.error.ok()) return m.error;
  return m.ended ? Cancelled("the coordinator stopped before version " + std::to_string(version))
                 : Timeout("version " + std::to_string(version) + " not done within " +
                           std::to_string(timeout.count()) + " ms");
}

Status PlanService::error() const {
  MutexLock lock(impl_->mu);
  return impl_->error;
}

void PlanService::Stop() {
  impl_->stopping = true;
  if (impl_->thread.joinable()) impl_->thread.join();
  MutexLock lock(impl_->mu);
  if (impl_->election && !impl_->abandoned.load()) {
    impl_->election->Resign().IgnoreError();  // a standby takes over at once
    impl_->election.reset();
  }
}

void PlanService::Abandon() {
  impl_->abandoned = true;
  impl_->stopping = true;
  if (impl_->thread.joinable()) impl_->thread.join();
  MutexLock lock(impl_->mu);
  impl_->election.reset();  // stops renewing; the lease runs out as a killed process's would
}

bool PlanService::leading() const {
  MutexLock lock(impl_->mu);
  return impl_->election && impl_->election->is_leader();
}

std::string SessionSecretCheck(const Secret& secret, std::string_view session) {
  static constexpr std::string_view kText = "weightport session secret check";
  auto mac = HmacSha256(secret.bytes(), {std::as_bytes(std::span(kText)), std::as_bytes(std::span(session))});
  return mac.ok() ? ToHex(*mac) : std::string();  // HMAC cannot fail on valid input; "" never matches
}

Result<bool> VerifySessionSecret(EtcdClient& store, std::string_view session, std::string_view check,
                                 bool record_if_absent) {
  const std::string key = session_keys::SecretCheck(session);
  WP_ASSIGN_OR_RETURN(std::optional<EtcdKeyValue> kv, store.Get(key));
  if (!kv && record_if_absent) {
    WP_ASSIGN_OR_RETURN(bool written, store.PutIf(key, check, 0));  // the first writer's stands
    if (!written) {
      WP_ASSIGN_OR_RETURN(kv, store.Get(key));
    }
  }
  if (kv && (check.empty() || kv->value != check)) {
    return PermissionDenied("session '" + std::string(session) + "' in etcd " + store.endpoint() +
                            ": this process's secret is not the session's (its secret check at " + key +
                            " differs); check --secret-file");
  }
  return kv.has_value();
}

std::function<Result<std::string>(std::chrono::milliseconds)> CoordinatorFinder(std::string store,
                                                                                std::string session,
                                                                                const Secret& secret) {
  auto client = std::make_shared<std::unique_ptr<EtcdClient>>();
  auto mu = std::make_shared<std::mutex>();
  auto verified = std::make_shared<bool>(false);  // under mu: the record is write-once, so once is enough
  const std::string check = SessionSecretCheck(secret, session);
  return [store, session, client, mu, verified,
          check](std::chrono::milliseconds timeout) -> Result<std::string> {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    std::lock_guard<std::mutex> lock(*mu);
    // A name the store cannot hold is wrong at once, not after the whole timeout.
    WP_RETURN_IF_ERROR(session_keys::CheckSessionName(session));
    if (!*client) {
      WP_ASSIGN_OR_RETURN(std::string endpoint, ParseEtcdEndpoint(store));
      WP_ASSIGN_OR_RETURN(*client, EtcdClient::Create(endpoint));
    }
    Status last;
    do {
      // A rank with another secret is told so at once; a leader records the check before it leads.
      if (!*verified) {
        auto matched = VerifySessionSecret(**client, session, check, false);
        if (matched.status().code() == StatusCode::kPermissionDenied) return matched.status();
        *verified = matched.ok() && *matched;
      }
      auto leader = CoordinatorElection::Leader(**client, session);
      if (leader.ok()) return leader;
      last = leader.status();
      std::this_thread::sleep_for(session_timing::kStorePoll);
    } while (std::chrono::steady_clock::now() < deadline);
    return last.WithContext("finding the coordinator of session '" + session + "' in " + store);
  };
}

}  // namespace weightport
