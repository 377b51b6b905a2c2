#include <atomic>

#include "transport/testing/fake_fabric.h"

namespace weightport {
namespace {

std::atomic<uint64_t> g_next_fabric_id{1};

}  // namespace

FakeFabric::FakeFabric()
    : state_(std::make_shared<State>(g_next_fabric_id.fetch_add(1, std::memory_order_relaxed))) {}
FakeFabric::~FakeFabric() = default;

size_t FakeFabric::live_transports() const {
  MutexLock lock(state_->mu);
  return state_->endpoints.size();
}

size_t FakeFabric::registered_regions() const {
  MutexLock lock(state_->mu);
  return state_->regions.size();
}

}  // namespace weightport
