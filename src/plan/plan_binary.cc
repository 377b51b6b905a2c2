// Plan <-> its binary form (plan_binary.h). Field order follows plan.h; a step's id is its index.
#include "weightport/plan/plan_binary.h"

#include <bit>
#include <cstring>

namespace weightport {
namespace plan_binary {

void PutVarint(std::string& out, uint64_t v) {
  while (v >= 0x80) {
    out.push_back(static_cast<char>((v & 0x7f) | 0x80));
    v >>= 7;
  }
  out.push_back(static_cast<char>(v));
}
void PutSigned(std::string& out, int64_t v) {
  PutVarint(out, (static_cast<uint64_t>(v) << 1) ^ static_cast<uint64_t>(v >> 63));
}
void PutString(std::string& out, std::string_view s) {
  PutVarint(out, s.size());
  out.append(s);
}
void PutDouble(std::string& out, double v) {
  const uint64_t bits = std::bit_cast<uint64_t>(v);
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<char>(bits >> (8 * i)));
}

Result<uint64_t> GetVarint(std::string_view& in, const char* what) {
  uint64_t v = 0;
  for (int shift = 0; shift < 64; shift += 7) {
    if (in.empty()) return InvalidArgument(std::string("plan: truncated at ") + what);
    const auto byte = static_cast<uint8_t>(in.front());
    in.remove_prefix(1);
    v |= static_cast<uint64_t>(byte & 0x7f) << shift;
    if (!(byte & 0x80)) return v;
  }
  return InvalidArgument(std::string("plan: varint too long at ") + what);
}
Result<int64_t> GetSigned(std::string_view& in, const char* what) {
  WP_ASSIGN_OR_RETURN(uint64_t z, GetVarint(in, what));
  return static_cast<int64_t>((z >> 1) ^ (~(z & 1) + 1));
}
Result<std::string> GetString(std::string_view& in, const char* what) {
  WP_ASSIGN_OR_RETURN(size_t n, GetCount(in, 1, what));
  std::string s(in.substr(0, n));
  in.remove_prefix(n);
  return s;
}
Result<double> GetDouble(std::string_view& in, const char* what) {
  if (in.size() < 8) return InvalidArgument(std::string("plan: truncated at ") + what);
  uint64_t bits = 0;
  for (int i = 0; i < 8; ++i) bits |= static_cast<uint64_t>(static_cast<uint8_t>(in[i])) << (8 * i);
  in.remove_prefix(8);
  return std::bit_cast<double>(bits);
}
Result<size_t> GetCount(std::string_view& in, size_t min_item_bytes, const char* what) {
  WP_ASSIGN_OR_RETURN(uint64_t n, GetVarint(in, what));
  if (n > in.size() / std::max<size_t>(min_item_bytes, 1))
    return InvalidArgument(std::string("plan: ") + what + " says " + std::to_string(n) + " items, " +
                           std::to_string(in.size()) + " bytes are left");
  return static_cast<size_t>(n);
}

}  // namespace plan_binary

