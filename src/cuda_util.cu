/*
 * cuda_util.cu - memory, layer scratch, dtype conversion and GEMM on a CUDA
 * context's device and stream. GEMMs go to cuBLAS (cublasGemmEx, fp32
 * accumulation); the handle is created on first use, bound to the context's
 * stream, and freed with the context.
 */
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <stdint.h>

#include "cuda_common.cuh"
#include "prnn_internal.h"

using namespace prnn_cuda;

namespace {

cudaStream_t stream_of(prnn_ctx *ctx) { return static_cast<cudaStream_t>(prnn_cuda_stream(ctx)); }

prnn_status map_cublas_error(cublasStatus_t s)
{
    switch (s) {
    case CUBLAS_STATUS_SUCCESS: return PRNN_OK;
    case CUBLAS_STATUS_ALLOC_FAILED: return PRNN_ERR_OUT_OF_MEMORY;
    case CUBLAS_STATUS_NOT_SUPPORTED:
    case CUBLAS_STATUS_ARCH_MISMATCH: return PRNN_ERR_UNSUPPORTED;
    case CUBLAS_STATUS_INVALID_VALUE: return PRNN_ERR_INVALID_ARGUMENT;
    default: return PRNN_ERR_CUDA;
    }
}

template <typename T> __device__ __forceinline__ float to_f(T v) { return (float)v; }
template <> __device__ __forceinline__ float to_f(__nv_bfloat16 v) { return __bfloat162float(v); }
template <> __device__ __forceinline__ float to_f(__half v) { return __half2float(v); }

template <typename T> __device__ __forceinline__ T from_f(float v) { return (T)v; }
template <> __device__ __forceinline__ __nv_bfloat16 from_f(float v) { return __float2bfloat16(v); }
template <> __device__ __forceinline__ __half from_f(float v) { return __float2half(v); }

template <typename D, typename S>
__global__ void convert_kernel(D *__restrict__ dst, const S *__restrict__ src, int64_t n)
{
    grid_dep_begin();
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x)
        dst[i] = from_f<D>(to_f(src[i]));
}

template <typename D, typename S>
prnn_status convert_run(cudaStream_t s, void *dst, const void *src, int64_t n)
{
    int64_t blocks = (n + 255) / 256;
    if (blocks > 65536) blocks = 65536;
    launch(convert_kernel<D, S>, dim3((unsigned)blocks), dim3(256), 0, s, static_cast<D *>(dst),
           static_cast<const S *>(src), n);
    PRNN_CU_LAUNCHED();
    return PRNN_OK;
}

template <typename S> prnn_status convert_from(cudaStream_t s, void *dst, prnn_dtype dt,
                                               const void *src, int64_t n)
{
    switch (dt) {
    case PRNN_DTYPE_F32: return convert_run<float, S>(s, dst, src, n);
    case PRNN_DTYPE_BF16: return convert_run<__nv_bfloat16, S>(s, dst, src, n);
    case PRNN_DTYPE_F16: return convert_run<__half, S>(s, dst, src, n);
    default: return PRNN_ERR_UNSUPPORTED;
    }
}

cudaDataType_t cuda_type(prnn_dtype d)
{
    switch (d) {
    case PRNN_DTYPE_BF16: return CUDA_R_16BF;
    case PRNN_DTYPE_F16: return CUDA_R_16F;
    case PRNN_DTYPE_F64: return CUDA_R_64F;
    default: return CUDA_R_32F;
    }
}

} // namespace

/* ------------------------------------------------------------------------ */
/* Memory                                                                   */

extern "C" prnn_status prnn_cuda_mem_alloc(prnn_ctx *ctx, void **ptr, size_t bytes)
{
    device_guard g(prnn_cuda_device_of(ctx));
    if (g.err != cudaSuccess) return map_cuda_error(g.err);
    cudaError_t e = cudaMalloc(ptr, bytes);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        *ptr = nullptr;
        return map_cuda_error(e);
    }
    return PRNN_OK;
}

extern "C" void prnn_cuda_mem_free(prnn_ctx *ctx, void *ptr)
{
    device_guard g(prnn_cuda_device_of(ctx));
    (void)cudaStreamSynchronize(stream_of(ctx)); /* queued work may still read it */
    (void)cudaFree(ptr);
    (void)cudaGetLastError();
}

