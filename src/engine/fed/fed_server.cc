// FedServer: joins, then rounds. One thread accepts, one reads each client into an event queue
// that the caller's thread drains (folding chunks as they come), and one sends each client its
// round's model, so a slow link holds back only its own client.
#include "weightport/engine/fed/fed_server.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <map>
#include <optional>
#include <thread>

#include "weightport/control/event_queue.h"
#include "weightport/control/fed_messages.h"
#include "weightport/control/handshake.h"
#include "weightport/control/joining_peers.h"
#include "weightport/core/hash.h"
#include "weightport/engine/fed/fed_codec.h"
#include "weightport/engine/fed/fed_report.h"
#include "weightport/kernels/compress.h"
#include "weightport/kernels/convert.h"

namespace weightport {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;
constexpr size_t kQueuedEvents = 16;  // each at most one update chunk

double Seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

// One version of the global model as it travels: per chunk a zstd frame or the raw bf16 bytes.
// Immutable once built; a sender still busy with an older one keeps it alive.
struct ModelImage {
  uint64_t version = 0;
  uint64_t hash = 0;  // xxh3 of the whole bf16 model
  std::vector<uint64_t> chunk_hash;
  std::vector<Bytes> frames;
  std::vector<uint8_t> compressed;
  std::vector<uint32_t> raw_bytes;
  uint64_t bytes() const {
    uint64_t n = 0;
    for (const Bytes& f : frames) n += f.size();
    return n;
  }
};

// What a sender thread reports back.
struct SendStats {
  std::atomic<uint64_t> bytes{0};
  std::atomic<int64_t> nanos{0};
};

struct Client {
  std::string name;
  std::unique_ptr<ControlChannel> channel;
  uint64_t holds = kFedHoldsNothing;  // the global version it has (after its last full download)
  std::thread reader, sender;
  bool lost = false;
  std::map<uint64_t, double> samples;  // by round, from its FedUpdateBegin
  uint64_t late_round = 0;             // a round it missed the deadline of: its later chunks count as late
  // Every chunk folded from it this round, with its weight (an unlinked temporary file): an
  // exclusion takes them back out of the sum, so an excluded client leaves no trace in the round,
  // while the server's memory stays a constant times the model. `carry`: a late client's chunks
  // of the last round, folded into this one at the staleness weight (FedLatePolicy::kFold).
  std::unique_ptr<std::FILE, int (*)(std::FILE*)> spill{nullptr, &std::fclose};
  std::unique_ptr<std::FILE, int (*)(std::FILE*)> carry{nullptr, &std::fclose};
  uint64_t spilled = 0;  // chunks in `spill`
  // This round:
  bool participant = false, ended = false;
  std::vector<uint8_t> folded;  // per chunk
  FedClientReport report;
  std::shared_ptr<SendStats> sent;
};

struct Event {
  int client = -1;  // -1: a new client (in `joined`)
  Result<ControlMessage> message = Status(Cancelled(""));
  std::unique_ptr<ControlChannel> joined;
  uint64_t holds = kFedHoldsNothing;
};

}  // namespace

struct FedServer::Impl {
  std::unique_ptr<ControlListener> listener;
  FedServerOptions o;
  std::vector<float> global;
  uint64_t version = 0;
  FedAggregator aggregator;
  uint32_t chunks = 0;
  std::vector<std::vector<uint64_t>> hashes;  // per version: each bf16 chunk's xxh3
  std::shared_ptr<const ModelImage> image;    // the current version as it travels
  uint64_t peak_bytes = 0;
  std::map<int, Client> clients;  // by id; touched by the caller's thread only (senders get their own copies)
  int next_id = 0;
  std::thread acceptor;
  std::atomic<bool> stopping{false};
  // Bounded: chunks that arrive faster than they are folded wait in the clients' sockets, not here.
  EventQueue<Event> events{kQueuedEvents};

  Impl(std::unique_ptr<ControlListener> l, std::vector<float> initial, FedServerOptions options)
      : listener(std::move(l)),
        o(std::move(options)),
        global(std::move(initial)),
        aggregator(global.size(), o.chunk_elements),
        chunks(aggregator.chunks()) {}

  void Log(const std::string& line) const {
    if (o.log) o.log(line);
  }
  void Push(Event e) { events.Push(std::move(e)); }
  std::optional<Event> Next(Clock::time_point deadline) { return events.Next(deadline); }

