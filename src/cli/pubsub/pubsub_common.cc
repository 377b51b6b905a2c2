#include "pubsub_common.h"

#include <signal.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "cli/cli_common.h"
#include "cli/option_checks.h"
#include "weightport/control/metrics_server.h"
#include "weightport/core/memory_check.h"
#include "weightport/format/checkpoint.h"
#include "weightport/format/synthetic_model.h"
#include "weightport/transport/ucx_transport.h"

namespace weightport::cli {

void AddPriorityOption(CLI::App& command, std::string& priority, const std::string& who) {
  command
      .add_option(
          "--priority", priority,
          who +
              ": normal, or background: keep in flight only what keeps the path busy, and while other "
              "traffic\nshares the path (a training job's) hold to 5% of it, running free again once "
              "it has gone; a cap\n(--max-gbps) yields all the time")
      ->check(CLI::IsMember({"normal", "background"}))
      ->capture_default_str();
}

std::shared_ptr<BackgroundYield> BackgroundFor(const std::string& priority) {
  return priority == "background" ? std::make_shared<BackgroundYield>() : nullptr;
}

Result<TransportFactory> MakeTransportFactory(const std::string& choice) {
  auto f = UcxTransportFactory(choice);
  if (!f.ok()) return InvalidArgument("--transport must be shm, tcp or auto, got '" + choice + "'");
  return f;
}

void ModelSource::AddOptions(CLI::App& sub) {
  auto* model =
      sub.add_option("--model", model_dir, "Checkpoint to publish (a .safetensors file or a directory)");
  auto* preset_opt =
      sub.add_option("--preset", preset, "Synthetic model size when no --model: tiny, small, 1b")
          ->check(CLI::IsMember(PresetNames()))
          ->capture_default_str();
  sub.add_option("--arch", arch, "Synthetic architecture: dense or moe")
      ->check(CLI::IsMember({"dense", "moe"}))
      ->capture_default_str();
  auto* bytes = sub.add_option("--model-bytes", model_bytes,
                               "Synthetic model of about this size instead of a preset (e.g. 256MiB, 2GiB): "
                               "bf16 tensors of 64 MiB")
                    ->transform(ByteSize(2, uint64_t{1} << 50));
  sub.add_option("--seed", seed, "Seed of the synthetic weights")->capture_default_str();
  model->excludes(preset_opt);
  model->excludes(bytes);
}

std::string ModelSource::Describe() const {
  if (!model_dir.empty()) return model_dir;
  if (model_bytes != 0) return "synthetic " + HumanBytes(model_bytes) + " model";
  return "synthetic " + preset + " " + arch + " model";
}

Result<std::vector<TensorMeta>> ModelLayout(const ModelSource& source) {
  if (!source.model_dir.empty()) {
    WP_ASSIGN_OR_RETURN(Checkpoint c, Checkpoint::Open(source.model_dir));
    std::vector<TensorMeta> layout;
    for (const auto& t : c.tensors()) layout.push_back(t.meta());
    return layout;
  }
  if (source.model_bytes != 0) {
    // Before the layout itself: a petabyte is 16 million tensors.
    WP_RETURN_IF_ERROR(
        CheckMemoryFits(source.model_bytes, false, "--model-bytes " + HumanBytes(source.model_bytes)));
    constexpr uint64_t kRow = 8192, kTensorBytes = 64ull << 20;  // 4096 rows of 8192 bf16
    const uint64_t elements = std::max<uint64_t>(source.model_bytes / 2, 1);
    std::vector<TensorMeta> layout;
    for (uint64_t done = 0, i = 0; done < elements; ++i) {
      const uint64_t n = std::min(kTensorBytes / 2, elements - done);
      Shape shape = n % kRow == 0 ? Shape{static_cast<int64_t>(n / kRow), static_cast<int64_t>(kRow)}
                                  : Shape{static_cast<int64_t>(n)};
      WP_ASSIGN_OR_RETURN(TensorMeta t, TensorMeta::Make("bench.block." + std::to_string(i) + ".weight",
                                                         DType::kBF16, shape));
      layout.push_back(std::move(t));
      done += n;
    }
    return layout;
  }
  WP_ASSIGN_OR_RETURN(ModelArch arch, ParseModelArch(source.arch));
  WP_ASSIGN_OR_RETURN(ModelSpec spec, PresetSpec(source.preset, arch));
  return ModelTensors(spec);
}

Status LoadWeights(const ModelSource& source, const std::vector<TensorMeta>& layout,
                   std::span<std::byte> weights, const std::function<void(uint64_t, uint64_t)>& progress) {
  const uint64_t total = weights.size();
  uint64_t offset = 0;
  if (source.model_dir.empty()) {
    for (const TensorMeta& t : layout) {
      WP_RETURN_IF_ERROR(FillTensor(t, source.seed, weights.subspan(offset, t.bytes)));
      offset += t.bytes;
      if (progress) progress(offset, total);
    }
    return Status::Ok();
  }
  WP_ASSIGN_OR_RETURN(Checkpoint c, Checkpoint::Open(source.model_dir));
  const uintptr_t page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
  constexpr uint64_t kPiece = 64ull << 20;
  for (const TensorMeta& t : layout) {
    const CheckpointTensor* ct = c.Find(t.name);
    if (ct == nullptr) return NotFound(source.model_dir + ": tensor '" + t.name + "' vanished");
    std::span<const std::byte> src = c.Data(*ct);
    for (uint64_t done = 0; done < src.size(); done += kPiece) {
      const uint64_t n = std::min<uint64_t>(kPiece, src.size() - done);
      std::memcpy(weights.data() + offset + done, src.data() + done, n);
      // Drop the file pages just copied from this process's memory: the publisher keeps one copy.
      const uintptr_t begin = reinterpret_cast<uintptr_t>(src.data() + done) & ~(page - 1);
      const uintptr_t end = (reinterpret_cast<uintptr_t>(src.data() + done + n)) & ~(page - 1);
      if (end > begin) madvise(reinterpret_cast<void*>(begin), end - begin, MADV_DONTNEED);
      if (progress) progress(offset + done + n, total);
    }
    offset += t.bytes;
  }
  return Status::Ok();
}

Result<Secret> LoadSecret(const std::string& path, bool create_if_missing) {
  if (path.empty())
    return InvalidArgument("--secret-file is required (a file of at least 16 bytes, mode 600)");
  if (create_if_missing && !std::filesystem::exists(path)) {
    WP_ASSIGN_OR_RETURN(Secret secret, Secret::Generate());
    WP_RETURN_IF_ERROR(secret.WriteToFile(path));
    return secret;
  }
  return Secret::LoadFromFile(path);
}

Result<std::pair<std::string, uint16_t>> ParseHostPort(const std::string& text,
                                                       const std::string& default_host) {
  const size_t colon = text.rfind(':');
  std::string host = colon == std::string::npos ? default_host : text.substr(0, colon);
  const std::string port_text = colon == std::string::npos ? text : text.substr(colon + 1);
  if (!host.empty() && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  char* end = nullptr;
  const unsigned long port = std::strtoul(port_text.c_str(), &end, 10);
  if (port_text.empty() || end == nullptr || *end != '\0' || port > 65535 || host.empty())
    return InvalidArgument("'" + text + "' is not HOST:PORT (or PORT) with a port in 0..65535");
  return std::make_pair(host, static_cast<uint16_t>(port));
}

Result<std::unique_ptr<MetricsServer>> StartMetricsServer(const std::string& spec, const Metrics& metrics) {
  if (spec.empty()) return std::unique_ptr<MetricsServer>();
  auto where = ParseHostPort(spec, "127.0.0.1");
  if (!where.ok()) return where.status().WithContext("--metrics");
  auto server = MetricsServer::Start(where->first, where->second, metrics);
  if (!server.ok()) return server.status().WithContext("--metrics " + spec);
  return server;
}

Status NameTakenListenPort(const Status& status, const std::string& listen, const std::string& metrics) {
  if (status.code() != StatusCode::kAlreadyExists) return status;
  auto l = ParseHostPort(listen, "127.0.0.1");
  auto m = ParseHostPort(metrics, "127.0.0.1");
  const bool same = !metrics.empty() && l.ok() && m.ok() && l->second == m->second && l->second != 0;
  return status.WithContext("--listen " + listen +
                            (same ? " (--metrics " + metrics + " took that port first)" : ""));
}

uint64_t PeakRssBytes() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return static_cast<uint64_t>(usage.ru_maxrss) * 1024;  // Linux reports KiB
}

uint64_t PrivateRssBytes() {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line))
    if (line.rfind("RssAnon:", 0) == 0) return std::strtoull(line.c_str() + 8, nullptr, 10) * 1024;  // kB
  return 0;
}

