/*
 * cuda_common.cuh - what the CUDA translation units share: mapping CUDA
 * errors to prnn_status, the early-return check macros, and the guard that
 * makes the context's device current for a scope.
 */
#ifndef PRNN_CUDA_COMMON_CUH
#define PRNN_CUDA_COMMON_CUH

#include <cuda_runtime.h>

#include "prnn_internal.h"

namespace prnn_cuda {

inline prnn_status map_cuda_error(cudaError_t e)
{
    switch (e) {
    case cudaSuccess: return PRNN_OK;
    case cudaErrorMemoryAllocation: return PRNN_ERR_OUT_OF_MEMORY;
    case cudaErrorNoDevice:
    case cudaErrorInsufficientDriver: return PRNN_ERR_NO_DEVICE;
    default: return PRNN_ERR_CUDA;
    }
}

/* Makes the context's device current for a scope and restores the caller's
 * device afterwards, so the library never changes the caller's state. */
struct device_guard {
    int prev = -1;
    int dev;
    cudaError_t err;
    explicit device_guard(int d) : dev(d)
    {
        err = cudaGetDevice(&prev);
        if (err == cudaSuccess && prev != dev) err = cudaSetDevice(dev);
    }
    ~device_guard()
    {
        if (prev >= 0 && prev != dev) (void)cudaSetDevice(prev);
    }
    device_guard(const device_guard &) = delete;
    device_guard &operator=(const device_guard &) = delete;
};

} // namespace prnn_cuda

#define PRNN_CU(call)                                                          \
    do {                                                                       \
        cudaError_t e_ = (call);                                               \
        if (e_ != cudaSuccess) return prnn_cuda::map_cuda_error(e_);           \
    } while (0)

/* After a launch: launch-configuration errors and earlier async faults. */
#define PRNN_CU_LAUNCHED() PRNN_CU(cudaGetLastError())

#endif /* PRNN_CUDA_COMMON_CUH */
