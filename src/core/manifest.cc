#include "weightport/core/manifest.h"

#include <nlohmann/json.hpp>

#include "weightport/core/hash.h"
#include "weightport/core/json_util.h"

namespace weightport {

Status Manifest::Append(ManifestTensor tensor) {
  if (index_.count(tensor.meta.name))
    return InvalidArgument("manifest: duplicate tensor '" + tensor.meta.name + "'");
  tensor.offset = total_bytes_;
  total_bytes_ += tensor.meta.bytes;
  index_.emplace(tensor.meta.name, tensors_.size());
  tensors_.push_back(std::move(tensor));
  return Status::Ok();
}

Result<Manifest> Manifest::Build(uint64_t version, std::span<const TensorBytes> tensors,
                                 uint64_t chunk_size) {
  if (chunk_size == 0) return InvalidArgument("manifest: chunk size must be positive");
  Manifest m;
  m.version_ = version;
  m.chunk_size_ = chunk_size;
  m.tensors_.reserve(tensors.size());
  for (const auto& t : tensors) {
    if (t.data.size() != t.meta.bytes)
      return InvalidArgument("manifest: tensor '" + t.meta.name + "' has " + std::to_string(t.data.size()) +
                             " bytes of data, its shape and dtype need " + std::to_string(t.meta.bytes));
    ManifestTensor mt;
    mt.meta = t.meta;
    mt.chunk_hashes = ChunkHashes(t.data, chunk_size, mt.hash);
    WP_RETURN_IF_ERROR(m.Append(std::move(mt)));
  }
  return m;
}

Result<Manifest> Manifest::FromMetas(uint64_t version, std::span<const TensorMeta> tensors,
                                     uint64_t chunk_size) {
  if (chunk_size == 0) return InvalidArgument("manifest: chunk size must be positive");
  Manifest m;
  m.version_ = version;
  m.chunk_size_ = chunk_size;
  for (const auto& meta : tensors) {
    ManifestTensor mt;
    mt.meta = meta;
    mt.chunk_hashes.assign((meta.bytes + chunk_size - 1) / chunk_size, 0);
    WP_RETURN_IF_ERROR(m.Append(std::move(mt)));
  }
  return m;
}

size_t Manifest::num_chunks() const {
  size_t n = 0;
  for (const auto& t : tensors_) n += t.chunk_hashes.size();
  return n;
}

const ManifestTensor* Manifest::Find(std::string_view name) const {
  auto it = index_.find(std::string(name));
  return it == index_.end() ? nullptr : &tensors_[it->second];
}

ByteRange Manifest::ChunkRange(const ManifestTensor& t, size_t index) const {
  uint64_t begin = static_cast<uint64_t>(index) * chunk_size_;
  if (begin >= t.meta.bytes) return {t.meta.bytes, 0};
  return {begin, std::min(chunk_size_, t.meta.bytes - begin)};
}

std::vector<size_t> Manifest::ChangedChunks(const ManifestTensor& t, const Manifest& older) const {
  std::vector<size_t> changed;
  const ManifestTensor* old = older.Find(t.meta.name);
  const bool comparable = old && older.chunk_size_ == chunk_size_ && old->meta.dtype == t.meta.dtype &&
                          old->meta.shape == t.meta.shape;
  for (size_t i = 0; i < t.chunk_hashes.size(); ++i)
    if (!comparable || old->chunk_hashes[i] != t.chunk_hashes[i]) changed.push_back(i);
  return changed;
}

nlohmann::json Manifest::ToJson() const {
  nlohmann::json tensors = nlohmann::json::array();
  for (const auto& t : tensors_) {
    nlohmann::json chunks = nlohmann::json::array();
    for (uint64_t h : t.chunk_hashes) chunks.push_back(HashToHex(h));
    tensors.push_back({{"name", t.meta.name},
                       {"dtype", std::string(DTypeName(t.meta.dtype))},
                       {"shape", t.meta.shape},
                       {"bytes", t.meta.bytes},
                       {"offset", t.offset},
                       {"xxh3", HashToHex(t.hash)},
                       {"chunk_xxh3", std::move(chunks)}});
  }
  return {{"version", version_},
          {"chunk_size", chunk_size_},
          {"total_bytes", total_bytes_},
          {"tensors", std::move(tensors)}};
}

Result<Manifest> Manifest::FromJsonText(std::string_view text, std::string_view what) {
  WP_ASSIGN_OR_RETURN(nlohmann::json json, json_util::Parse(text, what));
  return FromJson(json);
}

Result<Manifest> Manifest::FromJson(const nlohmann::json& json) {
  using namespace json_util;
  Manifest m;
  WP_ASSIGN_OR_RETURN(m.version_, GetU64(json, "version", "manifest"));
  WP_ASSIGN_OR_RETURN(m.chunk_size_, GetU64(json, "chunk_size", "manifest"));
  if (m.chunk_size_ == 0) return InvalidArgument("manifest: chunk_size must be positive");
  WP_ASSIGN_OR_RETURN(uint64_t total, GetU64(json, "total_bytes", "manifest"));
  WP_ASSIGN_OR_RETURN(const Json* tensors, GetArray(json, "tensors", "manifest"));
  for (size_t i = 0; i < tensors->size(); ++i) {
    const Json& tj = (*tensors)[i];
    std::string ctx = "manifest: tensors[" + std::to_string(i) + "]";
    WP_ASSIGN_OR_RETURN(std::string name, GetString(tj, "name", ctx));
    ctx = "manifest: tensor '" + name + "'";
    WP_ASSIGN_OR_RETURN(std::string dtype_name, GetString(tj, "dtype", ctx));
    auto dtype = ParseDTypeName(dtype_name);
    if (!dtype.ok()) return dtype.status().WithContext(ctx);
    WP_ASSIGN_OR_RETURN(const Json* shape_json, Field(tj, "shape", ctx));
    WP_ASSIGN_OR_RETURN(Shape shape, AsI64Array(*shape_json, ctx + ": shape"));
    WP_ASSIGN_OR_RETURN(TensorMeta meta, TensorMeta::Make(name, *dtype, std::move(shape)));
    WP_ASSIGN_OR_RETURN(uint64_t bytes, GetU64(tj, "bytes", ctx));
    if (bytes != meta.bytes)
      return InvalidArgument(ctx + ": bytes " + std::to_string(bytes) + " != shape x dtype size " +
                             std::to_string(meta.bytes));
    WP_ASSIGN_OR_RETURN(uint64_t offset, GetU64(tj, "offset", ctx));
    if (offset != m.total_bytes_)
      return InvalidArgument(ctx + ": offset " + std::to_string(offset) + ", expected " +
                             std::to_string(m.total_bytes_));
    ManifestTensor mt;
    mt.meta = std::move(meta);
    WP_ASSIGN_OR_RETURN(const Json* hash, Field(tj, "xxh3", ctx));
    WP_ASSIGN_OR_RETURN(mt.hash, ParseHexU64(*hash, ctx + ": xxh3"));
    WP_ASSIGN_OR_RETURN(const Json* chunks, GetArray(tj, "chunk_xxh3", ctx));
    const uint64_t want = (mt.meta.bytes + m.chunk_size_ - 1) / m.chunk_size_;
    if (chunks->size() != want)
      return InvalidArgument(ctx + ": " + std::to_string(chunks->size()) + " chunk hashes, expected " +
                             std::to_string(want));
    for (size_t c = 0; c < chunks->size(); ++c) {
      WP_ASSIGN_OR_RETURN(uint64_t h,
                          ParseHexU64((*chunks)[c], ctx + ": chunk_xxh3[" + std::to_string(c) + "]"));
      mt.chunk_hashes.push_back(h);
    }
    WP_RETURN_IF_ERROR(m.Append(std::move(mt)));
  }
  if (total != m.total_bytes_)
    return InvalidArgument("manifest: total_bytes " + std::to_string(total) + " != sum of tensors " +
                           std::to_string(m.total_bytes_));
  return m;
}

}  // namespace weightport
