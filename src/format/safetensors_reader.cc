// Strict safetensors header parsing (rules of the reference implementation, plus duplicate-key
// detection) and the read-only mmap of a whole file.
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "format/quote.h"
#include "safetensors_header_json.h"
#include "weightport/core/json_util.h"
#include "weightport/format/safetensors_reader.h"

namespace weightport {
namespace {

using json_util::Json;

constexpr std::string_view kMetadataKey = "__metadata__";
// A valid header nests three levels (object -> entry -> shape); anything much deeper is refused
// before it is built.
constexpr size_t kMaxJsonDepth = 32;

using format_util::Quote;

std::string OffsetsToString(const ByteRange& r) {
  return "[" + std::to_string(r.offset) + ", " + std::to_string(r.end()) + "]";
}

Result<std::map<std::string, std::string>> ParseMetadata(const Json& j, const std::string& ctx) {
  if (!j.is_object()) return InvalidArgument(ctx + ": __metadata__ must be an object of string -> string");
  std::map<std::string, std::string> out;
  for (const auto& [key, value] : j.items()) {
    if (!value.is_string())
      return InvalidArgument(ctx + ": __metadata__ value of " + Quote(key) + " must be a string, not " +
                             value.type_name());
    out.emplace(key, value.get<std::string>());
  }
  return out;
}

Result<SafetensorsTensor> ParseEntry(const std::string& name, const Json& entry, const std::string& file) {
  const std::string ctx = file + ": tensor " + Quote(name);
  if (!entry.is_object())
    return InvalidArgument(ctx + ": entry must be an object, not " + std::string(entry.type_name()));
  // Fields other than dtype/shape/data_offsets are ignored, as the reference does.
  WP_ASSIGN_OR_RETURN(std::string dtype_name, json_util::GetString(entry, "dtype", ctx));
  auto dtype = ParseSafetensorsDType(dtype_name);
  if (!dtype.ok()) return dtype.status().WithContext(ctx);
  WP_ASSIGN_OR_RETURN(const Json* shape_json, json_util::GetArray(entry, "shape", ctx));
  WP_ASSIGN_OR_RETURN(Shape shape, json_util::AsI64Array(*shape_json, ctx + ": shape"));
  WP_ASSIGN_OR_RETURN(const Json* offsets_json, json_util::GetArray(entry, "data_offsets", ctx));
  if (offsets_json->size() != 2)
    return InvalidArgument(ctx + ": data_offsets must be [begin, end], got " +
                           std::to_string(offsets_json->size()) + " elements");
  WP_ASSIGN_OR_RETURN(std::vector<uint64_t> offsets,
                      json_util::AsU64Array(*offsets_json, ctx + ": data_offsets"));
  if (offsets[0] > offsets[1])
    return InvalidArgument(ctx + ": data_offsets [" + std::to_string(offsets[0]) + ", " +
                           std::to_string(offsets[1]) + "] begin after end");
  auto meta = TensorMeta::Make(name, *dtype, std::move(shape));
  if (!meta.ok()) return meta.status().WithContext(file);
  SafetensorsTensor t{std::move(*meta), ByteRange{offsets[0], offsets[1] - offsets[0]}};
  if (t.meta.bytes != t.data.length)
    return InvalidArgument(ctx + ": shape " + ShapeToString(t.meta.shape) + " x " + dtype_name + " = " +
                           std::to_string(t.meta.bytes) + " bytes but data_offsets span " +
                           std::to_string(t.data.length));
  return t;
}

// The reference requires the tensors, sorted by offset, to tile the data area exactly.
Status CheckTiling(const std::vector<SafetensorsTensor>& tensors, uint64_t data_size,
                   const std::string& file) {
  std::vector<const SafetensorsTensor*> sorted;
  sorted.reserve(tensors.size());
  for (const auto& t : tensors) {
    if (t.data.end() > data_size)
      return InvalidArgument(file + ": tensor " + Quote(t.meta.name) + ": data_offsets " +
                             OffsetsToString(t.data) + " extend past the data area of " +
                             std::to_string(data_size) + " bytes");
    sorted.push_back(&t);
  }
  std::stable_sort(sorted.begin(), sorted.end(), [](const auto* a, const auto* b) {
    return std::pair(a->data.offset, a->data.end()) < std::pair(b->data.offset, b->data.end());
  });
  uint64_t end = 0;
  const SafetensorsTensor* prev = nullptr;
  for (const auto* t : sorted) {
    if (t->data.offset < end)
      return InvalidArgument(file + ": tensor " + Quote(t->meta.name) + " data_offsets " +
                             OffsetsToString(t->data) + " overlap tensor " + Quote(prev->meta.name) + " " +
                             OffsetsToString(prev->data));
    if (t->data.offset > end)
      return InvalidArgument(file + ": tensor " + Quote(t->meta.name) + " starts at data offset " +
                             std::to_string(t->data.offset) + " leaving a gap of " +
                             std::to_string(t->data.offset - end) + " unused bytes after " +
                             (prev ? "tensor " + Quote(prev->meta.name) : std::string("the header")) +
                             " (the reference implementation rejects gaps)");
    end = t->data.end();
    prev = t;
  }
  if (end != data_size)
    return InvalidArgument(
        file + ": " + std::to_string(data_size - end) + " bytes after the end of the " +
        (prev ? "last tensor " + Quote(prev->meta.name) : std::string("header (no tensors)")) +
        " (the reference implementation rejects trailing data)");
  return Status::Ok();
}

}  // namespace

Result<SafetensorsHeader> ParseSafetensorsHeader(std::span<const std::byte> file,
                                                 std::string_view file_name) {
  const std::string name(file_name);
  if (file.size() < 8)
    return InvalidArgument(name + ": file is " + std::to_string(file.size()) +
                           " bytes, too short for the 8-byte header length");
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<uint8_t>(file[i]);
  if (n > kMaxSafetensorsHeaderBytes)
    return InvalidArgument(name + ": header length " + std::to_string(n) + " is absurdly large (limit " +
                           std::to_string(kMaxSafetensorsHeaderBytes) + ")");
  if (n > file.size() - 8)
    return InvalidArgument(name + ": header length " + std::to_string(n) +
                           " runs past the end of the file (" + std::to_string(file.size()) + " bytes)");
  const char* text = reinterpret_cast<const char*>(file.data() + 8);

  // One linear pass (see safetensors_header_json.h). Entries are checked as they complete; the
  // first entry error is reported only if the text as a whole is sound (framing errors first).
  SafetensorsHeader header;
  header.data_start = 8 + n;
  Status entry_error;
  auto take_entry = [&](std::string&& key, Json&& value) {
    if (!entry_error.ok()) return;
    if (key == kMetadataKey) {
      auto metadata = ParseMetadata(value, name);
      if (metadata.ok())
        header.metadata = std::move(*metadata);
      else
        entry_error = metadata.status();
      return;
    }
    auto tensor = ParseEntry(key, value, name);
    if (tensor.ok())
      header.tensors.push_back(std::move(*tensor));
    else
      entry_error = tensor.status();
  };
  const HeaderJson parsed = ParseHeaderJson({text, n}, kMaxJsonDepth, take_entry);
  if (parsed.too_deep)
    return InvalidArgument(name + ": header JSON nests deeper than " + std::to_string(kMaxJsonDepth) +
                           " levels");
  if (!parsed.valid) return InvalidArgument(name + ": header is not valid JSON");
  if (parsed.root_type != "object")
    return InvalidArgument(name + ": header must be a JSON object, not " + parsed.root_type);
  if (text[0] != '{')
    return InvalidArgument(name +
                           ": header must start with '{' (the reference implementation refuses "
                           "leading whitespace)");
  // nlohmann alone would keep the last of duplicate keys silently.
  if (!parsed.duplicate.empty()) {
    if (parsed.duplicate_in.empty())
      return InvalidArgument(name + ": tensor " + Quote(parsed.duplicate) +
                             " appears more than once in the header");
    return InvalidArgument(name + ": duplicate key " + Quote(parsed.duplicate) + " in the entry of " +
                           Quote(parsed.duplicate_in));
  }
  WP_RETURN_IF_ERROR(entry_error);
  WP_RETURN_IF_ERROR(CheckTiling(header.tensors, file.size() - header.data_start, name));
  return header;
}

Result<SafetensorsFile> SafetensorsFile::Open(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return ErrnoError("cannot open " + path, errno);
  struct stat st;
  if (::fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    return ErrnoError("cannot stat " + path, err);
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    return InvalidArgument(path + ": not a regular file");
  }
  const auto size = static_cast<uint64_t>(st.st_size);
  if (size < 8) {
    ::close(fd);
    // mmap of 0 bytes fails, and such a file cannot hold the 8-byte header length anyway.
    return InvalidArgument(path + ": file is " + std::to_string(size) +
                           " bytes, too short for the 8-byte header length" +
                           (size == 0 ? " (empty file)" : ""));
  }
  void* map = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
  const int map_err = errno;
  ::close(fd);  // the mapping keeps the file alive
  if (map == MAP_FAILED) return ErrnoError("cannot mmap " + path, map_err);

  SafetensorsFile file;
  file.path_ = path;
  file.base_ = static_cast<const std::byte*>(map);
  file.size_ = size;
  auto header = ParseSafetensorsHeader({file.base_, size}, path);
  if (!header.ok()) return header.status();  // ~SafetensorsFile unmaps
  file.header_ = std::move(*header);
  return file;
}

SafetensorsFile::SafetensorsFile(SafetensorsFile&& other) noexcept
    : path_(std::move(other.path_)),
      base_(std::exchange(other.base_, nullptr)),
      size_(std::exchange(other.size_, 0)),
      header_(std::move(other.header_)) {}

SafetensorsFile& SafetensorsFile::operator=(SafetensorsFile&& other) noexcept {
  if (this != &other) {
    Release();
    path_ = std::move(other.path_);
    base_ = std::exchange(other.base_, nullptr);
    size_ = std::exchange(other.size_, 0);
    header_ = std::move(other.header_);
  }
  return *this;
}

SafetensorsFile::~SafetensorsFile() { Release(); }

void SafetensorsFile::Release() {
  if (base_ != nullptr) ::munmap(const_cast<std::byte*>(base_), size_);
  base_ = nullptr;
  size_ = 0;
}

const SafetensorsTensor* SafetensorsFile::Find(std::string_view name) const {
  for (const auto& t : header_.tensors)
    if (t.meta.name == name) return &t;
  return nullptr;
}

std::span<const std::byte> SafetensorsFile::Data(const SafetensorsTensor& tensor) const {
  // Bounds are checked again so a tensor of another file cannot read outside this mapping.
  const uint64_t data_size = size_ - header_.data_start;
  if (base_ == nullptr || tensor.data.offset > data_size ||
      tensor.data.length > data_size - tensor.data.offset)
    return {};
  return {base_ + header_.data_start + tensor.data.offset, tensor.data.length};
}

}  // namespace weightport
