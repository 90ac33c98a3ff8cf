/*
 * blocks.c - the model blocks and optimizer ops of prnn_blocks.h.
 *
 * Each public function validates its arguments once, so that the backends
 * can assume sizes >= 1, no overflow, a dtype the device supports, the
 * required pointers present and no aliasing. Then it runs on the context's
 * device: CUDA contexts go to blocks_cuda.cu (in builds that define
 * PRNN_BLOCKS_CUDA), CPU contexts to the plain C below, which is also the
 * oracle the CUDA backend is tested against.
 *
 * The CPU backend. On the CPU every tensor of an op, dtype or acc, has the
 * same type (float for F32, double for F64); the math runs in double and
 * each result is rounded once when stored. Row work runs one row per OpenMP
 * iteration. Sums over rows (parameter gradients, the loss, the gradient
 * norm) run in a fixed order that does not depend on the thread count: a
 * column sum gives each thread whole columns and walks the rows in order.
 * Dropout, AdamW and clipping must match CUDA to the bit, so they run in
 * float through the shared functions of blocks_internal.h.
 *
 * Size letters: N rows (tokens), D features, O outputs, V vocabulary,
 * n elements.
 */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "blocks_internal.h"
#include "cpu_vmath.h"

/* Columns one thread owns in a column sum: enough contiguous doubles per row
 * to stream well, few enough that D = 256 still feeds four threads. */
#define COL_CHUNK 64

/* Elements per block of the CPU gradient-norm sum (the order is fixed by
 * this constant, not by the thread count). */
#define SUMSQ_BLOCK 4096

#ifdef PRNN_BLOCKS_CUDA
#define RUN_CUDA(call) return (call)
#else
#define RUN_CUDA(call) return PRNN_ERR_NO_DEVICE /* no CUDA context exists in this build */
#endif

/* Loops over fewer elements than this run on the calling thread alone:
 * waking a team costs more than the work. */
static inline int par_ok(int64_t work) { return work >= 32768; }

/* ------------------------------------------------------------------------ */
/* Validation                                                               */

/* In place is fine for elementwise ops (the same element is read, then
 * written); a shifted overlap is not. */
static int partial_overlap(prnn_span out, prnn_span in)
{
    return prnn_spans_overlap(out, in) && out.p != in.p;
}

/* Bytes of a (rows, cols) tensor of esize-byte elements, or 0 when the count
 * overflows or leaves no headroom for the pointer arithmetic done on it. */
static int64_t tensor_bytes(int64_t rows, int64_t cols, int64_t esize)
{
    int64_t e, b;
    if (!prnn_mul_ok(rows, cols, &e) || !prnn_mul_ok(e, esize, &b)) return 0;
    if (b > INT64_MAX / 4 || (uint64_t)b > (uint64_t)SIZE_MAX / 4) return 0;
    return b;
}

/* The context, sizes >= 1 and a dtype the context's device supports. */
static prnn_status prologue(const prnn_ctx *ctx, prnn_dtype dt, int64_t a, int64_t b, int64_t c)
{
    if (!ctx) return PRNN_ERR_NULL_POINTER;
    if (a < 1 || b < 1 || c < 1) return PRNN_ERR_INVALID_SIZE;
    if ((unsigned)dt >= PRNN_DTYPE_COUNT_) return PRNN_ERR_INVALID_ARGUMENT;
    if (ctx->device == PRNN_DEVICE_CUDA)
        return dt == PRNN_DTYPE_F32 || dt == PRNN_DTYPE_BF16 ? PRNN_OK : PRNN_ERR_UNSUPPORTED;
    return dt == PRNN_DTYPE_F32 || dt == PRNN_DTYPE_F64 ? PRNN_OK : PRNN_ERR_UNSUPPORTED;
}

static int64_t acc_size(prnn_dtype dt) { return dt == PRNN_DTYPE_F64 ? 8 : 4; }

static prnn_dtype acc_dtype(prnn_dtype dt)
{
    return dt == PRNN_DTYPE_F64 ? PRNN_DTYPE_F64 : PRNN_DTYPE_F32;
}

/* The CPU checks indices before any write. lo is 0 for ids, -1 for targets
 * (the ignore marker). */
static int indices_ok(const int32_t *idx, int64_t N, int64_t lo, int64_t V, int32_t *bad)
{
    for (int64_t n = 0; n < N; n++)
        if (idx[n] < lo || idx[n] >= V) {
            if (bad) *bad = 1;
            return 0;
        }
    return 1;
}

/* ------------------------------------------------------------------------ */
/* CPU element access: float or double by f64                               */

static inline double ld(const void *p, int64_t i, int f64)
{
    return f64 ? ((const double *)p)[i] : (double)((const float *)p)[i];
}

static inline void st(void *p, int64_t i, int f64, double v)
{
    if (f64)
        ((double *)p)[i] = v;
    else
        ((float *)p)[i] = (float)v;
}

/* What a column sum adds up, per element (n, d). */
typedef enum {
    COL_PLAIN, /* dst0 += dy */
    COL_RMS,   /* dst0 += dy * x * rstd[n] */
    COL_LN     /* dst0 += dy * (x - mean[n]) * rstd[n], dst1 += dy */
} col_mode;

/* Parameter gradients of the row ops: each thread owns COL_CHUNK columns
 * and walks the rows in order, so the sums are the same on any thread
 * count.
 *
 *   dst0, dst1 (D)    in/out, accumulated (dst1 optional)
 *   dy, x      (N, D)
 *   mean, rstd (N)
 */
