// The receive state machine of a PlanRank destination: one object per Receive, living on the loop
// thread. Order of events: mirror the root sources' hash areas (retried until they show this
// version); then every chunk of a direct step is ready at once, and a relayed step's chunks become
// ready as polls of the relay's counter show them verified there; ready chunks are fetched, at most
// `window` at a time (retries first, then the lowest chunk index over all steps, so every step
// advances together), verified and, where others relay from them, counted.
#include <algorithm>
#include <atomic>
#include <cstring>
#include <deque>
#include <functional>
#include <queue>
#include <tuple>

#include "plan_rank_impl.h"
#include "weightport/core/hash.h"
#include "weightport/kernels/compress.h"
#include "weightport/kernels/convert.h"

namespace weightport {
namespace {

using namespace plan_rank_internal;
using namespace plan_layout;
using Clock = std::chrono::steady_clock;

bool Fatal(const Status& s, const Connection& c) {
  const StatusCode k = s.code();
  return k == StatusCode::kUnavailable || k == StatusCode::kCancelled ||
         k == StatusCode::kFailedPrecondition || k == StatusCode::kInvalidArgument ||
         k == StatusCode::kOutOfRange || !c.healthy();
}

// A chunk of a step converted at this rank, verified in its landing area: into the shard of `copy`.
void ConvertChunk(PlanRank::Impl& r, size_t c, int copy) {
  const InChunk& chunk = r.in_chunks[c];
  std::byte* base = r.at(r.mine->CopyOffset(copy));
  for (uint32_t i = chunk.convert_begin; i < chunk.convert_end; ++i) {
    const ConvertSpan& span = r.in_converts[i];
    kernels::Convert(span.from_dtype, span.to_dtype, base + span.from, base + span.to, span.count)
        .IgnoreError();  // the pair was checked when the plan was compiled
  }
}

// Delta: a chunk unchanged since the live copy's version, and whether the staging copy's version
// has it too.
struct KeptChunk {
  size_t chunk = 0;
  uint64_t expected = 0;
  bool in_staging = false;
};

class ReceiveRun : public std::enable_shared_from_this<ReceiveRun> {
 public:
  ReceiveRun(PlanRank::Impl& r, uint64_t version, std::function<void(Result<ReceiveStats>)> done)
      : r_(r), v_(version), staging_(r.live ^ 1), done_(std::move(done)), start_(Clock::now()) {
    stats_.version = version;
    attempts_.assign(r.in_chunks.size(), 0);
    pending_runs_.assign(r.in_chunks.size(), 0);
    from_source_device_.assign(r.in_chunks.size(), 0);
    run_error_.resize(r.in_chunks.size());
    verified_.assign(r.in_chunks.size(), 0);
    keeping_.assign(r.in_chunks.size(), 0);
    kept_.assign(r.in_chunks.size(), 0);
    prefix_.assign(r.in_steps.size(), 0);
    released_.assign(r.in_steps.size(), 0);
    sender_copy_.assign(r.in_steps.size(), 0);
    poll_backoff_.assign(r.in_steps.size(), r.options.backoff_initial);
    mirror_attempts_.assign(r.roots.size(), 0);
    level_.assign(r.in_steps.size(), 0);
    level_ready_.assign(r.in_steps.size(), 1);
    parked_.resize(r.in_steps.size());
    via_.assign(r.in_chunks.size(), 0);
    // What the staging copy holds before this receive starts writing it.
    if (r.copy_version[staging_] != 0) staging_had_ = std::move(r.copy_hashes[staging_]);
    r.copy_version[staging_] = 0;
  }

  void Start() {
    keep_ = shared_from_this();
    std::weak_ptr<ReceiveRun> me = keep_;
    r_.cancel_receive = [me](const std::string& reason) {
      if (auto self = me.lock(); self && !self->reported_)
        self->Fail(Cancelled("receive cancelled: " + reason));
    };
    r_.peer_lost_receive = [me](Endpoint peer) {
      if (auto self = me.lock(); self && !self->reported_) self->OnPeerLost(peer);
    };
    if (r_.cancelled_version.load() == v_) return Fail(Cancelled("receive cancelled before it started"));
    for (const InStep& s : r_.in_steps)
      if (s.my_counter >= 0)
        StoreCounter(r_.at(static_cast<uint64_t>(s.my_counter)), EncodeCounter(v_, staging_, 0));
    std::weak_ptr<ReceiveRun> weak = keep_;
    r_.loop->PostAfter(r_.options.timeout, [weak](Transport&) {
      if (auto self = weak.lock(); self && !self->reported_) self->Fail(Timeout(self->Waiting()));
    });
    mirrors_left_ = r_.roots.size();
    for (size_t i = 0; i < r_.roots.size(); ++i) FetchMirror(i);
    MaybeFinish();
  }

