// Streaming safetensors writer: header first, then each tensor's bytes in order, into a temporary
// file that Finish renames into place.
#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "weightport/format/safetensors_writer.h"

namespace weightport {
namespace {

// nlohmann's dump throws on invalid UTF-8; check names and metadata first (same rules as its
// parser: no overlong forms, no surrogates, nothing above U+10FFFF).
bool IsValidUtf8(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    const auto c = static_cast<uint8_t>(s[i]);
    size_t len;
    uint32_t cp;
    if (c < 0x80) {
      ++i;
      continue;
    } else if (c >= 0xC2 && c <= 0xDF) {
      len = 2, cp = c & 0x1F;
    } else if (c >= 0xE0 && c <= 0xEF) {
      len = 3, cp = c & 0x0F;
    } else if (c >= 0xF0 && c <= 0xF4) {
      len = 4, cp = c & 0x07;
    } else {
      return false;
    }
    if (s.size() - i < len) return false;
    for (size_t k = 1; k < len; ++k) {
      const auto cc = static_cast<uint8_t>(s[i + k]);
      if ((cc & 0xC0) != 0x80) return false;
      cp = (cp << 6) | (cc & 0x3F);
    }
    if ((len == 3 && (cp < 0x800 || (cp >= 0xD800 && cp <= 0xDFFF))) ||
        (len == 4 && (cp < 0x10000 || cp > 0x10FFFF)))
      return false;
    i += len;
  }
  return true;
}

Status WriteAll(int fd, const void* data, size_t size, const std::string& path) {
  const auto* p = static_cast<const char*>(data);
  while (size > 0) {
    const ssize_t n = ::write(fd, p, size);
    if (n < 0) {
      if (errno == EINTR) continue;
      return ErrnoError("cannot write " + path, errno);
    }
    p += n;
    size -= static_cast<size_t>(n);
  }
  return Status::Ok();
}

}  // namespace

Result<std::string> EncodeSafetensorsHeader(std::span<const TensorMeta> tensors,
                                            const std::map<std::string, std::string>& metadata) {
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) {
    nlohmann::ordered_json meta = nlohmann::ordered_json::object();
    for (const auto& [key, value] : metadata) {
      if (!IsValidUtf8(key) || !IsValidUtf8(value))
        return InvalidArgument("safetensors metadata '" + key + "' is not valid UTF-8");
      meta[key] = value;
    }
    header["__metadata__"] = std::move(meta);
  }
  std::set<std::string_view> names;
  uint64_t offset = 0;
  for (const auto& t : tensors) {
    const std::string ctx = "tensor '" + t.name + "'";
    if (t.name.empty()) return InvalidArgument("safetensors writer: tensor name must not be empty");
    if (t.name == "__metadata__") return InvalidArgument(ctx + ": name is reserved for metadata");
    if (!IsValidUtf8(t.name)) return InvalidArgument(ctx + ": name is not valid UTF-8");
    if (!names.insert(t.name).second) return InvalidArgument(ctx + ": name appears more than once");
    // Recompute bytes: a hand-filled TensorMeta must agree with its shape and dtype.
    WP_ASSIGN_OR_RETURN(TensorMeta checked, TensorMeta::Make(t.name, t.dtype, t.shape));
    if (checked.bytes != t.bytes)
      return InvalidArgument(ctx + ": bytes is " + std::to_string(t.bytes) + " but shape " +
                             ShapeToString(t.shape) + " x " + std::string(SafetensorsDTypeName(t.dtype)) +
                             " = " + std::to_string(checked.bytes));
    if (t.bytes > UINT64_MAX - offset) return InvalidArgument(ctx + ": total size overflows 64 bits");
    nlohmann::ordered_json entry = nlohmann::ordered_json::object();
    entry["dtype"] = std::string(SafetensorsDTypeName(t.dtype));
    entry["shape"] = t.shape;
    entry["data_offsets"] = {offset, offset + t.bytes};
    header[t.name] = std::move(entry);
    offset += t.bytes;
  }
  std::string json = header.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
  json.append((8 - json.size() % 8) % 8, ' ');  // the reference pads so the data area is 8-aligned
  std::string out(8, '\0');
  uint64_t n = json.size();
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>((n >> (8 * i)) & 0xFF);
  return out + json;
}