static void cpu_colsum(prnn_ctx *ctx, int f64, col_mode mode, void *dst0, void *dst1,
                       const void *dy, const void *x, const void *mean, const void *rstd,
                       int64_t N, int64_t D)
{
    const int64_t chunks = (D + COL_CHUNK - 1) / COL_CHUNK;
#pragma omp parallel for num_threads(ctx->num_threads) schedule(static) if (par_ok(N * D))
    for (int64_t c = 0; c < chunks; c++) {
        const int64_t d0 = c * COL_CHUNK, w = D - d0 < COL_CHUNK ? D - d0 : COL_CHUNK;
        double s0[COL_CHUNK] = {0}, s1[COL_CHUNK] = {0};
        for (int64_t n = 0; n < N; n++) {
            const int64_t row = n * D + d0;
            const double r = mode == COL_PLAIN ? 0 : ld(rstd, n, f64);
            const double mu = mode == COL_LN ? ld(mean, n, f64) : 0;
            for (int64_t j = 0; j < w; j++) {
                const double g = ld(dy, row + j, f64);
                if (mode == COL_PLAIN) {
                    s0[j] += g;
                } else {
                    s0[j] += g * ((ld(x, row + j, f64) - mu) * r);
                    s1[j] += g;
                }
            }
        }
        for (int64_t j = 0; j < w; j++) {
            st(dst0, d0 + j, f64, ld(dst0, d0 + j, f64) + s0[j]);
            if (dst1) st(dst1, d0 + j, f64, ld(dst1, d0 + j, f64) + s1[j]);
        }
    }
}

/* ------------------------------------------------------------------------ */
/* Embedding                                                                */

prnn_status prnn_embedding_forward(prnn_ctx *ctx, void *y, int32_t *bad, const int32_t *ids,
                                   const void *table, int64_t N, int64_t V, int64_t D,
                                   prnn_dtype dtype)
{
    prnn_status s = prologue(ctx, dtype, N, V, D);
    if (s != PRNN_OK) return s;
    if (!y || !ids || !table) return PRNN_ERR_NULL_POINTER;
    const int64_t es = (int64_t)prnn_dtype_size(dtype);
    const int64_t yb = tensor_bytes(N, D, es), tb = tensor_bytes(V, D, es);
    const int64_t ib = tensor_bytes(N, 1, 4);
    if (!yb || !tb || !ib) return PRNN_ERR_SIZE_OVERFLOW;
    const prnn_span out[] = {{y, yb}, {bad, 4}};
    const prnn_span in[] = {{ids, ib}, {table, tb}};
    if (prnn_any_overlap(out, 2, in, 2)) return PRNN_ERR_ALIASING;

    if (ctx->device == PRNN_DEVICE_CUDA)
        RUN_CUDA(prnn_cuda_blocks_embedding_fwd(ctx, dtype, y, bad, ids, table, N, V, D));

    if (!indices_ok(ids, N, 0, V, bad)) return PRNN_ERR_INVALID_ARGUMENT;
    const size_t row = (size_t)D * (size_t)es;
#pragma omp parallel for num_threads(ctx->num_threads) schedule(static) if (par_ok(N * D))
    for (int64_t n = 0; n < N; n++)
        memcpy((char *)y + (size_t)n * row, (const char *)table + (size_t)ids[n] * row, row);
    return PRNN_OK;
}

prnn_status prnn_embedding_backward(prnn_ctx *ctx, void *dtable, const int32_t *ids,
                                    const void *dy, int64_t N, int64_t V, int64_t D,
                                    prnn_dtype dtype)
{
    prnn_status s = prologue(ctx, dtype, N, V, D);
    if (s != PRNN_OK) return s;
    if (!dtable || !ids || !dy) return PRNN_ERR_NULL_POINTER;
    const int64_t es = (int64_t)prnn_dtype_size(dtype);
    const int64_t db = tensor_bytes(V, D, acc_size(dtype)), yb = tensor_bytes(N, D, es);
    const int64_t ib = tensor_bytes(N, 1, 4);
    if (!db || !yb || !ib) return PRNN_ERR_SIZE_OVERFLOW;
    const prnn_span out[] = {{dtable, db}};
    const prnn_span in[] = {{ids, ib}, {dy, yb}};
    if (prnn_any_overlap(out, 1, in, 2)) return PRNN_ERR_ALIASING;

    if (ctx->device == PRNN_DEVICE_CUDA)
        RUN_CUDA(prnn_cuda_blocks_embedding_bwd(ctx, dtype, (float *)dtable, ids, dy, N, V, D));

    if (!indices_ok(ids, N, 0, V, NULL)) return PRNN_ERR_INVALID_ARGUMENT;
    /* Threads own columns and walk the tokens in order: no two threads touch
     * one element, and a repeated id sums its rows in token order. */
    const int f64 = dtype == PRNN_DTYPE_F64;
    const int64_t chunks = (D + COL_CHUNK - 1) / COL_CHUNK;
#pragma omp parallel for num_threads(ctx->num_threads) schedule(static) if (par_ok(N * D))
    for (int64_t c = 0; c < chunks; c++) {
        const int64_t d0 = c * COL_CHUNK, d1 = d0 + COL_CHUNK < D ? d0 + COL_CHUNK : D;
        for (int64_t n = 0; n < N; n++) {
            const int64_t src = n * D, dst = (int64_t)ids[n] * D;
            for (int64_t d = d0; d < d1; d++)
                st(dtable, dst + d, f64, ld(dtable, dst + d, f64) + ld(dy, src + d, f64));
        }
    }
    return PRNN_OK;
}