 private:
  Connection& Conn(Endpoint ep) { return *r_.connections.at(ep); }

  std::string Waiting() const {
    std::string why = r_.me.ToString() + ": version " + std::to_string(v_) + " not received within " +
                      std::to_string(r_.options.timeout.count()) + " ms: ";
    if (mirrors_left_ > 0) return why + std::to_string(mirrors_left_) + " source(s) had not published it";
    for (size_t i = 0; i < r_.in_steps.size(); ++i)
      if (released_[i] < r_.in_steps[i].chunks)
        return why + r_.StepName(r_.in_steps[i].step) + " waits for chunk " + std::to_string(released_[i]) +
               (level_[i] == 0 ? " at its relay " : " at ") + CurrentFrom(i).ToString() +
               (level_[i] == 0 ? "" : ", upstream of its lost relay " + r_.in_steps[i].sender.ToString());
    if (verified_count_ == r_.in_chunks.size() && device_in_flight_ > 0)
      return why + "every chunk verified, still copying to " + r_.options.device->name();
    return why + std::to_string(verified_count_) + " of " + std::to_string(r_.in_chunks.size()) +
           " chunks verified";
  }

  void FetchMirror(size_t i) {
    const RootSource& root = r_.roots[i];
    if (!r_.connections.count(root.endpoint))
      return Fail(FailedPrecondition(r_.me.ToString() + ": not connected to " + root.endpoint.ToString()));
    ++mirror_attempts_[i];
    ++in_flight_;
    ++stats_.polls;
    auto self = shared_from_this();
    Conn(root.endpoint)
        .Get(*r_.arena, root.mirror, r_.keys.at(root.endpoint), root.remote_offset, root.bytes,
             [self, i](const Status& s) { self->OnMirror(i, s); });
  }

  void OnMirror(size_t i, const Status& s) {
    --in_flight_;
    if (failed_) return MaybeFinish();
    const RootSource& root = r_.roots[i];
    if (!s.ok() && Fatal(s, Conn(root.endpoint)))
      return Fail(s.WithContext(r_.me.ToString() + ": chunk hashes of " + root.endpoint.ToString()));
    const std::byte* m = r_.at(root.mirror);
    const uint64_t version = s.ok() ? LoadWord(m) : 0;
    if (version > v_)
      return Fail(FailedPrecondition(root.endpoint.ToString() + " published version " +
                                     std::to_string(version) + " while " + r_.me.ToString() + " receives " +
                                     std::to_string(v_)));
    const bool good = version == v_ && LoadWord(m + 8) == HashAreaCheck(version, m, root.bytes);
    if (!good) {  // not yet published, or a torn or corrupt read: read again after a pause
      auto self = shared_from_this();
      const auto delay = std::min(r_.options.backoff_max,
                                  r_.options.backoff_initial * (1 << std::min(mirror_attempts_[i], 6)));
      r_.loop->PostAfter(delay, [self, i](Transport&) {
        if (!self->failed_) self->FetchMirror(i);
        self->MaybeFinish();
      });
      return;
    }
    if (--mirrors_left_ > 0) return;
    StartKeeping();
    for (size_t st = 0; st < r_.in_steps.size(); ++st) {
      const InStep& step = r_.in_steps[st];
      if (step.after < 0) {
        Release(st, step.chunks);
      } else if (!r_.lost_peers.count(step.sender) || !Detour(st)) {
        Poll(st);
      }
    }
    Issue();
  }

  // Where step st is read from now: its sender (level 0), or detour level l (1-based).
  Endpoint CurrentFrom(size_t st) const { return LevelFrom(st, level_[st]); }
  Endpoint LevelFrom(size_t st, uint32_t level) const {
    return level == 0 ? r_.in_steps[st].sender : DetourAt(st, level).from;
  }
  const DetourLevel& DetourAt(size_t st, uint32_t level) const {
    return r_.detour_levels[r_.in_steps[st].detour_first + level - 1];
  }

