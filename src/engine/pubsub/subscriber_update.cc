// One version on the subscriber: check the manifest, fetch into staging, report, swap or abandon.
// Runs on the session thread, except the fetch's completion, which runs on the loop thread.
#include <algorithm>
#include <cstring>
#include <latch>
#include <optional>
#include <set>
#include <thread>
#include <utility>

#include "subscriber_impl.h"
#include "weightport/control/version_messages.h"
#include "weightport/core/hash.h"
#include "weightport/engine/common/arena.h"
#include "weightport/engine/common/worker_pool.h"

namespace weightport {

using Clock = std::chrono::steady_clock;

namespace {

std::string Describe(const TensorMeta& t) {
  return "'" + t.name + "' " + std::string(DTypeName(t.dtype)) + " " + ShapeToString(t.shape);
}

// Why `next` cannot land in memory laid out for `live`, or "" when it can.
std::string LayoutMismatch(const Manifest& live, const Manifest& next) {
  const auto& a = live.tensors();
  const auto& b = next.tensors();
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) {
    const TensorMeta& x = a[i].meta;
    const TensorMeta& y = b[i].meta;
    if (x.name != y.name || x.dtype != y.dtype || x.shape != y.shape)
      return "manifest of version " + std::to_string(next.version()) +
             " does not match the layout held: tensor #" + std::to_string(i) + " is " + Describe(x) +
             " here but " + Describe(y) + " in the new version";
  }
  if (a.size() != b.size())
    return "manifest of version " + std::to_string(next.version()) +
           " does not match the layout held: " + std::to_string(a.size()) + " tensors here, " +
           std::to_string(b.size()) + " in the new version";
  return "";
}

// Copies the kept chunks from `live` into `staging` (live == nullptr: in place, already there;
// in_staging[i]: the staging buffer holds chunk i already) and hashes them in staging, shared with
// `pool` for a large model (one share per 64 MiB, at most one per pool thread and this one).
// Returns the indices of those whose hash is not the manifest's.
std::vector<size_t> KeepChunks(const std::vector<ChunkFetch>& kept, const std::vector<char>& in_staging,
                               const std::byte* live, std::byte* staging, WorkerPool& pool) {
  uint64_t bytes = 0;
  for (const ChunkFetch& c : kept) bytes += c.length;
  const size_t shares = std::clamp<size_t>(bytes / (64u << 20), 1, pool.size() + 1);
  std::vector<std::vector<size_t>> bad(shares);
  auto work = [&](size_t t) {
    for (size_t i = t; i < kept.size(); i += shares) {
      const ChunkFetch& c = kept[i];
      if (live != nullptr && !in_staging[i])
        std::memcpy(staging + c.local_offset, live + c.local_offset, c.length);
      if (Xxh3(std::span<const std::byte>(staging + c.local_offset, c.length)) != c.xxh3) bad[t].push_back(i);
    }
  };
  std::latch done(static_cast<std::ptrdiff_t>(shares - 1));
  for (size_t t = 1; t < shares; ++t)
    pool.Submit([&, t] {
      work(t);
      done.count_down();
    });
  work(0);
  done.wait();
  std::vector<size_t> out;
  for (const auto& b : bad) out.insert(out.end(), b.begin(), b.end());
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace

void WholeSubscriber::Impl::OnUpdateBegin(const UpdateBeginMsg& m) {
  const uint64_t v = m.version;
  std::unique_lock<std::mutex> lock(mu);
  if (updating != 0) {
    // The coordinator never overlaps versions; a new one means the old one was abandoned.
    lock.unlock();
    CancelFetch("version " + std::to_string(v) + " began");
    OnAbort(updating, "superseded by version " + std::to_string(v));
    lock.lock();
  }
  auto fail = [&](const std::string& why) {
    lock.unlock();
    Fail(v, why);
  };
  if (!pending_manifest || pending_manifest->version() != v)
    return fail("no valid manifest for version " + std::to_string(v) + " arrived before UpdateBegin");
  const Manifest& manifest = *pending_manifest;
  const Manifest* layout = live_manifest ? &*live_manifest : nullptr;
  if (layout != nullptr) {
    if (std::string why = LayoutMismatch(*layout, manifest); !why.empty()) return fail(why);
  } else if (store && store->size() != manifest.total_bytes()) {
    if (store->live_version() != 0)
      return fail("manifest of version " + std::to_string(v) + " holds " +
                  std::to_string(manifest.total_bytes()) + " bytes, the staging memory " +
                  std::to_string(store->size()));
    // Prepared for a publisher's region that holds more than this model, and never committed to:
    // made again at the manifest's size.
    RetireStore(lock);
  }
  for (const std::string& name : options.tensors)
    if (manifest.Find(name) == nullptr)
      return fail("tensor '" + name + "' does not exist in the manifest of version " + std::to_string(v));
  auto key = keys.find(m.source_region);
  if (key == keys.end())
    return fail("the publisher sent no key for region " + std::to_string(m.source_region));
  if (key->second.length < manifest.total_bytes())
    return fail("the publisher's region " + std::to_string(m.source_region) + " holds " +
                std::to_string(key->second.length) + " bytes, the manifest " +
                std::to_string(manifest.total_bytes()));
  // Mapping a store and waiting for readers to leave the next staging buffer take a while: not
  // under `mu`, which readers need to Acquire. Only this thread creates the store or the manifests.
  VersionedStore* target = store.get();
  const uint64_t total = manifest.total_bytes();
  lock.unlock();
  std::unique_ptr<VersionedStore> created;
  if (target == nullptr) {
    auto made = MakeStore(total);
    if (!made.ok()) return Fail(v, made.status().message());
    created = std::move(*made);
    target = created.get();
  }
  // The version whose bytes the live copy holds, read before an in-place update starts to change
  // them (0 when none is valid, e.g. after an aborted in-place update).
  const uint64_t held_version = target->live_version();
  Result<std::span<std::byte>> staging = target->BeginUpdate(v);
  lock.lock();
  if (created) store = std::move(created);
  if (!staging.ok()) return fail("opening the staging copy: " + staging.status().message());

  // The buffer chunks land in, registered once (a store has at most two).
  std::byte* base = staging->data();
  if (Status r = RegisterOnce(*staging, lock); !r.ok()) {
    store->Abort().IgnoreError();
    return fail(r.message());
  }
  const MemoryRegion& local = *registered[base];
  // What the staging buffer holds from its last commit (double-buffer: the version before the live
  // one; stage-copy: the live one); it is about to be written, so it holds nothing known after.
  const std::optional<Manifest> in_staging_version = std::exchange(staged[base], std::nullopt);
  updating_base = base;

  std::set<std::string> wanted(options.tensors.begin(), options.tensors.end());
  // Delta: a chunk whose hash equals the one in the version held is not fetched. It is copied from
  // the live copy into staging, or, in place, already there. A subscriber that missed versions
  // compares with the one it holds, so it gets everything changed since then.
  const bool in_place = store->mode() == SwapMode::kInPlace;
  // Without verification a chunk that arrived corrupt would be kept forever: no delta then.
  const Manifest* held =
      options.delta && options.fetch.verify && live_manifest && held_version == live_manifest->version()
          ? &*live_manifest
          : nullptr;
  std::vector<ChunkFetch> chunks;     // to fetch
  std::vector<ChunkFetch> kept;       // unchanged since `held`: copied from the live copy, then hashed
  std::vector<char> kept_in_staging;  // kept chunk i is in the staging buffer already: no copy
  // unchanged[i]: chunk i of `t` is the same in `older` (all 0 without one).
  auto unchanged = [&](const ManifestTensor& t, const Manifest* older) {
    std::vector<char> same(t.chunk_hashes.size(), older != nullptr);
    if (older != nullptr)
      for (size_t i : manifest.ChangedChunks(t, *older)) same[i] = 0;
    return same;
  };
  for (const ManifestTensor& t : manifest.tensors()) {
    if (!wanted.empty() && wanted.count(t.meta.name) == 0) continue;
    const std::vector<char> same_as_held = unchanged(t, held);
    const std::vector<char> same_in_staging =
        unchanged(t, held != nullptr && in_staging_version ? &*in_staging_version : nullptr);
    for (size_t i = 0; i < t.chunk_hashes.size(); ++i) {
      const ByteRange r = manifest.ChunkRange(t, i);
      ChunkFetch c{.remote_offset = t.offset + r.offset,
                   .local_offset = t.offset + r.offset,
                   .length = r.length,
                   .xxh3 = t.chunk_hashes[i],
                   .what = "tensor '" + t.meta.name + "' chunk " + std::to_string(i)};
      if (!same_as_held[i]) {
        chunks.push_back(std::move(c));
        continue;
      }
      kept.push_back(std::move(c));
      kept_in_staging.push_back(same_in_staging[i]);
    }
  }
  const size_t changed_chunks = chunks.size(), all_chunks = chunks.size() + kept.size();
  // The live copy stays pinned only while copying from it: a stage-then-copy Commit waits for pins.
  std::optional<VersionedStore::Pin> pin;
  if (!kept.empty() && !in_place) {
    auto acquired = store->Acquire();
    if (!acquired.ok()) {
      store->Abort().IgnoreError();
      return fail("reading the live copy for the unchanged chunks: " + acquired.status().message());
    }
    pin = std::move(*acquired);
  }
  if (!keepers && !kept.empty())  // this thread and up to 7 more
    keepers = std::make_unique<WorkerPool>(std::clamp(std::thread::hardware_concurrency(), 1u, 8u) - 1);
  updating = v;
  fetch_running = true;
  fetch_ok = false;
  RemoteKey remote = key->second;
  lock.unlock();

  // A kept chunk must hash as the manifest says (the live copy could have been written to); one
  // that does not is fetched after all.
  const std::vector<size_t> mismatched =
      kept.empty() ? std::vector<size_t>{}
                   : KeepChunks(kept, kept_in_staging, pin ? pin->bytes().data() : nullptr, base, *keepers);
  pin.reset();
  for (size_t i : mismatched) chunks.push_back(std::move(kept[i]));
  if (!mismatched.empty())
    Log("subscriber '" + options.name + "': " + std::to_string(mismatched.size()) +
        " unchanged chunk(s) did not match their hash in the held copy; fetching them");
  Emit({.kind = WholeSubscriberEvent::Kind::kBegin,
        .version = v,
        .detail = held ? std::to_string(changed_chunks) + " of " + std::to_string(all_chunks) +
                             " chunks changed since version " + std::to_string(held->version())
                       : std::string()});
  loop->Post([this, v, &local, remote, chunks = std::move(chunks)](Transport&) mutable {
    if (!connection) {
      std::lock_guard<std::mutex> lock(mu);
      fetch_running = false;
      cv.notify_all();
      Fail(v, "not connected to the publisher's transport");
      return;
    }
    auto done = [this, v](const Status& status, const FetchStats& stats) {
      {
        std::lock_guard<std::mutex> lock(mu);
        fetch_running = false;
        fetch_ok = status.ok();
        fetch.reset();
        cv.notify_all();
      }
      if (status.code() == StatusCode::kCancelled) return;  // abandoned on purpose; nothing to report
      if (!status.ok()) return Fail(v, status.message());
      channel
          ->Send(ChunksVerifiedMsg{v, stats.chunks, stats.bytes, static_cast<uint64_t>(stats.elapsed.count()),
                                   stats.corrupt_refetched + stats.errors_retried})
          .IgnoreError();
      Emit({.kind = WholeSubscriberEvent::Kind::kVerified,
            .version = v,
            .bytes = stats.bytes,
            .retries = stats.corrupt_refetched + stats.errors_retried,
            .direct_chunks = stats.direct_chunks,
            .yields = stats.yields,
            .fetch = stats.elapsed});
    };
    auto executor =
        FetchExecutor::Start(*loop, connection, local, remote, std::move(chunks), options.fetch, done);
    std::lock_guard<std::mutex> lock(mu);
    if (fetch_running) fetch = executor;
  });
}

void WholeSubscriber::Impl::CancelFetch(const std::string& why) {
  std::unique_lock<std::mutex> lock(mu);
  if (!fetch_running) return;
  std::shared_ptr<FetchExecutor> executor = fetch;
  if (executor) loop->Post([executor, why](Transport&) { executor->Cancel(why); });
  // A fetch not yet started (its Post still queued) or cancelled reports soon; bound the wait anyway.
  if (!cv.wait_for(lock, options.fetch.timeout + std::chrono::seconds(5), [&] { return !fetch_running; }))
    Log("subscriber '" + options.name + "': the fetch did not stop in time");
}

void WholeSubscriber::Impl::OnCommit(uint64_t version) {
  std::unique_lock<std::mutex> lock(mu);
  if (version != updating || fetch_running || !fetch_ok || !store) return;
  Status committed = store->Commit();
  updating = 0;
  if (!committed.ok()) {
    lock.unlock();
    Fail(version, "swap: " + committed.message());
    return;
  }
  live_manifest = pending_manifest;
  if (updating_base != nullptr) staged[updating_base] = live_manifest;
  const auto pause = store->stats().last_pause;
  cv.notify_all();
  lock.unlock();
  Tell(CommittedMsg{version, static_cast<uint64_t>(pause.count())});
  Emit({.kind = WholeSubscriberEvent::Kind::kCommitted, .version = version, .pause = pause});
}

Result<std::unique_ptr<VersionedStore>> WholeSubscriber::Impl::MakeStore(uint64_t bytes) const {
  return VersionedStore::Create(
      {.bytes = bytes, .mode = options.swap_mode, .wait_timeout = options.swap_wait_timeout});
}

Status WholeSubscriber::Impl::RegisterOnce(std::span<std::byte> buffer, std::unique_lock<std::mutex>& lock) {
  if (registered.count(buffer.data()) != 0) return Status::Ok();
  lock.unlock();  // registering a large buffer takes a while; only this thread adds to `registered`
  auto region = loop->Call([buffer](Transport& t) {
    return RegisterArena(t, buffer.data(), buffer.size(), "subscriber staging");
  });
  lock.lock();
  if (!region.ok()) return region.status();
  registered[buffer.data()] = std::move(*region);
  return Status::Ok();
}

void WholeSubscriber::Impl::RetireStore(std::unique_lock<std::mutex>& lock) {
  std::vector<std::unique_ptr<MemoryRegion>> regions;
  for (std::span<std::byte> b : store->buffers()) {
    if (auto it = registered.find(b.data()); it != registered.end()) {
      regions.push_back(std::move(it->second));
      registered.erase(it);
    }
    staged.erase(b.data());
  }
  retired_stores.push_back(std::move(store));
  lock.unlock();
  loop->Call([&regions](Transport&) { regions.clear(); });
  lock.lock();
}

void WholeSubscriber::Impl::OnAbort(uint64_t version, const std::string& why) {
  std::unique_lock<std::mutex> lock(mu);
  if (version == 0 || version != updating) return;
  updating = 0;
  if (store && store->updating()) store->Abort().IgnoreError();
  cv.notify_all();
  lock.unlock();
  Log("subscriber '" + options.name + "': version " + std::to_string(version) + " abandoned: " + why);
  Emit({.kind = WholeSubscriberEvent::Kind::kAborted, .version = version, .detail = why});
}

}  // namespace weightport
