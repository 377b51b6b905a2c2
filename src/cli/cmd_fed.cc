// weightport fed server / fed client: federated rounds (engine/fed/) from the command line. The
// server's model comes from a checkpoint or a synthetic preset (as f32); a client trains
// synthetically: each round's update is a deterministic pseudo-random step of size --lr, so that
// runs repeat and a test can recompute them.
#include <cstdio>
#include <fstream>
#include <iostream>

#include <nlohmann/json.hpp>

#include "cli/cli_common.h"
#include "cli/option_checks.h"
#include "cli/pubsub/pubsub_common.h"
#include "weightport/engine/fed/fed_client.h"
#include "weightport/engine/fed/fed_codec.h"
#include "weightport/engine/fed/fed_report.h"
#include "weightport/engine/fed/fed_server.h"
#include "weightport/kernels/convert.h"

namespace weightport::cli {
namespace {

using std::chrono::milliseconds;

struct FedOptions {
  // Both ends.
  std::string secret_file;
  bool new_secret = false;
  bool no_compress = false;
  std::string dump_dir;
  bool json = false;
  // Server.
  std::string listen = "127.0.0.1:7890";
  ModelSource source;
  size_t clients = 1;
  uint64_t rounds = 3;
  uint64_t chunk_kb = 1024;
  double deadline_s = 60;
  std::string late = "drop";
  double staleness = 0.5;
  double join_timeout_s = 120;
  // Client.
  std::string connect;
  std::string name;
  std::string encoding = "bf16";
  double samples = 1;
  double lr = 1e-3;
  uint64_t seed = 1;
  uint64_t client_rounds = 0;
  uint64_t garbage_round = 0;
  uint64_t leave_in_round = 0;
  double timeout_s = 120;
};

Status WriteFloats(const std::string& path, std::span<const float> values) {
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(values.data()), static_cast<std::streamsize>(values.size_bytes()));
  if (!out) return IoError("cannot write " + path);
  return Status::Ok();
}

// The model as one flat f32 array, tensors in layout order.
Result<std::vector<float>> LoadModelF32(const ModelSource& source) {
  WP_ASSIGN_OR_RETURN(std::vector<TensorMeta> layout, ModelLayout(source));
  uint64_t bytes = 0, elements = 0;
  for (const TensorMeta& t : layout) {
    bytes += t.bytes;
    elements += static_cast<uint64_t>(t.num_elements());
  }
  std::vector<std::byte> raw(bytes);
  WP_RETURN_IF_ERROR(LoadWeights(source, layout, raw, nullptr));
  std::vector<float> out(elements);
  uint64_t at = 0, e = 0;
  for (const TensorMeta& t : layout) {
    const auto n = static_cast<uint64_t>(t.num_elements());
    WP_RETURN_IF_ERROR(kernels::Convert(t.dtype, DType::kF32, raw.data() + at, out.data() + e, n)
                           .WithContext("tensor '" + t.name + "'"));
    at += t.bytes;
    e += n;
  }
  return out;
}

int RunServer(const FedOptions& o) {
  auto fail = [](const Status& s) { return Fail("fed server", s); };
  auto secret = LoadSecret(o.secret_file, o.new_secret);
  if (!secret.ok()) return fail(secret.status());
  auto listen = ParseHostPort(o.listen, "127.0.0.1");
  if (!listen.ok()) return fail(listen.status().WithContext("--listen"));
  if (o.late != "drop" && o.late != "fold") return fail(InvalidArgument("--late must be drop or fold"));
  auto model = LoadModelF32(o.source);
  if (!model.ok()) return fail(model.status());
  const uint64_t elements = model->size();
  if (!o.dump_dir.empty()) {
    if (Status s = WriteFloats(o.dump_dir + "/global_0.f32", *model); !s.ok()) return fail(s);
  }
  auto listener = ControlListener::Listen(listen->first, listen->second, "fed-server", *secret);
  if (!listener.ok()) return fail(listener.status());
  FedServerOptions so;
  so.clients = o.clients;
  so.rounds = o.rounds;
  so.chunk_elements = static_cast<uint32_t>(o.chunk_kb * 1024 / 4);
  so.deadline = milliseconds(static_cast<int64_t>(o.deadline_s * 1e3));
  so.join_timeout = milliseconds(static_cast<int64_t>(o.join_timeout_s * 1e3));
  so.late = o.late == "fold" ? FedLatePolicy::kFold : FedLatePolicy::kDrop;
  so.staleness = o.staleness;
  so.compress = !o.no_compress;
  so.log = [](const std::string& line) { std::cerr << "weightport " << line << std::endl; };
  Status dumped;
  so.on_round = [&](uint64_t r, std::span<const float> global) {
    if (!o.dump_dir.empty() && dumped.ok())
      dumped = WriteFloats(o.dump_dir + "/global_" + std::to_string(r) + ".f32", global);
  };
  FedServer server(std::move(*listener), std::move(*model), so);
  std::cerr << "weightport fed: server at " << server.address() << ", " << HumanBytes(elements * 4)
            << " f32, waiting for " << o.clients << " client(s)" << std::endl;
  auto reports = server.Run();
  if (!reports.ok()) return fail(reports.status());
  if (!dumped.ok()) return fail(dumped);
  if (o.json) {
    const auto rounds = nlohmann::ordered_json::parse(FedRoundsJson(*reports));
    std::cout << nlohmann::ordered_json{{"elements", elements},
                                        {"model_f32_bytes", elements * 4},
                                        {"chunk_elements", so.chunk_elements},
                                        {"rounds", rounds},
                                        {"aggregation_state_bytes", server.peak_state_bytes()},
                                        {"peak_rss", PeakRssBytes()}}
                     .dump(2)
              << std::endl;
  } else {
    for (const auto& r : *reports) {
      size_t folded = 0;
      for (const auto& c : r.clients) folded += c.folded;
      std::printf("round %llu: %.2f s, %zu of %zu updates folded, %s down, %s up (full bf16 model: %s)\n",
                  static_cast<unsigned long long>(r.round), r.seconds, folded, r.clients.size(),
                  HumanBytes(r.bytes_down).c_str(), HumanBytes(r.bytes_up).c_str(),
                  HumanBytes(r.full_bf16_bytes).c_str());
      for (const auto& c : r.clients)
        if (!c.excluded.empty()) std::printf("  %s excluded: %s\n", c.name.c_str(), c.excluded.c_str());
    }
  }
  return kExitOk;
}

// A deterministic step: every element moves by at most `lr`, differently per client and round.
void SyntheticUpdate(uint64_t seed, const std::string& name, uint64_t round, double lr,
                     std::span<float> out) {
  uint64_t x = seed * 0x9E3779B97F4A7C15ull ^ round * 0xBF58476D1CE4E5B9ull;
  for (char ch : name) x = (x ^ static_cast<uint8_t>(ch)) * 0x100000001B3ull;
  for (float& v : out) {
    x ^= x >> 31;
    x *= 0x94D049BB133111EBull;
    x ^= x >> 29;
    v = static_cast<float>(lr * (static_cast<double>(x >> 11) / 9007199254740992.0 * 2 - 1));
  }
}

int RunClient(const FedOptions& o) {
  auto fail = [](const Status& s) { return Fail("fed client", s); };
  auto secret = LoadSecret(o.secret_file, false);
  if (!secret.ok()) return fail(secret.status());
  auto encoding = ParseFedEncoding(o.encoding);
  if (!encoding.ok()) return fail(encoding.status());
  FedClientOptions co;
  co.name = o.name;
  co.encoding = *encoding;
  co.compress = !o.no_compress;
  co.keep_sent = !o.dump_dir.empty();
  co.timeout = milliseconds(static_cast<int64_t>(o.timeout_s * 1e3));
  auto client = FedClient::Connect(o.connect, *secret, co);
  if (!client.ok()) return fail(client.status());
  nlohmann::ordered_json rounds = nlohmann::json::array();
  std::vector<float> update;
  Status end;
  for (uint64_t done = 0; o.client_rounds == 0 || done < o.client_rounds; ++done) {
    auto start = (*client)->NextRound();
    if (!start.ok()) {
      if (start.status().code() != StatusCode::kNotFound) end = start.status();
      break;
    }
    const uint64_t r = (*client)->round();
    if (r == o.leave_in_round) {
      std::cerr << "weightport fed: " << o.name << " leaves in round " << r << std::endl;
      return kExitOk;
    }
    if (r == o.garbage_round) {
      if (Status s = (*client)->SendGarbage(o.samples); !s.ok()) return fail(s);
      rounds.push_back({{"round", r}, {"garbage", true}});
      continue;
    }
    update.resize(start->size());
    SyntheticUpdate(o.seed, o.name, r, o.lr, update);
    auto sent = (*client)->SendUpdate(update, o.samples);
    if (!sent.ok()) return fail(sent.status());
    if (!o.dump_dir.empty()) {
      if (Status s = WriteFloats(o.dump_dir + "/sent_" + o.name + "_" + std::to_string(r) + ".f32",
                                 (*client)->last_sent());
          !s.ok())
        return fail(s);
    }
    rounds.push_back(nlohmann::ordered_json::parse(FedClientRoundJson(*sent)));
  }
  if (o.json)
    std::cout << nlohmann::ordered_json{{"name", o.name}, {"rounds", rounds}, {"ok", end.ok()}}.dump()
              << std::endl;
  if (!end.ok()) return fail(end);
  return kExitOk;
}

}  // namespace

