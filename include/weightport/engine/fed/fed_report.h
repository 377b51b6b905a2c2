// What federated rounds (fed_server.h, fed_client.h) report, and the reports as JSON text (the
// CLI's and the Python package's summaries).
//
// Thread-safety: plain structs and pure functions.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace weightport {

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

struct FedClientRound {
  uint64_t round = 0;
  uint64_t version = 0;
  uint64_t chunks_received = 0;  // model chunks that changed since the version held
  uint64_t bytes_down = 0, bytes_up = 0;
  double download_s = 0, upload_s = 0;
};
// One client round as a JSON object (the CLI's and the Python package's).
std::string FedClientRoundJson(const FedClientRound& round);

}  // namespace weightport
