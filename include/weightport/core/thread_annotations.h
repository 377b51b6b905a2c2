// Locking rules in the type system: clang's thread-safety annotations, and a mutex and a scoped
// lock that carry them.
//
// A member declared GUARDED_BY(mu_) may only be touched while mu_ is held, a function declared
// REQUIRES(mu_) only called with it held: what a "guarded by mu_" comment used to say, checked by
// clang's -Wthread-safety (an error in the clang builds, see CMakeLists.txt). libstdc++'s std::mutex
// and std::lock_guard carry no annotations, so the analysis cannot see them lock anything: state
// guarded this way uses Mutex and MutexLock below, thin wrappers over std::mutex and
// std::unique_lock. Other compilers see empty macros and the same std::mutex underneath.
//
//   Mutex mu_;
//   std::condition_variable cv_;
//   int n_ GUARDED_BY(mu_) = 0;
//
//   MutexLock lock(mu_);
//   cv_.wait(lock.native(), [&]() REQUIRES(mu_) { return n_ > 0; });  // a lambda is analysed alone
//
// Where the analysis cannot follow a pattern, NO_THREAD_SAFETY_ANALYSIS on the narrowest function,
// with a comment saying why. https://clang.llvm.org/docs/ThreadSafetyAnalysis.html
#pragma once

#include <mutex>

#if defined(__clang__)
#define WP_THREAD_ANNOTATION(x) __attribute__((x))
#else
#define WP_THREAD_ANNOTATION(x)
#endif

// On a class: its objects are capabilities (mutexes) named `x` in diagnostics.
#define CAPABILITY(x) WP_THREAD_ANNOTATION(capability(x))
// On a class: RAII objects that hold the capabilities their constructor acquires.
#define SCOPED_CAPABILITY WP_THREAD_ANNOTATION(scoped_lockable)
// On a member: read or written only with `x` held. PT_: the object it points to.
#define GUARDED_BY(x) WP_THREAD_ANNOTATION(guarded_by(x))
#define PT_GUARDED_BY(x) WP_THREAD_ANNOTATION(pt_guarded_by(x))
// On a function: called only with these held.
#define REQUIRES(...) WP_THREAD_ANNOTATION(requires_capability(__VA_ARGS__))
// On a function: acquires / releases these (no argument: `this`, or a scoped lock's mutexes).
#define ACQUIRE(...) WP_THREAD_ANNOTATION(acquire_capability(__VA_ARGS__))
#define RELEASE(...) WP_THREAD_ANNOTATION(release_capability(__VA_ARGS__))
// On a function: acquires the capabilities after its first argument when it returns that value.
#define TRY_ACQUIRE(...) WP_THREAD_ANNOTATION(try_acquire_capability(__VA_ARGS__))
// On a function: called only without these held (it takes them itself).
#define EXCLUDES(...) WP_THREAD_ANNOTATION(locks_excluded(__VA_ARGS__))
// On a function: returns a reference to the capability `x`.
#define RETURN_CAPABILITY(x) WP_THREAD_ANNOTATION(lock_returned(x))
// On a function: not analysed. Use sparingly, with a comment saying why.
#define NO_THREAD_SAFETY_ANALYSIS WP_THREAD_ANNOTATION(no_thread_safety_analysis)

namespace weightport {

// std::mutex, annotated. Lock it with MutexLock.
class CAPABILITY("mutex") Mutex {
 public:
  Mutex() = default;
  Mutex(const Mutex&) = delete;
  Mutex& operator=(const Mutex&) = delete;

  void Lock() ACQUIRE() { mu_.lock(); }
  void Unlock() RELEASE() { mu_.unlock(); }
  bool TryLock() TRY_ACQUIRE(true) { return mu_.try_lock(); }

  // The std::mutex underneath, for MutexLock; locking it directly bypasses the analysis.
  std::mutex& native() RETURN_CAPABILITY(this) { return mu_; }

 private:
  std::mutex mu_;
};

// Holds a Mutex for its scope, like std::unique_lock (which it wraps, so that a
// std::condition_variable can wait on native()). Unlock and Lock release and take it again inside
// the scope; the destructor releases it only if held.
class SCOPED_CAPABILITY MutexLock {
 public:
  explicit MutexLock(Mutex& mu) ACQUIRE(mu) : lock_(mu.native()) {}
  ~MutexLock() RELEASE() {}
  MutexLock(const MutexLock&) = delete;
  MutexLock& operator=(const MutexLock&) = delete;

  void Unlock() RELEASE() { lock_.unlock(); }
  void Lock() ACQUIRE() { lock_.lock(); }

  // For std::condition_variable::wait and friends: they release and retake the mutex inside the
  // call, which the analysis does not see (the mutex counts as held throughout).
  std::unique_lock<std::mutex>& native() { return lock_; }

 private:
  std::unique_lock<std::mutex> lock_;
};

}  // namespace weightport