  // Routes step st around the rank it reads from now: to the nearest rank upstream that is not lost
  // (its verified chunks, as its counter shows them), else the root source (every chunk at once).
  // Chunks already released stay released: a rank verified a chunk only after the ranks upstream
  // of it did. False when no level is left (or the step's chain has another shape).
  bool Detour(size_t st) {
    const InStep& step = r_.in_steps[st];
    uint32_t next = level_[st] + 1;
    while (next < step.detour_levels && r_.lost_peers.count(LevelFrom(st, next))) ++next;  // never the source
    if (next > step.detour_levels) return false;
    if (level_[st] == 0) ++stats_.rerouted_steps;
    level_[st] = next;
    if (DetourAt(st, next).counter < 0) {
      level_ready_[st] = 1;
      Unpark(st);
      Release(st, step.chunks);
      return true;
    }
    // A relay upstream: its copy of this version is known from its counter; until then the
    // released chunks wait.
    ++stats_.rerouted_via_relay;
    level_ready_[st] = 0;
    Poll(st);
    return true;
  }

  void Unpark(size_t st) {
    for (size_t c : parked_[st]) ready_.push({0, 0, false, c});
    parked_[st].clear();
  }

  // The rank step st reads from failed or is gone: around it if the step allows, else the receive
  // fails with `why`.
  void DetourOrFail(size_t st, Status why) {
    if (!Detour(st)) return Fail(std::move(why));
    Issue();
    MaybeFinish();
  }

  // The coordinator lost `peer`: the steps that read it go upstream of it. Before the mirrors are
  // in, nothing is released yet; the loop over the steps then sees it in lost_peers.
  void OnPeerLost(Endpoint peer) {
    if (failed_ || mirrors_left_ > 0) return;
    for (size_t st = 0; st < r_.in_steps.size(); ++st) {
      const InStep& step = r_.in_steps[st];
      if (step.after < 0 || CurrentFrom(st) != peer || Detour(st)) continue;
      return Fail(
          Unavailable(r_.StepName(step.step) + ": " + peer.ToString() +
                      ", which it reads from, is lost and the step cannot be fetched from its source"));
    }
    Issue();
    MaybeFinish();
  }

  // Chunks [released, upto) of step st may go.
  void Release(size_t st, uint32_t upto) {
    const InStep& s = r_.in_steps[st];
    upto = std::min(upto, s.chunks);
    for (uint32_t k = released_[st]; k < upto; ++k) ready_.push({1, k, s.my_counter < 0, s.first_chunk + k});
    released_[st] = std::max(released_[st], upto);
  }

  // Reads the counter of the rank step st reads from now (its relay, or a relay upstream of it).
  void Poll(size_t st) {
    const InStep& s = r_.in_steps[st];
    const uint32_t level = level_[st];
    const Endpoint from = CurrentFrom(st);
    // A lost rank left out of the peer table after a rekey has no connection (PlanRank::Connect).
    if (!r_.connections.count(from))
      return Fail(FailedPrecondition(r_.me.ToString() + ": " + r_.StepName(s.step) + " reads from " +
                                     from.ToString() + ", which is lost, and has no way around it"));
    const uint64_t counter =
        level == 0 ? s.sender_counter : static_cast<uint64_t>(DetourAt(st, level).counter);
    ++in_flight_;
    ++stats_.polls;
    auto self = shared_from_this();
    Conn(from).Get(*r_.arena, s.poll_scratch, r_.keys.at(from), counter, kCounterBytes,
                   [self, st, level](const Status& status) { self->OnPoll(st, level, status); });
  }

  void OnPoll(size_t st, uint32_t level, const Status& s) {
    --in_flight_;
    // A poll of a rank the step no longer reads from is no news.
    if (failed_ || level != level_[st]) return MaybeFinish();
    const InStep& step = r_.in_steps[st];
    const Endpoint from = CurrentFrom(st);
    if (!s.ok() && Fatal(s, Conn(from)))
      return DetourOrFail(st, s.WithContext(r_.StepName(step.step) + ": progress of " + from.ToString()));
    bool progressed = false;
    // A torn or corrupt read of the counter fails its check and is no news.
    const std::optional<uint64_t> counter = s.ok() ? LoadCounter(r_.at(step.poll_scratch)) : std::nullopt;
    if (counter) {
      const uint64_t word = *counter;
      if (CounterVersion(word) == v_ && CounterPrefix(word) == kRelayFailed)
        return DetourOrFail(st, Unavailable(r_.StepName(step.step) + ": " + from.ToString() +
                                            ", which it reads from, failed version " + std::to_string(v_)));
      if (CounterVersion(word) == v_ && (CounterPrefix(word) > released_[st] || !level_ready_[st])) {
        sender_copy_[st] = CounterCopy(word);
        if (!level_ready_[st]) {
          level_ready_[st] = 1;
          Unpark(st);
        }
        Release(st, CounterPrefix(word));
        progressed = true;
      }
    }
    if (released_[st] < step.chunks || !level_ready_[st]) {
      // Poll again: at once while the relay makes progress, with growing pauses while it does not.
      auto& backoff = poll_backoff_[st];
      backoff = progressed ? r_.options.backoff_initial : std::min(r_.options.relay_poll_max, backoff * 2);
      auto self = shared_from_this();
      r_.loop->PostAfter(progressed ? std::chrono::milliseconds(0) : backoff, [self, st, level](Transport&) {
        // Once reported (every chunk verified, some of them kept) nothing more is read.
        if (!self->failed_ && !self->reported_ && self->level_[st] == level) self->Poll(st);
        self->MaybeFinish();
      });
    }
    Issue();
    MaybeFinish();  // the chunks it released may all be kept already
  }

