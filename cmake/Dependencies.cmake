# Every dependency comes from Debian packages installed by scripts/setup (UCX may come from PyPI).
find_package(Threads REQUIRED)
# OpenSSL libcrypto (Debian libssl-dev): HMAC-SHA256 for control-plane authentication.
find_package(OpenSSL REQUIRED)
# libcurl (Debian libcurl4-openssl-dev): HTTP client for etcd's v3 JSON gateway, where the store
# layer keeps the fleet's commit record, leases and the coordinator election.
find_package(CURL REQUIRED)
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
# UCX: the transport for shared memory, CMA, TCP and verbs; Debian's libucx-dev by default, which is
# built without CUDA. WEIGHTPORT_UCX_ROOT names another installation (include/, lib/), such as the
# CUDA-aware one `scripts/setup --ucx-cuda` puts in .deps/ucx-cuda/libucx (NVIDIA's build from PyPI:
# cuda_copy and cuda_ipc, so device memory can be registered and moved by UCX itself; no verbs);
# the binaries find its libraries through their build RPATH only: installed elsewhere they would
# load the system's libucp.so.0 (the same soname).
set(WEIGHTPORT_UCX_ROOT "" CACHE PATH "A UCX installation to use instead of Debian's (its include/ and lib/)")
if(WEIGHTPORT_UCX_ROOT)
  add_library(weightport_ucx INTERFACE IMPORTED)
  set_target_properties(weightport_ucx PROPERTIES INTERFACE_INCLUDE_DIRECTORIES "${WEIGHTPORT_UCX_ROOT}/include")
  foreach(lib ucp uct ucs ucm)
    # Not cached: a build folder configured again with another root must not keep the old paths.
    find_library(WEIGHTPORT_UCX_${lib} ${lib} PATHS "${WEIGHTPORT_UCX_ROOT}/lib" NO_DEFAULT_PATH NO_CACHE)
    if(NOT WEIGHTPORT_UCX_${lib})
      message(FATAL_ERROR "WEIGHTPORT_UCX_ROOT=${WEIGHTPORT_UCX_ROOT}: no lib${lib} in its lib/ (scripts/setup --ucx-cuda)")
    endif()
    target_link_libraries(weightport_ucx INTERFACE "${WEIGHTPORT_UCX_${lib}}")
  endforeach()
  set(WEIGHTPORT_UCX_TARGET weightport_ucx)
  message(STATUS "UCX from ${WEIGHTPORT_UCX_ROOT} (the CUDA-aware build from PyPI has no verbs: one host)")
else()
  pkg_check_modules(UCX REQUIRED IMPORTED_TARGET ucx)
  set(WEIGHTPORT_UCX_TARGET PkgConfig::UCX)
endif()
# zstd (Debian libzstd-dev): per-chunk compression of weights and deltas on slow links.
pkg_check_modules(ZSTD REQUIRED IMPORTED_TARGET libzstd)
