/*
 * bench_cpu.h - `prnn bench`, the CPU scan benchmark (bench_cpu.c).
 */
#ifndef PRNN_BENCH_CPU_H
#define PRNN_BENCH_CPU_H

#include <stdint.h>

typedef struct {
    int threads;      /* 0 = OpenMP default */
    int reps;         /* timed runs per figure (median) */
    int64_t B, T, H;  /* one shape; all zero = the default matrix */
} bench_cpu_options;

int prnn_bench_cpu(const bench_cpu_options *o);

#endif
