// The plan session's polling intervals, named once. None is a deadline: each bounds how long a
// loop waits before it looks again at what can end it (a stop flag, a deadline the caller gave, a
// message that arrived meanwhile), so each trades wake-ups for how soon a change is seen.
#pragma once

#include <chrono>

namespace weightport::session_timing {

using std::chrono::milliseconds;

// Accepting joins: idle, and while a connection that has not sent its first message is pending.
inline constexpr milliseconds kAcceptIdle(500);
inline constexpr milliseconds kAcceptWhileJoining(20);
// The coordinator's loops between events (version requests, reports, a rank's loss).
inline constexpr milliseconds kEventPoll(100);
// A rejoin and version thread that also has to let ranks in between versions.
inline constexpr milliseconds kRejoinEventPoll(50);
// A rank's follower between the coordinator's messages, and a reader between frames.
inline constexpr milliseconds kMessagePoll(200);
// Dialing a coordinator that does not listen yet (or not again, after a failover).
inline constexpr milliseconds kDialRetry(100);
inline constexpr milliseconds kRendezvousDialRetry(200);
// Asking the store which coordinator leads: how long one lookup may take, and how long to wait
// before asking again while it still names none, or the one that was lost.
inline constexpr milliseconds kStoreLookup(200);
inline constexpr milliseconds kStorePoll(100);
// A standby coordinator asking the store whether the session needs a leader.
inline constexpr milliseconds kElectionRetry(500);

}  // namespace weightport::session_timing
