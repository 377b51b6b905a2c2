# Resolves the optional parts. A part asked for with ON that cannot be built stops the configure
# with a message that says what is missing.
include(CheckLanguage)

set(WEIGHTPORT_WITH_CUDA OFF)
if(NOT WEIGHTPORT_CUDA STREQUAL "OFF")
  check_language(CUDA)
  if(CMAKE_CUDA_COMPILER)
    if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
      # Ampere, Hopper; PTX for newer parts.
      set(CMAKE_CUDA_ARCHITECTURES "80-real;90-real;90-virtual")
    endif()
    enable_language(CUDA)
    # CMake 3.25 does not know that nvcc 12+ takes -std=c++20.
    if(NOT CMAKE_CUDA20_STANDARD_COMPILE_OPTION)
      set(CMAKE_CUDA20_STANDARD_COMPILE_OPTION "-std=c++20")
      set(CMAKE_CUDA20_EXTENSION_COMPILE_OPTION "-std=c++20")
    endif()
    find_package(CUDAToolkit REQUIRED)
    set(WEIGHTPORT_WITH_CUDA ON)
    message(STATUS "weightport: CUDA enabled (${CMAKE_CUDA_COMPILER}, archs ${CMAKE_CUDA_ARCHITECTURES})")
  elseif(WEIGHTPORT_CUDA STREQUAL "ON")
    message(FATAL_ERROR "WEIGHTPORT_CUDA=ON but no CUDA compiler (nvcc) was found. "
                        "Install the CUDA toolkit or configure with -DWEIGHTPORT_CUDA=OFF.")
  else()
    message(STATUS "weightport: CUDA not found, building without it")
  endif()
endif()

if(WEIGHTPORT_FUZZ AND NOT CMAKE_CXX_COMPILER_ID STREQUAL "Clang")
  message(FATAL_ERROR "WEIGHTPORT_FUZZ=ON needs clang (libFuzzer); configure with "
                      "-DCMAKE_CXX_COMPILER=clang++ -DCMAKE_C_COMPILER=clang")
endif()

if(WEIGHTPORT_PYTHON)
  message(FATAL_ERROR "WEIGHTPORT_PYTHON=ON: the Python bindings are not part of this build yet")
endif()