  void Issue() {
    while (!failed_ && chunks_in_flight_ < r_.options.window && !ready_.empty()) {
      const size_t c = std::get<3>(ready_.top());
      ready_.pop();
      if (keeping_[c] || verified_[c]) continue;  // kept from the live copy, or being kept
      const size_t st = r_.in_chunks[c].in_step;
      if (!level_ready_[st]) {  // its step waits for the first poll of the rank it now reads from
        parked_[st].push_back(c);
        continue;
      }
      FetchChunk(c);
    }
  }

  // Where chunk c is read from: the rank its step read from when the chunk was fetched.
  Endpoint From(size_t c) const { return LevelFrom(r_.in_chunks[c].in_step, via_[c]); }

  void FetchChunk(size_t c) {
    const InChunk& chunk = r_.in_chunks[c];
    const InStep& s = r_.in_steps[chunk.in_step];
    const uint32_t level = level_[chunk.in_step];
    const bool detoured = level != 0;
    via_[c] = level;
    const Endpoint from = From(c);
    const uint64_t remote_base =
        r_.layouts.at(from).CopyOffset(from.side == PlanSide::kSource ? 0 : sender_copy_[chunk.in_step]);
    const uint64_t local_base = r_.mine->CopyOffset(staging_);
    ++chunks_in_flight_;
    ++attempts_[c];
    run_error_[c] = Status::Ok();
    Connection& conn = Conn(from);
    const RemoteKey& key = r_.keys.at(from);
    auto self = shared_from_this();
    if (const uint64_t frame = FrameBytes(c); frame > 0) {  // one Get, slot to slot
      pending_runs_[c] = 1;
      ++in_flight_;
      const uint64_t slot = chunk.k * r_.slot_bytes;
      conn.Get(*r_.arena, local_base + s.my_slots + slot, key,
               remote_base + (detoured ? s.root_slots : s.sender_slots) + slot, frame,
               [self, c](const Status& status) { self->OnRun(c, status); });
      return;
    }
    const std::vector<Run>& runs = detoured ? r_.detour_runs : r_.in_runs;
    const RunRange range = detoured ? r_.detour_ranges[chunk.detour_ranges + level - 1]
                                    : RunRange{chunk.run_begin, chunk.run_end};
    const uint32_t begin = range.begin, end = range.end;
    pending_runs_[c] = end - begin;
    const bool direct = r_.direct_chunks[c];  // straight into the device's staging copy
    // A source that publishes on its device: what lies within its shards is read from there.
    auto device = r_.source_devices.find(from);
    const PlanRank::Impl::SourceDevice* source =
        device == r_.source_devices.end() ? nullptr : &device->second;
    from_source_device_[c] = 0;
    for (uint32_t i = begin; i < end; ++i) {
      const Run& run = runs[i];
      const std::optional<uint64_t> at_source =
          source ? source->layout.OffsetOf(run.from, run.length) : std::nullopt;
      if (at_source) from_source_device_[c] += run.length;
      ++in_flight_;
      conn.Get(direct ? *r_.device_regions[staging_] : *r_.arena,
               direct ? *r_.device_layout.OffsetOf(run.to, run.length) : local_base + run.to,
               at_source ? source->key : key, at_source ? *at_source : remote_base + run.from, run.length,
               [self, c](const Status& status) { self->OnRun(c, status); });
    }
  }