extern "C" prnn_status prnn_cuda_mem_alloc_pinned(prnn_ctx *ctx, void **ptr, size_t bytes)
{
    device_guard g(prnn_cuda_device_of(ctx));
    cudaError_t e = cudaMallocHost(ptr, bytes);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        *ptr = nullptr;
        return map_cuda_error(e);
    }
    return PRNN_OK;
}

extern "C" void prnn_cuda_mem_free_pinned(prnn_ctx *ctx, void *ptr)
{
    device_guard g(prnn_cuda_device_of(ctx));
    (void)cudaStreamSynchronize(stream_of(ctx));
    (void)cudaFreeHost(ptr);
    (void)cudaGetLastError();
}

extern "C" prnn_status prnn_cuda_mem_zero(prnn_ctx *ctx, void *ptr, size_t bytes)
{
    device_guard g(prnn_cuda_device_of(ctx));
    PRNN_CU(cudaMemsetAsync(ptr, 0, bytes, stream_of(ctx)));
    return PRNN_OK;
}

extern "C" prnn_status prnn_cuda_mem_copy(prnn_ctx *ctx, void *dst, const void *src,
                                          size_t bytes, int kind)
{
    device_guard g(prnn_cuda_device_of(ctx));
    const cudaMemcpyKind k = kind == 0   ? cudaMemcpyHostToDevice
                             : kind == 1 ? cudaMemcpyDeviceToHost
                                         : cudaMemcpyDeviceToDevice;
    PRNN_CU(cudaMemcpyAsync(dst, src, bytes, k, stream_of(ctx)));
    if (kind == 1) PRNN_CU(cudaStreamSynchronize(stream_of(ctx)));
    return PRNN_OK;
}

extern "C" prnn_status prnn_cuda_mem_convert(prnn_ctx *ctx, void *dst, prnn_dtype dt,
                                             const void *src, prnn_dtype st, int64_t n)
{
    device_guard g(prnn_cuda_device_of(ctx));
    if (g.err != cudaSuccess) return map_cuda_error(g.err);
    cudaStream_t s = stream_of(ctx);
    switch (st) {
    case PRNN_DTYPE_F32: return convert_from<float>(s, dst, dt, src, n);
    case PRNN_DTYPE_BF16: return convert_from<__nv_bfloat16>(s, dst, dt, src, n);
    case PRNN_DTYPE_F16: return convert_from<__half>(s, dst, dt, src, n);
    default: return PRNN_ERR_UNSUPPORTED;
    }
}

extern "C" void *prnn_cuda_scratch(prnn_ctx *ctx, size_t bytes)
{
    if (ctx->scratch && bytes <= ctx->scratch_bytes) return ctx->scratch;
    device_guard g(prnn_cuda_device_of(ctx));
    if (g.err != cudaSuccess) return nullptr;
    size_t want = bytes + bytes / 4 + 256;
    if (ctx->scratch) {
        /* Work already queued may still use the old buffer. */
        if (cudaStreamSynchronize(stream_of(ctx)) != cudaSuccess) return nullptr;
        (void)cudaFree(ctx->scratch);
        ctx->scratch = nullptr;
        ctx->scratch_bytes = 0;
    }
    void *p = nullptr;
    if (cudaMalloc(&p, want) != cudaSuccess) {
        (void)cudaGetLastError();
        return nullptr;
    }
    ctx->scratch = p;
    ctx->scratch_bytes = want;
    return p;
}

extern "C" void *prnn_cuda_aux(prnn_ctx *ctx, int slot, size_t bytes)
{
    if (slot < 0 || slot >= 2) return nullptr;
    if (ctx->aux[slot] && bytes <= ctx->aux_bytes[slot]) return ctx->aux[slot];
    device_guard g(prnn_cuda_device_of(ctx));
    if (g.err != cudaSuccess) return nullptr;
    if (ctx->aux[slot]) {
        if (cudaStreamSynchronize(stream_of(ctx)) != cudaSuccess) return nullptr;
        (void)cudaFree(ctx->aux[slot]);
        ctx->aux[slot] = nullptr;
        ctx->aux_bytes[slot] = 0;
    }
    const size_t want = bytes + bytes / 4 + 256;
    void *p = nullptr;
    if (cudaMalloc(&p, want) != cudaSuccess) {
        (void)cudaGetLastError();
        return nullptr;
    }
    ctx->aux[slot] = p;
    ctx->aux_bytes[slot] = want;
    return p;
}

