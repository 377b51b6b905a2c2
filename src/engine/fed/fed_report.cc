// FedRoundReport as JSON.
#include "weightport/engine/fed/fed_report.h"

#include <nlohmann/json.hpp>

namespace weightport {
namespace {

nlohmann::ordered_json RoundJson(const FedRoundReport& r) {
  nlohmann::ordered_json clients = nlohmann::json::array();
  for (const FedClientReport& c : r.clients)
    clients.push_back({{"name", c.name},
                       {"folded", c.folded},
                       {"excluded", c.excluded},
                       {"samples", c.samples},
                       {"chunks_folded", c.chunks_folded},
                       {"late_chunks", c.late_chunks},
                       {"bytes_down", c.bytes_down},
                       {"bytes_up", c.bytes_up},
                       {"download_s", c.download_s},
                       {"update_s", c.update_s}});
  return {{"round", r.round},
          {"seconds", r.seconds},
          {"deadline_hit", r.deadline_hit},
          {"model_chunks_changed", r.model_chunks_changed},
          {"full_bf16_bytes", r.full_bf16_bytes},
          {"bytes_down", r.bytes_down},
          {"bytes_up", r.bytes_up},
          {"stale_chunks_folded", r.stale_chunks_folded},
          {"clients", clients}};
}

}  // namespace

std::string FedClientRoundJson(const FedClientRound& r) {
  return nlohmann::ordered_json{
      {"round", r.round},           {"version", r.version},   {"chunks_received", r.chunks_received},
      {"bytes_down", r.bytes_down}, {"bytes_up", r.bytes_up}, {"download_s", r.download_s},
      {"upload_s", r.upload_s}}
      .dump();
}

std::string FedRoundsJson(const std::vector<FedRoundReport>& rounds) {
  nlohmann::ordered_json out = nlohmann::json::array();
  for (const auto& r : rounds) out.push_back(RoundJson(r));
  return out.dump();
}

}  // namespace weightport
