// Federated rounds: one aggregator (FedServer) and many clients (FedClient) on slow, lossy links.
//
// The model is a flat array of f32 elements cut into chunks of `chunk_elements`. Per round r:
//
//   server -> client  FedRoundBegin(r, version, elements, chunk_elements, deadline), then the
//                     chunks of the global model (bf16, zstd where it shrinks) that differ from the
//                     version the client holds (delta; a new client gets all), then
//                     FedModelEnd(xxh3 of the whole bf16 model): the client checks what it built.
//   client            trains from the received model; its update is local - start, in f32.
//   client -> server  FedUpdateBegin(r, samples), one FedUpdateChunk per chunk (f32, bf16 or fp8
//                     e4m3 with one scale per chunk; zstd where it shrinks; the client keeps what
//                     the encoding lost and adds it to the next round's update: error feedback),
//                     FedUpdateEnd(r).
//   server            folds each chunk as it arrives into a running weighted sum (FedAggregator:
//                     weight = samples); it never holds a client's whole update, so its memory is
//                     a constant times the model, whatever the number of clients. The round closes
//                     when every participant ended its update or at the deadline; the global model
//                     becomes global + sum / weights, per chunk.
//
// A chunk that does not decode to the chunk's element count of finite values (garbage) is never
// folded: the client is excluded from the round and named, and the chunks of its update already
// folded are taken back out of the sum (the server notes each folded chunk in a temporary file),
// so an excluded client (garbage, lost, or late) leaves no trace in the round. A late client's
// update is dropped, or folded into the next round with its weight times `staleness`
// (FedLatePolicy), what it had delivered by the deadline and what comes after alike.
//
// All messages travel on the authenticated control channel (control_channel.h: HMAC per frame,
// bounded sizes); on these links the wire, not the copies, is the limit.
//
// Thread-safety: FedServer and FedClient from one thread each.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "weightport/control/auth.h"
#include "weightport/control/channel.h"
#include "weightport/core/status.h"

namespace weightport {

enum class FedEncoding : uint8_t { kF32 = 0, kBF16 = 1, kFP8 = 2 };
const char* FedEncodingName(FedEncoding e);  // "f32", "bf16", "fp8"
Result<FedEncoding> ParseFedEncoding(std::string_view name);

// One chunk of an update on the wire.
struct FedChunk {
  FedEncoding encoding = FedEncoding::kF32;
  float scale = 1;          // fp8: the factor that dequantises
  uint32_t raw_bytes = 0;   // encoded size before compression
  bool compressed = false;  // `data` is a zstd frame of the raw bytes
  Bytes data;
};

// Encodes `update` (one chunk of f32) with error feedback: `residual` (same length, kept by the
// client across rounds) is added first and receives what the encoding lost. zstd when it shrinks
// the bytes by 10% or more and `compress`. `sent`, when not empty, receives what the chunk decodes
// to: what the aggregator folds.
FedChunk EncodeUpdateChunk(std::span<const float> update, std::span<float> residual, FedEncoding encoding,
                           bool compress, std::span<float> sent = {});
// Decodes into `out` (the chunk's element count). InvalidArgument when the chunk is malformed, of
// another size, or holds a value that is not finite.
Status DecodeUpdateChunk(const FedChunk& chunk, std::span<float> out);

// The streaming FedAvg: a running weighted sum and weight per chunk.
class FedAggregator {
 public:
  FedAggregator(uint64_t elements, uint32_t chunk_elements);
  uint32_t chunks() const { return chunks_; }
  std::span<const float> ChunkOf(std::span<const float> model, uint32_t chunk) const;
  // Adds weight * values (chunk `chunk`'s elements) to the sum.
  void Fold(uint32_t chunk, double weight, std::span<const float> values);
  // global += sum / weight, per chunk that received anything; then empties the sums.
  void ApplyTo(std::span<float> global);
  double weight(uint32_t chunk) const { return weights_[chunk]; }
  uint64_t bytes() const { return sum_.size() * sizeof(float) + weights_.size() * sizeof(double); }

