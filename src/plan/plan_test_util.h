// Test helpers for plans: a byte-level run of a plan in one address space, to check that it
// delivers exactly the destination shards' bytes.
#pragma once

#include <cstdint>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "weightport/core/dtype.h"
#include "weightport/kernels/convert.h"
#include "weightport/plan/plan.h"
#include "weightport/plan/quantized.h"

namespace weightport::plan_test {

// The byte at position `b` of element `flat` of tensor `t`: distinct across tensors and elements.
inline std::byte ElementByte(uint32_t t, int64_t flat, uint64_t b) {
  uint64_t x =
      (static_cast<uint64_t>(t) << 40) ^ (static_cast<uint64_t>(flat) * 0x9E3779B97F4A7C15ull) ^ (b << 56);
  x ^= x >> 29;
  x *= 0xBF58476D1CE4E5B9ull;
  x ^= x >> 32;
  return static_cast<std::byte>(x & 0xff);
}

// Calls visit(flat index) for every element of `slice` in its packed (row-major) order.
template <typename Visit>
void ForEachElement(const Slice& slice, const Shape& shape, Visit visit) {
  if (slice.is_flat()) {
    for (int64_t i = 0; i < slice.flat().length; ++i) visit(slice.flat().start + i);
    return;
  }
  const Box& box = slice.box();
  if (box.num_elements() == 0) return;
  std::vector<int64_t> idx(box.rank(), 0);
  while (true) {
    int64_t flat = 0;
    for (size_t d = 0; d < box.rank(); ++d) flat = flat * shape[d] + box.start[d] + idx[d];
    visit(flat);
    size_t d = box.rank();
    while (d > 0 && ++idx[d - 1] == box.length[d - 1]) idx[--d] = 0;
    if (d == 0) return;
  }
}

// The bytes of element `flat` of tensor `t` as the destinations store it: the source's bytes
// (ElementByte) converted to the destination dtype.
inline void DestinationElement(const Plan& plan, uint32_t t, int64_t flat, std::byte* out) {
  const DType from = plan.tensors[t].dtype, to = plan.destination_dtypes[t];
  std::byte in[8];
  for (uint64_t b = 0; b < DTypeSize(from); ++b) in[b] = ElementByte(t, flat, b);
  if (!kernels::Convert(from, to, in, out, 1).ok()) std::memset(out, 0xee, DTypeSize(to));
}

// `values` (a slice of tensor `t` in its source dtype, row-major) quantised as one matrix: the e4m3
// bytes at `out`, the scales at `scales_at`. False when the slice has no block layout.
inline bool QuantizeSlice(const TensorMeta& t, const Slice& slice, kernels::Fp8Scaling scaling,
                          const std::vector<std::byte>& values, std::byte* out, std::byte* scales_at) {
  const Result<QuantizedMatrix> m = QuantizedMatrixOf(slice, t.shape, scaling);
  if (!m.ok()) return false;
  std::vector<float> scales(m->scales);
  if (!kernels::QuantizeE4m3(t.dtype, values.data(), m->rows, m->cols, scaling,
                             reinterpret_cast<uint8_t*>(out), scales.data())
           .ok())
    return false;
  std::memcpy(scales_at, scales.data(), scales.size() * 4);
  return true;
}

// A destination shard of a quantised tensor (quantized.h): its source elements gathered, quantised
// as one matrix: e4m3 bytes, then the scales at StoredScaleOffset.
inline void FillQuantizedShard(const Plan& plan, const PlannedShard& s, std::byte* out) {
  const TensorMeta& t = plan.tensors[s.tensor];
  const uint64_t es = DTypeSize(t.dtype);
  std::vector<std::byte> values;
  ForEachElement(s.slice, t.shape, [&](int64_t flat) {
    for (uint64_t b = 0; b < es; ++b) values.push_back(ElementByte(s.tensor, flat, b));
  });
  if (!QuantizeSlice(t, s.slice, plan.Fp8ScalingOf(s.tensor), values, out,
                     out + StoredScaleOffset(s.slice.num_elements())))
    std::memset(out, 0xee, s.bytes);
}

// A quantising step's piece as its source publishes it: gathered from the source's shard (`in`),
// quantised, the scales after the e4m3 bytes. Empty when it fails.
inline std::vector<std::byte> QuantizedPiece(const Plan& plan, const PlanStep& step, const std::byte* in) {
  const TensorMeta& t = plan.tensors[step.tensor];
  const uint64_t es = DTypeSize(t.dtype);
  std::vector<std::byte> values(static_cast<size_t>(step.piece.num_elements()) * es);
  Status st = ForEachConvertRun(plan, step, [&](const ConvertRun& r) {
    std::memcpy(values.data() + r.piece_element * es, in + r.shard_offset, r.count * es);
  });
  std::vector<std::byte> out(step.bytes);
  const uint64_t e4m3 = static_cast<uint64_t>(step.piece.num_elements());
  if (!st.ok() ||
      !QuantizeSlice(t, step.piece, plan.Fp8ScalingOf(step.tensor), values, out.data(), out.data() + e4m3))
    return {};
  return out;
}

// A buffer laid out as `buffer` says, each shard filled with its tensor's bytes as that side
// stores them.
inline std::vector<std::byte> FilledBuffer(const Plan& plan, const RankBuffer& buffer) {
  std::vector<std::byte> out(buffer.bytes, std::byte{0});
  const bool source = buffer.endpoint.side == PlanSide::kSource;
  for (const PlannedShard& s : buffer.shards) {
    const TensorMeta& t = plan.tensors[s.tensor];
    if (!source && plan.Quantized(s.tensor)) {
      FillQuantizedShard(plan, s, out.data() + s.offset);
      continue;
    }
    const uint64_t es = DTypeSize(source ? t.dtype : plan.destination_dtypes[s.tensor]);
    uint64_t at = s.offset;
    ForEachElement(s.slice, t.shape, [&](int64_t flat) {
      if (source) {
        for (uint64_t b = 0; b < es; ++b) out[at + b] = ElementByte(s.tensor, flat, b);
      } else {
        DestinationElement(plan, s.tensor, flat, out.data() + at);
      }
      at += es;
    });
  }
  return out;
}

// Runs every step in order with memcpy and kernels::Convert as the engine does (a source
// converting fills a wire area; a receiver converting lands the piece and converts it, or quantises
// the whole shard once every piece of it landed; a relay reads what an earlier step wrote) and checks each
// destination buffer against FilledBuffer, and that no destination byte is written twice. Returns "" or a
// description of the first problem.
inline std::string RunPlanInMemory(const Plan& plan) {
  std::vector<std::vector<std::byte>> src, dst;
  std::vector<std::vector<uint8_t>> writes;
  std::map<uint32_t, std::vector<std::byte>> landing;  // step id -> its receiver's landing area
  // (dst buffer, shard) -> the steps landing there to be quantised together
  std::map<std::pair<size_t, uint32_t>, std::vector<uint32_t>> landed;
  for (const RankBuffer& b : plan.sources) src.push_back(FilledBuffer(plan, b));
  for (const RankBuffer& b : plan.destinations) {
    dst.emplace_back(b.bytes, std::byte{0});
    writes.emplace_back(b.bytes, 0);
  }
  std::string problem;
  auto note = [&](const PlanStep& step, const std::string& what) {
    if (problem.empty()) problem = "step " + std::to_string(step.id) + ": " + what;
  };
  for (const PlanStep& step : plan.steps) {
    const RankBuffer* from = plan.Buffer(step.from);
    const RankBuffer* to = plan.Buffer({PlanSide::kDestination, step.to_rank});
    const size_t out_index = to - plan.destinations.data();
    const uint64_t wire = DTypeSize(plan.WireDType(step));
    const DType src_dtype = plan.tensors[step.tensor].dtype, dst_dtype = plan.destination_dtypes[step.tensor];
    const std::vector<std::byte>* in = step.from.side == PlanSide::kSource
                                           ? &src[from - plan.sources.data()]
                                           : &dst[from - plan.destinations.data()];
    std::vector<std::byte> wire_area;
    if (step.transform == TransformKind::kConvertAtSender && plan.Quantized(step.tensor)) {
      wire_area = QuantizedPiece(plan, step, in->data());
      if (wire_area.empty()) note(step, "quantising at the sender failed");
      in = &wire_area;
    } else if (step.transform == TransformKind::kConvertAtSender) {  // the source's Publish
      wire_area.resize(step.bytes);
      Status st = ForEachConvertRun(plan, step, [&](const ConvertRun& r) {
        if (!kernels::Convert(src_dtype, dst_dtype, in->data() + r.shard_offset,
                              wire_area.data() + r.piece_element * wire, r.count)
                 .ok())
          note(step, "conversion at the sender failed");
      });
      if (!st.ok()) return st.ToString();
      in = &wire_area;
    } else if (SenderEndPacked(step)) {
      in = &landing[static_cast<uint32_t>(step.after)];
    }
    std::vector<std::byte>& out = ReceiverEndPacked(step) ? landing[step.id] : dst[out_index];
    if (ReceiverEndPacked(step)) out.assign(step.bytes, std::byte{0});
    uint64_t moved = 0, expect_piece_offset = 0;
    Status st = ForEachStepRun(plan, step, [&](const StepRun& run) {
      if (run.piece_offset != expect_piece_offset) note(step, "runs out of piece order");
      if ((run.piece_offset % plan.options.chunk_bytes) + run.length > plan.options.chunk_bytes)
        note(step, "a run crosses a chunk boundary");
      if (run.from_offset + run.length > in->size() || run.to_offset + run.length > out.size())
        return note(step, "a run leaves its buffer");
      expect_piece_offset += run.length;
      std::memcpy(out.data() + run.to_offset, in->data() + run.from_offset, run.length);
      if (!ReceiverEndPacked(step))
        for (uint64_t i = 0; i < run.length; ++i)
          if (writes[out_index][run.to_offset + i]++) note(step, "writes a byte written before");
      moved += run.length;
    });
    if (!st.ok()) return st.ToString();
    if (moved != step.bytes) note(step, "moved the wrong count");
    if (ReceiverEndPacked(step) && plan.Quantized(step.tensor)) {  // quantised once all pieces landed
      landed[{out_index, step.to_shard}].push_back(step.id);
    } else if (ReceiverEndPacked(step)) {  // the receiver converts its landing area into its shard
      const uint64_t es = DTypeSize(dst_dtype);
      st = ForEachConvertRun(plan, step, [&](const ConvertRun& r) {
        if (!kernels::Convert(src_dtype, dst_dtype, out.data() + r.piece_element * wire,
                              dst[out_index].data() + r.shard_offset, r.count)
                 .ok())
          note(step, "conversion at the receiver failed");
        for (uint64_t i = 0; i < r.count * es; ++i)
          if (writes[out_index][r.shard_offset + i]++) note(step, "writes a byte written before");
      });
      if (!st.ok()) return st.ToString();
    }
    if (!problem.empty()) return problem;
  }
  for (const auto& [at, steps] : landed) {  // each receiver quantises a whole shard from its pieces
    const PlannedShard& shard = plan.destinations[at.first].shards[at.second];
    const TensorMeta& t = plan.tensors[shard.tensor];
    const uint64_t es = DTypeSize(t.dtype);
    std::vector<std::byte> values(static_cast<size_t>(shard.slice.num_elements()) * es);
    for (uint32_t id : steps) {
      Status st = ForEachConvertRun(plan, plan.steps[id], [&](const ConvertRun& r) {
        std::memcpy(values.data() + (r.shard_offset - shard.offset) * es,
                    landing[id].data() + r.piece_element * es, r.count * es);
      });
      if (!st.ok()) return st.ToString();
    }
    std::byte* out = dst[at.first].data() + shard.offset;
    const uint64_t scale_at = StoredScaleOffset(shard.slice.num_elements());
    if (!QuantizeSlice(t, shard.slice, plan.Fp8ScalingOf(shard.tensor), values, out, out + scale_at))
      return "quantising dst shard of tensor '" + t.name + "' failed";
    for (uint64_t i = 0; i < shard.bytes; ++i)
      if (i < static_cast<uint64_t>(shard.slice.num_elements()) || i >= scale_at)
        ++writes[at.first][shard.offset + i];
  }
  for (size_t b = 0; b < plan.destinations.size(); ++b) {
    const std::vector<std::byte> want = FilledBuffer(plan, plan.destinations[b]);
    for (const PlannedShard& s : plan.destinations[b].shards)
      for (uint64_t i = s.offset; i < s.offset + s.bytes; ++i) {
        const uint64_t elements = static_cast<uint64_t>(s.slice.num_elements());
        if (plan.Quantized(s.tensor) && i - s.offset >= elements &&
            i - s.offset < StoredScaleOffset(elements))
          continue;  // the padding before the scales
        if (dst[b][i] != want[i] || writes[b][i] != 1)
          return "dst rank " + std::to_string(plan.destinations[b].endpoint.rank) + " tensor '" +
                 plan.tensors[s.tensor].name + "' byte " + std::to_string(i - s.offset) +
                 (writes[b][i] != 1 ? " written " + std::to_string(writes[b][i]) + " times" : " differs");
      }
  }
  return "";
}

}  // namespace weightport::plan_test
