// FedClient: receives each round's model (only the chunks that changed since the version it holds),
// checks it against the server's hash, and sends its update chunk by chunk with error feedback.
#include "weightport/engine/fed/fed_client.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "weightport/control/channel.h"
#include "weightport/control/fed_messages.h"
#include "weightport/core/hash.h"
#include "weightport/engine/common/transport_factory.h"
#include "weightport/engine/fed/fed_codec.h"
#include "weightport/engine/fed/fed_report.h"
#include "weightport/kernels/compress.h"
#include "weightport/kernels/convert.h"

namespace weightport {
namespace {
using Clock = std::chrono::steady_clock;
}  // namespace

struct FedClient::Impl {
  FedClientOptions o;
  std::unique_ptr<ControlChannel> channel;
  uint64_t round = 0;
  uint64_t holds = kFedHoldsNothing;  // the global version in `bf16`
  uint64_t elements = 0;
  uint32_t chunk_elements = 0;
  Bytes bf16;                   // the model as received
  std::vector<float> start;     // the same, as f32: what NextRound returns
  std::vector<float> residual;  // error feedback: what earlier updates could not send
  std::vector<float> sent;      // keep_sent: what the last update decodes to
  FedClientRound current;
  Clock::time_point round_begin;

  uint32_t chunks() const { return static_cast<uint32_t>((elements + chunk_elements - 1) / chunk_elements); }

  Result<FedMsg> NextFed() {
    while (true) {
      WP_ASSIGN_OR_RETURN(ControlMessage m, channel->Receive(o.timeout));
      if (m.type == MessageType::kBye) return NotFound("the server ended the run");
      if (m.type != MessageType::kFed) continue;
      return FedMsg::Decode(m.payload);
    }
  }

