#include "cuda_bench_ucx.h"

#include <future>
#include <memory>
#include <string>
#include <vector>

#include "cuda_bench_util.h"
#include "weightport/cuda/convert.h"
#include "weightport/transport/progress_loop.h"
#include "weightport/transport/ucx_transport.h"

namespace weightport::bench {
namespace {

// One transport on its loop thread, with one registration and maybe a connection, released there
// before the loop stops, on every way out of MeasureUcxPut.
struct Side {
  std::unique_ptr<ProgressLoop> loop;
  std::unique_ptr<MemoryRegion> region;
  std::shared_ptr<Connection> conn;
  ~Side() {
    if (loop) loop->Call([this](Transport&) { conn.reset(), region.reset(); });
  }
};

Result<std::unique_ptr<Side>> MakeSide(const std::string& name, const DeviceBuffer& buffer) {
  UcxOptions options;
  options.name = name;
  WP_ASSIGN_OR_RETURN(std::unique_ptr<Transport> transport, MakeUcxTransport(options));
  auto side = std::make_unique<Side>();
  side->loop = std::make_unique<ProgressLoop>(std::move(transport));
  WP_ASSIGN_OR_RETURN(
      side->region, side->loop->Call([&](Transport& t) { return t.Register(buffer.data(), buffer.size()); }));
  return side;
}

}  // namespace

Result<nlohmann::json> MeasureUcxPut(const DeviceBuffer& src, const DeviceBuffer& dst, int runs) {
  WP_RETURN_IF_ERROR(UcxTakesCudaMemory());
  if (dst.size() < src.size()) return InvalidArgument("UCX put: the destination is smaller than the source");
  WP_ASSIGN_OR_RETURN(std::unique_ptr<Side> a, MakeSide("bench-a", src));
  WP_ASSIGN_OR_RETURN(std::unique_ptr<Side> b, MakeSide("bench-b", dst));
  const Bytes address = b->loop->Call([](Transport& t) { return t.address(); });
  WP_ASSIGN_OR_RETURN(const RemoteKey key,
                      RemoteKey::Deserialize(b->region->remote_key().Serialize(), "bench-b"));
  WP_ASSIGN_OR_RETURN(a->conn, a->loop->Call([&](Transport& t) { return t.Connect(address, "bench-b"); }));
  const uint64_t n = src.size();
  // A Put of everything and a Flush; both complete on the loop thread, the first error wins.
  auto put = [&]() -> Result<double> {
    std::promise<Status> done;
    int left = 2;
    Status first;
    auto complete = [&](const Status& s) {
      if (first.ok() && !s.ok()) first = s;
      if (--left == 0) done.set_value(first);
    };
    const auto t0 = Clock::now();
    a->loop->Post([&](Transport&) {
      a->conn->Put(*a->region, 0, key, 0, n, complete);
      a->conn->Flush(complete);
    });
    WP_RETURN_IF_ERROR(done.get_future().get());
    return Seconds(Clock::now() - t0);
  };
  std::vector<double> put_gbps, copy_gbps;
  for (int r = 0; r < runs + 1; ++r) {
    WP_ASSIGN_OR_RETURN(const double p, put());
    WP_ASSIGN_OR_RETURN(const double c, Timed([&] {
                          return CudaConvert(DType::kU8, DType::kU8, src.data(), dst.data(), n);
                        }));
    if (r == 0) continue;  // warm-up: UCX wires up and maps on the first
    put_gbps.push_back(2.0 * n / p / 1e9);
    copy_gbps.push_back(2.0 * n / c / 1e9);
  }
  const double put_median = Summarize(put_gbps).median, copy_median = Summarize(copy_gbps).median;
  return nlohmann::json{
      {"put_gbps", put_median}, {"copy_gbps", copy_median}, {"ratio", put_median / copy_median}};
}

}  // namespace weightport::bench
