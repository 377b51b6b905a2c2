// Plan: how the bytes of one model version move from the ranks that hold them (a source
// Placement) to the ranks that need them (a destination Placement). Plain data with a JSON form.
//
// Every rank keeps its shards packed (slice.h) one after another in one buffer, in the order of its
// placement, each at a 64-byte aligned offset: RankBuffer gives the offsets, so a step's byte
// ranges on both ends follow from its piece (ForEachStepRun).
//
// A step moves one piece (a slice of one tensor) from one rank's shard into a destination rank's
// shard. The sender is a source rank, or a destination rank relaying a piece it received itself
// (`after` names the step that delivered it). Steps are chunked: chunk k is bytes
// [k * chunk_bytes, (k + 1) * chunk_bytes) of the piece in row-major order, the same bytes on
// every hop, so a relay forwards chunk k as soon as it has received and verified chunk k of
// `after` while chunk k + 1 is still arriving.
//
// MakePlan (planner.h) builds a plan; the engine compiles it once per rank and replays it for
// every version; the simulator runs it on a model of the network.
//
// Thread-safety: plain values; const functions are safe to call concurrently.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "weightport/core/dtype.h"
#include "weightport/core/slice.h"
#include "weightport/core/status.h"
#include "weightport/core/tensor_meta.h"
#include "weightport/kernels/convert.h"
#include "weightport/plan/topology.h"

namespace weightport {

// Shards start at multiples of this in their rank's buffer.
inline constexpr uint64_t kPlanAlignment = 64;

// What happens to the bytes of a step on the way. Destinations may store a tensor in another
// floating-point dtype than the sources (Plan::destination_dtypes; kernels::CanConvert pairs). The
// planner converts where the fewer bytes travel: a narrowing conversion (f32 -> bf16) at the source,
// which converts the piece into a packed wire area when it publishes; a widening one (bf16 -> f32)
// at each receiver, which lands the piece packed in a landing area and converts each verified chunk
// into its shard. A relay forwards what it received: after a conversion at the source, from its
// shard (identity); after conversions at receivers, from its landing area (converting again itself).
// So every hop carries the same, narrower bytes, and the root's chunk hashes hold on every hop.
// Quantising to f8e4m3 in 128x128 blocks or with one scale per tensor (quantized.h) needs whole
// blocks: at the sources when every source shard holds whole blocks (fewer bytes travel), else at
// each receiver, which lands every piece of a shard in the sources' dtype and quantises the whole
// shard once all are verified.
enum class TransformKind : uint8_t { kIdentity, kConvertAtSender, kConvertAtReceiver };
const char* TransformName(TransformKind kind);  // "identity", "convert_at_sender", "convert_at_receiver"

// Destinations store the tensors whose names match `glob` (GlobMatch syntax) as `to`; f8e4m3 with
// `scaling`'s scales.
struct TransformRule {
  std::string glob;
  DType to = DType::kBF16;
  kernels::Fp8Scaling scaling = kernels::Fp8Scaling::kBlock128;
};

struct PlanOptions {
  uint64_t chunk_bytes = 4ull << 20;
  // How destinations needing the same bytes share them. 0: every destination rank is fed by the
  // sources directly (the naive way). 1: the sources feed one replica and the replicas relay in a
  // pipelined chain. k > 1: a k-ary tree.
  int relay_fanout = 1;
  // A piece held by several sources is split among them (by rows) when it is larger than this, so
  // their NICs share it. 0: chunk_bytes.
  uint64_t split_bytes = 0;
  // Per-tensor destination dtypes; the first matching rule wins. Tensors no rule matches keep the
  // destination placement's dtype.
  std::vector<TransformRule> transforms;
  // Fixed cost per chunk moved, for the prediction (a message round trip, a completion).
  double per_chunk_overhead_s = 5e-6;
  // What one sender thread compresses per second with zstd (Gbit/s of input). A step over a link
  // slower than this is compressed (PlanStep::compress); 0: nothing is.
  double compressor_gbps = 0;
};

// One shard as its rank stores it.
struct PlannedShard {
  uint32_t tensor = 0;  // index into Plan::tensors
  Slice slice;
  uint64_t offset = 0;  // in the rank's buffer, 64-byte aligned
  uint64_t bytes = 0;
};

// One rank's buffer: its shards packed at aligned offsets.
struct RankBuffer {
  Endpoint endpoint;
  int host = -1;  // index into Plan::topology.hosts()
  std::vector<PlannedShard> shards;
  uint64_t bytes = 0;  // the buffer's size
};

struct PlanStep {
  uint32_t id = 0;  // its index in Plan::steps
  uint32_t tensor = 0;
  Endpoint from;            // a source rank, or a destination rank relaying
  uint32_t from_shard = 0;  // index into from's RankBuffer::shards
  int to_rank = 0;          // a destination rank
  uint32_t to_shard = 0;
  Slice piece;  // the elements moved, in tensor coordinates
  uint64_t bytes = 0;
  uint32_t chunks = 0;  // ceil(bytes / chunk_bytes)
  TransformKind transform = TransformKind::kIdentity;
  // The step that delivered `piece` to `from` (a relay), or -1. Chunk k of this step may start
  // only once chunk k of `after` is verified at `from`. Always a lower id than this step's.
  int64_t after = -1;
  // The first step of this step's relay chain (a step from a source): its chunk hashes are the
  // expected hashes of every hop. Equal to id for a step from a source.
  uint32_t root = 0;
  uint32_t depth = 0;  // hops from the source: 0 for a step from a source
  // Chunks travel zstd-compressed where they compress (the sender decides per chunk when it
  // publishes; one that does not shrink by 10% travels as is). The link is slower than the
  // compressor. A relay step compresses only when its `after` did: the relay forwards the
  // compressed chunks it received. Byte counts and estimates stay uncompressed.
  bool compress = false;
};

// The load a plan puts on one host, in bytes.
struct HostLoad {
  int host = 0;
  uint64_t nic_out = 0;
  uint64_t nic_in = 0;
  uint64_t local = 0;  // copies between ranks of this host
  double busy_s = 0;   // the largest of out, in / NIC and local / intra-host bandwidth
};

struct PlanEstimate {
  // max over hosts of HostLoad::busy_s: no schedule of this plan's traffic finishes sooner.
  double lower_bound_s = 0;
  // lower bound + the pipeline fill of the deepest relay chain (per hop: one chunk at that hop's
  // bandwidth plus the per-chunk overhead) + the per-chunk overhead on the destination rank
  // receiving the most chunks.
  double predicted_s = 0;
  uint32_t max_depth = 0;
  std::vector<HostLoad> hosts;
};

struct Plan {
  PlanOptions options;
  Topology topology;
  std::vector<TensorMeta> tensors;        // as the sources hold them
  std::vector<DType> destination_dtypes;  // per tensor: as the destinations store it
  // Per tensor, the scales of one stored as f8e4m3; empty when every one has 128x128 block scales.
  std::vector<kernels::Fp8Scaling> destination_scaling;
  std::vector<RankBuffer> sources;       // ascending rank
  std::vector<RankBuffer> destinations;  // ascending rank
  std::vector<PlanStep> steps;           // every step after the one it depends on
  PlanEstimate estimate;

