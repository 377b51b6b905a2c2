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
// All messages travel on the authenticated control channel (control/channel.h: HMAC per frame,
// bounded sizes); on these links the wire, not the copies, is the limit.
//
// The update's encoding and the streaming sum: fed_codec.h; the client: fed_client.h; the reports:
// fed_report.h.
//
// Thread-safety: FedServer from one thread.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "weightport/control/channel.h"
#include "weightport/core/status.h"
#include "weightport/engine/fed/fed_report.h"

namespace weightport {

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

}  // namespace weightport
