#include "weightport/store/etcd_client.h"

#include <arpa/inet.h>
#include <curl/curl.h>
#include <netinet/in.h>

#include <cctype>
#include <charconv>
#include <mutex>

#include "etcd_wire.h"
#include "weightport/core/json_util.h"
#include "weightport/core/printable.h"
#include "weightport/core/thread_annotations.h"

namespace weightport {

using store_internal::Json;

namespace {

constexpr std::string_view kSchemes[] = {"etcd://", "http://"};

// Appends what curl receives, up to a limit.
struct Sink {
  std::string* out;
  size_t max;
  bool too_large = false;
};

size_t WriteToSink(char* data, size_t size, size_t n, void* user) {
  auto* sink = static_cast<Sink*>(user);
  if (sink->out->size() + n > sink->max) {
    sink->too_large = true;
    return 0;  // curl fails the transfer with CURLE_WRITE_ERROR
  }
  sink->out->append(data, n);
  return n;
}

Status GlobalInit() {
  static CURLcode rc = curl_global_init(CURL_GLOBAL_DEFAULT);  // once, before any handle
  if (rc != CURLE_OK) return Internal(std::string("curl_global_init: ") + curl_easy_strerror(rc));
  return Status::Ok();
}

std::string KeyCtx(std::string_view op, std::string_view key) {
  return std::string(op) + " '" + store_internal::PrintableKey(key) + "'";
}

std::string LeaseCtx(std::string_view op, int64_t lease) {
  return std::string(op) + " lease " + std::to_string(lease);
}

// A DNS name or an IPv4 address: dot-separated labels of 1-63 letters, digits, '-' or '_', none
// starting or ending with '-' ("-", "a..b" and "-x" cannot be resolved; curl would try anyway).
bool IsHostName(std::string_view host) {
  if (host.empty() || host.size() > 253) return false;
  size_t start = 0;
  while (start <= host.size()) {
    size_t end = host.find('.', start);
    if (end == std::string_view::npos) end = host.size();
    const std::string_view label = host.substr(start, end - start);
    if (label.empty() || label.size() > 63 || label.front() == '-' || label.back() == '-') return false;
    for (char c : label)
      if (!std::isalnum(static_cast<unsigned char>(c)) && c != '-' && c != '_') return false;
    start = end + 1;
  }
  return true;
}

}  // namespace

Result<std::string> ParseEtcdEndpoint(std::string_view text) {
  const auto bad = [&](std::string_view why) {
    return InvalidArgument("etcd endpoint '" + store_internal::PrintableKey(text) + "': " + std::string(why));
  };
  std::string_view rest = text;
  for (std::string_view scheme : kSchemes) {
    if (rest.starts_with(scheme)) rest.remove_prefix(scheme.size());
  }
  if (rest.find("://") != std::string_view::npos)
    return bad("the scheme is not etcd:// or http:// (TLS is not supported)");
  if (rest.ends_with('/')) rest.remove_suffix(1);
  size_t colon = rest.rfind(':');
  if (colon == std::string_view::npos) return bad("expected host:port");
  std::string_view host = rest.substr(0, colon), port_text = rest.substr(colon + 1);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    const std::string_view inner = host.substr(1, host.size() - 2);
    in6_addr parsed{};
    if (inet_pton(AF_INET6, std::string(inner).c_str(), &parsed) != 1) return bad("bad IPv6 address");
  } else if (!IsHostName(host)) {
    return bad(
        "bad host name (letters, digits, '-' and '_' in dot-separated labels, none starting "
        "or ending with '-')");
  }
  unsigned port = 0;
  auto [end, ec] = std::from_chars(port_text.data(), port_text.data() + port_text.size(), port);
  if (ec != std::errc() || end != port_text.data() + port_text.size() || port == 0 || port > 65535)
    return bad("the port is not a number from 1 to 65535");
  return std::string(host) + ":" + std::to_string(port);
}

struct EtcdClient::Impl {
  std::string endpoint;
  std::string base_url;
  EtcdClientOptions options;
  curl_slist* headers = nullptr;  // set once before any call
  Mutex mu;
  CURL* curl GUARDED_BY(mu) = nullptr;

  ~Impl() {
    MutexLock lock(mu);
    if (curl != nullptr) curl_easy_cleanup(curl);
    curl_slist_free_all(headers);
  }

  std::string Ctx(std::string_view what) const { return "etcd " + endpoint + ": " + std::string(what); }

