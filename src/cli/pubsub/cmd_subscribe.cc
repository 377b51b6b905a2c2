// weightport subscribe: receive every version a coordinator commits; optionally write the last one.
#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include <filesystem>
#include <iostream>
#include <mutex>
#include <thread>

#include <nlohmann/json.hpp>

#include "cli/cli_common.h"
#include "cli/option_checks.h"
#include "pubsub_common.h"
#include "weightport/engine/pubsub/subscriber.h"
#include "weightport/format/safetensors_writer.h"

namespace weightport::cli {
namespace {

struct SubscribeOptions {
  std::string connect;
  std::string secret_file;
  std::string name;
  std::string swap_mode = "double-buffer";
  std::string transport = "shm";
  std::vector<std::string> tensors;
  std::string out;
  uint64_t versions = 0;
  double timeout_s = 0;
  double wait_s = 30;
  size_t window = 32;
  double max_gbps = 0;              // FetchOptions::max_bytes_per_s, in Gbit/s
  double delay_backoff = 0;         // FetchOptions::delay_factor
  std::string priority = "normal";  // background: FetchOptions::background
  bool no_verify = false;
  bool no_delta = false;
  bool json = false;
  bool quiet = false;
};

// --out is a file (as for every command that writes one file). Before joining: it must not be a
// directory, and its directory must take a new file (tried, then removed), so that a bad path
// fails now and not after the whole transfer.
Status CheckOutPath(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (fs::is_directory(path, ec))
    return InvalidArgument("--out " + path + " is a directory; --out names the .safetensors file to write");
  if (!path.empty() && path.back() == '/')
    return InvalidArgument("--out " + path + " ends with '/'; --out names the .safetensors file to write");
  const fs::path parent = fs::path(path).has_parent_path() ? fs::path(path).parent_path() : fs::path(".");
  if (fs::exists(parent, ec) && !fs::is_directory(parent, ec))
    return InvalidArgument("--out " + path + ": " + parent.string() + " is a file, not a directory");
  if (!fs::is_directory(parent, ec))
    return InvalidArgument("--out " + path + ": directory " + parent.string() + " does not exist");
  const std::string probe = path + ".probe-" + std::to_string(getpid());
  const int fd = ::open(probe.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) return ErrnoError("--out " + path + ": cannot create a file in " + parent.string(), errno);
  ::close(fd);
  ::unlink(probe.c_str());
  return Status::Ok();
}

// Writes the live version as one safetensors file at `path` (beside it first, then renamed).
Status WriteLive(WholeSubscriber& sub, const std::string& path) {
  WP_ASSIGN_OR_RETURN(Manifest manifest, sub.LiveManifest());
  WP_ASSIGN_OR_RETURN(VersionedStore::Pin pin, sub.Acquire());
  std::vector<TensorMeta> metas;
  for (const auto& t : manifest.tensors()) metas.push_back(t.meta);
  WP_ASSIGN_OR_RETURN(
      SafetensorsWriter writer,
      SafetensorsWriter::Create(path, metas, {{"weightport.version", std::to_string(pin.version())}}));
  for (const auto& t : manifest.tensors())
    WP_RETURN_IF_ERROR(writer.Append(pin.bytes().subspan(t.offset, t.meta.bytes)));
  return writer.Finish();
}

int RunSubscribe(SubscribeOptions o) {
  auto fail = [](const Status& s) { return Fail("subscribe", s); };
  if (!o.out.empty())
    if (Status s = CheckOutPath(o.out); !s.ok()) return fail(s);
  // Before any thread starts, so that every thread inherits the mask and the signal waits for the
  // loop below: an interrupted subscriber still writes what it holds.
  BlockShutdownSignals();
  if (o.name.empty()) {
    char host[256] = {};
    gethostname(host, sizeof(host) - 1);
    o.name = "sub-" + std::string(host) + "-" + std::to_string(getpid());
  }
  auto mode = ParseSwapMode(o.swap_mode);
  if (!mode.ok()) return fail(mode.status());
  auto secret = LoadSecret(o.secret_file, false);
  if (!secret.ok()) return fail(secret.status());
  auto factory = MakeTransportFactory(o.transport);
  if (!factory.ok()) return fail(factory.status());

  std::mutex out_mu;
  nlohmann::ordered_json versions = nlohmann::ordered_json::array();
  WholeSubscriberOptions so;
  so.name = o.name;
  so.coordinator = o.connect;
  so.swap_mode = *mode;
  so.make_transport = *factory;
  so.tensors = o.tensors;
  so.fetch.window = o.window;
  so.fetch.max_bytes_per_s = o.max_gbps * 1e9 / 8;
  so.fetch.delay_factor = o.delay_backoff;
  so.fetch.background = BackgroundFor(o.priority);
  so.fetch.verify = !o.no_verify;
  so.delta = !o.no_delta;
  so.log = [&o](std::string line) {
    if (!o.quiet) std::cerr << "weightport subscribe: " << line << std::endl;
  };
  so.on_event = [&](const WholeSubscriberEvent& e) {
    std::lock_guard<std::mutex> lock(out_mu);
    using K = WholeSubscriberEvent::Kind;
    if (e.kind == K::kVerified) {
      versions.push_back({{"version", e.version},
                          {"bytes", e.bytes},
                          {"fetch_s", Secs(e.fetch)},
                          {"retries", e.retries},
                          {"direct_chunks", e.direct_chunks},
                          {"yields", e.yields}});
    } else if (e.kind == K::kCommitted) {
      // By version, not the last entry: the next version may have begun (and failed) before this
      // event was delivered.
      for (auto it = versions.rbegin(); it != versions.rend(); ++it) {
        if ((*it)["version"] != e.version || it->contains("abandoned")) continue;
        (*it)["pause_s"] = Secs(e.pause);
        (*it)["committed"] = true;
        break;
      }
    } else if (e.kind == K::kAborted || e.kind == K::kFailed) {
      // A version fetched (or not) and then abandoned: it never became live here.
      // (a fetch that failed is abandoned again when the coordinator aborts: one entry)
      if (versions.empty() || versions.back()["version"] != e.version ||
          versions.back().value("committed", false))
        versions.push_back({{"version", e.version}});
      versions.back()["committed"] = false;
      versions.back()["abandoned"] = e.detail;
    }
    if (o.quiet || o.json) return;
    switch (e.kind) {
      case K::kBegin:
        std::cout << "version " << e.version << ": fetching" << std::endl;
        break;
      case K::kVerified:
        std::cout << "version " << e.version << ": " << HumanBytes(e.bytes) << " verified in "
                  << Secs(e.fetch) << " s ("
                  << (e.fetch.count() > 0 ? static_cast<double>(e.bytes) / Secs(e.fetch) / 1e9 : 0)
                  << " GB/s)"
                  << (e.retries ? ", " + std::to_string(e.retries) + " chunk(s) fetched again" : "")
                  << std::endl;
        break;
      case K::kCommitted:
        std::cout << "version " << e.version << ": live (readers paused " << Secs(e.pause) * 1e6 << " us)"
                  << std::endl;
        break;
      case K::kFailed:
      case K::kAborted:
        std::cout << "version " << e.version << ": " << (e.kind == K::kFailed ? "failed: " : "abandoned: ")
                  << e.detail << std::endl;
        break;
    }
  };
  PrivateRssSampler private_rss;
  // The publisher may not be up yet: retry refused connections until --wait passes. A refusal by
  // the coordinator itself (wrong secret, name taken) is final.
  const auto give_up =
      std::chrono::steady_clock::now() + std::chrono::milliseconds(static_cast<int64_t>(o.wait_s * 1e3));
  auto subscriber = WholeSubscriber::Connect(*secret, so);
  while (!subscriber.ok() && subscriber.status().code() != StatusCode::kPermissionDenied &&
         std::chrono::steady_clock::now() < give_up) {
    if (const int sig = WaitForShutdownSignal(200); sig != 0) {
      std::cerr << "weightport subscribe: stopped by " << ShutdownSignalName(sig) << " before joining"
                << std::endl;
      return 128 + sig;
    }
    subscriber = WholeSubscriber::Connect(*secret, so);
  }
  if (!subscriber.ok()) return fail(subscriber.status());
  WholeSubscriber& sub = **subscriber;
  if (!o.quiet && !o.json) std::cout << o.name << " subscribed to " << o.connect << std::endl;

  // Waits in slices, so that SIGINT / SIGTERM are noticed within one.
  const auto deadline = o.timeout_s > 0
                            ? std::chrono::steady_clock::now() +
                                  std::chrono::milliseconds(static_cast<int64_t>(o.timeout_s * 1e3))
                            : std::chrono::steady_clock::time_point::max();
  constexpr std::chrono::milliseconds kSlice(200);
  Status end = Status::Ok();
  int signal_number = 0;
  for (;;) {
    end = o.versions > 0 ? sub.WaitForVersion(o.versions, kSlice) : sub.WaitForEnd(kSlice);
    if (end.code() != StatusCode::kTimeout) break;
    if ((signal_number = TakePendingShutdownSignal()) != 0) break;
    if (std::chrono::steady_clock::now() >= deadline) {
      end = Timeout("no end after --timeout " + std::to_string(o.timeout_s) + " s (live version " +
                    std::to_string(sub.live_version()) + ")");
      break;
    }
  }
  Status written = Status::Ok();
  if (!o.out.empty() && sub.live_version() > 0) written = WriteLive(sub, o.out);
  const uint64_t live = sub.live_version();
  sub.Close();
  if (signal_number != 0) {
    std::cerr << "weightport subscribe: stopped by " << ShutdownSignalName(signal_number);
    if (!o.out.empty() && live > 0 && written.ok())
      std::cerr << "; wrote version " << live << " to " << o.out;
    if (!written.ok()) std::cerr << "; " << written.ToString();
    std::cerr << std::endl;
    return 128 + signal_number;
  }
  if (!end.ok()) return fail(end);
  if (!written.ok()) return fail(written);
  if (live == 0)
    return fail(Unavailable("no version became live here before the session ended" +
                            std::string(o.out.empty() ? "" : "; nothing written to " + o.out)));
  if (o.json) {
    std::lock_guard<std::mutex> lock(out_mu);
    nlohmann::ordered_json j = {{"name", o.name},
                                {"live_version", live},
                                {"swap_mode", o.swap_mode},
                                {"versions", versions},
                                {"peak_rss", PeakRssBytes()},
                                {"peak_private_rss", std::max(private_rss.peak(), PrivateRssBytes())}};
    if (!o.out.empty()) j["out"] = o.out;
    std::cout << j.dump(2) << std::endl;
  } else if (!o.quiet && !o.out.empty()) {
    std::cout << "wrote version " << live << " to " << o.out << std::endl;
  }
  return kExitOk;
}

}  // namespace

Command AddSubscribeCommand(CLI::App& app) {
  auto o = std::make_shared<SubscribeOptions>();
  auto* sub = app.add_subcommand(
      "subscribe",
      "Receive every version a publisher commits, until it says goodbye (or --versions are live)");
  sub->add_option("--connect", o->connect, "Coordinator to join (weightport serve), HOST:PORT")->required();
  sub->add_option("--secret-file", o->secret_file, "Shared secret (mode 600)")->required();
  sub->add_option("--name", o->name, "This subscriber's name (default sub-HOST-PID)");
  sub->add_option("--swap-mode", o->swap_mode,
                  "double-buffer (2x memory, no pause), stage-copy (fixed addresses, pause = one copy) or "
                  "in-place (1x memory, readers wait for the whole update)")
      ->check(CLI::IsMember({"double-buffer", "stage-copy", "in-place"}))
      ->capture_default_str();
  sub->add_option("--transport", o->transport, "shm (one host), tcp (across hosts) or auto")
      ->check(CLI::IsMember(kTransportChoices))
      ->capture_default_str();
  sub->add_option("--tensors", o->tensors, "Fetch only these tensors (comma-separated)")->delimiter(',');
  sub->add_option("--out", o->out,
                  "Write the last live version to this .safetensors file (also on SIGINT/SIGTERM); checked "
                  "before joining");
  sub->add_option("--versions", o->versions, "Exit once this version is live (0: when the publisher leaves)")
      ->check(CLI::Range(uint64_t{0}, uint64_t{1} << 40));
  sub->add_option("--wait", o->wait_s, "Seconds to keep retrying while the coordinator is not reachable")
      ->check(FiniteRange(0, 86400 * 365))
      ->capture_default_str();
  sub->add_option("--timeout", o->timeout_s, "Give up after this many seconds (0: never)")
      ->check(FiniteRange(0, 86400 * 365));
  sub->add_option("--window", o->window, "Gets in flight at most")
      ->check(CLI::Range(1, 4096))
      ->capture_default_str();
  sub->add_option("--max-gbps", o->max_gbps,
                  "Cap this subscriber's fetch rate (Gbit/s), so that a weight sync leaves a shared link to "
                  "other traffic; 0: no cap")
      ->check(Bounded(kMaxGbpsBound))
      ->capture_default_str();
  AddPriorityOption(*sub, o->priority, "This subscriber");
  sub->add_option("--delay-backoff", o->delay_backoff,
                  "Halve the Gets in flight when one takes this many times the fastest (queueing on a shared "
                  "link); 0: watch loss only")
      ->check(FiniteRange(0, 1e6))
      ->capture_default_str();
  sub->add_flag(
      "--no-delta", o->no_delta,
      "Fetch every chunk of every version (default: only the chunks changed since the version held)");
  sub->add_flag("--no-verify", o->no_verify,
                "Do not check chunks against the manifest's hashes: measures the transport alone; unsafe");
  sub->add_flag("--json", o->json, "Print a machine-readable summary");
  sub->add_flag("--quiet,-q", o->quiet, "No progress or log output");
  return {sub, [o] { return RunSubscribe(*o); }};
}

}  // namespace weightport::cli
