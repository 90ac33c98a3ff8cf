/*
 * memory.c - the public memory helpers, the layer scratch and the GEMM
 * dispatch: each checks its arguments and runs on the context's device
 * (host memory for CPU contexts, cuda_util.cu for CUDA contexts).
 */
#include <stdlib.h>
#include <string.h>

#include "prnn_internal.h"

/* ------------------------------------------------------------------------ */
/* Host side                                                                */

static void *host_alloc(size_t bytes)
{
    size_t n = (bytes + 255) & ~(size_t)255;
    if (n < bytes) return NULL;
    return aligned_alloc(256, n ? n : 256);
}

void *prnn_scratch(prnn_ctx *ctx, size_t bytes)
{
    if (ctx->device == PRNN_DEVICE_CUDA) return prnn_cuda_scratch(ctx, bytes);
    if (bytes <= ctx->scratch_bytes && ctx->scratch) return ctx->scratch;
    size_t want = bytes + bytes / 4 + 256;
    if (want < bytes) return NULL;
    void *p = host_alloc(want);
    if (!p) return NULL;
    free(ctx->scratch);
    ctx->scratch = p;
    ctx->scratch_bytes = want;
    return p;
}

/* ------------------------------------------------------------------------ */
/* Public memory API                                                        */

prnn_status prnn_mem_alloc(prnn_ctx *ctx, void **ptr, size_t bytes)
{
    if (!ctx || !ptr) return PRNN_ERR_NULL_POINTER;
    *ptr = NULL;
    if (bytes == 0) return PRNN_ERR_INVALID_SIZE;
    if (ctx->device == PRNN_DEVICE_CUDA) return prnn_cuda_mem_alloc(ctx, ptr, bytes);
    *ptr = host_alloc(bytes);
    return *ptr ? PRNN_OK : PRNN_ERR_OUT_OF_MEMORY;
}

void prnn_mem_free(prnn_ctx *ctx, void *ptr)
{
    if (!ctx || !ptr) return;
    if (ctx->device == PRNN_DEVICE_CUDA)
        prnn_cuda_mem_free(ctx, ptr);
    else
        free(ptr);
}

prnn_status prnn_mem_alloc_pinned(prnn_ctx *ctx, void **ptr, size_t bytes)
{
    if (!ctx || !ptr) return PRNN_ERR_NULL_POINTER;
    *ptr = NULL;
    if (bytes == 0) return PRNN_ERR_INVALID_SIZE;
    if (ctx->device == PRNN_DEVICE_CUDA) return prnn_cuda_mem_alloc_pinned(ctx, ptr, bytes);
    *ptr = host_alloc(bytes);
    return *ptr ? PRNN_OK : PRNN_ERR_OUT_OF_MEMORY;
}

void prnn_mem_free_pinned(prnn_ctx *ctx, void *ptr)
{
    if (!ctx || !ptr) return;
    if (ctx->device == PRNN_DEVICE_CUDA)
        prnn_cuda_mem_free_pinned(ctx, ptr);
    else
        free(ptr);
}

prnn_status prnn_mem_zero(prnn_ctx *ctx, void *ptr, size_t bytes)
{
    if (!ctx || !ptr) return PRNN_ERR_NULL_POINTER;
    if (bytes == 0) return PRNN_OK;
    if (ctx->device == PRNN_DEVICE_CUDA) return prnn_cuda_mem_zero(ctx, ptr, bytes);
    memset(ptr, 0, bytes);
    return PRNN_OK;
}

static prnn_status mem_copy(prnn_ctx *ctx, void *dst, const void *src, size_t bytes, int kind)
{
    if (!ctx || !dst || !src) return PRNN_ERR_NULL_POINTER;
    if (bytes == 0) return PRNN_OK;
    if (ctx->device == PRNN_DEVICE_CUDA) return prnn_cuda_mem_copy(ctx, dst, src, bytes, kind);
    memmove(dst, src, bytes);
    return PRNN_OK;
}

prnn_status prnn_mem_upload(prnn_ctx *ctx, void *dst, const void *host_src, size_t bytes)
{
    return mem_copy(ctx, dst, host_src, bytes, 0);
}

prnn_status prnn_mem_download(prnn_ctx *ctx, void *host_dst, const void *src, size_t bytes)
{
    return mem_copy(ctx, host_dst, src, bytes, 1);
}

prnn_status prnn_mem_copy(prnn_ctx *ctx, void *dst, const void *src, size_t bytes)
{
    return mem_copy(ctx, dst, src, bytes, 2);
}

prnn_status prnn_mem_convert(prnn_ctx *ctx, void *dst, prnn_dtype dst_dtype,
                             const void *src, prnn_dtype src_dtype, int64_t n)
{
    if (!ctx || !dst || !src) return PRNN_ERR_NULL_POINTER;
    if (n < 0) return PRNN_ERR_INVALID_SIZE;
    if ((unsigned)dst_dtype >= PRNN_DTYPE_COUNT_ || (unsigned)src_dtype >= PRNN_DTYPE_COUNT_)
        return PRNN_ERR_INVALID_ARGUMENT;
    if (n == 0) return PRNN_OK;
    if (ctx->device == PRNN_DEVICE_CUDA)
        return prnn_cuda_mem_convert(ctx, dst, dst_dtype, src, src_dtype, n);
    if (dst_dtype == src_dtype) {
        memmove(dst, src, (size_t)n * prnn_dtype_size(src_dtype));
        return PRNN_OK;
    }
    if (dst_dtype == PRNN_DTYPE_F64 && src_dtype == PRNN_DTYPE_F32) {
        for (int64_t i = 0; i < n; i++) ((double *)dst)[i] = ((const float *)src)[i];
        return PRNN_OK;
    }
    if (dst_dtype == PRNN_DTYPE_F32 && src_dtype == PRNN_DTYPE_F64) {
        for (int64_t i = 0; i < n; i++) ((float *)dst)[i] = (float)((const double *)src)[i];
        return PRNN_OK;
    }
    return PRNN_ERR_UNSUPPORTED; /* 16-bit storage is CUDA-only */
}

/* ------------------------------------------------------------------------ */
/* GEMM dispatch                                                            */

prnn_status prnn_gemm(prnn_ctx *ctx, int transA, int transB, int64_t M, int64_t N, int64_t K,
                      double alpha, const void *A, int64_t lda, const void *B, int64_t ldb,
                      double beta, void *C, int64_t ldc, prnn_dtype ab, prnn_dtype c)
{
    if (M == 0 || N == 0) return PRNN_OK;
    if (ctx->device == PRNN_DEVICE_CUDA)
        return prnn_cuda_gemm(ctx, transA, transB, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc,
                              ab, c);
    if (c != ab || (ab != PRNN_DTYPE_F32 && ab != PRNN_DTYPE_F64)) return PRNN_ERR_UNSUPPORTED;
    return prnn_cpu_gemm(ctx, transA, transB, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, ab);
}
