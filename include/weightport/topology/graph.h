// Graph: the network a plan runs on, as data. Endpoints (accelerators, host memory, NICs) and
// switching elements (NVSwitch, PCIe switch, ToR, spine, optical circuit switch) joined by
// directed links, each with a bandwidth, a latency and a routing cost. A cable is two links, one
// per direction. Nodes belong to domains: the high-bandwidth domain (HBD) they share a fabric
// with, the host (one OS, one memory) and the rack.
//
// JSON (round-trips exactly; names, not indices, join links to nodes):
//   {"name": "dgx-h100", "params": {...}, "domains": [{"name": "node0", "kind": "host"}, ...],
//    "nodes": [{"name": "node0/gpu0", "kind": "gpu", "hbd": "node0", "host": "node0",
//               "rack": "su0", "rail": 0}, ...],
//    "links": [{"from": "node0/gpu0", "to": "node0/nvswitch", "gbps": 3600, "latency_us": 0.5,
//               "cost": 1, "duplex": true}, ...]}
// A duplex entry stands for two links of equal figures; bandwidth is in gigabits per second each
// way (as links are sold) and kept as given.
//
// Thread-safety: a plain value; const functions are safe to call concurrently.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include <nlohmann/json.hpp>

#include "weightport/core/status.h"

namespace weightport::topology {

enum class NodeKind : uint8_t {
  kGpu,         // an accelerator (GPU or TPU chip): where ranks live
  kHostMemory,  // a host's DRAM: where ranks live when a host has no accelerator
  kNic,         // a network interface
  kNvSwitch,    // the switch of an NVLink domain (one node stands for the whole switch tray)
  kPcieSwitch,
  kTor,  // a leaf / top-of-rack switch (a rail switch in a rail-optimised fabric)
  kSpine,
  kOcs,  // an optical circuit switch
};
const char* NodeKindName(NodeKind kind);  // "gpu", "host_memory", "nic", ...
Result<NodeKind> ParseNodeKind(std::string_view name);
// Ranks of a plan are placed on these kinds.
inline bool IsEndpointKind(NodeKind kind) { return kind == NodeKind::kGpu || kind == NodeKind::kHostMemory; }

enum class DomainKind : uint8_t { kHbd, kHost, kRack };
const char* DomainKindName(DomainKind kind);  // "hbd", "host", "rack"
Result<DomainKind> ParseDomainKind(std::string_view name);

struct Domain {
  std::string name;
  DomainKind kind = DomainKind::kHost;
};

struct Node {
  std::string name;
  NodeKind kind = NodeKind::kGpu;
  int hbd = -1;  // index into Graph::domains(), -1: none
  int host = -1;
  int rack = -1;
  int rail = -1;  // the rail (NIC index within a host) in a rail-optimised fabric, -1: none
};

struct Link {
  int from = 0;  // node indices
  int to = 0;
  double gbps = 0;  // each way for a cable; this direction for a link
  double latency_us = 0;
  double cost = 1;  // routing weight; shortest paths minimise the sum
  double bytes_per_s() const { return gbps * (1e9 / 8); }
};

class Graph {
 public:
  Graph() = default;
  explicit Graph(std::string name) : name_(std::move(name)) {}

  int AddDomain(Domain domain);
  int AddNode(Node node);
  // One link; returns its index.
  int AddLink(Link link);
  // Two links, a -> b then b -> a, of the same figures; returns the index of the first.
  int AddCable(int a, int b, double gbps, double latency_us, double cost = 1);

  const std::string& name() const { return name_; }
  // The preset's parameters (or anything the author records), kept verbatim in JSON.
  const nlohmann::json& params() const { return params_; }
  void set_params(nlohmann::json params) { params_ = std::move(params); }

  const std::vector<Domain>& domains() const { return domains_; }
  const std::vector<Node>& nodes() const { return nodes_; }
  const std::vector<Link>& links() const { return links_; }
  // Indices of the links leaving a node.
  const std::vector<int>& out_links(int node) const { return out_[node]; }
  // The node of that name, or -1.
  int FindNode(std::string_view name) const;
  // Where ranks can live, in node order: the GPUs, or the host memories when there is no GPU.
  std::vector<int> Endpoints() const;

  // Names unique and non-empty, domain and link indices in range, bandwidth > 0, latency and
  // cost >= 0, no link from a node to itself. Errors name the node or link.
  Status Validate() const;

  nlohmann::json ToJson() const;
  // Strict: unknown keys, unknown names and bad figures are errors naming the JSON path.
  static Result<Graph> FromJson(const nlohmann::json& json);

 private:
  std::string name_;
  nlohmann::json params_ = nlohmann::json::object();
  std::vector<Domain> domains_;
  std::vector<Node> nodes_;
  std::vector<Link> links_;
  std::vector<std::vector<int>> out_;
  std::unordered_map<std::string, int> by_name_;
};

}  // namespace weightport::topology
