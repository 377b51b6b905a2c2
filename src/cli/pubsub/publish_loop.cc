#include "publish_loop.h"

#include <algorithm>
#include <cstdio>
#include <iostream>

#include "cli/cli_common.h"
#include "weightport/format/synthetic_model.h"

namespace weightport::cli {
namespace {

std::string Micros(std::chrono::nanoseconds d) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.1f us", static_cast<double>(d.count()) / 1e3);
  return buf;
}

std::string Fixed(double v, const char* format) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), format, v);
  return buf;
}

// One version's figures: from the embedded coordinator's report when there is one (per-subscriber
// detail), else from the publisher's own view.
nlohmann::ordered_json Describe(WholePublisher& publisher, const PublishReport& pub,
                                const VersionReport* report) {
  const double copy = report != nullptr ? Secs(report->copy) : Secs(pub.transfer);
  nlohmann::ordered_json subscribers = nlohmann::ordered_json::array();
  double max_pause = 0;
  double staging_prepare = 0;
  uint64_t retries = 0, verified = 0, fetched_most = 0, fetched_sum = 0, staging_bytes = 0;
  if (report != nullptr) {
    for (const auto& s : report->subscribers) {
      fetched_most = std::max(fetched_most, s.bytes);
      fetched_sum += s.bytes;
      subscribers.push_back({{"name", s.name},
                             {"bytes", s.bytes},
                             {"fetch_s", Secs(s.fetch)},
                             {"pause_s", Secs(s.pause)},
                             {"retries", s.retries},
                             {"verified", s.verified},
                             {"committed", s.committed}});
      if (s.staging_bytes > 0) {  // its first version: what preparing its memory at join cost
        subscribers.back()["staging_bytes"] = s.staging_bytes;
        subscribers.back()["staging_prepare_s"] = Secs(s.staging_prepare);
        staging_prepare = std::max(staging_prepare, Secs(s.staging_prepare));
        staging_bytes = std::max(staging_bytes, s.staging_bytes);
      }
      if (!s.dropped.empty()) subscribers.back()["dropped"] = s.dropped;
      max_pause = std::max(max_pause, Secs(s.pause));
      retries += s.retries;
      verified += s.verified ? 1 : 0;
    }
  }
  // Bytes the subscribers fetched: the model, or with delta updates the chunks that changed. Known
  // only from the embedded coordinator's report; without it the model size stands in.
  const double model = static_cast<double>(publisher.model_bytes());
  const double per_subscriber = report != nullptr ? static_cast<double>(fetched_most) : model;
  const double all = report != nullptr ? static_cast<double>(fetched_sum)
                                       : model * static_cast<double>(std::max<size_t>(subscribers.size(), 1));
  const nlohmann::ordered_json fetched_max =
      report != nullptr ? nlohmann::ordered_json(fetched_most) : nullptr;
  const nlohmann::ordered_json fetched_total =
      report != nullptr ? nlohmann::ordered_json(fetched_sum) : nullptr;
  return {{"version", pub.version},
          {"bytes", publisher.model_bytes()},
          {"fetched_bytes", fetched_max},
          {"fetched_bytes_total", fetched_total},
          {"copy_s", copy},
          {"gbps", copy > 0 ? per_subscriber / copy / 1e9 : 0.0},
          {"aggregate_gbps", copy > 0 ? all / copy / 1e9 : 0.0},
          {"pause_s", max_pause},
          {"hold_s", Secs(pub.hold)},
          {"hash_s", Secs(pub.hash)},
          {"snapshot_copy_s", Secs(pub.snapshot_copy)},
          {"grant_s", Secs(pub.grant)},
          {"verified", pub.outcome.ok()},
          // Without the embedded coordinator's report: the count its Commit carried.
          {"subscribers_verified", report != nullptr ? verified : pub.subscribers},
          {"retries", retries},
          // Before this version began: the most staging memory a subscriber of its prepared when it
          // joined (zero-filled, registered, the publisher's memory mapped), and the longest that took.
          {"staging_bytes", staging_bytes},
          {"staging_prepare_s", staging_prepare},
          {"subscribers", subscribers}};
}

}  // namespace

