// weightport gen-model: synthetic checkpoints and their next "training step".
#include <chrono>
#include <iostream>
#include <memory>
#include <optional>

#include <nlohmann/json.hpp>

#include "cli/cli_common.h"
#include "cli/option_checks.h"
#include "weightport/format/synthetic_model.h"

namespace weightport::cli {
namespace {

struct GenModelOptions {
  std::string preset;
  std::string arch = "dense";
  std::string out;
  std::string from;
  std::string dtype = "bf16";
  uint64_t seed = 0;
  int shards = 1;
  bool shards_given = false;  // with --from: re-shard instead of keeping the source's files
  std::optional<int> layers, hidden, experts;
  std::optional<double> perturb;
  uint64_t perturb_block = PerturbOptions{}.block;
  bool force = false;
  bool quiet = false;
  bool json = false;
};

double Seconds(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

int RunGenerate(const GenModelOptions& o) {
  auto arch = ParseModelArch(o.arch);
  if (!arch.ok()) return Fail("gen-model", arch.status());
  auto spec = PresetSpec(o.preset, *arch);
  if (!spec.ok()) return Fail("gen-model", spec.status());
  auto dtype = ParseDTypeName(o.dtype);
  if (!dtype.ok()) return Fail("gen-model", dtype.status());
  spec->dtype = *dtype;
  auto final_spec = ApplyOverrides(*spec, {o.layers, o.hidden, o.experts});
  if (!final_spec.ok()) return Fail("gen-model", final_spec.status());

  const auto start = std::chrono::steady_clock::now();
  ProgressPrinter progress("generating " + o.out, o.quiet || o.json);
  GenerateOptions g{.out_dir = o.out,
                    .seed = o.seed,
                    .shards = o.shards,
                    .overwrite = o.force,
                    .progress = std::ref(progress)};
  if (Status s = GenerateModel(*final_spec, g); !s.ok()) return Fail("gen-model", s);
  const uint64_t bytes = ModelBytes(*final_spec);
  const size_t tensors = ModelTensors(*final_spec).size();
  const double secs = Seconds(start);
  if (o.json) {
    nlohmann::ordered_json j = {{"out", o.out},
                                {"preset", final_spec->preset},
                                {"arch", std::string(ModelArchName(final_spec->arch))},
                                {"dtype", std::string(DTypeName(final_spec->dtype))},
                                {"seed", o.seed},
                                {"shards", o.shards},
                                {"tensors", tensors},
                                {"total_bytes", bytes},
                                {"seconds", secs}};
    std::cout << j.dump(2) << "\n";
  } else {
    std::cout << "wrote " << o.out << ": " << tensors << " tensors, " << HumanBytes(bytes) << " in "
              << o.shards << " shard(s), " << ModelArchName(final_spec->arch) << " " << final_spec->preset
              << " " << DTypeName(final_spec->dtype) << ", seed " << o.seed << " (" << secs << " s)\n";
  }
  return kExitOk;
}

int RunPerturb(const GenModelOptions& o) {
  const auto start = std::chrono::steady_clock::now();
  ProgressPrinter progress("perturbing into " + o.out, o.quiet || o.json);
  PerturbOptions p{.from_dir = o.from,
                   .out_dir = o.out,
                   .fraction = *o.perturb,
                   .block = o.perturb_block,
                   .seed = o.seed,
                   .overwrite = o.force,
                   .shards = o.shards_given ? o.shards : 0,
                   .progress = std::ref(progress)};
  auto report = PerturbModel(p);
  if (!report.ok()) return Fail("gen-model", report.status());
  const double secs = Seconds(start);
  if (o.json) {
    nlohmann::ordered_json j = {{"from", o.from},
                                {"out", o.out},
                                {"fraction", *o.perturb},
                                {"block", o.perturb_block},
                                {"elements_total", report->elements_total},
                                {"elements_changed", report->elements_changed},
                                {"seconds", secs}};
    std::cout << j.dump(2) << "\n";
  } else {
    std::cout << "wrote " << o.out << ": " << report->elements_changed << " of " << report->elements_total
              << " elements changed (runs of " << o.perturb_block << "), " << secs << " s\n";
  }
  return kExitOk;
}

}  // namespace

Command AddGenModelCommand(CLI::App& app) {
  auto o = std::make_shared<GenModelOptions>();
  auto* sub = app.add_subcommand(
      "gen-model",
      "Write a synthetic safetensors checkpoint with the tensor names and shapes of a real architecture\n"
      "(--preset), or the next training step of an existing one (--from ... --perturb FRACTION)");
  auto* preset =
      sub->add_option("--preset", o->preset, "Model size: tiny (~50 MB), small (~500 MB), 1b (~2.5 GB)")
          ->check(CLI::IsMember(PresetNames()));
  sub->add_option("--arch", o->arch, "Architecture: dense (Llama-style) or moe (routed + shared experts)")
      ->check(CLI::IsMember({"dense", "moe"}))
      ->capture_default_str();
  sub->add_option("--out", o->out, "Output directory")->required();
  sub->add_option("--seed", o->seed, "Seed: the same seed gives the same bytes")
      ->check(NonNegativeInteger())
      ->capture_default_str();
  sub->add_option("--dtype", o->dtype, "Element type: bf16, f16 or f32")->capture_default_str();
  auto* shards = sub->add_option("--shards", o->shards,
                                 "Number of safetensors files (an index is written when > 1); with --from, "
                                 "re-shard the next step (default: the source's files)")
                     ->check(CLI::Range(1, 100000))
                     ->capture_default_str();
  // The ranges ApplyOverrides enforces, checked here too so that a bad value is a usage error.
  sub->add_option("--layers", o->layers, "Override the number of layers")->check(CLI::Range(1, 1024));
  sub->add_option("--hidden", o->hidden, "Override the hidden size (widths and heads scale with it)")
      ->check(CLI::Range(1, 65536));
  sub->add_option("--experts", o->experts, "Override the number of routed experts (moe)")
      ->check(CLI::Range(1, 4096));
  auto* from = sub->add_option("--from", o->from, "Existing checkpoint to derive the next step from");
  auto* perturb = sub->add_option("--perturb", o->perturb, "Fraction of elements to change, in [0, 1]")
                      ->check(CLI::Range(0.0, 1.0));
  auto* perturb_block = sub->add_option("--perturb-block", o->perturb_block,
                                        "Changed elements come in runs of this many (1 = scattered)")
                            ->check(CLI::Range(uint64_t{1}, uint64_t{1} << 40))
                            ->capture_default_str();
  sub->add_flag("--force", o->force, "Replace a checkpoint already in --out");
  sub->add_flag("--quiet,-q", o->quiet, "No progress output");
  sub->add_flag("--json", o->json, "Print a machine-readable summary");
  preset->excludes(from);
  from->needs(perturb);
  perturb->needs(from);
  perturb_block->needs(perturb);
  sub->callback([o, shards] {
    o->shards_given = shards->count() > 0;
    if (o->preset.empty() && o->from.empty())
      throw CLI::ValidationError("gen-model", "give --preset NAME, or --from DIR with --perturb FRACTION");
  });
  return {sub, [o] { return o->from.empty() ? RunGenerate(*o) : RunPerturb(*o); }};
}

}  // namespace weightport::cli
