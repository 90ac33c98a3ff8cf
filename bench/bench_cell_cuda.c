/*
 * bench_cell_cuda.c - speed of the cell layers' training step on the GPU
 * (being written).
 */
#include <stdio.h>

int main(void)
{
    printf("prnn_bench_cell: not yet written\n");
    return 0;
}
