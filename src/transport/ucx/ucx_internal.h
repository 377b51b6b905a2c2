// Internals of the UCX transport: the objects behind Transport, Connection and MemoryRegion.
//
// Ownership and lifetimes (all on the transport's owning thread):
//  - Context owns the ucp_context; the transport and every region hold it, so a region may outlive
//    its transport (ucp_mem_unmap needs only the context).
//  - UcxTransport owns the worker, the Ops UCX still holds, and the message streams. It knows its
//    live connections; a connection that outlives it is detached and fails its calls.
//  - An Op is one started operation. It stays in its connection's pending set until its Completion
//    runs (in a later Progress(), also when UCX finished it at once), so Close() can still cancel it.
//    The Completion moves out exactly once: when the finished op is reported, or when its connection
//    closes or is lost (the op is then "abandoned": whoever sees it next, UCX's callback or the
//    finished queue, only frees it).
#pragma once

#include <ucp/api/ucp.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "transport/ucx/ucx_wire.h"
#include "weightport/core/thread_annotations.h"
#include "weightport/transport/transport.h"
#include "weightport/transport/ucx_transport.h"

namespace weightport::ucx {

class UcxConnection;
class UcxTransport;

// The names (UCX's: "host", "cuda", ...) of the memory types in a ucp_context_attr_t memory_types
// mask (ucx_memory_types.cc).
std::vector<std::string> MemoryTypeNames(uint64_t mask);

struct Context {
  Context(ucp_context_h h, uint64_t id) : handle(h), transport_id(id) {}
  ~Context() {
    WorkerDestroyed();
    ucp_cleanup(handle);
  }
  Context(const Context&) = delete;
  Context& operator=(const Context&) = delete;

  // Memory UCX allocated for a region that is released while the transport's worker lives. The
  // worker may still serve a peer's request already on its way (over TCP a Get is answered by this
  // worker from the region's address, and UCX does not check the key), so the memory stays mapped,
  // and is never handed to anything else, until the worker is destroyed.
  void Retire(ucp_mem_h memh) {
    MutexLock lock(mu);
    if (worker_alive) {
      retired.push_back(memh);
    } else {
      ucp_mem_unmap(handle, memh);
    }
  }
  void WorkerDestroyed() {
    MutexLock lock(mu);
    worker_alive = false;
    for (ucp_mem_h memh : retired) ucp_mem_unmap(handle, memh);
    retired.clear();
  }

  const ucp_context_h handle;
  const uint64_t transport_id;
  Mutex mu;
  bool worker_alive GUARDED_BY(mu) = true;
  std::vector<ucp_mem_h> retired GUARDED_BY(mu);
};

class UcxRegion final : public MemoryRegion {
 public:
  // Registers [data, data + size), or with `allocate` lets UCX allocate `size` bytes (data ignored).
  static Result<std::unique_ptr<UcxRegion>> Map(std::shared_ptr<Context> context, void* data, size_t size,
                                                uint64_t region_id, bool allocate);
  ~UcxRegion() override;
  std::byte* data() const override { return data_; }
  size_t size() const override { return size_; }
  const RemoteKey& remote_key() const override { return key_; }
  ucp_mem_h memh() const { return memh_; }
  const Context* context() const { return context_.get(); }

 private:
  UcxRegion(std::shared_ptr<Context> context, std::byte* data, size_t size, ucp_mem_h memh, bool allocated)
      : context_(std::move(context)), data_(data), size_(size), memh_(memh), allocated_(allocated) {}
  std::shared_ptr<Context> context_;
  std::byte* data_;
  size_t size_;
  ucp_mem_h memh_;  // null for an empty region
  bool allocated_;  // UCX allocated the memory (UcxAllocate): retired, not unmapped, while the worker lives
  RemoteKey key_;
};

struct Op {
  UcxTransport* transport = nullptr;
  UcxConnection* conn = nullptr;  // null for receives, and once the connection let go of the op
  Completion done;                // empty once reported
  const char* what = "";
  void* request = nullptr;  // UCX's request, until its callback
  bool finished = false;    // UCX is done with it; it waits in the finished queue
  Status result;            // when finished
  Bytes header, payload;    // a Send's bytes, alive until UCX is done with them
  // A rendezvous receive: which message of which stream it fills.
  uint64_t stream = 0, seq = 0;
  Bytes buffer;
};

// A same-host peer's memory that UCX mapped here (POSIX / SysV shared memory) is read with plain
// loads. The first read of each 2 MiB block enters its pages into this process's page tables in
// one call, instead of one fault per 4 KiB page: a first read of a newly mapped region (a new peer,
// or a publisher's new grant each version) ran at ~1 GB/s, held up by faults. Later reads skip the
// call (walking present page tables again cost warm reads about a fifth of their speed). Any
// thread: two readers of one block may both enter it, which is harmless and rarer than a lock.
class PagePopulator {
 public:
  PagePopulator(const std::byte* base, uint64_t size);
  // Enters the whole blocks [offset, +length) touches, those not entered yet.
  void Prepare(uint64_t offset, uint64_t length) const;
  const std::byte* base() const { return base_; }
  uint64_t size() const { return size_; }

