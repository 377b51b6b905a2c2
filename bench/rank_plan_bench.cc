// bench_rank_plans: what a plan session's control plane sends for a plan of datacenter size: the
// whole plan as JSON, which every rank once received and parsed, against each rank's part
// (rank_plan.h), which is what the coordinator sends now.
//
// Plans a simulator scenario (default kimi-k2-update: a Kimi-K2-like 1T MoE, 256 trainer GPUs ->
// 128 inference GPUs), then measures
//   parts:  indexing the plan once; per rank, cutting and encoding its part (the coordinator, one
//           rank after another) and decoding and compiling it (the rank, with no memory or
//           transport: DryCompile); the part's bytes and its peers;
//   whole:  the plan's JSON bytes, the time to write it once, and one rank's time to parse it and
//           compile its tables from it (every rank did the same).
// The parts run first, so their peak memory is not the whole JSON's.
#include <sys/resource.h>

#include <algorithm>
#include <cstdio>
#include <iostream>
#include <thread>

#include <nlohmann/json.hpp>

#include "bench_util.h"
#include "weightport/core/json_util.h"
#include "weightport/engine/rank/rank_plan.h"
#include "weightport/plan/plan_binary.h"
#include "weightport/sim/scenarios.h"

namespace weightport::bench {
namespace {

double PeakRssMiB() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_maxrss) / 1024.0;
}

nlohmann::ordered_json StatsJson(const Stats& s) { return {{"median", s.median}, {"max", s.max}}; }