  // Joins are read side by side (JoiningPeers): a client slow to send its join holds up no other.
  void Accept() {
    JoiningPeers joining(kJoinMessageTimeout);
    while (!stopping.load()) {
      auto ch = listener->Accept(joining.empty() ? milliseconds(200) : milliseconds(20));
      if (ch.ok()) joining.Add(std::move(*ch));  // else a timeout, or a refused peer (logged by the listener)
      for (JoiningPeers::Arrival& a : joining.Take()) {
        Status bad;
        uint64_t holds = kFedHoldsNothing;
        if (!a.first.ok()) {
          bad = a.first.status();
        } else if (a.first->type != MessageType::kFed) {
          bad = InvalidArgument("sent " + std::string(MessageTypeName(a.first->type)) +
                                ", not a federated join");
        } else if (auto m = FedMsg::Decode(a.first->payload); !m.ok() || m->kind != FedKind::kJoin) {
          bad = InvalidArgument("its first message is not a federated join");
        } else {
          holds = m->version;
        }
        if (!bad.ok()) {
          Log("fed: refused " + a.channel->peer() + ": " + bad.message());
          a.channel->TurnAway(bad.message());
          continue;
        }
        Push(Event{-1, Status(Cancelled("")), std::move(a.channel), holds});
      }
    }
  }

  void Adopt(Event& e) {
    const int id = next_id++;
    Client& c = clients[id];
    c.channel = std::move(e.joined);
    c.name = c.channel->peer_name();
    // A version it says it holds is believed only if the server still knows it (hashes).
    c.holds = e.holds != kFedHoldsNothing && e.holds <= version ? e.holds : kFedHoldsNothing;
    ControlChannel* ch = c.channel.get();
    c.reader = std::thread([this, id, ch] {
      while (!stopping.load()) {
        auto m = ch->Receive(milliseconds(200));
        if (!m.ok() && m.status().code() == StatusCode::kTimeout) continue;
        const bool end = !m.ok();
        Push(Event{id, std::move(m), nullptr, 0});
        if (end) return;
      }
    });
    Log("fed: " + c.name + " joined (" + c.channel->peer_address() + ")");
  }

  // The current version's image: bf16, chunk hashes, frames. Chunks unchanged since the previous
  // version reuse its frames.
  void PrepareModel() {
    Bytes bf16(global.size() * 2);
    kernels::Convert(DType::kF32, DType::kBF16, global.data(), bf16.data(), global.size()).IgnoreError();
    auto next = std::make_shared<ModelImage>();
    next->version = version;
    next->hash = Xxh3(bf16.data(), bf16.size());
    next->chunk_hash.resize(chunks);
    next->frames.resize(chunks);
    next->compressed.assign(chunks, 0);
    next->raw_bytes.resize(chunks);
    for (uint32_t c = 0; c < chunks; ++c) {
      const uint64_t begin = uint64_t{c} * o.chunk_elements * 2;
      const uint64_t n = std::min<uint64_t>(uint64_t{o.chunk_elements} * 2, bf16.size() - begin);
      ByteView raw(bf16.data() + begin, n);
      next->chunk_hash[c] = Xxh3(raw.data(), raw.size());
      next->raw_bytes[c] = static_cast<uint32_t>(n);
      if (image && image->chunk_hash[c] == next->chunk_hash[c]) {
        next->frames[c] = image->frames[c];
        next->compressed[c] = image->compressed[c];
        continue;
      }
      std::vector<std::byte> frame;
      if (o.compress && kernels::ZstdCompress(raw, 1, frame).ok() && frame.size() * 10 <= n * 9) {
        next->frames[c].assign(frame.begin(), frame.end());
        next->compressed[c] = 1;
      } else {
        next->frames[c].assign(raw.begin(), raw.end());
      }
    }
    hashes.push_back(next->chunk_hash);
    peak_bytes = std::max(peak_bytes, global.size() * 4 + aggregator.bytes() + bf16.size() + next->bytes() +
                                          (image ? image->bytes() : 0));
    image = std::move(next);
  }