extern "C" void prnn_cuda_release(prnn_ctx *ctx)
{
    device_guard g(prnn_cuda_device_of(ctx));
    (void)cudaStreamSynchronize(stream_of(ctx));
    if (ctx->scratch) (void)cudaFree(ctx->scratch);
    ctx->scratch = nullptr;
    ctx->scratch_bytes = 0;
    if (ctx->blas) (void)cublasDestroy(static_cast<cublasHandle_t>(ctx->blas));
    ctx->blas = nullptr;
    for (int i = 0; i < 2; i++) {
        if (ctx->aux[i]) (void)cudaFree(ctx->aux[i]);
        ctx->aux[i] = nullptr;
        ctx->aux_bytes[i] = 0;
    }
    if (ctx->cell_lengths) (void)cudaFree(ctx->cell_lengths);
    ctx->cell_lengths = nullptr;
    ctx->cell_lengths_cap = 0;
    (void)cudaGetLastError();
}

extern "C" prnn_status prnn_cuda_wait_for(prnn_ctx *waiter, prnn_ctx *other)
{
    device_guard g(prnn_cuda_device_of(other));
    if (g.err != cudaSuccess) return map_cuda_error(g.err);
    cudaEvent_t ev;
    PRNN_CU(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));
    cudaError_t e = cudaEventRecord(ev, stream_of(other));
    if (e == cudaSuccess) e = cudaStreamWaitEvent(stream_of(waiter), ev, 0);
    /* Destroying a recorded event is safe: its resources are released once
     * the wait it was recorded for has been satisfied. */
    (void)cudaEventDestroy(ev);
    if (e != cudaSuccess) (void)cudaGetLastError();
    return map_cuda_error(e);
}

/* ------------------------------------------------------------------------ */
/* GEMM                                                                     */

/*
 * cuBLAS is column-major. A row-major (M, N) matrix with row stride ld is the
 * column-major (N, M) matrix with leading dimension ld, its transpose; so the
 * row-major C = op(A) op(B) is the column-major C^T = op(B)^T op(A)^T, which
 * is one call with the operands swapped and each transpose flag kept.
 */
extern "C" prnn_status prnn_cuda_gemm(prnn_ctx *ctx, int transA, int transB, int64_t M,
                                      int64_t N, int64_t K, double alpha, const void *A,
                                      int64_t lda, const void *B, int64_t ldb, double beta,
                                      void *C, int64_t ldc, prnn_dtype ab, prnn_dtype c)
{
    if (ab == PRNN_DTYPE_F64 || c == PRNN_DTYPE_F64) return PRNN_ERR_UNSUPPORTED;
    if (c != ab && c != PRNN_DTYPE_F32) return PRNN_ERR_UNSUPPORTED;
    if (M > INT32_MAX || N > INT32_MAX || K > INT32_MAX || lda > INT32_MAX ||
        ldb > INT32_MAX || ldc > INT32_MAX)
        return PRNN_ERR_UNSUPPORTED;
    device_guard g(prnn_cuda_device_of(ctx));
    if (g.err != cudaSuccess) return map_cuda_error(g.err);
    if (!ctx->blas) {
        cublasHandle_t h = nullptr;
        cublasStatus_t s = cublasCreate(&h);
        if (s != CUBLAS_STATUS_SUCCESS) return map_cublas_error(s);
        ctx->blas = h;
    }
    cublasHandle_t h = static_cast<cublasHandle_t>(ctx->blas);
    cublasStatus_t s = cublasSetStream(h, stream_of(ctx));
    if (s != CUBLAS_STATUS_SUCCESS) return map_cublas_error(s);
    const float fa = (float)alpha, fb = (float)beta;
    s = cublasGemmEx(h, transB ? CUBLAS_OP_T : CUBLAS_OP_N, transA ? CUBLAS_OP_T : CUBLAS_OP_N,
                     (int)N, (int)M, (int)K, &fa, B, cuda_type(ab), (int)ldb, A, cuda_type(ab),
                     (int)lda, &fb, C, cuda_type(c), (int)ldc, CUBLAS_COMPUTE_32F,
                     CUBLAS_GEMM_DEFAULT);
    return map_cublas_error(s);
}
