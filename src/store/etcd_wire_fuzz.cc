// libFuzzer target: arbitrary bytes as an etcd gateway's answer, through every parser of the store
// client (the answer object, header, key-values, a transaction's reads, the error mapping). Checks
// that nothing crashes or recurses without bound, and that every error message is short printable
// ASCII: an answer is whatever the endpoint sent, and its errors reach logs, terminals and Python.
// The first byte picks the HTTP status; the rest is the body. Seeds: fuzz/etcd_wire/.
#include <cstdlib>
#include <string>
#include <string_view>

#include "store/etcd_wire.h"
#include "weightport/core/printable.h"

namespace weightport::store_internal {
namespace {

void CheckMessage(const Status& s) {
  if (s.ok()) return;
  const std::string& m = s.message();
  if (m.size() > 2048 || !IsPrintableAscii(m)) std::abort();
}

template <typename T>
void Check(const Result<T>& r) {
  CheckMessage(r.status());
}

}  // namespace
}  // namespace weightport::store_internal

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace weightport::store_internal;
  if (size == 0) return 0;
  static constexpr long kStatuses[] = {200, 200, 404, 500, 503, 400, 429, 200};
  const long http = kStatuses[data[0] % 8];
  const std::string_view body(reinterpret_cast<const char*>(data + 1), size - 1);
  const std::string_view ctx = "etcd 127.0.0.1:2379: get '/weightport/s/live'";
  if (http != 200) {
    CheckMessage(GatewayError(http, body, ctx));
    return 0;
  }
  auto answer = ParseAnswer(body, ctx);
  Check(answer);
  if (!answer.ok()) return 0;
  Check(HeaderRevision(*answer, ctx));
  Check(ParseKvs(*answer, ctx));
  Check(ParseTxnAnswer(*answer, 1, ctx));
  Check(ParseTxnAnswer(*answer, 0, ctx));
  Check(Int64Field(*answer, "ID", ctx));
  return 0;
}
