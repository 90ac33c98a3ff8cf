# Distributed training (include/prnn_dist.h): the distributed context, the
# sequence-parallel scan and the data-parallel all-reduce, built when MPI is
# found (Debian: libopenmpi-dev openmpi-bin), with the NCCL path for CUDA
# contexts when the CUDA build also finds nccl.h and libnccl. Without MPI
# none of it is built and scripts/test.sh skips its suites; `prnn train
# --dist` then says that the build has no MPI.
#
# Suites: prnn_test_dist and prnn_test_dist_seq (CPU, MPI) and
# prnn_gpu_test_dist (one GPU per rank), each run by scripts/test.sh under
# mpirun, never alone; the GPU
# benchmark prnn_bench_dist runs from scripts/dist_gpu_check.sh.
set(PRNN_DIST "AUTO" CACHE STRING "Build the distributed pieces (MPI, NCCL): AUTO, ON or OFF")
set_property(CACHE PRNN_DIST PROPERTY STRINGS AUTO ON OFF)

set(PRNN_HAVE_DIST OFF)
set(PRNN_HAVE_NCCL OFF)
if(NOT PRNN_DIST STREQUAL "OFF")
  find_package(MPI COMPONENTS C QUIET)
  if(MPI_C_FOUND)
    set(PRNN_HAVE_DIST ON)
  elseif(PRNN_DIST STREQUAL "ON")
    message(FATAL_ERROR "PRNN_DIST=ON but MPI was not found")
  endif()
endif()

if(PRNN_HAVE_DIST AND PRNN_HAVE_CUDA)
  find_path(PRNN_NCCL_INCLUDE nccl.h HINTS ${CUDAToolkit_INCLUDE_DIRS})
  find_library(PRNN_NCCL_LIBRARY NAMES nccl
               HINTS ${CUDAToolkit_LIBRARY_DIR} ${CUDAToolkit_LIBRARY_ROOT}/lib)
  if(PRNN_NCCL_INCLUDE AND PRNN_NCCL_LIBRARY)
    set(PRNN_HAVE_NCCL ON)
  endif()
endif()
message(STATUS "prnn: MPI ${PRNN_HAVE_DIST}, NCCL ${PRNN_HAVE_NCCL} ${PRNN_NCCL_LIBRARY}")

if(PRNN_HAVE_DIST)
  target_sources(libprnn PRIVATE src/dist.c src/dist_model.c)
  target_link_libraries(libprnn PUBLIC MPI::MPI_C)
  target_compile_definitions(libprnn PUBLIC PRNN_HAVE_DIST=1)

  add_executable(prnn_test_dist tests/test_dist.c)
  target_include_directories(prnn_test_dist PRIVATE tests tools)
  target_link_libraries(prnn_test_dist PRIVATE libprnn prnn_flags)
  if(TARGET prnn_train_io)
    # The data-parallel suite also runs `prnn train --dist` in process.
    target_link_libraries(prnn_test_dist PRIVATE prnn_train_io)
  endif()

  # The sequence-parallel model against the one-process model (CPU, MPI).
  add_executable(prnn_test_dist_seq tests/test_dist_seq.c)
  target_include_directories(prnn_test_dist_seq PRIVATE tests tools)
  target_link_libraries(prnn_test_dist_seq PRIVATE libprnn prnn_flags)
  if(TARGET prnn_train_io)
    # It also runs `prnn train --dist --seq-parallel` in process.
    target_link_libraries(prnn_test_dist_seq PRIVATE prnn_train_io)
  endif()

  if(PRNN_HAVE_NCCL)
    target_sources(libprnn PRIVATE src/dist_cuda.cu)
    target_include_directories(libprnn PRIVATE ${PRNN_NCCL_INCLUDE})
    target_link_libraries(libprnn PUBLIC ${PRNN_NCCL_LIBRARY})
    set_property(SOURCE src/dist.c APPEND PROPERTY COMPILE_DEFINITIONS PRNN_DIST_NCCL=1)

    add_executable(prnn_gpu_test_dist tests/test_dist_cuda.c)
    target_include_directories(prnn_gpu_test_dist PRIVATE tests tools)
    target_link_libraries(prnn_gpu_test_dist PRIVATE libprnn prnn_flags CUDA::cudart)
    add_executable(prnn_gpu_test_dist_seq tests/test_dist_seq_cuda.c)
    target_include_directories(prnn_gpu_test_dist_seq PRIVATE tests tools)
    target_link_libraries(prnn_gpu_test_dist_seq PRIVATE libprnn prnn_flags CUDA::cudart)

    # Sequence-parallel scan speed over the GPUs of a job (scripts/dist_gpu_check.sh).
    add_executable(prnn_bench_dist bench/bench_dist_cuda.c)
    target_include_directories(prnn_bench_dist PRIVATE tools)
    target_link_libraries(prnn_bench_dist PRIVATE libprnn prnn_flags CUDA::cudart)
  endif()
endif()
