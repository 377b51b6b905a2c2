#include "weightport/plan/plan.h"

#include <algorithm>
#include <map>

#include <nlohmann/json.hpp>

#include "weightport/core/dtype.h"
#include "weightport/core/hash.h"
#include "weightport/kernels/convert.h"
#include "weightport/plan/plan_binary.h"
#include "weightport/plan/quantized.h"

namespace weightport {
namespace {

const RankBuffer* FindBuffer(const std::vector<RankBuffer>& buffers, int rank) {
  auto it = std::lower_bound(buffers.begin(), buffers.end(), rank,
                             [](const RankBuffer& b, int r) { return b.endpoint.rank < r; });
  return it != buffers.end() && it->endpoint.rank == rank ? &*it : nullptr;
}

std::string StepName(const Plan& plan, const PlanStep& step) {
  std::string name = "plan step " + std::to_string(step.id);
  if (step.tensor < plan.tensors.size()) name += " (tensor '" + plan.tensors[step.tensor].name + "')";
  return name;
}

Status ValidateBuffers(const Plan& plan, const std::vector<RankBuffer>& buffers, PlanSide side) {
  for (size_t i = 0; i < buffers.size(); ++i) {
    const RankBuffer& b = buffers[i];
    const std::string what = Endpoint{side, b.endpoint.rank}.ToString();
    if (b.endpoint.side != side) return InvalidArgument(what + ": listed on the wrong side");
    if (i > 0 && buffers[i - 1].endpoint.rank >= b.endpoint.rank)
      return InvalidArgument(what + ": ranks must be unique and ascending");
    if (b.host < 0 || static_cast<size_t>(b.host) >= plan.topology.hosts().size())
      return InvalidArgument(what + ": host " + std::to_string(b.host) + " is not in the topology");
    uint64_t end = 0;
    for (size_t s = 0; s < b.shards.size(); ++s) {
      const PlannedShard& shard = b.shards[s];
      const std::string shard_what = what + " shard " + std::to_string(s);
      if (shard.tensor >= plan.tensors.size()) return InvalidArgument(shard_what + ": no such tensor");
      const TensorMeta& t = plan.tensors[shard.tensor];
      Status valid = ValidateSlice(shard.slice, t.shape);
      if (!valid.ok()) return valid.WithContext(shard_what + " of tensor '" + t.name + "'");
      Result<uint64_t> bytes = plan.StoredBytes(side, shard.tensor, shard.slice);
      if (!bytes.ok()) return bytes.status().WithContext(shard_what + " of tensor '" + t.name + "'");
      if (shard.bytes != *bytes) return InvalidArgument(shard_what + ": byte count does not match its slice");
      if (shard.offset % kPlanAlignment != 0 || shard.offset < end)
        return InvalidArgument(shard_what + ": offset " + std::to_string(shard.offset) +
                               " is unaligned or overlaps the shard before it");
      end = shard.offset + shard.bytes;
    }
    if (end > b.bytes)
      return InvalidArgument(what + ": shards run past the buffer's " + std::to_string(b.bytes) + " bytes");
  }
  return Status::Ok();
}

// The transform agrees with the tensor's two dtypes and with where the step's sender is.
Status ValidateTransform(const Plan& plan, const PlanStep& step, const std::string& what) {
  const DType src = plan.tensors[step.tensor].dtype, dst = plan.destination_dtypes[step.tensor];
  const std::string dtypes = std::string(DTypeName(src)) + " -> " + std::string(DTypeName(dst));
  const bool relay = step.from.side == PlanSide::kDestination;
  switch (step.transform) {
    case TransformKind::kIdentity:
      if (src != dst && !relay) return InvalidArgument(what + ": identity from a source, but " + dtypes);
      return Status::Ok();
    case TransformKind::kConvertAtSender:
    case TransformKind::kConvertAtReceiver:
      break;
  }
  if (src == dst || !(kernels::CanConvert(src, dst) || Quantizes(src, dst)))
    return InvalidArgument(what + ": cannot convert " + dtypes);
  if (step.transform == TransformKind::kConvertAtSender && relay)
    return InvalidArgument(what + ": only a source converts at the sender");
  if (plan.options.chunk_bytes % DTypeSize(plan.WireDType(step)) != 0)
    return InvalidArgument(what + ": chunk_bytes " + std::to_string(plan.options.chunk_bytes) +
                           " is not a whole number of " + std::string(DTypeName(plan.WireDType(step))) +
                           " elements");
  return Status::Ok();
}

}  // namespace

const char* TransformName(TransformKind kind) {
  switch (kind) {
    case TransformKind::kIdentity:
      return "identity";
    case TransformKind::kConvertAtSender:
      return "convert_at_sender";
    case TransformKind::kConvertAtReceiver:
      return "convert_at_receiver";
  }
  return "unknown";
}

const RankBuffer* Plan::Buffer(Endpoint endpoint) const {
  return FindBuffer(endpoint.side == PlanSide::kSource ? sources : destinations, endpoint.rank);
}

uint64_t Plan::TotalBytes() const {
  uint64_t total = 0;
  for (const PlanStep& s : steps) total += s.bytes;
  return total;
}

bool Plan::Quantized(uint32_t tensor) const {
  return tensor < tensors.size() && tensor < destination_dtypes.size() &&
         Quantizes(tensors[tensor].dtype, destination_dtypes[tensor]);
}

kernels::Fp8Scaling Plan::Fp8ScalingOf(uint32_t tensor) const {
  return tensor < destination_scaling.size() ? destination_scaling[tensor] : kernels::Fp8Scaling::kBlock128;
}

Result<uint64_t> Plan::StoredBytes(PlanSide side, uint32_t tensor, const Slice& slice) const {
  const TensorMeta& t = tensors.at(tensor);
  if (side == PlanSide::kDestination && Quantized(tensor))
    return StoredQuantizedBytes(slice, t.shape, Fp8ScalingOf(tensor));
  const DType dtype = side == PlanSide::kSource ? t.dtype : destination_dtypes.at(tensor);
  return static_cast<uint64_t>(slice.num_elements()) * DTypeSize(dtype);
}

Result<uint64_t> Plan::WireBytes(uint32_t tensor, DType wire, const Slice& piece) const {
  if (wire == DType::kF8E4M3 && Quantized(tensor))
    return WireQuantizedBytes(piece, tensors.at(tensor).shape, Fp8ScalingOf(tensor));
  return static_cast<uint64_t>(piece.num_elements()) * DTypeSize(wire);
}

uint64_t Plan::DestinationBytes() const {
  uint64_t total = 0;
  for (const RankBuffer& b : destinations)
    for (const PlannedShard& s : b.shards) total += s.bytes;
  return total;
}

DType Plan::WireDType(const PlanStep& step) const {
  switch (step.transform) {
    case TransformKind::kConvertAtSender:
      return destination_dtypes[step.tensor];
    case TransformKind::kConvertAtReceiver:
      return tensors[step.tensor].dtype;
    case TransformKind::kIdentity:
      break;
  }
  return step.from.side == PlanSide::kSource ? tensors[step.tensor].dtype : destination_dtypes[step.tensor];
}

bool SenderEndPacked(const PlanStep& step) {
  return step.transform == TransformKind::kConvertAtSender ||
         (step.transform == TransformKind::kConvertAtReceiver && step.from.side == PlanSide::kDestination);
}
bool ReceiverEndPacked(const PlanStep& step) { return step.transform == TransformKind::kConvertAtReceiver; }

uint64_t Plan::Digest() const {
  const std::string bytes = EncodePlanBinary(*this);
  return Xxh3(bytes.data(), bytes.size());
}

namespace {
// A destination shard of a quantised tensor is quantised whole, either piece by piece at the sources
// or from every piece landed at it: its steps all do the one or all the other.
Status ValidateQuantizedShards(const Plan& plan) {
  std::map<std::pair<int, uint32_t>, const PlanStep*> first;  // (dst rank, shard) -> a step into it
  for (const PlanStep& step : plan.steps) {
    if (!plan.Quantized(step.tensor)) continue;
    auto [it, fresh] = first.emplace(std::make_pair(step.to_rank, step.to_shard), &step);
    if (!fresh && ReceiverEndPacked(*it->second) != ReceiverEndPacked(step))
      return InvalidArgument(StepName(plan, step) + ": dst rank " + std::to_string(step.to_rank) + " shard " +
                             std::to_string(step.to_shard) + " is quantised at the sources by step " +
                             std::to_string(ReceiverEndPacked(step) ? it->second->id : step.id) +
                             " and at the receiver by step " +
                             std::to_string(ReceiverEndPacked(step) ? step.id : it->second->id));
  }
  return Status::Ok();
}
}  // namespace

Status Plan::Validate() const {
  if (options.chunk_bytes == 0) return InvalidArgument("plan: chunk_bytes must be positive");
  if (destination_dtypes.size() != tensors.size())
    return InvalidArgument("plan: " + std::to_string(destination_dtypes.size()) + " destination dtypes for " +
                           std::to_string(tensors.size()) + " tensors");
  if (!destination_scaling.empty()) {  // written only when some quantised tensor has one scale
    if (destination_scaling.size() != tensors.size())
      return InvalidArgument("plan: " + std::to_string(destination_scaling.size()) +
                             " destination scalings for " + std::to_string(tensors.size()) + " tensors");
    bool per_tensor = false;
    for (uint32_t t = 0; t < tensors.size(); ++t) {
      if (destination_scaling[t] != kernels::Fp8Scaling::kPerTensor) continue;
      if (!Quantized(t))
        return InvalidArgument("plan: tensor '" + tensors[t].name +
                               "' has per-tensor scales but is not quantised to f8e4m3");
      per_tensor = true;
    }
    if (!per_tensor) return InvalidArgument("plan: destination_scaling given with no per-tensor scale in it");
  }
  WP_RETURN_IF_ERROR(ValidateBuffers(*this, sources, PlanSide::kSource));
  WP_RETURN_IF_ERROR(ValidateBuffers(*this, destinations, PlanSide::kDestination));
  for (size_t i = 0; i < steps.size(); ++i) {
    const PlanStep& step = steps[i];
    const std::string what = StepName(*this, step);
    if (step.id != i) return InvalidArgument(what + ": id does not match its position " + std::to_string(i));
    if (step.tensor >= tensors.size()) return InvalidArgument(what + ": no such tensor");
    const TensorMeta& t = tensors[step.tensor];
    const RankBuffer* from = Buffer(step.from);
    const RankBuffer* to = Buffer({PlanSide::kDestination, step.to_rank});
    if (!from || step.from_shard >= from->shards.size())
      return InvalidArgument(what + ": sender " + step.from.ToString() + " shard " +
                             std::to_string(step.from_shard) + " does not exist");
    if (!to || step.to_shard >= to->shards.size())
      return InvalidArgument(what + ": receiver dst rank " + std::to_string(step.to_rank) + " shard " +
                             std::to_string(step.to_shard) + " does not exist");
    const PlannedShard& fs = from->shards[step.from_shard];
    const PlannedShard& ts = to->shards[step.to_shard];
    if (fs.tensor != step.tensor || ts.tensor != step.tensor)
      return InvalidArgument(what + ": its shards hold another tensor");
    WP_ASSIGN_OR_RETURN(bool in_from, Contains(fs.slice, step.piece, t.shape));
    WP_ASSIGN_OR_RETURN(bool in_to, Contains(ts.slice, step.piece, t.shape));
    if (!in_from || !in_to)
      return InvalidArgument(what + ": piece " + step.piece.ToString() + " is not inside " +
                             (in_from ? "the receiver's" : "the sender's") + " shard");
    WP_RETURN_IF_ERROR(ValidateTransform(*this, step, what));
    Result<uint64_t> bytes = WireBytes(step.tensor, WireDType(step), step.piece);
    if (!bytes.ok()) return bytes.status().WithContext(what);
    if (step.bytes != *bytes || step.bytes == 0)
      return InvalidArgument(what + ": byte count does not match its piece");
    if (step.chunks != (step.bytes + options.chunk_bytes - 1) / options.chunk_bytes)
      return InvalidArgument(what + ": chunk count does not match bytes / chunk_bytes");
    if (step.after < 0) {
      if (step.from.side != PlanSide::kSource || step.root != step.id || step.depth != 0)
        return InvalidArgument(what +
                               ": a step without `after` must come from a source, be its own root, depth 0");
      continue;
    }
    if (step.after >= static_cast<int64_t>(i))
      return InvalidArgument(what + ": `after` must be an earlier step");
    const PlanStep& prev = steps[step.after];
    if (step.from.side != PlanSide::kDestination || prev.to_rank != step.from.rank ||
        prev.to_shard != step.from_shard || !(prev.piece == step.piece))
      return InvalidArgument(what + ": step " + std::to_string(step.after) +
                             " (its `after`) does not deliver the same piece to its sender");
    if (step.compress && !prev.compress)
      return InvalidArgument(what + ": a relay compresses only what step " + std::to_string(step.after) +
                             " (its `after`) delivered compressed");
    if ((prev.transform == TransformKind::kConvertAtReceiver) !=
        (step.transform == TransformKind::kConvertAtReceiver))
      return InvalidArgument(what + ": a relay converts at its receiver exactly when step " +
                             std::to_string(step.after) + " (its `after`) does");
    if (step.root != prev.root || step.depth != prev.depth + 1)
      return InvalidArgument(what + ": root or depth disagrees with step " + std::to_string(step.after));
  }
  return ValidateQuantizedShards(*this);
}

Status ForEachStepRun(const Plan& plan, const PlanStep& step,
                      const std::function<void(const StepRun&)>& visit) {
  const RankBuffer* from = plan.Buffer(step.from);
  const RankBuffer* to = plan.Buffer({PlanSide::kDestination, step.to_rank});
  if (!from || !to || step.from_shard >= from->shards.size() || step.to_shard >= to->shards.size() ||
      step.tensor >= plan.tensors.size())
    return InvalidArgument("plan step " + std::to_string(step.id) +
                           ": sender or receiver shard does not exist");
  const PlannedShard& fs = from->shards[step.from_shard];
  const PlannedShard& ts = to->shards[step.to_shard];
  const TensorMeta& t = plan.tensors[step.tensor];
  // A packed end holds exactly the piece, in its row-major order, at offset 0.
  const bool from_packed = SenderEndPacked(step), to_packed = ReceiverEndPacked(step);
  const uint64_t from_base = from_packed ? 0 : fs.offset, to_base = to_packed ? 0 : ts.offset;
  const uint64_t chunk = plan.options.chunk_bytes;
  uint64_t piece_offset = 0;
  // Cuts each run where the next chunk starts, so every visited run lies in one chunk.
  auto cut = [&](uint64_t from, uint64_t to) {
    return [&, from, to](const CopyRun& run) {
      uint64_t done = 0;
      while (done < run.length) {
        const uint64_t at = piece_offset + done;
        const uint64_t length = std::min(chunk - at % chunk, run.length - done);
        visit(StepRun{from + run.src_offset + done, to + run.dst_offset + done, at, length});
        done += length;
      }
      piece_offset += run.length;
    };
  };
  const DType wire = plan.WireDType(step);
  WP_RETURN_IF_ERROR(ForEachCopyRun(step.piece, t.shape, DTypeSize(wire), from_packed ? step.piece : fs.slice,
                                    to_packed ? step.piece : ts.slice, cut(from_base, to_base)));
  if (wire != DType::kF8E4M3 || !plan.Quantized(step.tensor)) return Status::Ok();
  // The piece's scales follow its e4m3 bytes on the wire and sit after them in a stored shard.
  const kernels::Fp8Scaling scaling = plan.Fp8ScalingOf(step.tensor);
  WP_ASSIGN_OR_RETURN(const Shape grid, ScaleGridShape(t.shape, scaling));
  WP_ASSIGN_OR_RETURN(const Slice piece_blocks, ScaleGridSlice(step.piece, t.shape, scaling));
  WP_ASSIGN_OR_RETURN(const Slice to_blocks, ScaleGridSlice(ts.slice, t.shape, scaling));
  const uint64_t to_scales = ts.offset + StoredScaleOffset(ts.slice.num_elements());
  if (from_packed)
    return ForEachCopyRun(piece_blocks, grid, 4, piece_blocks, to_blocks, cut(piece_offset, to_scales));
  WP_ASSIGN_OR_RETURN(const Slice from_blocks, ScaleGridSlice(fs.slice, t.shape, scaling));
  return ForEachCopyRun(piece_blocks, grid, 4, from_blocks, to_blocks,
                        cut(fs.offset + StoredScaleOffset(fs.slice.num_elements()), to_scales));
}

Status ForEachConvertRun(const Plan& plan, const PlanStep& step,
                         const std::function<void(const ConvertRun&)>& visit) {
  if (step.transform == TransformKind::kIdentity) return Status::Ok();
  const bool at_sender = step.transform == TransformKind::kConvertAtSender;
  const RankBuffer* holder =
      at_sender ? plan.Buffer(step.from) : plan.Buffer({PlanSide::kDestination, step.to_rank});
  const uint32_t index = at_sender ? step.from_shard : step.to_shard;
  if (!holder || index >= holder->shards.size() || step.tensor >= plan.tensors.size())
    return InvalidArgument("plan step " + std::to_string(step.id) + ": its converting shard does not exist");
  const PlannedShard& shard = holder->shards[index];
  const TensorMeta& t = plan.tensors[step.tensor];
  const uint64_t element = DTypeSize(at_sender ? t.dtype : plan.destination_dtypes[step.tensor]);
  const uint64_t chunk = plan.options.chunk_bytes / DTypeSize(plan.WireDType(step));  // elements
  if (chunk == 0) return InvalidArgument("plan step " + std::to_string(step.id) + ": chunks hold no element");
  uint64_t piece_element = 0;
  // Element size 1 makes the copy runs' offsets element indices.
  return ForEachCopyRun(step.piece, t.shape, 1, shard.slice, step.piece, [&](const CopyRun& run) {
    uint64_t done = 0;
    while (done < run.length) {
      const uint64_t at = piece_element + done;
      const uint64_t count = std::min(chunk - at % chunk, run.length - done);
      visit(ConvertRun{shard.offset + (run.src_offset + done) * element, at, count});
      done += count;
    }
    piece_element += run.length;
  });
}

}  // namespace weightport
