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

# Python bindings: nanobind (from PyPI, scripts/setup) and the interpreter's headers.
set(WEIGHTPORT_WITH_PYTHON OFF)
if(NOT WEIGHTPORT_PYTHON STREQUAL "OFF")
  find_package(Python 3.9 COMPONENTS Interpreter Development.Module)
  if(Python_FOUND)
    execute_process(COMMAND ${Python_EXECUTABLE} -m nanobind --cmake_dir OUTPUT_STRIP_TRAILING_WHITESPACE
                    OUTPUT_VARIABLE nanobind_ROOT RESULT_VARIABLE nanobind_missing ERROR_QUIET)
  endif()
  if(Python_FOUND AND NOT nanobind_missing)
    find_package(nanobind CONFIG REQUIRED)
    set(WEIGHTPORT_WITH_PYTHON ON)
    message(STATUS "weightport: Python bindings for ${Python_EXECUTABLE}")
  elseif(WEIGHTPORT_PYTHON STREQUAL "ON")
    message(FATAL_ERROR "WEIGHTPORT_PYTHON=ON but Python's headers or nanobind were not found "
                        "(run scripts/setup, or configure with -DWEIGHTPORT_PYTHON=OFF)")
  else()
    message(STATUS "weightport: nanobind not found, building without the Python bindings")
  endif()
endif()
