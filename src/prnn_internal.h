/*
 * prnn_internal.h - what the library's translation units share: the context
 * struct, the backends' entry points and small helpers.
 *
 * The public functions in scan.c validate every argument once and then call
 * a backend (scan_cpu.c, or scan_cuda.cu through the prnn_cuda_* functions
 * below). Backends may therefore assume valid, non-overlapping arguments.
 *
 * Size letters: B batch rows, T time steps, H channels.
 */
#ifndef PRNN_INTERNAL_H
#define PRNN_INTERNAL_H

#include "prnn.h"

#ifdef __cplusplus
extern "C" {
#endif

struct prnn_cuda_state; /* defined by the CUDA backend */

struct prnn_ctx {
    prnn_device device;
    int num_threads;

    /* Host workspace, grown on demand and kept. */
    void *host_ws;
    size_t host_ws_bytes;

    /* Layer scratch on the context's device (host memory or device memory),
     * grown on demand and kept; see prnn_scratch(). */
    void *scratch;
    size_t scratch_bytes;

    struct prnn_cuda_state *cuda; /* NULL on CPU contexts */
    void *blas;                   /* cublasHandle_t, created on first GEMM */

    /* The cell layers' device copy of their lengths (cell_cuda.cu), grown
     * on demand and kept; freed by prnn_cuda_release. */
    void *cell_lengths;
    int64_t cell_lengths_cap;

    /* Device buffers for the partial sums of fixed-order reductions, one per
     * user (PRNN_AUX_*), grown on demand and kept; see prnn_cuda_aux. */
    void *aux[2];
    size_t aux_bytes[2];
};

enum { PRNN_AUX_CELL_COLSUM = 0, PRNN_AUX_EMBEDDING = 1 };

/* Returns a host workspace of at least `bytes`, 64-byte aligned, or NULL. */
void *prnn_host_workspace(prnn_ctx *ctx, size_t bytes);

/* Checked multiplication of non-negative sizes; 0 on overflow. */
int prnn_mul_ok(int64_t x, int64_t y, int64_t *out);

/* A byte range [p, p + n) of one argument; p == NULL means absent. The
 * public ops check their outputs against their inputs with these. */
typedef struct prnn_span {
    const void *p;
    int64_t n;
} prnn_span;

static inline int prnn_spans_overlap(prnn_span x, prnn_span y)
{
    if (!x.p || !y.p) return 0;
    const uintptr_t x0 = (uintptr_t)x.p, y0 = (uintptr_t)y.p;
    return x0 < y0 + (uintptr_t)y.n && y0 < x0 + (uintptr_t)x.n;
}

/* 1 when an output overlaps an input or another output. */
static inline int prnn_any_overlap(const prnn_span *out, int nout, const prnn_span *in, int nin)
{
    for (int i = 0; i < nout; i++) {
        for (int j = i + 1; j < nout; j++)
            if (prnn_spans_overlap(out[i], out[j])) return 1;
        for (int j = 0; j < nin; j++)
            if (prnn_spans_overlap(out[i], in[j])) return 1;
    }
    return 0;
}

/*
 * Scratch for one public op at a time: at least `bytes` on the context's
 * device, 256-byte aligned, or NULL when allocation fails. A later call may
 * move it, so an op takes it once and cuts it up. Ops that use scratch must
 * not call other ops that use scratch (the scan uses its own workspace, and
 * prnn_gemm none).
 */
void *prnn_scratch(prnn_ctx *ctx, size_t bytes);

/*
 * Row-major GEMM on the context's device, on its stream:
 *
 *   C (M, N) = alpha * op(A) (M, K) . op(B) (K, N) + beta * C
 *
 * A is (M, K) with row stride lda, or (K, M) when transA; B is (K, N) with
 * row stride ldb, or (N, K) when transB; C has row stride ldc. A and B have
 * dtype ab; C has dtype c, which equals ab or (CUDA, ab BF16/F16) is F32.
 * Products accumulate in fp32 (fp64 for F64). With beta == 0, C is not read.
 * CPU: OpenBLAS (or the built-in loops when the build has no BLAS).
 */
prnn_status prnn_gemm(prnn_ctx *ctx, int transA, int transB,
                      int64_t M, int64_t N, int64_t K,
                      double alpha, const void *A, int64_t lda,
                      const void *B, int64_t ldb,
                      double beta, void *C, int64_t ldc,
                      prnn_dtype ab, prnn_dtype c);

/* ------------------------------------------------------------------------ */
/* CPU backend (scan_cpu.c, gemm_cpu.c)                                                 */

prnn_status prnn_cpu_scan_forward(prnn_ctx *ctx, const prnn_scan_desc *d,
                                  void *h, void *hT,
                                  const void *a, const void *b,
                                  const void *h0);
prnn_status prnn_cpu_scan_backward(prnn_ctx *ctx, const prnn_scan_desc *d,
                                   void *da, void *db, void *dh0,
                                   const void *a, const void *h,
                                   const void *h0, const void *dh,
                                   const void *dhT);
prnn_status prnn_cpu_gemm(prnn_ctx *ctx, int transA, int transB,
                          int64_t M, int64_t N, int64_t K,
                          double alpha, const void *A, int64_t lda,
                          const void *B, int64_t ldb,
                          double beta, void *C, int64_t ldc, prnn_dtype ab);

/* ------------------------------------------------------------------------ */
/* CUDA backend (scan_cuda.cu, cuda_util.cu; cuda_stub.c without CUDA)      */

prnn_status prnn_cuda_ctx_init(prnn_ctx *ctx, const prnn_ctx_config *cfg);
void prnn_cuda_ctx_free(prnn_ctx *ctx);
prnn_status prnn_cuda_synchronize(prnn_ctx *ctx);
void *prnn_cuda_stream(const prnn_ctx *ctx);
int prnn_cuda_device_of(const prnn_ctx *ctx);
int prnn_cuda_device_count(void);

/* cuda_util.cu: memory, scratch and GEMM on the context's device and stream.
 * prnn_cuda_release frees what these created (scratch, cuBLAS handle) and the cell
 * layers' lengths buffer. */
prnn_status prnn_cuda_mem_alloc(prnn_ctx *ctx, void **ptr, size_t bytes);
void prnn_cuda_mem_free(prnn_ctx *ctx, void *ptr);
prnn_status prnn_cuda_mem_zero(prnn_ctx *ctx, void *ptr, size_t bytes);
prnn_status prnn_cuda_mem_copy(prnn_ctx *ctx, void *dst, const void *src, size_t bytes,
                               int kind); /* 0 h2d, 1 d2h (waits), 2 d2d */
prnn_status prnn_cuda_mem_alloc_pinned(prnn_ctx *ctx, void **ptr, size_t bytes);
void prnn_cuda_mem_free_pinned(prnn_ctx *ctx, void *ptr);
prnn_status prnn_cuda_mem_convert(prnn_ctx *ctx, void *dst, prnn_dtype dt,
                                  const void *src, prnn_dtype st, int64_t n);
void *prnn_cuda_scratch(prnn_ctx *ctx, size_t bytes);
prnn_status prnn_cuda_gemm(prnn_ctx *ctx, int transA, int transB,
                           int64_t M, int64_t N, int64_t K,
                           double alpha, const void *A, int64_t lda,
                           const void *B, int64_t ldb,
                           double beta, void *C, int64_t ldc,
                           prnn_dtype ab, prnn_dtype c);
void prnn_cuda_release(prnn_ctx *ctx);
/* Device buffer `slot` of at least `bytes` (grown after waiting for the
 * stream), or NULL when allocation fails. Unlike prnn_scratch it may be
 * used inside an op that holds the scratch. */
void *prnn_cuda_aux(prnn_ctx *ctx, int slot, size_t bytes);
prnn_status prnn_cuda_wait_for(prnn_ctx *waiter, prnn_ctx *other);

/* Arguments as validated by scan.c: device pointers, d->lengths in host
 * memory (the backend copies it into its workspace). */
prnn_status prnn_cuda_scan_forward(prnn_ctx *ctx, const prnn_scan_desc *d,
                                   void *h, void *hT,
                                   const void *a, const void *b,
                                   const void *h0);
/* prnn_scan_last_kernel on a CUDA context. */
const char *prnn_cuda_scan_last_kernel(const prnn_ctx *ctx);
prnn_status prnn_cuda_scan_backward(prnn_ctx *ctx, const prnn_scan_desc *d,
                                    void *da, void *db, void *dh0,
                                    const void *a, const void *h,
                                    const void *h0, const void *dh,
                                    const void *dhT);

#ifdef __cplusplus
}
#endif

#endif /* PRNN_INTERNAL_H */
