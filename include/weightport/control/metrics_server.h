// A minimal HTTP server for the engine's metrics (metrics.h): GET /metrics renders the registry in
// the Prometheus text exposition format 0.0.4.
//
// Thread-safety: MetricsServer reads the registry from its own thread; Start, Stop, port and address
// may be called from any thread, and the Metrics passed to Start must outlive the server.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "weightport/control/metrics.h"
#include "weightport/core/status.h"

namespace weightport {

struct MetricsServerOptions {
  // Time for a client to send its whole request (and to take the response).
  std::chrono::milliseconds request_timeout{2000};
  // Largest request head (request line and headers), at most 1 MiB; larger is answered 431 and
  // closed.
  size_t max_request_bytes = 8 * 1024;
  // Connections served at once; one more closes the oldest. At least 1.
  size_t max_connections = 64;
};

// Minimal HTTP/1.1 server. GET (or HEAD) /metrics -> 200 "text/plain; version=0.0.4" with
// RenderPrometheus(); another path -> 404; another method -> 405; a malformed request -> 400; a
// request head over the size limit -> 431; a request not complete within the timeout -> 408. Every
// response closes the connection. One thread serves up to max_connections connections side by side,
// nonblocking, each bounded by request_timeout, so idle connections cannot delay a scrape.
class MetricsServer {
 public:
  // Binds host:port (port 0 picks a free port). Errors name the address; a port another socket
  // holds is AlreadyExists "metrics server on 127.0.0.1:9100: address already in use".
  static Result<std::unique_ptr<MetricsServer>> Start(std::string_view host, uint16_t port,
                                                      const Metrics& metrics,
                                                      MetricsServerOptions options = {});
  ~MetricsServer();  // Stop()
  MetricsServer(const MetricsServer&) = delete;
  MetricsServer& operator=(const MetricsServer&) = delete;

  uint16_t port() const;
  std::string address() const;  // the bound address, "127.0.0.1:9100" or "[::1]:9100"
  // Idempotent; wakes the server thread even in the middle of a request and joins it.
  void Stop();

 private:
  struct State;  // defined in metrics_server.cc
  explicit MetricsServer(std::unique_ptr<State> state);
  std::unique_ptr<State> state_;
};

}  // namespace weightport