/* ------------------------------------------------------------------------ */
/* Linear                                                                   */

prnn_status prnn_linear_forward(prnn_ctx *ctx, void *y, const void *x, const void *W,
                                const void *bias, int64_t N, int64_t D, int64_t O,
                                prnn_dtype dtype)
{
    prnn_status s = prologue(ctx, dtype, N, D, O);
    if (s != PRNN_OK) return s;
    if (!y || !x || !W) return PRNN_ERR_NULL_POINTER;
    const int64_t es = (int64_t)prnn_dtype_size(dtype);
    const int64_t yb = tensor_bytes(N, O, es), xb = tensor_bytes(N, D, es);
    const int64_t wb = tensor_bytes(D, O, es), bb = tensor_bytes(O, 1, es);
    if (!yb || !xb || !wb || !bb) return PRNN_ERR_SIZE_OVERFLOW;
    const prnn_span out[] = {{y, yb}};
    const prnn_span in[] = {{x, xb}, {W, wb}, {bias, bb}};
    if (prnn_any_overlap(out, 1, in, 3)) return PRNN_ERR_ALIASING;

    /* The bias goes in first and the GEMM adds onto it (beta = 1): one
     * rounding of y, which matters for bf16. */
    if (bias) {
        if (ctx->device == PRNN_DEVICE_CUDA) {
#ifdef PRNN_BLOCKS_CUDA
            s = prnn_cuda_blocks_rows_fill(ctx, dtype, y, bias, N, O);
#else
            s = PRNN_ERR_NO_DEVICE;
#endif
            if (s != PRNN_OK) return s;
        } else {
            const size_t row = (size_t)O * (size_t)es;
#pragma omp parallel for num_threads(ctx->num_threads) schedule(static) if (par_ok(N * (int64_t)row))
            for (int64_t n = 0; n < N; n++) memcpy((char *)y + (size_t)n * row, bias, row);
        }
    }
    return prnn_gemm(ctx, 0, 0, N, O, D, 1.0, x, D, W, O, bias ? 1.0 : 0.0, y, O, dtype, dtype);
}

prnn_status prnn_linear_backward(prnn_ctx *ctx, void *dx, void *dW, void *dbias, const void *dy,
                                 const void *x, const void *W, int64_t N, int64_t D, int64_t O,
                                 prnn_dtype dtype)
{
    prnn_status s = prologue(ctx, dtype, N, D, O);
    if (s != PRNN_OK) return s;
    if (!dW || !dy || !x || !W) return PRNN_ERR_NULL_POINTER;
    const int64_t es = (int64_t)prnn_dtype_size(dtype), as = acc_size(dtype);
    const int64_t yb = tensor_bytes(N, O, es), xb = tensor_bytes(N, D, es);
    const int64_t wb = tensor_bytes(D, O, es), dwb = tensor_bytes(D, O, as);
    const int64_t dbb = tensor_bytes(O, 1, as);
    if (!yb || !xb || !wb || !dwb || !dbb) return PRNN_ERR_SIZE_OVERFLOW;
    const prnn_span out[] = {{dx, xb}, {dW, dwb}, {dbias, dbb}};
    const prnn_span in[] = {{dy, yb}, {x, xb}, {W, wb}};
    if (prnn_any_overlap(out, 3, in, 3)) return PRNN_ERR_ALIASING;

    if (dx) { /* dx (N, D) = dy (N, O) W^T */
        s = prnn_gemm(ctx, 0, 1, N, D, O, 1.0, dy, O, W, O, 0.0, dx, D, dtype, dtype);
        if (s != PRNN_OK) return s;
    }
    /* dW (D, O) += x^T (D, N) dy (N, O), accumulated in the acc type */
    s = prnn_gemm(ctx, 1, 0, D, O, N, 1.0, x, D, dy, O, 1.0, dW, O, dtype, acc_dtype(dtype));
    if (s != PRNN_OK || !dbias) return s;
    if (ctx->device == PRNN_DEVICE_CUDA)
        RUN_CUDA(prnn_cuda_blocks_colsum_add(ctx, dtype, (float *)dbias, dy, N, O));
    cpu_colsum(ctx, dtype == PRNN_DTYPE_F64, COL_PLAIN, dbias, NULL, dy, NULL, NULL, NULL, N, O);
    return PRNN_OK;
}

/* ------------------------------------------------------------------------ */
/* RMSNorm and LayerNorm                                                    */

/* eps must be a finite number >= 0 that the acc type can hold. */
static int eps_ok(double eps) { return eps >= 0 && eps <= 1e30; }

