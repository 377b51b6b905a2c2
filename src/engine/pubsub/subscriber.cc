#include "subscriber_impl.h"

#include <condition_variable>
#include <map>
#include <mutex>
#include <optional>
#include <thread>

#include <nlohmann/json.hpp>

#include "weightport/control/channel.h"
#include "weightport/control/handshake.h"
#include "weightport/control/pubsub_messages.h"
#include "weightport/control/version_messages.h"
#include "weightport/engine/common/arena.h"
#include "weightport/transport/progress_loop.h"

namespace weightport {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

namespace {
constexpr milliseconds kSubscriberPoll(100);

}  // namespace

Result<std::unique_ptr<WholeSubscriber>> WholeSubscriber::Connect(const Secret& secret,
                                                                  WholeSubscriberOptions options) {
  if (!options.make_transport) return InvalidArgument("subscriber: no transport factory given");
  auto impl = std::make_unique<Impl>();
  impl->options = std::move(options);
  WP_ASSIGN_OR_RETURN(std::unique_ptr<Transport> transport, impl->options.make_transport(impl->options.name));
  impl->loop = std::make_unique<ProgressLoop>(std::move(transport));
  // Two threads: from a same-host publisher they copy and hash every chunk (FetchExecutor), and
  // one thread runs at about a memcpy's speed less the hash; otherwise they only hash.
  if (impl->options.fetch.verify && !impl->options.fetch.verifier)
    impl->options.fetch.verifier = std::make_shared<WorkerPool>(2);
  WP_ASSIGN_OR_RETURN(impl->channel, ControlChannel::Connect(impl->options.coordinator, impl->options.name,
                                                             PeerRole::kSubscriber, secret,
                                                             impl->options.timing.connect_timeout));
  if (!impl->options.tensors.empty()) {
    nlohmann::json want = {{"tensors", impl->options.tensors}};
    WP_RETURN_IF_ERROR(impl->channel->Send(PlacementMsg{want.dump()}));
  }
  Impl* raw = impl.get();
  impl->session_thread = std::thread([raw] { raw->SessionLoop(); });
  impl->heartbeat_thread = std::thread([raw] { raw->HeartbeatLoop(); });
  return std::unique_ptr<WholeSubscriber>(new WholeSubscriber(std::move(impl)));
}

WholeSubscriber::WholeSubscriber(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
WholeSubscriber::~WholeSubscriber() { Close(); }

Result<VersionedStore::Pin> WholeSubscriber::Acquire() {
  VersionedStore* store;
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    store = impl_->store.get();
  }
  if (store == nullptr) return FailedPrecondition("subscriber '" + impl_->options.name + "': no version yet");
  return store->Acquire();
}

uint64_t WholeSubscriber::live_version() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return impl_->store ? impl_->store->live_version() : 0;
}

Result<Manifest> WholeSubscriber::LiveManifest() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  if (!impl_->live_manifest)
    return FailedPrecondition("subscriber '" + impl_->options.name + "': no version yet");
  return *impl_->live_manifest;
}

Status WholeSubscriber::WaitForVersion(uint64_t version, milliseconds timeout) {
  std::unique_lock<std::mutex> lock(impl_->mu);
  auto live = [&] { return impl_->store ? impl_->store->live_version() : 0; };
  impl_->cv.wait_for(lock, timeout, [&] { return live() >= version || impl_->ended.has_value(); });
  if (live() >= version) return Status::Ok();
  if (impl_->ended.has_value())
    return impl_->ended->ok()
               ? Unavailable("subscriber '" + impl_->options.name +
                             "': the coordinator ended the session before version " + std::to_string(version))
               : *impl_->ended;
  return Timeout("subscriber '" + impl_->options.name + "': version " + std::to_string(version) +
                 " not live after " + std::to_string(timeout.count()) +
                 " ms (live: " + std::to_string(live()) + ")");
}

Status WholeSubscriber::WaitForEnd(milliseconds timeout) {
  std::unique_lock<std::mutex> lock(impl_->mu);
  if (!impl_->cv.wait_for(lock, timeout, [&] { return impl_->ended.has_value(); }))
    return Timeout("subscriber '" + impl_->options.name + "': session still running after " +
                   std::to_string(timeout.count()) + " ms");
  return *impl_->ended;
}