 private:
  uint64_t elements_;
  uint32_t chunk_elements_, chunks_;
  std::vector<float> sum_;
  std::vector<double> weights_;
};

enum class FedLatePolicy : uint8_t { kDrop, kFold };

struct FedServerOptions {
  size_t clients = 1;  // round 1 starts once this many joined (later rounds: whoever is connected)
  uint64_t rounds = 3;
  uint32_t chunk_elements = 1u << 18;  // 1 MiB of f32
  std::chrono::milliseconds join_timeout{120'000};
  std::chrono::milliseconds deadline{60'000};  // per round, from its start
  FedLatePolicy late = FedLatePolicy::kDrop;
  double staleness = 0.5;  // kFold: a late chunk's weight factor in the next round
  bool compress = true;    // the model's chunks travel as zstd frames where they shrink
  std::function<void(const std::string&)> log;
  // Called after each round with the new global model (f32), e.g. to save it.
  std::function<void(uint64_t round, std::span<const float> global)> on_round;
};

struct FedClientReport {
  std::string name;
  bool folded = false;   // its whole update was folded into this round
  std::string excluded;  // why it was left out (empty: it was not)
  double samples = 0;
  uint32_t chunks_folded = 0;
  uint32_t late_chunks = 0;  // folded into the next round (kFold) or dropped
  uint64_t bytes_down = 0;   // model bytes sent to it (on the wire)
  uint64_t bytes_up = 0;     // update bytes received from it (on the wire)
  double download_s = 0;     // RoundBegin to its last model chunk written to the socket
  double update_s = 0;       // RoundBegin to its FedUpdateEnd
};

struct FedRoundReport {
  uint64_t round = 0;
  double seconds = 0;
  bool deadline_hit = false;
  uint64_t model_chunks_changed = 0;  // chunks of the global that differ from the previous version
  uint64_t full_bf16_bytes = 0;  // the model once, in bf16: what a client without delta or compression gets
  uint64_t bytes_down = 0, bytes_up = 0;
  uint64_t stale_chunks_folded = 0;  // late chunks of the previous round folded into this one
  std::vector<FedClientReport> clients;
};

// The reports as JSON text: an array of rounds, each with its clients (the CLI's and the Python
// package's summary).
std::string FedRoundsJson(const std::vector<FedRoundReport>& rounds);

class FedServer {
 public:
  // `initial` is the global model at version 0. Listens on the given listener.
  FedServer(std::unique_ptr<ControlListener> listener, std::vector<float> initial, FedServerOptions options);
  ~FedServer();
  FedServer(const FedServer&) = delete;
  FedServer& operator=(const FedServer&) = delete;
  const std::string& address() const;
  // Waits for `clients` joins, then runs every round; reports one entry per round.
  Result<std::vector<FedRoundReport>> Run();
  std::span<const float> global() const;
  uint64_t peak_state_bytes() const;  // what the aggregation held at most: global, sum, bf16 copy, frames

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

struct FedClientOptions {
  std::string name;
  FedEncoding encoding = FedEncoding::kBF16;
  bool compress = true;
  bool keep_sent = false;                      // keep what each update decodes to (last_sent)
  std::chrono::milliseconds timeout{120'000};  // bound on each wait for the server
};

struct FedClientRound {
  uint64_t round = 0;
  uint64_t version = 0;
  uint64_t chunks_received = 0;  // model chunks that changed since the version held
  uint64_t bytes_down = 0, bytes_up = 0;
  double download_s = 0, upload_s = 0;
};
// One client round as a JSON object (the CLI's and the Python package's).
std::string FedClientRoundJson(const FedClientRound& round);

class FedClient {
 public:
  // Connects (retrying while the server is not listening yet, up to options.timeout) and joins.
  static Result<std::unique_ptr<FedClient>> Connect(const std::string& server, const Secret& secret,
                                                    FedClientOptions options);
  ~FedClient();
  // Waits for the next round and receives its model: the start point, as f32. NotFound when the
  // server ended the run (Bye).
  Result<std::span<const float>> NextRound();
  // Sends the update (local - start, f32, the model's length) with its weight (sample count).
  Result<FedClientRound> SendUpdate(std::span<const float> update, double samples);
  // What the last SendUpdate's chunks decode to (what the server folds), when kept.
  std::span<const float> last_sent() const;
  // Sends an update whose chunks from `valid_chunks` on decode to values that are not finite (the
  // ones before hold 1.0): tests of the server's checks and of its taking back what it folded.
  Status SendGarbage(double samples, uint32_t valid_chunks = 0);
  uint64_t round() const;

  struct Impl;

 private:
  explicit FedClient(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace weightport