prnn_status prnn_rmsnorm_forward(prnn_ctx *ctx, void *y, void *rstd, const void *x,
                                 const void *gain, int64_t N, int64_t D, double eps,
                                 prnn_dtype dtype)
{
    prnn_status s = prologue(ctx, dtype, N, D, 1);
    if (s != PRNN_OK) return s;
    if (!y || !x || !gain) return PRNN_ERR_NULL_POINTER;
    if (!eps_ok(eps)) return PRNN_ERR_INVALID_ARGUMENT;
    const int64_t es = (int64_t)prnn_dtype_size(dtype);
    const int64_t xb = tensor_bytes(N, D, es), gb = tensor_bytes(D, 1, es);
    const int64_t sb = tensor_bytes(N, 1, acc_size(dtype));
    if (!xb || !gb || !sb) return PRNN_ERR_SIZE_OVERFLOW;
    const prnn_span out[] = {{y, xb}, {rstd, sb}};
    const prnn_span in[] = {{x, xb}, {gain, gb}};
    if (prnn_any_overlap(out, 2, in, 2)) return PRNN_ERR_ALIASING;

    if (ctx->device == PRNN_DEVICE_CUDA)
        RUN_CUDA(prnn_cuda_blocks_rmsnorm_fwd(ctx, dtype, y, (float *)rstd, x, gain, N, D,
                                              (float)eps));

    const int f64 = dtype == PRNN_DTYPE_F64;
#pragma omp parallel for num_threads(ctx->num_threads) schedule(static) if (par_ok(N * D))
    for (int64_t n = 0; n < N; n++) {
        const int64_t row = n * D;
        double ss = 0;
        for (int64_t d = 0; d < D; d++) {
            const double v = ld(x, row + d, f64);
            ss += v * v;
        }
        const double r = 1.0 / sqrt(ss / (double)D + eps);
        if (rstd) st(rstd, n, f64, r);
        for (int64_t d = 0; d < D; d++)
            st(y, row + d, f64, ld(x, row + d, f64) * r * ld(gain, d, f64));
    }
    return PRNN_OK;
}

/*
 * With xhat = x r and dxhat = dy * gain:
 *   dx = r (dxhat - xhat mean(dxhat xhat)) = r dxhat - x r^3 sum(dxhat x) / D
 */
prnn_status prnn_rmsnorm_backward(prnn_ctx *ctx, void *dx, void *dgain, const void *dy,
                                  const void *x, const void *gain, const void *rstd,
                                  int64_t N, int64_t D, prnn_dtype dtype)
{
    prnn_status s = prologue(ctx, dtype, N, D, 1);
    if (s != PRNN_OK) return s;
    if (!dx || !dgain || !dy || !x || !gain || !rstd) return PRNN_ERR_NULL_POINTER;
    const int64_t es = (int64_t)prnn_dtype_size(dtype), as = acc_size(dtype);
    const int64_t xb = tensor_bytes(N, D, es), gb = tensor_bytes(D, 1, es);
    const int64_t dgb = tensor_bytes(D, 1, as), sb = tensor_bytes(N, 1, as);
    if (!xb || !gb || !dgb || !sb) return PRNN_ERR_SIZE_OVERFLOW;
    const prnn_span out[] = {{dx, xb}, {dgain, dgb}};
    const prnn_span in[] = {{dy, xb}, {x, xb}, {gain, gb}, {rstd, sb}};
    if (prnn_any_overlap(out, 2, in, 4)) return PRNN_ERR_ALIASING;

    if (ctx->device == PRNN_DEVICE_CUDA)
        RUN_CUDA(prnn_cuda_blocks_rmsnorm_bwd(ctx, dtype, dx, (float *)dgain, dy, x, gain,
                                              (const float *)rstd, N, D));

    const int f64 = dtype == PRNN_DTYPE_F64;
#pragma omp parallel for num_threads(ctx->num_threads) schedule(static) if (par_ok(N * D))
    for (int64_t n = 0; n < N; n++) {
        const int64_t row = n * D;
        const double r = ld(rstd, n, f64);
        double S = 0;
        for (int64_t d = 0; d < D; d++)
            S += ld(dy, row + d, f64) * ld(gain, d, f64) * ld(x, row + d, f64);
        const double c = r * r * r * S / (double)D;
        for (int64_t d = 0; d < D; d++)
            st(dx, row + d, f64,
               r * ld(dy, row + d, f64) * ld(gain, d, f64) - ld(x, row + d, f64) * c);
    }
    cpu_colsum(ctx, f64, COL_RMS, dgain, NULL, dy, x, NULL, rstd, N, D);
    return PRNN_OK;
}

prnn_status prnn_layernorm_forward(prnn_ctx *ctx, void *y, void *mean, void *rstd,
                                   const void *x, const void *gain, const void *bias,
                                   int64_t N, int64_t D, double eps, prnn_dtype dtype)
{
    prnn_status s = prologue(ctx, dtype, N, D, 1);
    if (s != PRNN_OK) return s;
    if (!y || !x || !gain) return PRNN_ERR_NULL_POINTER;
    if (!eps_ok(eps)) return PRNN_ERR_INVALID_ARGUMENT;
    const int64_t es = (int64_t)prnn_dtype_size(dtype);
    const int64_t xb = tensor_bytes(N, D, es), gb = tensor_bytes(D, 1, es);
    const int64_t sb = tensor_bytes(N, 1, acc_size(dtype));
    if (!xb || !gb || !sb) return PRNN_ERR_SIZE_OVERFLOW;
    const prnn_span out[] = {{y, xb}, {mean, sb}, {rstd, sb}};
    const prnn_span in[] = {{x, xb}, {gain, gb}, {bias, gb}};
    if (prnn_any_overlap(out, 3, in, 3)) return PRNN_ERR_ALIASING;

    if (ctx->device == PRNN_DEVICE_CUDA)
        RUN_CUDA(prnn_cuda_blocks_layernorm_fwd(ctx, dtype, y, (float *)mean, (float *)rstd, x,
                                                gain, bias, N, D, (float)eps));

    const int f64 = dtype == PRNN_DTYPE_F64;
#pragma omp parallel for num_threads(ctx->num_threads) schedule(static) if (par_ok(N * D))
    for (int64_t n = 0; n < N; n++) {
        const int64_t row = n * D;
        /* Two passes (mean, then squared deviations): no cancellation when
         * the mean is large against the spread. */
        double mu = 0, var = 0;
        for (int64_t d = 0; d < D; d++) mu += ld(x, row + d, f64);
        mu /= (double)D;
        for (int64_t d = 0; d < D; d++) {
            const double c = ld(x, row + d, f64) - mu;
            var += c * c;
        }
        const double r = 1.0 / sqrt(var / (double)D + eps);
        if (mean) st(mean, n, f64, mu);
        if (rstd) st(rstd, n, f64, r);
        for (int64_t d = 0; d < D; d++)
            st(y, row + d, f64,
               (ld(x, row + d, f64) - mu) * r * ld(gain, d, f64) + (bias ? ld(bias, d, f64) : 0));
    }
    return PRNN_OK;
}

