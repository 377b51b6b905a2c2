// Whether this build runs under AddressSanitizer or ThreadSanitizer. GCC defines __SANITIZE_*__,
// clang answers __has_feature; tests scale their work down, or skip a memory budget, by these.
#pragma once

#if defined(__has_feature)
#if __has_feature(address_sanitizer)
#define WEIGHTPORT_ASAN 1
#endif
#if __has_feature(thread_sanitizer)
#define WEIGHTPORT_TSAN 1
#endif
#endif
#if defined(__SANITIZE_ADDRESS__)
#define WEIGHTPORT_ASAN 1
#endif
#if defined(__SANITIZE_THREAD__)
#define WEIGHTPORT_TSAN 1
#endif

namespace weightport {

#if defined(WEIGHTPORT_TSAN)
inline constexpr bool kThreadSanitizer = true;
#else
inline constexpr bool kThreadSanitizer = false;
#endif
#if defined(WEIGHTPORT_ASAN) || defined(WEIGHTPORT_TSAN)
inline constexpr bool kUnderSanitizer = true;
#else
inline constexpr bool kUnderSanitizer = false;
#endif

}  // namespace weightport
