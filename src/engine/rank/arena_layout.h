// ArenaLayout: where everything one rank of a Plan keeps lives in its one registered arena, computed
// from the plan alone, so every rank knows every other rank's layout without exchanging offsets.
//
//   [copy 0 | copy 1 (destinations only) | hash area | counters | local scratch]
//
//   copy c      the rank's RankBuffer (a source: one copy, where the trainer writes; a destination:
//               live and staging, which Commit swaps), then its packed areas: a source's wire area
//               per step it converts (plan.h, TransformKind), a destination's landing area per
//               step converted at it; relays serve their landing areas to the next hop; and
//               compressed slots (SlotBytes each) per compressed step: a source's, filled when
//               it publishes, and each receiver's, which a relay serves to the next hop
//               compressed
//   hash area   (sources only) a 16-byte header {published version, HashAreaCheck} then one
//               16-byte entry {xxh3-64 of the chunk, its compressed length or 0 when it travels
//               as is} per chunk of every step sent from this source, in step order
//   counters    (destinations only) one 16-byte slot per incoming step that another step relays
//               from: {EncodeCounter(version, staging copy, verified prefix), CounterCheck of it}
//   scratch     this rank's private landing space: mirrors of the hash areas of the sources its
//               steps are rooted at, and one slot per incoming relay step for counter polls
// Only the first three parts are read by peers; scratch differs per rank and is never read remotely.
//
// Thread-safety: a plain value.
#pragma once

#include <cstdint>
#include <map>
#include <utility>
#include <vector>

#include "weightport/core/status.h"
#include "weightport/plan/plan.h"

namespace weightport::arena_layout {

inline constexpr uint64_t kHashHeaderBytes = 16;
inline constexpr uint64_t kHashEntryBytes = 16;  // {hash, compressed length}
// A counter slot holds the word and a check of it. A poll that reads a torn slot or a corrupted
// one fails the check and counts as no news; a bad copy bit or prefix taken as true would send the
// reader to the wrong copy, or ahead of the relay, until it gave up on a chunk that was fine.
inline constexpr uint64_t kCounterBytes = 16;

// Step id -> a number, in step order. A plan of millions of steps has about one entry per step
// per rank involved, so a sorted vector (16 bytes an entry, found by binary search) rather than a
// tree node per entry: cutting every rank's part of such a plan reads and writes these tables.
class StepMap {
 public:
  using value_type = std::pair<uint32_t, uint64_t>;
  // Sets `step`'s value: O(1) when steps come in ascending order (as a plan lists them), else
  // O(size) to keep the order.
  void Set(uint32_t step, uint64_t value);
  // `step`'s value, or null.
  const uint64_t* Find(uint32_t step) const;
  bool count(uint32_t step) const { return Find(step) != nullptr; }
  // `step`'s value; std::out_of_range when it has none, as std::map::at.
  uint64_t at(uint32_t step) const;
  size_t size() const { return entries_.size(); }
  bool empty() const { return entries_.empty(); }
  void reserve(size_t n) { entries_.reserve(n); }
  std::vector<value_type>::const_iterator begin() const { return entries_.begin(); }
  std::vector<value_type>::const_iterator end() const { return entries_.end(); }
  friend bool operator==(const StepMap&, const StepMap&) = default;

 private:
  std::vector<value_type> entries_;  // ascending by step
};

struct ArenaLayout {
  Endpoint endpoint;
  uint64_t data_bytes = 0;  // one copy with its packed areas, rounded up to 64
  StepMap area_offset;      // step id -> its wire or landing area, within a copy
  StepMap slot_offset;      // compressed step id -> its slots, within a copy
  int copies = 1;
  uint64_t hash_offset = 0;  // the hash area's header
  uint64_t hash_bytes = 0;   // header + hashes; 0 when the rank sends nothing from a source
  StepMap hash_slot;         // step id -> index of its chunk 0's hash
  uint64_t counter_offset = 0;
  StepMap counter_slot;       // incoming step id -> slot index
  uint64_t public_bytes = 0;  // everything peers may read

  uint64_t CopyOffset(int copy) const { return static_cast<uint64_t>(copy) * data_bytes; }
  uint64_t HashOffset(uint32_t step, uint32_t chunk) const {
    return hash_offset + kHashHeaderBytes + kHashEntryBytes * (hash_slot.at(step) + chunk);
  }
  uint64_t CounterOffset(uint32_t step) const {
    return counter_offset + kCounterBytes * counter_slot.at(step);
  }
};

// The room of one compressed chunk: zstd's bound for a whole chunk, rounded up to 64.
uint64_t SlotBytes(const Plan& plan);

// The public layout of every rank of the plan, in one pass over the steps.
std::map<Endpoint, ArenaLayout> ComputeLayouts(const Plan& plan);

// A counter word: bits 63..33 the version, bit 32 the copy being received into, bits 31..0 how many
// leading chunks of the step are verified. A counter of another version never matches.
// A prefix of kRelayFailed says the rank failed this version: whoever waits on it fails at once.
inline constexpr uint64_t kMaxCounterVersion = (1ull << 31) - 1;
inline constexpr uint32_t kRelayFailed = 0xffffffffu;
inline uint64_t EncodeCounter(uint64_t version, int copy, uint32_t prefix) {
  return (version << 33) | (static_cast<uint64_t>(copy & 1) << 32) | prefix;
}
inline uint64_t CounterVersion(uint64_t word) { return word >> 33; }
inline int CounterCopy(uint64_t word) { return static_cast<int>((word >> 32) & 1); }
inline uint32_t CounterPrefix(uint64_t word) { return static_cast<uint32_t>(word); }
// Bijective in the word, so any change of the word or of its check shows.
inline uint64_t CounterCheck(uint64_t word) {
  word = (word ^ 0x5851F42D4C957F2Dull) * 0xBF58476D1CE4E5B9ull;
  word ^= word >> 31;
  word *= 0x94D049BB133111EBull;
  return word ^ (word >> 29);
}

}  // namespace weightport::arena_layout