/*
 * With xhat = (x - mean) r and dxhat = dy * gain:
 *   dx = r (dxhat - mean(dxhat) - xhat mean(dxhat xhat))
 */
prnn_status prnn_layernorm_backward(prnn_ctx *ctx, void *dx, void *dgain, void *dbias,
                                    const void *dy, const void *x, const void *gain,
                                    const void *mean, const void *rstd, int64_t N, int64_t D,
                                    prnn_dtype dtype)
{
    prnn_status s = prologue(ctx, dtype, N, D, 1);
    if (s != PRNN_OK) return s;
    if (!dx || !dgain || !dy || !x || !gain || !mean || !rstd) return PRNN_ERR_NULL_POINTER;
    const int64_t es = (int64_t)prnn_dtype_size(dtype), as = acc_size(dtype);
    const int64_t xb = tensor_bytes(N, D, es), gb = tensor_bytes(D, 1, es);
    const int64_t dgb = tensor_bytes(D, 1, as), sb = tensor_bytes(N, 1, as);
    if (!xb || !gb || !dgb || !sb) return PRNN_ERR_SIZE_OVERFLOW;
    const prnn_span out[] = {{dx, xb}, {dgain, dgb}, {dbias, dgb}};
    const prnn_span in[] = {{dy, xb}, {x, xb}, {gain, gb}, {mean, sb}, {rstd, sb}};
    if (prnn_any_overlap(out, 3, in, 5)) return PRNN_ERR_ALIASING;

    if (ctx->device == PRNN_DEVICE_CUDA)
        RUN_CUDA(prnn_cuda_blocks_layernorm_bwd(ctx, dtype, dx, (float *)dgain, (float *)dbias,
                                                dy, x, gain, (const float *)mean,
                                                (const float *)rstd, N, D));

    const int f64 = dtype == PRNN_DTYPE_F64;
#pragma omp parallel for num_threads(ctx->num_threads) schedule(static) if (par_ok(N * D))
    for (int64_t n = 0; n < N; n++) {
        const int64_t row = n * D;
        const double mu = ld(mean, n, f64), r = ld(rstd, n, f64);
        double a = 0, b = 0;
        for (int64_t d = 0; d < D; d++) {
            const double g = ld(dy, row + d, f64) * ld(gain, d, f64);
            a += g;
            b += g * (ld(x, row + d, f64) - mu) * r;
        }
        a /= (double)D;
        b /= (double)D;
        for (int64_t d = 0; d < D; d++) {
            const double g = ld(dy, row + d, f64) * ld(gain, d, f64);
            const double xhat = (ld(x, row + d, f64) - mu) * r;
            st(dx, row + d, f64, r * (g - a - xhat * b));
        }
    }
    cpu_colsum(ctx, f64, COL_LN, dgain, dbias, dy, x, mean, rstd, N, D);
    return PRNN_OK;
}

/* ------------------------------------------------------------------------ */
/* Softmax cross-entropy                                                    */

prnn_status prnn_xent_forward(prnn_ctx *ctx, void *loss, void *row_loss, void *lse, int32_t *bad,
                              const void *logits, const int32_t *targets, int64_t N, int64_t V,
                              prnn_dtype dtype)
{
    prnn_status s = prologue(ctx, dtype, N, V, 1);
    if (s != PRNN_OK) return s;
    if (!loss || !logits || !targets) return PRNN_ERR_NULL_POINTER;
    const int64_t es = (int64_t)prnn_dtype_size(dtype), as = acc_size(dtype);
    const int64_t zb = tensor_bytes(N, V, es), sb = tensor_bytes(N, 1, as);
    const int64_t tb = tensor_bytes(N, 1, 4);
    if (!zb || !sb || !tb) return PRNN_ERR_SIZE_OVERFLOW;
    const prnn_span out[] = {{loss, as}, {row_loss, sb}, {lse, sb}, {bad, 4}};
    const prnn_span in[] = {{logits, zb}, {targets, tb}};
    if (prnn_any_overlap(out, 4, in, 2)) return PRNN_ERR_ALIASING;

    if (ctx->device == PRNN_DEVICE_CUDA)
        RUN_CUDA(prnn_cuda_blocks_xent_fwd(ctx, dtype, (float *)loss, (float *)row_loss,
                                           (float *)lse, bad, logits, targets, N, V));

    if (!indices_ok(targets, N, -1, V, bad)) return PRNN_ERR_INVALID_ARGUMENT;
    double *rl = prnn_scratch(ctx, (size_t)N * sizeof(double)); /* (N) row losses */
    if (!rl) return PRNN_ERR_OUT_OF_MEMORY;
    const int f64 = dtype == PRNN_DTYPE_F64;
#pragma omp parallel for num_threads(ctx->num_threads) schedule(static) if (par_ok(N * V))
    for (int64_t n = 0; n < N; n++) {
        const int64_t row = n * V;
        double m = -INFINITY, sum = 0;
        for (int64_t v = 0; v < V; v++) {
            const double z = ld(logits, row + v, f64);
            if (z > m) m = z;
        }
        if (f64) {
            for (int64_t v = 0; v < V; v++) sum += exp(ld(logits, row + v, f64) - m);
        } else { /* e^x in float, as the GPU computes it (vectorized: cpu_vmath.h) */
            const float *z = (const float *)logits + row, mf = (float)m;
#pragma omp simd reduction(+ : sum)
            for (int64_t v = 0; v < V; v++) sum += (double)expf(z[v] - mf);
        }
        const double l = m + log(sum);
        const int32_t t = targets[n];
        rl[n] = t >= 0 ? l - ld(logits, row + t, f64) : 0.0;
        if (lse) st(lse, n, f64, l);
        if (row_loss) st(row_loss, n, f64, rl[n]);
    }
    double total = 0;
    int64_t count = 0;
    for (int64_t n = 0; n < N; n++) { /* in row order: the same bits every run */
        total += rl[n];
        count += targets[n] >= 0;
    }
    st(loss, 0, f64, count ? total / (double)count : 0.0);
    return PRNN_OK;
}

