// Transport: one-sided access to a peer's registered memory, plus small control messages.
//
// Model (UCX's, and NIXL's): a process registers a few large memory regions once and hands each
// region's RemoteKey to its peers through the control plane; a peer then Puts into or Gets from
// that memory with no involvement of the owner's CPU. Control messages (Send) are small, ordered
// per connection, and delivered to the receiver's message handler.
//
// Threading: a Transport and everything it creates are owned by ONE progress loop (the thread that
// calls Progress()). Every method below must be called on that thread; completions and handlers
// run on it, inside Progress(). Other threads hand work to that thread with ProgressLoop (see
// progress_loop.h). This is how UCX workers are meant to be driven and keeps the hot path lock-free.
//
// Completion contract: every operation started (Put, Get, Flush, Send) completes exactly once: OK,
// or with an error naming the peer. Close() on a connection or transport completes every pending
// operation with kCancelled (or the connection's failure) exactly once, and later operations on it
// complete with kFailedPrecondition. Completions may run before the starting call returns only if
// the operation fails immediately; a successful operation completes inside a later Progress().
// A Put's completion is local (its source may be reused); its data is guaranteed at the peer only
// once a later Flush completes. A Get's completion means the data is in local memory.
//
// Error codes: out-of-bounds operations and oversize messages fail with kInvalidArgument or
// kOutOfRange and move nothing; operations on a closed connection or transport fail with
// kFailedPrecondition (Register and Connect too, after Transport::Close); operations towards a lost
// peer fail with kUnavailable. Destroying a Connection closes it. Messages that arrive before a
// handler is set are kept until one is set.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "weightport/core/status.h"

namespace weightport {

using Bytes = std::vector<std::byte>;
using Completion = std::function<void(const Status&)>;

// What a peer needs to access one registered region.
struct RemoteKey {
  uint64_t address = 0;  // start of the region in the owner's address space
  uint64_t length = 0;
  Bytes packed;  // backend-specific key (UCX: packed rkey)

  // Wire form: address, length, packed size (little-endian u64 each), packed bytes.
  Bytes Serialize() const;
  // Strict: errors on truncation or trailing bytes; `what` names the source in errors.
  static Result<RemoteKey> Deserialize(std::span<const std::byte> bytes, std::string_view what);
  friend bool operator==(const RemoteKey&, const RemoteKey&) = default;
};

// A registered region. Destroying it deregisters the memory; peers' keys then become invalid.
class MemoryRegion {
 public:
  virtual ~MemoryRegion() = default;
  virtual std::byte* data() const = 0;
  virtual size_t size() const = 0;
  virtual const RemoteKey& remote_key() const = 0;
};

// A peer's registered region mapped into this process (a same-host peer's shared memory), read with
// plain loads: from any thread, while the object lives. The bytes are the peer's live memory, so a
// reader verifies what it copied, as after a Get. Destroy it on the transport's loop thread.
class MappedPeerRegion {
 public:
  virtual ~MappedPeerRegion() = default;
  virtual const std::byte* data() const = 0;
  virtual uint64_t size() const = 0;
  // Readies [offset, +length) for reads at memory speed: a newly mapped range's pages entered in
  // one call rather than a fault per page. Any thread; cheap once a range was prepared.
  virtual void Prepare(uint64_t offset, uint64_t length) const {
    (void)offset;
    (void)length;
  }
};

// A connection to one peer, created by Transport::Connect.
class Connection {
 public:
  virtual ~Connection() = default;
  // The peer's name as given to Connect, used in every error about it.
  virtual const std::string& peer() const = 0;

  // Writes [src_offset, +length) of the local region into [dst_offset, +length) of the peer's
  // region. Bounds are checked against both regions before anything is sent.
  virtual void Put(const MemoryRegion& src, uint64_t src_offset, const RemoteKey& dst, uint64_t dst_offset,
                   uint64_t length, Completion done) = 0;
  // Reads [src_offset, +length) of the peer's region into the local region at dst_offset.
  virtual void Get(const MemoryRegion& dst, uint64_t dst_offset, const RemoteKey& src, uint64_t src_offset,
                   uint64_t length, Completion done) = 0;
  // The region of `key` mapped into this process when the peer shares this host's memory with it,
  // so that a reader can copy (and hash) on threads of its own instead of Getting through this
  // loop; null when it cannot be mapped (another host, or a transport that does not map).
  virtual std::shared_ptr<const MappedPeerRegion> Map(const RemoteKey& key) {
    (void)key;
    return nullptr;
  }
  // Completes once every Put started earlier on this connection is complete at the peer.
  virtual void Flush(Completion done) = 0;
  // Sends a control message (at most Transport::max_message_bytes()); delivered in order.
  virtual void Send(Bytes message, Completion done) = 0;
  // Fails every pending operation with kCancelled, exactly once each. Idempotent.
  virtual void Close() = 0;
  // False once closed or once the peer was found lost.
  virtual bool healthy() const = 0;
};

// A received control message: who sent it (the sender's Transport name) and the bytes.
using MessageHandler = std::function<void(const std::string& from, Bytes message)>;

class Transport {
 public:
  virtual ~Transport() = default;

  // This transport's name (e.g. "rank3" or "sub-1@host"), carried with each message it sends.
  virtual const std::string& name() const = 0;
  // Opaque bytes a peer passes to Connect to reach this transport (exchanged via the control plane).
  virtual Bytes address() const = 0;
  virtual size_t max_message_bytes() const = 0;

  // Registers [data, data + size) for remote access. One registration per arena, not per tensor.
  virtual Result<std::unique_ptr<MemoryRegion>> Register(void* data, size_t size) = 0;
  // Memory of `size` bytes that the transport allocates and registers itself, where it can give
  // peers a cheaper way to it than to memory registered from outside (UCX: memory that same-host
  // peers map, so that their Get is one memcpy). Unimplemented where it cannot (the default): the
  // caller then allocates memory of its own and registers it.
  virtual Result<std::unique_ptr<MemoryRegion>> Allocate(size_t size) {
    return Unimplemented("transport '" + name() + "' does not allocate memory (" + std::to_string(size) +
                         " bytes asked): register memory of your own");
  }
  // Whether Register takes memory of `memory_type` ("host", "cuda": UCX's names) as it is, so that
  // peers' Gets and Puts read and write it there (a GPU's memory: a CUDA-aware UCX).
  virtual bool TakesMemory(std::string_view memory_type) const = 0;
  // Opens a connection to the transport at `peer_address`. `peer_name` names it in errors.
  virtual Result<std::shared_ptr<Connection>> Connect(std::span<const std::byte> peer_address,
                                                      const std::string& peer_name) = 0;
  // Handler for control messages from any peer; runs inside Progress().
  virtual void SetMessageHandler(MessageHandler handler) = 0;

  // Runs ready completions and handlers; returns how many events it handled. Never blocks.
  virtual size_t Progress() = 0;
  // Blocks until an event may be ready, Wake() is called, or `timeout` passes.
  virtual void WaitForEvent(std::chrono::milliseconds timeout) = 0;
  // Makes a concurrent or later WaitForEvent return. The only method callable from any thread.
  virtual void Wake() = 0;

  // Closes every connection (see Connection::Close) and stops accepting work.
  virtual void Close() = 0;
};

}  // namespace weightport
