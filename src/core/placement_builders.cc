// Splits, name parsing, TP rules, the mesh engine and the single-axis shortcuts.
// The axis factories live in placement_axes.cc.
#include "weightport/core/placement_builders.h"

#include <algorithm>
#include <climits>
#include <functional>

namespace weightport {
namespace {

Status CheckSplit(int64_t extent, int parts) {
  if (parts < 1) return InvalidArgument("cannot split into " + std::to_string(parts) + " parts");
  if (extent < 0) return InvalidArgument("cannot split a negative extent " + std::to_string(extent));
  return Status::Ok();
}

// The N of "<word>.N." where <word> starts the name or follows a '.', or -1.
int64_t IndexAfter(std::string_view name, std::string_view word) {
  for (size_t pos = name.find(word); pos != std::string_view::npos; pos = name.find(word, pos + 1)) {
    if (pos != 0 && name[pos - 1] != '.') continue;
    size_t i = pos + word.size();
    int64_t n = 0;
    size_t digits = 0;
    while (i < name.size() && name[i] >= '0' && name[i] <= '9' && digits < 18) {
      n = n * 10 + (name[i] - '0');
      ++i;
      ++digits;
    }
    if (digits > 0 && i < name.size() && name[i] == '.') return n;
  }
  return -1;
}

}  // namespace

Result<std::vector<SplitRange>> EvenSplit(int64_t extent, int parts) {
  WP_RETURN_IF_ERROR(CheckSplit(extent, parts));
  std::vector<SplitRange> out;
  out.reserve(parts);
  const int64_t base = extent / parts, extra = extent % parts;
  int64_t start = 0;
  for (int i = 0; i < parts; ++i) {
    const int64_t len = base + (i < extra ? 1 : 0);
    out.push_back({start, len});
    start += len;
  }
  return out;
}

Result<std::vector<SplitRange>> ChunkSplit(int64_t extent, int parts) {
  WP_RETURN_IF_ERROR(CheckSplit(extent, parts));
  std::vector<SplitRange> out;
  out.reserve(parts);
  const int64_t chunk = extent / parts + (extent % parts != 0 ? 1 : 0);
  int64_t start = 0;
  for (int i = 0; i < parts; ++i) {
    const int64_t len = std::min(chunk, extent - start);
    out.push_back({start, len});
    start += len;
  }
  return out;
}

namespace {

Status CheckPart(int64_t extent, int parts, int index) {
  WP_RETURN_IF_ERROR(CheckSplit(extent, parts));
  if (index < 0 || index >= parts)
    return InvalidArgument("part " + std::to_string(index) + " of a split into " + std::to_string(parts));
  return Status::Ok();
}

}  // namespace

Result<SplitRange> EvenPart(int64_t extent, int parts, int index) {
  WP_RETURN_IF_ERROR(CheckPart(extent, parts, index));
  const int64_t base = extent / parts, extra = extent % parts;
  return SplitRange{index * base + std::min<int64_t>(index, extra), base + (index < extra ? 1 : 0)};
}

Result<SplitRange> ChunkPart(int64_t extent, int parts, int index) {
  WP_RETURN_IF_ERROR(CheckPart(extent, parts, index));
  const int64_t chunk = extent / parts + (extent % parts != 0 ? 1 : 0);
  const int64_t start = std::min(extent, chunk * index);
  return SplitRange{start, std::min(chunk, extent - start)};
}

bool GlobMatch(std::string_view pattern, std::string_view name) {
  size_t p = 0, n = 0, star = std::string_view::npos, resume = 0;
  while (n < name.size()) {
    if (p < pattern.size() && (pattern[p] == '?' || pattern[p] == name[n])) {
      ++p;
      ++n;
    } else if (p < pattern.size() && pattern[p] == '*') {
      star = p++;
      resume = n;
    } else if (star != std::string_view::npos) {  // let the last '*' swallow one more character
      p = star + 1;
      n = ++resume;
    } else {
      return false;
    }
  }
  while (p < pattern.size() && pattern[p] == '*') ++p;
  return p == pattern.size();
}

int64_t LayerIndex(std::string_view name) { return IndexAfter(name, "layers."); }
int64_t ExpertIndex(std::string_view name) { return IndexAfter(name, "experts."); }

std::vector<TpPattern> LlamaTpRules() {
  const TpRule column{TpKind::kColumn}, row{TpKind::kRow}, vocab{TpKind::kVocab}, repl{TpKind::kReplicated};
  return {
      {"*.q_proj.*", column},  {"*.k_proj.*", column}, {"*.v_proj.*", column}, {"*.gate_proj.*", column},
      {"*.up_proj.*", column}, {"*.o_proj.*", row},    {"*.down_proj.*", row}, {"*embed_tokens.*", vocab},
      {"lm_head.*", vocab},    {"*norm*", repl},       {"*.mlp.gate.*", repl},
  };
}

Result<TpRule> MatchTpRule(std::span<const TpPattern> rules, std::string_view tensor) {
  for (const TpPattern& r : rules)
    if (GlobMatch(r.glob, tensor)) return r.rule;
  return NotFound("tensor parallel: tensor '" + std::string(tensor) + "' matches no rule");
}

Result<Placement> BuildMesh(std::vector<TensorMeta> tensors, std::span<const MeshAxis> axes,
                            int rank_offset) {
  if (rank_offset < 0)
    return InvalidArgument("mesh: rank offset " + std::to_string(rank_offset) + " is negative");
  int64_t world = 1;
  for (const MeshAxis& a : axes) {
    if (a.size < 1) return InvalidArgument("mesh axis '" + a.name + "': size " + std::to_string(a.size));
    if (!a.bind) return InvalidArgument("mesh axis '" + a.name + "': no bind function");
    world *= a.size;
    if (world > kMaxMeshRanks)
      return InvalidArgument("mesh axis '" + a.name + "': size " + std::to_string(a.size) +
                             " makes the mesh " + std::to_string(world) + "+ ranks, over the limit of " +
                             std::to_string(kMaxMeshRanks));
    if (world > INT_MAX - static_cast<int64_t>(rank_offset))
      return InvalidArgument("mesh: more than " + std::to_string(INT_MAX) + " ranks");
  }
  WP_ASSIGN_OR_RETURN(Placement out, Placement::Make(std::move(tensors)));
  const Placement table = out;  // the tensors alone: what the axes bind to
  std::vector<ShardMap> maps;
  for (const MeshAxis& a : axes) {
    auto map = a.bind(table, a.size);
    if (!map.ok()) return map.status().WithContext("mesh axis '" + a.name + "'");
    maps.push_back(std::move(map).value());
  }
  std::vector<size_t> order;  // selecting axes first, then the rest innermost first
  for (size_t i = 0; i < axes.size(); ++i)
    if (axes[i].selects) order.push_back(i);
  for (size_t i = axes.size(); i-- > 0;)
    if (!axes[i].selects) order.push_back(i);
  std::vector<Shard> whole;
  for (const TensorMeta& t : table.tensors()) whole.push_back({t.name, Slice::Full(t.shape)});
  // Depth-first over the axes in `order`: what a coordinate holds after the first k axes depends on
  // those k coordinates alone, so each prefix is computed once (a 16 x 16 mesh maps 16 + 256
  // shard lists, not 256 full tables through both axes).
  std::vector<std::vector<Shard>> held_by_rank(world);
  std::vector<int> coord(axes.size(), 0);
  int64_t shards = 0;
  std::function<Status(size_t, const std::vector<Shard>&)> descend =
      [&](size_t depth, const std::vector<Shard>& held) -> Status {
    if (depth == order.size()) {
      int64_t rank = 0;
      for (size_t i = 0; i < axes.size(); ++i) rank = rank * axes[i].size + coord[i];
      shards += static_cast<int64_t>(held.size());
      if (shards > kMaxMeshShards)
        return InvalidArgument(std::to_string(world) + " ranks over " +
                               std::to_string(table.tensors().size()) + " tensors hold more than " +
                               std::to_string(kMaxMeshShards) + " shards (the limit)");
      held_by_rank[rank] = held;
      return Status::Ok();
    }
    const size_t a = order[depth];
    for (int c = 0; c < axes[a].size; ++c) {
      coord[a] = c;
      auto next = maps[a](held, c);
      if (!next.ok())
        return next.status().WithContext("mesh axis '" + axes[a].name + "' index " + std::to_string(c));
      WP_RETURN_IF_ERROR(descend(depth + 1, *next));
    }
    coord[a] = 0;
    return Status::Ok();
  };
  WP_RETURN_IF_ERROR(descend(0, whole));
  for (int64_t rank = 0; rank < world; ++rank) {
    const int id = static_cast<int>(rank) + rank_offset;
    out.AddRank(id);
    for (Shard& s : held_by_rank[rank])
      if (!s.slice.empty()) out.AddShard(id, std::move(s));
  }
  WP_RETURN_IF_ERROR(out.Validate());
  return out;
}

Result<Placement> Replicated(std::vector<TensorMeta> tensors, std::span<const int> ranks) {
  WP_ASSIGN_OR_RETURN(Placement p, Placement::Make(std::move(tensors)));
  for (int r : ranks) {
    if (p.HasRank(r)) return InvalidArgument("replicated: rank " + std::to_string(r) + " listed twice");
    p.AddRank(r);
    for (const TensorMeta& t : p.tensors())
      if (t.num_elements() > 0) p.AddShard(r, t.name, Slice::Full(t.shape));
  }
  WP_RETURN_IF_ERROR(p.Validate());
  return p;
}

Result<Placement> TensorParallel(std::vector<TensorMeta> tensors, int tp, std::vector<TpPattern> rules) {
  const MeshAxis axes[] = {TensorParallelAxis("tp", tp, std::move(rules))};
  return BuildMesh(std::move(tensors), axes);
}

Result<Placement> PipelineStages(std::vector<TensorMeta> tensors, int pp, PipelineOptions options) {
  const MeshAxis axes[] = {PipelineAxis("pp", pp, std::move(options))};
  return BuildMesh(std::move(tensors), axes);
}

Result<Placement> ExpertParallel(std::vector<TensorMeta> tensors, int ep, ExpertOptions options) {
  const MeshAxis axes[] = {ExpertParallelAxis("ep", ep, std::move(options))};
  return BuildMesh(std::move(tensors), axes);
}

Result<Placement> FsdpFlat(std::vector<TensorMeta> tensors, int world, FsdpFlatOptions options) {
  const MeshAxis axes[] = {FsdpFlatAxis("fsdp", world, options)};
  return BuildMesh(std::move(tensors), axes);
}

Result<Placement> Fsdp2(std::vector<TensorMeta> tensors, int world) {
  const MeshAxis axes[] = {Fsdp2Axis("fsdp", world)};
  return BuildMesh(std::move(tensors), axes);
}

}  // namespace weightport
