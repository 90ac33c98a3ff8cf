/*
 * check.h - abort-on-error check macros for programs built on prnn (the CLI,
 * tests, benchmarks, dev/). The library itself never exits: it returns a
 * prnn_status. Include after <cuda_runtime.h> to get CUDA_CHECK too.
 */
#ifndef PRNN_CHECK_H
#define PRNN_CHECK_H

#include <stdio.h>
#include <stdlib.h>

#include "prnn.h"

#define PRNN_CHECK(call)                                                                           \
    do {                                                                                           \
        prnn_status s_ = (call);                                                                   \
        if (s_ != PRNN_OK) {                                                                       \
            fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #call, prnn_strerror(s_));      \
            exit(2);                                                                               \
        }                                                                                          \
    } while (0)

#ifdef CUDART_VERSION
#define CUDA_CHECK(call)                                                                           \
    do {                                                                                           \
        cudaError_t e_ = (call);                                                                   \
        if (e_ != cudaSuccess) {                                                                   \
            fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #call,                          \
                    cudaGetErrorString(e_));                                                       \
            exit(2);                                                                               \
        }                                                                                          \
    } while (0)
#endif

#endif /* PRNN_CHECK_H */
