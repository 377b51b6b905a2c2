#include "etcd_wire.h"

#include <charconv>
#include <cstdio>

#include "base64.h"
#include "weightport/core/json_util.h"
#include "weightport/core/printable.h"

namespace weightport::store_internal {
namespace {

std::string FieldCtx(std::string_view ctx, std::string_view field) {
  return std::string(ctx) + ": field '" + std::string(field) + "'";
}

// A bytes field: base64 text, absent is empty.
Result<std::string> BytesField(const Json& obj, std::string_view field, std::string_view ctx) {
  auto it = obj.find(field);
  if (it == obj.end()) return std::string();
  if (!it->is_string()) return DataLoss(FieldCtx(ctx, field) + " is not a string");
  auto bytes = Base64Decode(it->get_ref<const std::string&>());
  if (!bytes) return DataLoss(FieldCtx(ctx, field) + " is not base64");
  return *std::move(bytes);
}

const Json* ObjectField(const Json& obj, std::string_view field) {
  auto it = obj.find(field);
  return it != obj.end() && it->is_object() ? &*it : nullptr;
}

// gRPC status codes (the gateway's "code") as weightport's.
Status FromGrpcCode(int64_t code, std::string message) {
  switch (code) {
    case 1:
      return Cancelled(std::move(message));
    case 3:
      return InvalidArgument(std::move(message));
    case 4:
      return Timeout(std::move(message));
    case 5:
      return NotFound(std::move(message));
    case 6:
      return AlreadyExists(std::move(message));
    case 7:
    case 16:
      return PermissionDenied(std::move(message));
    case 8:
      return ResourceExhausted(std::move(message));
    case 9:
      return FailedPrecondition(std::move(message));
    case 11:
      return OutOfRange(std::move(message));
    case 12:
      return Unimplemented(std::move(message));
    case 15:
      return DataLoss(std::move(message));
    default:
      return Unavailable(std::move(message));  // unknown, aborted, internal, unavailable
  }
}

}  // namespace

std::string PrintableKey(std::string_view key) { return Printable(key, 120); }

std::string PrefixEnd(std::string_view prefix) {
  std::string end(prefix);
  while (!end.empty()) {
    auto last = static_cast<unsigned char>(end.back());
    if (last < 0xff) {
      end.back() = static_cast<char>(last + 1);
      return end;
    }
    end.pop_back();  // "ab\xff" ends where "ac" begins
  }
  return std::string(1, '\0');
}

Result<Json> ParseAnswer(std::string_view text, std::string_view ctx) {
  auto answer = json_util::Parse(text, ctx);
  if (!answer.ok()) return DataLoss(answer.status().message());
  if (!answer->is_object())
    return DataLoss(std::string(ctx) + ": the answer is not a JSON object: " + Printable(text, 200));
  return answer;
}

Json RangeRequest(std::string_view key, std::string_view range_end) {
  Json req = {{"key", Base64Encode(key)}};
  if (!range_end.empty()) req["range_end"] = Base64Encode(range_end);
  return req;
}

Json PutRequest(std::string_view key, std::string_view value, int64_t lease) {
  Json req = {{"key", Base64Encode(key)}, {"value", Base64Encode(value)}};
  if (lease != 0) req["lease"] = std::to_string(lease);
  return req;
}

Json TxnRequest(const EtcdTxn& txn) {
  Json compare = Json::array();
  for (const auto& c : txn.compares) {
    Json one = {{"key", Base64Encode(c.key)}, {"result", "EQUAL"}};
    if (c.mod_revision == 0) {  // absent: created at revision 0
      one["target"] = "CREATE";
      one["create_revision"] = "0";
    } else {
      one["target"] = "MOD";
      one["mod_revision"] = std::to_string(c.mod_revision);
    }
    compare.push_back(std::move(one));
  }
  Json success = Json::array();
  for (const auto& p : txn.puts) success.push_back({{"request_put", PutRequest(p.key, p.value, p.lease)}});
  Json failure = Json::array();
  for (const auto& key : txn.reads) failure.push_back({{"request_range", RangeRequest(key)}});
  return {{"compare", std::move(compare)}, {"success", std::move(success)}, {"failure", std::move(failure)}};
}

Result<int64_t> Int64Field(const Json& obj, std::string_view field, std::string_view ctx) {
  auto it = obj.find(field);
  if (it == obj.end()) return int64_t{0};
  if (it->is_number_integer() && !it->is_number_unsigned()) return it->get<int64_t>();
  if (it->is_number_unsigned() && it->get<uint64_t>() <= uint64_t{INT64_MAX})
    return static_cast<int64_t>(it->get<uint64_t>());
  if (it->is_string()) {
    const auto& s = it->get_ref<const std::string&>();
    int64_t v = 0;
    auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
    if (ec == std::errc() && end == s.data() + s.size() && !s.empty()) return v;
  }
  return DataLoss(FieldCtx(ctx, field) + " is not an int64: " + json_util::Excerpt(*it));
}

Result<int64_t> HeaderRevision(const Json& answer, std::string_view ctx) {
  const Json* header = ObjectField(answer, "header");
  if (header == nullptr)
    return DataLoss(std::string(ctx) + ": the answer has no header: " + json_util::Excerpt(answer));
  return Int64Field(*header, "revision", ctx);
}

Result<EtcdKeyValue> ParseKeyValue(const Json& kv, std::string_view ctx) {
  if (!kv.is_object()) return DataLoss(std::string(ctx) + ": a key-value is not an object");
  EtcdKeyValue out;
  WP_ASSIGN_OR_RETURN(out.key, BytesField(kv, "key", ctx));
  WP_ASSIGN_OR_RETURN(out.value, BytesField(kv, "value", ctx));
  WP_ASSIGN_OR_RETURN(out.create_revision, Int64Field(kv, "create_revision", ctx));
  WP_ASSIGN_OR_RETURN(out.mod_revision, Int64Field(kv, "mod_revision", ctx));
  WP_ASSIGN_OR_RETURN(out.version, Int64Field(kv, "version", ctx));
  WP_ASSIGN_OR_RETURN(out.lease, Int64Field(kv, "lease", ctx));
  return out;
}

Result<std::vector<EtcdKeyValue>> ParseKvs(const Json& range_answer, std::string_view ctx) {
  std::vector<EtcdKeyValue> out;
  auto it = range_answer.find("kvs");
  if (it == range_answer.end()) return out;
  if (!it->is_array()) return DataLoss(FieldCtx(ctx, "kvs") + " is not an array");
  for (const auto& kv : *it) {
    WP_ASSIGN_OR_RETURN(EtcdKeyValue one, ParseKeyValue(kv, ctx));
    out.push_back(std::move(one));
  }
  return out;
}

Result<EtcdTxnResult> ParseTxnAnswer(const Json& answer, size_t reads, std::string_view ctx) {
  EtcdTxnResult out;
  WP_ASSIGN_OR_RETURN(out.revision, HeaderRevision(answer, ctx));
  auto ok = answer.find("succeeded");  // left out when false
  if (ok != answer.end() && !ok->is_boolean()) return DataLoss(FieldCtx(ctx, "succeeded") + " is not a bool");
  out.succeeded = ok != answer.end() && ok->get<bool>();
  if (out.succeeded) return out;
  auto responses = answer.find("responses");
  size_t n = responses != answer.end() && responses->is_array() ? responses->size() : 0;
  if (n != reads)
    return DataLoss(std::string(ctx) + ": " + std::to_string(n) + " responses for " + std::to_string(reads) +
                    " reads: " + json_util::Excerpt(answer));
  for (size_t i = 0; i < n; ++i) {
    const Json* range = ObjectField((*responses)[i], "response_range");
    if (range == nullptr)
      return DataLoss(std::string(ctx) + ": response " + std::to_string(i) + " is no range");
    WP_ASSIGN_OR_RETURN(std::vector<EtcdKeyValue> kvs, ParseKvs(*range, ctx));
    if (kvs.empty()) {
      out.reads.emplace_back(std::nullopt);
    } else {
      out.reads.emplace_back(std::move(kvs.front()));
    }
  }
  return out;
}

Status GatewayError(long http_status, std::string_view body, std::string_view ctx) {
  std::string prefix = std::string(ctx) + ": ";
  auto parsed = json_util::Parse(body, ctx);
  const Json j = parsed.ok() ? *std::move(parsed) : Json();
  if (j.is_object()) {
    // {"error": "text", "code": n}; a streaming call (lease keepalive) nests an object in "error".
    const Json* err = &j;
    if (const Json* nested = ObjectField(j, "error")) err = nested;
    auto message = err->find("message");
    std::string text = message != err->end() && message->is_string()
                           ? Printable(message->get_ref<const std::string&>(), 300)
                           : json_util::Excerpt(j, 300);
    auto code = Int64Field(*err, err == &j ? "code" : "grpc_code", ctx);
    if (code.ok() && *code != 0) return FromGrpcCode(*code, prefix + text);
  }
  std::string start(body.substr(0, 200));
  std::string msg = prefix + "HTTP " + std::to_string(http_status) + ": " + PrintableKey(start);
  if (http_status == 404)
    return Unimplemented(msg + " (no v3 JSON gateway here: etcd 3.4 or newer serves it)");
  if (http_status >= 500) return Unavailable(msg);
  return DataLoss(msg);
}

}  // namespace weightport::store_internal
