#include "weightport/transport/ucx_transport.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <random>
#include <string>

#include "transport/ucx/ucx_internal.h"
#include "transport/ucx/ucx_status.h"
#include "weightport/core/memory_check.h"

namespace weightport::ucx {
namespace {

// The liveness word: peers on this host map it (through its rkey) and read it before using a
// connection; UCX alone does not notice that a peer in the same process closed or destroyed its
// worker, because shared-memory transports only watch the peer process.
constexpr size_t kLivenessBytes = 64;

uint64_t RandomId() {
  std::random_device device;
  return (static_cast<uint64_t>(device()) << 32) ^ device();
}

uint64_t Mix(uint64_t x) {  // splitmix64 finaliser: distinct inputs give distinct, spread outputs
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

// Whether UCX may load one of `names` given this transport list (UCX_TLS syntax: "all", names and
// aliases, or "^a,b" for all but those). Settings for a transport are given only then: UCX warns
// ("invalid configurations") about a setting that no loaded transport takes.
bool MayUse(const std::vector<std::string>& transports, std::initializer_list<std::string_view> names) {
  if (transports.empty()) return true;
  const bool excluding = !transports.front().empty() && transports.front().front() == '^';
  for (size_t i = 0; i < transports.size(); ++i) {
    const std::string_view t =
        i == 0 && excluding ? std::string_view(transports[i]).substr(1) : transports[i];
    if (t == "all") return true;
    for (std::string_view name : names)
      if (t == name) return !excluding;
  }
  return excluding;
}

std::string Join(const std::vector<std::string>& items) {
  std::string out;
  for (const std::string& item : items) out += (out.empty() ? "" : ",") + item;
  return out;
}

template <typename F>
std::string Capture(F print) {
  char* buffer = nullptr;
  size_t size = 0;
  FILE* stream = open_memstream(&buffer, &size);
  if (stream == nullptr) return {};
  print(stream);
  std::fclose(stream);
  std::string out(buffer, size);
  std::free(buffer);
  return out;
}

// UCX's configuration as it resolved it (the environment included), one "UCX_KEY=value" per line.
std::string PrintedConfig(ucp_config_t* config) {
  return Capture([&](FILE* f) { ucp_config_print(config, f, nullptr, UCS_CONFIG_PRINT_CONFIG); });
}

// One value of a PrintedConfig, e.g. "TLS" -> "all"; empty when it is not there.
std::string ConfigValue(const std::string& printed, const std::string& key) {
  const std::string prefix = "UCX_" + key + "=";
  for (size_t at = printed.find(prefix); at != std::string::npos; at = printed.find(prefix, at + 1)) {
    if (at != 0 && printed[at - 1] != '\n') continue;
    const size_t end = printed.find('\n', at);
    return printed.substr(at + prefix.size(),
                          end == std::string::npos ? std::string::npos : end - at - prefix.size());
  }
  return {};
}

std::vector<std::string> SplitCommas(const std::string& text) {
  std::vector<std::string> items;
  for (size_t begin = 0; begin <= text.size();) {
    const size_t comma = std::min(text.find(',', begin), text.size());
    if (comma > begin) items.push_back(text.substr(begin, comma - begin));
    begin = comma + 1;
  }
  return items;
}

}  // namespace

Result<std::unique_ptr<UcxTransport>> UcxTransport::Create(const UcxOptions& options) {
  std::unique_ptr<UcxTransport> transport(new UcxTransport());
  WP_RETURN_IF_ERROR(transport->Init(options));
  return transport;
}

Status UcxTransport::Init(const UcxOptions& options) {
  name_ = options.name;
  max_message_bytes_ = options.max_message_bytes;
  const bool sockets_only =
      !options.transports.empty() && std::all_of(options.transports.begin(), options.transports.end(),
                                                 [](const std::string& t) { return t == "tcp"; });
  spin_window_ = options.spin_window.value_or(std::chrono::microseconds(sockets_only ? 0 : 2000));
  if (name_.empty()) return InvalidArgument("ucx transport: empty name");
  if (name_.size() > kMaxNameBytes)
    return InvalidArgument("ucx transport: name of " + std::to_string(name_.size()) + " bytes (at most " +
                           std::to_string(kMaxNameBytes) + ")");
  if (max_message_bytes_ == 0) return InvalidArgument(Prefix() + "max_message_bytes is 0");
  id_ = RandomId();

  ucp_config_t* raw_config = nullptr;
  if (ucs_status_t s = ucp_config_read(nullptr, nullptr, &raw_config); s != UCS_OK)
    return UcxStatus(s, Prefix() + "ucp_config_read");
  std::unique_ptr<ucp_config_t, void (*)(ucp_config_t*)> config(raw_config, ucp_config_release);
  std::vector<std::pair<std::string, std::string>> settings;
  if (!options.transports.empty()) settings.emplace_back("TLS", Join(options.transports));
  // The transports UCX will consider: ours, else what the environment (UCX_TLS) says.
  const std::string printed = PrintedConfig(config.get());
  const std::vector<std::string> effective =
      !options.transports.empty() ? options.transports : SplitCommas(ConfigValue(printed, "TLS"));
  may_use_shm_ = MayUse(effective, {"sm", "shm", "mm", "posix", "sysv"});
  if (may_use_shm_) {
    // Peer-failure endpoints refuse shared-memory transports unless their error handling is on
    // (UCX_POSIX/SYSV_ERROR_HANDLING; "no peer failure handler" otherwise).
    settings.emplace_back("MM_ERROR_HANDLING", "y");
    // Puts and Gets to registered memory travel as Active Messages (software RMA), one FIFO element
    // each. On an oversubscribed host (load 8 on 2 cores) UCX's 8 KiB elements made that path crawl
    // (~0.03 GB/s, raw UCX); 32 KiB elements kept ~0.4-1.7 GB/s. Unloaded, both give ~4 GB/s. Not
    // 64 KiB: UCX 1.13 keeps the element length in 16 bits, and rendezvous then corrupts lengths.
    settings.emplace_back("MM_SEG_SIZE", "32832");  // 32 KiB payload + 64 bytes, like the default
  }
  // Not when UCX_NET_DEVICES narrows the devices: UCX may then open no TCP interface at all.
  const std::string devices = ConfigValue(printed, "NET_DEVICES");
  // Tuning that this UCX may not take: skipped, not an error, when ucp_config_modify refuses it.
  std::vector<std::pair<std::string, std::string>> optional_settings;
  if (MayUse(effective, {"tcp"}) && (devices.empty() || devices == "all")) {
    // Same for TCP: bigger segments, fewer software-RMA fragments (Put 0.66 -> 1.4 GB/s here).
    // UCX before 1.20 applies a transport's setting by its bare name (TX_SEG_SIZE) and keeps a
    // prefixed one unused, warning "invalid configuration" at every worker (openucx/ucx#8649);
    // 1.20 and later want the prefixed name and refuse what matches nothing.
    unsigned major = 0, minor = 0, release = 0;
    ucp_get_version(&major, &minor, &release);
    const std::string prefix = major > 1 || minor >= 20 ? "TCP_" : "";
    optional_settings.emplace_back(prefix + "TX_SEG_SIZE", "256K");
    optional_settings.emplace_back(prefix + "RX_SEG_SIZE", "256K");
  }
  if (options.keepalive_interval.count() > 0)
    settings.emplace_back("KEEPALIVE_INTERVAL", std::to_string(options.keepalive_interval.count()) + "ms");
  settings.insert(settings.end(), options.config.begin(), options.config.end());  // the caller's win
  for (const auto& [key, value] : optional_settings)
    (void)ucp_config_modify(config.get(), key.c_str(), value.c_str());
  for (const auto& [key, value] : settings) {
    if (ucs_status_t s = ucp_config_modify(config.get(), key.c_str(), value.c_str()); s != UCS_OK)
      return UcxStatus(s, Prefix() + "UCX setting " + key + "=" + value);
  }

  ucp_params_t params{};
  params.field_mask = UCP_PARAM_FIELD_FEATURES | UCP_PARAM_FIELD_NAME;
  params.features = UCP_FEATURE_RMA | UCP_FEATURE_AM | UCP_FEATURE_WAKEUP;
  params.name = name_.c_str();
  ucp_context_h context = nullptr;
  if (ucs_status_t s = ucp_init(&params, config.get(), &context); s != UCS_OK)
    return UcxStatus(s, Prefix() + "ucp_init (transports '" + Join(options.transports) + "')");
  context_ = std::make_shared<Context>(context, id_);
  ucp_context_attr_t context_attr{};
  context_attr.field_mask = UCP_ATTR_FIELD_MEMORY_TYPES;
  if (ucs_status_t s = ucp_context_query(context, &context_attr); s != UCS_OK)
    return UcxStatus(s, Prefix() + "ucp_context_query");
  memory_types_ = MemoryTypeNames(context_attr.memory_types);

  ucp_worker_params_t worker_params{};
  worker_params.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE | UCP_WORKER_PARAM_FIELD_NAME;
  // One thread at a time, not always the creating one: the owner may hand the transport to a
  // ProgressLoop thread after creating it.
  worker_params.thread_mode = UCS_THREAD_MODE_SERIALIZED;
  worker_params.name = name_.c_str();
  if (ucs_status_t s = ucp_worker_create(context, &worker_params, &worker_); s != UCS_OK)
    return UcxStatus(s, Prefix() + "ucp_worker_create");

  ucp_worker_attr_t attr{};
  attr.field_mask = UCP_WORKER_ATTR_FIELD_MAX_AM_HEADER | UCP_WORKER_ATTR_FIELD_ADDRESS;
  if (ucs_status_t s = ucp_worker_query(worker_, &attr); s != UCS_OK)
    return UcxStatus(s, Prefix() + "ucp_worker_query");
  const Bytes worker_address(reinterpret_cast<const std::byte*>(attr.address),
                             reinterpret_cast<const std::byte*>(attr.address) + attr.address_length);
  ucp_worker_release_address(worker_, attr.address);
  if (kHeaderFixedBytes + name_.size() > attr.max_am_header)
    return InvalidArgument(Prefix() + "name too long for a UCX message header (" +
                           std::to_string(attr.max_am_header) + " bytes)");
  if (ucs_status_t s = ucp_worker_get_efd(worker_, &event_fd_); s != UCS_OK)
    return UcxStatus(s, Prefix() + "ucp_worker_get_efd");

  ucp_am_handler_param_t handler{};
  handler.field_mask = UCP_AM_HANDLER_PARAM_FIELD_ID | UCP_AM_HANDLER_PARAM_FIELD_FLAGS |
                       UCP_AM_HANDLER_PARAM_FIELD_CB | UCP_AM_HANDLER_PARAM_FIELD_ARG;
  handler.id = kMessageId;
  handler.flags = UCP_AM_FLAG_WHOLE_MSG;
  handler.cb = &UcxTransport::OnMessage;
  handler.arg = this;
  if (ucs_status_t s = ucp_worker_set_am_recv_handler(worker_, &handler); s != UCS_OK)
    return UcxStatus(s, Prefix() + "ucp_worker_set_am_recv_handler");

  WP_ASSIGN_OR_RETURN(liveness_, UcxRegion::Map(context_, nullptr, kLivenessBytes, 0, /*allocate=*/true));
  std::atomic_ref<uint64_t>(*reinterpret_cast<uint64_t*>(liveness_->data()))
      .store(kLivenessAlive, std::memory_order_release);
  const std::span<const std::byte> liveness_rkey = DecodeKey(liveness_->remote_key().packed)->ucp_rkey;
  WireAddress address;
  address.transport_id = id_;
  address.liveness_address = liveness_->remote_key().address;
  address.liveness_rkey.assign(liveness_rkey.begin(), liveness_rkey.end());
  address.worker_address = worker_address;
  address_ = EncodeAddress(address);
  return Status::Ok();
}

UcxTransport::~UcxTransport() {
  if (worker_ != nullptr) {
    Close();
    // Nobody will call Progress() again: report the cancellations now, exactly once.
    while (!ready_.empty() || !finished_.empty()) RunReady();
    for (UcxConnection* conn : connections_) conn->Detach();
    connections_.clear();
    Quiesce();
    tearing_down_ = true;
    ucp_worker_destroy(worker_);
    worker_ = nullptr;
    context_->WorkerDestroyed();  // no request is served any more: retired regions can go
  }
  for (Op* op : ops_) delete op;
  ops_.clear();
  finished_.clear();
  liveness_.reset();  // before the context: it holds a reference
}

// Lets forced endpoint closes finish (they need no peer), then flushes the worker: endpoints that
// UCX made for peers connecting to us may still have wireup replies queued, and UCX 1.13 aborts
// (an assertion in ucp_request_send_state_ff) when ucp_worker_destroy purges such a reply.
// Bounded, for peers that stopped responding.
void UcxTransport::Quiesce() {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(500);
  while (closing_endpoints_ > 0 && std::chrono::steady_clock::now() < deadline) ucp_worker_progress(worker_);
  ucp_request_param_t param{};
  param.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
  param.cb.send = [](void* request, ucs_status_t, void* self) {
    static_cast<UcxTransport*>(self)->worker_flushed_ = true;  // also when completed in destroy
    ucp_request_free(request);
  };
  param.user_data = this;
  const ucs_status_ptr_t request = ucp_worker_flush_nbx(worker_, &param);
  if (!UCS_PTR_IS_PTR(request)) return;
  while (!worker_flushed_ && std::chrono::steady_clock::now() < deadline) ucp_worker_progress(worker_);
}

Result<std::unique_ptr<MemoryRegion>> UcxTransport::Register(void* data, size_t size) {
  if (closed_) return FailedPrecondition(Prefix() + "register: transport is closed");
  if (data == nullptr && size > 0) return InvalidArgument(Prefix() + "register of null memory");
  Result<std::unique_ptr<UcxRegion>> region = UcxRegion::Map(context_, data, size, next_region_id_++, false);
  if (!region.ok()) return region.status().WithContext("transport '" + name_ + "'");
  return std::unique_ptr<MemoryRegion>(std::move(region).value());
}

Result<std::unique_ptr<MemoryRegion>> UcxTransport::Allocate(size_t size) {
  if (closed_) return FailedPrecondition(Prefix() + "allocate: transport is closed");
  if (size == 0) return InvalidArgument(Prefix() + "allocate of 0 bytes");
  // Before UCX maps it: a segment larger than /dev/shm or RAM gets this process (or another) killed
  // while it is filled, and a posix segment file half made is never unlinked.
  WP_RETURN_IF_ERROR(CheckMemoryFits(size, may_use_shm_, Prefix() + "allocate"));
  Result<std::unique_ptr<UcxRegion>> region =
      UcxRegion::Map(context_, nullptr, size, next_region_id_++, true);
  if (!region.ok()) return region.status().WithContext("transport '" + name_ + "'");
  return std::unique_ptr<MemoryRegion>(std::move(region).value());
}

Result<std::shared_ptr<Connection>> UcxTransport::Connect(std::span<const std::byte> peer_address,
                                                          const std::string& peer_name) {
  if (closed_) return FailedPrecondition(Prefix() + "connect to '" + peer_name + "': transport is closed");
  const std::optional<WireAddress> address = DecodeAddress(peer_address);
  if (!address) return InvalidArgument(PeerPrefix(peer_name) + "not a UCX transport address");

  ucp_ep_params_t params{};
  params.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE |
                      UCP_EP_PARAM_FIELD_ERR_HANDLER | UCP_EP_PARAM_FIELD_NAME;
  params.address = reinterpret_cast<const ucp_address_t*>(address->worker_address.data());
  params.err_mode = UCP_ERR_HANDLING_MODE_PEER;
  params.err_handler.cb = &UcxTransport::OnEndpointError;
  params.err_handler.arg = this;
  params.name = peer_name.c_str();
  ucp_ep_h ep = nullptr;
  if (ucs_status_t s = ucp_ep_create(worker_, &params, &ep); s != UCS_OK)
    return UcxStatus(s, "connect (ucp_ep_create)", peer_name);

  auto conn = std::make_shared<UcxConnection>(this, peer_name, address->transport_id,
                                              Mix(id_ ^ Mix(next_stream_++)), ep);
  connections_.insert(conn.get());
  by_endpoint_[ep] = conn.get();
  // Map the peer's liveness word where shared memory reaches it; elsewhere (TCP) UCX reports a
  // closed peer itself, because its sockets close.
  if (!address->liveness_rkey.empty()) {
    ucp_rkey_h rkey = nullptr;
    void* word = nullptr;
    if (ucp_ep_rkey_unpack(ep, address->liveness_rkey.data(), &rkey) == UCS_OK) {
      if (ucp_rkey_ptr(rkey, address->liveness_address, &word) == UCS_OK) {
        conn->SetLiveness(rkey, static_cast<uint64_t*>(word));
      } else {
        ucp_rkey_destroy(rkey);
      }
    }
  }
  if (conn->PeerClosed()) {
    conn->Close();
    return Unavailable(PeerPrefix(peer_name) + "no live transport at that address (it was closed)");
  }
  return std::shared_ptr<Connection>(std::move(conn));
}

void UcxTransport::SetMessageHandler(MessageHandler handler) {
  handler_ = std::move(handler);
  Wake();  // messages may be waiting for a handler
}

void UcxTransport::Close() {
  if (closed_) return;
  closed_ = true;
  if (liveness_ != nullptr)
    std::atomic_ref<uint64_t>(*reinterpret_cast<uint64_t*>(liveness_->data()))
        .store(kLivenessClosed, std::memory_order_release);
  // Shutdown may not erase from connections_ (only the connection's destructor does).
  for (UcxConnection* conn : connections_) {
    conn->Shutdown(
        Cancelled(PeerPrefix(conn->peer()) + "connection closed: transport '" + name_ + "' closed"));
  }
  inbox_.clear();
  streams_.clear();
}

void UcxTransport::Forget(UcxConnection* conn) { connections_.erase(conn); }

void UcxTransport::CloseEndpoint(ucp_ep_h ep) {
  by_endpoint_.erase(ep);
  ucp_request_param_t param{};
  param.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS | UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
  param.flags = UCP_EP_CLOSE_FLAG_FORCE;
  param.cb.send = &UcxTransport::OnCloseDone;
  param.user_data = this;
  const ucs_status_ptr_t request = ucp_ep_close_nbx(ep, &param);
  if (UCS_PTR_IS_PTR(request)) ++closing_endpoints_;
}

std::string UcxTransport::Describe() const {
  if (worker_ == nullptr) return {};
  return Capture([&](FILE* f) { ucp_worker_print_info(worker_, f); });
}

}  // namespace weightport::ucx

namespace weightport {

Result<std::unique_ptr<Transport>> MakeUcxTransport(const UcxOptions& options) {
  WP_ASSIGN_OR_RETURN(auto transport, ucx::UcxTransport::Create(options));
  return std::unique_ptr<Transport>(std::move(transport));
}

Result<std::unique_ptr<MemoryRegion>> UcxAllocate(Transport& transport, size_t size) {
  auto* ucx = dynamic_cast<ucx::UcxTransport*>(&transport);
  if (ucx == nullptr)
    return InvalidArgument("UcxAllocate: transport '" + transport.name() + "' is not a UCX one");
  return ucx->Allocate(size);
}

std::string UcxDescribeConnection(Connection& connection) {
  auto* ucx = dynamic_cast<ucx::UcxConnection*>(&connection);
  if (ucx == nullptr || ucx->ep() == nullptr) return {};
  return ucx::Capture([&](FILE* f) { ucp_ep_print_info(ucx->ep(), f); });
}

std::string UcxDescribeTransport(Transport& transport) {
  auto* ucx = dynamic_cast<ucx::UcxTransport*>(&transport);
  return ucx == nullptr ? std::string() : ucx->Describe();
}

}  // namespace weightport
