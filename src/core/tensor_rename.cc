#include "weightport/core/tensor_rename.h"

#include <cstddef>
#include <unordered_map>

namespace weightport {
namespace {

// Every segment of a name, empty ones included ("a..b": three).
std::vector<std::string> Split(std::string_view name) {
  std::vector<std::string> out;
  size_t start = 0;
  for (size_t dot; (dot = name.find('.', start)) != std::string_view::npos; start = dot + 1)
    out.emplace_back(name.substr(start, dot - start));
  out.emplace_back(name.substr(start));
  return out;
}

// The segments of one side of a rename: "" is none, a trailing '.' is dropped.
std::vector<std::string> Segments(std::string_view path) {
  if (path.ends_with('.')) path.remove_suffix(1);
  return path.empty() ? std::vector<std::string>{} : Split(path);
}

std::string JoinSegments(const std::vector<std::string>& segments) {
  std::string out;
  for (size_t i = 0; i < segments.size(); ++i) {
    if (i > 0) out += '.';
    out += segments[i];
  }
  return out;
}

bool MatchesAt(const std::vector<std::string>& parts, size_t at, const std::vector<std::string>& from) {
  if (parts.size() - at < from.size()) return false;
  for (size_t i = 0; i < from.size(); ++i)
    if (parts[at + i] != from[i]) return false;
  return true;
}

// One rename on a name's segments: at the start, or anywhere left to right without overlap.
std::vector<std::string> Apply(std::vector<std::string> parts, const TensorRename& r) {
  std::vector<std::string> out;
  if (!r.anywhere) {
    if (!MatchesAt(parts, 0, r.from)) return parts;
    out = r.to;
    out.insert(out.end(), parts.begin() + static_cast<ptrdiff_t>(r.from.size()), parts.end());
    return out;
  }
  for (size_t i = 0; i < parts.size();) {
    if (MatchesAt(parts, i, r.from)) {
      out.insert(out.end(), r.to.begin(), r.to.end());
      i += r.from.size();
    } else {
      out.push_back(std::move(parts[i++]));
    }
  }
  return out;
}

// The new name of every tensor, checked: none empty, no two the same.
Result<std::vector<std::string>> NewNames(const std::vector<TensorMeta>& tensors,
                                          std::span<const TensorRename> renames) {
  std::vector<std::string> names;
  std::unordered_map<std::string, const std::string*> origin;
  names.reserve(tensors.size());
  for (const TensorMeta& t : tensors) {
    std::string name = RenameTensor(t.name, renames);
    if (name.empty()) return InvalidArgument("tensor '" + t.name + "': the renames map it to an empty name");
    auto [it, fresh] = origin.emplace(name, &t.name);
    if (!fresh)
      return InvalidArgument("tensors '" + *it->second + "' and '" + t.name + "' are both renamed '" + name +
                             "'");
    names.push_back(std::move(name));
  }
  return names;
}

}  // namespace

Result<TensorRename> ParseTensorRename(std::string_view spec) {
  const size_t eq = spec.find('=');
  if (eq == std::string_view::npos)
    return InvalidArgument("rename '" + std::string(spec) +
                           "': expected FROM=TO, e.g. 'module.=' or '*._orig_mod='");
  TensorRename r;
  r.text = std::string(spec);
  std::string_view from = spec.substr(0, eq);
  r.anywhere = from.starts_with("*.");
  if (r.anywhere) from.remove_prefix(2);
  r.from = Segments(from);
  r.to = Segments(spec.substr(eq + 1));
  bool valid = !r.from.empty();
  for (const std::string& s : r.from) valid &= !s.empty() && s.find('*') == std::string::npos;
  if (!valid)
    return InvalidArgument("rename '" + r.text +
                           "': FROM is not a name prefix ('a.b', or '*.a.b' to match anywhere)");
  return r;
}

Result<std::vector<TensorRename>> ParseTensorRenames(std::span<const std::string> specs) {
  std::vector<TensorRename> out;
  for (const std::string& s : specs) {
    WP_ASSIGN_OR_RETURN(TensorRename r, ParseTensorRename(s));
    out.push_back(std::move(r));
  }
  return out;
}

std::string RenameTensor(std::string_view name, std::span<const TensorRename> renames) {
  if (renames.empty()) return std::string(name);
  std::vector<std::string> parts = Split(name);
  for (const TensorRename& r : renames) parts = Apply(std::move(parts), r);
  return JoinSegments(parts);
}

Result<std::vector<TensorMeta>> RenameTensors(std::vector<TensorMeta> tensors,
                                              std::span<const TensorRename> renames) {
  WP_ASSIGN_OR_RETURN(std::vector<std::string> names, NewNames(tensors, renames));
  for (size_t i = 0; i < tensors.size(); ++i) tensors[i].name = std::move(names[i]);
  return tensors;
}

Result<Placement> RenameTensors(const Placement& placement, std::span<const TensorRename> renames) {
  WP_ASSIGN_OR_RETURN(std::vector<TensorMeta> tensors, RenameTensors(placement.tensors(), renames));
  WP_ASSIGN_OR_RETURN(Placement out, Placement::Make(std::move(tensors)));
  for (int rank : placement.ranks()) {
    out.AddRank(rank);
    for (const Shard& s : placement.shards(rank))
      out.AddShard(rank, RenameTensor(s.tensor, renames), s.slice);
  }
  return out;
}

}  // namespace weightport
