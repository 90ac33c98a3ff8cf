# Cell layers (include/prnn_cell.h): the layer core and its CPU primitives.
target_sources(libprnn PRIVATE src/cell.c src/cell_cpu.c)
set_source_files_properties(src/cell_cpu.c PROPERTIES COMPILE_OPTIONS "${PRNN_VMATH_FLAGS}")