  // Sends the round's model to one client on a thread of its own: the chunks that differ from the
  // version it holds.
  void StartSender(Client& c, uint64_t round, Clock::time_point start) {
    if (c.sender.joinable()) c.sender.join();  // the previous round's, if its link was slow
    std::vector<uint32_t> send;
    for (uint32_t k = 0; k < chunks; ++k)
      if (c.holds == kFedHoldsNothing || hashes[c.holds][k] != image->chunk_hash[k]) send.push_back(k);
    c.holds = version;
    FedMsg begin;
    begin.kind = FedKind::kRoundBegin;
    begin.round = round;
    begin.version = version;
    begin.elements = global.size();
    begin.chunk_elements = o.chunk_elements;
    begin.deadline_ms = static_cast<uint64_t>(o.deadline.count());
    c.sent = std::make_shared<SendStats>();
    c.sender = std::thread(
        [ch = c.channel.get(), begin, send = std::move(send), img = image, stats = c.sent, start] {
          Status s = ch->Send(begin);
          for (uint32_t k : send) {
            if (!s.ok()) break;
            FedMsg m;
            m.kind = FedKind::kModelChunk;
            m.round = begin.round;
            m.chunk = k;
            m.compressed = img->compressed[k];
            m.raw_bytes = img->raw_bytes[k];
            m.data = img->frames[k];
            stats->bytes += m.data.size();
            s = ch->Send(m);
          }
          if (s.ok()) {
            FedMsg end;
            end.kind = FedKind::kModelEnd;
            end.round = begin.round;
            end.version = begin.version;
            end.hash = img->hash;
            ch->Send(end).IgnoreError();  // a failed send shows as the client's lost connection
          }
          stats->nanos = std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - start).count();
        });
  }

  void Exclude(Client& c, const std::string& why, FedRoundReport& round) {
    if (!c.report.excluded.empty() || c.report.folded) return;
    c.report.excluded = why;
    c.ended = true;
    std::string taken;
    if (c.spilled > 0) {
      const uint64_t n = Replay(c.spill.get(), -1, nullptr);
      taken = " (its " + std::to_string(n) + " folded chunk(s) taken back out)";
      c.report.chunks_folded = 0;
    }
    Log("fed: round " + std::to_string(round.round) + ": " + c.name + " excluded: " + why + taken);
  }

  // Notes a chunk folded from c with `weight` (its FedUpdateChunk payload, as received), so that it
  // can be taken back out.
  void Spill(Client& c, ByteView bytes, double weight) {
    if (!c.spill) return;
    const uint64_t n = bytes.size();
    std::FILE* f = c.spill.get();
    if (std::fwrite(&weight, sizeof weight, 1, f) != 1 || std::fwrite(&n, sizeof n, 1, f) != 1 ||
        std::fwrite(bytes.data(), 1, n, f) != n) {
      Log("fed: " + c.name + ": cannot note a folded chunk; an exclusion could not take it back");
      c.spill.reset();
      return;
    }
    ++c.spilled;
  }

  // Folds every chunk noted in `f` again, at `factor` times the weight it was folded with (-1 takes
  // them out); notes them in `into`'s spill when given. The chunks decoded when first folded.
  uint64_t Replay(std::FILE* f, double factor, Client* into) {
    if (f == nullptr) return 0;
    std::fflush(f);
    std::rewind(f);
    uint64_t replayed = 0;
    double weight;
    uint64_t n;
    while (std::fread(&weight, sizeof weight, 1, f) == 1 && std::fread(&n, sizeof n, 1, f) == 1) {
      Bytes bytes(n);
      if (std::fread(bytes.data(), 1, n, f) != n) break;
      auto m = FedMsg::Decode(bytes);
      if (!m.ok() || !DecodeChunk(*m).ok()) break;  // it decoded when it was first folded
      aggregator.Fold(m->chunk, weight * factor, scratch);
      if (into) Spill(*into, bytes, weight * factor);
      ++replayed;
    }
    std::fseek(f, 0, SEEK_END);
    return replayed;
  }

  // Decodes update chunk m into `scratch`: checked against the model's chunks, its encoding, its
  // size and for values that are not finite.
  Status DecodeChunk(const FedMsg& m) {
    if (m.chunk >= chunks)
      return InvalidArgument("chunk " + std::to_string(m.chunk) + " of a model of " + std::to_string(chunks));
    if (m.encoding > static_cast<uint8_t>(FedEncoding::kFP8))
      return InvalidArgument("unknown encoding " + std::to_string(m.encoding));
    const FedChunk chunk{static_cast<FedEncoding>(m.encoding), static_cast<float>(m.value), m.raw_bytes,
                         m.compressed != 0, m.data};
    scratch.resize(aggregator.ChunkOf(global, m.chunk).size());
    return DecodeUpdateChunk(chunk, scratch).WithContext("chunk " + std::to_string(m.chunk));
  }

  // One update chunk from client c for `round` (this one or, late, the previous one); `payload` is
  // the message as received.
  void OnChunk(Client& c, const FedMsg& m, ByteView payload, FedRoundReport& report, bool late) {
    const uint64_t round = m.round;
    auto samples = c.samples.find(round);
    if (samples == c.samples.end()) return Exclude(c, "an update chunk before its FedUpdateBegin", report);
    if (Status s = DecodeChunk(m); !s.ok()) return Exclude(c, s.message(), report);
    c.report.bytes_up += m.data.size();
    if (late) {
      ++c.report.late_chunks;
      if (o.late == FedLatePolicy::kFold && c.participant && c.report.excluded.empty()) {
        aggregator.Fold(m.chunk, samples->second * o.staleness, scratch);
        Spill(c, payload, samples->second * o.staleness);
        ++report.stale_chunks_folded;
      }
      return;
    }
    if (c.folded[m.chunk]) return Exclude(c, "chunk " + std::to_string(m.chunk) + " sent twice", report);
    c.folded[m.chunk] = 1;
    aggregator.Fold(m.chunk, samples->second, scratch);
    Spill(c, payload, samples->second);
    ++c.report.chunks_folded;
  }

  // One event from the queue; `round` is the round in progress (nullptr while waiting for joins).
  void Handle(Event& e, FedRoundReport* round, uint64_t r) {
    if (e.client < 0) return Adopt(e);  // a client joining mid-round takes part from the next one
    Client& c = clients.at(e.client);
    if (!e.message.ok()) {
      if (c.lost) return;
      c.lost = true;
      if (round && c.participant && !c.ended)
        return Exclude(c, "connection lost: " + e.message.status().message(), *round);
      return Log("fed: " + c.name + " left: " + e.message.status().message());
    }
    if (e.message->type != MessageType::kFed) return;  // heartbeats and the like
    auto msg = FedMsg::Decode(e.message->payload);
    const bool current = round && c.participant && !c.ended && msg.ok() && msg->round == r;
    if (!msg.ok()) {
      if (round && c.participant) Exclude(c, "malformed message: " + msg.status().message(), *round);
      return;
    }
    switch (msg->kind) {
      case FedKind::kUpdateBegin:
        if (round && r > 1 && msg->round == r - 1 && c.late_round == r - 1 && msg->value > 0 &&
            std::isfinite(msg->value)) {
          c.samples[msg->round] = msg->value;  // a late update's weight, for its chunks to come
          return;
        }
        if (!current) return;
        if (!(msg->value > 0) || !std::isfinite(msg->value))
          return Exclude(c, "sample count " + std::to_string(msg->value), *round);
        c.samples[msg->round] = msg->value;
        c.report.samples = msg->value;
        c.samples.erase(c.samples.begin(), c.samples.lower_bound(r > 1 ? r - 1 : 0));
        return;
      case FedKind::kUpdateChunk:
        if (current) return OnChunk(c, *msg, e.message->payload, *round, false);
        if (round && r > 1 && msg->round == r - 1 && c.late_round == r - 1)
          return OnChunk(c, *msg, e.message->payload, *round, true);
        return;
      case FedKind::kUpdateEnd:
        if (!current) return;
        if (c.report.chunks_folded != chunks)
          return Exclude(c,
                         "ended its update with " + std::to_string(c.report.chunks_folded) + " of " +
                             std::to_string(chunks) + " chunks",
                         *round);
        c.report.folded = true;
        c.ended = true;
        c.report.update_s = Seconds(Clock::now() - round_start);
        return;
      default:
        if (round && c.participant)
          Exclude(c, "unexpected message kind " + std::to_string(static_cast<int>(msg->kind)), *round);
    }
  }

  FedRoundReport RunRound(uint64_t r) {
    FedRoundReport report;
    report.round = r;
    round_start = Clock::now();
    PrepareModel();
    for (uint32_t k = 0; k < chunks; ++k)
      report.model_chunks_changed += version == 0 || hashes[version][k] != hashes[version - 1][k];
    report.full_bf16_bytes = global.size() * 2;
    for (auto& [id, c] : clients) {
      c.participant = !c.lost;
      c.ended = !c.participant;
      c.report = FedClientReport{};
      c.report.name = c.name;
      c.folded.assign(chunks, 0);
      c.spill.reset(c.participant ? std::tmpfile() : nullptr);
      c.spilled = 0;
      if (c.participant && !c.spill)
        Log("fed: " + c.name + ": no temporary file: an exclusion this round cannot take its chunks back");
      if (c.participant) StartSender(c, r, round_start);
      // Late last round (kFold): what it had delivered by the deadline joins this round, stale.
      if (c.carry) {
        if (c.participant) report.stale_chunks_folded += Replay(c.carry.get(), o.staleness, &c);
        c.carry.reset();
      }
    }
    const auto deadline = round_start + o.deadline;
    auto open = [&] {
      for (auto& [id, c] : clients)
        if (c.participant && !c.ended) return true;
      return false;
    };
    while (open()) {
      auto e = Next(deadline);
      if (!e) {
        report.deadline_hit = true;
        break;
      }
      Handle(*e, &report, r);
    }
    for (auto& [id, c] : clients) {
      if (!c.participant || c.ended) continue;
      const std::string got =
          std::to_string(c.report.chunks_folded) + " of " + std::to_string(chunks) + " chunks";
      c.late_round = r;
      Exclude(c,
              "late: " + got + " by the deadline" +
                  (o.late == FedLatePolicy::kFold ? "; its update folds into the next round, stale" : ""),
              report);
      if (o.late == FedLatePolicy::kFold && !c.lost) c.carry = std::move(c.spill);
    }
    aggregator.ApplyTo(global);
    ++version;
    report.seconds = Seconds(Clock::now() - round_start);
    for (auto& [id, c] : clients) {
      if (!c.participant) continue;
      c.report.bytes_down = c.sent->bytes.load();
      c.report.download_s = c.sent->nanos.load() * 1e-9;
      report.bytes_down += c.report.bytes_down;
      report.bytes_up += c.report.bytes_up;
      report.clients.push_back(c.report);
    }
    return report;
  }

  std::vector<float> scratch;
  Clock::time_point round_start;
};

