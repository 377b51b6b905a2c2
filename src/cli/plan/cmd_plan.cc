// weightport plan: compute the transfer plan from one layout to another and report what it moves,
// where, and how long it should take.
#include <chrono>
#include <iostream>
#include <memory>
#include <optional>

#include <nlohmann/json.hpp>

#include "cli/cli_common.h"
#include "cli/option_checks.h"
#include "cli/pubsub/pubsub_common.h"
#include "plan_inputs.h"
#include "plan_report.h"
#include "rank_plan_sizes.h"
#include "weightport/core/json_util.h"
#include "weightport/format/synthetic_model.h"
#include "weightport/plan/planner.h"

namespace weightport::cli {
namespace {

struct PlanCliOptions {
  std::string src, dst;
  std::string model_dir, preset, arch = "dense", manifest;
  std::string topology, dump, plan_file;
  uint64_t chunk_bytes = PlanOptions{}.chunk_bytes;
  uint64_t split_bytes = 0;
  int relay_fanout = PlanOptions{}.relay_fanout;
  std::vector<std::string> convert;
  std::vector<std::string> rename;  // --rename FROM=TO
  double compressor_gbps = 0;
  bool json = false, check = false;
};

// The tensor table layout specs are built over; none when no model option was given.
Result<std::optional<std::vector<TensorMeta>>> TensorTable(const PlanCliOptions& o) {
  if (!o.manifest.empty()) {
    WP_ASSIGN_OR_RETURN(std::vector<TensorMeta> t, LoadManifestTensors(o.manifest));
    return std::optional(std::move(t));
  }
  if (o.model_dir.empty() && o.preset.empty()) return std::optional<std::vector<TensorMeta>>();
  ModelSource source;
  source.model_dir = o.model_dir;
  source.preset = o.preset;
  source.arch = o.arch;
  WP_ASSIGN_OR_RETURN(std::vector<TensorMeta> t, ModelLayout(source));
  return std::optional(std::move(t));
}

// The plan of --src and --dst, made now; `planning_s` gets the time MakePlan took. --rename maps
// every name once: the model's tensors (the ones layout specs are built over) and the tensors of
// each placement JSON.
Result<Plan> MakePlanFromFiles(const PlanCliOptions& o, double& planning_s) {
  WP_ASSIGN_OR_RETURN(std::vector<TensorRename> renames, ParseTensorRenames(o.rename));
  WP_ASSIGN_OR_RETURN(std::optional<std::vector<TensorMeta>> tensors, TensorTable(o));
  if (tensors && !renames.empty()) {
    auto renamed = RenameTensors(std::move(*tensors), renames);
    if (!renamed.ok()) return renamed.status().WithContext("--rename: the model's tensors");
    tensors = std::move(renamed).value();
  }
  auto src = LoadPlacementFile(o.src, tensors, renames);
  if (!src.ok()) return src.status().WithContext("--src");
  auto dst = LoadPlacementFile(o.dst, tensors, renames);
  if (!dst.ok()) return dst.status().WithContext("--dst");
  Topology topology;
  if (!o.topology.empty()) {
    auto t = LoadTopologyFile(o.topology);
    if (!t.ok()) return t.status().WithContext("--topology");
    topology = std::move(t).value();
  }
  PlanOptions options;
  options.chunk_bytes = o.chunk_bytes;
  options.relay_fanout = o.relay_fanout;
  options.split_bytes = o.split_bytes;
  WP_ASSIGN_OR_RETURN(options.transforms, ParseConvertRules(o.convert));
  options.compressor_gbps = o.compressor_gbps;
  const auto start = std::chrono::steady_clock::now();
  auto plan = MakePlan(*src, *dst, topology, options);
  planning_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (!plan.ok()) return plan.status().WithContext(o.src + " -> " + o.dst);
  return plan;
}

// A plan written by --dump, read back and validated.
Result<Plan> ReadPlanFile(const std::string& path) {
  auto json = json_util::ParseFile(path);
  if (!json.ok()) return json.status().WithContext("--plan");
  auto plan = Plan::FromJson(*json);
  if (!plan.ok()) return plan.status().WithContext(path);
  return plan;
}

int RunPlan(const PlanCliOptions& o) {
  std::optional<double> planning_s;
  Result<Plan> plan = Plan();
  if (!o.plan_file.empty()) {
    plan = ReadPlanFile(o.plan_file);
  } else {
    double seconds = 0;
    plan = MakePlanFromFiles(o, seconds);
    planning_s = seconds;
  }
  if (!plan.ok()) return Fail("plan", plan.status());

  std::optional<double> check_s;
  if (o.check) {
    const auto check_start = std::chrono::steady_clock::now();
    Status covered = CheckCoverage(*plan);
    if (!covered.ok()) return Fail("plan", covered.WithContext("--check: the plan is wrong"));
    check_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - check_start).count();
  }
  if (!o.dump.empty()) {
    Status written = json_util::WriteFile(o.dump, plan->ToJson());
    if (!written.ok()) return Fail("plan", written.WithContext("--dump"));
  }

