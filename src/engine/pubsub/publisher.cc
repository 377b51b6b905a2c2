#include "weightport/engine/pubsub/publisher.h"

#include <nlohmann/json.hpp>

#include <sys/mman.h>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <future>
#include <map>
#include <optional>
#include <thread>

#include "weightport/control/channel.h"
#include "weightport/control/handshake.h"
#include "weightport/control/pubsub_messages.h"
#include "weightport/control/version_messages.h"
#include "weightport/core/thread_annotations.h"
#include "weightport/engine/common/arena.h"
#include "weightport/transport/progress_loop.h"

namespace weightport {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

namespace {
constexpr milliseconds kPublisherPoll(100);
constexpr uint64_t kLiveRegion = 0;
constexpr uint64_t kSnapshotRegion = 1;
}  // namespace

std::string_view PublishModeName(PublishMode mode) {
  return mode == PublishMode::kLive ? "live" : "snapshot";
}

Result<PublishMode> ParsePublishMode(std::string_view name) {
  if (name == "live") return PublishMode::kLive;
  if (name == "snapshot") return PublishMode::kSnapshot;
  return InvalidArgument("publish mode must be 'live' or 'snapshot', got '" + std::string(name) + "'");
}

// One version's memory and transport when keys rotate per version. Destroying it retires the
// version: the region is released on its loop thread, then the transport (its worker) closes, which
// is what makes a peer's key useless (UCX over TCP or CMA does not check keys itself).
struct Grant {
  std::unique_ptr<ProgressLoop> loop;
  std::unique_ptr<MemoryRegion> region;
  ~Grant() {
    if (!loop) return;
    loop->Call([this](Transport&) { region.reset(); });
    loop->Stop();
  }
};

struct FreeDeleter {
  void operator()(std::byte* p) const { std::free(p); }
};

struct WholePublisher::Impl {
  WholePublisherOptions options;
  std::vector<TensorMeta> tensors;
  std::vector<uint64_t> offsets;
  uint64_t bytes = 0;
  std::unique_ptr<WholeCoordinator> coordinator;
  std::string coordinator_address;
  std::unique_ptr<ProgressLoop> loop;
  std::unique_ptr<MemoryRegion> live, snapshot;
  std::unique_ptr<std::byte, FreeDeleter> plain_live;  // rotate_keys: the live weights, never registered
  std::byte* live_bytes() const { return live ? live->data() : plain_live.get(); }
  std::unique_ptr<ControlChannel> channel;
  std::thread reader, background;
  std::atomic<bool> closing{false};
  bool closed = false;

  Mutex mu;
  std::condition_variable cv;
  std::map<uint64_t, Status> verdicts GUARDED_BY(mu);        // from Commit / Abort
  std::map<uint64_t, uint64_t> committed_to GUARDED_BY(mu);  // Commit: subscribers it reached
  std::map<uint64_t, PublishReport> reports GUARDED_BY(mu);
  Status session GUARDED_BY(mu);  // OK while the coordinator is reachable
  uint64_t last_version GUARDED_BY(mu) = 0;

