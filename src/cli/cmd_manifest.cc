// weightport manifest PATH: the manifest (tensors, offsets, chunk hashes) of a checkpoint.
#include <bit>
#include <iostream>
#include <memory>

#include <nlohmann/json.hpp>

#include "cli/cli_common.h"
#include "cli/option_checks.h"
#include "weightport/format/checkpoint.h"

namespace weightport::cli {
namespace {

struct ManifestOptions {
  std::string path;
  uint64_t chunk_size = kDefaultChunkSize;
  uint64_t version = 0;
  std::string diff_against;
};

// One xxh3 per chunk, held in memory and printed as JSON: about 160 bytes of memory per chunk
// (measured: 3.26M chunks, 522 MB peak), so about 640 MiB at this limit, which is a 4 TiB model at
// the default 1 MiB chunks. Past it the manifest would take GiBs (tiny at --chunk-size 4: 7.3 GB).
constexpr uint64_t kMaxManifestChunks = uint64_t{1} << 22;

// Refuses a chunk size that makes more than kMaxManifestChunks chunks of `ckpt`, before anything
// is allocated for them; the message names the smallest power of two that fits.
Status CheckChunkCount(const Checkpoint& ckpt, uint64_t chunk_size) {
  uint64_t chunks = 0;
  for (const auto& t : ckpt.tensors()) {
    chunks += t.meta().bytes / chunk_size + (t.meta().bytes % chunk_size != 0 ? 1 : 0);
    if (chunks > kMaxManifestChunks) break;  // (no overflow: each term is at most the tensor's bytes)
  }
  if (chunks <= kMaxManifestChunks) return Status::Ok();
  uint64_t fits = chunk_size;
  while (fits < (uint64_t{1} << 40)) {
    uint64_t n = 0;
    for (const auto& t : ckpt.tensors()) n += t.meta().bytes / fits + (t.meta().bytes % fits != 0 ? 1 : 0);
    if (n <= kMaxManifestChunks) break;
    fits = std::bit_floor(fits) * 2;
  }
  return InvalidArgument(
      ckpt.path() + ": --chunk-size " + std::to_string(chunk_size) + " makes more than " +
      std::to_string(kMaxManifestChunks) + " chunks of its " + std::to_string(ckpt.total_bytes()) +
      " bytes (the limit: one hash per chunk, about 160 bytes of memory each); use --chunk-size " +
      std::to_string(fits) + " or more");
}

int RunManifest(const ManifestOptions& o) {
  auto ckpt = Checkpoint::Open(o.path);
  if (!ckpt.ok()) return Fail("manifest", ckpt.status());
  if (Status s = CheckChunkCount(*ckpt, o.chunk_size); !s.ok()) {
    Fail("manifest", s);
    return kExitUsage;
  }
  auto manifest = ckpt->BuildManifest(o.version, o.chunk_size);
  if (!manifest.ok()) return Fail("manifest", manifest.status());
  if (o.diff_against.empty()) {
    std::cout << manifest->ToJson().dump(2) << "\n";
    return kExitOk;
  }
  auto old_ckpt = Checkpoint::Open(o.diff_against);
  if (!old_ckpt.ok()) return Fail("manifest", old_ckpt.status());
  if (Status s = CheckChunkCount(*old_ckpt, o.chunk_size); !s.ok()) {
    Fail("manifest", s);
    return kExitUsage;
  }
  auto old = old_ckpt->BuildManifest(o.version, o.chunk_size);
  if (!old.ok()) return Fail("manifest", old.status());
  uint64_t changed_chunks = 0, changed_bytes = 0;
  nlohmann::ordered_json tensors = nlohmann::ordered_json::array();
  for (const auto& t : manifest->tensors()) {
    const auto changed = manifest->ChangedChunks(t, *old);
    if (changed.empty()) continue;
    uint64_t bytes = 0;
    for (size_t c : changed) bytes += manifest->ChunkRange(t, c).length;
    changed_chunks += changed.size(), changed_bytes += bytes;
    tensors.push_back({{"name", t.meta.name}, {"changed_chunks", changed}, {"changed_bytes", bytes}});
  }
  nlohmann::ordered_json out = {{"path", o.path},
                                {"against", o.diff_against},
                                {"chunk_size", o.chunk_size},
                                {"chunks", manifest->num_chunks()},
                                {"changed_chunks", changed_chunks},
                                {"total_bytes", manifest->total_bytes()},
                                {"changed_bytes", changed_bytes},
                                {"tensors", std::move(tensors)}};
  std::cout << out.dump(2) << "\n";
  return kExitOk;
}

}  // namespace

Command AddManifestCommand(CLI::App& app) {
  auto o = std::make_shared<ManifestOptions>();
  auto* sub =
      app.add_subcommand("manifest",
                         "Print the manifest of a checkpoint as JSON: tensors in order, offsets and xxh3-64 "
                         "hashes per chunk;\nwith --diff OLD, which chunks changed since OLD");
  sub->add_option("path", o->path, "A .safetensors file or checkpoint directory")->required();
  sub->add_option("--chunk-size", o->chunk_size, "Bytes per hashed chunk")
      ->check(CLI::Range(uint64_t{1}, uint64_t{1} << 40))
      ->capture_default_str();
  sub->add_option("--version", o->version, "Version id to record")
      ->check(NonNegativeInteger())
      ->capture_default_str();
  sub->add_option("--diff", o->diff_against, "An older checkpoint of the same model: report changed chunks");
  return {sub, [o] { return RunManifest(*o); }};
}

}  // namespace weightport::cli
