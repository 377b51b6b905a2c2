// Replicas, a part of the receive (receive_run.h): the root steps of a source that is lost (the
// coordinator says so, or a Get from it failed for good) read their chunks not yet verified from
// another source that holds the same slice (CompileAlternates), checked against the hashes mirrored
// from the lost source when the receive began. The coordinator compares the replicas' digests before
// a version begins (source_replicas.h), so they hold the same bytes.
#include <string>

#include "receive_run.h"

namespace weightport {
namespace plan_rank_internal {

bool ReceiveRun::ToReplica(size_t st) {
  r_.OnLoopThread();  // a task of the loop thread
  const InStep& step = r_.c->in_steps[st];
  uint32_t next = level_[st] + 1;
  while (next <= step.alt_count && r_.lost_peers.count(LevelFrom(st, next))) ++next;
  if (next > step.alt_count) return false;
  if (level_[st] == 0) ++stats_.refetched_from_replica;
  level_[st] = next;
  return true;
}

void ReceiveRun::RootSourceLost(Endpoint peer) {
  for (size_t st = 0; st < r_.c->in_steps.size() && !failed_; ++st) {
    const InStep& step = r_.c->in_steps[st];
    if (step.after >= 0 || CurrentFrom(st) != peer || ToReplica(st)) continue;
    Fail(Unavailable(r_.c->me.ToString() + ": " + r_.StepName(step.step) + ": its source " + peer.ToString() +
                     " is lost and " +
                     (step.alt_count == 0 ? std::string("no other source holds its shard")
                                          : "so are the other sources that hold its shard")));
  }
}

int64_t ReceiveRun::Shift(size_t c) const {
  const InStep& step = r_.c->in_steps[r_.c->in_chunks[c].in_step];
  if (step.after >= 0 || via_[c] == 0) return 0;
  return r_.c->alternates[step.alt_first + via_[c] - 1].shift;
}

}  // namespace plan_rank_internal
}  // namespace weightport
