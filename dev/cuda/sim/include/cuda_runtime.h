/*
 * cuda_runtime.h (host simulator) - the slice of the CUDA runtime API that
 * prnn's CUDA backend and GPU tests use, implemented on the host by
 * dev/cuda/sim/sim.cpp, so that the real kernels of src/scan_cuda.cu run
 * (slowly) on a machine without a GPU. C and C++; the device-side shims
 * follow for C++ only. A lab tool, never part of the library build.
 */
#ifndef PRNN_SIM_CUDA_RUNTIME_H
#define PRNN_SIM_CUDA_RUNTIME_H
#define CUDART_VERSION 13000 /* the runtime these shims stand in for */

#define PRNN_CUDA_SIM 1 /* also for the C tests */

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum cudaError {
    cudaSuccess = 0,
    cudaErrorInvalidValue = 1,
    cudaErrorMemoryAllocation = 2,
    cudaErrorInsufficientDriver = 35,
    cudaErrorNoDevice = 100,
    cudaErrorInvalidDevice = 101,
    cudaErrorLaunchFailure = 719
} cudaError_t;

typedef struct prnn_sim_stream *cudaStream_t;

enum cudaMemcpyKind {
    cudaMemcpyHostToHost = 0,
    cudaMemcpyHostToDevice = 1,
    cudaMemcpyDeviceToHost = 2,
    cudaMemcpyDeviceToDevice = 3,
    cudaMemcpyDefault = 4
};

enum cudaDeviceAttr {
    cudaDevAttrMultiProcessorCount = 16,
    cudaDevAttrMemoryClockRate = 36,
    cudaDevAttrGlobalMemoryBusWidth = 37,
    cudaDevAttrL2CacheSize = 38,
    cudaDevAttrComputeCapabilityMajor = 75,
    cudaDevAttrMaxSharedMemoryPerBlockOptin = 97
};

#define cudaStreamNonBlocking 0x01

cudaError_t cudaGetDeviceCount(int *count);
cudaError_t cudaGetDevice(int *dev);
cudaError_t cudaSetDevice(int dev);
cudaError_t cudaDeviceGetAttribute(int *value, enum cudaDeviceAttr attr, int dev);
cudaError_t cudaDeviceSynchronize(void);
cudaError_t cudaStreamCreateWithFlags(cudaStream_t *s, unsigned flags);
cudaError_t cudaStreamDestroy(cudaStream_t s);
cudaError_t cudaStreamSynchronize(cudaStream_t s);
cudaError_t cudaStreamQuery(cudaStream_t s);
typedef enum cudaStreamCaptureStatus {
    cudaStreamCaptureStatusNone = 0,
    cudaStreamCaptureStatusActive = 1
} cudaStreamCaptureStatus;
cudaError_t cudaStreamIsCapturing(cudaStream_t s, enum cudaStreamCaptureStatus *status);
cudaError_t cudaMalloc(void **p, size_t bytes);
cudaError_t cudaFree(void *p);
cudaError_t cudaMemcpy(void *dst, const void *src, size_t bytes, enum cudaMemcpyKind kind);
cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t bytes, enum cudaMemcpyKind kind,
                            cudaStream_t s);
cudaError_t cudaMemset(void *p, int value, size_t bytes);
cudaError_t cudaMemsetAsync(void *p, int value, size_t bytes, cudaStream_t s);
cudaError_t cudaGetLastError(void);
const char *cudaGetErrorString(cudaError_t e);

/* Driver entry points: the simulator has cuTensorMapEncodeTiled only. */
typedef enum cudaDriverEntryPointQueryResult {
    cudaDriverEntryPointSuccess = 0,
    cudaDriverEntryPointSymbolNotFound = 1
} cudaDriverEntryPointQueryResult;
#define cudaEnableDefault 0
cudaError_t cudaGetDriverEntryPointByVersion(const char *symbol, void **fn, unsigned version,
                                             unsigned long long flags,
                                             cudaDriverEntryPointQueryResult *status);

#ifdef __cplusplus
}
#include "prnn_sim_device.h"
#endif

#endif /* PRNN_SIM_CUDA_RUNTIME_H */