  void OnRun(size_t c, const Status& s) {
    --in_flight_;
    if (!s.ok() && run_error_[c].ok()) run_error_[c] = s;
    if (--pending_runs_[c] > 0) return;
    --chunks_in_flight_;
    if (failed_) return MaybeFinish();
    const InChunk& chunk = r_.in_chunks[c];
    const InStep& step = r_.in_steps[chunk.in_step];
    const std::string what =
        r_.StepName(step.step) + " chunk " + std::to_string(chunk.k) + " from " + From(c).ToString();
    if (!run_error_[c].ok()) {
      if (Fatal(run_error_[c], Conn(From(c)))) {
        // The rank read from lost mid-chunk: the chunk and the rest of its step come from upstream
        // of it (unless the step went there already).
        if (via_[c] < level_[chunk.in_step] || Detour(chunk.in_step)) {
          --attempts_[c];
          ready_.push({0, 0, false, c});
          Issue();
          return MaybeFinish();
        }
        return Fail(run_error_[c].WithContext(what));
      }
      ++stats_.errors_retried;
      return Retry(c, run_error_[c], what);
    }
    std::byte* copy = r_.at(r_.mine->CopyOffset(staging_));
    const uint64_t frame = FrameBytes(c);
    if (frame > 0) {  // into the chunk's runs, in piece order
      frame_scratch_.resize(chunk.bytes);
      Status unpacked = kernels::ZstdDecompress(
          std::span<const std::byte>(copy + step.my_slots + chunk.k * r_.slot_bytes, frame), frame_scratch_);
      if (!unpacked.ok()) {
        ++stats_.corrupt_refetched;
        return Retry(c, unpacked, what);
      }
      uint64_t at = 0;
      for (uint32_t i = chunk.run_begin; i < chunk.run_end; ++i) {
        const Run& run = r_.in_runs[i];
        std::memcpy(copy + run.to, frame_scratch_.data() + at, run.length);
        at += run.length;
      }
    }
    if (r_.direct_chunks[c]) return OnDirectRun(c, what);
    const uint64_t got = HashRuns(copy, r_.in_runs, chunk.run_begin, chunk.run_end, &Run::to);
    if (got != ExpectedHash(c)) {
      ++stats_.corrupt_refetched;
      return Retry(c, DataLoss("hash mismatch"), what);
    }
    ConvertChunk(r_, c, staging_);  // a chunk landed unconverted: into the shard, checked bytes only
    stats_.frames += frame > 0;
    stats_.frame_bytes += frame;
    ++stats_.chunks;
    stats_.bytes += chunk.bytes;
    Verified(c);
    ToDevice({c}, /*kept=*/false);
    Issue();
    MaybeFinish();
  }

  // A chunk the transport wrote into the device's staging copy: hashed there, on the rank's
  // verifier thread (a GPU's hash waits for its kernel; the loop keeps serving the transport), then
  // back on the loop. Nothing writes the chunk's bytes meanwhile: a refetch comes after the result.
  void OnDirectRun(size_t c, std::string what) {
    ++in_flight_;
    auto self = shared_from_this();
    r_.direct_verifier->Submit([self, c, what = std::move(what)]() mutable {
      Result<uint64_t> got = self->abandoned_.load(std::memory_order_acquire)
                                 ? Result<uint64_t>(uint64_t{0})
                                 : HashOnDevice(self->r_, self->staging_, c);
      self->r_.loop->Post([self, c, what = std::move(what), got = std::move(got)](Transport&) {
        --self->in_flight_;
        self->OnDirectHashed(c, what, got);
      });
    });
  }

  void OnDirectHashed(size_t c, const std::string& what, const Result<uint64_t>& got) {
    if (failed_) return MaybeFinish();
    if (!got.ok())
      return Fail(got.status().WithContext("verifying " + what + " on " + r_.options.device->name()));
    if (*got != ExpectedHash(c)) {
      ++stats_.corrupt_refetched;
      return Retry(c, DataLoss("hash mismatch on " + r_.options.device->name()), what);
    }
    const uint64_t bytes = r_.in_chunks[c].bytes;
    ++stats_.chunks;
    stats_.bytes += bytes;
    stats_.device_direct_bytes += bytes;
    Verified(c);
    Issue();
    MaybeFinish();
  }

  void Verified(size_t c) {
    const InChunk& chunk = r_.in_chunks[c];
    const InStep& step = r_.in_steps[chunk.in_step];
    verified_[c] = 1;
    ++verified_count_;
    stats_.source_device_bytes += from_source_device_[c];
    if (step.my_counter >= 0) {  // advance the verified prefix others poll
      uint32_t& p = prefix_[chunk.in_step];
      while (p < step.chunks && verified_[step.first_chunk + p]) ++p;
      StoreCounter(r_.at(static_cast<uint64_t>(step.my_counter)), EncodeCounter(v_, staging_, p));
    }
  }

