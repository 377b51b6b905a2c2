// Internals of the WholeSubscriber shared by subscriber.cc (session, lifecycle) and
// subscriber_update.cc (one version: check, fetch, verdict, swap).
#pragma once

#include <condition_variable>
#include <map>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include "weightport/control/channel.h"
#include "weightport/control/pubsub_messages.h"
#include "weightport/control/version_messages.h"
#include "weightport/engine/pubsub/subscriber.h"
#include "weightport/transport/progress_loop.h"

namespace weightport {

struct WholeSubscriber::Impl {
  WholeSubscriberOptions options;
  std::unique_ptr<ProgressLoop> loop;
  std::unique_ptr<ControlChannel> channel;
  std::thread session_thread;
  std::thread heartbeat_thread;
  std::mutex heartbeat_mu;  // only for the heartbeat thread's timed wait
  std::condition_variable heartbeat_cv;
  std::atomic<bool> session_over{false};
  std::atomic<bool> closing{false};
  bool closed = false;

  mutable std::mutex mu;
  std::condition_variable cv;
  std::unique_ptr<VersionedStore> store;
  // Stores prepared at the wrong size and never committed to, kept until Close: a reader may have
  // read the `store` pointer just before it was replaced (Acquire then fails, as with no version).
  std::vector<std::unique_ptr<VersionedStore>> retired_stores;
  std::map<const std::byte*, std::unique_ptr<MemoryRegion>> registered;  // store buffers
  std::optional<Manifest> live_manifest, pending_manifest;
  // The version each store buffer holds, when known (set when it was committed, cleared when an
  // update starts writing it): a delta skips copying what the staging buffer already has.
  std::map<const std::byte*, std::optional<Manifest>> staged;
  const std::byte* updating_base = nullptr;
  std::map<uint64_t, RemoteKey> keys;
  Bytes publisher_address;
  std::shared_ptr<Connection> connection;  // used on the loop thread only
  uint64_t updating = 0;                   // version being fetched or awaiting its verdict; 0: none
  bool fetch_running = false;
  bool fetch_ok = false;
  std::shared_ptr<FetchExecutor> fetch;
  std::shared_ptr<WorkerPool> verifier;  // hash checks of every fetch, beside the loop thread
  std::unique_ptr<WorkerPool> keepers;  // delta: copy and hash of unchanged chunks (session thread's helpers)
  std::optional<Status> ended;          // the session's end: OK on Bye
  bool staging_ready_sent = false;      // StagingReady went to the coordinator (session thread)

  void SessionLoop();
  void HeartbeatLoop();
  void Handle(const ControlMessage& m);  // session thread
  void OnRegionKeys(const RegionKeysMsg& m);
  // Before the first version: maps and zero-fills the store's buffers for the size of `source` (the
  // publisher's region), registers them, maps a same-host publisher's region and enters its pages,
  // then sends StagingReady, so that version 1 moves bytes instead of paying page faults.
  void PrepareStaging(const RemoteKey& source);
  void OnUpdateBegin(const UpdateBeginMsg& m);
  // Replaces `store` (never committed to) by null, its buffers deregistered. `lock` holds `mu`.
  void RetireStore(std::unique_lock<std::mutex>& lock);
  // A store of `bytes` in this subscriber's swap mode.
  Result<std::unique_ptr<VersionedStore>> MakeStore(uint64_t bytes) const;
  // Registers a store buffer with the transport unless it is already; `lock` holds `mu`, and is
  // released while registering.
  Status RegisterOnce(std::span<std::byte> buffer, std::unique_lock<std::mutex>& lock);
  void OnCommit(uint64_t version);
  void OnAbort(uint64_t version, const std::string& why);
  // Stops the fetch in flight (if any) and waits for it to report.
  void CancelFetch(const std::string& why);
  void Fail(uint64_t version, const std::string& why);  // UpdateFailed, staging abandoned
  void Emit(WholeSubscriberEvent e) const {
    if (options.on_event) options.on_event(e);
  }
  void Log(const std::string& line) const {
    if (options.log) options.log(line);
  }
  // Sends to the coordinator. A failed send is logged, not returned: the reader thread sees the
  // same broken connection and ends the session with its error.
  template <typename M>
  void Tell(const M& message) {
    const Status sent = channel->Send(message);
    if (!sent.ok())
      Log("subscriber '" + options.name + "': could not send " + std::string(MessageTypeName(M::kType)) +
          ": " + sent.message());
  }
};

}  // namespace weightport