prnn_status prnn_xent_backward(prnn_ctx *ctx, void *dlogits, const void *logits,
                               const int32_t *targets, const void *lse, int64_t N, int64_t V,
                               double dloss, prnn_dtype dtype)
{
    prnn_status s = prologue(ctx, dtype, N, V, 1);
    if (s != PRNN_OK) return s;
    if (!dlogits || !logits || !targets || !lse) return PRNN_ERR_NULL_POINTER;
    if (!isfinite(dloss)) return PRNN_ERR_INVALID_ARGUMENT;
    const int64_t es = (int64_t)prnn_dtype_size(dtype), as = acc_size(dtype);
    const int64_t zb = tensor_bytes(N, V, es), sb = tensor_bytes(N, 1, as);
    const int64_t tb = tensor_bytes(N, 1, 4);
    if (!zb || !sb || !tb) return PRNN_ERR_SIZE_OVERFLOW;
    const prnn_span out[] = {{dlogits, zb}};
    const prnn_span in[] = {{logits, zb}, {targets, tb}, {lse, sb}};
    if (prnn_any_overlap(out, 1, in, 3)) return PRNN_ERR_ALIASING;

    if (ctx->device == PRNN_DEVICE_CUDA)
        RUN_CUDA(prnn_cuda_blocks_xent_bwd(ctx, dtype, dlogits, logits, targets,
                                           (const float *)lse, N, V, (float)dloss));

    if (!indices_ok(targets, N, -1, V, NULL)) return PRNN_ERR_INVALID_ARGUMENT;
    int64_t count = 0;
    for (int64_t n = 0; n < N; n++) count += targets[n] >= 0;
    const double scale = count ? dloss / (double)count : 0.0;
    const int f64 = dtype == PRNN_DTYPE_F64;
#pragma omp parallel for num_threads(ctx->num_threads) schedule(static) if (par_ok(N * V))
    for (int64_t n = 0; n < N; n++) {
        const int64_t row = n * V;
        const int32_t t = targets[n];
        const double l = ld(lse, n, f64);
        if (t < 0) {
            for (int64_t v = 0; v < V; v++) st(dlogits, row + v, f64, 0.0);
        } else if (f64) {
            for (int64_t v = 0; v < V; v++) {
                const double p = exp(ld(logits, row + v, f64) - l);
                st(dlogits, row + v, f64, (p - (v == t)) * scale);
            }
        } else { /* in float, as the GPU computes it (vectorized: cpu_vmath.h) */
            const float *z = (const float *)logits + row, lf = (float)l, sf = (float)scale;
            float *dz = (float *)dlogits + row;
#pragma omp simd
            for (int64_t v = 0; v < V; v++) dz[v] = (expf(z[v] - lf) - (float)(v == t)) * sf;
        }
    }
    return PRNN_OK;
}

/* ------------------------------------------------------------------------ */
/* Dropout                                                                  */

int prnn_dropout_keep(uint64_t seed, int64_t i, double p)
{
    return blocks_dropout_keep(blocks_dropout_key(seed), (uint64_t)i, blocks_dropout_threshold(p));
}

/* Forward and backward are the same map: out = in * keep / (1 - p), with
 * the mask bits of elements [first, first + n). */
