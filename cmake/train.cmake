# The trainer's infrastructure (tools/train/): options, data, checkpoints,
# log and sampling, as one internal static library that the prnn program
# links, and its CPU test suite. Host C only, no CUDA headers. The fuzz
# targets of the same sources build with clang through fuzz/run.sh.

add_library(prnn_train_io STATIC
  tools/train/fileio.c
  tools/train/rng.c
  tools/train/json.c
  tools/train/corpus.c
  tools/train/data.c
  tools/train/ckpt.c
  tools/train/options.c
  tools/train/log.c
  tools/train/sample.c
  tools/train/dist.c
  tools/train/seqpar.c
  tools/train/train.c)
target_include_directories(prnn_train_io PUBLIC tools/train)
# libprnn for its headers' types (prnn_dtype, prnn_device, prnn_cell_type).
target_link_libraries(prnn_train_io PUBLIC libprnn PRIVATE prnn_flags)
if(MATH_LIBRARY)
  target_link_libraries(prnn_train_io PUBLIC ${MATH_LIBRARY})
endif()

add_executable(prnn_test_train_io tests/test_train_io.c)
target_include_directories(prnn_test_train_io PRIVATE tests tools)
target_link_libraries(prnn_test_train_io PRIVATE prnn_train_io libprnn prnn_flags)

# The commands end to end: resume equals an uninterrupted run, sampling and
# evaluation from a checkpoint, and bad files and arguments.
add_executable(prnn_test_train tests/test_train.c)
target_include_directories(prnn_test_train PRIVATE tests tools)
target_link_libraries(prnn_test_train PRIVATE prnn_train_io libprnn prnn_flags)
