// MakePlan: pieces (what each group of identical destination shards needs from each group of
// identical source shards), then a greedy assignment of every piece to a source and a relay tree,
// largest pieces first, each to the choice that leaves the busiest host least busy. See planner.h.
#include "weightport/plan/planner.h"

#include <algorithm>
#include <map>
#include <numeric>

#include "plan/plan_pieces.h"
#include "weightport/core/dtype.h"
#include "weightport/core/placement_builders.h"
#include "weightport/kernels/convert.h"
#include "weightport/plan/quantized.h"

namespace weightport {
namespace {

using plan_internal::Piece;
using plan_internal::ShardGroup;

uint64_t AlignUp(uint64_t v) { return (v + kPlanAlignment - 1) / kPlanAlignment * kPlanAlignment; }

// Lays out one side's ranks: shards packed at aligned offsets, in placement order.
Result<std::vector<RankBuffer>> BuildBuffers(const Placement& placement, PlanSide side, const Plan& plan,
                                             const std::vector<int>& tensor_index) {
  std::vector<RankBuffer> buffers;
  for (int rank : placement.ranks()) {
    RankBuffer b;
    b.endpoint = {side, rank};
    b.host = plan.topology.HostOf(b.endpoint);
    size_t hint = 0;
    for (const Shard& shard : placement.shards(rank)) {
      const TensorMeta* meta = placement.FindTensor(shard.tensor, hint);
      hint = static_cast<size_t>(meta - placement.tensors().data()) + 1;
      const int t = tensor_index[meta - placement.tensors().data()];
      if (t < 0)
        return InvalidArgument("tensor '" + shard.tensor + "' held by " + b.endpoint.ToString() +
                               " is not held by any source rank");
      PlannedShard ps;
      ps.tensor = static_cast<uint32_t>(t);
      ps.slice = shard.slice;
      Result<uint64_t> bytes = plan.StoredBytes(side, ps.tensor, shard.slice);
      if (!bytes.ok())
        return bytes.status().WithContext("tensor '" + shard.tensor + "' (quantised to f8e4m3) at " +
                                          b.endpoint.ToString());
      ps.bytes = *bytes;
      ps.offset = AlignUp(b.bytes);
      b.bytes = ps.offset + ps.bytes;
      b.shards.push_back(std::move(ps));
    }
    buffers.push_back(std::move(b));
  }
  return buffers;
}

// Maps each destination tensor to its index in the source table and sets the plan's destination
// dtypes (the destination placement's, then the transform rules'); errors on disagreements.
Result<std::vector<int>> MatchTensors(const Placement& src, const Placement& dst, Plan& plan) {
  plan.destination_dtypes.clear();
  plan.destination_scaling.clear();
  for (const TensorMeta& t : plan.tensors) plan.destination_dtypes.push_back(t.dtype);
  std::vector<kernels::Fp8Scaling> scaling(plan.tensors.size(), kernels::Fp8Scaling::kBlock128);
  std::vector<int> index(dst.tensors().size(), -1);
  for (size_t i = 0; i < dst.tensors().size(); ++i) {
    const TensorMeta& d = dst.tensors()[i];
    const TensorMeta* s = src.FindTensor(d.name);
    if (!s) continue;  // an error only if some destination rank holds part of it (BuildBuffers)
    if (s->shape != d.shape)
      return InvalidArgument("tensor '" + d.name + "': source and destination shapes differ");
    index[i] = static_cast<int>(s - src.tensors().data());
    plan.destination_dtypes[index[i]] = d.dtype;
  }
  for (size_t t = 0; t < plan.tensors.size(); ++t) {
    const std::string& name = plan.tensors[t].name;
    for (const TransformRule& rule : plan.options.transforms)
      if (GlobMatch(rule.glob, name)) {
        plan.destination_dtypes[t] = rule.to;
        if (Quantizes(plan.tensors[t].dtype, rule.to)) scaling[t] = rule.scaling;
        break;
      }
    const DType from = plan.tensors[t].dtype, to = plan.destination_dtypes[t];
    if (!kernels::CanConvert(from, to) && !Quantizes(from, to))
      return InvalidArgument("tensor '" + name + "': sources hold " + std::string(DTypeName(from)) +
                             ", destinations want " + std::string(DTypeName(to)) +
                             " (conversions in flight: between f32, bf16 and f16, and f32 or bf16 to "
                             "f8e4m3 in 128x128 blocks or per tensor)");
  }
  if (std::count(scaling.begin(), scaling.end(), kernels::Fp8Scaling::kPerTensor) > 0)
    plan.destination_scaling = std::move(scaling);
  return index;
}

// Per-host busy time in seconds, the quantity the greedy keeps low.
class HostLoads {
 public:
  explicit HostLoads(const Topology& topo)
      : topo_(topo),
        out_(topo.hosts().size(), 0),
        in_(topo.hosts().size(), 0),
        local_(topo.hosts().size(), 0),
        d_out_(out_.size(), 0),
        d_in_(out_.size(), 0),
        d_local_(out_.size(), 0),
        staged_(out_.size(), 0) {}