  // nullptr when there is no such rank.
  const RankBuffer* Buffer(Endpoint endpoint) const;
  uint64_t TotalBytes() const;  // sum of step bytes
  // The dtype of the bytes `step` moves: the destination's after a conversion at the source or from
  // a relay's shard, the source's otherwise.
  DType WireDType(const PlanStep& step) const;
  // Bytes one copy of the destination needs: sum of destination shard bytes.
  uint64_t DestinationBytes() const;
  // The destinations store `tensor` as f8e4m3 with block (or per-tensor: Fp8ScalingOf) scales
  // quantised from the sources' f32 or bf16 (quantized.h): its destination shards and the pieces of its steps
  // carry their scales.
  bool Quantized(uint32_t tensor) const;
  kernels::Fp8Scaling Fp8ScalingOf(uint32_t tensor) const;
  // Bytes of a shard of `tensor` as `side` stores it, and of `piece` on the wire in `wire` dtype.
  // Errors for a quantised tensor's slice that is not on block boundaries.
  Result<uint64_t> StoredBytes(PlanSide side, uint32_t tensor, const Slice& slice) const;
  Result<uint64_t> WireBytes(uint32_t tensor, DType wire, const Slice& piece) const;

  nlohmann::json ToJson() const;
  // ToJson().dump().size(), a step at a time: without holding the whole text.
  uint64_t JsonBytes() const;
  // Strict; the result is Validate()d.
  static Result<Plan> FromJson(const nlohmann::json& json);
  // Structure only (not coverage): indices in range, pieces inside both shards, chunk counts,
  // `after` earlier and delivering the same piece to `from`, offsets inside buffers.
  Status Validate() const;
  // xxh3-64 of the binary form (plan_binary.h): ranks compare it to know they replay the same plan.
  uint64_t Digest() const;
};

// One contiguous copy of a step: offsets in the sender's and receiver's buffers (RankBuffer
// offsets included) and the position of the bytes in the piece's row-major order.
struct StepRun {
  uint64_t from_offset = 0;
  uint64_t to_offset = 0;
  uint64_t piece_offset = 0;
  uint64_t length = 0;
  friend bool operator==(const StepRun&, const StepRun&) = default;
};
// Visits the runs of `step` in piece order, split at chunk boundaries, so each run lies in chunk
// piece_offset / chunk_bytes. One walk over the step; O(runs). Offsets and lengths are of the
// wire bytes (a quantised tensor's piece: its e4m3 bytes, then its scales, into the receiver's
// scale area); an end that is packed (SenderEndPacked, ReceiverEndPacked) has its offset in the
// packed piece there (the sender's wire or landing area, the receiver's landing area) instead of
// in the rank's buffer.
Status ForEachStepRun(const Plan& plan, const PlanStep& step,
                      const std::function<void(const StepRun&)>& visit);

// A step that converts reads from the sender's wire area (a source converting) or its landing area
// of `after` (a relay forwarding the unconverted bytes).
bool SenderEndPacked(const PlanStep& step);
// A step that converts at the receiver lands the piece packed in the receiver's landing area.
bool ReceiverEndPacked(const PlanStep& step);

// One contiguous conversion of a converting step, between the converting rank's shard (the
// sender's for kConvertAtSender, the receiver's for kConvertAtReceiver) and the packed piece:
// `count` elements at byte `shard_offset` of the rank's buffer and at element `piece_element` of
// the piece.
struct ConvertRun {
  uint64_t shard_offset = 0;
  uint64_t piece_element = 0;
  uint64_t count = 0;
  friend bool operator==(const ConvertRun&, const ConvertRun&) = default;
};
// Visits the conversion runs of a converting step in piece order, split at chunk boundaries (chunk
// k's elements are those of wire bytes [k * chunk_bytes, (k + 1) * chunk_bytes)). Nothing for an
// identity step. For a quantising step the runs gather the piece's elements (QuantizedMatrixOf
// gives its shape); its chunks are of the quantised bytes, so the cuts mean nothing there.
Status ForEachConvertRun(const Plan& plan, const PlanStep& step,
                         const std::function<void(const ConvertRun&)>& visit);

}  // namespace weightport
