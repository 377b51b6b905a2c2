// WholeCoordinator lifecycle: the accepting thread, one reading thread per peer, heartbeats, deadlines
// and peer removal. The version state machine is in coordinator_updates.cc.
#include <algorithm>

#include "coordinator_impl.h"
#include "weightport/control/handshake.h"
#include "weightport/control/metrics.h"

namespace weightport {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

namespace {
// How long the threads block in Accept / Receive before looking at deadlines and the stop flag.
constexpr milliseconds kCoordinatorPoll(100);

std::string Seconds(Clock::duration d) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.1f s", std::chrono::duration<double>(d).count());
  return buf;
}
}  // namespace

Result<std::unique_ptr<WholeCoordinator>> WholeCoordinator::Start(std::string_view host, uint16_t port,
                                                                  const Secret& secret,
                                                                  WholeCoordinatorOptions options) {
  if (options.peer_timeout <= options.heartbeat_interval)
    return InvalidArgument("coordinator: peer timeout must exceed the heartbeat interval");
  auto impl = std::make_unique<Impl>();
  if (!options.control.log) options.control.log = options.log;
  impl->options = std::move(options);
  WP_ASSIGN_OR_RETURN(impl->listener,
                      ControlListener::Listen(host, port, impl->options.name, secret, impl->options.control));
  if (impl->options.metrics != nullptr) {
    Metrics& m = *impl->options.metrics;
    m.Describe("weightport_versions_committed_total", MetricType::kCounter, "Versions committed")
        .IgnoreError();
    m.Describe("weightport_versions_aborted_total", MetricType::kCounter, "Versions aborted").IgnoreError();
    m.Describe("weightport_peer_bytes_total", MetricType::kCounter, "Bytes each subscriber verified")
        .IgnoreError();
    m.Describe("weightport_peer_retries_total", MetricType::kCounter, "Chunks each subscriber fetched again")
        .IgnoreError();
    m.Describe("weightport_peer_errors_total", MetricType::kCounter, "Failures, losses and refusals per peer")
        .IgnoreError();
    m.Describe("weightport_peer_fetch_seconds", MetricType::kGauge,
               "Last version's fetch time per subscriber")
        .IgnoreError();
    m.Describe("weightport_peer_pause_seconds", MetricType::kGauge, "Last swap pause per subscriber")
        .IgnoreError();
    m.Describe("weightport_version_copy_seconds", MetricType::kGauge, "Last version's copy time")
        .IgnoreError();
    m.Describe("weightport_live_version", MetricType::kGauge, "Last committed version").IgnoreError();
    m.Describe("weightport_subscribers", MetricType::kGauge, "Connected subscribers").IgnoreError();
  }
  Impl* raw = impl.get();
  impl->acceptor = std::thread([raw] { raw->AcceptLoop(); });
  return std::unique_ptr<WholeCoordinator>(new WholeCoordinator(std::move(impl)));
}

