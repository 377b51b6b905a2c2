// The store client against a gateway that answers nonsense on purpose: nested 100,000 deep, bytes
// that are not UTF-8, escape sequences, a 200 with no header. Every call fails with a weightport
// error whose message is short printable ASCII; nothing crashes (a deep answer used to overflow the
// stack in the error path's recursive dump).
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "canned_http_server.h"
#include "weightport/core/printable.h"
#include "weightport/store/etcd_client.h"

namespace weightport {
namespace {

struct Answer {
  int http;
  std::string body;
};

std::vector<Answer> HostileAnswers() {
  const std::string deep = std::string(100000, '[') + std::string(100000, ']');
  return {
      {500, "{\"x\":" + deep + "}"},
      {200, "{\"x\":" + deep + "}"},                                        // no header
      {200, "{\"header\":{\"revision\":" + deep + "}}"},                    // a field nested deep
      {500, "\xff\xfe not json"},                                           // not UTF-8
      {500, "{\"error\":\"\xff\xfe\",\"code\":14}"},                        // a message not UTF-8
      {500, "{\"error\":\"\\u001b[2J\\n{\\\"event\\\":1}\",\"code\":14}"},  // escapes, a forged line
      {200, "{\"kvs\":[{\"key\":\"\\u001b\"}]}"},                           // no header, a key not base64
      {200, "{\"header\":{\"revision\":\"\xff\"}}"},
      {200, "{\"header\":{\"revision\":\"\\u001b\"},\"error\":\"\\u001b]0;title\\u0007\"}"},
      {404, std::string("\x1b[31m") + std::string(5000, 'x')},
  };
}

bool IsShortPrintableAscii(const std::string& s) { return s.size() <= 1024 && IsPrintableAscii(s); }

TEST(EtcdHostileAnswerTest, EveryCallFailsWithAShortPrintableError) {
  for (const Answer& a : HostileAnswers()) {
    const std::string label = std::to_string(a.http) + " " + a.body.substr(0, 40);
    store_test::CannedHttpServer gateway(a.http, a.body);
    ASSERT_TRUE(gateway.Start().ok());
    auto client = EtcdClient::Create(gateway.endpoint());
    ASSERT_TRUE(client.ok());
    std::vector<Status> errors = {(*client)->Get("/weightport/s/live").status(),
                                  (*client)->GetPrefix("/weightport/").status(),
                                  (*client)->Put("/weightport/s/k", "v").status(),
                                  (*client)->GrantLease(5).status(), (*client)->KeepAliveOnce(7).status()};
    for (const Status& e : errors) {
      EXPECT_FALSE(e.ok()) << label;
      EXPECT_TRUE(IsShortPrintableAscii(e.message())) << label << ": " << e.message().substr(0, 300);
      EXPECT_NE(e.message().find("etcd " + gateway.endpoint()), std::string::npos) << e.message();
    }
    EXPECT_GE(gateway.requests(), 5) << label;
  }
}

}  // namespace
}  // namespace weightport