  // Stages one transfer; Peak() then Commit() or Reset().
  void Stage(int from_host, int to_host, uint64_t bytes) {
    if (from_host == to_host) {
      Touch(from_host);
      d_local_[from_host] += bytes / topo_.intra_host_bytes_per_s();
    } else {
      Touch(from_host);
      Touch(to_host);
      d_out_[from_host] += bytes / topo_.nic_bytes_per_s(from_host);
      d_in_[to_host] += bytes / topo_.nic_bytes_per_s(to_host);
    }
  }
  // The staged hosts' loads if the staged transfers were committed: the busiest one's time, and
  // the sum of squares of every touched resource's time, which breaks ties towards spreading.
  std::pair<double, double> Cost() const {
    double peak = 0, squares = 0;
    for (int h : touched_) {
      const double o = out_[h] + d_out_[h], i = in_[h] + d_in_[h], l = local_[h] + d_local_[h];
      peak = std::max({peak, o, i, l});
      squares += o * o + i * i + l * l;
    }
    return {peak, squares};
  }
  void Commit() {
    for (int h : touched_) {
      out_[h] += d_out_[h];
      in_[h] += d_in_[h];
      local_[h] += d_local_[h];
    }
    Reset();
  }
  void Reset() {
    for (int h : touched_) d_out_[h] = d_in_[h] = d_local_[h] = 0, staged_[h] = 0;
    touched_.clear();
  }
  // The NIC time of `host` sending `bytes` more, for choosing among senders.
  double OutAfter(int host, uint64_t bytes) const { return out_[host] + bytes / topo_.nic_bytes_per_s(host); }
  double Total(int host) const { return out_[host] + in_[host] + local_[host]; }
  double Out(int host) const { return out_[host]; }

 private:
  void Touch(int h) {
    if (!staged_[h]) staged_[h] = 1, touched_.push_back(h);
  }

  const Topology& topo_;
  std::vector<double> out_, in_, local_;
  std::vector<double> d_out_, d_in_, d_local_;
  std::vector<uint8_t> staged_;
  std::vector<int> touched_;
};

// Position p > 0 of a k-ary relay tree receives from position Parent(p).
size_t Parent(size_t p, int fanout) { return (p - 1) / static_cast<size_t>(fanout); }

// Destination holders with a source of the piece on their own host take a local copy from it;
// the others form the relay tree.
struct Members {
  std::vector<std::pair<size_t, size_t>> local;  // (holder, source candidate)
  std::vector<size_t> remote;                    // holders, in chain order
};

struct Choice {
  Members members;
  size_t source = 0;  // index into the piece's candidates
  size_t root = 0;    // rotation of the destination group's chain order
};

class Planner {
 public:
  Planner(Plan& plan, std::vector<ShardGroup> dst_groups, std::vector<Piece> pieces)
      : plan_(plan), dst_groups_(std::move(dst_groups)), pieces_(std::move(pieces)), loads_(plan.topology) {}