int Run(const std::string& scenario, const nlohmann::json& params, bool skip_whole, bool json) {
  const auto t0 = Clock::now();
  auto built = sim::BuildScenario(scenario, params);
  if (!built.ok()) {
    std::cerr << "bench_rank_plans: " << built.status().ToString() << "\n";
    return 1;
  }
  auto plan = std::make_shared<const Plan>(std::move(built->plan));
  const double build_s = Seconds(Clock::now() - t0);
  const size_t ranks = plan->sources.size() + plan->destinations.size();
  std::cerr << "planned " << plan->steps.size() << " steps for " << ranks << " ranks in " << built->plan_s
            << " s\n";

  const auto i0 = Clock::now();
  RankPlanCutter cutter(plan);
  const double index_s = Seconds(Clock::now() - i0);
  std::vector<double> cut_s, compile_s, bytes, steps, peers;
  std::string largest;
  double largest_bytes = 0;
  for (const auto* side : {&plan->sources, &plan->destinations})
    for (const RankBuffer& b : *side) {
      const auto c0 = Clock::now();
      auto part = cutter.Cut(b.endpoint);
      if (!part.ok()) {
        std::cerr << "bench_rank_plans: " << part.status().ToString() << "\n";
        return 1;
      }
      const std::string encoded = EncodeRankPlan(*part);
      cut_s.push_back(Seconds(Clock::now() - c0));
      const auto d0 = Clock::now();
      auto decoded = DecodeRankPlan(encoded);
      auto arena = decoded.ok() ? DryCompile(*decoded) : Result<uint64_t>(decoded.status());
      if (!arena.ok()) {
        std::cerr << "bench_rank_plans: " << b.endpoint.ToString() << ": " << arena.status().ToString()
                  << "\n";
        return 1;
      }
      compile_s.push_back(Seconds(Clock::now() - d0));
      bytes.push_back(static_cast<double>(encoded.size()));
      steps.push_back(static_cast<double>(part->plan->steps.size()));
      peers.push_back(static_cast<double>(part->peers().size()));
      if (encoded.size() > largest_bytes) {
        largest_bytes = static_cast<double>(encoded.size());
        largest = b.endpoint.ToString();
      }
    }
  double total_bytes = 0, total_cut = 0;
  for (double b : bytes) total_bytes += b;
  for (double c : cut_s) total_cut += c;
  // As the coordinator does it: every part cut and encoded on its threads.
  std::vector<Endpoint> all;
  for (const auto* side : {&plan->sources, &plan->destinations})
    for (const RankBuffer& b : *side) all.push_back(b.endpoint);
  const size_t threads = std::clamp<size_t>(std::thread::hardware_concurrency(), 1, 8);
  const auto a0 = Clock::now();
  Status each = cutter.CutEach(all, threads, [](size_t, RankPlan&&, std::string&&) { return Status::Ok(); });
  const double cut_wall_s = Seconds(Clock::now() - a0);
  if (!each.ok()) {
    std::cerr << "bench_rank_plans: " << each.ToString() << "\n";
    return 1;
  }
  const double parts_rss = PeakRssMiB();
  const uint64_t binary_bytes = EncodePlanBinary(*plan).size();

  nlohmann::ordered_json whole;
  if (!skip_whole) {
    const Endpoint heaviest = [&] {  // the rank with the largest part: its compile from the whole plan
      for (const auto* side : {&plan->sources, &plan->destinations})
        for (const RankBuffer& b : *side)
          if (b.endpoint.ToString() == largest) return b.endpoint;
      return plan->destinations.front().endpoint;
    }();
    const auto w0 = Clock::now();
    std::string text = plan->ToJson().dump();
    const double write_s = Seconds(Clock::now() - w0);
    const auto p0 = Clock::now();
    auto parsed = json_util::Parse(text, "plan");
    auto back = parsed.ok() ? Plan::FromJson(*parsed) : Result<Plan>(parsed.status());
    if (!back.ok()) {
      std::cerr << "bench_rank_plans: " << back.status().ToString() << "\n";
      return 1;
    }
    const double parse_s = Seconds(Clock::now() - p0);
    const size_t json_bytes = text.size();
    text = std::string();
    parsed = nlohmann::json();
    auto shared = std::make_shared<const Plan>(std::move(*back));
    const auto k0 = Clock::now();
    auto arena = DryCompile(shared, heaviest);
    const double compile_whole_s = Seconds(Clock::now() - k0);
    if (!arena.ok()) {
      std::cerr << "bench_rank_plans: " << arena.status().ToString() << "\n";
      return 1;
    }
    whole = {{"json_bytes", json_bytes},
             {"write_s", write_s},
             {"parse_s", parse_s},
             {"compile_s", compile_whole_s},
             {"rank_s", parse_s + compile_whole_s},
             {"control_bytes_per_rank", json_bytes},
             {"control_bytes_total", static_cast<double>(json_bytes) * static_cast<double>(ranks)},
             {"peak_rss_mib", PeakRssMiB()}};
  }
  nlohmann::ordered_json out = {{"scenario", scenario},
                                {"description", built->description},
                                {"ranks", ranks},
                                {"steps", plan->steps.size()},
                                {"tensors", plan->tensors.size()},
                                {"plan_s", built->plan_s},
                                {"build_s", build_s},
                                {"plan_binary_bytes", binary_bytes},
                                {"parts",
                                 {{"index_s", index_s},
                                  {"cut_s", StatsJson(Summarize(cut_s))},
                                  {"cut_all_s", total_cut},
                                  {"cut_threads", threads},
                                  {"cut_all_wall_s", cut_wall_s},
                                  {"rank_decode_compile_s", StatsJson(Summarize(compile_s))},
                                  {"bytes", StatsJson(Summarize(bytes))},
                                  {"max_rank_plan_bytes", largest_bytes},
                                  {"largest_rank", largest},
                                  {"total_bytes", total_bytes},
                                  {"steps", StatsJson(Summarize(steps))},
                                  {"peers", StatsJson(Summarize(peers))},
                                  {"offers_to_parts_sent_s", built->plan_s + index_s + cut_wall_s},
                                  {"peak_rss_mib", parts_rss}}},
                                {"whole_plan_json", whole}};
  if (json) {
    std::cout << out.dump(2) << "\n";
    return 0;
  }
  std::printf("%s: %zu ranks, %zu steps, %zu tensors; planned in %.2f s\n", scenario.c_str(), ranks,
              plan->steps.size(), plan->tensors.size(), built->plan_s);
  std::printf(
      "parts: largest %s (%s), median %s, all %s; cut %.3f s a rank at most (%.2f s all, index %.2f s); "
      "%.2f s on %zu threads; a rank decodes and compiles its part in %.3f s at most\n",
      HumanSize(static_cast<uint64_t>(largest_bytes)).c_str(), largest.c_str(),
      HumanSize(static_cast<uint64_t>(Summarize(bytes).median)).c_str(),
      HumanSize(static_cast<uint64_t>(total_bytes)).c_str(), Summarize(cut_s).max, total_cut, index_s,
      cut_wall_s, threads, Summarize(compile_s).max);
  if (!whole.empty())
    std::printf(
        "whole plan JSON: %s to every rank (%.1f GB in all); written in %.2f s; a rank parses it in %.2f s "
        "and compiles in %.2f s\n",
        HumanSize(whole["json_bytes"].get<uint64_t>()).c_str(),
        whole["control_bytes_total"].get<double>() / 1e9, whole["write_s"].get<double>(),
        whole["parse_s"].get<double>(), whole["compile_s"].get<double>());
  return 0;
}

}  // namespace
}  // namespace weightport::bench

int main(int argc, char** argv) {
  CLI::App app{"Control-plane bytes and times of a plan session: each rank's part against the whole plan"};
  std::string scenario = "kimi-k2-update";
  std::vector<std::string> params;
  bool skip_whole = false, json = false;
  app.add_option("--scenario", scenario, "Simulator scenario to plan (weightport sim --list)")
      ->capture_default_str();
  app.add_option("--param", params, "Scenario parameter key=value (repeatable; numbers as JSON)");
  app.add_flag("--skip-whole", skip_whole, "Do not write and parse the whole plan's JSON (gigabytes at 1T)");
  app.add_flag("--json", json, "Print a JSON report");
  CLI11_PARSE(app, argc, argv);
  nlohmann::json p = nlohmann::json::object();
  for (const std::string& kv : params) {
    const size_t eq = kv.find('=');
    if (eq == std::string::npos) {
      std::cerr << "bench_rank_plans: --param " << kv << ": expected key=value\n";
      return 2;
    }
    const std::string value = kv.substr(eq + 1);
    p[kv.substr(0, eq)] =
        nlohmann::json::accept(value) ? nlohmann::json::parse(value) : nlohmann::json(value);
  }
  return weightport::bench::Run(scenario, p, skip_whole, json);
}
