#include "transport/ucx/ucx_wire.h"

namespace weightport::ucx {
namespace {

constexpr uint64_t kAddressMagic = 0x3130'4158'4355'5057;  // "WPUCXA01"
constexpr uint64_t kKeyMagic = 0x3130'4b58'4355'5057;      // "WPUCXK01"
constexpr uint8_t kHeaderVersion = 1;

void PutInt(Bytes& out, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) out.push_back(static_cast<std::byte>(v >> (8 * i)));
}
void PutBytes(Bytes& out, std::span<const std::byte> bytes) {
  out.insert(out.end(), bytes.begin(), bytes.end());
}

// Reads fields front to back; any read past the end makes ok() false.
class Reader {
 public:
  explicit Reader(std::span<const std::byte> in) : in_(in) {}
  uint64_t Int(int bytes) {
    if (!Has(bytes)) return 0;
    uint64_t v = 0;
    for (int i = 0; i < bytes; ++i) v |= static_cast<uint64_t>(in_[pos_ + i]) << (8 * i);
    pos_ += bytes;
    return v;
  }
  std::span<const std::byte> Take(size_t n) {
    if (!Has(n)) return {};
    auto out = in_.subspan(pos_, n);
    pos_ += n;
    return out;
  }
  std::span<const std::byte> Rest() { return Take(in_.size() - pos_); }
  bool ok() const { return ok_; }

 private:
  bool Has(size_t n) {
    if (ok_ && in_.size() - pos_ >= n) return true;
    ok_ = false;
    return false;
  }
  std::span<const std::byte> in_;
  size_t pos_ = 0;
  bool ok_ = true;
};

}  // namespace

Bytes EncodeAddress(const WireAddress& a) {
  Bytes out;
  PutInt(out, kAddressMagic, 8);
  PutInt(out, a.transport_id, 8);
  PutInt(out, a.liveness_address, 8);
  PutInt(out, a.liveness_rkey.size(), 4);
  PutBytes(out, a.liveness_rkey);
  PutBytes(out, a.worker_address);
  return out;
}

std::optional<WireAddress> DecodeAddress(std::span<const std::byte> bytes) {
  Reader r(bytes);
  if (r.Int(8) != kAddressMagic) return std::nullopt;
  WireAddress a;
  a.transport_id = r.Int(8);
  a.liveness_address = r.Int(8);
  auto rkey = r.Take(r.Int(4));
  auto worker = r.Rest();
  if (!r.ok() || worker.empty()) return std::nullopt;
  a.liveness_rkey.assign(rkey.begin(), rkey.end());
  a.worker_address.assign(worker.begin(), worker.end());
  return a;
}

Bytes EncodeKey(uint64_t owner_id, uint64_t region_id, std::span<const std::byte> ucp_rkey) {
  Bytes out;
  PutInt(out, kKeyMagic, 8);
  PutInt(out, owner_id, 8);
  PutInt(out, region_id, 8);
  PutBytes(out, ucp_rkey);
  return out;
}

std::optional<WireKey> DecodeKey(std::span<const std::byte> bytes) {
  Reader r(bytes);
  if (r.Int(8) != kKeyMagic) return std::nullopt;
  WireKey k;
  k.owner_id = r.Int(8);
  k.region_id = r.Int(8);
  k.ucp_rkey = r.Rest();
  if (!r.ok()) return std::nullopt;
  return k;
}

Bytes EncodeHeader(std::string_view from, uint64_t stream, uint64_t seq) {
  Bytes out;
  out.reserve(kHeaderFixedBytes + from.size());
  PutInt(out, kHeaderVersion, 1);
  PutInt(out, from.size(), 2);
  PutInt(out, stream, 8);
  PutInt(out, seq, 8);
  PutBytes(out, std::as_bytes(std::span(from.data(), from.size())));
  return out;
}

std::optional<WireHeader> DecodeHeader(std::span<const std::byte> bytes) {
  Reader r(bytes);
  if (r.Int(1) != kHeaderVersion) return std::nullopt;
  const size_t name_bytes = r.Int(2);
  WireHeader h;
  h.stream = r.Int(8);
  h.seq = r.Int(8);
  auto name = r.Take(name_bytes);
  if (!r.ok() || !r.Rest().empty()) return std::nullopt;
  h.from.assign(reinterpret_cast<const char*>(name.data()), name.size());
  return h;
}

}  // namespace weightport::ucx
