# Model blocks and optimizer ops (include/prnn_blocks.h): src/blocks.c in the
# library on every build, and with CUDA the kernels of src/blocks_cuda.cu,
# which src/blocks.c calls only when compiled with PRNN_BLOCKS_CUDA. The CPU
# suite is prnn_test_blocks, the GPU suite prnn_gpu_test_blocks (it skips
# and passes without a device); scripts/test.sh finds both by name.
target_sources(libprnn PRIVATE src/blocks.c)
set_source_files_properties(src/blocks.c PROPERTIES COMPILE_OPTIONS "${PRNN_VMATH_FLAGS}")

add_executable(prnn_test_blocks tests/test_blocks.c)
target_include_directories(prnn_test_blocks PRIVATE tests tools)
target_link_libraries(prnn_test_blocks PRIVATE libprnn prnn_flags)

if(PRNN_HAVE_CUDA)
  target_sources(libprnn PRIVATE src/blocks_cuda.cu)
  set_property(SOURCE src/blocks.c APPEND PROPERTY COMPILE_DEFINITIONS PRNN_BLOCKS_CUDA=1)

  add_executable(prnn_gpu_test_blocks tests/test_blocks_cuda.c)
  target_include_directories(prnn_gpu_test_blocks PRIVATE tests tools)
  target_link_libraries(prnn_gpu_test_blocks PRIVATE libprnn prnn_flags)
endif()