namespace {
using namespace plan_binary;
constexpr std::string_view kMagic = "WPPLAN1";

Result<uint32_t> GetU32(std::string_view& in, const char* what) {
  WP_ASSIGN_OR_RETURN(uint64_t v, GetVarint(in, what));
  if (v > UINT32_MAX) return InvalidArgument(std::string("plan: ") + what + " is out of range");
  return static_cast<uint32_t>(v);
}
Result<int> GetInt(std::string_view& in, const char* what) {
  WP_ASSIGN_OR_RETURN(int64_t v, GetSigned(in, what));
  if (v < INT32_MIN || v > INT32_MAX)
    return InvalidArgument(std::string("plan: ") + what + " is out of range");
  return static_cast<int>(v);
}
template <typename Enum>
Result<Enum> GetEnum(std::string_view& in, uint64_t count, const char* what) {
  WP_ASSIGN_OR_RETURN(uint64_t v, GetVarint(in, what));
  if (v >= count)
    return InvalidArgument(std::string("plan: ") + what + " " + std::to_string(v) + " is unknown");
  return static_cast<Enum>(v);
}
constexpr uint64_t kDTypes = static_cast<uint64_t>(DType::kBool) + 1;  // the last DType

void PutInts(std::string& out, const std::vector<int64_t>& v) {
  PutVarint(out, v.size());
  for (int64_t x : v) PutSigned(out, x);
}
Result<std::vector<int64_t>> GetInts(std::string_view& in, const char* what) {
  WP_ASSIGN_OR_RETURN(size_t n, GetCount(in, 1, what));
  std::vector<int64_t> v(n);
  for (int64_t& x : v) {
    WP_ASSIGN_OR_RETURN(x, GetSigned(in, what));
  }
  return v;
}

void PutSliceRecord(std::string& out, const Slice& s) {
  PutVarint(out, s.is_flat() ? 1 : 0);
  if (s.is_flat()) {
    PutSigned(out, s.flat().start);
    PutSigned(out, s.flat().length);
    return;
  }
  PutInts(out, s.box().start);
  PutInts(out, s.box().length);
}
Result<Slice> GetSlice(std::string_view& in, const char* what) {
  WP_ASSIGN_OR_RETURN(uint64_t kind, GetVarint(in, what));
  if (kind == 1) {
    WP_ASSIGN_OR_RETURN(int64_t start, GetSigned(in, what));
    WP_ASSIGN_OR_RETURN(int64_t length, GetSigned(in, what));
    return Slice::MakeFlat(start, length);
  }
  if (kind != 0) return InvalidArgument(std::string("plan: unknown slice kind at ") + what);
  WP_ASSIGN_OR_RETURN(std::vector<int64_t> start, GetInts(in, what));
  WP_ASSIGN_OR_RETURN(std::vector<int64_t> length, GetInts(in, what));
  return Slice::MakeBox(std::move(start), std::move(length));
}

void PutTopology(std::string& out, const Topology& t) {
  PutDouble(out, t.default_nic_gbps());
  PutDouble(out, t.intra_host_gbps());
  PutVarint(out, t.hosts().size());
  for (const HostSpec& h : t.hosts()) {
    PutString(out, h.name);
    PutDouble(out, h.nic_gbps);
    for (const std::vector<int>* ranks : {&h.src_ranks, &h.dst_ranks}) {
      PutVarint(out, ranks->size());
      for (int r : *ranks) PutSigned(out, r);
    }
  }
}
Result<Topology> GetTopology(std::string_view& in) {
  WP_ASSIGN_OR_RETURN(double nic, GetDouble(in, "topology"));
  WP_ASSIGN_OR_RETURN(double intra, GetDouble(in, "topology"));
  WP_ASSIGN_OR_RETURN(size_t n, GetCount(in, 11, "hosts"));
  std::vector<HostSpec> hosts(n);
  for (HostSpec& h : hosts) {
    WP_ASSIGN_OR_RETURN(h.name, GetString(in, "host name"));
    WP_ASSIGN_OR_RETURN(h.nic_gbps, GetDouble(in, "host nic_gbps"));
    for (std::vector<int>* ranks : {&h.src_ranks, &h.dst_ranks}) {
      WP_ASSIGN_OR_RETURN(size_t k, GetCount(in, 1, "host ranks"));
      ranks->resize(k);
      for (int& r : *ranks) {
        WP_ASSIGN_OR_RETURN(r, GetInt(in, "host rank"));
      }
    }
  }
  return Topology::Make(std::move(hosts), nic, intra);
}

void PutBuffers(std::string& out, const std::vector<RankBuffer>& buffers) {
  PutVarint(out, buffers.size());
  for (const RankBuffer& b : buffers) {
    PutSigned(out, b.endpoint.rank);
    PutSigned(out, b.host);
    PutVarint(out, b.bytes);
    PutVarint(out, b.shards.size());
    for (const PlannedShard& s : b.shards) {
      PutVarint(out, s.tensor);
      PutSliceRecord(out, s.slice);
      PutVarint(out, s.offset);
      PutVarint(out, s.bytes);
    }
  }
}
Result<std::vector<RankBuffer>> GetBuffers(std::string_view& in, PlanSide side) {
  WP_ASSIGN_OR_RETURN(size_t n, GetCount(in, 4, "buffers"));
  std::vector<RankBuffer> buffers(n);
  for (RankBuffer& b : buffers) {
    b.endpoint.side = side;
    WP_ASSIGN_OR_RETURN(b.endpoint.rank, GetInt(in, "buffer rank"));
    WP_ASSIGN_OR_RETURN(b.host, GetInt(in, "buffer host"));
    WP_ASSIGN_OR_RETURN(b.bytes, GetVarint(in, "buffer bytes"));
    WP_ASSIGN_OR_RETURN(size_t k, GetCount(in, 6, "shards"));
    b.shards.resize(k);
    for (PlannedShard& s : b.shards) {
      WP_ASSIGN_OR_RETURN(s.tensor, GetU32(in, "shard tensor"));
      WP_ASSIGN_OR_RETURN(s.slice, GetSlice(in, "shard slice"));
      WP_ASSIGN_OR_RETURN(s.offset, GetVarint(in, "shard offset"));
      WP_ASSIGN_OR_RETURN(s.bytes, GetVarint(in, "shard bytes"));
    }
  }
  return buffers;
}

void PutStep(std::string& out, const PlanStep& s) {
  PutVarint(out, s.tensor);
  PutVarint(out, (static_cast<uint64_t>(s.from.rank) << 1) | (s.from.side == PlanSide::kSource ? 0 : 1));
  PutVarint(out, s.from_shard);
  PutVarint(out, static_cast<uint64_t>(s.to_rank));
  PutVarint(out, s.to_shard);
  PutSliceRecord(out, s.piece);
  PutVarint(out, s.bytes);
  PutVarint(out, s.chunks);
  PutVarint(out, (static_cast<uint64_t>(s.transform) << 1) | (s.compress ? 1 : 0));
  PutSigned(out, s.after);
  PutVarint(out, s.id - s.root);  // a root is this step or an earlier one: small
  PutVarint(out, s.depth);
}
Result<PlanStep> GetStep(std::string_view& in, uint32_t id) {
  PlanStep s;
  s.id = id;
  WP_ASSIGN_OR_RETURN(s.tensor, GetU32(in, "step tensor"));
  WP_ASSIGN_OR_RETURN(uint64_t from, GetVarint(in, "step sender"));
  if ((from >> 1) > INT32_MAX) return InvalidArgument("plan: step sender is out of range");
  s.from = {(from & 1) ? PlanSide::kDestination : PlanSide::kSource, static_cast<int>(from >> 1)};
  WP_ASSIGN_OR_RETURN(s.from_shard, GetU32(in, "step from_shard"));
  WP_ASSIGN_OR_RETURN(uint32_t to, GetU32(in, "step to_rank"));
  if (to > INT32_MAX) return InvalidArgument("plan: step to_rank is out of range");
  s.to_rank = static_cast<int>(to);
  WP_ASSIGN_OR_RETURN(s.to_shard, GetU32(in, "step to_shard"));
  WP_ASSIGN_OR_RETURN(s.piece, GetSlice(in, "step piece"));
  WP_ASSIGN_OR_RETURN(s.bytes, GetVarint(in, "step bytes"));
  WP_ASSIGN_OR_RETURN(s.chunks, GetU32(in, "step chunks"));
  WP_ASSIGN_OR_RETURN(uint64_t flags, GetVarint(in, "step transform"));
  if ((flags >> 1) > static_cast<uint64_t>(TransformKind::kConvertAtReceiver))
    return InvalidArgument("plan: step transform is unknown");
  s.transform = static_cast<TransformKind>(flags >> 1);
  s.compress = flags & 1;
  WP_ASSIGN_OR_RETURN(s.after, GetSigned(in, "step after"));
  WP_ASSIGN_OR_RETURN(uint32_t back, GetU32(in, "step root"));
  if (back > id) return InvalidArgument("plan: step root is out of range");
  s.root = id - back;
  WP_ASSIGN_OR_RETURN(s.depth, GetU32(in, "step depth"));
  return s;
}
}  // namespace

