#include "weightport/engine/session/plan_rendezvous.h"

#include <algorithm>
#include <map>
#include <mutex>
#include <set>
#include <thread>

#include <nlohmann/json.hpp>

#include "engine/session/session_timing.h"
#include "engine/session/wire_side.h"
#include "weightport/control/handshake.h"
#include "weightport/control/joining_peers.h"
#include "weightport/control/plan_messages.h"
#include "weightport/core/json_util.h"
#include "weightport/engine/common/transport_factory.h"
#include "weightport/engine/session/plan_coordinator.h"

namespace weightport {
namespace {
using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

std::string RankName(const LayoutOffer& o) { return o.endpoint.ToString(); }
std::string Describe(const TensorMeta& t) { return std::string(DTypeName(t.dtype)) + ShapeToString(t.shape); }

// Every side's ranks are 0 .. n-1, each offered once, all saying n.
Status CheckSide(const std::vector<LayoutOffer>& offers, PlanSide side) {
  std::set<int> seen;
  int n = -1;
  for (const LayoutOffer& o : offers) {
    if (o.endpoint.side != side) continue;
    if (n < 0) n = o.side_ranks;
    if (o.side_ranks != n)
      return InvalidArgument(RankName(o) + " says its side has " + std::to_string(o.side_ranks) +
                             " ranks, another rank said " + std::to_string(n));
    if (o.endpoint.rank < 0 || o.endpoint.rank >= n)
      return InvalidArgument(RankName(o) + " is outside its side's " + std::to_string(n) + " ranks");
    if (!seen.insert(o.endpoint.rank).second) return AlreadyExists(RankName(o) + " offered twice");
  }
  if (n < 0) return InvalidArgument(std::string("no ") + PlanSideName(side) + " rank offered a layout");
  if (static_cast<int>(seen.size()) != n)
    return FailedPrecondition(std::string(PlanSideName(side)) + " side: " + std::to_string(seen.size()) +
                              " of " + std::to_string(n) + " ranks offered");
  return Status::Ok();
}

// Offers that arrived, by endpoint; a set of endpoints expected once the side sizes are known.
struct Collected {
  std::map<Endpoint, LayoutOffer> offers;
  std::map<PlanSide, int> side_ranks;
  bool complete() const {
    if (side_ranks.size() != 2) return false;
    size_t want = 0;
    for (const auto& [side, n] : side_ranks) want += static_cast<size_t>(n);
    return offers.size() == want;
  }
};

Result<LayoutOffer> DecodeOffer(const ControlMessage& m, const std::string& peer) {
  if (m.type != MessageType::kLayoutOffer)
    return InvalidArgument(peer + " sent " + std::string(MessageTypeName(m.type)) + ", not LayoutOffer");
  WP_ASSIGN_OR_RETURN(LayoutOfferMsg msg, LayoutOfferMsg::Decode(m.payload));
  LayoutOffer o;
  o.endpoint = EndpointFromWire(msg.side, msg.rank);
  o.side_ranks = static_cast<int>(msg.side_ranks);
  o.host = msg.host;
  WP_ASSIGN_OR_RETURN(auto json, json_util::Parse(msg.placement_json, RankName(o) + "'s layout"));
  auto placement = Placement::FromJson(json);
  if (!placement.ok()) return placement.status().WithContext(RankName(o) + "'s layout");
  o.placement = std::move(*placement);
  return o;
}
}  // namespace

Result<Placement> MergeOffers(const std::vector<LayoutOffer>& offers) {
  Placement merged;
  std::map<std::string, int> named_by;  // tensor -> the first rank that named it
  std::vector<const LayoutOffer*> sorted;
  for (const LayoutOffer& o : offers) sorted.push_back(&o);
  std::sort(sorted.begin(), sorted.end(),
            [](const LayoutOffer* a, const LayoutOffer* b) { return a->endpoint < b->endpoint; });
  for (const LayoutOffer* o : sorted) {
    const int rank = o->endpoint.rank;
    for (int other : o->placement.ranks())
      if (other != rank)
        return InvalidArgument(RankName(*o) + " offered shards for rank " + std::to_string(other));
    for (const TensorMeta& t : o->placement.tensors()) {
      const TensorMeta* have = merged.FindTensor(t.name);
      if (have == nullptr) {
        WP_RETURN_IF_ERROR(merged.AddTensor(t));
        named_by[t.name] = rank;
      } else if (have->dtype != t.dtype || have->shape != t.shape) {
        return InvalidArgument("tensor '" + t.name + "': " + RankName(*o) + " says " + Describe(t) + ", " +
                               Endpoint{o->endpoint.side, named_by[t.name]}.ToString() + " says " +
                               Describe(*have));
      }
    }
    merged.AddRank(rank);
    for (const Shard& s : o->placement.shards(rank)) merged.AddShard(rank, s);
  }
  WP_RETURN_IF_ERROR(merged.Validate());
  return merged;
}

Result<Topology> TopologyOfOffers(const std::vector<LayoutOffer>& offers, double nic_gbps,
                                  double intra_host_gbps) {
  std::vector<HostSpec> hosts;
  std::map<std::string, size_t> index;
  for (const LayoutOffer& o : offers) {
    auto [it, added] = index.emplace(o.host, hosts.size());
    if (added) hosts.push_back(HostSpec{o.host, nic_gbps, {}, {}});
    HostSpec& h = hosts[it->second];
    (o.endpoint.side == PlanSide::kSource ? h.src_ranks : h.dst_ranks).push_back(o.endpoint.rank);
  }
  return Topology::Make(std::move(hosts), nic_gbps, intra_host_gbps);
}

Result<std::shared_ptr<const Plan>> PlanFromOffers(const std::vector<LayoutOffer>& offers,
                                                   const RendezvousOptions& options) {
  WP_RETURN_IF_ERROR(CheckSide(offers, PlanSide::kSource));
  WP_RETURN_IF_ERROR(CheckSide(offers, PlanSide::kDestination));
  std::vector<LayoutOffer> src, dst;
  for (const LayoutOffer& o : offers) (o.endpoint.side == PlanSide::kSource ? src : dst).push_back(o);
  auto src_placement = MergeOffers(src);
  if (!src_placement.ok()) return src_placement.status().WithContext("source layout");
  auto dst_placement = MergeOffers(dst);
  if (!dst_placement.ok()) return dst_placement.status().WithContext("destination layout");
  WP_ASSIGN_OR_RETURN(Topology topology, TopologyOfOffers(offers, options.nic_gbps, options.intra_host_gbps));
  WP_ASSIGN_OR_RETURN(Plan plan, MakePlan(*src_placement, *dst_placement, topology, options.plan));
  return std::make_shared<const Plan>(std::move(plan));
}

Result<PlannedSession> CollectLayoutsAndPlan(ControlListener& listener, const RendezvousOptions& options) {
  auto log = [&](const std::string& line) {
    if (options.log) options.log("rendezvous: " + line);
  };
  const auto deadline = Clock::now() + options.timeout;
  Collected got;
  std::vector<std::unique_ptr<ControlChannel>> channels;
  std::vector<Endpoint> channel_ranks;  // whose each channel is
  // Offers are read side by side: a rank slow to send its own holds up no other.
  JoiningPeers joining(kJoinMessageTimeout);
  auto refuse_all = [&](const Status& why) {
    for (auto& ch : channels) {
      ch->TurnAway(why.message());
      ch->Close();
    }
    return why;
  };
  while (!got.complete()) {
    const auto left = std::chrono::duration_cast<milliseconds>(deadline - Clock::now());
    if (left.count() <= 0) {
      std::string have;
      for (const auto& [ep, o] : got.offers) have += (have.empty() ? "" : ", ") + ep.ToString();
      std::string want;
      for (const auto& [side, n] : got.side_ranks)
        want += (want.empty() ? "" : " and ") + std::to_string(n) + " " + PlanSideName(side);
      return refuse_all(Timeout("not every rank offered its layout within " +
                                std::to_string(options.timeout.count()) + " ms: expected " +
                                (want.empty() ? "both sides" : want) + " ranks, have " +
                                (have.empty() ? "none" : have)));
    }
    if (options.should_stop && options.should_stop()) return refuse_all(Cancelled("the coordinator stopped"));
    auto ch = listener.Accept(
        std::min(left, joining.empty() ? session_timing::kAcceptIdle : session_timing::kAcceptWhileJoining));
    if (ch.ok()) {
      joining.Add(std::move(*ch));
    } else if (ch.status().code() != StatusCode::kTimeout) {
      log(ch.status().ToString());
    }
    for (JoiningPeers::Arrival& a : joining.Take()) {
      Result<LayoutOffer> offer =
          a.first.ok() ? DecodeOffer(*a.first, a.channel->peer()) : Result<LayoutOffer>(a.first.status());
      Status bad = offer.status();
      if (bad.ok()) {
        const Endpoint ep = offer->endpoint;
        auto known = got.side_ranks.find(ep.side);
        if (got.offers.count(ep)) {
          bad = AlreadyExists(ep.ToString() + " offered its layout twice");
        } else if (known != got.side_ranks.end() && known->second != offer->side_ranks) {
          bad = InvalidArgument(ep.ToString() + " says its side has " + std::to_string(offer->side_ranks) +
                                " ranks, an earlier rank said " + std::to_string(known->second));
        }
      }
      if (!bad.ok()) {
        log("refused " + a.channel->peer() + ": " + bad.message());
        a.channel->TurnAway(bad.message());
        continue;
      }
      log(offer->endpoint.ToString() + " on " + offer->host + " offered " +
          std::to_string(offer->placement.shards(offer->endpoint.rank).size()) + " shards");
      got.side_ranks[offer->endpoint.side] = offer->side_ranks;
      channel_ranks.push_back(offer->endpoint);
      got.offers[offer->endpoint] = std::move(*offer);
      channels.push_back(std::move(a.channel));
    }
  }
  std::vector<LayoutOffer> offers;
  for (auto& [ep, o] : got.offers) offers.push_back(std::move(o));
  PlannedSession out;
  const auto t0 = Clock::now();
  auto plan = PlanFromOffers(offers, options);
  if (!plan.ok()) return refuse_all(plan.status().WithContext("planning"));
  out.plan = *plan;
  const auto t1 = Clock::now();
  out.plan_seconds = std::chrono::duration<double>(t1 - t0).count();
  // Each rank gets its own part, cut, encoded and sent on a few threads (each channel by one).
  RankPlanCutter cutter(out.plan);
  out.digest = cutter.digest();
  std::mutex mu;
  const size_t threads = std::clamp<size_t>(std::thread::hardware_concurrency(), 1, 8);
  Status cut = cutter.CutEach(channel_ranks, threads, [&](size_t i, RankPlan&& part, std::string&& encoded) {
    const Bytes payload = PlanAssignMsg{std::move(encoded)}.Encode();
    Status s = channels[i]->Send(PlanAssignMsg::kType, payload);
    channels[i]->Close();
    std::lock_guard<std::mutex> lock(mu);
    if (!s.ok()) log("sending the plan to " + channel_ranks[i].ToString() + ": " + s.message());
    out.max_part_bytes = std::max<uint64_t>(out.max_part_bytes, payload.size());
    out.total_part_bytes += payload.size();
    out.peers[channel_ranks[i]] = part.peers();
    return Status::Ok();
  });
  if (!cut.ok()) return refuse_all(cut.WithContext("cutting the plan"));
  out.send_seconds = std::chrono::duration<double>(Clock::now() - t1).count();
  log("planned " + std::to_string(out.plan->steps.size()) + " steps for " + std::to_string(offers.size()) +
      " ranks in " + std::to_string(out.plan_seconds) + " s; sent every rank its part (largest " +
      std::to_string(out.max_part_bytes) + " bytes, " + std::to_string(out.total_part_bytes) +
      " in all) in " + std::to_string(out.send_seconds) + " s");
  return out;
}

Result<Bytes> AssignForRejoin(const Plan& plan, const RankPlanCutter& cutter, const ControlMessage& offer,
                              const std::string& peer) {
  WP_ASSIGN_OR_RETURN(LayoutOffer o, DecodeOffer(offer, peer));
  const RankBuffer* buffer = plan.Buffer(o.endpoint);
  if (buffer == nullptr) return InvalidArgument(RankName(o) + " is not a rank of the plan");
  using Held = std::vector<std::pair<std::string, std::string>>;
  Held planned, offered;
  for (const PlannedShard& s : buffer->shards)
    planned.emplace_back(plan.tensors.at(s.tensor).name, s.slice.ToString());
  for (const Shard& s : o.placement.shards(o.endpoint.rank))
    offered.emplace_back(s.tensor, s.slice.ToString());
  std::sort(planned.begin(), planned.end());
  std::sort(offered.begin(), offered.end());
  if (planned != offered)
    return FailedPrecondition(RankName(o) + " offered other shards than the plan gives it (" +
                              std::to_string(offered.size()) + " offered, " + std::to_string(planned.size()) +
                              " planned): a rank joins again with the layout it had");
  WP_ASSIGN_OR_RETURN(RankPlan part, cutter.Cut(o.endpoint));
  return PlanAssignMsg{EncodeRankPlan(part)}.Encode();
}

Result<RankPlan> OfferLayout(const std::string& coordinator, const Secret& secret, const LayoutOffer& offer,
                             std::chrono::milliseconds timeout) {
  const Endpoint me = offer.endpoint;
  const PeerRole role = me.side == PlanSide::kSource ? PeerRole::kPublisher : PeerRole::kSubscriber;
  const auto deadline = Clock::now() + timeout;
  auto left = [&] {
    return std::max(milliseconds(1), std::chrono::duration_cast<milliseconds>(deadline - Clock::now()));
  };
  // The coordinator may not listen yet: retry a refused or failed connection until the deadline.
  auto channel =
      RetryWhileUnreachable(deadline, session_timing::kRendezvousDialRetry, [&](milliseconds time_left) {
        return ControlChannel::Connect(coordinator, RankControlName(me), role, secret, time_left);
      });
  if (!channel.ok()) return channel.status().WithContext(me.ToString() + ": connecting to " + coordinator);
  LayoutOfferMsg msg{WireSide(me.side), static_cast<uint32_t>(me.rank),
                     static_cast<uint32_t>(offer.side_ranks), offer.host, offer.placement.ToJson().dump()};
  WP_RETURN_IF_ERROR((*channel)->Send(msg));
  // The coordinator answers once every rank offered: wait for the whole timeout.
  auto reply = (*channel)->Receive(left());
  if (!reply.ok()) return reply.status().WithContext(me.ToString() + ": waiting for the plan");
  if (reply->type == MessageType::kRefused) {
    auto r = RefusedMsg::Decode(reply->payload);
    return PermissionDenied(me.ToString() + " refused by the coordinator: " + (r.ok() ? r->reason : "?"));
  }
  if (reply->type != MessageType::kPlanAssign)
    return InvalidArgument("coordinator sent " + std::string(MessageTypeName(reply->type)) +
                           ", not PlanAssign");
  WP_ASSIGN_OR_RETURN(PlanAssignMsg assign, PlanAssignMsg::Decode(reply->payload));
  auto part = DecodeRankPlan(assign.rank_plan);
  if (!part.ok()) return part.status().WithContext(me.ToString() + ": the coordinator's plan");
  if (part->me != me)
    return FailedPrecondition(me.ToString() + ": the coordinator sent the part of " + part->me.ToString());
  return part;
}

}  // namespace weightport
