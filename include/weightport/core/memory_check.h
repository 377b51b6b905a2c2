// Checks that an allocation fits the memory this machine has left, before making it. A mapping of
// more than that succeeds (overcommit) and then the kernel's out-of-memory killer picks a victim,
// often not us; shared memory in /dev/shm outlives a killed owner. So every large arena asks first.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "weightport/core/status.h"

namespace weightport {

struct MemoryAvailability {
  uint64_t ram_available = 0;            // MemAvailable in /proc/meminfo
  std::optional<uint64_t> shm_free;      // free bytes in /dev/shm (tmpfs), when it exists
  std::optional<uint64_t> cgroup_left;   // memory.max - memory.current of this cgroup, when limited
  std::optional<uint64_t> address_left;  // RLIMIT_AS (ulimit -v) - VmSize, when limited
};

// Reads this machine's figures; fields it cannot read stay empty (ram_available: 0 means unknown).
MemoryAvailability QueryMemoryAvailability();

// Refuses `bytes` for `what` when it exceeds 90% of what is available (RAM, the cgroup's limit,
// the address-space limit, and for `shared` memory also /dev/shm), naming the size and each figure. Unknown
// figures do not refuse anything.
Status CheckMemoryFits(uint64_t bytes, bool shared, std::string_view what, const MemoryAvailability& have);
Status CheckMemoryFits(uint64_t bytes, bool shared, std::string_view what);

}  // namespace weightport