Result<nlohmann::ordered_json> PublishVersions(WholePublisher& publisher, const PublishLoopOptions& o) {
  nlohmann::ordered_json versions = nlohmann::ordered_json::array();
  // A later first version replays the perturbations before it, so its bytes are what they would
  // have been.
  for (uint64_t v = 2; v < o.first_version && o.perturb > 0; ++v)
    WP_RETURN_IF_ERROR(
        PerturbInMemory(publisher.tensors(), publisher.weights(), o.perturb, 1u << 19, o.seed + v).status());
  for (uint64_t v = o.first_version; v < o.first_version + o.versions; ++v) {
    if (v > 1 && o.perturb > 0) {
      WP_RETURN_IF_ERROR(
          PerturbInMemory(publisher.tensors(), publisher.weights(), o.perturb, 1u << 19, o.seed + v)
              .status());
    }
    WholeSubscriberWait wait;
    if (v == o.first_version || o.wait_each)
      wait = {.at_least = o.subscribers, .within = o.subscriber_timeout};
    WP_ASSIGN_OR_RETURN(PublishReport report, publisher.Publish(v, o.mode, wait));
    if (o.mode == PublishMode::kSnapshot) {  // the outcome comes later; hold and copy are in it too
      WP_ASSIGN_OR_RETURN(report, publisher.Wait(v, o.report_timeout + wait.within));
    }
    // Committed to nobody (no subscriber was connected, or every one left): nothing was verified.
    if (report.outcome.ok() && report.subscribers == 0)
      report.outcome = FailedPrecondition("version " + std::to_string(v) +
                                          " was committed to no subscriber: none was connected");
    if (!report.outcome.ok() && !o.keep_going)
      return report.outcome.WithContext("version " + std::to_string(v) + " was not committed");
    if (!report.outcome.ok() && !o.quiet)
      std::cout << "version " << v << ": ABORTED: " << report.outcome.message() << std::endl;
    std::optional<VersionReport> detail;
    if (WholeCoordinator* c = publisher.coordinator()) {
      WP_ASSIGN_OR_RETURN(detail, c->WaitForVersion(v, o.report_timeout));
    }
    nlohmann::ordered_json j = Describe(publisher, report, detail ? &*detail : nullptr);
    if (!report.outcome.ok()) {
      j["reason"] = report.outcome.message();
      versions.push_back(std::move(j));
      continue;
    }
    if (!o.quiet) {
      // Without the embedded coordinator's report the bytes fetched are unknown: the model stands in.
      const uint64_t fetched =
          j["fetched_bytes"].is_null() ? publisher.model_bytes() : j["fetched_bytes"].get<uint64_t>();
      std::cout << "version " << v << ": " << HumanBytes(fetched)
                << (fetched != publisher.model_bytes() ? " fetched of " + HumanBytes(publisher.model_bytes())
                                                       : std::string())
                << " to " << j["subscribers_verified"].get<uint64_t>() << " subscriber(s), copy "
                << Fixed(j["copy_s"].get<double>(), "%.3f") << " s, "
                << Fixed(j["gbps"].get<double>(), "%.2f") << " GB/s each ("
                << Fixed(j["aggregate_gbps"].get<double>(), "%.2f") << " GB/s in all), pause max "
                << Micros(std::chrono::nanoseconds(static_cast<int64_t>(j["pause_s"].get<double>() * 1e9)))
                << ", trainer held " << Fixed(j["hold_s"].get<double>(), "%.3f") << " s, verified"
                << (j["retries"].get<uint64_t>() > 0
                        ? " (" + std::to_string(j["retries"].get<uint64_t>()) + " chunk(s) fetched again)"
                        : "")
                << std::endl;
      if (const uint64_t staged = j["staging_bytes"].get<uint64_t>(); staged > 0) {
        const double took = j["staging_prepare_s"].get<double>();
        std::cout << "  before it, when they joined: " << HumanBytes(staged)
                  << " of staging memory per subscriber zero-filled, registered and mapped in "
                  << Fixed(took, "%.3f") << " s at most ("
                  << Fixed(took > 0 ? static_cast<double>(staged) / took / 1e9 : 0.0, "%.2f")
                  << " GB/s: the kernel clears each fresh page)" << std::endl;
      }
    }
    versions.push_back(std::move(j));
  }
  return versions;
}

}  // namespace weightport::cli
