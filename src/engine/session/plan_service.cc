// PlanService: the rendezvous, the joins and then every version the sources announce, on one
// background thread.
#include "weightport/engine/session/plan_service.h"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <thread>

#include "weightport/core/thread_annotations.h"
#include "weightport/engine/session/reshard_coordinator.h"

namespace weightport {

struct PlanService::Impl {
  PlanServiceOptions options;
  std::unique_ptr<ControlListener> listener;  // moved into the coordinator after the rendezvous
  std::string address;
  std::thread thread;
  std::atomic<bool> stopping{false};
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

  void Run() {
    RendezvousOptions ro = options.rendezvous;
    ro.log = options.log;
    ro.should_stop = [this] { return stopping.load(); };
    auto planned = CollectLayoutsAndPlan(*listener, ro);
    if (!planned.ok()) return Fail(planned.status());
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
    ReshardCoordinatorOptions co;
    co.plan_digest = planned->digest;
    co.ranks = PlanRanks(*planned->plan);
    co.peers_of = std::move(planned->peers);
    co.join_timeout = options.join_timeout;
    co.update_timeout = options.update_timeout;
    co.quorum = options.quorum;
    co.rotate_keys = options.rotate_keys;
    co.log = options.log;
    co.should_stop = [this] { return stopping.load(); };
    ReshardCoordinator coordinator(std::move(listener), co);
    if (Status s = coordinator.WaitForJoins(); !s.ok()) return Fail(s);
    {
      MutexLock lock(mu);
      stats.join_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - sent).count();
      stats.joined = true;
    }
    uint64_t last = 0;
    while (!stopping.load()) {
      auto next = coordinator.NextReadyVersion(last, std::chrono::milliseconds(100));
      if (!next.ok()) continue;  // Timeout: nothing announced yet
      auto report = coordinator.RunVersion(*next);
      if (!report.ok()) {
        Fail(report.status());
        break;
      }
      last = *next;
      MutexLock lock(mu);
      outcomes.push_back({report->version, report->committed, report->reason, report->bytes, report->seconds,
                          report->rekey_seconds, report->dropped});
      cv.notify_all();
    }
    coordinator.Finish();
    MutexLock lock(mu);
    ended = true;
    cv.notify_all();
  }
};

PlanService::PlanService(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

Result<std::unique_ptr<PlanService>> PlanService::Start(const Secret& secret, PlanServiceOptions options) {
  auto impl = std::make_unique<Impl>();
  WP_ASSIGN_OR_RETURN(impl->listener, ControlListener::Listen(options.listen_host, options.listen_port,
                                                              "plan-coordinator", secret));
  impl->address = impl->listener->address();
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

Result<PlanVersionOutcome> PlanService::WaitForOutcome(uint64_t version,
                                                       std::chrono::milliseconds timeout) const {
  Impl& m = *impl_;
  MutexLock lock(m.mu);
  auto find = [&]() REQUIRES(m.mu) -> const PlanVersionOutcome* {
    for (const auto& o : m.outcomes)
      if (o.version == version) return &o;
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
}

}  // namespace weightport