 private:
  static constexpr uint64_t kBlock = 2 << 20;  // granularity of "already populated"
  const std::byte* base_;
  uint64_t size_;
  std::unique_ptr<std::atomic<bool>[]> done_;  // per kBlock
};

// A same-host peer's region as UCX mapped it into this process (ucp_rkey_ptr over an rkey of its
// own). The rkey is destroyed with it, on the loop thread, while the transport's worker lives; after
// the worker is gone it is left (the worker's pool it came from is gone too) and stays mapped.
class UcxMappedPeerRegion final : public MappedPeerRegion {
 public:
  UcxMappedPeerRegion(std::shared_ptr<Context> context, ucp_rkey_h rkey, const std::byte* base,
                      uint64_t size);
  ~UcxMappedPeerRegion() override;
  const std::byte* data() const override { return pages_.base(); }
  uint64_t size() const override { return pages_.size(); }
  void Prepare(uint64_t offset, uint64_t length) const override { pages_.Prepare(offset, length); }

 private:
  std::shared_ptr<Context> context_;
  ucp_rkey_h rkey_;
  PagePopulator pages_;  // the mapping: where and how large, and which of its pages are entered
};

class UcxConnection final : public Connection {
 public:
  UcxConnection(UcxTransport* transport, std::string peer, uint64_t peer_id, uint64_t stream_id, ucp_ep_h ep);
  ~UcxConnection() override;

  const std::string& peer() const override { return peer_; }
  void Put(const MemoryRegion& src, uint64_t src_offset, const RemoteKey& dst, uint64_t dst_offset,
           uint64_t length, Completion done) override;
  void Get(const MemoryRegion& dst, uint64_t dst_offset, const RemoteKey& src, uint64_t src_offset,
           uint64_t length, Completion done) override;
  std::shared_ptr<const MappedPeerRegion> Map(const RemoteKey& key) override;
  void Flush(Completion done) override;
  void Send(Bytes message, Completion done) override;
  void Close() override;
  bool healthy() const override;

  // For the transport.
  void SetLiveness(ucp_rkey_h rkey, uint64_t* word);
  bool PeerClosed() const;  // the peer's liveness word says it closed
  bool has_pending() const { return !pending_.empty(); }
  bool watches_liveness() const { return liveness_ != nullptr; }
  void MarkLost(const std::string& why);  // fails pending ops with kUnavailable, closes the endpoint
  void Shutdown(const Status& cancel);    // closes, failing pending ops with `cancel`
  void Detach();                          // the transport is going away
  Status OpStatus(const Op& op, ucs_status_t status) const;
  void Finish(Op* op, Status result);  // UCX is done with `op`: report it in the next Progress()
  void OpFinished(Op* op) { pending_.erase(op); }
  ucp_ep_h ep() const { return ep_; }

 private:
  Status Usable() const;
  void Rma(bool put, const MemoryRegion& local, uint64_t local_offset, const RemoteKey& key,
           uint64_t remote_offset, uint64_t length, Completion done);
  Result<ucp_rkey_h> Rkey(const WireKey& key, const char* verb);
  void PopulateMapped(uint64_t region_id, ucp_rkey_h rkey, const RemoteKey& key, uint64_t offset,
                      uint64_t length);
  static constexpr uint64_t kPopulateMin = 64 << 10;  // smaller reads fault in a few pages at most
  // Hands a started request to UCX's care, or completes the op if UCX finished at once.
  void Launch(Op* op, ucs_status_ptr_t started);
  void ReleaseEndpoint();

  UcxTransport* transport_;  // null once detached
  const std::string peer_;
  const uint64_t peer_id_;
  const uint64_t stream_id_;
  uint64_t next_seq_ = 0;
  ucp_ep_h ep_;  // null once closed or lost
  ucp_rkey_h liveness_rkey_ = nullptr;
  uint64_t* liveness_ = nullptr;                    // the peer's liveness word, mapped (same-host shm only)
  std::unordered_map<uint64_t, ucp_rkey_h> rkeys_;  // by the peer's region id
  // The pages of the regions Gets read, by the peer's region id, from its first Get: null where UCX
  // did not map the region here (it then copies through the transport).
  std::unordered_map<uint64_t, std::unique_ptr<PagePopulator>> mappings_;
  // Regions handed out by Map, by the peer's region id: one mapping per region for the connection's
  // life, so that its pages are entered once, not per fetch.
  std::unordered_map<uint64_t, std::shared_ptr<UcxMappedPeerRegion>> mapped_;
  std::unordered_set<Op*> pending_;
  bool closed_ = false;
  Status lost_;  // not OK once the peer was found lost
};

class UcxTransport final : public Transport {
 public:
  static Result<std::unique_ptr<UcxTransport>> Create(const UcxOptions& options);
  ~UcxTransport() override;

