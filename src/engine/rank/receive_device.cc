// The device sink, a part of the receive (receive_run.h): with PlanRankOptions::device, verified
// chunks and quantised bands go to the device's staging copy on the device copier's thread.
#include <functional>
#include <utility>
#include <vector>

#include "receive_run.h"

namespace weightport {
namespace plan_rank_internal {

using namespace arena_layout;

void ReceiveRun::OnDeviceCopier(std::function<Result<DeviceCopied>()> copy) {
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

void ReceiveRun::ToDevice(std::vector<size_t> chunks, bool kept) {
  if (chunks.empty()) return;
  OnDeviceCopier(
      [this, chunks = std::move(chunks), kept] { return ChunksToDevice(r_, staging_, chunks, kept); });
}

void ReceiveRun::BandToDevice(size_t band, bool reused) {
  OnDeviceCopier(
      [this, band, reused] { return plan_rank_internal::BandToDevice(r_, staging_, band, reused); });
}

}  // namespace plan_rank_internal

}  // namespace weightport