static prnn_status dropout_apply(prnn_ctx *ctx, void *y, const void *x, int64_t n, double p,
                                 uint64_t seed, int64_t first, prnn_dtype dtype)
{
    prnn_status s = prologue(ctx, dtype, n, 1, 1);
    if (s != PRNN_OK) return s;
    if (!y || !x) return PRNN_ERR_NULL_POINTER;
    if (!(p >= 0 && p < 1)) return PRNN_ERR_INVALID_ARGUMENT;
    const int64_t bytes = tensor_bytes(n, 1, (int64_t)prnn_dtype_size(dtype));
    if (!bytes) return PRNN_ERR_SIZE_OVERFLOW;
    if (partial_overlap((prnn_span){y, bytes}, (prnn_span){x, bytes})) return PRNN_ERR_ALIASING;
    /* The scale is rounded to the acc type once, here, for both devices. */
    const float scale_f = (float)(1.0 / (1.0 - p));
    if (!isfinite(scale_f)) return PRNN_ERR_INVALID_ARGUMENT; /* p within 2^-128 of 1 */
    if (first < 0 || first > INT64_MAX - n) return PRNN_ERR_SIZE_OVERFLOW;
    if (p == 0) return y == x ? PRNN_OK : prnn_mem_copy(ctx, y, x, (size_t)bytes);

    const uint64_t key = blocks_dropout_key(seed);
    const uint32_t thr = blocks_dropout_threshold(p);
    if (ctx->device == PRNN_DEVICE_CUDA)
        RUN_CUDA(
            prnn_cuda_blocks_dropout(ctx, dtype, y, x, n, (uint64_t)first, key, thr, scale_f));

    if (dtype == PRNN_DTYPE_F32) {
        float *yf = y;
        const float *xf = x;
#pragma omp parallel for num_threads(ctx->num_threads) schedule(static) if (par_ok(n))
        for (int64_t i = 0; i < n; i++)
            yf[i] = blocks_dropout_keep(key, (uint64_t)(first + i), thr) ? xf[i] * scale_f : 0.0f;
    } else {
        const double scale = 1.0 / (1.0 - p);
        double *yd = y;
        const double *xd = x;
#pragma omp parallel for num_threads(ctx->num_threads) schedule(static) if (par_ok(n))
        for (int64_t i = 0; i < n; i++)
            yd[i] = blocks_dropout_keep(key, (uint64_t)(first + i), thr) ? xd[i] * scale : 0.0;
    }
    return PRNN_OK;
}

prnn_status prnn_dropout_forward(prnn_ctx *ctx, void *y, const void *x, int64_t n, double p,
                                 uint64_t seed, prnn_dtype dtype)
{
    return dropout_apply(ctx, y, x, n, p, seed, 0, dtype);
}

prnn_status prnn_dropout_backward(prnn_ctx *ctx, void *dx, const void *dy, int64_t n, double p,
                                  uint64_t seed, prnn_dtype dtype)
{
    return dropout_apply(ctx, dx, dy, n, p, seed, 0, dtype);
}

prnn_status blocks_dropout_at(prnn_ctx *ctx, void *y, const void *x, int64_t n, double p,
                              uint64_t seed, int64_t first, prnn_dtype dtype)
{
    return dropout_apply(ctx, y, x, n, p, seed, first, dtype);
}

/* ------------------------------------------------------------------------ */
/* Elementwise                                                              */

prnn_status prnn_axpby(prnn_ctx *ctx, void *y, const void *a, const void *b, int64_t n,
                       double alpha, double beta, prnn_dtype dtype)
{
    prnn_status s = prologue(ctx, dtype, n, 1, 1);
    if (s != PRNN_OK) return s;
    if (!y || !a) return PRNN_ERR_NULL_POINTER;
    if (!isfinite(alpha) || !isfinite(beta)) return PRNN_ERR_INVALID_ARGUMENT;
    const int64_t bytes = tensor_bytes(n, 1, (int64_t)prnn_dtype_size(dtype));
    if (!bytes) return PRNN_ERR_SIZE_OVERFLOW;
    if (partial_overlap((prnn_span){y, bytes}, (prnn_span){a, bytes}) ||
        partial_overlap((prnn_span){y, bytes}, (prnn_span){b, bytes}))
        return PRNN_ERR_ALIASING;

    if (ctx->device == PRNN_DEVICE_CUDA)
        RUN_CUDA(prnn_cuda_blocks_axpby(ctx, dtype, y, a, b, n, (float)alpha, (float)beta));

    const int f64 = dtype == PRNN_DTYPE_F64;
    /* The coefficients as the acc type holds them (as CUDA sees them). */
    const double al = f64 ? alpha : (double)(float)alpha, be = f64 ? beta : (double)(float)beta;
#pragma omp parallel for num_threads(ctx->num_threads) schedule(static) if (par_ok(n))
    for (int64_t i = 0; i < n; i++)
        st(y, i, f64, al * ld(a, i, f64) + (b ? be * ld(b, i, f64) : 0.0));
    return PRNN_OK;
}

prnn_status prnn_add(prnn_ctx *ctx, void *y, const void *a, const void *b, int64_t n,
                     prnn_dtype dtype)
{
    if (!b) return PRNN_ERR_NULL_POINTER; /* required here; prnn_axpby takes NULL */
    return prnn_axpby(ctx, y, a, b, n, 1.0, 1.0, dtype);
}

/* ------------------------------------------------------------------------ */
/* Optimizer ops                                                            */

prnn_adamw_config prnn_adamw_config_default(void)
{
    prnn_adamw_config c;
    memset(&c, 0, sizeof c);
    c.lr = 1e-3;
    c.beta1 = 0.9;
    c.beta2 = 0.999;
    c.eps = 1e-8;
    c.weight_decay = 0.0;
    return c;
}

static int finite_in(double x, double lo, double hi) { return x >= lo && x <= hi; }