void EncodePlanBinary(const Plan& plan, std::string& out) {
  out.append(kMagic);
  const PlanOptions& o = plan.options;
  PutVarint(out, o.chunk_bytes);
  PutSigned(out, o.relay_fanout);
  PutVarint(out, o.split_bytes);
  PutDouble(out, o.per_chunk_overhead_s);
  PutDouble(out, o.compressor_gbps);
  PutVarint(out, o.transforms.size());
  for (const TransformRule& r : o.transforms) {
    PutString(out, r.glob);
    PutVarint(out, static_cast<uint64_t>(r.to));
    PutVarint(out, static_cast<uint64_t>(r.scaling));
  }
  PutTopology(out, plan.topology);
  PutVarint(out, plan.tensors.size());
  for (const TensorMeta& t : plan.tensors) {
    PutString(out, t.name);
    PutVarint(out, static_cast<uint64_t>(t.dtype));
    PutInts(out, t.shape);
  }
  PutVarint(out, plan.destination_dtypes.size());
  for (DType d : plan.destination_dtypes) PutVarint(out, static_cast<uint64_t>(d));
  PutVarint(out, plan.destination_scaling.size());
  for (kernels::Fp8Scaling s : plan.destination_scaling) PutVarint(out, static_cast<uint64_t>(s));
  PutBuffers(out, plan.sources);
  PutBuffers(out, plan.destinations);
  PutVarint(out, plan.steps.size());
  for (const PlanStep& s : plan.steps) PutStep(out, s);
}

