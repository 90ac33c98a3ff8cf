/*
 * bench_cuda.h - what the GPU benchmarks share: medians of timed
 * repetitions and the card's copy roofline (a 1 GiB device-to-device
 * cudaMemcpyAsync, bytes read + written, median of 25), against which every
 * benchmark reports its fraction. Include after <cuda_runtime.h> and
 * check.h; link tools/bench_flush.cu.
 *
 * Two ways to time a call (the copy included):
 *   queued  each timed call is enqueued behind a cache flush
 *           (bench_flush.h): the events around it measure the device's
 *           time from a cold L2, the host's preparation hidden behind the
 *           flush, as a call in a running pipeline;
 *   idle    each timed call starts on an idle stream: the host's
 *           preparation of the call and the launch latency are inside the
 *           events (and L2 holds what the previous call left).
 */
#ifndef PRNN_BENCH_CUDA_H
#define PRNN_BENCH_CUDA_H

#include <stdlib.h>

#include "bench_flush.h"

static int bench_cmp_float(const void *x, const void *y)
{
    const float a = *(const float *)x, b = *(const float *)y;
    return (a > b) - (a < b);
}

/* The median of v (n > 0); sorts v. */
static inline float bench_median(float *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, bench_cmp_float);
    return n % 2 ? v[n / 2] : 0.5f * (v[n / 2 - 1] + v[n / 2]);
}

/* The queued timing's flush before a timed call on s (bench_flush_init
 * done); a failed launch ends the benchmark. */
static inline void bench_flush_before(cudaStream_t s)
{
    if (bench_flush(s) != 0) {
        fprintf(stderr, "cache flush failed\n");
        exit(1);
    }
}

/* Bytes per second of a device-to-device copy on stream s, read + write;
 * queued: each timed copy behind a cache flush (bench_flush_init done). */
static inline double bench_copy_bandwidth(cudaStream_t s, int queued)
{
    const size_t bytes = (size_t)1 << 30;
    void *x, *y;
    CUDA_CHECK(cudaMalloc(&x, bytes));
    CUDA_CHECK(cudaMalloc(&y, bytes));
    CUDA_CHECK(cudaMemsetAsync(x, 1, bytes, s));
    cudaEvent_t e0, e1;
    CUDA_CHECK(cudaEventCreate(&e0));
    CUDA_CHECK(cudaEventCreate(&e1));
    float ms[25];
    for (int i = 0; i < 3; i++) CUDA_CHECK(cudaMemcpyAsync(y, x, bytes, cudaMemcpyDeviceToDevice, s));
    for (int i = 0; i < 25; i++) {
        if (queued) bench_flush_before(s);
        CUDA_CHECK(cudaEventRecord(e0, s));
        CUDA_CHECK(cudaMemcpyAsync(y, x, bytes, cudaMemcpyDeviceToDevice, s));
        CUDA_CHECK(cudaEventRecord(e1, s));
        CUDA_CHECK(cudaEventSynchronize(e1));
        CUDA_CHECK(cudaEventElapsedTime(&ms[i], e0, e1));
    }
    const double t = bench_median(ms, 25) * 1e-3;
    CUDA_CHECK(cudaEventDestroy(e0));
    CUDA_CHECK(cudaEventDestroy(e1));
    CUDA_CHECK(cudaFree(x));
    CUDA_CHECK(cudaFree(y));
    return 2.0 * (double)bytes / t; /* read + write */
}

#endif /* PRNN_BENCH_CUDA_H */
