// A small client for etcd's v3 API through its HTTP/JSON gateway (etcd 3.4 serves it on the
// client port: POST /v3/kv/range, /v3/kv/put, /v3/kv/txn, /v3/lease/grant, ...), over libcurl.
//
// Keys and values are bytes (any byte, NUL included): the gateway carries them base64-encoded. Every
// call is bounded by the options' timeouts and returns a Status whose message names the endpoint,
// the operation and the key: "etcd 127.0.0.1:2379: get '/weightport/s/live': cannot connect: ...".
// Codes: Unavailable when etcd cannot be reached or answers that it is unavailable (connection
// refused fails at once, it does not wait for the timeout), Timeout when it does not answer in time,
// NotFound for a lease it does not know, InvalidArgument for a request it refuses, DataLoss for an
// answer that is not what the gateway sends. No call is retried: a put whose answer was lost may
// have been applied, and only the caller knows whether repeating it is safe.
//
// Thread-safety: an EtcdClient may be used from any number of threads. It holds one connection
// (one curl handle) behind a mutex, so calls from several threads run one at a time.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "weightport/core/status.h"

namespace weightport {

struct EtcdClientOptions {
  // To set up the TCP connection. Connection refused fails at once regardless.
  std::chrono::milliseconds connect_timeout{2000};
  // A whole call: connecting, sending, etcd's answer.
  std::chrono::milliseconds request_timeout{5000};
  // The largest answer taken (a prefix read of many keys); larger fails with ResourceExhausted.
  size_t max_response_bytes = size_t{64} << 20;
};

// One key as etcd stores it. Revisions are etcd's: the store's revision when the key was created
// and last modified; `version` counts modifications since creation; `lease` is 0 for none.
struct EtcdKeyValue {
  std::string key;
  std::string value;
  int64_t create_revision = 0;
  int64_t mod_revision = 0;
  int64_t version = 0;
  int64_t lease = 0;
};

// A condition of a transaction: the key's mod_revision equals `mod_revision`, or, when that is 0,
// the key does not exist.
struct EtcdCompare {
  std::string key;
  int64_t mod_revision = 0;
};

struct EtcdPut {
  std::string key;
  std::string value;
  int64_t lease = 0;  // 0: none; else the key goes when the lease does
};

// An atomic transaction: when every compare holds, every put is applied (one new revision); when
// one does not, nothing is written and each key of `reads` is read instead, in the same revision.
struct EtcdTxn {
  std::vector<EtcdCompare> compares;
  std::vector<EtcdPut> puts;
  std::vector<std::string> reads;
};

struct EtcdTxnResult {
  bool succeeded = false;
  int64_t revision = 0;  // the store's revision after the transaction
  // When !succeeded: one entry per EtcdTxn::reads, in order; nullopt for a key that does not exist.
  std::vector<std::optional<EtcdKeyValue>> reads;
};

// The endpoint in canonical form "host:port" from "host:port", "etcd://host:port" or
// "http://host:port" (host a name, an IPv4 address or a bracketed IPv6 address). InvalidArgument
// names the text otherwise (TLS, https://, is not supported).
Result<std::string> ParseEtcdEndpoint(std::string_view text);

class EtcdClient {
 public:
  // Checks the endpoint and prepares the connection; does not contact etcd.
  static Result<std::unique_ptr<EtcdClient>> Create(std::string_view endpoint,
                                                    EtcdClientOptions options = {});
  ~EtcdClient();
  EtcdClient(const EtcdClient&) = delete;
  EtcdClient& operator=(const EtcdClient&) = delete;

  const std::string& endpoint() const;  // "127.0.0.1:2379"

  // nullopt when the key does not exist.
  Result<std::optional<EtcdKeyValue>> Get(std::string_view key);
  // Every key that starts with `prefix` (all keys for ""), in key order.
  Result<std::vector<EtcdKeyValue>> GetPrefix(std::string_view prefix);
  // Writes unconditionally; returns the store's revision after the write. `lease` 0: none.
  Result<int64_t> Put(std::string_view key, std::string_view value, int64_t lease = 0);
  // True when the key existed.
  Result<bool> Delete(std::string_view key);
  // Compare-and-swap: writes when the key's mod_revision is `expected_mod_revision` (0: when it
  // does not exist). False, with nothing written, when it is not.
  Result<bool> PutIf(std::string_view key, std::string_view value, int64_t expected_mod_revision,
                     int64_t lease = 0);
  Result<EtcdTxnResult> Txn(const EtcdTxn& txn);

  // A lease of `ttl_s` seconds (etcd raises a TTL below its minimum, about 1.5 election timeouts,
  // to that minimum); returns its id.
  Result<int64_t> GrantLease(int64_t ttl_s);
  // Renews the lease once; returns the seconds it now has. NotFound when it has expired or was
  // revoked (its keys are gone).
  Result<int64_t> KeepAliveOnce(int64_t lease);
  // Ends the lease and deletes its keys. NotFound when it has already expired or was revoked.
  Status Revoke(int64_t lease);

 private:
  struct Impl;  // etcd_client.cc: the curl handle and its mutex
  explicit EtcdClient(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace weightport
