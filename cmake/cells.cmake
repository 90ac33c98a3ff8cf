# Cell layers (include/prnn_cell.h): the layer core and its CPU primitives.
target_sources(libprnn PRIVATE src/cell.c src/cell_cpu.c)
