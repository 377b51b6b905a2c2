#include "weightport/control/fed_messages.h"

#include <gtest/gtest.h>

#include "codec_test_util.h"

namespace weightport {
namespace {

using control_test::ExpectStrictRoundTrip;

TEST(FedMessagesTest, RoundTripsStrictly) {
  FedMsg fed;
  fed.kind = FedKind::kUpdateChunk;
  fed.round = 3;
  fed.chunk = 9;
  fed.value = 0.125;
  fed.compressed = 1;
  fed.raw_bytes = 4;
  fed.data = Bytes(4, std::byte{7});
  ExpectStrictRoundTrip(fed);
}

}  // namespace
}  // namespace weightport
