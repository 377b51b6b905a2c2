// A rank's shards on a device (PlanRankOptions::device): allocated once at Create, copied between
// the arena and the device per version. Sources copy device -> arena in Publish; destinations copy
// the verified staging copy -> the device's staging copy at the end of Receive.
#include "plan_rank_impl.h"

namespace weightport {

using namespace plan_rank_internal;

namespace {
std::string ShardName(const PlanRank::Impl& r, size_t i) {
  return r.me.ToString() + " shard " + std::to_string(i) + " (tensor '" +
         r.plan->tensors[r.buffer->shards[i].tensor].name + "')";
}
}  // namespace

Status plan_rank_internal::AllocateDeviceShards(PlanRank::Impl& r) {
  const int copies = r.is_source() ? 1 : 2;
  for (int c = 0; c < copies; ++c)
    for (size_t i = 0; i < r.buffer->shards.size(); ++i) {
      auto memory = r.options.device->Allocate(r.buffer->shards[i].bytes);
      if (!memory.ok())
        return memory.status().WithContext(ShardName(r, i) + " on " + r.options.device->name());
      r.device_shards[c].push_back(*std::move(memory));
    }
  return Status::Ok();
}

Status plan_rank_internal::CopyDeviceShards(PlanRank::Impl& r, int copy, bool to_device) {
  if (r.device_shards[copy].empty()) return Status::Ok();
  const uint64_t base = r.is_source() ? 0 : r.mine->CopyOffset(copy);
  for (size_t i = 0; i < r.buffer->shards.size(); ++i) {
    const PlannedShard& s = r.buffer->shards[i];
    std::span<std::byte> host(r.at(base + s.offset), s.bytes);
    void* device = r.device_shards[copy][i].get();
    const Status copied =
        to_device ? r.options.device->ToDevice(host, device) : r.options.device->ToHost(device, host);
    if (!copied.ok())
      return copied.WithContext(std::string(to_device ? "copying " : "reading ") + ShardName(r, i) +
                                (to_device ? " to " : " from ") + r.options.device->name());
  }
  return Status::Ok();
}

}  // namespace weightport
