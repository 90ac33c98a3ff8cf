/*
 * gemm_cpu.c - row-major GEMM on the CPU: OpenBLAS's cblas_sgemm/dgemm when
 * the build found it (PRNN_HAVE_CBLAS), else plain blocked loops threaded
 * with OpenMP, so that a machine without BLAS still builds and runs
 * everything (slowly, and correctly).
 */
#include <stdint.h>
#include <string.h>

#include "prnn_internal.h"

#ifdef PRNN_HAVE_CBLAS
#include <cblas.h>

/* OpenBLAS's thread count is global; follow the calling context's, so that
 * a context asked to use one thread does not get a BLAS using all cores. */
static int g_blas_threads;
static void blas_threads(int n)
{
    if (n > 0 && n != g_blas_threads) {
        openblas_set_num_threads(n);
        g_blas_threads = n;
    }
}
#endif

#ifndef PRNN_HAVE_CBLAS
/* C = alpha * op(A) op(B) + beta * C, one output row per iteration; the
 * inner loop runs over N with unit stride whenever B is not transposed. */
#define DEFINE_GEMM_LOOPS(NAME, T)                                              \
    static void NAME(int ta, int tb, int64_t M, int64_t N, int64_t K, T alpha,  \
                     const T *A, int64_t lda, const T *B, int64_t ldb, T beta,  \
                     T *C, int64_t ldc)                                         \
    {                                                                           \
        _Pragma("omp parallel for schedule(static)")                            \
        for (int64_t i = 0; i < M; i++) {                                       \
            T *c = C + i * ldc;                                                 \
            if (beta == 0)                                                      \
                for (int64_t j = 0; j < N; j++) c[j] = 0;                       \
            else if (beta != 1)                                                 \
                for (int64_t j = 0; j < N; j++) c[j] *= beta;                   \
            for (int64_t k = 0; k < K; k++) {                                   \
                const T aik = alpha * (ta ? A[k * lda + i] : A[i * lda + k]);   \
                if (aik == 0) continue;                                         \
                if (tb)                                                         \
                    for (int64_t j = 0; j < N; j++) c[j] += aik * B[j * ldb + k]; \
                else {                                                          \
                    const T *b = B + k * ldb;                                   \
                    for (int64_t j = 0; j < N; j++) c[j] += aik * b[j];         \
                }                                                               \
            }                                                                   \
        }                                                                       \
    }
DEFINE_GEMM_LOOPS(gemm_loops_f32, float)
DEFINE_GEMM_LOOPS(gemm_loops_f64, double)
#endif

prnn_status prnn_cpu_gemm(prnn_ctx *ctx, int transA, int transB, int64_t M, int64_t N,
                          int64_t K, double alpha, const void *A, int64_t lda, const void *B,
                          int64_t ldb, double beta, void *C, int64_t ldc, prnn_dtype ab)
{
    if (K == 0) { /* C = beta * C */
        for (int64_t i = 0; i < M; i++)
            for (int64_t j = 0; j < N; j++) {
                if (ab == PRNN_DTYPE_F32) {
                    float *c = (float *)C + i * ldc + j;
                    *c = beta == 0 ? 0.0f : (float)(beta * *c);
                } else {
                    double *c = (double *)C + i * ldc + j;
                    *c = beta == 0 ? 0.0 : beta * *c;
                }
            }
        return PRNN_OK;
    }
#ifdef PRNN_HAVE_CBLAS
    if (M > INT32_MAX || N > INT32_MAX || K > INT32_MAX || lda > INT32_MAX ||
        ldb > INT32_MAX || ldc > INT32_MAX)
        return PRNN_ERR_UNSUPPORTED;
    blas_threads(ctx->num_threads);
    const enum CBLAS_TRANSPOSE ta = transA ? CblasTrans : CblasNoTrans;
    const enum CBLAS_TRANSPOSE tb = transB ? CblasTrans : CblasNoTrans;
    if (ab == PRNN_DTYPE_F32)
        cblas_sgemm(CblasRowMajor, ta, tb, (int)M, (int)N, (int)K, (float)alpha, A, (int)lda, B,
                    (int)ldb, (float)beta, C, (int)ldc);
    else
        cblas_dgemm(CblasRowMajor, ta, tb, (int)M, (int)N, (int)K, alpha, A, (int)lda, B,
                    (int)ldb, beta, C, (int)ldc);
#else
    (void)ctx;
    if (ab == PRNN_DTYPE_F32)
        gemm_loops_f32(transA, transB, M, N, K, (float)alpha, A, lda, B, ldb, (float)beta, C,
                       ldc);
    else
        gemm_loops_f64(transA, transB, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
#endif
    return PRNN_OK;
}