void WholeSubscriber::Close() {
  Impl& d = *impl_;
  if (d.closed) return;
  d.closed = true;
  d.closing.store(true);
  if (d.session_thread.joinable()) d.session_thread.join();
  {
    std::lock_guard<std::mutex> lock(d.heartbeat_mu);
    d.heartbeat_cv.notify_all();
  }
  if (d.heartbeat_thread.joinable()) d.heartbeat_thread.join();
  d.CancelFetch("the subscriber is closing");
  {
    std::lock_guard<std::mutex> lock(d.mu);
    if (d.updating != 0 && d.store && d.store->updating()) d.store->Abort().IgnoreError();
  }
  if (d.channel) {
    // Waits for the coordinator to take the Bye, so a successor is not refused as a duplicate.
    d.channel->Goodbye(d.options.timing.goodbye_timeout).IgnoreError();
  }
  d.loop->Call([&d](Transport&) {
    d.connection.reset();
    d.registered.clear();
  });
  d.loop->Stop();
}

// ---- the session ------------------------------------------------------------------------------------

void WholeSubscriber::Impl::SessionLoop() {
  auto last_heard = Clock::now();
  // Ends the session: any update in flight is abandoned (its staging copy dropped) first.
  auto end = [&](Status why, const std::string& abandon_reason) {
    CancelFetch(abandon_reason);
    OnAbort(updating, abandon_reason);
    Log("subscriber '" + options.name +
        "': session ended: " + (why.ok() ? "coordinator said Bye" : why.message()));
    {
      std::lock_guard<std::mutex> lock(mu);
      ended = std::move(why);
      cv.notify_all();
    }
    std::lock_guard<std::mutex> lock(heartbeat_mu);
    session_over.store(true);
    heartbeat_cv.notify_all();
  };
  while (!closing.load()) {
    Result<ControlMessage> m = channel->Receive(kSubscriberPoll);
    if (!m.ok() && m.status().code() == StatusCode::kTimeout) {
      if (Clock::now() - last_heard > options.timing.peer_timeout) {
        return end(Unavailable("subscriber '" + options.name + "': coordinator at " + options.coordinator +
                               " silent for too long; lost"),
                   "the coordinator was lost");
      }
      continue;
    }
    if (!m.ok()) return end(m.status(), m.status().message());
    last_heard = Clock::now();
    if (m->type == MessageType::kBye) return end(Status::Ok(), "the coordinator said Bye");
    Handle(*m);
  }
}

// Heartbeats have a thread of their own: the session thread may be busy for a while (mapping a
// large store, waiting for readers to drain), and must not look lost meanwhile.
void WholeSubscriber::Impl::HeartbeatLoop() {
  std::unique_lock<std::mutex> lock(heartbeat_mu);  // not `mu`: the session thread holds that while busy
  while (!closing.load() && !session_over.load()) {
    if (!channel->Send(HeartbeatMsg{}).ok()) return;  // the session thread sees the failure too
    heartbeat_cv.wait_for(lock, options.timing.heartbeat_interval,
                          [&] { return closing.load() || session_over.load(); });
  }
}

void WholeSubscriber::Impl::Handle(const ControlMessage& m) {
  switch (m.type) {
    case MessageType::kRegionKeys:
      if (auto k = RegionKeysMsg::Decode(m.payload); k.ok()) OnRegionKeys(*k);
      return;
    case MessageType::kManifest: {
      auto msg = ManifestMsg::Decode(m.payload);
      if (!msg.ok()) return;
      Result<Manifest> manifest = Manifest::FromJsonText(msg->json, "manifest");
      std::lock_guard<std::mutex> lock(mu);
      if (manifest.ok()) {
        pending_manifest = std::move(*manifest);
      } else {
        pending_manifest.reset();
        Log("subscriber '" + options.name + "': bad manifest: " + manifest.status().message());
      }
      return;
    }
    case MessageType::kUpdateBegin:
      if (auto b = UpdateBeginMsg::Decode(m.payload); b.ok()) OnUpdateBegin(*b);
      return;
    case MessageType::kCommit:
      if (auto c = CommitMsg::Decode(m.payload); c.ok()) OnCommit(c->version);
      return;
    case MessageType::kAbort:
      if (auto a = AbortMsg::Decode(m.payload); a.ok()) {
        if (a->version == updating) CancelFetch(a->reason);
        OnAbort(a->version, a->reason);
      }
      return;
    default:
      return;  // Heartbeat, and anything newer than this subscriber
  }
}

