// The mesh axes: replica, tensor, pipeline and expert parallelism, FSDP2 and FSDP1 (flat).
#include <map>
#include <optional>
#include <unordered_map>

#include "weightport/core/placement_builders.h"

namespace weightport {
namespace {

std::string Tensor(std::string_view name) { return "tensor '" + std::string(name) + "'"; }

// Looks up a held shard's tensor in the table the axis was bound to.
Result<const TensorMeta*> Meta(const Placement& table, const Shard& s) {
  const TensorMeta* t = table.FindTensor(s.tensor);
  if (!t) return NotFound(Tensor(s.tensor) + " is not in the tensor table");
  return t;
}

Result<Box> HeldBox(const Shard& s, std::string_view what) {
  if (!s.slice.is_box())
    return InvalidArgument(Tensor(s.tensor) + ": " + std::string(what) + " needs a box shard, got " +
                           s.slice.ToString());
  return s.slice.box();
}

// Part `index` of `size` of the shard under a TP rule; nullopt when that part is empty.
Result<std::optional<Shard>> TpSplit(Shard s, const TensorMeta& meta, const TpRule& rule, int index,
                                     int size) {
  size_t dim = 0;
  switch (rule.kind) {
    case TpKind::kReplicated:
      return std::optional<Shard>(std::move(s));
    case TpKind::kColumn:
    case TpKind::kVocab:
      dim = 0;
      break;
    case TpKind::kRow:
      dim = 1;
      break;
  }
  if (dim >= meta.shape.size()) return std::optional<Shard>(std::move(s));  // bias of a row split, scalar
  WP_ASSIGN_OR_RETURN(Box box, HeldBox(s, "tensor parallelism"));
  const int64_t g = rule.granule;
  if (g < 1 || box.length[dim] % g != 0)
    return InvalidArgument(Tensor(s.tensor) + ": dimension " + std::to_string(dim) + " length " +
                           std::to_string(box.length[dim]) + " is not a multiple of the granule " +
                           std::to_string(g));
  WP_ASSIGN_OR_RETURN(const SplitRange part, EvenPart(box.length[dim] / g, size, index));
  if (part.length == 0) return std::optional<Shard>();
  box.start[dim] += part.start * g;
  box.length[dim] = part.length * g;
  s.slice = std::move(box);
  return std::optional<Shard>(std::move(s));
}

// Rule per tensor of the table.
Result<std::unordered_map<std::string, TpRule>> BindTpRules(const Placement& table,
                                                            std::span<const TpPattern> rules,
                                                            bool skip_experts) {
  std::unordered_map<std::string, TpRule> out;
  for (const TensorMeta& t : table.tensors()) {
    if (skip_experts && ExpertIndex(t.name) >= 0) continue;
    WP_ASSIGN_OR_RETURN(out[t.name], MatchTpRule(rules, t.name));
  }
  return out;
}

}  // namespace

MeshAxis ReplicaAxis(std::string name, int size) {
  return {std::move(name), size, false, [](const Placement&, int) -> Result<ShardMap> {
            return ShardMap([](std::vector<Shard> held, int) -> Result<std::vector<Shard>> { return held; });
          }};
}

MeshAxis TensorParallelAxis(std::string name, int size, std::vector<TpPattern> rules) {
  return {std::move(name), size, false,
          [rules = std::move(rules)](const Placement& table, int size) -> Result<ShardMap> {
            WP_ASSIGN_OR_RETURN(auto bound, BindTpRules(table, rules, false));
            return ShardMap([&table, bound = std::move(bound), size](
                                std::vector<Shard> held, int index) -> Result<std::vector<Shard>> {
              std::vector<Shard> out;
              for (Shard& s : held) {
                WP_ASSIGN_OR_RETURN(const TensorMeta* meta, Meta(table, s));
                WP_ASSIGN_OR_RETURN(std::optional<Shard> part,
                                    TpSplit(std::move(s), *meta, bound.at(meta->name), index, size));
                if (part) out.push_back(std::move(*part));
              }
              return out;
            });
          }};
}

MeshAxis PipelineAxis(std::string name, int size, PipelineOptions options) {
  auto bind = [options = std::move(options)](const Placement& table, int size) -> Result<ShardMap> {
    int64_t layers = 0;
    for (const TensorMeta& t : table.tensors()) layers = std::max(layers, LayerIndex(t.name) + 1);
    std::vector<int64_t> per_stage = options.layers_per_stage;
    if (per_stage.empty()) {
      WP_ASSIGN_OR_RETURN(std::vector<SplitRange> split, EvenSplit(layers, size));
      for (const SplitRange& r : split) per_stage.push_back(r.length);
    }
    if (per_stage.size() != static_cast<size_t>(size))
      return InvalidArgument(std::to_string(per_stage.size()) + " stage sizes for " + std::to_string(size) +
                             " stages");
    std::vector<int> stage_of_layer;
    for (size_t s = 0; s < per_stage.size(); ++s) {
      if (per_stage[s] < 0 || per_stage[s] > layers)
        return InvalidArgument("bad stage size " + std::to_string(per_stage[s]));
      stage_of_layer.insert(stage_of_layer.end(), per_stage[s], static_cast<int>(s));
      if (stage_of_layer.size() > static_cast<size_t>(layers)) break;
    }
    if (stage_of_layer.size() != static_cast<size_t>(layers))
      return InvalidArgument("stage sizes do not add up to the " + std::to_string(layers) + " layers");
    auto any = [](const std::vector<std::string>& globs, std::string_view n) {
      for (const std::string& g : globs)
        if (GlobMatch(g, n)) return true;
      return false;
    };
    // Stages of each tensor: (a, b) with b == a or b the last stage.
    std::unordered_map<std::string, std::pair<int, int>> stages;
    for (const TensorMeta& t : table.tensors()) {
      const int64_t layer = LayerIndex(t.name);
      if (layer >= 0) {
        stages[t.name] = {stage_of_layer[layer], stage_of_layer[layer]};
        continue;
      }
      const bool first = any(options.first_stage, t.name), last = any(options.last_stage, t.name);
      if (!first && !last)
        return InvalidArgument(Tensor(t.name) + " is in no layer and matches no first/last stage pattern");
      stages[t.name] = {first ? 0 : size - 1, last ? size - 1 : 0};
    }
    return ShardMap(
        [stages = std::move(stages)](std::vector<Shard> held, int index) -> Result<std::vector<Shard>> {
          std::vector<Shard> out;
          for (Shard& s : held) {
            auto it = stages.find(s.tensor);
            if (it == stages.end()) return NotFound(Tensor(s.tensor) + " is not in the tensor table");
            if (it->second.first == index || it->second.second == index) out.push_back(std::move(s));
          }
          return out;
        });
  };
  return {std::move(name), size, true, std::move(bind)};
}

MeshAxis ExpertParallelAxis(std::string name, int size, ExpertOptions options) {
  auto bind = [options = std::move(options)](const Placement& table, int size) -> Result<ShardMap> {
    int64_t experts = 0;
    for (const TensorMeta& t : table.tensors()) experts = std::max(experts, ExpertIndex(t.name) + 1);
    std::vector<int> owner(experts);
    if (options.assignment == ExpertAssignment::kRoundRobin) {
      for (int64_t e = 0; e < experts; ++e) owner[e] = static_cast<int>(e % size);
    } else {
      WP_ASSIGN_OR_RETURN(std::vector<SplitRange> blocks, EvenSplit(experts, size));
      for (int r = 0; r < size; ++r)
        for (int64_t e = blocks[r].start; e < blocks[r].start + blocks[r].length; ++e) owner[e] = r;
    }
    std::unordered_map<std::string, TpRule> rules;
    if (!options.non_expert_tp.empty()) {
      WP_ASSIGN_OR_RETURN(rules, BindTpRules(table, options.non_expert_tp, true));
    }
    return ShardMap([&table, owner = std::move(owner), rules = std::move(rules), size](
                        std::vector<Shard> held, int index) -> Result<std::vector<Shard>> {
      std::vector<Shard> out;
      for (Shard& s : held) {
        const int64_t e = ExpertIndex(s.tensor);
        if (e >= 0) {
          if (owner[e] == index) out.push_back(std::move(s));
          continue;
        }
        if (rules.empty()) {
          out.push_back(std::move(s));
          continue;
        }
        WP_ASSIGN_OR_RETURN(const TensorMeta* meta, Meta(table, s));
        WP_ASSIGN_OR_RETURN(std::optional<Shard> part,
                            TpSplit(std::move(s), *meta, rules.at(meta->name), index, size));
        if (part) out.push_back(std::move(*part));
      }
      return out;
    });
  };
  return {std::move(name), size, false, std::move(bind)};
}

MeshAxis Fsdp2Axis(std::string name, int size) {
  return {std::move(name), size, false, [](const Placement& table, int size) -> Result<ShardMap> {
            return ShardMap([&table, size](std::vector<Shard> held, int index) -> Result<std::vector<Shard>> {
              std::vector<Shard> out;
              for (Shard& s : held) {
                WP_ASSIGN_OR_RETURN(const TensorMeta* meta, Meta(table, s));
                if (meta->shape.empty()) {  // scalars are replicated
                  out.push_back(std::move(s));
                  continue;
                }
                WP_ASSIGN_OR_RETURN(Box box, HeldBox(s, "FSDP2"));
                WP_ASSIGN_OR_RETURN(const SplitRange chunk, ChunkPart(box.length[0], size, index));
                if (chunk.length == 0) continue;
                box.start[0] += chunk.start;
                box.length[0] = chunk.length;
                out.push_back({std::move(s.tensor), Slice(std::move(box))});
              }
              return out;
            });
          }};
}

MeshAxis FsdpFlatAxis(std::string name, int size, FsdpFlatOptions options) {
  auto bind = [options](const Placement& table, int size) -> Result<ShardMap> {
    return ShardMap([&table, options, size](std::vector<Shard> held,
                                            int index) -> Result<std::vector<Shard>> {
      struct Unit {
        int64_t total = 0;   // elements in the unit's flat buffer (before padding)
        int64_t offset = 0;  // running position while mapping back to tensors
        const TensorMeta* first = nullptr;
      };
      std::map<int64_t, Unit> units;  // by layer index, -1 for everything else
      std::vector<const TensorMeta*> metas;
      for (const Shard& s : held) {
        WP_ASSIGN_OR_RETURN(const TensorMeta* meta, Meta(table, s));
        if (!(s.slice == Slice::Full(meta->shape)))
          return InvalidArgument(Tensor(s.tensor) +
                                 ": FSDP flat shards need whole tensors, this rank holds " +
                                 s.slice.ToString());
        Unit& u = units[options.unit_per_layer ? LayerIndex(meta->name) : -1];
        if (u.first && u.first->dtype != meta->dtype)
          return InvalidArgument("FSDP flat unit mixes dtypes: " + Tensor(meta->name) + " is " +
                                 std::string(DTypeName(meta->dtype)) + ", " + Tensor(u.first->name) + " is " +
                                 std::string(DTypeName(u.first->dtype)));
        if (!u.first) u.first = meta;
        if (__builtin_add_overflow(u.total, meta->num_elements(), &u.total))
          return InvalidArgument("FSDP flat unit overflows 64-bit element count at " + Tensor(meta->name));
        metas.push_back(meta);
      }
      std::vector<Shard> out;
      for (const TensorMeta* meta : metas) {
        Unit& u = units[options.unit_per_layer ? LayerIndex(meta->name) : -1];
        // Padded to a multiple of `size`; index i holds [i * per, (i + 1) * per) of the buffer.
        const int64_t per = u.total / size + (u.total % size != 0 ? 1 : 0);
        const int64_t lo = std::min<int64_t>(u.total, per * index);  // per * size < total + size
        const int64_t hi = std::min<int64_t>(u.total, lo + per);
        const int64_t t_lo = u.offset, t_hi = u.offset + meta->num_elements();
        u.offset = t_hi;
        const int64_t a = std::max(lo, t_lo), b = std::min(hi, t_hi);
        if (a < b) out.push_back({meta->name, Slice::MakeFlat(a - t_lo, b - a)});
      }
      return out;
    });
  };
  return {std::move(name), size, false, std::move(bind)};
}

}  // namespace weightport