PrivateRssSampler::PrivateRssSampler() {
  thread_ = std::thread([this] {
    while (!stop_.load()) {
      const uint64_t now = PrivateRssBytes();
      if (now > peak_.load()) peak_.store(now);
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
  });
}

PrivateRssSampler::~PrivateRssSampler() {
  stop_.store(true);
  thread_.join();
}

uint64_t MemoryOverheadBudget(uint64_t model_bytes) { return (64ull << 20) + model_bytes / 100; }

Status CheckModelFits(uint64_t model_bytes, uint64_t copies, const std::string& transport) {
  // Overflow-safe: a model of 2^50 bytes times a few copies still fits in 64 bits.
  const uint64_t total = model_bytes * copies + MemoryOverheadBudget(model_bytes);
  const std::string what = "a model of " + HumanBytes(model_bytes) + " held " + std::to_string(copies) +
                           " time(s) (with " + HumanBytes(MemoryOverheadBudget(model_bytes)) +
                           " of overhead)";
  WP_RETURN_IF_ERROR(CheckMemoryFits(total, false, what));
  // The copy peers map lives in /dev/shm when the transport may be shared memory.
  if (transport != "tcp") WP_RETURN_IF_ERROR(CheckMemoryFits(model_bytes, true, "its shared copy"));
  return Status::Ok();
}

namespace {
sigset_t ShutdownSignals() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  return set;
}
}  // namespace

void BlockShutdownSignals() {
  const sigset_t set = ShutdownSignals();
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
}

int WaitForShutdownSignal(int64_t timeout_ms) {
  const sigset_t set = ShutdownSignals();
  if (timeout_ms <= 0) {
    int sig = 0;
    return sigwait(&set, &sig) == 0 ? sig : 0;
  }
  timespec ts{.tv_sec = timeout_ms / 1000, .tv_nsec = (timeout_ms % 1000) * 1000000};
  const int sig = sigtimedwait(&set, nullptr, &ts);
  return sig > 0 ? sig : 0;
}

int TakePendingShutdownSignal() {
  const sigset_t set = ShutdownSignals();
  const timespec now{};
  const int sig = sigtimedwait(&set, nullptr, &now);
  return sig > 0 ? sig : 0;
}

const char* ShutdownSignalName(int sig) { return sig == SIGINT ? "SIGINT" : "SIGTERM"; }

}  // namespace weightport::cli
