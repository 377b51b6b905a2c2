// Topology: the simple network model the planner balances and estimates against.
//
// Hosts, each with a full-duplex NIC (bytes/s each way) and one intra-host bandwidth shared by
// copies between ranks on the same host (shared memory, NVLink). Source and destination ranks are
// separate name spaces (a trainer's rank 0 and an inference replica's rank 0 are different
// processes); each is placed on one host. A rank the topology does not place gets a host of its
// own with the default NIC (see Place).
//
// JSON:
//   {"nic_gbps": 100, "intra_host_gbps": 800,
//    "hosts": [{"name": "h0", "nic_gbps": 100, "src_ranks": [0, 1], "dst_ranks": [0]}, ...]}
// Bandwidths are in gigabits per second in JSON (as NICs are sold) and bytes per second in code.
//
// Thread-safety: a plain value.
#pragma once

#include <map>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "weightport/core/status.h"

namespace weightport {

enum class PlanSide : uint8_t { kSource, kDestination };
const char* PlanSideName(PlanSide side);  // "src", "dst"

// A rank on one side of a plan.
struct Endpoint {
  PlanSide side = PlanSide::kSource;
  int rank = 0;
  std::string ToString() const;  // "src rank 3", "dst rank 0"
  friend auto operator<=>(const Endpoint&, const Endpoint&) = default;
};

struct HostSpec {
  std::string name;
  double nic_bytes_per_s = 0;  // each way
  std::vector<int> src_ranks;
  std::vector<int> dst_ranks;
};

class Topology {
 public:
  static constexpr double kDefaultNicBytesPerS = 100e9 / 8;        // 100 Gb/s
  static constexpr double kDefaultIntraHostBytesPerS = 800e9 / 8;  // 800 Gb/s

  Topology() = default;
  // Errors: empty or duplicate host names, bandwidth <= 0, a rank placed on two hosts.
  static Result<Topology> Make(std::vector<HostSpec> hosts,
                               double default_nic_bytes_per_s = kDefaultNicBytesPerS,
                               double intra_host_bytes_per_s = kDefaultIntraHostBytesPerS);
  static Result<Topology> FromJson(const nlohmann::json& json);
  nlohmann::json ToJson() const;

  // Gives every listed rank not yet placed a host of its own ("src3", "dst0") with the default
  // NIC. The planner calls this for the ranks of its placements.
  void Place(PlanSide side, const std::vector<int>& ranks);

  const std::vector<HostSpec>& hosts() const { return hosts_; }
  double intra_host_bytes_per_s() const { return intra_host_bytes_per_s_; }
  double default_nic_bytes_per_s() const { return default_nic_bytes_per_s_; }
  // The host index of a rank, or -1 when it is not placed.
  int HostOf(Endpoint endpoint) const;

  friend bool operator==(const Topology& a, const Topology& b) { return a.ToJsonText() == b.ToJsonText(); }

 private:
  std::string ToJsonText() const;
  Status Index();

  std::vector<HostSpec> hosts_;
  double default_nic_bytes_per_s_ = kDefaultNicBytesPerS;
  double intra_host_bytes_per_s_ = kDefaultIntraHostBytesPerS;
  std::map<Endpoint, int> host_of_;
};

}  // namespace weightport
