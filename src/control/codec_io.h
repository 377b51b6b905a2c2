// The codec's helpers for the payloads of every message family: a Writer that appends fields and a
// strict Reader whose every read is bounds-checked (protocol.h says how fields are laid out).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <string_view>
#include <utility>

#include "weightport/control/protocol.h"
#include "weightport/core/status.h"

namespace weightport::control_internal {

// Appends little-endian fields and length-prefixed strings to a buffer.
class Writer {
 public:
  void U8(uint8_t v) { out_.push_back(std::byte{v}); }
  void U32(uint32_t v) { Int(v, 4); }
  void U64(uint64_t v) { Int(v, 8); }
  void Raw(ByteView bytes) { out_.insert(out_.end(), bytes.begin(), bytes.end()); }
  void Blob(ByteView bytes) {
    U32(static_cast<uint32_t>(bytes.size()));
    Raw(bytes);
  }
  void Str(std::string_view s) { Blob(std::as_bytes(std::span(s.data(), s.size()))); }
  Bytes Take() { return std::move(out_); }

 private:
  void Int(uint64_t v, int n) {
    for (int i = 0; i < n; ++i) out_.push_back(std::byte(static_cast<uint8_t>(v >> (8 * i))));
  }
  Bytes out_;
};

// Reads fields from a payload; every read is bounds-checked and names the message and field.
class Reader {
 public:
  Reader(ByteView in, std::string_view msg) : in_(in), msg_(msg) {}

  Status Need(size_t n, std::string_view field) const {
    if (in_.size() - pos_ < n) {
      return InvalidArgument(std::string(msg_) + ": truncated at " + std::string(field) + " (needs " +
                             std::to_string(n) + " bytes at offset " + std::to_string(pos_) + ", " +
                             std::to_string(in_.size() - pos_) + " left)");
    }
    return Status::Ok();
  }
  Result<uint64_t> Int(int n, std::string_view field) {
    WP_RETURN_IF_ERROR(Need(static_cast<size_t>(n), field));
    uint64_t v = 0;
    for (int i = 0; i < n; ++i)
      v |= static_cast<uint64_t>(std::to_integer<uint8_t>(in_[pos_ + i])) << (8 * i);
    pos_ += static_cast<size_t>(n);
    return v;
  }
  Result<uint64_t> U64(std::string_view field) { return Int(8, field); }
  template <size_t N>
  Status Fixed(std::array<std::byte, N>& out, std::string_view field) {
    WP_RETURN_IF_ERROR(Need(N, field));
    std::memcpy(out.data(), in_.data() + pos_, N);
    pos_ += N;
    return Status::Ok();
  }
  // A u32 length then that many bytes, at most max_size.
  Result<ByteView> Blob(std::string_view field, size_t max_size) {
    WP_ASSIGN_OR_RETURN(uint64_t size, Int(4, field));
    if (size > max_size) {
      return InvalidArgument(std::string(msg_) + ": " + std::string(field) + " is " + std::to_string(size) +
                             " bytes, at most " + std::to_string(max_size) + " allowed");
    }
    WP_RETURN_IF_ERROR(Need(size, field));
    ByteView out = in_.subspan(pos_, size);
    pos_ += size;
    return out;
  }
  Result<Bytes> BlobCopy(std::string_view field, size_t max_size) {
    WP_ASSIGN_OR_RETURN(ByteView v, Blob(field, max_size));
    return Bytes(v.begin(), v.end());
  }
  Result<std::string> Str(std::string_view field, size_t max_size) {
    WP_ASSIGN_OR_RETURN(ByteView v, Blob(field, max_size));
    return std::string(reinterpret_cast<const char*>(v.data()), v.size());
  }
  // Peer names end up in logs and error messages: printable ASCII only, so a peer cannot forge lines.
  Result<std::string> Name(std::string_view field) {
    WP_ASSIGN_OR_RETURN(std::string name, Printable(field, kMaxNameSize));
    if (name.empty()) return InvalidArgument(std::string(msg_) + ": " + std::string(field) + " is empty");
    return name;
  }
  Result<std::string> Printable(std::string_view field, size_t max_size) {
    WP_ASSIGN_OR_RETURN(std::string text, Str(field, max_size));
    for (char c : text) {
      if (c < 0x20 || c > 0x7e) {
        return InvalidArgument(std::string(msg_) + ": " + std::string(field) +
                               " contains a non-printable byte");
      }
    }
    return text;
  }
  size_t remaining() const { return in_.size() - pos_; }
  Status Done() const {
    if (pos_ != in_.size()) {
      return InvalidArgument(std::string(msg_) + ": " + std::to_string(in_.size() - pos_) +
                             " trailing bytes after the last field");
    }
    return Status::Ok();
  }

 private:
  ByteView in_;
  size_t pos_ = 0;
  std::string_view msg_;
};

// The shared shape of messages that are one string.
inline Bytes EncodeString(std::string_view s) {
  Writer w;
  w.Str(s);
  return w.Take();
}
inline Result<std::string> DecodeString(ByteView payload, std::string_view msg, std::string_view field,
                                        size_t max) {
  Reader r(payload, msg);
  WP_ASSIGN_OR_RETURN(std::string s, r.Str(field, max));
  WP_RETURN_IF_ERROR(r.Done());
  return s;
}

}  // namespace weightport::control_internal
