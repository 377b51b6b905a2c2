// weightport reshard: one rank of a plan, or the coordinator, in this process. M source ranks and N
// destination ranks (each `--role src|dst --rank R`) and one `--role coordinator` compile the same
// plan from the same placements, join the coordinator, and move --versions versions: version v of n
// is the source model with a mask that vanishes at v = n (reshard_common.h), so the last one is the
// model itself, and `--verify` checks every byte of every version at the destination.
#include <iostream>

#include <nlohmann/json.hpp>

#include "cli/cli_common.h"
#include "cli/option_checks.h"
#include "cli/plan/plan_inputs.h"
#include "reshard_common.h"
#include "reshard_run.h"

namespace weightport::cli {
namespace {

int RunReshard(const ReshardOptions& o) {
  Status s = o.role == "coordinator" ? RunReshardCoordinator(o) : RunReshardRank(o);
  if (!s.ok()) return Fail("reshard", s);
  return kExitOk;
}

}  // namespace

Command AddReshardCommand(CLI::App& app) {
  auto o = std::make_shared<ReshardOptions>();
  auto* sub = app.add_subcommand(
      "reshard",
      "Run one rank of a resharding plan (source placement -> destination placement), or its\n"
      "coordinator; every process is given the same placements and compiles the same plan");
  sub->add_option("--role", o->role, "coordinator, src or dst")
      ->check(CLI::IsMember({"coordinator", "src", "dst"}))
      ->required();
  sub->add_option("--rank", o->rank, "This process's rank on its side")->check(CLI::NonNegativeNumber);
  sub->add_option("--src", o->plan.src_json, "Source layout: Placement JSON or layout spec (see plan --help)")
      ->required()
      ->check(CLI::ExistingFile);
  sub->add_option("--dst", o->plan.dst_json, "Destination layout: Placement JSON or layout spec")
      ->required()
      ->check(CLI::ExistingFile);
  sub->add_option("--topology", o->plan.topology_json, "Topology JSON")->check(CLI::ExistingFile);
  sub->add_option("--chunk-kb", o->chunk_kb, "Chunk size in KiB")
      ->check(CLI::Range(4, 1 << 20))
      ->capture_default_str();
  sub->add_option("--relay-fanout", o->plan.relay_fanout,
                  "0: every destination from the sources; 1: relay chain; k: k-ary tree")
      ->check(CLI::Range(0, 64))
      ->capture_default_str();
  sub->add_option(
      "--convert", o->plan.convert,
      "GLOB=DTYPE (repeatable): destinations store the matching tensors as DTYPE (f32, bf16,\n"
      "f16, or f8e4m3: quantised in 128x128 blocks where the fewer bytes travel, the scales written\n"
      "beside each shard as <tensor>_scale_inv; f8e4m3:tensor: one scale per tensor, for tensors\n"
      "each destination holds whole), converted in flight; every process\n"
      "must be given the same rules");
  sub->add_option("--compressor-gbps", o->plan.compressor_gbps, kCompressorHelp)
      ->check(CLI::Range(0.0, 1e6))
      ->capture_default_str();
  sub->add_option("--coordinator", o->coordinator, "HOST:PORT the coordinator listens on")->required();
  sub->add_option("--secret-file", o->secret_file, "Shared secret (mode 600)")->required();
  o->source.AddOptions(*sub);
  sub->add_option("--versions", o->versions, "Versions to move")
      ->check(CLI::Range(1, 100000))
      ->capture_default_str();
  sub->add_option("--perturb", o->perturb,
                  "Fraction of each tensor's 1 MiB blocks a version changes (version 1 has all): a\n"
                  "fine-tuning step, for delta updates; 1 changes every element every version")
      ->check(CLI::Range(0.0, 1.0))
      ->capture_default_str();
  sub->add_option("--transport", o->transport, "shm, tcp or auto")
      ->check(CLI::IsMember(kTransportChoices))
      ->capture_default_str();
  sub->add_option("--out", o->out, "A destination rank writes its shards here (safetensors) at the end");
  sub->add_flag("--verify", o->verify,
                "A destination rank checks every byte of every version against the model");
  sub->add_flag("--no-delta", o->no_delta,
                "A destination rank fetches every chunk, also those unchanged since the version it holds");
  sub->add_option("--timeout-s", o->timeout_s, "Bound on joining and on each version")
      ->check(CLI::Range(1, 3600))
      ->capture_default_str();
  sub->add_option("--quorum", o->quorum,
                  "Coordinator: commit each version when every destination still there verified and at "
                  "least N did; a lost or failing destination is dropped from the version (a lost relay is "
                  "routed around: its downstream reads the sources). 0: all or nothing")
      ->check(CLI::NonNegativeNumber);
  sub->add_flag("--rotate-keys", o->rotate_keys,
                "Every process: new transport keys after each version; a rank dropped from the run cannot "
                "read or write the versions after it (give it to the coordinator and every rank)");
  sub->add_option(
         "--device", o->device,
         "A rank: where its shards live besides the host arena: none, cuda (the current GPU: a source\n"
         "writes each version there and publishes from it, a destination's versions land there\n"
         "too, --verify checks that copy) or stand-in (host memory playing the device, no GPU needed)")
      ->check(CLI::IsMember({"none", "cuda", "stand-in"}))
      ->capture_default_str();
  sub->add_flag(
      "--device-direct", o->device_direct,
      "With --device, the transport reads and writes the device's memory itself (cuda needs a\n"
      "CUDA-aware UCX, scripts/setup --ucx-cuda, and --transport auto: shm and tcp name transports\n"
      "of host memory only). A destination: the chunks it stores as sent (not converted, quantised\n"
      "or relayed by it) are written straight into its device copy and verified there, not staged\n"
      "in the host arena. A source: publishes into a second device copy (copied on the device; it\n"
      "costs that much device memory) that destinations read from, so their transports must read\n"
      "the device's memory too; only what it converts, quantises or compresses crosses to the host");
  sub->add_flag("--rejoin", o->rejoin,
                "Coordinator: a rank whose connection was lost (a crashed process started again) may join "
                "the running session; it takes part from the next version");
  sub->add_option(
         "--late", o->late,
         "Coordinator, with --rejoin and --quorum: destination ranks that join later (replicas added "
         "as the service scales out); versions run without them until they come, and each takes "
         "part from the version after it joined")
      ->delimiter(',')
      ->check(CLI::NonNegativeNumber);
  sub->add_option(
         "--rollback-to", o->rollback_to,
         "Coordinator: after the last version, roll every destination back to version V (each restores "
         "the copy it kept, --keep-versions; all or nothing)")
      ->check(CLI::PositiveNumber);
  sub->add_option("--first-version", o->first_version,
                  "A source started again to replace a lost one: the first version it writes and publishes")
      ->check(CLI::PositiveNumber);
  sub->add_flag("--refill", o->refill,
                "A source started in place of a lost one (--first-version V): first read its shards from the "
                "sources that hold the same slices, which hold version V then, and check them against it");
  sub->add_option("--keep-versions", o->keep_versions,
                  "A destination: committed versions kept for a rollback, each a copy of its shards")
      ->check(Bounded(kKeepVersionsBound));
  sub->add_option(
         "--max-gbps", o->max_gbps,
         "A destination: cap the rate it fetches at (Gbit/s), so that a sync leaves a shared link to "
         "the training job's own traffic; 0: no cap")
      ->check(FiniteRange(0, 1e6))
      ->capture_default_str();
  sub->add_option("--relay-headroom", o->relay_headroom,
                  "A destination that relays and reads from several hosts: fetch at most (1 - this) of its "
                  "NIC's rate, so that the requests of the ranks reading from it do not queue behind its "
                  "own inbound data; with --max-gbps the lower cap holds; 0: never")
      ->check(FiniteRange(0, 0.9))
      ->capture_default_str();
  AddPriorityOption(*sub, o->priority, "A destination");
  sub->add_option("--delay-backoff", o->delay_backoff,
                  "A destination: halve the chunks in flight when one takes this many times the fastest "
                  "(queueing on a shared link); 0: watch failed Gets only")
      ->check(FiniteRange(0, 1e6))
      ->capture_default_str();
  sub->add_option(
         "--crash-at-version", o->crash_at_version,
         "Fault drill: the rank kills itself (SIGKILL) in version V: a source once it announced V, a "
         "destination once V began")
      ->check(CLI::PositiveNumber);
  sub->add_flag("--json", o->json, "Print a machine-readable summary");
  return {sub, [o] { return RunReshard(*o); }};
}

}  // namespace weightport::cli
