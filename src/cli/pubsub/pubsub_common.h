// Pieces shared by the commands that move weights (publish, subscribe, serve, demo): transport and
// model choice, secrets, addresses, memory figures, shutdown signals.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <CLI/CLI.hpp>

#include "weightport/control/auth.h"
#include "weightport/control/metrics.h"
#include "weightport/control/metrics_server.h"
#include "weightport/core/background_yield.h"
#include "weightport/core/status.h"
#include "weightport/core/tensor_meta.h"
#include "weightport/engine/common/transport_factory.h"

namespace weightport::cli {

// --transport: "shm" (UCX shared memory and CMA: one host), "tcp" (UCX over TCP: across hosts) or
// "auto" (whatever UCX picks, or UCX_TLS from the environment).
inline const std::vector<std::string> kTransportChoices = {"shm", "tcp", "auto"};
Result<TransportFactory> MakeTransportFactory(const std::string& choice);

// --priority for a receiving rank: "normal", or "background" (core/background_yield.h): the fetch
// yields its path to other traffic while there is some. BackgroundFor gives the receiver its
// tracker (null for normal), one for the whole session so that what it learns carries over.
void AddPriorityOption(CLI::App& command, std::string& priority, const std::string& who);
std::shared_ptr<BackgroundYield> BackgroundFor(const std::string& priority);

// Where a publisher's weights come from: a checkpoint (--model), a synthetic preset (--preset,
// --arch) or a synthetic layout of a given size (--model-bytes; 64 MiB bf16 tensors).
struct ModelSource {
  std::string model_dir;
  std::string preset = "small";
  std::string arch = "dense";
  uint64_t model_bytes = 0;
  uint64_t seed = 1;
  void AddOptions(CLI::App& sub);
  std::string Describe() const;
};
// The tensors, in the order the publisher lays them out.
Result<std::vector<TensorMeta>> ModelLayout(const ModelSource& source);
// Writes the model's bytes into `weights` (laid out as ModelLayout says). A checkpoint is copied
// piecewise and its pages released as it goes, so that peak memory stays near one copy.
Status LoadWeights(const ModelSource& source, const std::vector<TensorMeta>& layout,
                   std::span<std::byte> weights, const std::function<void(uint64_t, uint64_t)>& progress);

// Reads --secret-file; with `create_if_missing`, writes a new random secret there first (0600).
Result<Secret> LoadSecret(const std::string& path, bool create_if_missing);

// "host:port" -> (host, port); "port" alone -> (default_host, port).
Result<std::pair<std::string, uint16_t>> ParseHostPort(const std::string& text,
                                                       const std::string& default_host);

// Starts a Prometheus endpoint for --metrics [HOST:]PORT (HOST defaults to 127.0.0.1); null when
// `spec` is empty.
Result<std::unique_ptr<MetricsServer>> StartMetricsServer(const std::string& spec, const Metrics& metrics);
// A listener that could not bind (AlreadyExists) is named by its option, --listen; when --metrics
// asked for the same port (and so took it first), says so. Other errors pass unchanged.
Status NameTakenListenPort(const Status& status, const std::string& listen, const std::string& metrics);

// Peak resident set size of this process, in bytes (getrusage).
uint64_t PeakRssBytes();
// This process's private resident memory (RssAnon in /proc/self/status), in bytes: unlike the
// peak RSS it leaves out shared-memory pages mapped from a peer (a same-host publisher's weights).
uint64_t PrivateRssBytes();

// Samples PrivateRssBytes every few milliseconds on a thread of its own and keeps the maximum.
class PrivateRssSampler {
 public:
  PrivateRssSampler();
  ~PrivateRssSampler();
  uint64_t peak() const { return peak_.load(); }

 private:
  std::atomic<bool> stop_{false};
  std::atomic<uint64_t> peak_{0};
  std::thread thread_;
};

// What a process may use beyond the weights and its copies: 64 MiB + 1% of the model.
uint64_t MemoryOverheadBudget(uint64_t model_bytes);

// Refuses, before anything is allocated, a model whose `copies` (plus the overhead budget) exceed
// this machine's memory, or whose shared copy exceeds /dev/shm (any transport but "tcp"); the error
// names the sizes and what is available.
Status CheckModelFits(uint64_t model_bytes, uint64_t copies, const std::string& transport);

// Blocks SIGINT and SIGTERM in this thread and the threads it starts; WaitForShutdownSignal then
// waits for one (or `timeout_ms`, 0 = forever) and returns its number, 0 on timeout.
void BlockShutdownSignals();
int WaitForShutdownSignal(int64_t timeout_ms);
// The SIGINT or SIGTERM pending (blocked by BlockShutdownSignals), else 0; does not wait.
int TakePendingShutdownSignal();
const char* ShutdownSignalName(int sig);  // "SIGINT" or "SIGTERM"

}  // namespace weightport::cli
