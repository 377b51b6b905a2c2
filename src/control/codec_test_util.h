// Test helpers for the control messages' codecs: a byte string from text and the strict round trip
// every payload type must pass.
#pragma once

#include <gtest/gtest.h>

#include <span>
#include <string>
#include <string_view>

#include "weightport/control/protocol.h"
#include "weightport/control/validate_payload.h"

namespace weightport::control_test {

inline Bytes B(std::string_view s) {
  auto v = std::as_bytes(std::span(s.data(), s.size()));
  return Bytes(v.begin(), v.end());
}

template <typename M>
void ExpectStrictRoundTrip(const M& m) {
  SCOPED_TRACE(std::string(MessageTypeName(M::kType)));
  Bytes bytes = m.Encode();
  auto back = M::Decode(bytes);
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_TRUE(*back == m);
  EXPECT_TRUE(ValidatePayload(M::kType, bytes).ok());
  // Every truncation and one trailing byte are refused as InvalidArgument.
  for (size_t n = 0; n < bytes.size(); ++n) {
    auto cut = M::Decode(ByteView(bytes).first(n));
    ASSERT_FALSE(cut.ok()) << "prefix " << n;
    EXPECT_EQ(cut.status().code(), StatusCode::kInvalidArgument);
  }
  Bytes longer = bytes;
  longer.push_back(std::byte{0});
  auto trailing = M::Decode(longer);
  ASSERT_FALSE(trailing.ok());
  EXPECT_NE(trailing.status().message().find("trailing"), std::string::npos) << trailing.status().ToString();
}

}  // namespace weightport::control_test
