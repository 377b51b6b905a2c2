// weightport demo: the main job on an embedded local default. Generates a synthetic model, reads it
// back through the safetensors reader, builds its manifest, derives the next training step and
// reports which chunks a delta update would send.
#include <chrono>
#include <filesystem>
#include <iostream>
#include <memory>
#include <random>

#include <nlohmann/json.hpp>

#include "cli_common.h"
#include "weightport/format/checkpoint.h"
#include "weightport/format/synthetic_model.h"

namespace weightport::cli {
namespace {

namespace fs = std::filesystem;

struct DemoOptions {
  std::string dir;
  std::string preset = "tiny";
  std::string arch = "dense";
  double perturb = 0.01;
  bool keep = false;
  bool json = false;
};

double Since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

Result<nlohmann::ordered_json> Demo(const DemoOptions& o, const fs::path& dir) {
  auto say = [&](const std::string& line) {
    if (!o.json) std::cout << line << std::endl;
  };
  WP_ASSIGN_OR_RETURN(ModelArch arch, ParseModelArch(o.arch));
  WP_ASSIGN_OR_RETURN(ModelSpec spec, PresetSpec(o.preset, arch));
  const std::string v1 = (dir / "v1").string(), v2 = (dir / "v2").string();

  say("[1/4] generating a " + o.preset + " " + o.arch + " model (" + HumanBytes(ModelBytes(spec)) + ") in " +
      v1);
  auto t = std::chrono::steady_clock::now();
  ProgressPrinter progress("      generating", o.json);
  WP_RETURN_IF_ERROR(GenerateModel(
      spec, {.out_dir = v1, .seed = 1, .shards = 2, .overwrite = true, .progress = std::ref(progress)}));
  const double gen_s = Since(t);

  say("[2/4] opening it with the safetensors reader and hashing every 1 MiB chunk (xxh3-64)");
  t = std::chrono::steady_clock::now();
  WP_ASSIGN_OR_RETURN(Checkpoint c1, Checkpoint::Open(v1));
  WP_ASSIGN_OR_RETURN(Manifest m1, c1.BuildManifest(1));
  const double hash_s = Since(t);
  say("      " + std::to_string(c1.tensors().size()) + " tensors in " + std::to_string(c1.files().size()) +
      " shards, " + HumanBytes(m1.total_bytes()) + ", " + std::to_string(m1.num_chunks()) +
      " chunks, hashed at " + std::to_string(static_cast<int>(m1.total_bytes() / hash_s / 1e6)) + " MB/s");

  say("[3/4] deriving the next training step: " + Percent(o.perturb) + " of elements changed");
  ProgressPrinter progress2("      perturbing", o.json);
  WP_ASSIGN_OR_RETURN(PerturbReport report, PerturbModel({.from_dir = v1,
                                                          .out_dir = v2,
                                                          .fraction = o.perturb,
                                                          .seed = 2,
                                                          .overwrite = true,
                                                          .progress = std::ref(progress2)}));

  say("[4/4] comparing manifests: what a delta update would send");
  WP_ASSIGN_OR_RETURN(Checkpoint c2, Checkpoint::Open(v2));
  WP_ASSIGN_OR_RETURN(Manifest m2, c2.BuildManifest(2));
  uint64_t changed_chunks = 0, changed_bytes = 0;
  for (const auto& tensor : m2.tensors())
    for (size_t c : m2.ChangedChunks(tensor, m1))
      ++changed_chunks, changed_bytes += m2.ChunkRange(tensor, c).length;
  const double share = static_cast<double>(changed_bytes) / static_cast<double>(m2.total_bytes());
  say("      " + std::to_string(changed_chunks) + " of " + std::to_string(m2.num_chunks()) +
      " chunks changed: " + HumanBytes(changed_bytes) + " of " + HumanBytes(m2.total_bytes()) + " (" +
      Percent(share) + ")");

  nlohmann::ordered_json j = {{"dir", dir.string()},
                              {"preset", o.preset},
                              {"arch", o.arch},
                              {"tensors", c1.tensors().size()},
                              {"total_bytes", m1.total_bytes()},
                              {"generate_seconds", gen_s},
                              {"read_and_hash_seconds", hash_s},
                              {"chunks", m1.num_chunks()},
                              {"elements_changed", report.elements_changed},
                              {"elements_total", report.elements_total},
                              {"changed_chunks", changed_chunks},
                              {"changed_bytes", changed_bytes},
                              {"changed_share", share}};
  return j;
}

int RunDemo(const DemoOptions& o) {
  fs::path dir = o.dir;
  const bool temporary = dir.empty();
  if (temporary) {
    std::string tmpl = (fs::temp_directory_path() / "weightport-demo-XXXXXX").string();
    if (!mkdtemp(tmpl.data())) return Fail("demo", ErrnoError("cannot create a temporary directory", errno));
    dir = tmpl;
  }
  auto result = Demo(o, dir);
  if (temporary && !o.keep) {
    std::error_code ec;
    fs::remove_all(dir, ec);
  }
  if (!result.ok()) return Fail("demo", result.status());
  if (o.json)
    std::cout << result->dump(2) << "\n";
  else
    std::cout << "demo finished" << (temporary && !o.keep ? "" : "; files kept in " + dir.string()) << "\n";
  return kExitOk;
}

}  // namespace

Command AddDemoCommand(CLI::App& app) {
  auto o = std::make_shared<DemoOptions>();
  auto* sub = app.add_subcommand("demo",
                                 "Run the main job on a local default: generate a model, read and hash it, "
                                 "derive the next step and measure the delta");
  sub->add_option("--dir", o->dir, "Work directory (kept); default: a temporary one, removed at the end");
  sub->add_option("--preset", o->preset, "Model size")
      ->check(CLI::IsMember(PresetNames()))
      ->capture_default_str();
  sub->add_option("--arch", o->arch, "dense or moe")
      ->check(CLI::IsMember({"dense", "moe"}))
      ->capture_default_str();
  sub->add_option("--perturb", o->perturb, "Fraction of elements changed in the next step")
      ->check(CLI::Range(0.0, 1.0))
      ->capture_default_str();
  sub->add_flag("--keep", o->keep, "Keep the temporary directory");
  sub->add_flag("--json", o->json, "Print a machine-readable summary");
  return {sub, [o] { return RunDemo(*o); }};
}

}  // namespace weightport::cli
