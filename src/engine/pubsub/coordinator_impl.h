// Internals of the WholeCoordinator shared by coordinator.cc (threads, peers) and coordinator_updates.cc
// (the version state machine).
#pragma once

#include <atomic>
#include <condition_variable>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "weightport/control/pubsub_messages.h"
#include "weightport/control/version_messages.h"
#include "weightport/core/manifest.h"
#include "weightport/core/thread_annotations.h"
#include "weightport/engine/pubsub/coordinator.h"

namespace weightport {

struct CoordinatorPeer {
  uint64_t id = 0;
  PeerRole role = PeerRole::kObserver;
  std::string name;
  std::unique_ptr<ControlChannel> channel;
  std::chrono::steady_clock::time_point last_seen;
  std::vector<std::string> wanted;  // tensors a subscriber asked for; empty: all
  uint64_t keys_epoch_sent = 0;     // RegionKeys epoch this subscriber has seen
  // A subscriber's StagingReady, once it said so: its staging memory is ready; what it cost goes
  // into the report of the first version it is a member of (staging_reported then).
  std::optional<StagingReadyMsg> staging;
  bool staging_reported = false;
  bool gone = false;  // removed; its threads are ending
  // Messages waiting for the writer thread, so that no send ever blocks while `mu` is held (a peer
  // that stops reading would otherwise stall the whole coordinator).
  std::deque<std::pair<MessageType, Bytes>> outbox;
  std::condition_variable outbox_cv;
  std::thread reader, writer;
};

struct CoordinatorUpdate {
  uint64_t version = 0;
  std::vector<uint64_t> members;  // peer ids, in join order
  std::set<uint64_t> verified;
  std::chrono::steady_clock::time_point began;
};

// A publisher's UpdateBegin held until enough subscribers are connected and have their staging
// memory ready (UpdateBeginMsg's min_subscribers), or its deadline passes.
struct PendingBegin {
  uint64_t publisher = 0;  // peer id
  UpdateBeginMsg message;
  std::chrono::steady_clock::time_point deadline;
};

struct WholeCoordinator::Impl {
  WholeCoordinatorOptions options;
  std::unique_ptr<ControlListener> listener;
  std::thread acceptor;
  std::atomic<bool> stopping{false};

  mutable Mutex mu;
  std::condition_variable cv;  // subscribers joined, versions decided or reported
  uint64_t next_peer_id GUARDED_BY(mu) = 1;
  std::map<uint64_t, std::unique_ptr<CoordinatorPeer>> peers GUARDED_BY(mu);
  // Removed peers whose threads await joining.
  std::vector<std::unique_ptr<CoordinatorPeer>> retired GUARDED_BY(mu);
  std::optional<uint64_t> publisher GUARDED_BY(mu);  // peer id
  Bytes region_keys GUARDED_BY(mu);                  // the publisher's last RegionKeys payload
  uint64_t keys_epoch GUARDED_BY(mu) = 0;            // bumped on each RegionKeys
  std::optional<Manifest> manifest GUARDED_BY(mu);   // the publisher's last Manifest
  std::string manifest_json GUARDED_BY(mu);
  uint64_t last_committed GUARDED_BY(mu) = 0;
  std::optional<CoordinatorUpdate> update GUARDED_BY(mu);  // the version in flight
  std::optional<PendingBegin> pending_begin GUARDED_BY(mu);
  std::map<uint64_t, VersionReport> reports GUARDED_BY(mu);

  // --- coordinator.cc
  void AcceptLoop();
  void ReadLoop(CoordinatorPeer* peer);
  // Sends the peer's outbox in order; once the peer is removed, sends what is left (a Refused or an
  // Abort telling it why) and closes its channel.
  void WriteLoop(CoordinatorPeer* peer);
  void Log(const std::string& line) const;
  size_t SubscriberCount() const REQUIRES(mu);
  size_t ReadySubscriberCount() const REQUIRES(mu);  // those that sent StagingReady
  // Sends the publisher's RegionKeys to a subscriber that has not seen them, so that it prepares
  // its staging memory before the version that needs it.
  void SendKeysIfUnseen(CoordinatorPeer& peer) REQUIRES(mu);
  void PublishSubscriberCount() const REQUIRES(mu);  // sets the weightport_subscribers gauge
  void Count(std::string_view metric, const std::string& peer, double delta = 1) const;
  // Queues a message for one peer; a failed send later marks it lost.
  void SendTo(CoordinatorPeer& peer, MessageType type, const Bytes& payload) REQUIRES(mu);
  template <typename M>
  void SendTo(CoordinatorPeer& peer, const M& message) REQUIRES(mu) {
    SendTo(peer, M::kType, message.Encode());
  }
  // Removes a peer: aborts the update it is a member of; its writer then closes its channel.
  void RemovePeer(CoordinatorPeer& peer, const std::string& why, bool lost) REQUIRES(mu);
  void CheckDeadlines() REQUIRES(mu);
  void Heartbeat() REQUIRES(mu);
  CoordinatorPeer* Find(uint64_t id) REQUIRES(mu);  // null when gone

  // --- coordinator_updates.cc
  void Handle(CoordinatorPeer& peer, const ControlMessage& message) REQUIRES(mu);
  void OnManifest(CoordinatorPeer& peer, const ManifestMsg& message) REQUIRES(mu);
  void OnUpdateBegin(CoordinatorPeer& peer, const UpdateBeginMsg& message) REQUIRES(mu);
  // Starts the held UpdateBegin once enough subscribers are ready, aborts it past its deadline,
  // drops it when its publisher left. Called on every pass of the accepting loop.
  void CheckPendingBegin() REQUIRES(mu);
  void StartUpdate(const UpdateBeginMsg& message) REQUIRES(mu);
  void OnVerified(CoordinatorPeer& peer, const ChunksVerifiedMsg& message) REQUIRES(mu);
  void OnPlacement(CoordinatorPeer& peer, const PlacementMsg& message) REQUIRES(mu);
  // Refuses a subscriber whose wanted tensors the manifest lacks; true when it was refused.
  bool RefuseIfUnknownTensors(CoordinatorPeer& peer) REQUIRES(mu);
  void CommitUpdate() REQUIRES(mu);
  void AbortUpdate(const std::string& why) REQUIRES(mu);
  // A member failed the update in flight: aborts it (all or nothing), or drops the member and
  // commits or aborts by the quorum. `id` may be gone already (lost).
  void MemberFailed(uint64_t id, const std::string& name, const std::string& why) REQUIRES(mu);
  WholeSubscriberVersionReport* ReportOf(uint64_t version, const std::string& name) REQUIRES(mu);
};

}  // namespace weightport