  Status Send(FedMsg& m) {
    current.bytes_up += m.data.size();
    return channel->Send(m);
  }
};

Result<std::unique_ptr<FedClient>> FedClient::Connect(const std::string& server, const Secret& secret,
                                                      FedClientOptions options) {
  auto impl = std::make_unique<Impl>();
  impl->o = std::move(options);
  // The server may not listen yet: retry a refused connection until the timeout.
  WP_ASSIGN_OR_RETURN(impl->channel, RetryWhileUnreachable(
                                         std::chrono::steady_clock::now() + impl->o.timeout,
                                         std::chrono::milliseconds(200), [&](std::chrono::milliseconds left) {
                                           return ControlChannel::Connect(
                                               server, impl->o.name, PeerRole::kSubscriber, secret, left);
                                         }));
  FedMsg join;
  join.kind = FedKind::kJoin;
  join.version = kFedHoldsNothing;
  WP_RETURN_IF_ERROR(impl->channel->Send(join));
  return std::unique_ptr<FedClient>(new FedClient(std::move(impl)));
}

FedClient::FedClient(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
FedClient::~FedClient() {
  if (impl_ && impl_->channel) impl_->channel->Close();
}
uint64_t FedClient::round() const { return impl_->round; }
std::span<const float> FedClient::last_sent() const { return impl_->sent; }

Result<std::span<const float>> FedClient::NextRound() {
  Impl& m = *impl_;
  FedMsg begin;
  do {
    WP_ASSIGN_OR_RETURN(begin, m.NextFed());
  } while (begin.kind != FedKind::kRoundBegin);
  if (begin.chunk_elements == 0 || begin.elements == 0 || begin.elements > (uint64_t{1} << 36))
    return InvalidArgument("server sent a round of " + std::to_string(begin.elements) +
                           " elements in chunks of " + std::to_string(begin.chunk_elements));
  if (begin.elements != m.elements || begin.chunk_elements != m.chunk_elements) {
    m.elements = begin.elements;
    m.chunk_elements = begin.chunk_elements;
    m.bf16.assign(m.elements * 2, std::byte{0});
    m.start.assign(m.elements, 0);
    m.residual.assign(m.elements, 0);
    m.holds = kFedHoldsNothing;
  }
  m.round = begin.round;
  m.round_begin = Clock::now();
  m.current = FedClientRound{};
  m.current.round = begin.round;
  m.current.version = begin.version;
  while (true) {
    WP_ASSIGN_OR_RETURN(FedMsg msg, m.NextFed());
    if (msg.round != begin.round) continue;
    if (msg.kind == FedKind::kModelEnd) {
      const uint64_t got = Xxh3(m.bf16.data(), m.bf16.size());
      if (got != msg.hash)
        return DataLoss("round " + std::to_string(begin.round) + ": the model built from " +
                        std::to_string(m.current.chunks_received) +
                        " changed chunks does not match the server's " + "(a version missed?)");
      break;
    }
    if (msg.kind != FedKind::kModelChunk) continue;
    const uint64_t at = uint64_t{msg.chunk} * m.chunk_elements * 2;
    const uint64_t n =
        std::min<uint64_t>(uint64_t{m.chunk_elements} * 2, m.bf16.size() - std::min(at, m.bf16.size()));
    if (msg.chunk >= m.chunks() || msg.raw_bytes != n)
      return InvalidArgument("server sent chunk " + std::to_string(msg.chunk) + " of " +
                             std::to_string(msg.raw_bytes) + " bytes");
    std::span<std::byte> dst(m.bf16.data() + at, n);
    if (msg.compressed) {
      WP_RETURN_IF_ERROR(
          kernels::ZstdDecompress(msg.data, dst).WithContext("model chunk " + std::to_string(msg.chunk)));
    } else if (msg.data.size() == n) {
      std::copy(msg.data.begin(), msg.data.end(), dst.begin());
    } else {
      return InvalidArgument("model chunk " + std::to_string(msg.chunk) + " carries " +
                             std::to_string(msg.data.size()) + " bytes, " + std::to_string(n) + " expected");
    }
    ++m.current.chunks_received;
    m.current.bytes_down += msg.data.size();
  }
  m.holds = begin.version;
  WP_RETURN_IF_ERROR(kernels::Convert(DType::kBF16, DType::kF32, m.bf16.data(), m.start.data(), m.elements));
  m.current.download_s = std::chrono::duration<double>(Clock::now() - m.round_begin).count();
  return std::span<const float>(m.start);
}

Result<FedClientRound> FedClient::SendUpdate(std::span<const float> update, double samples) {
  Impl& m = *impl_;
  if (update.size() != m.elements)
    return InvalidArgument("an update of " + std::to_string(update.size()) + " elements for a model of " +
                           std::to_string(m.elements));
  const auto t0 = Clock::now();
  if (m.o.keep_sent) m.sent.resize(m.elements);
  FedMsg begin;
  begin.kind = FedKind::kUpdateBegin;
  begin.round = m.round;
  begin.value = samples;
  WP_RETURN_IF_ERROR(m.Send(begin));
  for (uint32_t c = 0; c < m.chunks(); ++c) {
    const uint64_t at = uint64_t{c} * m.chunk_elements;
    const uint64_t n = std::min<uint64_t>(m.chunk_elements, m.elements - at);
    std::span<float> sent = m.o.keep_sent ? std::span<float>(m.sent.data() + at, n) : std::span<float>();
    FedChunk chunk = EncodeUpdateChunk(update.subspan(at, n), std::span<float>(m.residual.data() + at, n),
                                       m.o.encoding, m.o.compress, sent);
    FedMsg msg;
    msg.kind = FedKind::kUpdateChunk;
    msg.round = m.round;
    msg.chunk = c;
    msg.encoding = static_cast<uint8_t>(chunk.encoding);
    msg.value = chunk.scale;
    msg.compressed = chunk.compressed;
    msg.raw_bytes = chunk.raw_bytes;
    msg.data = std::move(chunk.data);
    WP_RETURN_IF_ERROR(m.Send(msg));
  }
  FedMsg end;
  end.kind = FedKind::kUpdateEnd;
  end.round = m.round;
  WP_RETURN_IF_ERROR(m.Send(end));
  m.current.upload_s = std::chrono::duration<double>(Clock::now() - t0).count();
  return m.current;
}

Status FedClient::SendGarbage(double samples, uint32_t valid_chunks) {
  std::vector<float> nan(impl_->elements, std::numeric_limits<float>::quiet_NaN());
  std::fill_n(nan.begin(), std::min<uint64_t>(uint64_t{valid_chunks} * impl_->chunk_elements, nan.size()),
              1.0f);
  const FedEncoding encoding = impl_->o.encoding;
  impl_->o.encoding = FedEncoding::kF32;  // NaN survives f32 as is
  auto r = SendUpdate(nan, samples);
  impl_->o.encoding = encoding;
  std::fill(impl_->residual.begin(), impl_->residual.end(), 0.0f);
  return r.status();
}

}  // namespace weightport
