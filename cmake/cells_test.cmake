# The CPU test suite of the cell layers (tests/test_cell.c). scripts/test.sh
# runs it with the other prnn_test_* programs.
add_executable(prnn_test_cell tests/test_cell.c)
target_include_directories(prnn_test_cell PRIVATE tests tools)
target_link_libraries(prnn_test_cell PRIVATE libprnn prnn_flags)