  const std::string& name() const override { return name_; }
  Bytes address() const override { return address_; }
  size_t max_message_bytes() const override { return max_message_bytes_; }
  Result<std::unique_ptr<MemoryRegion>> Register(void* data, size_t size) override;
  bool TakesMemory(std::string_view memory_type) const override {
    return std::find(memory_types_.begin(), memory_types_.end(), memory_type) != memory_types_.end();
  }
  Result<std::shared_ptr<Connection>> Connect(std::span<const std::byte> peer_address,
                                              const std::string& peer_name) override;
  void SetMessageHandler(MessageHandler handler) override;
  size_t Progress() override;
  void WaitForEvent(std::chrono::milliseconds timeout) override;
  void Wake() override;
  void Close() override;

  Result<std::unique_ptr<MemoryRegion>> Allocate(size_t size) override;
  std::string Describe() const;

  // For connections.
  bool closed() const { return closed_; }
  const Context* context() const { return context_.get(); }
  const std::shared_ptr<Context>& shared_context() const { return context_; }
  ucp_worker_h worker() const { return worker_; }
  void Ready(Completion done, Status status);         // runs `done` in the next Progress()
  void Finished(Op* op) { finished_.push_back(op); }  // reports the op in the next Progress()
  Op* NewOp(UcxConnection* conn, Completion done, const char* what);
  void DeleteOp(Op* op);
  void Track(Op* op, void* request);  // UCX now holds `request` for op
  void Untrack(Op* op);               // UCX called back for op's request
  ucp_request_param_t SendParam(Op* op) const;
  void CloseEndpoint(ucp_ep_h ep);
  void Forget(UcxConnection* conn);
  std::string Prefix() const { return "transport '" + name_ + "': "; }

 private:
  UcxTransport() = default;
  Status Init(const UcxOptions& options);
  void Quiesce();  // before ucp_worker_destroy

  // UCX callbacks (ucx_progress.cc); they only record, Progress() acts after ucp_worker_progress.
  static void OnSendDone(void* request, ucs_status_t status, void* user_data);
  static void OnReceiveDone(void* request, ucs_status_t status, size_t length, void* user_data);
  static void OnCloseDone(void* request, ucs_status_t status, void* user_data);
  static void OnEndpointError(void* arg, ucp_ep_h ep, ucs_status_t status);
  static ucs_status_t OnMessage(void* arg, const void* header, size_t header_length, void* data,
                                size_t length, const ucp_am_recv_param_t* param);
  ucs_status_t HandleMessage(std::span<const std::byte> header, void* data, size_t length,
                             const ucp_am_recv_param_t& param);
  void StartReceives();
  void HandleLostPeers();
  size_t RunReady();
  size_t Deliver();

  // In-order delivery per sending connection (stream).
  struct Parked {
    enum class State { kWaiting, kReady, kDropped } state = State::kWaiting;
    std::string from;
    Bytes data;
  };
  struct Stream {
    uint64_t next = 0;
    std::map<uint64_t, Parked> parked;
  };
  void Park(uint64_t stream, uint64_t seq, Parked parked);
  void Settle(uint64_t stream, uint64_t seq, Parked::State state, Bytes data);

  std::string name_;
  size_t max_message_bytes_ = 0;
  std::chrono::microseconds spin_window_{0};  // UcxOptions::spin_window
  uint64_t id_ = 0;
  uint64_t next_region_id_ = 1;
  uint64_t next_stream_ = 0;
  std::shared_ptr<Context> context_;
  ucp_worker_h worker_ = nullptr;
  int event_fd_ = -1;
  Bytes address_;
  std::vector<std::string> memory_types_;  // what this context registers (ucp_context_query)
  bool may_use_shm_ = false;               // Allocate may then take /dev/shm (posix transport)
  std::unique_ptr<UcxRegion> liveness_;    // one word peers on this host read to see we closed
  bool closed_ = false;
  bool tearing_down_ = false;  // in ucp_worker_destroy: callbacks only free requests
  bool worker_flushed_ = false;

  std::unordered_set<Op*> ops_;                          // every op UCX may still call back
  size_t in_flight_ = 0;                                 // ops whose UCX request has not called back
  std::chrono::steady_clock::time_point last_activity_;  // last time UCX made progress for us
  size_t closing_endpoints_ = 0;
  std::unordered_set<UcxConnection*> connections_;
  std::unordered_map<ucp_ep_h, UcxConnection*> by_endpoint_;
  std::vector<std::pair<ucp_ep_h, ucs_status_t>> failed_endpoints_;
  std::deque<std::pair<Completion, Status>> ready_;
  std::deque<Op*> finished_;

  MessageHandler handler_;
  std::vector<std::pair<void*, Op*>> receives_to_start_;  // rendezvous descriptors
  std::unordered_map<uint64_t, Stream> streams_;
  std::deque<std::pair<std::string, Bytes>> inbox_;  // in order, waiting for the handler
};

}  // namespace weightport::ucx