  const PlanSummary summary = SummarizePlan(*plan, planning_s);
  auto parts = MeasureRankPlans(*plan);
  if (!parts.ok()) return Fail("plan", parts.status().WithContext("cutting every rank's part"));
  const PlanLabels labels =
      o.plan_file.empty() ? PlanLabels{o.src, o.dst} : PlanLabels{o.plan_file, o.plan_file};
  if (o.json) {
    nlohmann::ordered_json report = PlanReportJson(*plan, summary, labels);
    if (check_s) report["check"] = {{"coverage", "ok"}, {"seconds", *check_s}};
    // What a plan session sends: each rank its part, against the whole plan every rank once got.
    report["max_rank_plan_bytes"] = parts->max_rank_plan_bytes;
    report["control"] = RankPlanSizesJson(*parts);
    if (!o.dump.empty()) report["dump"] = o.dump;
    std::cout << report.dump(2) << "\n";
    return kExitOk;
  }
  PrintPlanReport(std::cout, *plan, summary, labels);
  std::cout << "control: a session sends each rank its part of the plan: largest "
            << HumanBytes(parts->max_rank_plan_bytes) << " (" << parts->largest_rank << ", "
            << parts->max_rank_plan_steps << " steps, " << parts->max_rank_peers << " peers), "
            << HumanBytes(parts->total_rank_plan_bytes) << " in all, cut in " << FormatSeconds(parts->cut_s)
            << "; the whole plan is " << HumanBytes(parts->plan_json_bytes) << " as JSON, "
            << HumanBytes(parts->plan_binary_bytes) << " in binary\n";
  if (check_s)
    std::cout << "\ncoverage: ok: every destination byte is written exactly once, every step sends bytes its "
                 "sender has (checked in "
              << FormatSeconds(*check_s) << ")\n";
  if (!o.dump.empty()) std::cout << "plan written to " << o.dump << "\n";
  return kExitOk;
}

}  // namespace

