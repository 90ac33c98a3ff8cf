# The CUDA backend of the cell layers (src/cell_cuda.cu: the elementwise
# primitives of src/cell_internal.h), their GPU test suite
# (prnn_gpu_test_cell, tests/test_cell_cuda.c) and benchmark
# (prnn_bench_cell, bench/bench_cell_cuda.c). CUDA builds only; the CPU side
# of the layers comes from cmake/cells.cmake.
if(PRNN_HAVE_CUDA)
  target_sources(libprnn PRIVATE src/cell_cuda.cu)
  target_compile_definitions(libprnn PRIVATE PRNN_CELL_CUDA=1)

  # Both programs drive the layers through the public API (src/cell.c,
  # added by cmake/cells.cmake).
  if(EXISTS ${PROJECT_SOURCE_DIR}/cmake/cells.cmake)
    add_executable(prnn_gpu_test_cell tests/test_cell_cuda.c)
    target_include_directories(prnn_gpu_test_cell PRIVATE tests tools)
    target_link_libraries(prnn_gpu_test_cell PRIVATE libprnn prnn_flags CUDA::cudart)

    # The benchmark also times the layer's GEMMs alone through cuBLAS and its
    # elementwise passes alone through the backend's entry points (src/).
    add_executable(prnn_bench_cell bench/bench_cell_cuda.c tools/bench_flush.cu)
    target_include_directories(prnn_bench_cell PRIVATE tools src)
    target_link_libraries(prnn_bench_cell PRIVATE libprnn prnn_flags CUDA::cudart CUDA::cublas)
  endif()
endif()
