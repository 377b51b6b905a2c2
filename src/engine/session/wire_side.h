// A plan side as the control messages carry it (one byte: 0 source, 1 destination; the control
// layer knows nothing of plans), in one place instead of at each message.
#pragma once

#include <cstdint>

#include "weightport/plan/topology.h"

namespace weightport {

inline uint8_t WireSide(PlanSide side) { return side == PlanSide::kSource ? 0 : 1; }

// Any byte but 0 reads as a destination, as every message decoder always has.
inline PlanSide SideFromWire(uint8_t side) { return side == 0 ? PlanSide::kSource : PlanSide::kDestination; }

inline Endpoint EndpointFromWire(uint8_t side, uint32_t rank) {
  return Endpoint{SideFromWire(side), static_cast<int>(rank)};
}

}  // namespace weightport
