// The transport conformance suite, run on the in-process fake transport.
#include "transport/conformance/transport_conformance.h"
#include "weightport/transport/testing/fake_transport.h"

namespace weightport::conformance {
namespace {

TransportConformanceParam FakeParam() {
  // One fabric for every transport of the suite: ids are fabric-unique, so tests cannot collide.
  auto fabric = std::make_shared<FakeFabric>();
  return TransportConformanceParam{
      .name = "Fake",
      .factory = [fabric](const std::string& name) { return MakeFakeTransport(fabric, name); },
      .supports_fork = false,  // the fabric is in-process memory
      .max_size = uint64_t{1} << 30,
  };
}

INSTANTIATE_TEST_SUITE_P(Fake, TransportConformance, ::testing::Values(FakeParam()), ParamName);

}  // namespace
}  // namespace weightport::conformance
