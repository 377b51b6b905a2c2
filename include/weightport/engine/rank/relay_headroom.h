// The inbound cap a relaying destination keeps below its NIC's rate.
//
// Over a socket transport a Get is a request that travels to the rank holding the bytes. A relay
// (a destination another destination reads from) that itself reads from two or more peers on other
// hosts takes their flows in on one link; TCP then keeps that link's queue full, and the requests
// of the ranks reading from the relay wait in it, behind its own inbound data. On the testbed
// (fsdp4 -> 2 x TP 2, 1 Gbit/s) the downstream replica read at ~half the line rate while its relay
// was receiving, and at the line rate once it was done. Holding the relay's fetches a little under
// its link's rate keeps that queue short.
#pragma once

#include "weightport/plan/plan.h"

namespace weightport {

// The default share of the NIC such a relay leaves free.
inline constexpr double kDefaultRelayHeadroom = 0.08;

// (1 - headroom) x the NIC rate of `me`'s host, in bytes per second, when `me` is a destination
// that relays and reads from two or more ranks on other hosts; 0 (no cap) otherwise, and for
// headroom <= 0. Errors: headroom >= 1, or `me` not a destination rank of the plan.
Result<double> RelayInboundCap(const Plan& plan, Endpoint me, double headroom);

}  // namespace weightport