Result<std::vector<FedRoundReport>> FedServer::Run() {
  Impl& m = *impl_;
  m.acceptor = std::thread([&m] { m.Accept(); });
  const auto join_deadline = Clock::now() + m.o.join_timeout;
  auto connected = [&] {
    size_t n = 0;
    for (auto& [id, c] : m.clients) n += !c.lost;
    return n;
  };
  while (connected() < m.o.clients) {
    auto e = m.Next(join_deadline);
    if (!e)
      return Timeout(std::to_string(connected()) + " of " + std::to_string(m.o.clients) +
                     " clients joined within " + std::to_string(m.o.join_timeout.count()) + " ms");
    m.Handle(*e, nullptr, 0);
  }
  std::vector<FedRoundReport> out;
  for (uint64_t r = 1; r <= m.o.rounds; ++r) {
    if (connected() == 0) return Unavailable("round " + std::to_string(r) + ": no client is connected");
    m.Log("fed: round " + std::to_string(r) + " begins with " + std::to_string(connected()) + " client(s)");
    out.push_back(m.RunRound(r));
    const FedRoundReport& rep = out.back();
    size_t folded = 0;
    for (const auto& c : rep.clients) folded += c.folded;
    m.Log("fed: round " + std::to_string(r) + " done in " + std::to_string(rep.seconds) +
          " s: " + std::to_string(folded) + " of " + std::to_string(rep.clients.size()) + " updates folded");
    if (m.o.on_round) m.o.on_round(r, m.global);
  }
  for (auto& [id, c] : m.clients) {
    if (c.sender.joinable()) c.sender.join();
    // Best effort: the run is over either way; a client that misses the Bye sees the connection close.
    if (!c.lost) c.channel->Send(MessageType::kBye, {}).IgnoreError();
  }
  return out;
}

FedServer::FedServer(std::unique_ptr<ControlListener> listener, std::vector<float> initial,
                     FedServerOptions options)
    : impl_(std::make_unique<Impl>(std::move(listener), std::move(initial), std::move(options))) {}

FedServer::~FedServer() {
  Impl& m = *impl_;
  m.stopping = true;
  m.events.Close();  // readers waiting for room in the queue
  for (auto& [id, c] : m.clients) c.channel->Close();
  if (m.acceptor.joinable()) m.acceptor.join();
  for (auto& [id, c] : m.clients) {
    if (c.reader.joinable()) c.reader.join();
    if (c.sender.joinable()) c.sender.join();
  }
}

const std::string& FedServer::address() const { return impl_->listener->address(); }
std::span<const float> FedServer::global() const { return impl_->global; }
uint64_t FedServer::peak_state_bytes() const { return impl_->peak_bytes; }

}  // namespace weightport