Command AddFedCommand(CLI::App& app) {
  auto o = std::make_shared<FedOptions>();
  auto* sub = app.add_subcommand("fed", "Federated rounds: one aggregator, many clients on slow links");
  sub->require_subcommand(1);
  auto common = [&](CLI::App* s) {
    s->add_option("--secret-file", o->secret_file, "Shared secret (mode 600)")->required();
    s->add_flag("--no-compress", o->no_compress, "Send every chunk as is (no zstd)");
    s->add_option(
        "--dump-dir", o->dump_dir,
        "Write raw f32 files here: the server global_<round>.f32, a client sent_<name>_<round>.f32");
    s->add_flag("--json", o->json, "Print a machine-readable summary");
  };
  auto* server =
      sub->add_subcommand("server", "Publish the global model and fold the clients' updates (FedAvg)");
  common(server);
  server->add_flag("--new-secret", o->new_secret,
                   "Create --secret-file with a random secret if it does not exist");
  server->add_option("--listen", o->listen, "HOST:PORT to listen on")->capture_default_str();
  o->source.AddOptions(*server);
  server->add_option("--clients", o->clients, "Clients to wait for before round 1")
      ->check(CLI::Range(1, 100000))
      ->capture_default_str();
  server->add_option("--rounds", o->rounds, "Rounds to run")
      ->check(CLI::Range(1, 1000000))
      ->capture_default_str();
  server->add_option("--chunk-kb", o->chunk_kb, "KiB of f32 per chunk (the unit of delta and folding)")
      ->check(CLI::Range(4, 1 << 20))
      ->capture_default_str();
  server->add_option("--deadline", o->deadline_s, "Seconds a round may take; later updates are late")
      ->check(FiniteRange(0.001, 86400 * 365))
      ->capture_default_str();
  server->add_option("--late", o->late, "drop: late chunks are dropped; fold: folded into the next round")
      ->capture_default_str();
  server->add_option("--staleness", o->staleness, "--late fold: a late chunk's weight factor")
      ->check(FiniteRange(0.0, 1.0))
      ->capture_default_str();
  server->add_option("--join-timeout", o->join_timeout_s, "Seconds to wait for --clients")
      ->check(FiniteRange(0, 86400 * 365))
      ->capture_default_str();
  auto* client =
      sub->add_subcommand("client", "Receive each round's model, train (synthetic), send the update");
  common(client);
  client->add_option("--connect", o->connect, "The server, HOST:PORT")->required();
  client->add_option("--name", o->name, "This client's name")->required();
  client->add_option("--encoding", o->encoding, "Update encoding: f32, bf16 or fp8 (error feedback)")
      ->capture_default_str();
  client->add_option("--samples", o->samples, "Its weight: local sample count")
      ->check(FiniteRange(1e-9, 1e15))
      ->capture_default_str();
  client->add_option("--lr", o->lr, "Synthetic training: each element moves by at most this")
      ->check(FiniteRange(0, 1e6))
      ->capture_default_str();
  client->add_option("--seed", o->seed, "Synthetic training seed")->capture_default_str();
  client->add_option("--rounds", o->client_rounds, "Rounds to take part in (0: until the server ends)");
  client->add_option("--garbage-round", o->garbage_round,
                     "Send garbage (values that are not finite) in this round");
  client->add_option("--leave-in-round", o->leave_in_round,
                     "Exit after receiving this round's model, sending nothing");
  client->add_option("--timeout", o->timeout_s, "Seconds to wait for the server")
      ->check(FiniteRange(0, 86400 * 365))
      ->capture_default_str();
  return {sub, [o, server] { return server->parsed() ? RunServer(*o) : RunClient(*o); }};
}

}  // namespace weightport::cli
