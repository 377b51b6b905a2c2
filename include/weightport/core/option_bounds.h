// The bounds of the options users set, one table for every front end: the CLI checks its options
// with them and the Python package reads them (weightport._core.option_bounds()) and refuses the
// same values with the same words, so `chunk_bytes=1` or `relay_fanout=-5` is refused in both
// instead of crawling or failing later as something else.
//
// Thread-safety: constants and pure functions.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>

#include "weightport/core/status.h"

namespace weightport {

struct OptionBound {
  std::string_view name;  // as the Python API spells it
  double lo;
  double hi;
  bool integer;           // whole numbers only
  std::string_view unit;  // for messages: "bytes", "s", ""
  std::string_view zero;  // what 0 means when it lies outside [lo, hi] ("the default"); empty: nothing
};

// A plan session's chunk: the unit relays forward and chunks are verified by.
inline constexpr OptionBound kChunkBytesBound{"chunk_bytes", 4096,    double(uint64_t{1} << 30),
                                              true,          "bytes", "the default"};
inline constexpr OptionBound kRelayFanoutBound{"relay_fanout", 0, 1024, true, "", ""};
inline constexpr OptionBound kQuorumBound{"quorum", 0, double(1 << 20), true, "", ""};
// How long a rank waits for the others (joins, each version).
inline constexpr OptionBound kSessionTimeoutBound{"timeout", 0.5, 86400, false, "s", ""};
// One call's wait (wait(timeout=...)); 0 looks once.
inline constexpr OptionBound kWaitTimeoutBound{"wait timeout", 0, 86400 * 365.0, false, "s", ""};
inline constexpr OptionBound kPinTimeoutBound{"pin_timeout", 0, 86400, false, "s", ""};
inline constexpr OptionBound kLeaseTtlBound{"lease_ttl", 1, 600, true, "s", ""};
inline constexpr OptionBound kKeepVersionsBound{"keep_versions", 0, 16, true, "", ""};
inline constexpr OptionBound kMaxGbpsBound{"max_gbps", 0, 1e6, false, "Gbit/s", ""};
inline constexpr OptionBound kWorldSizeBound{"world_size", 1, double(1 << 20), true, "", ""};
inline constexpr OptionBound kRankBound{"rank", 0, double(1 << 20) - 1, true, "", ""};
inline constexpr OptionBound kPortBound{"port", 0, 65535, true, "", ""};
// An engine's place in a fleet of alike serving engines (the vLLM backend's replicas).
inline constexpr OptionBound kReplicasBound{"replicas", 1, double(1 << 20), true, "", ""};
inline constexpr OptionBound kReplicaBound{"replica", 0, double(1 << 20) - 1, true, "", ""};

inline constexpr std::array<OptionBound, 14> kOptionBounds = {
    kChunkBytesBound, kRelayFanoutBound, kQuorumBound,       kSessionTimeoutBound, kWaitTimeoutBound,
    kPinTimeoutBound, kLeaseTtlBound,    kKeepVersionsBound, kMaxGbpsBound,        kWorldSizeBound,
    kRankBound,       kPortBound,        kReplicasBound,     kReplicaBound};

// InvalidArgument naming the option, the value and the bounds unless `value` is finite, within
// them (or 0 where `zero` gives 0 a meaning), and whole where it must be.
Status CheckOption(const OptionBound& bound, double value);
// "chunk_bytes must be a whole number from 4096 to 1073741824 bytes (0: the default)".
std::string DescribeBound(const OptionBound& bound);

}  // namespace weightport