  // The chunk's entry in the mirrored hash area of its root: {hash, compressed length}.
  const std::byte* Entry(size_t c) const {
    const InChunk& chunk = r_.in_chunks[c];
    return r_.at(r_.in_steps[chunk.in_step].expected_hashes + kHashEntryBytes * chunk.k);
  }
  uint64_t ExpectedHash(size_t c) const { return LoadWord(Entry(c)); }
  // The size of the chunk's zstd frame, or 0 when it travels as is.
  uint64_t FrameBytes(size_t c) const {
    if (!r_.in_steps[r_.in_chunks[c].in_step].compressed) return 0;
    const uint64_t n = LoadWord(Entry(c) + 8);
    return n <= r_.slot_bytes ? n : 0;  // the mirror's check covers it; bounded all the same
  }

  // Delta: the chunks whose hash is the one they had in the live copy's version are copied from
  // there on the keeper threads, in batches, and hashed again; they are not fetched unless that
  // hash differs (someone wrote to the live copy).
  void StartKeeping() {
    const int live = staging_ ^ 1;
    const std::vector<uint64_t>& live_hashes = r_.copy_hashes[live];
    if (!r_.options.delta || !r_.keepers || r_.live_version == 0 ||
        r_.copy_version[live] != r_.live_version || live_hashes.size() != r_.in_chunks.size())
      return;
    const bool staging_known = staging_had_.size() == r_.in_chunks.size();
    constexpr uint64_t kBatchBytes = 8ull << 20;  // several per keeper thread on a large model
    std::vector<KeptChunk> batch;
    uint64_t bytes = 0;
    auto submit = [&] {
      if (batch.empty()) return;
      ++in_flight_;
      auto self = shared_from_this();
      r_.keepers->Submit([self, batch = std::move(batch)] { self->Keep(batch); });
      batch.clear();
      bytes = 0;
    };
    for (size_t c = 0; c < r_.in_chunks.size(); ++c) {
      const uint64_t expected = ExpectedHash(c);
      if (expected != live_hashes[c]) continue;
      keeping_[c] = 1;
      batch.push_back({c, expected, staging_known && staging_had_[c] == expected});
      bytes += r_.in_chunks[c].bytes;
      if (bytes >= kBatchBytes) submit();
    }
    submit();
  }

  // On a keeper thread: touches only the staging copy's bytes of these chunks.
  void Keep(const std::vector<KeptChunk>& batch) {
    const std::byte* live = r_.at(r_.mine->CopyOffset(staging_ ^ 1));
    std::byte* staging = r_.at(r_.mine->CopyOffset(staging_));
    std::vector<std::pair<size_t, bool>> kept;
    for (auto [c, expected, in_staging] : batch) {
      const InChunk& chunk = r_.in_chunks[c];
      if (r_.direct_chunks[c]) {  // on the device only: copied there from its live copy (ToDevice)
        kept.emplace_back(c, true);
        continue;
      }
      // Already there since the version the staging copy held, converted and with its frame: hashed,
      // not copied. Hashed all the same: that copy was the live one before, which readers may
      // have written to (shard_bytes).
      if (in_staging) {
        const bool same = HashRuns(staging, r_.in_runs, chunk.run_begin, chunk.run_end, &Run::to) == expected;
        if (same) {
          // The hash covers the landing area, not what a conversion wrote from it into the shard,
          // which a reader may have written to: converted again.
          ConvertChunk(r_, c, staging_);
          kept.emplace_back(c, true);
          continue;
        }
      }
      for (uint32_t i = chunk.run_begin; i < chunk.run_end; ++i) {
        const Run& run = r_.in_runs[i];
        std::memcpy(staging + run.to, live + run.to, run.length);
      }
      // The frame too (zstd is deterministic: the same bytes, the same frame): ranks relaying from
      // this one read it here.
      if (const uint64_t frame = FrameBytes(c); frame > 0) {
        const uint64_t slot = r_.in_steps[chunk.in_step].my_slots + chunk.k * r_.slot_bytes;
        std::memcpy(staging + slot, live + slot, frame);
      }
      const bool same = HashRuns(staging, r_.in_runs, chunk.run_begin, chunk.run_end, &Run::to) == expected;
      if (same) ConvertChunk(r_, c, staging_);
      kept.emplace_back(c, same);
    }
    auto self = shared_from_this();
    r_.loop->Post([self, kept = std::move(kept)](Transport&) { self->OnKept(kept); });
  }