  Status Run() {
    uint64_t planned = plan_.steps.size();  // every holder of a piece's group gets one step
    for (const Piece& p : pieces_) planned += dst_groups_[p.dst_group].holders.size();
    if (planned > kMaxPlanSteps)
      return InvalidArgument("plan: " + std::to_string(pieces_.size()) +
                             " pieces to their destination ranks make " + std::to_string(planned) +
                             " steps, over the limit of " + std::to_string(kMaxPlanSteps));
    std::vector<size_t> order(pieces_.size());
    std::iota(order.begin(), order.end(), 0);
    // Largest first: the greedy then places the small pieces into the gaps.
    std::stable_sort(order.begin(), order.end(),
                     [&](size_t a, size_t b) { return pieces_[a].bytes > pieces_[b].bytes; });
    choices_.resize(pieces_.size());
    size_t steps = plan_.steps.size();
    for (size_t i : order) {
      choices_[i] = Assign(pieces_[i]);
      steps += choices_[i].members.local.size() + choices_[i].members.remote.size();
    }
    plan_.steps.reserve(steps);
    for (size_t i = 0; i < pieces_.size(); ++i) Emit(pieces_[i], choices_[i]);
    return Status::Ok();
  }

 private:
  int Host(const plan_internal::Holder& h, PlanSide side) const {
    return (side == PlanSide::kSource ? plan_.sources : plan_.destinations)[h.buffer].host;
  }

  Members Partition(const Piece& piece) const {
    const std::vector<plan_internal::Holder>& holders = dst_groups_[piece.dst_group].holders;
    Members m;
    for (size_t h = 0; h < holders.size(); ++h) {
      const int host = Host(holders[h], PlanSide::kDestination);
      size_t s = 0;
      while (s < piece.sources.size() && Host(piece.sources[s], PlanSide::kSource) != host) ++s;
      if (s < piece.sources.size()) {
        m.local.emplace_back(h, s);
      } else {
        m.remote.push_back(h);
      }
    }
    return m;
  }

  // Stages the local copies, and the transfers of `piece` sent by candidate `source` down the tree
  // of remote holders rooted at rotation `root`.
  void Stage(const Piece& piece, const Members& m, size_t source, size_t root) {
    const std::vector<plan_internal::Holder>& holders = dst_groups_[piece.dst_group].holders;
    for (auto [h, s] : m.local)
      loads_.Stage(Host(piece.sources[s], PlanSide::kSource), Host(holders[h], PlanSide::kDestination),
                   piece.bytes);
    const size_t r = m.remote.size();
    if (r == 0) return;
    auto node = [&](size_t p) { return Host(holders[m.remote[(root + p) % r]], PlanSide::kDestination); };
    loads_.Stage(Host(piece.sources[source], PlanSide::kSource), node(0), piece.bytes);
    for (size_t p = 1; p < r; ++p) loads_.Stage(node(Parent(p, fanout())), node(p), piece.bytes);
  }

  int fanout() const { return std::max(plan_.options.relay_fanout, 1); }

  // The rotations of the relay tree worth staging. Leaves send nothing, so a rotation decides which
  // holders relay. Small groups: all of them. A chain: the ones whose tail (the holder that relays
  // nothing) is among the few whose hosts already send the most. A tree: a few evenly spaced.
  std::vector<size_t> Rotations(const Piece& piece, const Members& m) const {
    constexpr size_t kExact = 6, kTried = 4;
    const size_t r = m.remote.size();
    std::vector<size_t> out;
    if (r <= kExact) {
      for (size_t i = 0; i < std::max<size_t>(r, 1); ++i) out.push_back(i);
      return out;
    }
    if (fanout() > 1) {
      for (size_t i = 0; i < kExact; ++i) out.push_back(i * r / kExact);
      return out;
    }
    const std::vector<plan_internal::Holder>& holders = dst_groups_[piece.dst_group].holders;
    std::vector<std::pair<double, size_t>> sending(r);  // (-out load, holder position)
    for (size_t i = 0; i < r; ++i)
      sending[i] = {-loads_.Out(Host(holders[m.remote[i]], PlanSide::kDestination)), i};
    std::partial_sort(sending.begin(), sending.begin() + kTried, sending.end());
    for (size_t k = 0; k < kTried; ++k) out.push_back((sending[k].second + 1) % r);  // tail = that holder
    return out;
  }