  ~Impl() {
    // A half-built publisher (Create failed): regions go on the loop thread, like every transport call.
    if (loop)
      loop->Call([this](Transport&) {
        snapshot.reset();
        live.reset();
      });
  }
  void ReadLoop();
  // Tells the coordinator where peers read: `via`'s transport address and each region's key (null
  // regions left out).
  using KeyedRegion = std::pair<uint64_t, const MemoryRegion*>;
  Status SendKeys(ProgressLoop& via, const std::vector<KeyedRegion>& regions);
  Status SendRegionKeys();  // the live and snapshot regions
  // rotate_keys. A grant is prepared ahead (transport, region, pages touched) while the previous
  // version is decided or the trainer works; Publish takes it, copies the weights in and gives the
  // coordinator its keys; once decided it is retired and the next one is prepared.
  Result<std::unique_ptr<Grant>> PrepareGrant();
  Result<std::unique_ptr<Grant>> TakeGrant(PublishReport& report);
  void RetireGrant(std::shared_ptr<Grant>& grant);
  std::future<Result<std::unique_ptr<Grant>>> next_grant;  // the trainer's thread or background's
  // Hashes `region`'s bytes, starts the update and waits for its verdict.
  void RunUpdate(uint64_t version, const MemoryRegion& region, uint64_t region_id, WholeSubscriberWait wait,
                 PublishReport& report);
  void Log(const std::string& line) const {
    if (options.log) options.log(line);
  }
};

Result<std::unique_ptr<WholePublisher>> WholePublisher::Create(std::vector<TensorMeta> tensors,
                                                               const Secret& secret,
                                                               WholePublisherOptions options) {
  if (!options.make_transport) return InvalidArgument("publisher: no transport factory given");
  if (tensors.empty()) return InvalidArgument("publisher: the model has no tensors");
  auto impl = std::make_unique<Impl>();
  impl->options = std::move(options);
  impl->tensors = std::move(tensors);
  for (const TensorMeta& t : impl->tensors) {
    impl->offsets.push_back(impl->bytes);
    impl->bytes += t.bytes;
  }
  if (impl->bytes == 0) return InvalidArgument("publisher: the model has no bytes");
  if (impl->options.chunk_size == 0) return InvalidArgument("publisher: chunk size must be positive");
  {
    // The manifest travels in one control message: ~19 bytes of JSON per chunk hash, ~256 per
    // tensor. Refused here, not by the coordinator after the subscribers joined.
    uint64_t chunks = 0;
    for (const TensorMeta& t : impl->tensors)
      chunks += (t.bytes + impl->options.chunk_size - 1) / impl->options.chunk_size;
    const uint64_t estimate = chunks * 19 + impl->tensors.size() * 256;
    if (estimate > kDefaultMaxPayload)
      return InvalidArgument("publisher: a chunk size of " + std::to_string(impl->options.chunk_size) +
                             " bytes makes " + std::to_string(chunks) + " chunks of this " +
                             std::to_string(impl->bytes) + "-byte model, a manifest of about " +
                             std::to_string(estimate >> 20) +
                             " MiB: more than one control message carries (" +
                             std::to_string(kDefaultMaxPayload >> 20) + " MiB); use larger chunks");
  }

  if (impl->options.coordinator.empty()) {
    WholeCoordinatorOptions copts = impl->options.coordinator_options;
    if (!copts.log) copts.log = impl->options.log;
    WP_ASSIGN_OR_RETURN(impl->coordinator, WholeCoordinator::Start(impl->options.listen_host,
                                                                   impl->options.listen_port, secret, copts));
    impl->coordinator_address = impl->coordinator->address();
  } else {
    impl->coordinator_address = impl->options.coordinator;
  }

  const uint64_t size = impl->bytes;
  if (impl->options.rotate_keys) {
    // No transport of its own: only the grants are reachable by peers.
    impl->plain_live.reset(static_cast<std::byte*>(std::calloc(size, 1)));
    if (!impl->plain_live)
      return ResourceExhausted("publisher: cannot allocate " + std::to_string(size) + " bytes of weights");
  } else {
    WP_ASSIGN_OR_RETURN(std::unique_ptr<Transport> transport,
                        impl->options.make_transport(impl->options.name));
    impl->loop = std::make_unique<ProgressLoop>(std::move(transport));
    WP_ASSIGN_OR_RETURN(impl->live, impl->loop->Call([size](Transport& t) {
      return AllocateArena(t, size, "publisher live weights");
    }));
  }
  WP_ASSIGN_OR_RETURN(impl->channel, ControlChannel::Connect(impl->coordinator_address, impl->options.name,
                                                             PeerRole::kPublisher, secret,
                                                             impl->options.timing.connect_timeout));
  if (impl->options.rotate_keys) {
    Impl* d = impl.get();
    d->next_grant = std::async(std::launch::async, [d] { return d->PrepareGrant(); });
  } else {
    WP_RETURN_IF_ERROR(impl->SendRegionKeys());
  }
  Impl* raw = impl.get();
  impl->reader = std::thread([raw] { raw->ReadLoop(); });
  return std::unique_ptr<WholePublisher>(new WholePublisher(std::move(impl)));
}

WholePublisher::WholePublisher(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
WholePublisher::~WholePublisher() { Close(); }

std::span<std::byte> WholePublisher::weights() { return {impl_->live_bytes(), impl_->bytes}; }

std::span<std::byte> WholePublisher::TensorData(std::string_view name) {
  for (size_t i = 0; i < impl_->tensors.size(); ++i)
    if (impl_->tensors[i].name == name) return weights().subspan(impl_->offsets[i], impl_->tensors[i].bytes);
  return {};
}

const std::vector<TensorMeta>& WholePublisher::tensors() const { return impl_->tensors; }
uint64_t WholePublisher::model_bytes() const { return impl_->bytes; }
WholeCoordinator* WholePublisher::coordinator() { return impl_->coordinator.get(); }
const std::string& WholePublisher::coordinator_address() const { return impl_->coordinator_address; }

Status WholePublisher::Impl::SendKeys(ProgressLoop& via, const std::vector<KeyedRegion>& regions) {
  RegionKeysMsg keys;
  keys.transport_address = via.Call([](Transport& t) { return t.address(); });
  for (const auto& [id, region] : regions)
    if (region != nullptr) keys.regions.push_back({id, region->remote_key().Serialize()});
  return channel->Send(keys);
}

Status WholePublisher::Impl::SendRegionKeys() {
  return SendKeys(*loop, {{kLiveRegion, live.get()}, {kSnapshotRegion, snapshot.get()}});
}

Result<std::unique_ptr<Grant>> WholePublisher::Impl::PrepareGrant() {
  auto grant = std::make_unique<Grant>();
  WP_ASSIGN_OR_RETURN(std::unique_ptr<Transport> transport, options.make_transport(options.name));
  grant->loop = std::make_unique<ProgressLoop>(std::move(transport));
  const uint64_t size = bytes;
  WP_ASSIGN_OR_RETURN(grant->region, grant->loop->Call([size](Transport& t) {
    return AllocateArena(t, size, "publisher version grant");
  }));
  // Enter every page now, so the copy at Publish runs at memory speed instead of faulting them in:
  // one madvise(MADV_POPULATE_WRITE) (Linux 5.14), or touching each page where that is refused.
  constexpr int kMadvPopulateWrite = 23;  // not in every libc's headers
  std::byte* data = grant->region->data();
  const uintptr_t at = reinterpret_cast<uintptr_t>(data), begin = at & ~uintptr_t{4095};
  if (madvise(reinterpret_cast<void*>(begin), at + size - begin, kMadvPopulateWrite) != 0)
    for (uint64_t i = 0; i < size; i += 4096) data[i] = std::byte{0};
  return grant;
}

Result<std::unique_ptr<Grant>> WholePublisher::Impl::TakeGrant(PublishReport& report) {
  const auto t0 = Clock::now();
  Result<std::unique_ptr<Grant>> grant = next_grant.valid() ? next_grant.get() : PrepareGrant();
  report.grant = Clock::now() - t0;
  if (!grant.ok()) return grant.status().WithContext("publisher '" + options.name + "': a version's grant");
  const auto c0 = Clock::now();
  std::memcpy((*grant)->region->data(), live_bytes(), bytes);
  report.snapshot_copy = Clock::now() - c0;
  WP_RETURN_IF_ERROR(SendKeys(*(*grant)->loop, {{kLiveRegion, (*grant)->region.get()}}));
  return grant;
}

void WholePublisher::Impl::RetireGrant(std::shared_ptr<Grant>& grant) {
  grant.reset();  // its keys stop working
  if (!closing.load()) next_grant = std::async(std::launch::async, [this] { return PrepareGrant(); });
}

void WholePublisher::Impl::ReadLoop() {
  auto last_sent = Clock::now(), last_heard = Clock::now();
  auto end_session = [&](Status why) {
    MutexLock lock(mu);
    if (session.ok()) session = std::move(why);
    cv.notify_all();
  };
  while (!closing.load()) {
    if (Clock::now() - last_sent >= options.timing.heartbeat_interval) {
      if (Status s = channel->Send(HeartbeatMsg{}); !s.ok()) return end_session(s);
      last_sent = Clock::now();
    }
    Result<ControlMessage> m = channel->Receive(kPublisherPoll);
    if (!m.ok() && m.status().code() == StatusCode::kTimeout) {
      if (Clock::now() - last_heard > options.timing.peer_timeout)
        return end_session(Unavailable("publisher '" + options.name + "': coordinator at " +
                                       coordinator_address + " silent for too long; lost"));
      continue;
    }
    if (!m.ok()) return end_session(m.status());
    last_heard = Clock::now();
    if (m->type == MessageType::kBye)
      return end_session(Unavailable("coordinator at " + coordinator_address + " is shutting down"));
    std::optional<std::pair<uint64_t, Status>> verdict;
    if (m->type == MessageType::kCommit) {
      if (auto c = CommitMsg::Decode(m->payload); c.ok()) {
        verdict.emplace(c->version, Status::Ok());
        MutexLock lock(mu);
        committed_to[c->version] = c->subscribers;
      }
    } else if (m->type == MessageType::kAbort) {
      if (auto a = AbortMsg::Decode(m->payload); a.ok()) verdict.emplace(a->version, Cancelled(a->reason));
    }
    if (verdict) {
      MutexLock lock(mu);
      verdicts[verdict->first] = verdict->second;
      cv.notify_all();
    }
  }
}

void WholePublisher::Impl::RunUpdate(uint64_t version, const MemoryRegion& region, uint64_t region_id,
                                     WholeSubscriberWait wait, PublishReport& report) {
  auto t0 = Clock::now();
  std::vector<TensorBytes> views;
  views.reserve(tensors.size());
  for (size_t i = 0; i < tensors.size(); ++i)
    views.push_back({tensors[i], {region.data() + offsets[i], tensors[i].bytes}});
  Result<Manifest> manifest = Manifest::Build(version, views, options.chunk_size);
  report.hash = Clock::now() - t0;
  if (!manifest.ok()) {
    report.outcome = manifest.status();
    return;
  }
  auto t1 = Clock::now();
  Status sent = channel->Send(ManifestMsg{manifest->ToJson().dump()});
  if (sent.ok())
    sent = channel->Send(UpdateBeginMsg{.version = version,
                                        .source_region = region_id,
                                        .min_subscribers = wait.at_least,
                                        .wait_ms = static_cast<uint64_t>(wait.within.count())});
  if (!sent.ok()) {
    report.outcome = sent;
    return;
  }
  MutexLock lock(mu);
  const bool decided = cv.wait_for(lock.native(), options.update_timeout + wait.within, [&]() REQUIRES(mu) {
    return verdicts.count(version) != 0 || !session.ok();
  });
  report.transfer = Clock::now() - t1;
  if (verdicts.count(version) != 0) {
    report.outcome = verdicts[version];
    report.subscribers = committed_to[version];
    // An Abort for version 0 answers a refused manifest: it concerns this update too.
  } else if (verdicts.count(0) != 0) {
    report.outcome = verdicts[0];
    verdicts.erase(0);
  } else if (!session.ok()) {
    report.outcome = session;
  } else if (!decided) {
    report.outcome =
        Timeout("publisher '" + options.name + "': no verdict on version " + std::to_string(version) +
                " after " + std::to_string(options.update_timeout.count()) + " ms");
  }
}

Result<PublishReport> WholePublisher::Publish(uint64_t version, PublishMode mode, WholeSubscriberWait wait) {
  Impl& d = *impl_;
  if (d.closed) return FailedPrecondition("publisher '" + d.options.name + "' is closed");
  const auto t0 = Clock::now();
  if (d.background.joinable()) d.background.join();  // the previous snapshot publish
  {
    MutexLock lock(d.mu);
    if (!d.session.ok()) return d.session;
    if (version <= d.last_version)
      return InvalidArgument("publisher: version " + std::to_string(version) + " is not newer than version " +
                             std::to_string(d.last_version));
    d.last_version = version;
  }
  PublishReport report{.version = version, .bytes = d.bytes};
  // Where subscribers read this version: its grant, the live weights, or the snapshot copy of them.
  std::shared_ptr<Grant> grant;
  const MemoryRegion* region = d.live.get();
  uint64_t region_id = kLiveRegion;
  if (d.options.rotate_keys) {
    WP_ASSIGN_OR_RETURN(grant, d.TakeGrant(report));
    region = grant->region.get();
  } else if (mode == PublishMode::kSnapshot) {
    if (!d.snapshot) {
      const uint64_t size = d.bytes;
      WP_ASSIGN_OR_RETURN(d.snapshot, d.loop->Call([size](Transport& t) {
        return AllocateArena(t, size, "publisher snapshot");
      }));
      WP_RETURN_IF_ERROR(d.SendRegionKeys());
    }
    const auto c0 = Clock::now();
    std::memcpy(d.snapshot->data(), d.live_bytes(), d.bytes);
    report.snapshot_copy = Clock::now() - c0;
    region = d.snapshot.get();
    region_id = kSnapshotRegion;
  }
  // Runs the update and records its report; a grant is retired once the version is decided.
  auto run = [&d, region, region_id, wait](PublishReport& r, std::shared_ptr<Grant>& g) {
    d.RunUpdate(r.version, *region, region_id, wait, r);
    if (g) d.RetireGrant(g);
  };
  if (mode == PublishMode::kLive) {
    run(report, grant);
    report.hold = Clock::now() - t0;
    MutexLock lock(d.mu);
    d.reports[version] = report;
    return report;
  }
  report.hold = Clock::now() - t0;
  d.background = std::thread([&d, run, report, grant = std::move(grant)]() mutable {
    run(report, grant);
    MutexLock lock(d.mu);
    d.reports[report.version] = report;
    d.cv.notify_all();
  });
  return report;
}

Result<PublishReport> WholePublisher::Wait(uint64_t version, milliseconds timeout) {
  MutexLock lock(impl_->mu);
  if (!impl_->cv.wait_for(lock.native(), timeout,
                          [&]() REQUIRES(impl_->mu) { return impl_->reports.count(version) != 0; }))
    return Timeout("publisher: version " + std::to_string(version) + " not decided after " +
                   std::to_string(timeout.count()) + " ms");
  return impl_->reports[version];
}

void WholePublisher::Close() {
  Impl& d = *impl_;
  if (d.closed) return;
  d.closed = true;
  if (d.background.joinable()) d.background.join();
  if (d.next_grant.valid()) {
    Result<std::unique_ptr<Grant>> unused = d.next_grant.get();  // prepared, never used: released here
  }
  d.closing.store(true);
  if (d.reader.joinable()) d.reader.join();
  if (d.channel) {
    // Waits for the coordinator to take the Bye, so a successor is not refused as a duplicate.
    d.channel->Goodbye(d.options.timing.goodbye_timeout).IgnoreError();
  }
  if (d.coordinator) d.coordinator->Stop();
  if (!d.loop) return;
  d.loop->Call([&d](Transport&) {
    d.snapshot.reset();
    d.live.reset();
  });
  d.loop->Stop();
}

}  // namespace weightport
