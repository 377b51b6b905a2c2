# The library's layers: one static library per layer, each linked only to the layers it declares.
# A layer is a folder of src/ and its public headers the same folder of include/weightport/ (its
# files directly in that folder: engine/rank is a layer of its own, not part of engine/common).
# A call to a layer not declared fails to link; an #include of one fails the build before any
# compile (cmake/check_layers.py, run by the target weightport_layering).
#
#   weightport_layer(<path> [RECURSE] [NO_GLOB] [TESTING] [DEPS <path>...] [LIBS <target>...] [SOURCES <file>...])
#
# makes the target weightport_<path with / as _> from src/<path>/*.cc (with RECURSE, its subfolders
# too; with NO_GLOB, none: SOURCES only; tests and fuzz targets aside) and SOURCES, linked PUBLIC to
# the DEPS' targets and PRIVATE to LIBS. A TESTING layer (test doubles) stays out of the product
# target `weightport`: tests and benchmarks link it by name.
set(WEIGHTPORT_LAYER_TARGETS)
set(WEIGHTPORT_LAYER_SPEC "")

function(weightport_layer path)
  cmake_parse_arguments(L "RECURSE;NO_GLOB;TESTING" "" "DEPS;LIBS;SOURCES" ${ARGN})
  string(REPLACE "/" "_" name "${path}")
  set(sources)
  if(L_RECURSE)
    file(GLOB_RECURSE sources CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/src/${path}/*.cc)
  elseif(NOT L_NO_GLOB)
    file(GLOB sources CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/src/${path}/*.cc)
  endif()
  list(FILTER sources EXCLUDE REGEX "_(test|fuzz)\\.cc$")
  # Built when something links it: a build of some folders' tests compiles only their layers.
  add_library(weightport_${name} STATIC EXCLUDE_FROM_ALL ${sources} ${L_SOURCES})
  if(WEIGHTPORT_FUZZ)  # coverage hooks in the library, so the fuzzers are guided inside it
    target_compile_options(weightport_${name} PRIVATE -fsanitize=fuzzer-no-link)
  endif()
  target_include_directories(weightport_${name} PUBLIC ${PROJECT_SOURCE_DIR}/include
                             PRIVATE ${PROJECT_SOURCE_DIR}/src)
  target_link_libraries(weightport_${name} PUBLIC nlohmann_json::nlohmann_json Threads::Threads PRIVATE ${L_LIBS})
  foreach(dep IN LISTS L_DEPS)
    string(REPLACE "/" "_" dep_name "${dep}")
    target_link_libraries(weightport_${name} PUBLIC weightport_${dep_name})
  endforeach()
  target_compile_definitions(weightport_${name} PUBLIC WEIGHTPORT_VERSION="${PROJECT_VERSION}")
  add_dependencies(weightport_${name} weightport_layering)
  if(NOT L_TESTING)
    set(WEIGHTPORT_LAYER_TARGETS ${WEIGHTPORT_LAYER_TARGETS} weightport_${name} PARENT_SCOPE)
  endif()
  string(REPLACE ";" "," deps_text "${L_DEPS}")
  set(WEIGHTPORT_LAYER_SPEC "${WEIGHTPORT_LAYER_SPEC}${path}:${deps_text}\n" PARENT_SCOPE)
endfunction()

# The include check: runs before any layer compiles, again whenever a source or header changes.
function(weightport_layering_check)
  set(spec ${CMAKE_BINARY_DIR}/weightport_layers.txt)
  file(WRITE ${spec}.new "${WEIGHTPORT_LAYER_SPEC}")
  configure_file(${spec}.new ${spec} COPYONLY)  # rewritten only when it changes
  file(GLOB_RECURSE checked CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/src/*.h ${PROJECT_SOURCE_DIR}/src/*.cc
       ${PROJECT_SOURCE_DIR}/src/*.cu ${PROJECT_SOURCE_DIR}/include/*.h)
  set(stamp ${CMAKE_BINARY_DIR}/weightport_layering.ok)
  add_custom_command(OUTPUT ${stamp}
    COMMAND ${Python3_EXECUTABLE} ${PROJECT_SOURCE_DIR}/cmake/check_layers.py ${spec} ${PROJECT_SOURCE_DIR} ${stamp}
    DEPENDS ${checked} ${spec} ${PROJECT_SOURCE_DIR}/cmake/check_layers.py
    COMMENT "Checking the layers' includes" VERBATIM)
  add_custom_target(weightport_layering DEPENDS ${stamp})
endfunction()