WholeCoordinator::WholeCoordinator(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
WholeCoordinator::~WholeCoordinator() { Stop(); }

void WholeCoordinator::Stop() {
  if (impl_->stopping.exchange(true)) return;
  if (impl_->acceptor.joinable()) impl_->acceptor.join();
  std::vector<std::unique_ptr<CoordinatorPeer>> all;
  {
    MutexLock lock(impl_->mu);
    for (auto& [id, peer] : impl_->peers) {
      peer->gone = true;
      peer->outbox.emplace_back(MessageType::kBye, Bytes{});  // the writer sends it, then closes
      peer->outbox_cv.notify_all();
      all.push_back(std::move(peer));
    }
    impl_->peers.clear();
    for (auto& peer : impl_->retired) all.push_back(std::move(peer));
    impl_->retired.clear();
    impl_->cv.notify_all();
  }
  for (auto& peer : all) {
    if (peer->writer.joinable()) peer->writer.join();
    if (peer->reader.joinable()) peer->reader.join();
  }
}

const std::string& WholeCoordinator::address() const { return impl_->listener->address(); }
uint16_t WholeCoordinator::port() const { return impl_->listener->port(); }

Status WholeCoordinator::WaitForSubscribers(size_t n, milliseconds timeout) {
  MutexLock lock(impl_->mu);
  if (!impl_->cv.wait_for(lock.native(), timeout,
                          [&]() REQUIRES(impl_->mu) { return impl_->SubscriberCount() >= n; }))
    return Timeout("coordinator: " + std::to_string(impl_->SubscriberCount()) + " of " + std::to_string(n) +
                   " subscribers connected after " + Seconds(timeout));
  return Status::Ok();
}

std::vector<std::string> WholeCoordinator::Subscribers() const {
  MutexLock lock(impl_->mu);
  std::vector<std::string> names;
  for (const auto& [id, peer] : impl_->peers)
    if (peer->role == PeerRole::kSubscriber) names.push_back(peer->name);
  return names;
}

Result<VersionReport> WholeCoordinator::WaitForVersion(uint64_t version, milliseconds timeout) {
  MutexLock lock(impl_->mu);
  auto done = [&]() REQUIRES(impl_->mu) {
    auto it = impl_->reports.find(version);
    if (it == impl_->reports.end() || !it->second.decided) return false;
    if (!it->second.outcome.ok()) return true;
    return std::all_of(
        it->second.subscribers.begin(), it->second.subscribers.end(),
        [](const WholeSubscriberVersionReport& s) { return s.committed || !s.dropped.empty(); });
  };
  impl_->cv.wait_for(lock.native(), timeout, done);
  auto it = impl_->reports.find(version);
  if (it == impl_->reports.end())
    return NotFound("coordinator: version " + std::to_string(version) + " never began");
  return it->second;
}

// ---- Impl ------------------------------------------------------------------------------------------

size_t WholeCoordinator::Impl::SubscriberCount() const {
  return static_cast<size_t>(std::count_if(
      peers.begin(), peers.end(), [](const auto& p) { return p.second->role == PeerRole::kSubscriber; }));
}

size_t WholeCoordinator::Impl::ReadySubscriberCount() const {
  return static_cast<size_t>(std::count_if(peers.begin(), peers.end(), [](const auto& p) {
    return p.second->role == PeerRole::kSubscriber && p.second->staging.has_value();
  }));
}

void WholeCoordinator::Impl::SendKeysIfUnseen(CoordinatorPeer& peer) {
  if (peer.role != PeerRole::kSubscriber || peer.gone || region_keys.empty() ||
      peer.keys_epoch_sent == keys_epoch)
    return;
  SendTo(peer, MessageType::kRegionKeys, region_keys);
  peer.keys_epoch_sent = keys_epoch;
}

void WholeCoordinator::Impl::PublishSubscriberCount() const {
  if (options.metrics != nullptr)
    options.metrics->Set("weightport_subscribers", {}, static_cast<double>(SubscriberCount()));
}

void WholeCoordinator::Impl::Log(const std::string& line) const {
  if (options.log) options.log(line);
}

void WholeCoordinator::Impl::Count(std::string_view metric, const std::string& peer, double delta) const {
  if (options.metrics != nullptr) options.metrics->Add(metric, {{"peer", peer}}, delta);
}

void WholeCoordinator::Impl::AcceptLoop() {
  auto last_beat = Clock::now();
  while (!stopping.load()) {
    Result<std::unique_ptr<ControlChannel>> channel = listener->Accept(kCoordinatorPoll);
    std::vector<std::unique_ptr<CoordinatorPeer>> finished;
    MutexLock lock(mu);
    if (channel.ok()) {
      auto peer = std::make_unique<CoordinatorPeer>();
      peer->id = next_peer_id++;
      peer->role = (*channel)->peer_role();
      peer->name = (*channel)->peer_name();
      peer->channel = std::move(*channel);
      peer->last_seen = Clock::now();
      const std::string who = peer->channel->peer();
      bool refused = false;
      if (peer->role == PeerRole::kPublisher && publisher.has_value()) {
        const std::string why = "publisher '" + peers.at(*publisher)->name + "' is already connected";
        peer->channel->TurnAway(why);
        Log("refused " + who + ": " + why);
        refused = true;
      } else if (peer->role != PeerRole::kObserver) {
        auto same = std::find_if(peers.begin(), peers.end(), [&](const auto& p) {
          return p.second->name == peer->name && p.second->role == peer->role;
        });
        if (same != peers.end()) {
          const std::string why = "a peer named '" + peer->name + "' is already connected";
          peer->channel->TurnAway(why);
          Log("refused " + who + ": " + why);
          refused = true;
        }
      }
      if (refused) {
        peer->channel->Close();
        Count("weightport_peer_errors_total", peer->name);
      } else {
        if (peer->role == PeerRole::kPublisher) publisher = peer->id;
        Log(who + " joined");
        CoordinatorPeer* raw = peer.get();
        peers[peer->id] = std::move(peer);
        raw->reader = std::thread([this, raw] { ReadLoop(raw); });
        raw->writer = std::thread([this, raw] { WriteLoop(raw); });
        SendKeysIfUnseen(*raw);  // a subscriber prepares its staging memory now, not at version 1
        PublishSubscriberCount();
        cv.notify_all();
      }
    } else if (channel.status().code() != StatusCode::kTimeout) {
      Log("connection refused: " + channel.status().message());
    }
    if (Clock::now() - last_beat >= options.heartbeat_interval) {
      Heartbeat();
      last_beat = Clock::now();
    }
    CheckDeadlines();
    CheckPendingBegin();
    // Join the threads of removed peers outside the lock: they may be waiting for it.
    finished.swap(retired);
    lock.Unlock();
    for (auto& peer : finished) {
      if (peer->writer.joinable()) peer->writer.join();
      if (peer->reader.joinable()) peer->reader.join();
    }
  }
}

void WholeCoordinator::Impl::ReadLoop(CoordinatorPeer* peer) {
  while (!stopping.load()) {
    Result<ControlMessage> message = peer->channel->Receive(kCoordinatorPoll);
    if (!message.ok() && message.status().code() == StatusCode::kTimeout) {
      MutexLock lock(mu);
      if (peer->gone) return;
      continue;
    }
    MutexLock lock(mu);
    if (peer->gone || stopping.load()) return;
    if (!message.ok()) {
      RemovePeer(*peer, message.status().message(), /*lost=*/true);
      return;
    }
    peer->last_seen = Clock::now();
    if (message->type == MessageType::kBye) {
      RemovePeer(*peer, "said goodbye", /*lost=*/false);
      return;
    }
    Handle(*peer, *message);
    if (peer->gone) return;
  }
}

void WholeCoordinator::Impl::SendTo(CoordinatorPeer& peer, MessageType type, const Bytes& payload) {
  if (peer.gone) return;
  peer.outbox.emplace_back(type, payload);
  peer.outbox_cv.notify_all();
}

void WholeCoordinator::Impl::WriteLoop(CoordinatorPeer* peer) {
  MutexLock lock(mu);
  for (;;) {
    peer->outbox_cv.wait(lock.native(), [&] { return !peer->outbox.empty() || peer->gone; });
    if (peer->outbox.empty()) break;  // removed, and everything queued went out
    auto [type, payload] = std::move(peer->outbox.front());
    peer->outbox.pop_front();
    lock.Unlock();
    Status sent = peer->channel->Send(type, payload);
    lock.Lock();
    if (!sent.ok()) {
      if (!peer->gone && !stopping.load())
        RemovePeer(*peer, "sending " + std::string(MessageTypeName(type)) + ": " + sent.message(), true);
      break;
    }
  }
  peer->outbox.clear();
  peer->channel->Close();  // ends the reader's Receive too
}

CoordinatorPeer* WholeCoordinator::Impl::Find(uint64_t id) {
  auto it = peers.find(id);
  return it == peers.end() || it->second->gone ? nullptr : it->second.get();
}

void WholeCoordinator::Impl::RemovePeer(CoordinatorPeer& peer, const std::string& why, bool lost) {
  if (peer.gone) return;
  peer.gone = true;
  const std::string who = peer.channel->peer();
  Log(who + (lost ? " lost: " : " left: ") + why);
  if (lost) Count("weightport_peer_errors_total", peer.name);
  peer.outbox_cv.notify_all();  // its writer sends what is queued (e.g. the reason), then closes
  auto node = peers.extract(peer.id);
  if (publisher == peer.id) publisher.reset();
  if (update.has_value()) {
    const bool member =
        std::find(update->members.begin(), update->members.end(), peer.id) != update->members.end();
    if (peer.role == PeerRole::kPublisher) {
      AbortUpdate(who + (lost ? " lost during version " : " left during version ") +
                  std::to_string(update->version) + ": " + why);
    } else if (member && lost) {
      MemberFailed(peer.id, peer.name,
                   who + " lost during version " + std::to_string(update->version) + ": " + why);
    } else if (member) {
      // A subscriber that leaves on purpose (Bye, or refused) is no longer waited for.
      std::erase(update->members, peer.id);
      update->verified.erase(peer.id);
      std::erase_if(reports[update->version].subscribers,
                    [&](const WholeSubscriberVersionReport& r) { return r.name == peer.name; });
      if (update->verified.size() == update->members.size()) CommitUpdate();
    }
  }
  if (!node.empty()) retired.push_back(std::move(node.mapped()));
  PublishSubscriberCount();
  cv.notify_all();
}

void WholeCoordinator::Impl::Heartbeat() {
  std::vector<CoordinatorPeer*> all;
  for (auto& [id, peer] : peers) all.push_back(peer.get());
  for (CoordinatorPeer* peer : all) SendTo(*peer, HeartbeatMsg{});
}

void WholeCoordinator::Impl::CheckDeadlines() {
  const auto now = Clock::now();
  std::vector<CoordinatorPeer*> silent;
  for (auto& [id, peer] : peers)
    if (now - peer->last_seen > options.peer_timeout) silent.push_back(peer.get());
  for (CoordinatorPeer* peer : silent)
    RemovePeer(*peer, "no message for " + Seconds(now - peer->last_seen), /*lost=*/true);
  if (update.has_value() && now - update->began > options.update_timeout) {
    std::string missing;
    std::vector<std::pair<uint64_t, std::string>> late;
    for (uint64_t id : update->members) {
      if (update->verified.count(id) != 0) continue;
      CoordinatorPeer* p = Find(id);
      late.emplace_back(id, p != nullptr ? p->name : "");
      missing +=
          (missing.empty() ? "" : ", ") + (p != nullptr ? "'" + p->name + "'" : "#" + std::to_string(id));
    }
    const std::string why = "version " + std::to_string(update->version) + " not verified within " +
                            Seconds(options.update_timeout) + " by subscriber(s) " + missing;
    if (options.quorum == 0) {
      AbortUpdate(why);
    } else {
      for (const auto& [id, name] : late) MemberFailed(id, name, why);
    }
  }
}

}  // namespace weightport