std::string EncodePlanBinary(const Plan& plan) {
  std::string out;
  EncodePlanBinary(plan, out);
  return out;
}

Result<Plan> DecodePlanBinary(std::string_view& in) {
  if (in.substr(0, kMagic.size()) != kMagic) return InvalidArgument("plan: not a binary weightport plan");
  in.remove_prefix(kMagic.size());
  Plan plan;
  PlanOptions& o = plan.options;
  WP_ASSIGN_OR_RETURN(o.chunk_bytes, GetVarint(in, "chunk_bytes"));
  WP_ASSIGN_OR_RETURN(o.relay_fanout, GetInt(in, "relay_fanout"));
  WP_ASSIGN_OR_RETURN(o.split_bytes, GetVarint(in, "split_bytes"));
  WP_ASSIGN_OR_RETURN(o.per_chunk_overhead_s, GetDouble(in, "per_chunk_overhead_s"));
  WP_ASSIGN_OR_RETURN(o.compressor_gbps, GetDouble(in, "compressor_gbps"));
  WP_ASSIGN_OR_RETURN(size_t rules, GetCount(in, 3, "transforms"));
  o.transforms.resize(rules);
  for (TransformRule& r : o.transforms) {
    WP_ASSIGN_OR_RETURN(r.glob, GetString(in, "transform glob"));
    WP_ASSIGN_OR_RETURN(r.to, GetEnum<DType>(in, kDTypes, "transform dtype"));
    WP_ASSIGN_OR_RETURN(r.scaling, GetEnum<kernels::Fp8Scaling>(in, 2, "transform scaling"));
  }
  WP_ASSIGN_OR_RETURN(plan.topology, GetTopology(in));
  WP_ASSIGN_OR_RETURN(size_t tensors, GetCount(in, 3, "tensors"));
  plan.tensors.reserve(tensors);
  for (size_t i = 0; i < tensors; ++i) {
    WP_ASSIGN_OR_RETURN(std::string name, GetString(in, "tensor name"));
    WP_ASSIGN_OR_RETURN(DType dtype, GetEnum<DType>(in, kDTypes, "tensor dtype"));
    WP_ASSIGN_OR_RETURN(Shape shape, GetInts(in, "tensor shape"));
    WP_ASSIGN_OR_RETURN(TensorMeta t, TensorMeta::Make(std::move(name), dtype, std::move(shape)));
    plan.tensors.push_back(std::move(t));
  }
  WP_ASSIGN_OR_RETURN(size_t dtypes, GetCount(in, 1, "destination dtypes"));
  plan.destination_dtypes.resize(dtypes);
  for (DType& d : plan.destination_dtypes) {
    WP_ASSIGN_OR_RETURN(d, GetEnum<DType>(in, kDTypes, "destination dtype"));
  }
  WP_ASSIGN_OR_RETURN(size_t scalings, GetCount(in, 1, "destination scalings"));
  plan.destination_scaling.resize(scalings);
  for (kernels::Fp8Scaling& s : plan.destination_scaling) {
    WP_ASSIGN_OR_RETURN(s, GetEnum<kernels::Fp8Scaling>(in, 2, "destination scaling"));
  }
  WP_ASSIGN_OR_RETURN(plan.sources, GetBuffers(in, PlanSide::kSource));
  WP_ASSIGN_OR_RETURN(plan.destinations, GetBuffers(in, PlanSide::kDestination));
  WP_ASSIGN_OR_RETURN(size_t steps, GetCount(in, 14, "steps"));
  plan.steps.reserve(steps);
  for (size_t i = 0; i < steps; ++i) {
    WP_ASSIGN_OR_RETURN(PlanStep s, GetStep(in, static_cast<uint32_t>(i)));
    plan.steps.push_back(std::move(s));
  }
  WP_RETURN_IF_ERROR(plan.Validate());
  return plan;
}

}  // namespace weightport