  // A remote holder's host has no source of the piece (else it would copy locally), so the sender
  // touches only its own NIC: the best sender is the one whose NIC ends least busy, whatever the
  // tree. Then the rotations worth trying are staged and the best kept.
  Choice Assign(const Piece& piece) {
    Choice best;
    best.members = Partition(piece);
    const Members& m = best.members;
    if (!m.remote.empty()) {
      for (size_t s = 1; s < piece.sources.size(); ++s) {
        const int a = Host(piece.sources[s], PlanSide::kSource);
        const int b = Host(piece.sources[best.source], PlanSide::kSource);
        const double ta = loads_.OutAfter(a, piece.bytes), tb = loads_.OutAfter(b, piece.bytes);
        if (ta < tb || (ta == tb && loads_.Total(a) < loads_.Total(b))) best.source = s;
      }
    }
    std::pair<double, double> best_cost;
    bool first = true;
    std::vector<size_t> rotations = Rotations(piece, m);
    std::vector<uint32_t> key;  // the remote holders' destination buffers, in chain order
    key.reserve(m.remote.size());
    for (size_t h : m.remote) key.push_back(dst_groups_[piece.dst_group].holders[h].buffer);
    const auto last = last_root_.find(key);
    if (last != last_root_.end() &&
        std::find(rotations.begin(), rotations.end(), last->second) == rotations.end())
      rotations.push_back(last->second);
    double kept_peak = -1;
    for (size_t root : rotations) {
      Stage(piece, m, best.source, root);
      const std::pair<double, double> cost = loads_.Cost();
      loads_.Reset();
      if (last != last_root_.end() && root == last->second) kept_peak = cost.first;
      if (first || cost < best_cost) best.root = root, best_cost = cost, first = false;
    }
    if (kept_peak >= 0 && kept_peak <= best_cost.first * (1 + 1e-12)) best.root = last->second;
    if (!m.remote.empty()) last_root_[key] = best.root;
    Stage(piece, m, best.source, best.root);
    loads_.Commit();
    return best;
  }

  PlanStep NewStep(const Piece& piece, const plan_internal::Holder& to) const {
    PlanStep step;
    step.id = static_cast<uint32_t>(plan_.steps.size());
    step.tensor = piece.tensor;
    step.to_rank = plan_.destinations[to.buffer].endpoint.rank;
    step.to_shard = to.shard;
    step.piece = piece.slice;
    step.transform = piece.transform;
    step.bytes = piece.bytes;
    step.chunks =
        static_cast<uint32_t>((piece.bytes + plan_.options.chunk_bytes - 1) / plan_.options.chunk_bytes);
    step.root = step.id;
    return step;
  }

  // Over a link slower than the compressor; a relay only forwards compressed chunks it received so.
  bool Compress(const PlanStep& step) const {
    const Topology& topo = plan_.topology;
    const int from = plan_.Buffer(step.from)->host,
              to = plan_.Buffer({PlanSide::kDestination, step.to_rank})->host;
    if (from == to || plan_.options.compressor_gbps <= 0) return false;
    if (step.after >= 0 && !plan_.steps[static_cast<size_t>(step.after)].compress) return false;
    const double link = std::min(topo.nic_bytes_per_s(from), topo.nic_bytes_per_s(to));
    return link < plan_.options.compressor_gbps * (1e9 / 8);
  }

  void Emit(const Piece& piece, const Choice& choice) {
    const std::vector<plan_internal::Holder>& holders = dst_groups_[piece.dst_group].holders;
    const Members& m = choice.members;
    for (auto [h, s] : m.local) {
      PlanStep step = NewStep(piece, holders[h]);
      step.from = plan_.sources[piece.sources[s].buffer].endpoint;
      step.from_shard = piece.sources[s].shard;
      plan_.steps.push_back(std::move(step));
    }
    const size_t r = m.remote.size();
    std::vector<uint32_t> step_of(r);  // the step delivering the piece to tree position p
    for (size_t p = 0; p < r; ++p) {
      PlanStep step = NewStep(piece, holders[m.remote[(choice.root + p) % r]]);
      if (p == 0) {
        const plan_internal::Holder& from = piece.sources[choice.source];
        step.from = plan_.sources[from.buffer].endpoint;
        step.from_shard = from.shard;
      } else {
        const size_t parent = Parent(p, fanout());
        const plan_internal::Holder& from = holders[m.remote[(choice.root + parent) % r]];
        const PlanStep& prev = plan_.steps[step_of[parent]];
        step.from = plan_.destinations[from.buffer].endpoint;
        step.from_shard = from.shard;
        step.after = prev.id;
        // A relay forwards the converted bytes from its shard, or the unconverted ones from its landing area.
        if (step.transform == TransformKind::kConvertAtSender) step.transform = TransformKind::kIdentity;
        step.root = prev.root;
        step.depth = prev.depth + 1;
      }
      step_of[p] = step.id;
      step.compress = Compress(step);
      plan_.steps.push_back(std::move(step));
    }
  }

