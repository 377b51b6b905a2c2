# Every dependency comes from Debian packages installed by scripts/setup.
find_package(Threads REQUIRED)
# OpenSSL libcrypto (Debian libssl-dev): HMAC-SHA256 for control-plane authentication.
find_package(OpenSSL REQUIRED)
find_package(nlohmann_json 3.10 REQUIRED)
find_package(CLI11 REQUIRED)
if(WEIGHTPORT_TESTS)
  find_package(GTest REQUIRED)
endif()
find_path(XXHASH_INCLUDE_DIR xxhash.h)
find_library(XXHASH_LIBRARY xxhash)
if(NOT XXHASH_INCLUDE_DIR OR NOT XXHASH_LIBRARY)
  message(FATAL_ERROR "libxxhash not found: run scripts/setup (Debian package libxxhash-dev)")
endif()
find_package(PkgConfig REQUIRED)
# UCX (Debian libucx-dev): the transport for shared memory, CMA, TCP, verbs and CUDA memory.
pkg_check_modules(UCX REQUIRED IMPORTED_TARGET ucx)
# zstd (Debian libzstd-dev): per-chunk compression of weights and deltas on slow links.
pkg_check_modules(ZSTD REQUIRED IMPORTED_TARGET libzstd)