  // POSTs `body` to `path` and parses etcd's answer. A streaming call's answer is a line per
  // message: only the first is read.
  Result<Json> Call(std::string_view path, const Json& body, std::string_view what, bool stream = false)
      EXCLUDES(mu) {
    const std::string ctx = Ctx(what);
    const std::string request = json_util::Dump(body);
    const std::string url = base_url + std::string(path);
    std::string response;
    Sink sink{&response, options.max_response_bytes};
    char error[CURL_ERROR_SIZE] = {};
    long http = 0;
    CURLcode rc;
    {
      MutexLock lock(mu);
      curl_easy_setopt(curl, CURLOPT_URL, url.c_str());
      curl_easy_setopt(curl, CURLOPT_POSTFIELDS, request.data());
      curl_easy_setopt(curl, CURLOPT_POSTFIELDSIZE_LARGE, static_cast<curl_off_t>(request.size()));
      curl_easy_setopt(curl, CURLOPT_WRITEDATA, &sink);
      curl_easy_setopt(curl, CURLOPT_ERRORBUFFER, error);
      rc = curl_easy_perform(curl);
      if (rc == CURLE_OK) curl_easy_getinfo(curl, CURLINFO_RESPONSE_CODE, &http);
      // Nothing of this call may stay pointed at by the handle.
      curl_easy_setopt(curl, CURLOPT_ERRORBUFFER, nullptr);
      curl_easy_setopt(curl, CURLOPT_WRITEDATA, nullptr);
      curl_easy_setopt(curl, CURLOPT_POSTFIELDS, nullptr);
    }
    if (rc != CURLE_OK) {
      std::string detail = error[0] != '\0' ? error : curl_easy_strerror(rc);
      switch (rc) {
        case CURLE_OPERATION_TIMEDOUT:
          return Timeout(ctx + ": no answer within " + std::to_string(options.request_timeout.count()) +
                         " ms (" + detail + ")");
        case CURLE_COULDNT_CONNECT:
        case CURLE_COULDNT_RESOLVE_HOST:
          return Unavailable(ctx + ": cannot connect: " + detail);
        case CURLE_WRITE_ERROR:
          if (sink.too_large)
            return ResourceExhausted(ctx + ": the answer is larger than " +
                                     std::to_string(options.max_response_bytes) + " bytes");
          [[fallthrough]];
        default:
          return Unavailable(ctx + ": " + detail);
      }
    }
    std::string_view text = response;
    if (stream && http == 200) text = text.substr(0, text.find('\n'));
    if (http != 200) return store_internal::GatewayError(http, text, ctx);
    WP_ASSIGN_OR_RETURN(Json answer, store_internal::ParseAnswer(text, ctx));
    // A streaming call reports its error inside a 200 answer, as an object; a lease grant's answer
    // has a field "error" of text, empty (left out) unless the grant failed.
    auto err = answer.find("error");
    if (err != answer.end()) {
      if (!err->is_string()) return store_internal::GatewayError(http, text, ctx);
      if (!err->get_ref<const std::string&>().empty())
        return Unavailable(ctx + ": " + Printable(err->get_ref<const std::string&>(), 300));
    }
    return answer;
  }
};

Result<std::unique_ptr<EtcdClient>> EtcdClient::Create(std::string_view endpoint, EtcdClientOptions options) {
  WP_ASSIGN_OR_RETURN(std::string canonical, ParseEtcdEndpoint(endpoint));
  if (options.connect_timeout.count() <= 0 || options.request_timeout.count() <= 0)
    return InvalidArgument("etcd " + canonical + ": timeouts must be positive");
  WP_RETURN_IF_ERROR(GlobalInit());
  auto impl = std::make_unique<Impl>();
  impl->endpoint = canonical;
  impl->base_url = "http://" + canonical;
  impl->options = options;
  CURL* curl = curl_easy_init();
  if (curl == nullptr) return ResourceExhausted("etcd " + canonical + ": curl_easy_init failed");
  for (const char* h : {"Content-Type: application/json", "Expect:"}) {  // "Expect:": no 100-continue wait
    curl_slist* next = curl_slist_append(impl->headers, h);
    if (next == nullptr) {
      curl_easy_cleanup(curl);
      return ResourceExhausted("etcd " + canonical + ": curl_slist_append failed");
    }
    impl->headers = next;
  }
  curl_easy_setopt(curl, CURLOPT_NOSIGNAL, 1L);  // no SIGALRM: other threads run beside
  curl_easy_setopt(curl, CURLOPT_PROXY, "");     // never a proxy from the environment
  curl_easy_setopt(curl, CURLOPT_PROTOCOLS_STR, "http");
  curl_easy_setopt(curl, CURLOPT_POST, 1L);
  curl_easy_setopt(curl, CURLOPT_HTTPHEADER, impl->headers);
  curl_easy_setopt(curl, CURLOPT_CONNECTTIMEOUT_MS, static_cast<long>(options.connect_timeout.count()));
  curl_easy_setopt(curl, CURLOPT_TIMEOUT_MS, static_cast<long>(options.request_timeout.count()));
  curl_easy_setopt(curl, CURLOPT_WRITEFUNCTION, WriteToSink);
  {
    MutexLock lock(impl->mu);
    impl->curl = curl;
  }
  return std::unique_ptr<EtcdClient>(new EtcdClient(std::move(impl)));
}

