// The receive state machine's frame (receive_run.h): a receive's start, its timeout, its failure
// and its end (the quantising of what landed, the device's tail, the report), and the helpers its
// parts share: where a chunk is read from and what hash it must have.
#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "receive_run.h"
#include "weightport/kernels/convert.h"

namespace weightport {
namespace plan_rank_internal {

using namespace arena_layout;

bool Fatal(const Status& s, const Connection& c) {
  const StatusCode k = s.code();
  return k == StatusCode::kUnavailable || k == StatusCode::kCancelled ||
         k == StatusCode::kFailedPrecondition || k == StatusCode::kInvalidArgument ||
         k == StatusCode::kOutOfRange || !c.healthy();
}

void ConvertChunk(PlanRank::Impl& r, size_t c, int copy) {
  const InChunk& chunk = r.c->in_chunks[c];
  std::byte* base = r.at(r.c->mine->CopyOffset(copy));
  for (uint32_t i = chunk.convert_begin; i < chunk.convert_end; ++i) {
    const ConvertSpan& span = r.c->in_converts[i];
    kernels::Convert(span.from_dtype, span.to_dtype, base + span.from, base + span.to, span.count)
        .IgnoreError();  // the pair was checked when the plan was compiled
  }
}

ReceiveRun::ReceiveRun(PlanRank::Impl& r, uint64_t version, std::function<void(Result<ReceiveStats>)> done)
    : r_(r),
      v_(version),
      staging_(r.live ^ 1),
      done_(std::move(done)),
      start_(Clock::now()),
      pacer_(r.options.max_bytes_per_s, start_, r.options.background),
      window_({.max = r.options.window,
               .delay_factor = r.options.delay_factor,
               .delay_floor = r.options.delay_floor}) {
  stats_.version = version;
  attempts_.assign(r.c->in_chunks.size(), 0);
  issued_at_.assign(r.c->in_chunks.size(), Clock::time_point{});
  pending_runs_.assign(r.c->in_chunks.size(), 0);
  from_source_device_.assign(r.c->in_chunks.size(), 0);
  run_error_.resize(r.c->in_chunks.size());
  verified_.assign(r.c->in_chunks.size(), 0);
  keeping_.assign(r.c->in_chunks.size(), 0);
  kept_.assign(r.c->in_chunks.size(), 0);
  prefix_.assign(r.c->in_steps.size(), 0);
  released_.assign(r.c->in_steps.size(), 0);
  sender_copy_.assign(r.c->in_steps.size(), 0);
  poll_backoff_.assign(r.c->in_steps.size(), r.options.backoff_initial);
  mirror_attempts_.assign(r.c->roots.size(), 0);
  level_.assign(r.c->in_steps.size(), 0);
  level_ready_.assign(r.c->in_steps.size(), 1);
  parked_.resize(r.c->in_steps.size());
  via_.assign(r.c->in_chunks.size(), 0);
  // What the staging copy holds before this receive starts writing it.
  if (r.copy_version[staging_] != 0) staging_had_ = std::move(r.copy_hashes[staging_]);
  r.copy_version[staging_] = 0;
}

void ReceiveRun::Start() {
  r_.OnLoopThread();  // a task of the loop thread
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
  for (const InStep& s : r_.c->in_steps)
    if (s.my_counter >= 0)
      StoreCounter(r_.at(static_cast<uint64_t>(s.my_counter)), EncodeCounter(v_, staging_, 0));
  std::weak_ptr<ReceiveRun> weak = keep_;
  r_.loop->PostAfter(r_.options.timeout, [weak](Transport&) {
    if (auto self = weak.lock(); self && !self->reported_) self->Fail(Timeout(self->Waiting()));
  });
  mirrors_left_ = r_.c->roots.size();
  for (size_t i = 0; i < r_.c->roots.size(); ++i) FetchMirror(i);
  MaybeFinish();
}

Connection& ReceiveRun::Conn(Endpoint ep) {
  r_.OnLoopThread();  // a task of the loop thread
  return *r_.connections.at(ep);
}

std::string ReceiveRun::Waiting() const {
  std::string why = r_.c->me.ToString() + ": version " + std::to_string(v_) + " not received within " +
                    std::to_string(r_.options.timeout.count()) + " ms: ";
  if (mirrors_left_ > 0) return why + std::to_string(mirrors_left_) + " source(s) had not published it";
  for (size_t i = 0; i < r_.c->in_steps.size(); ++i)
    if (released_[i] < r_.c->in_steps[i].chunks)
      return why + r_.StepName(r_.c->in_steps[i].step) + " waits for chunk " + std::to_string(released_[i]) +
             (level_[i] == 0 ? " at its relay " : " at ") + CurrentFrom(i).ToString() +
             (level_[i] == 0 ? "" : ", upstream of its lost relay " + r_.c->in_steps[i].sender.ToString());
  if (verified_count_ == r_.c->in_chunks.size() && device_in_flight_ > 0)
    return why + "every chunk verified, still copying to " + r_.options.device->name();
  return why + std::to_string(verified_count_) + " of " + std::to_string(r_.c->in_chunks.size()) +
         " chunks verified";
}

Endpoint ReceiveRun::CurrentFrom(size_t st) const { return LevelFrom(st, level_[st]); }

Endpoint ReceiveRun::LevelFrom(size_t st, uint32_t level) const {
  const InStep& step = r_.c->in_steps[st];
  if (level == 0) return step.sender;
  if (step.after < 0) return r_.c->alternates[step.alt_first + level - 1].from;
  return DetourAt(st, level).from;
}

const DetourLevel& ReceiveRun::DetourAt(size_t st, uint32_t level) const {
  return r_.c->detour_levels[r_.c->in_steps[st].detour_first + level - 1];
}

Endpoint ReceiveRun::From(size_t c) const { return LevelFrom(r_.c->in_chunks[c].in_step, via_[c]); }

const std::byte* ReceiveRun::Entry(size_t c) const {
  const InChunk& chunk = r_.c->in_chunks[c];
  return r_.at(r_.c->in_steps[chunk.in_step].expected_hashes + kHashEntryBytes * chunk.k);
}

uint64_t ReceiveRun::ExpectedHash(size_t c) const { return LoadWord(Entry(c)); }

uint64_t ReceiveRun::FrameBytes(size_t c) const {
  if (!r_.c->in_steps[r_.c->in_chunks[c].in_step].compressed) return 0;
  const uint64_t n = LoadWord(Entry(c) + 8);
  return n <= r_.c->slot_bytes ? n : 0;  // the mirror's check covers it; bounded all the same
}

void ReceiveRun::Fail(Status s) {
  if (failed_) return;
  failed_ = true;
  abandoned_.store(true, std::memory_order_release);
  failure_ = std::move(s);
  // Tell the ranks that relay from this one not to wait for it.
  for (const InStep& step : r_.c->in_steps)
    if (step.my_counter >= 0)
      StoreCounter(r_.at(static_cast<uint64_t>(step.my_counter)), EncodeCounter(v_, staging_, kRelayFailed));
  ready_ = {};
  MaybeFinish();
}

void ReceiveRun::MaybeFinish() {
  r_.OnLoopThread();  // a task of the loop thread
  if (reported_ || in_flight_ > 0) return;
  if (!failed_ && (mirrors_left_ > 0 || verified_count_ < r_.c->in_chunks.size())) return;
  if (!failed_ && !r_.c->in_quantize.empty() && !quantized_) {
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
  stats_.congestion_events = window_.loss_cuts();
  stats_.delay_backoffs = window_.delay_cuts();
  stats_.min_window = window_.min_size();
  if (device_tail_) stats_.to_device = now - host_done_;
  auto done = std::move(done_);
  auto keep = std::move(keep_);  // pending timers keep their own references
  if (failed_) {
    done(failure_);
  } else {
    std::vector<uint64_t>& hashes = r_.copy_hashes[staging_];
    hashes.resize(r_.c->in_chunks.size());
    for (size_t c = 0; c < r_.c->in_chunks.size(); ++c) hashes[c] = ExpectedHash(c);
    r_.copy_version[staging_] = v_;
    done(stats_);
  }
}

}  // namespace plan_rank_internal

void StartReceive(PlanRank::Impl& rank, uint64_t version, std::function<void(Result<ReceiveStats>)> done) {
  std::make_shared<plan_rank_internal::ReceiveRun>(rank, version, std::move(done))->Start();
}

}  // namespace weightport
