/*
 * cuda_stub.c - the CUDA backend's entry points in a build without CUDA.
 * Every call reports that no CUDA device is usable, so a CPU-only build links
 * the same public API and CUDA requests fail with a clear status.
 */
#include "prnn_internal.h"

prnn_status prnn_cuda_ctx_init(prnn_ctx *ctx, const prnn_ctx_config *cfg)
{
    (void)ctx;
    (void)cfg;
    return PRNN_ERR_NO_DEVICE;
}

void prnn_cuda_ctx_free(prnn_ctx *ctx) { (void)ctx; }

prnn_status prnn_cuda_synchronize(prnn_ctx *ctx)
{
    (void)ctx;
    return PRNN_ERR_NO_DEVICE;
}

void *prnn_cuda_stream(const prnn_ctx *ctx)
{
    (void)ctx;
    return NULL;
}

int prnn_cuda_device_count(void) { return 0; }

prnn_status prnn_cuda_scan_forward(prnn_ctx *ctx, const prnn_scan_desc *d, void *h,
                                   void *hT, const void *a, const void *b, const void *h0)
{
    (void)ctx, (void)d, (void)h, (void)hT, (void)a, (void)b, (void)h0;
    return PRNN_ERR_NO_DEVICE;
}

const char *prnn_cuda_scan_last_kernel(const prnn_ctx *ctx)
{
    (void)ctx;
    return "";
}

prnn_status prnn_cuda_scan_backward(prnn_ctx *ctx, const prnn_scan_desc *d, void *da,
                                    void *db, void *dh0, const void *a, const void *h,
                                    const void *h0, const void *dh, const void *dhT)
{
    (void)ctx, (void)d, (void)da, (void)db, (void)dh0, (void)a, (void)h, (void)h0, (void)dh,
        (void)dhT;
    return PRNN_ERR_NO_DEVICE;
}

int prnn_cuda_device_of(const prnn_ctx *ctx)
{
    (void)ctx;
    return -1;
}

/* Unreachable without a CUDA context, which this build cannot create. */
prnn_status prnn_cuda_mem_alloc(prnn_ctx *ctx, void **ptr, size_t bytes)
{
    (void)ctx, (void)ptr, (void)bytes;
    return PRNN_ERR_NO_DEVICE;
}

void prnn_cuda_mem_free(prnn_ctx *ctx, void *ptr) { (void)ctx, (void)ptr; }

prnn_status prnn_cuda_mem_zero(prnn_ctx *ctx, void *ptr, size_t bytes)
{
    (void)ctx, (void)ptr, (void)bytes;
    return PRNN_ERR_NO_DEVICE;
}

prnn_status prnn_cuda_mem_copy(prnn_ctx *ctx, void *dst, const void *src, size_t bytes,
                               int kind)
{
    (void)ctx, (void)dst, (void)src, (void)bytes, (void)kind;
    return PRNN_ERR_NO_DEVICE;
}

prnn_status prnn_cuda_mem_alloc_pinned(prnn_ctx *ctx, void **ptr, size_t bytes)
{
    (void)ctx, (void)ptr, (void)bytes;
    return PRNN_ERR_NO_DEVICE;
}

void prnn_cuda_mem_free_pinned(prnn_ctx *ctx, void *ptr) { (void)ctx, (void)ptr; }

prnn_status prnn_cuda_mem_convert(prnn_ctx *ctx, void *dst, prnn_dtype dt, const void *src,
                                  prnn_dtype st, int64_t n)
{
    (void)ctx, (void)dst, (void)dt, (void)src, (void)st, (void)n;
    return PRNN_ERR_NO_DEVICE;
}

void *prnn_cuda_scratch(prnn_ctx *ctx, size_t bytes)
{
    (void)ctx, (void)bytes;
    return NULL;
}

prnn_status prnn_cuda_gemm(prnn_ctx *ctx, int transA, int transB, int64_t M, int64_t N,
                           int64_t K, double alpha, const void *A, int64_t lda, const void *B,
                           int64_t ldb, double beta, void *C, int64_t ldc, prnn_dtype ab,
                           prnn_dtype c)
{
    (void)ctx, (void)transA, (void)transB, (void)M, (void)N, (void)K, (void)alpha, (void)A,
        (void)lda, (void)B, (void)ldb, (void)beta, (void)C, (void)ldc, (void)ab, (void)c;
    return PRNN_ERR_NO_DEVICE;
}

void prnn_cuda_release(prnn_ctx *ctx) { (void)ctx; }

prnn_status prnn_cuda_wait_for(prnn_ctx *waiter, prnn_ctx *other)
{
    (void)waiter, (void)other;
    return PRNN_ERR_NO_DEVICE;
}

void *prnn_cuda_aux(prnn_ctx *ctx, int slot, size_t bytes)
{
    (void)ctx, (void)slot, (void)bytes;
    return NULL;
}