EtcdClient::EtcdClient(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
EtcdClient::~EtcdClient() = default;

const std::string& EtcdClient::endpoint() const { return impl_->endpoint; }

Result<std::optional<EtcdKeyValue>> EtcdClient::Get(std::string_view key) {
  const std::string what = KeyCtx("get", key);
  WP_ASSIGN_OR_RETURN(Json answer, impl_->Call("/v3/kv/range", store_internal::RangeRequest(key), what));
  WP_ASSIGN_OR_RETURN(std::vector<EtcdKeyValue> kvs, store_internal::ParseKvs(answer, impl_->Ctx(what)));
  if (kvs.empty()) return std::optional<EtcdKeyValue>();
  if (kvs.size() != 1 || kvs[0].key != key) return DataLoss(impl_->Ctx(what) + ": the answer is another key");
  return std::optional<EtcdKeyValue>(std::move(kvs[0]));
}

Result<std::vector<EtcdKeyValue>> EtcdClient::GetPrefix(std::string_view prefix) {
  const std::string what = KeyCtx("get prefix", prefix);
  // etcd refuses an empty key: "\0" up to "\0" is every key.
  const std::string start = prefix.empty() ? std::string(1, '\0') : std::string(prefix);
  WP_ASSIGN_OR_RETURN(
      Json answer, impl_->Call("/v3/kv/range",
                               store_internal::RangeRequest(start, store_internal::PrefixEnd(prefix)), what));
  return store_internal::ParseKvs(answer, impl_->Ctx(what));
}

Result<int64_t> EtcdClient::Put(std::string_view key, std::string_view value, int64_t lease) {
  const std::string what = KeyCtx("put", key);
  WP_ASSIGN_OR_RETURN(Json answer,
                      impl_->Call("/v3/kv/put", store_internal::PutRequest(key, value, lease), what));
  return store_internal::HeaderRevision(answer, impl_->Ctx(what));
}

Result<bool> EtcdClient::Delete(std::string_view key) {
  const std::string what = KeyCtx("delete", key);
  WP_ASSIGN_OR_RETURN(Json answer,
                      impl_->Call("/v3/kv/deleterange", store_internal::RangeRequest(key), what));
  WP_ASSIGN_OR_RETURN(int64_t deleted, store_internal::Int64Field(answer, "deleted", impl_->Ctx(what)));
  return deleted > 0;
}

Result<bool> EtcdClient::PutIf(std::string_view key, std::string_view value, int64_t expected_mod_revision,
                               int64_t lease) {
  EtcdTxn txn;
  txn.compares.push_back({std::string(key), expected_mod_revision});
  txn.puts.push_back({std::string(key), std::string(value), lease});
  WP_ASSIGN_OR_RETURN(EtcdTxnResult result, Txn(txn));
  return result.succeeded;
}

Result<EtcdTxnResult> EtcdClient::Txn(const EtcdTxn& txn) {
  std::string what = "txn";
  for (size_t i = 0; i < txn.compares.size() && i < 3; ++i)
    what += (i == 0 ? " '" : ", '") + store_internal::PrintableKey(txn.compares[i].key) + "'";
  if (txn.compares.size() > 3) what += ", ...";
  WP_ASSIGN_OR_RETURN(Json answer, impl_->Call("/v3/kv/txn", store_internal::TxnRequest(txn), what));
  return store_internal::ParseTxnAnswer(answer, txn.reads.size(), impl_->Ctx(what));
}

Result<int64_t> EtcdClient::GrantLease(int64_t ttl_s) {
  const std::string what = "grant a lease of " + std::to_string(ttl_s) + " s";
  if (ttl_s <= 0) return InvalidArgument(impl_->Ctx(what) + ": the TTL must be positive");
  WP_ASSIGN_OR_RETURN(Json answer,
                      impl_->Call("/v3/lease/grant", Json{{"TTL", std::to_string(ttl_s)}}, what));
  WP_ASSIGN_OR_RETURN(int64_t id, store_internal::Int64Field(answer, "ID", impl_->Ctx(what)));
  if (id == 0) return DataLoss(impl_->Ctx(what) + ": the answer has no lease id");
  return id;
}

Result<int64_t> EtcdClient::KeepAliveOnce(int64_t lease) {
  const std::string what = LeaseCtx("keep alive", lease);
  WP_ASSIGN_OR_RETURN(Json answer,
                      impl_->Call("/v3/lease/keepalive", Json{{"ID", std::to_string(lease)}}, what,
                                  /*stream=*/true));
  auto result = answer.find("result");  // a streaming call's message is wrapped
  if (result == answer.end() || !result->is_object())
    return DataLoss(impl_->Ctx(what) + ": the answer has no result: " + json_util::Excerpt(answer));
  WP_ASSIGN_OR_RETURN(int64_t ttl, store_internal::Int64Field(*result, "TTL", impl_->Ctx(what)));
  // An unknown or expired lease is answered 200 with no TTL (proto3 leaves a 0 out), not an error.
  if (ttl <= 0) return NotFound(impl_->Ctx(what) + ": the lease has expired or was revoked");
  return ttl;
}

Status EtcdClient::Revoke(int64_t lease) {
  const std::string what = LeaseCtx("revoke", lease);
  WP_ASSIGN_OR_RETURN(Json answer,
                      impl_->Call("/v3/lease/revoke", Json{{"ID", std::to_string(lease)}}, what));
  (void)answer;
  return Status::Ok();
}

}  // namespace weightport
