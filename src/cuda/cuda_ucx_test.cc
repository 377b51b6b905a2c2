// GPU memory handed to UCX as it is: with a CUDA-aware UCX (scripts/setup --ucx-cuda, built with
// -DWEIGHTPORT_UCX_ROOT) a device buffer registers like host memory and UCX moves it itself (its
// cuda_copy and cuda_ipc transports), no staging through pinned host buffers. Skips, saying why,
// without a GPU or with a UCX built without CUDA (Debian's).
#include <gtest/gtest.h>

#include <algorithm>
#include <vector>

#include "cuda/cuda_test_util.h"
#include "transport/conformance/transport_conformance.h"
#include "weightport/cuda/device_buffer.h"
#include "weightport/transport/ucx_transport.h"

namespace weightport {
namespace {

using conformance::FillPattern;
using conformance::HasPattern;
using conformance::IsOk;
using conformance::Tally;
using conformance::TestPeer;

// Why UCX cannot take device memory here, or "" when it can.
std::string NoCudaUcxReason() {
  if (std::string why = cuda_test::NoGpuReason(); !why.empty()) return why;
  const Status ucx = UcxTakesCudaMemory();
  return ucx.ok() ? "" : ucx.message();
}

// GPU memory registered with `peer`'s transport; the registration is released on that transport's
// loop thread, as TestPeer's own are, whichever way the test ends.
struct DeviceRegion {
  TestPeer* peer = nullptr;
  DeviceBuffer buffer;
  std::unique_ptr<MemoryRegion> region;
  RemoteKey key;
  DeviceRegion() = default;
  DeviceRegion(DeviceRegion&&) = default;
  ~DeviceRegion() {
    if (peer != nullptr && region != nullptr) peer->loop().Call([this](Transport&) { region.reset(); });
  }
};

// `bytes` of device memory registered with `peer`'s transport, filled from `host` when given.
Result<DeviceRegion> RegisterDevice(TestPeer& peer, size_t bytes, const std::vector<std::byte>* host) {
  DeviceRegion d;
  d.peer = &peer;
  WP_ASSIGN_OR_RETURN(d.buffer, DeviceBuffer::Allocate(bytes));
  std::vector<std::byte> zeros(bytes);
  WP_RETURN_IF_ERROR(d.buffer.CopyFrom(host ? *host : zeros));
  WP_ASSIGN_OR_RETURN(d.region,
                      peer.loop().Call([&](Transport& t) { return t.Register(d.buffer.data(), bytes); }));
  WP_ASSIGN_OR_RETURN(d.key, RemoteKey::Deserialize(d.region->remote_key().Serialize(), peer.name()));
  return d;
}

// A Put from one GPU buffer into another through UCX, then a Get back into a third, at odd offsets:
// each lands byte for byte.
TEST(CudaUcx, DeviceMemoryRegisteredWithACudaAwareUcxIsMovedByUcx) {
  if (std::string why = NoCudaUcxReason(); !why.empty()) GTEST_SKIP() << why;
  conformance::TransportConformanceParam param;
  param.factory = [](const std::string& name) {
    UcxOptions options;
    options.name = name;
    return MakeUcxTransport(options);  // UCX's default transports: cuda_copy, cuda_ipc among them
  };
  constexpr size_t kBytes = 64 << 20, kOffset = 4099, kLength = kBytes - 2 * kOffset;
  WP_ASSERT_OK_AND_ASSIGN(auto a, TestPeer::Create(param, "gpu-a"));
  WP_ASSERT_OK_AND_ASSIGN(auto b, TestPeer::Create(param, "gpu-b"));
  std::vector<std::byte> pattern(kBytes);
  FillPattern(pattern.data(), kBytes, 7);
  WP_ASSERT_OK_AND_ASSIGN(DeviceRegion src, RegisterDevice(*a, kBytes, &pattern));
  WP_ASSERT_OK_AND_ASSIGN(DeviceRegion dst, RegisterDevice(*b, kBytes, nullptr));
  WP_ASSERT_OK_AND_ASSIGN(DeviceRegion back, RegisterDevice(*a, kBytes, nullptr));
  WP_ASSERT_OK_AND_ASSIGN(Connection * conn, a->Connect(*b));
  Tally put(2);
  // What the posted tasks use is captured by value: after a failed wait they may still run.
  a->loop().Post([conn, from = src.region.get(), to = dst.key, put](Transport&) {
    conn->Put(*from, kOffset, to, kOffset, kLength, put.callback(0));
    conn->Flush(put.callback(1));
  });
  ASSERT_TRUE(put.WaitAll());
  ASSERT_TRUE(IsOk(put.status(0))) << put.status(0).ToString();
  Tally get(1);
  a->loop().Post([conn, into = back.region.get(), from = dst.key, get](Transport&) {
    conn->Get(*into, kOffset, from, kOffset, kLength, get.callback(0));
  });
  ASSERT_TRUE(get.WaitAll());
  ASSERT_TRUE(IsOk(get.status(0))) << get.status(0).ToString();
  for (const DeviceRegion* d : {&dst, &back}) {
    std::vector<std::byte> host(kBytes);
    ASSERT_TRUE(IsOk(d->buffer.CopyTo(host)));
    EXPECT_TRUE(HasPattern(host.data() + kOffset, kLength, 7, kOffset));
    EXPECT_TRUE(std::all_of(host.begin(), host.begin() + kOffset, [](std::byte x) {
      return x == std::byte{0};
    })) << "bytes before the range were written";
  }
}

}  // namespace
}  // namespace weightport
