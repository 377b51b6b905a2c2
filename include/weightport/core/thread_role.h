// A thread role as a capability: state that only one thread may touch (a progress loop's) is
// GUARDED_BY the role, and code reaches it only where the role is held: in a function declared
// REQUIRES(role), or after a call to a function declared ASSERT_CAPABILITY(role), which states
// "this runs on that thread" at the top of each task posted to it. Clang's -Wthread-safety then
// refuses an access from anywhere else (thread_annotations.h). Nothing is locked; a role costs
// nothing at run time.
#pragma once

#include "weightport/core/thread_annotations.h"

// On a function: after it returns, the capability `x` is held (it asserts it; it acquires nothing).
#define ASSERT_CAPABILITY(x) WP_THREAD_ANNOTATION(assert_capability(x))

namespace weightport {

class CAPABILITY("thread role") ThreadRole {
 public:
  ThreadRole() = default;
  ThreadRole(const ThreadRole&) = delete;
  ThreadRole& operator=(const ThreadRole&) = delete;
};

}  // namespace weightport