  Plan& plan_;
  std::vector<ShardGroup> dst_groups_;
  std::vector<Piece> pieces_;
  HostLoads loads_;
  std::vector<Choice> choices_;
  // Per chain (its destination buffers in order): the rotation chosen last. Kept while no rotation
  // lowers the peak load, so pieces for the same ranks flow through one chain. Rotating per piece to
  // spread bytes (the sum-of-squares tie-break) lowered no peak but made a ring fed at every rank,
  // each link carrying flows of several chains: 1 -> 7 replicas ran ~1.2x the line-rate bound where
  // one chain ran 1.08x.
  std::map<std::vector<uint32_t>, size_t> last_root_;
};

Status CheckOptions(const PlanOptions& o) {
  if (o.chunk_bytes == 0) return InvalidArgument("plan options: chunk_bytes must be positive");
  if (o.relay_fanout < 0) return InvalidArgument("plan options: relay_fanout must be >= 0");
  if (!(o.compressor_gbps >= 0)) return InvalidArgument("plan options: compressor_gbps must be >= 0");
  if (!(o.per_chunk_overhead_s >= 0))
    return InvalidArgument("plan options: per_chunk_overhead_s must be >= 0");
  for (const TransformRule& r : o.transforms) {
    if (r.glob.empty()) return InvalidArgument("plan options: a transform rule has an empty glob");
    if (!IsFloatingPoint(r.to) || (DTypeSize(r.to) < 2 && r.to != DType::kF8E4M3))
      return InvalidArgument("plan options: transform rule '" + r.glob + "' converts to " +
                             std::string(DTypeName(r.to)) +
                             " (conversions in flight: f32, bf16, f16, f8e4m3)");
    if (r.scaling == kernels::Fp8Scaling::kPerTensor && r.to != DType::kF8E4M3)
      return InvalidArgument("plan options: transform rule '" + r.glob + "' asks for per-tensor scales of " +
                             std::string(DTypeName(r.to)) + " (only f8e4m3 has scales)");
  }
  return Status::Ok();
}

}  // namespace

Result<Plan> MakePlan(const Placement& src, const Placement& dst, const Topology& topology,
                      const PlanOptions& options) {
  WP_RETURN_IF_ERROR(CheckOptions(options));
  Status valid = src.Validate();
  if (!valid.ok()) return valid.WithContext("source placement");
  valid = dst.Validate();
  if (!valid.ok()) return valid.WithContext("destination placement");

  Plan plan;
  plan.options = options;
  if (plan.options.split_bytes == 0) plan.options.split_bytes = plan.options.chunk_bytes;
  plan.topology = topology;
  plan.topology.Place(PlanSide::kSource, src.ranks());
  plan.topology.Place(PlanSide::kDestination, dst.ranks());
  plan.tensors = src.tensors();

  std::vector<int> identity(src.tensors().size());
  std::iota(identity.begin(), identity.end(), 0);
  WP_ASSIGN_OR_RETURN(plan.sources, BuildBuffers(src, PlanSide::kSource, plan, identity));
  WP_ASSIGN_OR_RETURN(std::vector<int> dst_index, MatchTensors(src, dst, plan));
  WP_ASSIGN_OR_RETURN(plan.destinations, BuildBuffers(dst, PlanSide::kDestination, plan, dst_index));

  WP_ASSIGN_OR_RETURN(plan_internal::PieceSet set, plan_internal::FindPieces(plan));
  WP_RETURN_IF_ERROR(Planner(plan, std::move(set.dst_groups), std::move(set.pieces)).Run());
  plan.estimate = EstimatePlan(plan);
  return plan;
}

}  // namespace weightport
