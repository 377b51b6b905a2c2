// The coordinator's version state machine: manifests, UpdateBegin, verdicts, commit and abort.
// Every function here runs with Impl::mu held (see coordinator_impl.h).
#include <algorithm>
#include <cstdio>

#include <nlohmann/json.hpp>

#include "coordinator_impl.h"
#include "weightport/control/handshake.h"
#include "weightport/control/metrics.h"
#include "weightport/control/pubsub_messages.h"
#include "weightport/control/validate_payload.h"
#include "weightport/control/version_messages.h"

namespace weightport {

using Clock = std::chrono::steady_clock;

namespace {
std::string Version(uint64_t v) { return "version " + std::to_string(v); }
double SecondsOf(std::chrono::nanoseconds d) { return std::chrono::duration<double>(d).count(); }
}  // namespace

void WholeCoordinator::Impl::Handle(CoordinatorPeer& peer, const ControlMessage& message) {
  const bool is_publisher = peer.role == PeerRole::kPublisher;
  const bool is_subscriber = peer.role == PeerRole::kSubscriber;
  auto violation = [&](const std::string& why) REQUIRES(mu) {
    const std::string reason = std::string(MessageTypeName(message.type)) + " from a " +
                               std::string(PeerRoleName(peer.role)) + ": " + why;
    SendTo(peer, RefusedMsg{reason});
    RemovePeer(peer, "protocol violation: " + reason, /*lost=*/true);
  };
  switch (message.type) {
    case MessageType::kHeartbeat:
      return;
    case MessageType::kRegionKeys:
      if (!is_publisher) return violation("only the publisher has regions");
      if (Status s = ValidatePayload(message.type, message.payload); !s.ok()) return violation(s.message());
      region_keys = message.payload;
      ++keys_epoch;
      // Between versions, subscribers get them now (a member of a version in flight gets them with
      // the next one): they prepare their staging memory before the version that needs it.
      if (!update.has_value())
        for (auto& [id, p] : peers) SendKeysIfUnseen(*p);
      return;
    case MessageType::kManifest: {
      if (!is_publisher) return violation("only the publisher sends manifests");
      Result<ManifestMsg> m = ManifestMsg::Decode(message.payload);
      if (!m.ok()) return violation(m.status().message());
      return OnManifest(peer, *m);
    }
    case MessageType::kUpdateBegin: {
      if (!is_publisher) return violation("only the publisher begins updates");
      Result<UpdateBeginMsg> m = UpdateBeginMsg::Decode(message.payload);
      if (!m.ok()) return violation(m.status().message());
      return OnUpdateBegin(peer, *m);
    }
    case MessageType::kPlacement: {
      if (!is_subscriber) return violation("only subscribers say what they want");
      Result<PlacementMsg> m = PlacementMsg::Decode(message.payload);
      if (!m.ok()) return violation(m.status().message());
      return OnPlacement(peer, *m);
    }
    case MessageType::kStagingReady: {
      if (!is_subscriber) return violation("only subscribers have staging memory");
      Result<StagingReadyMsg> m = StagingReadyMsg::Decode(message.payload);
      if (!m.ok()) return violation(m.status().message());
      peer.staging = *m;
      char line[96];
      std::snprintf(line, sizeof line, " ready: %.2f GiB of staging memory prepared in %.3f s",
                    static_cast<double>(m->bytes) / (1ull << 30), static_cast<double>(m->prepare_ns) / 1e9);
      Log(peer.channel->peer() + line);
      cv.notify_all();
      return CheckPendingBegin();
    }
    case MessageType::kChunksVerified: {
      if (!is_subscriber) return violation("only subscribers verify chunks");
      Result<ChunksVerifiedMsg> m = ChunksVerifiedMsg::Decode(message.payload);
      if (!m.ok()) return violation(m.status().message());
      return OnVerified(peer, *m);
    }
    case MessageType::kUpdateFailed: {
      if (!is_subscriber) return violation("only subscribers fail updates");
      Result<UpdateFailedMsg> m = UpdateFailedMsg::Decode(message.payload);
      if (!m.ok()) return violation(m.status().message());
      Count("weightport_peer_errors_total", peer.name);
      if (update.has_value() && update->version == m->version)
        MemberFailed(peer.id, peer.name,
                     peer.channel->peer() + " failed " + Version(m->version) + ": " + m->reason);
      return;
    }
    case MessageType::kCommitted: {
      if (!is_subscriber) return violation("only subscribers swap");
      Result<CommittedMsg> m = CommittedMsg::Decode(message.payload);
      if (!m.ok()) return violation(m.status().message());
      if (WholeSubscriberVersionReport* r = ReportOf(m->version, peer.name)) {
        r->committed = true;
        r->pause = std::chrono::nanoseconds(m->pause_ns);
        if (options.metrics != nullptr)
          options.metrics->Set("weightport_peer_pause_seconds", {{"peer", peer.name}}, SecondsOf(r->pause));
        cv.notify_all();
      }
      return;
    }
    default:
      return violation("not a message a coordinator accepts");
  }
}

void WholeCoordinator::Impl::OnManifest(CoordinatorPeer& peer, const ManifestMsg& message) {
  Result<Manifest> parsed = Manifest::FromJsonText(message.json, "manifest");
  if (!parsed.ok()) {
    const std::string why =
        "manifest from " + peer.channel->peer() + " refused: " + parsed.status().message();
    Log(why);
    SendTo(peer, AbortMsg{0, why});
    return;
  }
  manifest = std::move(*parsed);
  manifest_json = message.json;
  std::vector<CoordinatorPeer*> subscribers;
  for (auto& [id, p] : peers)
    if (p->role == PeerRole::kSubscriber) subscribers.push_back(p.get());
  for (CoordinatorPeer* p : subscribers) RefuseIfUnknownTensors(*p);
}

void WholeCoordinator::Impl::OnPlacement(CoordinatorPeer& peer, const PlacementMsg& message) {
  nlohmann::json j = nlohmann::json::parse(message.json, nullptr, false);
  std::vector<std::string> wanted;
  bool ok = j.is_object() && (!j.contains("tensors") || j["tensors"].is_array());
  if (ok && j.contains("tensors")) {
    for (const auto& t : j["tensors"]) {
      if (!t.is_string()) {
        ok = false;
        break;
      }
      wanted.push_back(t.get<std::string>());
    }
  }
  if (!ok) {
    const std::string why = "placement must be {\"tensors\": [\"name\", ...]}";
    SendTo(peer, RefusedMsg{why});
    RemovePeer(peer, "bad placement: " + why, /*lost=*/true);
    return;
  }
  peer.wanted = std::move(wanted);
  RefuseIfUnknownTensors(peer);
}

bool WholeCoordinator::Impl::RefuseIfUnknownTensors(CoordinatorPeer& peer) {
  if (!manifest.has_value() || peer.gone) return false;
  for (const std::string& name : peer.wanted) {
    if (manifest->Find(name) != nullptr) continue;
    const std::string why = "tensor '" + name + "' does not exist in the publisher's manifest (" +
                            std::to_string(manifest->tensors().size()) + " tensors, " +
                            Version(manifest->version()) + ")";
    SendTo(peer, RefusedMsg{why});
    Count("weightport_peer_errors_total", peer.name);
    RemovePeer(peer, "refused: " + why, /*lost=*/false);
    return true;
  }
  return false;
}

void WholeCoordinator::Impl::OnUpdateBegin(CoordinatorPeer& peer, const UpdateBeginMsg& message) {
  const uint64_t v = message.version;
  auto refuse = [&](const std::string& why) REQUIRES(mu) {
    Log("refused " + Version(v) + " from " + peer.channel->peer() + ": " + why);
    SendTo(peer, AbortMsg{v, why});
  };
  if (update.has_value()) return refuse(Version(update->version) + " is still in flight");
  if (pending_begin.has_value())
    return refuse(Version(pending_begin->message.version) + " is waiting for subscribers");
  if (v <= last_committed)
    return refuse(Version(v) + " is not newer than the live " + Version(last_committed));
  if (!manifest.has_value() || manifest->version() != v)
    return refuse("no manifest for " + Version(v) + " was sent before UpdateBegin");
  if (region_keys.empty()) return refuse("no RegionKeys were sent before UpdateBegin");

  if (message.min_subscribers > ReadySubscriberCount()) {
    if (message.wait_ms == 0 && message.min_subscribers > SubscriberCount())
      return refuse(std::to_string(SubscriberCount()) + " of " + std::to_string(message.min_subscribers) +
                    " subscriber(s) connected");
    if (message.wait_ms == 0) return StartUpdate(message);  // connected, some still preparing: no wait asked
    Log(Version(v) + " waits for " + std::to_string(message.min_subscribers) + " subscriber(s) ready, " +
        std::to_string(ReadySubscriberCount()) + " ready of " + std::to_string(SubscriberCount()) +
        " connected");
    pending_begin = PendingBegin{.publisher = peer.id,
                                 .message = message,
                                 .deadline = Clock::now() + std::chrono::milliseconds(message.wait_ms)};
    return;
  }
  StartUpdate(message);
}

void WholeCoordinator::Impl::CheckPendingBegin() {
  if (!pending_begin.has_value()) return;
  CoordinatorPeer* peer = Find(pending_begin->publisher);
  if (peer == nullptr) {  // the publisher left: nothing to start or answer
    pending_begin.reset();
    return;
  }
  const UpdateBeginMsg message = pending_begin->message;
  if (ReadySubscriberCount() >= message.min_subscribers) {
    pending_begin.reset();
    return StartUpdate(message);
  }
  if (Clock::now() < pending_begin->deadline) return;
  pending_begin.reset();
  char waited[32];
  std::snprintf(waited, sizeof waited, "%.1f s", static_cast<double>(message.wait_ms) / 1000.0);
  const size_t connected = SubscriberCount();
  const std::string why =
      connected < message.min_subscribers
          ? "only " + std::to_string(connected) + " of " + std::to_string(message.min_subscribers) +
                " subscriber(s) connected within " + waited
          : "only " + std::to_string(ReadySubscriberCount()) + " of " +
                std::to_string(message.min_subscribers) + " subscriber(s) had their staging memory ready (" +
                std::to_string(connected) + " connected) within " + waited;
  Log("aborted " + Version(message.version) + " before it began: " + why);
  VersionReport& report = reports[message.version];
  report = VersionReport{.version = message.version, .model_bytes = manifest ? manifest->total_bytes() : 0};
  report.decided = true;
  report.outcome = Cancelled(why);
  SendTo(*peer, AbortMsg{message.version, why});
  if (options.metrics != nullptr) options.metrics->Add("weightport_versions_aborted_total", {});
  cv.notify_all();
}

void WholeCoordinator::Impl::StartUpdate(const UpdateBeginMsg& message) {
  const uint64_t v = message.version;
  update = CoordinatorUpdate{.version = v, .began = Clock::now()};
  VersionReport& report = reports[v];
  report = VersionReport{.version = v, .model_bytes = manifest->total_bytes()};
  std::vector<CoordinatorPeer*> members;
  for (auto& [id, p] : peers)
    if (p->role == PeerRole::kSubscriber && !p->gone) members.push_back(p.get());
  for (CoordinatorPeer* p : members) {
    update->members.push_back(p->id);
    report.subscribers.push_back({.name = p->name});
    if (p->staging && !p->staging_reported) {  // what preparing cost, in its first version
      report.subscribers.back().staging_bytes = p->staging->bytes;
      report.subscribers.back().staging_prepare = std::chrono::nanoseconds(p->staging->prepare_ns);
      p->staging_reported = true;
    }
  }
  Log("publishing " + Version(v) + " (" + std::to_string(manifest->total_bytes()) + " bytes) to " +
      std::to_string(members.size()) + " subscriber(s)");
  for (CoordinatorPeer* p : members) {
    SendKeysIfUnseen(*p);
    SendTo(*p, ManifestMsg{manifest_json});
    SendTo(*p, message);
    if (!update.has_value()) return;  // a send failed and removing the member aborted the update
  }
  if (update->members.empty()) CommitUpdate();  // nobody to wait for
}

void WholeCoordinator::Impl::OnVerified(CoordinatorPeer& peer, const ChunksVerifiedMsg& message) {
  if (!update.has_value() || update->version != message.version) return;  // late, after an abort
  if (std::find(update->members.begin(), update->members.end(), peer.id) == update->members.end()) return;
  update->verified.insert(peer.id);
  if (WholeSubscriberVersionReport* r = ReportOf(message.version, peer.name)) {
    r->verified = true;
    r->chunks = message.count;
    r->bytes = message.bytes;
    r->retries = message.retries;
    r->fetch = std::chrono::nanoseconds(message.elapsed_ns);
  }
  Count("weightport_peer_bytes_total", peer.name, static_cast<double>(message.bytes));
  Count("weightport_peer_retries_total", peer.name, static_cast<double>(message.retries));
  if (options.metrics != nullptr)
    options.metrics->Set("weightport_peer_fetch_seconds", {{"peer", peer.name}},
                         static_cast<double>(message.elapsed_ns) / 1e9);
  if (update->verified.size() == update->members.size()) CommitUpdate();
}

void WholeCoordinator::Impl::CommitUpdate() {
  const uint64_t v = update->version;
  VersionReport& report = reports[v];
  report.copy = Clock::now() - update->began;
  report.decided = true;
  report.outcome = Status::Ok();
  last_committed = v;
  std::vector<uint64_t> targets = update->members;
  if (publisher.has_value()) targets.push_back(*publisher);
  const uint64_t committed_to = update->members.size();
  update.reset();
  for (uint64_t id : targets)
    if (CoordinatorPeer* p = Find(id)) SendTo(*p, CommitMsg{v, committed_to});
  Log("committed " + Version(v) + " in " + std::to_string(SecondsOf(report.copy)) + " s");
  if (options.metrics != nullptr) {
    options.metrics->Add("weightport_versions_committed_total", {});
    options.metrics->Set("weightport_live_version", {}, static_cast<double>(v));
    options.metrics->Set("weightport_version_copy_seconds", {}, SecondsOf(report.copy));
  }
  cv.notify_all();
}

void WholeCoordinator::Impl::AbortUpdate(const std::string& why) {
  if (!update.has_value()) return;
  const uint64_t v = update->version;
  VersionReport& report = reports[v];
  report.decided = true;
  report.outcome = Cancelled(why);
  std::vector<uint64_t> targets = update->members;
  if (publisher.has_value()) targets.push_back(*publisher);
  update.reset();  // first: a failed send below removes its peer, which must not abort again
  for (uint64_t id : targets)
    if (CoordinatorPeer* p = Find(id)) SendTo(*p, AbortMsg{v, why});
  Log("aborted " + Version(v) + ": " + why);
  if (options.metrics != nullptr) options.metrics->Add("weightport_versions_aborted_total", {});
  cv.notify_all();
}

void WholeCoordinator::Impl::MemberFailed(uint64_t id, const std::string& name, const std::string& why) {
  if (!update.has_value()) return;
  if (std::find(update->members.begin(), update->members.end(), id) == update->members.end()) return;
  if (options.quorum == 0) return AbortUpdate(why);
  const uint64_t v = update->version;
  std::erase(update->members, id);
  update->verified.erase(id);
  if (WholeSubscriberVersionReport* r = ReportOf(v, name)) {
    r->verified = false;
    r->dropped = why;
  }
  if (update->members.size() < options.quorum) {
    return AbortUpdate(why + "; " + std::to_string(update->members.size()) +
                       " member(s) left, the quorum is " + std::to_string(options.quorum));
  }
  Log("dropped '" + name + "' from " + Version(v) + ": " + why);
  if (CoordinatorPeer* p = Find(id)) SendTo(*p, AbortMsg{v, why});  // it abandons its staging copy
  if (update.has_value() && update->verified.size() == update->members.size()) CommitUpdate();
}

WholeSubscriberVersionReport* WholeCoordinator::Impl::ReportOf(uint64_t version, const std::string& name) {
  auto it = reports.find(version);
  if (it == reports.end()) return nullptr;
  for (auto& s : it->second.subscribers)
    if (s.name == name) return &s;
  return nullptr;
}

}  // namespace weightport