void WholeSubscriber::Impl::OnRegionKeys(const RegionKeysMsg& m) {
  std::map<uint64_t, RemoteKey> parsed;
  for (const auto& r : m.regions) {
    auto key = RemoteKey::Deserialize(r.remote_key, "publisher region " + std::to_string(r.region_id));
    if (!key.ok()) {
      Log("subscriber '" + options.name + "': " + key.status().message());
      return;
    }
    parsed[r.region_id] = std::move(*key);
  }
  const bool moved = m.transport_address != publisher_address;
  // The region versions come from (the publisher lists its live one first).
  std::optional<RemoteKey> first;
  if (!m.regions.empty()) first = parsed.at(m.regions.front().region_id);
  {
    std::lock_guard<std::mutex> lock(mu);
    keys = std::move(parsed);
    publisher_address = m.transport_address;
  }
  if (moved) {
    Bytes address = m.transport_address;
    Status connected = loop->Call([this, address](Transport& t) -> Status {
      auto c = t.Connect(address, "publisher");
      if (!c.ok()) return c.status();
      connection = std::move(*c);
      return Status::Ok();
    });
    if (!connected.ok())
      Log("subscriber '" + options.name + "': connecting to the publisher: " + connected.message());
  }
  if (!staging_ready_sent && first) PrepareStaging(*first);
}

void WholeSubscriber::Impl::PrepareStaging(const RemoteKey& source) {
  const auto start = Clock::now();
  uint64_t bytes = 0;
  Status prepared = [&]() -> Status {
    std::unique_lock<std::mutex> lock(mu);
    if (store == nullptr) {
      lock.unlock();  // mapping and zero-filling take a while; only this thread creates the store
      WP_ASSIGN_OR_RETURN(std::unique_ptr<VersionedStore> created, MakeStore(source.length));
      lock.lock();
      store = std::move(created);
    }
    // A buffer not registered here (the transport refused) is registered again by the first version.
    for (std::span<std::byte> b : store->buffers()) {
      bytes += b.size();
      WP_RETURN_IF_ERROR(RegisterOnce(b, lock));
    }
    lock.unlock();
    // A same-host publisher's region, mapped once for the connection's life: its pages entered now.
    loop->Call([this, &source](Transport&) {
      if (connection == nullptr) return;
      if (std::shared_ptr<const MappedPeerRegion> mapped = connection->Map(source))
        mapped->Prepare(0, mapped->size());
    });
    return Status::Ok();
  }();
  const auto took = std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - start);
  if (!prepared.ok())
    Log("subscriber '" + options.name + "': preparing staging memory: " + prepared.message() +
        " (the first version tries again)");
  else
    Log("subscriber '" + options.name + "': " + std::to_string(bytes >> 20) +
        " MiB of staging memory ready in " + std::to_string(took.count() / 1'000'000) + " ms");
  // Sent either way: a version held for this subscriber would otherwise wait for nothing.
  Tell(StagingReadyMsg{.bytes = bytes, .prepare_ns = static_cast<uint64_t>(took.count())});
  staging_ready_sent = true;
}

void WholeSubscriber::Impl::Fail(uint64_t version, const std::string& why) {
  Log("subscriber '" + options.name + "': version " + std::to_string(version) + " failed: " + why);
  Tell(UpdateFailedMsg{version, why});
  Emit({.kind = WholeSubscriberEvent::Kind::kFailed, .version = version, .detail = why});
}

}  // namespace weightport