Result<SafetensorsWriter> SafetensorsWriter::Create(const std::string& path, std::vector<TensorMeta> tensors,
                                                    const std::map<std::string, std::string>& metadata) {
  auto header = EncodeSafetensorsHeader(tensors, metadata);
  if (!header.ok()) return header.status().WithContext(path);
  SafetensorsWriter w;
  w.path_ = path;
  w.tmp_path_ = path + ".tmp";
  w.tensors_ = std::move(tensors);
  w.fd_ = ::open(w.tmp_path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (w.fd_ < 0) return ErrnoError("cannot create " + w.tmp_path_, errno);
  WP_RETURN_IF_ERROR(WriteAll(w.fd_, header->data(), header->size(), w.tmp_path_));  // ~w unlinks
  while (w.current_ < w.tensors_.size() && w.tensors_[w.current_].bytes == 0) ++w.current_;
  return w;
}

SafetensorsWriter::SafetensorsWriter(SafetensorsWriter&& other) noexcept
    : path_(std::move(other.path_)),
      tmp_path_(std::move(other.tmp_path_)),
      fd_(std::exchange(other.fd_, -1)),
      tensors_(std::move(other.tensors_)),
      current_(std::exchange(other.current_, 0)),
      written_in_current_(std::exchange(other.written_in_current_, 0)) {}

SafetensorsWriter& SafetensorsWriter::operator=(SafetensorsWriter&& other) noexcept {
  if (this != &other) {
    Abandon();
    path_ = std::move(other.path_);
    tmp_path_ = std::move(other.tmp_path_);
    fd_ = std::exchange(other.fd_, -1);
    tensors_ = std::move(other.tensors_);
    current_ = std::exchange(other.current_, 0);
    written_in_current_ = std::exchange(other.written_in_current_, 0);
  }
  return *this;
}

SafetensorsWriter::~SafetensorsWriter() { Abandon(); }

// fd_ >= 0 exactly while a temporary file exists that this writer owns.
void SafetensorsWriter::Abandon() {
  if (fd_ < 0) return;
  ::close(fd_);
  fd_ = -1;
  ::unlink(tmp_path_.c_str());
}

Status SafetensorsWriter::Append(std::span<const std::byte> bytes) {
  if (fd_ < 0) return FailedPrecondition(path_ + ": writer is finished or failed");
  if (bytes.empty()) return Status::Ok();
  if (current_ >= tensors_.size())
    return InvalidArgument(path_ + ": " + std::to_string(bytes.size()) +
                           " bytes appended after the last tensor" +
                           (tensors_.empty() ? "" : " '" + tensors_.back().name + "'") + " was complete");
  const TensorMeta& t = tensors_[current_];
  const uint64_t left = t.bytes - written_in_current_;
  if (bytes.size() > left)
    return InvalidArgument(path_ + ": tensor '" + t.name + "': " + std::to_string(bytes.size()) +
                           " bytes appended but only " + std::to_string(left) + " of its " +
                           std::to_string(t.bytes) + " bytes remain (an Append may not cross tensors)");
  Status s = WriteAll(fd_, bytes.data(), bytes.size(), tmp_path_);
  if (!s.ok()) {
    Abandon();
    return s;
  }
  written_in_current_ += bytes.size();
  if (written_in_current_ == t.bytes) {
    written_in_current_ = 0;
    ++current_;
    while (current_ < tensors_.size() && tensors_[current_].bytes == 0) ++current_;
  }
  return Status::Ok();
}

Status SafetensorsWriter::Finish() {
  if (fd_ < 0) return FailedPrecondition(path_ + ": writer is finished or failed");
  if (current_ < tensors_.size()) {
    const TensorMeta& t = tensors_[current_];
    return FailedPrecondition(path_ + ": tensor '" + t.name + "' has " + std::to_string(written_in_current_) +
                              " of its " + std::to_string(t.bytes) + " bytes; " +
                              std::to_string(tensors_.size() - current_) + " tensor(s) incomplete");
  }
  // fsync before rename, so that after a crash the name holds either the old file or the new one.
  if (::fsync(fd_) != 0) {
    const int err = errno;
    Abandon();
    return ErrnoError("cannot fsync " + tmp_path_, err);
  }
  const int fd = std::exchange(fd_, -1);
  if (::close(fd) != 0) {
    const int err = errno;
    ::unlink(tmp_path_.c_str());
    return ErrnoError("cannot close " + tmp_path_, err);
  }
  if (std::rename(tmp_path_.c_str(), path_.c_str()) != 0) {
    const int err = errno;
    ::unlink(tmp_path_.c_str());
    return ErrnoError("cannot rename " + tmp_path_ + " to " + path_, err);
  }
  return Status::Ok();
}

Status WriteSafetensors(const std::string& path, std::span<const TensorBytes> tensors,
                        const std::map<std::string, std::string>& metadata) {
  std::vector<TensorMeta> metas;
  metas.reserve(tensors.size());
  for (const auto& t : tensors) {
    if (t.data.size() != t.meta.bytes)
      return InvalidArgument(path + ": tensor '" + t.meta.name + "' has " + std::to_string(t.data.size()) +
                             " bytes of data, its shape and dtype need " + std::to_string(t.meta.bytes));
    metas.push_back(t.meta);
  }
  WP_ASSIGN_OR_RETURN(SafetensorsWriter writer, SafetensorsWriter::Create(path, std::move(metas), metadata));
  for (const auto& t : tensors) WP_RETURN_IF_ERROR(writer.Append(t.data));
  return writer.Finish();
}

}  // namespace weightport
