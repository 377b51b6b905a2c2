// weightport inspect PATH: what a checkpoint holds.
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <memory>

#include <nlohmann/json.hpp>

#include "cli/cli_common.h"
#include "weightport/core/hash.h"
#include "weightport/format/checkpoint.h"

namespace weightport::cli {
namespace {

struct InspectOptions {
  std::string path;
  bool json = false;
  bool no_hash = false;
};

int RunInspect(const InspectOptions& o) {
  auto ckpt = Checkpoint::Open(o.path);
  if (!ckpt.ok()) return Fail("inspect", ckpt.status());
  const auto& files = ckpt->files();
  auto file_name = [&](const CheckpointTensor& t) {
    return std::filesystem::path(files[t.file].path()).filename().string();
  };
  auto hash_of = [&](const CheckpointTensor& t) {
    return o.no_hash ? std::string() : HashToHex(Xxh3(ckpt->Data(t)));
  };

  if (o.json) {
    nlohmann::ordered_json out;
    out["path"] = o.path;
    out["files"] = nlohmann::ordered_json::array();
    for (const auto& f : files) out["files"].push_back(std::filesystem::path(f.path()).filename().string());
    out["num_tensors"] = ckpt->tensors().size();
    out["total_bytes"] = ckpt->total_bytes();
    out["metadata"] = ckpt->metadata();
    auto& tensors = out["tensors"] = nlohmann::ordered_json::array();
    for (const auto& t : ckpt->tensors()) {
      nlohmann::ordered_json j;
      j["name"] = t.meta().name;
      j["dtype"] = std::string(DTypeName(t.meta().dtype));
      j["safetensors_dtype"] = std::string(SafetensorsDTypeName(t.meta().dtype));
      j["shape"] = t.meta().shape;
      j["bytes"] = t.meta().bytes;
      j["file"] = file_name(t);
      j["data_offsets"] = {t.entry->data.offset, t.entry->data.end()};
      if (!o.no_hash) j["xxh3"] = hash_of(t);
      tensors.push_back(std::move(j));
    }
    std::cout << out.dump(2) << "\n";
    return kExitOk;
  }

  size_t name_width = 4;
  for (const auto& t : ckpt->tensors()) name_width = std::max(name_width, t.meta().name.size());
  name_width = std::min<size_t>(name_width, 64);
  std::printf("%-*s  %-7s  %-20s  %12s  %s\n", static_cast<int>(name_width), "name", "dtype", "shape", "size",
              o.no_hash ? "" : "xxh3");
  std::map<DType, std::pair<size_t, uint64_t>> by_dtype;
  for (const auto& t : ckpt->tensors()) {
    std::printf("%-*s  %-7s  %-20s  %12s  %s\n", static_cast<int>(name_width), t.meta().name.c_str(),
                std::string(DTypeName(t.meta().dtype)).c_str(), FormatShape(t.meta().shape).c_str(),
                HumanBytes(t.meta().bytes).c_str(), hash_of(t).c_str());
    auto& [count, bytes] = by_dtype[t.meta().dtype];
    ++count, bytes += t.meta().bytes;
  }
  std::printf("\n%zu tensors in %zu file(s), %s (%llu bytes)\n", ckpt->tensors().size(), files.size(),
              HumanBytes(ckpt->total_bytes()).c_str(), static_cast<unsigned long long>(ckpt->total_bytes()));
  for (const auto& [dtype, cb] : by_dtype)
    std::printf("  %-7s %6zu tensors  %s\n", std::string(DTypeName(dtype)).c_str(), cb.first,
                HumanBytes(cb.second).c_str());
  if (!ckpt->metadata().empty()) {
    std::printf("metadata:\n");
    for (const auto& [k, v] : ckpt->metadata()) std::printf("  %s = %s\n", k.c_str(), v.c_str());
  }
  return kExitOk;
}

}  // namespace

Command AddInspectCommand(CLI::App& app) {
  auto o = std::make_shared<InspectOptions>();
  auto* sub = app.add_subcommand("inspect",
                                 "List the tensors of a safetensors file or checkpoint directory: "
                                 "dtypes, shapes, sizes, totals and per-tensor xxh3-64");
  sub->add_option("path", o->path, "A .safetensors file or a directory of shards")->required();
  sub->add_flag("--json", o->json, "Print machine-readable JSON");
  sub->add_flag("--no-hash", o->no_hash, "Skip hashing (faster on large checkpoints)");
  return {sub, [o] { return RunInspect(*o); }};
}

}  // namespace weightport::cli
