// A client of federated rounds (the rounds: fed_server.h): joins the server, receives each round's
// model, and sends its update.
//
// Thread-safety: FedClient from one thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "weightport/control/auth.h"
#include "weightport/core/status.h"
#include "weightport/engine/fed/fed_codec.h"
#include "weightport/engine/fed/fed_report.h"

namespace weightport {

struct FedClientOptions {
  std::string name;
  FedEncoding encoding = FedEncoding::kBF16;
  bool compress = true;
  bool keep_sent = false;                      // keep what each update decodes to (last_sent)
  std::chrono::milliseconds timeout{120'000};  // bound on each wait for the server
};

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