prnn_status prnn_adamw_step(prnn_ctx *ctx, float *params, float *m, float *v, void *params_bf16,
                            const float *grad, int64_t n, int64_t step,
                            const prnn_adamw_config *cfg)
{
    if (!ctx || !cfg) return PRNN_ERR_NULL_POINTER;
    if (n < 1) return PRNN_ERR_INVALID_SIZE;
    if (!params || !m || !v || !grad) return PRNN_ERR_NULL_POINTER;
    if (step < 1 || !finite_in(cfg->lr, 0, 1e30) || !(cfg->beta1 >= 0 && cfg->beta1 < 1) ||
        !(cfg->beta2 >= 0 && cfg->beta2 < 1) || !finite_in(cfg->eps, 1e-30, 1e30) ||
        !finite_in(cfg->weight_decay, 0, 1e30))
        return PRNN_ERR_INVALID_ARGUMENT;
    const int64_t fb = tensor_bytes(n, 1, 4), hb = tensor_bytes(n, 1, 2);
    if (!fb || !hb) return PRNN_ERR_SIZE_OVERFLOW;
    const prnn_span out[] = {{params, fb}, {m, fb}, {v, fb}, {params_bf16, hb}};
    const prnn_span in[] = {{grad, fb}};
    if (prnn_any_overlap(out, 4, in, 1)) return PRNN_ERR_ALIASING;

    blocks_adamw c;
    c.lr = (float)cfg->lr;
    c.beta1 = (float)cfg->beta1;
    c.beta2 = (float)cfg->beta2;
    c.one_minus_beta1 = (float)(1.0 - cfg->beta1);
    c.one_minus_beta2 = (float)(1.0 - cfg->beta2);
    c.bc1 = (float)(1.0 - pow(cfg->beta1, (double)step));
    c.bc2 = (float)(1.0 - pow(cfg->beta2, (double)step));
    c.eps = (float)cfg->eps;
    c.weight_decay = (float)cfg->weight_decay;

    if (ctx->device == PRNN_DEVICE_CUDA)
        RUN_CUDA(prnn_cuda_blocks_adamw(ctx, params, m, v, params_bf16, grad, n, &c));

    uint16_t *lp = params_bf16;
#pragma omp parallel for num_threads(ctx->num_threads) schedule(static) if (par_ok(n))
    for (int64_t i = 0; i < n; i++) {
        const float p = blocks_adamw_update(&c, params[i], grad[i], &m[i], &v[i]);
        params[i] = p;
        if (lp) lp[i] = blocks_f32_to_bf16_bits(p);
    }
    return PRNN_OK;
}

prnn_status prnn_grad_sumsq(prnn_ctx *ctx, float *sumsq, double *host_sumsq, const float *g,
                            int64_t n)
{
    if (!ctx) return PRNN_ERR_NULL_POINTER;
    if (n < 1) return PRNN_ERR_INVALID_SIZE;
    if (!g || (!sumsq && !host_sumsq)) return PRNN_ERR_NULL_POINTER;
    const int64_t fb = tensor_bytes(n, 1, 4);
    if (!fb) return PRNN_ERR_SIZE_OVERFLOW;
    const prnn_span out[] = {{sumsq, 4}, {host_sumsq, 8}};
    const prnn_span in[] = {{g, fb}};
    if (prnn_any_overlap(out, 2, in, 1)) return PRNN_ERR_ALIASING;

    if (ctx->device == PRNN_DEVICE_CUDA)
        RUN_CUDA(prnn_cuda_blocks_sumsq(ctx, sumsq, host_sumsq, g, n));

    const int64_t nb = (n + SUMSQ_BLOCK - 1) / SUMSQ_BLOCK;
    double *part = prnn_scratch(ctx, (size_t)nb * sizeof(double)); /* (nb) block sums */
    if (!part) return PRNN_ERR_OUT_OF_MEMORY;
#pragma omp parallel for num_threads(ctx->num_threads) schedule(static) if (par_ok(n))
    for (int64_t b = 0; b < nb; b++) {
        const int64_t i1 = (b + 1) * SUMSQ_BLOCK < n ? (b + 1) * SUMSQ_BLOCK : n;
        double acc = 0;
        for (int64_t i = b * SUMSQ_BLOCK; i < i1; i++) acc += (double)g[i] * (double)g[i];
        part[b] = acc;
    }
    double total = 0;
    for (int64_t b = 0; b < nb; b++) total += part[b];
    if (sumsq) *sumsq = (float)total;
    if (host_sumsq) *host_sumsq = total;
    return PRNN_OK;
}

prnn_status prnn_grad_clip(prnn_ctx *ctx, float *g, const float *sumsq, int64_t n,
                           double max_norm)
{
    if (!ctx) return PRNN_ERR_NULL_POINTER;
    if (n < 1) return PRNN_ERR_INVALID_SIZE;
    if (!g || !sumsq) return PRNN_ERR_NULL_POINTER;
    if (!finite_in(max_norm, 1e-30, 1e30)) return PRNN_ERR_INVALID_ARGUMENT;
    const int64_t fb = tensor_bytes(n, 1, 4);
    if (!fb) return PRNN_ERR_SIZE_OVERFLOW;
    if (prnn_spans_overlap((prnn_span){g, fb}, (prnn_span){sumsq, 4})) return PRNN_ERR_ALIASING;

    if (ctx->device == PRNN_DEVICE_CUDA)
        RUN_CUDA(prnn_cuda_blocks_clip(ctx, g, sumsq, n, (float)max_norm));

    const float f = blocks_clip_factor(*sumsq, (float)max_norm);
    if (!(f < 1.0f)) return PRNN_OK;
#pragma omp parallel for num_threads(ctx->num_threads) schedule(static) if (par_ok(n))
    for (int64_t i = 0; i < n; i++) g[i] = BLK_MUL(g[i], f);
    return PRNN_OK;
}
