// Checkpoints: one safetensors file, or a directory of shards with or without an index.
#include "weightport/format/checkpoint.h"

#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <filesystem>
#include <optional>
#include <set>
#include <system_error>

#include <nlohmann/json.hpp>

#include "format/quote.h"
#include "weightport/core/json_util.h"

namespace weightport {
namespace {

namespace fs = std::filesystem;

using format_util::Quote;

// Shard names come from a file we did not write; keep them inside the checkpoint directory.
bool IsPlainFileName(std::string_view name) {
  return !name.empty() && name != "." && name != ".." && name.find('/') == std::string_view::npos &&
         name.find('\0') == std::string_view::npos;
}

// Every *.safetensors regular file in `dir`, sorted by name.
Result<std::vector<std::string>> ListShards(const std::string& dir) {
  std::error_code ec;
  std::vector<std::string> names;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    std::error_code type_ec;
    if (name.size() > 12 && name.ends_with(".safetensors") && it->is_regular_file(type_ec))
      names.push_back(name);
  }
  if (ec) return IoError("cannot list " + dir + ": " + ec.message());
  std::sort(names.begin(), names.end());
  if (names.empty())
    return NotFound(dir + ": no .safetensors files and no " + std::string(kShardIndexFileName));
  return names;
}

}  // namespace

nlohmann::json ShardIndex::ToJson() const {
  nlohmann::json meta = nlohmann::json::object();
  for (const auto& [key, value] : metadata) meta[key] = value;
  meta["total_size"] = total_size;
  nlohmann::json map = nlohmann::json::object();
  for (const auto& [tensor, file] : weight_map) map[tensor] = file;
  return {{"metadata", std::move(meta)}, {"weight_map", std::move(map)}};
}

Result<ShardIndex> ShardIndex::FromJson(const nlohmann::json& json, std::string_view file_name) {
  const std::string ctx(file_name);
  if (!json.is_object()) return InvalidArgument(ctx + ": shard index must be a JSON object");
  ShardIndex index;
  // "metadata" is optional; its values are kept as strings (non-strings as their JSON text).
  if (auto it = json.find("metadata"); it != json.end()) {
    if (!it->is_object()) return InvalidArgument(ctx + ": field 'metadata' must be an object");
    for (const auto& [key, value] : it->items())
      index.metadata[key] = value.is_string() ? value.get<std::string>() : value.dump();
    if (it->contains("total_size")) {
      WP_ASSIGN_OR_RETURN(index.total_size, json_util::GetU64(*it, "total_size", ctx + ": metadata"));
    }
  }
  WP_ASSIGN_OR_RETURN(const nlohmann::json* map, json_util::GetObject(json, "weight_map", ctx));
  for (const auto& [tensor, file] : map->items()) {
    if (!file.is_string())
      return InvalidArgument(ctx + ": weight_map entry of tensor " + Quote(tensor) +
                             " must be a file name string");
    const auto& name = file.get_ref<const std::string&>();
    if (!IsPlainFileName(name))
      return InvalidArgument(ctx + ": weight_map entry of tensor " + Quote(tensor) + " names " + Quote(name) +
                             ", not a plain file name in the checkpoint directory");
    index.weight_map.emplace(tensor, name);
  }
  return index;
}

Result<ShardIndex> ShardIndex::Read(const std::string& path) {
  WP_ASSIGN_OR_RETURN(nlohmann::json json, json_util::ParseFile(path));
  return FromJson(json, path);
}

Status ShardIndex::Write(const std::string& path) const { return json_util::WriteFile(path, ToJson()); }

std::string FirstMissingShard(const std::vector<std::string>& names) {
  const std::set<std::string> have(names.begin(), names.end());
  std::set<std::string> checked;  // "PREFIX|width|N" groups already walked
  for (const std::string& name : names) {
    constexpr std::string_view kExt = ".safetensors";
    if (!name.ends_with(kExt)) continue;
    const std::string stem = name.substr(0, name.size() - kExt.size());
    const size_t of = stem.rfind("-of-");
    if (of == std::string::npos) continue;
    const std::string count_text = stem.substr(of + 4);
    const size_t dash = stem.rfind('-', of == 0 ? 0 : of - 1);
    if (dash == std::string::npos || dash >= of) continue;
    const std::string index_text = stem.substr(dash + 1, of - dash - 1);
    auto all_digits = [](const std::string& t) {
      return !t.empty() && t.size() <= 9 &&
             std::all_of(t.begin(), t.end(), [](char c) { return c >= '0' && c <= '9'; });
    };
    if (!all_digits(count_text) || !all_digits(index_text)) continue;
    const std::string prefix = stem.substr(0, dash + 1);
    if (!checked.insert(prefix + "|" + std::to_string(index_text.size()) + "|" + count_text).second) continue;
    const long count = std::stol(count_text);
    // The walk stops at the first gap, so it is bounded by the names given, whatever N claims.
    for (long i = 1; i <= count; ++i) {
      std::string number = std::to_string(i);
      if (number.size() < index_text.size()) number.insert(0, index_text.size() - number.size(), '0');
      const std::string sibling = prefix + number + "-of-" + count_text + std::string(kExt);
      if (!have.count(sibling)) return sibling;
    }
  }
  return "";
}