Command AddPlanCommand(CLI::App& app) {
  auto o = std::make_shared<PlanCliOptions>();
  auto* sub = app.add_subcommand(
      "plan",
      "Compute the transfer plan from a source layout to a destination layout (resharding, relays\n"
      "between replicas, load balance over NICs) and report steps, bytes per rank and host, and the\n"
      "predicted time");
  auto* src = sub->add_option("--src", o->src, "Source layout: a placement JSON or a layout spec (see below)")
                  ->check(CLI::ExistingFile);
  auto* dst = sub->add_option("--dst", o->dst, "Destination layout: a placement JSON or a layout spec")
                  ->check(CLI::ExistingFile);
  auto* plan_file =
      sub->add_option("--plan", o->plan_file,
                      "Instead of --src and --dst: read back a plan written by --dump and report on it")
          ->check(CLI::ExistingFile);
  src->needs(dst);
  dst->needs(src);
  plan_file->excludes(src)->excludes(dst);
  auto* model = sub->add_option("--model", o->model_dir,
                                "The model's tensors from a checkpoint (a .safetensors file or a directory)")
                    ->check(CLI::ExistingPath);
  auto* preset =
      sub->add_option("--preset", o->preset, "The model's tensors from a synthetic preset: tiny, small, 1b")
          ->check(CLI::IsMember(PresetNames()));
  sub->add_option("--arch", o->arch, "Architecture of the --preset: dense or moe")
      ->check(CLI::IsMember({"dense", "moe"}))
      ->capture_default_str();
  auto* manifest = sub->add_option("--manifest", o->manifest,
                                   "The model's tensors from a manifest JSON (weightport manifest)")
                       ->check(CLI::ExistingFile);
  model->excludes(preset)->excludes(manifest);
  preset->excludes(manifest);
  for (CLI::Option* opt : {model, preset, manifest}) opt->excludes(plan_file);
  auto* topology =
      sub->add_option(
             "--topology", o->topology,
             "Hosts, NIC and intra-host bandwidths, and which ranks run where (JSON); without it every\n"
             "rank is a host of its own with a 100 Gb/s NIC")
          ->check(CLI::ExistingFile);
  topology->excludes(plan_file);
  auto* chunk =
      sub->add_option("--chunk-bytes", o->chunk_bytes, "Bytes per chunk: the unit relays forward (e.g. 4MiB)")
          ->transform(ByteSize(1, uint64_t{1} << 40))
          ->capture_default_str();
  auto* fanout =
      sub->add_option("--relay-fanout", o->relay_fanout,
                      "How replicas share bytes: 0 every destination rank fed by the sources, 1 a pipelined\n"
                      "relay chain, K > 1 a K-ary tree")
          ->check(CLI::Range(0, 1024))
          ->capture_default_str();
  auto* split =
      sub->add_option("--split-bytes", o->split_bytes,
                      "Split a piece several sources hold among them when larger than this (0: chunk size)")
          ->transform(ByteSize(0, uint64_t{1} << 40))
          ->capture_default_str();
  auto* convert =
      sub->add_option("--convert", o->convert,
                      "GLOB=DTYPE (repeatable): destinations store the matching tensors as DTYPE\n"
                      "(f32, bf16, f16), converted in flight where fewer bytes travel; f8e4m3:\n"
                      "quantised in 128x128 blocks, at the sources where their slices hold whole\n"
                      "blocks, else at each destination (destination slices on block boundaries);\n"
                      "f8e4m3:tensor: one scale per tensor (each destination holds the tensor whole)");
  auto* compressor = sub->add_option("--compressor-gbps", o->compressor_gbps, kCompressorHelp)
                         ->check(FiniteRange(0, 1e6))
                         ->capture_default_str();
  auto* rename =
      sub->add_option("--rename", o->rename,
                      "FROM=TO (repeatable): rename tensors before planning, in every placement and the\n"
                      "model's table, when the two sides name them differently. Whole dot-separated\n"
                      "segments: 'module.=' drops a leading 'module.' (DDP), '*._orig_mod=' every\n"
                      "_orig_mod. segment (torch.compile), '*._fsdp_wrapped_module=' FSDP's; applied\n"
                      "in order; two tensors renamed alike are an error");
  for (CLI::Option* opt : {chunk, fanout, split, convert, rename, compressor})
    opt->excludes(plan_file);  // a plan file carries its own
  sub->add_flag("--json", o->json, "Print the report as JSON");
  sub->add_option("--dump", o->dump, "Write the plan itself (every step) as JSON to this file");
  sub->add_flag("--check", o->check,
                "Check coverage independently: every destination byte written exactly once, every step's\n"
                "bytes available at its sender (slow on huge plans)");
  sub->footer(
      "A layout is a placement JSON ({\"tensors\": [...], \"ranks\": [...]}) or a layout spec: a mesh of\n"
      "axes over the model's tensors (then --model, --preset or --manifest is needed), e.g.\n"
      "  {\"mesh\": [{\"axis\": \"dp\", \"kind\": \"replica\", \"size\": 2},\n"
      "            {\"axis\": \"tp\", \"kind\": \"tp\", \"size\": 2}], \"rank_offset\": 0}\n"
      "Ranks are numbered row-major over the axes (last axis fastest), from rank_offset. Kinds:\n"
      "  replica   full copies\n"
      "  tp        tensor parallel (Llama rules; \"rules\": [{\"glob\", \"kind\": "
      "column|row|vocab|replicated,\n"
      "            \"granule\"}], \"replicate_unmatched\": true|false)\n"
      "  pp        pipeline stages (\"layers_per_stage\": [..], \"first_stage\"/\"last_stage\": [globs])\n"
      "  ep        expert parallel (\"assignment\": contiguous|round_robin, \"non_expert\": replicated|tp)\n"
      "  fsdp      FSDP1 flat shards (\"unit_per_layer\": true|false)\n"
      "  fsdp2     FSDP2 dim-0 shards\n"
      "Topology JSON: {\"nic_gbps\": 100, \"intra_host_gbps\": 800, \"hosts\": [{\"name\": \"h0\",\n"
      "  \"nic_gbps\": 100, \"src_ranks\": [0, 1], \"dst_ranks\": [0]}, ...]}\n"
      "Examples (from the repository root):\n"
      "  weightport plan --preset small --src examples/plans/fsdp4.json --dst examples/plans/tp2x2.json \\\n"
      "      --topology examples/plans/topology-2hosts.json --check\n"
      "  weightport plan --preset small --src examples/plans/fsdp4.json --dst examples/plans/tp2x2.json \\\n"
      "      --json --dump plan.json\n");
  return {sub, [o, sub] {
            if (o->plan_file.empty() && o->src.empty()) {
              std::cerr << "weightport plan: give --src and --dst (or --plan FILE)\n" << sub->help();
              return kExitUsage;
            }
            return RunPlan(*o);
          }};
}

}  // namespace weightport::cli