  void OnKept(const std::vector<std::pair<size_t, bool>>& kept) {
    --in_flight_;
    std::vector<size_t> to_device;
    for (auto [c, same] : kept) {
      keeping_[c] = 0;
      const InChunk& chunk = r_.in_chunks[c];
      if (same) {
        kept_[c] = 1;
        ++stats_.kept_chunks;
        stats_.kept_bytes += chunk.bytes;
        Verified(c);
        to_device.push_back(c);
      } else if (chunk.k < released_[chunk.in_step]) {  // else it is fetched once released
        ready_.push({0, chunk.k, false, c});
      }
    }
    if (failed_) return MaybeFinish();
    ToDevice(std::move(to_device), /*kept=*/true);
    Issue();
    MaybeFinish();
  }

  // PlanRankOptions::device: `copy` (ChunksToDevice, BandToDevice, TailToDevice) on the device
  // copier's thread; back on the loop, what it copied is counted or the receive fails.
  void OnDeviceCopier(std::function<Result<DeviceCopied>()> copy) {
    if (!r_.device_copier || failed_) return;
    ++device_in_flight_;
    auto self = shared_from_this();
    r_.device_copier->Submit([self, copy = std::move(copy)] {
      const auto t0 = Clock::now();
      // Once the receive failed its staging device copy is thrown away: what is queued is skipped.
      Result<DeviceCopied> copied =
          self->abandoned_.load(std::memory_order_acquire) ? Result<DeviceCopied>(DeviceCopied{}) : copy();
      const auto spent = Clock::now() - t0;
      self->r_.loop->Post([self, copied, spent](Transport&) {
        --self->device_in_flight_;
        self->stats_.device_copy += spent;
        if (copied.ok()) {
          self->stats_.device_bytes += copied->bytes;
          self->stats_.device_kept_bytes += copied->on_device;
        } else {
          self->Fail(copied.status());  // once failed, a no-op
        }
        self->MaybeFinish();
      });
    });
  }
  // Verified chunks: fetched (from the staging copy) or kept (from the live device copy). Their
  // bytes in the staging copy no longer change in this receive.
  void ToDevice(std::vector<size_t> chunks, bool kept) {
    if (chunks.empty()) return;
    OnDeviceCopier(
        [this, chunks = std::move(chunks), kept] { return ChunksToDevice(r_, staging_, chunks, kept); });
  }

  // A band quantised here (or reused: from the live device copy), once its output is final.
  void BandToDevice(size_t band, bool reused) {
    OnDeviceCopier(
        [this, band, reused] { return plan_rank_internal::BandToDevice(r_, staging_, band, reused); });
  }

  void Retry(size_t c, const Status& why, const std::string& what) {
    if (attempts_[c] >= r_.options.max_attempts)
      return Fail(Status(
          why.code(), what + ": " + why.message() + " after " + std::to_string(attempts_[c]) + " attempts"));
    auto delay =
        std::min(r_.options.backoff_max, r_.options.backoff_initial * (1 << std::min(attempts_[c] - 1, 16)));
    auto self = shared_from_this();
    r_.loop->PostAfter(delay, [self, c](Transport&) {
      if (self->failed_) return self->MaybeFinish();
      self->ready_.push({0, 0, false, c});
      self->Issue();
    });
    Issue();
  }

  void Fail(Status s) {
    if (failed_) return;
    failed_ = true;
    abandoned_.store(true, std::memory_order_release);
    failure_ = std::move(s);
    // Tell the ranks that relay from this one not to wait for it.
    for (const InStep& step : r_.in_steps)
      if (step.my_counter >= 0)
        StoreCounter(r_.at(static_cast<uint64_t>(step.my_counter)),
                     EncodeCounter(v_, staging_, kRelayFailed));
    ready_ = {};
    MaybeFinish();
  }