std::string ShardFileName(int index, int count) {
  if (count <= 1) return "model.safetensors";
  char buf[64];
  std::snprintf(buf, sizeof(buf), "model-%05d-of-%05d.safetensors", index, count);
  return buf;
}

Result<Checkpoint> Checkpoint::Open(const std::string& path) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) return ErrnoError("cannot open checkpoint " + path, errno);
  Checkpoint ckpt;
  ckpt.path_ = path;
  std::vector<std::string> files;  // paths
  std::optional<ShardIndex> index;
  std::string index_path;
  if (S_ISDIR(st.st_mode)) {
    index_path = (fs::path(path) / kShardIndexFileName).string();
    std::error_code ec;
    std::vector<std::string> names;
    if (fs::exists(index_path, ec)) {
      WP_ASSIGN_OR_RETURN(index, ShardIndex::Read(index_path));
      std::set<std::string> listed;
      for (const auto& [tensor, file] : index->weight_map) listed.insert(file);
      for (const auto& name : listed) {
        std::error_code exists_ec;
        if (!fs::exists(fs::path(path) / name, exists_ec))
          return NotFound(path + ": checkpoint is incomplete: " + name + " is missing (" +
                          std::string(kShardIndexFileName) + " lists tensors in it)");
      }
      names.assign(listed.begin(), listed.end());
    } else {
      WP_ASSIGN_OR_RETURN(names, ListShards(path));
    }
    if (const std::string missing = FirstMissingShard(names); !missing.empty())
      return NotFound(path + ": checkpoint is incomplete: " + missing + " is missing (the shard names " +
                      (index ? "in " + std::string(kShardIndexFileName) + " " : std::string()) +
                      "say how many there are)");
    for (const auto& name : names) files.push_back((fs::path(path) / name).string());
  } else {
    files.push_back(path);
  }

  ckpt.files_.reserve(files.size());
  for (const auto& file : files) {
    WP_ASSIGN_OR_RETURN(SafetensorsFile f, SafetensorsFile::Open(file));
    ckpt.files_.push_back(std::move(f));
  }
  // Pointers into files_ are taken only once files_ is complete.
  for (size_t i = 0; i < ckpt.files_.size(); ++i) {
    const SafetensorsFile& f = ckpt.files_[i];
    for (const auto& t : f.tensors()) {
      auto [it, inserted] = ckpt.index_.emplace(t.meta.name, ckpt.tensors_.size());
      if (!inserted)
        return InvalidArgument(path + ": tensor " + Quote(t.meta.name) + " is in two shards: " +
                               ckpt.files_[ckpt.tensors_[it->second].file].path() + " and " + f.path());
      ckpt.tensors_.push_back({&t, i});
      ckpt.total_bytes_ += t.meta.bytes;
    }
  }
  if (index) {
    // Both ways: every index entry is in its file, and every tensor of a shard is in the index.
    for (const auto& [tensor, file] : index->weight_map) {
      const CheckpointTensor* t = ckpt.Find(tensor);
      if (t == nullptr || fs::path(ckpt.files_[t->file].path()).filename() != file)
        return NotFound(index_path + ": tensor " + Quote(tensor) + " is listed in " + file +
                        " but that file lacks it");
    }
    for (const auto& t : ckpt.tensors_) {
      if (!index->weight_map.count(t.meta().name))
        return InvalidArgument(ckpt.files_[t.file].path() + ": tensor " + Quote(t.meta().name) +
                               " is not listed in " + index_path);
    }
  }
  return ckpt;
}

const std::map<std::string, std::string>& Checkpoint::metadata() const {
  static const std::map<std::string, std::string> kEmpty;
  return files_.empty() ? kEmpty : files_.front().metadata();
}

const CheckpointTensor* Checkpoint::Find(std::string_view name) const {
  auto it = index_.find(std::string(name));
  return it == index_.end() ? nullptr : &tensors_[it->second];
}

std::span<const std::byte> Checkpoint::Data(const CheckpointTensor& tensor) const {
  if (tensor.file >= files_.size()) return {};
  return files_[tensor.file].Data(*tensor.entry);
}

Result<Manifest> Checkpoint::BuildManifest(uint64_t version, uint64_t chunk_size) const {
  std::vector<TensorBytes> spans;
  spans.reserve(tensors_.size());
  for (const auto& t : tensors_) spans.push_back({t.meta(), Data(t)});
  auto manifest = Manifest::Build(version, spans, chunk_size);
  if (!manifest.ok()) return manifest.status().WithContext(path_);
  return manifest;
}

}  // namespace weightport
