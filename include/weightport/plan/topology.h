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
// Bandwidths are given in gigabits per second (as NICs are sold), kept as given so that JSON round
// trips exactly, and read in bytes per second.
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
  double nic_gbps = 0;  // each way
  std::vector<int> src_ranks;
  std::vector<int> dst_ranks;
};

class Topology {
 public:
  static constexpr double kDefaultNicGbps = 100;
  static constexpr double kDefaultIntraHostGbps = 800;

  Topology() = default;
  // Errors: empty or duplicate host names, bandwidth <= 0, a rank placed on two hosts.
  static Result<Topology> Make(std::vector<HostSpec> hosts, double default_nic_gbps = kDefaultNicGbps,
                               double intra_host_gbps = kDefaultIntraHostGbps);
  static Result<Topology> FromJson(const nlohmann::json& json);
  nlohmann::json ToJson() const;

  // Gives every listed rank not yet placed a host of its own ("src3", "dst0") with the default
  // NIC. The planner calls this for the ranks of its placements.
  void Place(PlanSide side, const std::vector<int>& ranks);

  const std::vector<HostSpec>& hosts() const { return hosts_; }
  double default_nic_gbps() const { return default_nic_gbps_; }
  double intra_host_gbps() const { return intra_host_gbps_; }
  double nic_bytes_per_s(int host) const { return hosts_[host].nic_gbps * (1e9 / 8); }
  double intra_host_bytes_per_s() const { return intra_host_gbps_ * (1e9 / 8); }
  // The host index of a rank, or -1 when it is not placed.
  int HostOf(Endpoint endpoint) const;

  friend bool operator==(const Topology& a, const Topology& b) { return a.ToJsonText() == b.ToJsonText(); }

 private:
  std::string ToJsonText() const;
  Status Index();

  std::vector<HostSpec> hosts_;
  double default_nic_gbps_ = kDefaultNicGbps;
  double intra_host_gbps_ = kDefaultIntraHostGbps;
  std::map<Endpoint, int> host_of_;
};

}  // namespace weightport
