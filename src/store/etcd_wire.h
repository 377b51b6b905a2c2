// The JSON of etcd's v3 gateway: request bodies and the parsing of answers, with no I/O.
// Internal to the store layer.
//
// The gateway speaks proto3's JSON mapping: bytes are base64 strings, int64 fields are JSON
// strings of digits, and a field at its zero value (0, false, "", an empty list) is left out, so an
// absent field reads as zero here. Errors come back as {"error": "...", "code": <gRPC code>}.
//
// Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "weightport/core/status.h"
#include "weightport/store/etcd_client.h"

namespace weightport::store_internal {

using Json = nlohmann::json;

// A key for an error message: printable ASCII kept, other bytes as \xNN, cut at 120 characters.
std::string PrintableKey(std::string_view key);
// The range_end that makes a range read every key starting with `prefix` ("\0": every key).
std::string PrefixEnd(std::string_view prefix);

// The JSON object of an answer with HTTP 200: depth-bounded (json_util::Parse); anything else is
// DataLoss quoting a short printable excerpt. `ctx` leads the message.
Result<Json> ParseAnswer(std::string_view text, std::string_view ctx);

Json RangeRequest(std::string_view key, std::string_view range_end = {});
Json PutRequest(std::string_view key, std::string_view value, int64_t lease);
Json TxnRequest(const EtcdTxn& txn);

// An int64 field: a string of digits or a number; absent is 0. `ctx` names the answer in errors.
Result<int64_t> Int64Field(const Json& obj, std::string_view field, std::string_view ctx);
// header.revision of an answer.
Result<int64_t> HeaderRevision(const Json& answer, std::string_view ctx);
Result<EtcdKeyValue> ParseKeyValue(const Json& kv, std::string_view ctx);
// The "kvs" of a range answer (absent: none).
Result<std::vector<EtcdKeyValue>> ParseKvs(const Json& range_answer, std::string_view ctx);
Result<EtcdTxnResult> ParseTxnAnswer(const Json& answer, size_t reads, std::string_view ctx);

// The Status for an answer that is not HTTP 200: the gateway's error body mapped from its gRPC
// code, or the HTTP status and the start of the body when it is not one. `ctx` leads the message;
// what the gateway said is quoted printable and short (it may be anything a hostile endpoint sent).
Status GatewayError(long http_status, std::string_view body, std::string_view ctx);

}  // namespace weightport::store_internal
