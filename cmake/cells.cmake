# Cell layers (include/prnn_cell.h): the layer core and its CPU primitives.
target_sources(libprnn PRIVATE src/cell.c src/cell_cpu.c)
# The CPU maps' loops vectorize with exp pure and selects computed on both
# arms (src/cell_cpu.c); neither errno nor floating-point traps are read. A
# gate-gradient loop touches up to 9 arrays, whose overlap checks (once per
# row) exceed GCC's default limit of 10.
if(CMAKE_C_COMPILER_ID STREQUAL "GNU")
  set_source_files_properties(src/cell_cpu.c PROPERTIES COMPILE_OPTIONS
    "-fno-math-errno;-fno-trapping-math;--param=vect-max-version-for-alias-checks=40")
endif()
