/*
 * bench_flush.h - the GPU benchmarks' cache flush (bench_flush.cu): a
 * read-only pass over four times the L2 enqueued before each timed call.
 */
#ifndef PRNN_BENCH_FLUSH_H
#define PRNN_BENCH_FLUSH_H

#include <cuda_runtime.h>
#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

int bench_flush_init(void);        /* 0, or -1 when the buffer cannot be had */
int bench_flush(cudaStream_t s);   /* enqueues the pass on s; 0 or -1 */
size_t bench_flush_bytes(void);    /* the scratch buffer's size */
void bench_flush_free(void);

#ifdef __cplusplus
}
#endif

#endif /* PRNN_BENCH_FLUSH_H */
