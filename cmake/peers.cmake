# A shared build of libprnn, libprnn_shared.so, for Python's ctypes: the
# benchmark against the libraries users would pick instead (bench/peers/,
# scripts/bench_peers.sh) drives prnn through it on PyTorch's CUDA stream.
#
# The same sources, include directories, compile definitions and options and
# link libraries as the static libprnn, compiled a second time as
# position-independent code (the static library itself stays as it is). Not
# part of the default build:
#
#   cmake --build build-gpu --target prnn_shared     # build-gpu/libprnn_shared.so
#
# Include this file at the END of CMakeLists.txt, after every component has
# added its sources to libprnn (target_sources), so that it sees them all.

get_target_property(_peers_sources libprnn SOURCES)
add_library(prnn_shared SHARED EXCLUDE_FROM_ALL ${_peers_sources})

# Properties as set on libprnn; source-file properties (e.g. the CUDA switch
# of src/blocks.c) belong to the files and apply here as well.
foreach(_peers_prop INCLUDE_DIRECTORIES COMPILE_DEFINITIONS COMPILE_OPTIONS LINK_LIBRARIES
                    LINK_OPTIONS)
  get_target_property(_peers_value libprnn ${_peers_prop})
  if(_peers_value)
    set_property(TARGET prnn_shared PROPERTY ${_peers_prop} "${_peers_value}")
  endif()
endforeach()

# The shared CUDA runtime: in a process that already holds PyTorch's
# libcudart, the loader reuses that one (same soname), so both libraries
# share one runtime and one primary context.
set_target_properties(prnn_shared PROPERTIES
  OUTPUT_NAME prnn_shared
  POSITION_INDEPENDENT_CODE ON
  C_VISIBILITY_PRESET default
  CUDA_RUNTIME_LIBRARY Shared)

unset(_peers_sources)
unset(_peers_prop)
unset(_peers_value)
