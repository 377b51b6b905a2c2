#include "weightport/plan/topology.h"

#include <set>

#include <nlohmann/json.hpp>

#include "weightport/core/json_util.h"

namespace weightport {
namespace {

// Leaves `out` as it is when the key is absent.
Status ReadOptionalGbps(const json_util::Json& obj, const char* key, const std::string& path, double& out) {
  if (!obj.contains(key)) return Status::Ok();
  WP_ASSIGN_OR_RETURN(out, json_util::GetDouble(obj, key, path));
  return Status::Ok();
}

}  // namespace

const char* PlanSideName(PlanSide side) { return side == PlanSide::kSource ? "src" : "dst"; }

std::string Endpoint::ToString() const {
  return std::string(PlanSideName(side)) + " rank " + std::to_string(rank);
}

Result<Topology> Topology::Make(std::vector<HostSpec> hosts, double default_nic_gbps,
                                double intra_host_gbps) {
  if (!(default_nic_gbps > 0) || !(intra_host_gbps > 0))
    return InvalidArgument("topology: bandwidths must be positive");
  Topology t;
  t.hosts_ = std::move(hosts);
  t.default_nic_gbps_ = default_nic_gbps;
  t.intra_host_gbps_ = intra_host_gbps;
  WP_RETURN_IF_ERROR(t.Index());
  return t;
}

Status Topology::Index() {
  host_of_.clear();
  std::set<std::string> names;
  for (size_t h = 0; h < hosts_.size(); ++h) {
    const HostSpec& host = hosts_[h];
    const std::string what = "topology host " + std::to_string(h) + " '" + host.name + "'";
    if (host.name.empty()) return InvalidArgument("topology host " + std::to_string(h) + " has no name");
    if (!names.insert(host.name).second) return InvalidArgument(what + ": the name appears twice");
    if (!(host.nic_gbps > 0)) return InvalidArgument(what + ": NIC bandwidth must be positive");
    for (PlanSide side : {PlanSide::kSource, PlanSide::kDestination}) {
      for (int rank : side == PlanSide::kSource ? host.src_ranks : host.dst_ranks) {
        Endpoint e{side, rank};
        if (rank < 0) return InvalidArgument(what + ": " + e.ToString() + " is negative");
        auto [it, inserted] = host_of_.emplace(e, static_cast<int>(h));
        if (!inserted)
          return InvalidArgument(what + ": " + e.ToString() + " is already on host '" +
                                 hosts_[it->second].name + "'");
      }
    }
  }
  return Status::Ok();
}

void Topology::Place(PlanSide side, const std::vector<int>& ranks) {
  std::set<std::string> names;
  for (const HostSpec& h : hosts_) names.insert(h.name);
  for (int rank : ranks) {
    Endpoint e{side, rank};
    if (host_of_.count(e)) continue;
    HostSpec host;
    host.name = std::string(PlanSideName(side)) + std::to_string(rank);
    while (names.count(host.name)) host.name += "'";
    names.insert(host.name);
    host.nic_gbps = default_nic_gbps_;
    (side == PlanSide::kSource ? host.src_ranks : host.dst_ranks).push_back(rank);
    host_of_.emplace(e, static_cast<int>(hosts_.size()));
    hosts_.push_back(std::move(host));
  }
}

int Topology::HostOf(Endpoint endpoint) const {
  auto it = host_of_.find(endpoint);
  return it == host_of_.end() ? -1 : it->second;
}

nlohmann::json Topology::ToJson() const {
  using json_util::Json;
  Json hosts = Json::array();
  for (const HostSpec& h : hosts_)
    hosts.push_back(
        {{"name", h.name}, {"nic_gbps", h.nic_gbps}, {"src_ranks", h.src_ranks}, {"dst_ranks", h.dst_ranks}});
  return {
      {"nic_gbps", default_nic_gbps_}, {"intra_host_gbps", intra_host_gbps_}, {"hosts", std::move(hosts)}};
}

std::string Topology::ToJsonText() const { return ToJson().dump(); }

Result<Topology> Topology::FromJson(const nlohmann::json& json) {
  using namespace json_util;
  const std::string root = "topology";
  WP_RETURN_IF_ERROR(CheckKeys(json, {"nic_gbps", "intra_host_gbps", "hosts"}, root));
  double nic = kDefaultNicGbps, intra = kDefaultIntraHostGbps;
  WP_RETURN_IF_ERROR(ReadOptionalGbps(json, "nic_gbps", root, nic));
  WP_RETURN_IF_ERROR(ReadOptionalGbps(json, "intra_host_gbps", root, intra));
  std::vector<HostSpec> hosts;
  if (json.contains("hosts")) {
    WP_ASSIGN_OR_RETURN(const Json* list, GetArray(json, "hosts", root));
    for (size_t i = 0; i < list->size(); ++i) {
      const Json& hj = (*list)[i];
      const std::string path = At(root + ".hosts", i);
      WP_RETURN_IF_ERROR(CheckKeys(hj, {"name", "nic_gbps", "src_ranks", "dst_ranks"}, path));
      HostSpec host;
      WP_ASSIGN_OR_RETURN(host.name, GetString(hj, "name", path));
      host.nic_gbps = nic;
      WP_RETURN_IF_ERROR(ReadOptionalGbps(hj, "nic_gbps", path, host.nic_gbps));
      for (auto [key, out] :
           {std::pair{"src_ranks", &host.src_ranks}, std::pair{"dst_ranks", &host.dst_ranks}}) {
        if (!hj.contains(key)) continue;
        WP_ASSIGN_OR_RETURN(const Json* ranks, Field(hj, key, path));
        WP_ASSIGN_OR_RETURN(std::vector<int64_t> values, AsI64Array(*ranks, path + "." + key));
        for (int64_t r : values) {
          if (r < 0 || r > INT32_MAX)
            return InvalidArgument(path + "." + key + ": " + std::to_string(r) + " is not a rank");
          out->push_back(static_cast<int>(r));
        }
      }
      hosts.push_back(std::move(host));
    }
  }
  auto topology = Make(std::move(hosts), nic, intra);
  if (!topology.ok()) return topology.status().WithContext(root);
  return topology;
}

}  // namespace weightport
