#include "weightport/engine/common/transport_factory.h"

#include <vector>

#include "weightport/transport/ucx_transport.h"

namespace weightport {

Result<TransportFactory> UcxTransportFactory(const std::string& choice) {
  std::vector<std::string> tls;
  if (choice == "shm") {
    tls = {"posix", "sysv", "cma", "self"};
  } else if (choice == "tcp") {
    tls = {"tcp"};
  } else if (choice != "auto") {
    return InvalidArgument("transport must be shm, tcp or auto, got '" + choice + "'");
  }
  return TransportFactory([tls](const std::string& name) {
    UcxOptions o;
    o.name = name;
    o.transports = tls;
    o.keepalive_interval = std::chrono::milliseconds(2000);
    return MakeUcxTransport(o);
  });
}

}  // namespace weightport
