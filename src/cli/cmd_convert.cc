// weightport convert IN OUT: re-write a checkpoint (re-shard it) with weightport's writer.
#include <filesystem>
#include <iostream>
#include <memory>

#include "cli/cli_common.h"
#include "weightport/format/checkpoint.h"
#include "weightport/format/model_files.h"

namespace weightport::cli {
namespace {

namespace fs = std::filesystem;

struct ConvertOptions {
  std::string in, out;
  int shards = 1;
  bool force = false;
  bool quiet = false;
};

Status Convert(const ConvertOptions& o) {
  WP_ASSIGN_OR_RETURN(Checkpoint ckpt, Checkpoint::Open(o.in));
  std::vector<TensorMeta> metas;
  for (const auto& t : ckpt.tensors()) metas.push_back(t.meta());
  ProgressPrinter progress("converting into " + o.out, o.quiet);
  auto view = [&](const TensorMeta& meta) -> Result<std::span<const std::byte>> {
    return ckpt.Data(*ckpt.Find(meta.name));
  };
  return model_files::WriteShardedCheckpoint(o.out, o.force, metas, o.shards, ckpt.metadata(), view,
                                             std::ref(progress));
}

}  // namespace

Command AddConvertCommand(CLI::App& app) {
  auto o = std::make_shared<ConvertOptions>();
  auto* sub = app.add_subcommand("convert", "Read a checkpoint and write it again as N safetensors shards");
  sub->add_option("in", o->in, "Input .safetensors file or checkpoint directory")->required();
  sub->add_option("out", o->out, "Output directory")->required();
  sub->add_option("--shards", o->shards, "Number of output files")
      ->check(CLI::Range(1, 100000))
      ->capture_default_str();
  sub->add_flag("--force", o->force, "Replace a checkpoint already in the output directory");
  sub->add_flag("--quiet,-q", o->quiet, "No progress output");
  return {sub, [o] {
            Status s = Convert(*o);
            if (!s.ok()) return Fail("convert", s);
            std::cout << "wrote " << o->out << " (" << o->shards << " shard(s))\n";
            return kExitOk;
          }};
}

}  // namespace weightport::cli