  void MaybeFinish() {
    if (reported_ || in_flight_ > 0) return;
    if (!failed_ && (mirrors_left_ > 0 || verified_count_ < r_.in_chunks.size())) return;
    if (!failed_ && !r_.in_quantize.empty() && !quantized_) {
      // Every piece landed: the shards quantised here, off the loop thread (it serves the ranks
      // that relay from this one's landing areas); bands whose chunks were all kept are copied.
      quantized_ = true;
      ++in_flight_;
      auto self = shared_from_this();
      r_.keepers->Submit([self] {
        // On a device, each band is copied there as soon as it is quantised, while the rest are.
        // Its post reaches the loop before the one below (the loop's queue is FIFO, and every band
        // is done before QuantizeLanded returns), so every band's copy is counted in
        // device_in_flight_ before the receive can finish.
        std::function<void(size_t, bool)> band_done;
        if (self->r_.device_copier)
          band_done = [self](size_t j, bool reused) {
            self->r_.loop->Post([self, j, reused](Transport&) { self->BandToDevice(j, reused); });
          };
        std::vector<uint8_t> reused = QuantizeLanded(self->r_, self->staging_, self->kept_, band_done);
        self->r_.loop->Post([self, reused = std::move(reused)](Transport&) {
          --self->in_flight_;
          const auto n = static_cast<uint64_t>(std::count(reused.begin(), reused.end(), 1));
          self->stats_.bands_reused += n;
          self->stats_.bands_quantized += reused.size() - n;
          self->MaybeFinish();
        });
      });
      return;
    }
    if (!failed_ && r_.device_copier && !device_tail_) {  // the host has it all: the rest to the device
      device_tail_ = true;
      host_done_ = Clock::now();
      OnDeviceCopier([this] { return TailToDevice(r_, staging_); });
    }
    if (device_in_flight_ > 0) return;  // a failed receive too: they read the staging copy
    reported_ = true;
    r_.cancel_receive = nullptr;
    r_.peer_lost_receive = nullptr;
    const auto now = Clock::now();
    stats_.elapsed = now - start_;
    if (device_tail_) stats_.to_device = now - host_done_;
    auto done = std::move(done_);
    auto keep = std::move(keep_);  // pending timers keep their own references
    if (failed_) {
      done(failure_);
    } else {
      std::vector<uint64_t>& hashes = r_.copy_hashes[staging_];
      hashes.resize(r_.in_chunks.size());
      for (size_t c = 0; c < r_.in_chunks.size(); ++c) hashes[c] = ExpectedHash(c);
      r_.copy_version[staging_] = v_;
      done(stats_);
    }
  }

  PlanRank::Impl& r_;
  const uint64_t v_;
  const int staging_;
  std::function<void(Result<ReceiveStats>)> done_;
  Clock::time_point start_;
  ReceiveStats stats_;
  std::vector<int> attempts_;
  std::vector<uint32_t> pending_runs_;
  std::vector<uint64_t> from_source_device_;  // per chunk: bytes its last fetch read from a source's device
  std::vector<Status> run_error_;
  std::vector<uint8_t> verified_;
  std::vector<uint8_t> keeping_;          // delta: being copied from the live copy
  std::vector<uint8_t> kept_;             // delta: copied from the live copy, unchanged
  std::vector<std::byte> frame_scratch_;  // a decompressed chunk on its way into its runs
  std::vector<uint64_t> staging_had_;     // hashes of the version the staging copy held, or empty
  std::vector<uint32_t> prefix_;
  std::vector<uint32_t> released_;
  std::vector<int> sender_copy_;
  std::vector<std::chrono::milliseconds> poll_backoff_;
  std::vector<int> mirror_attempts_;
  std::vector<uint32_t> level_;              // per step: 0 its sender, l its detour level l (1-based)
  std::vector<uint8_t> level_ready_;         // per step: the copy of the rank read from now is known
  std::vector<std::vector<size_t>> parked_;  // per step: released chunks waiting for level_ready_
  std::vector<uint32_t> via_;                // per chunk: the level it was last fetched from
  // Chunks that may be fetched, least first: (0 a retry | 1, index within its step, nobody relays
  // from its step, chunk). By index, not by release order: a direct step releases all its chunks at
  // once, and in FIFO order they filled the window ahead of the relayed steps' chunks, so the ranks
  // downstream of this one waited (a 7-hop chain ran 1.5x slower with 1 MiB chunks than with 2 MiB).
  using ReadyChunk = std::tuple<int, uint32_t, bool, size_t>;
  std::priority_queue<ReadyChunk, std::vector<ReadyChunk>, std::greater<>> ready_;
  size_t mirrors_left_ = 0;
  size_t chunks_in_flight_ = 0;
  size_t in_flight_ = 0;  // Gets issued and not completed
  size_t verified_count_ = 0;
  bool failed_ = false;
  bool quantized_ = false;              // the shards quantised here are (in_quantize)
  size_t device_in_flight_ = 0;         // device copier tasks not yet back on the loop
  std::atomic<bool> abandoned_{false};  // failed: device copier tasks not yet started do nothing
  bool device_tail_ = false;            // the copy of what no chunk fills is submitted
  Clock::time_point host_done_;         // every chunk verified (and quantised) in the staging copy
  bool reported_ = false;
  Status failure_;
  std::shared_ptr<ReceiveRun> keep_;
};

}  // namespace

void StartReceive(PlanRank::Impl& rank, uint64_t version, std::function<void(Result<ReceiveStats>)> done) {
  std::make_shared<ReceiveRun>(rank, version, std::move(done))->Start();
}

}  // namespace weightport
