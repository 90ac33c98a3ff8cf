/*
 * cell_cpu.c - the CPU backend of the cell layers' elementwise primitives
 * (cell_internal.h states what each computes), for float and double.
 *
 * The typed body sits at the end of this file and is compiled twice by
 * including the file into itself with REAL (float or double) and FN(name)
 * (which appends the type's suffix) defined, as scan_cpu.c does with
 * scan_cpu_impl.h. The untyped part (geometry helpers, and the prnn_cpu_cell_*
 * entry points that pick a type) comes first.
 *
 * On the CPU the accumulation type equals the storage type (F32: float, F64:
 * double), so "dtype" and "acc" tensors share one element type here.
 * Work is threaded with OpenMP over (b, t) rows, except the log-space scan,
 * which runs serially over T per lane of channels and in parallel over lanes.
 *
 * Size letters: B batch rows, T steps, H hidden units, D input features,
 * G gate groups, n the width of a generic row.
 */
#ifndef CELL_CPU_TYPED

#include <stdint.h>
#include <string.h>
#include <tgmath.h> /* exp, log, tanh, ... of float are the float versions */

#include "cell_internal.h"
#include "cpu_vmath.h"

/* The maps' channel loops vectorize (cpu_vmath.h): the scalar functions
 * below compute both arms of their selects. With a glibc older than 2.35
 * the loops that need tanh or log1p (QRNN, GILR-LSTM, minLSTM, log space)
 * stay scalar. */

/* Loops with less work than this many elements run on one thread: the
 * fork/join of a parallel region costs more than they do. */
#define CELL_PAR_MIN 32768

/* Channels of one lane of the serial log-space scan. */
#define CELL_LANE 256

/* Row b's valid steps. */
static inline int64_t row_len(const cell_ew *e, int64_t b)
{
    return e->lengths ? e->lengths[b] : e->T;
}

/* First and last valid steps of a row of L >= 1 steps, and the step before t,
 * all in the scan's direction. */
static inline int64_t first_step(const cell_ew *e, int64_t L) { return e->reverse ? L - 1 : 0; }
static inline int64_t last_step(const cell_ew *e, int64_t L) { return e->reverse ? 0 : L - 1; }
static inline int64_t prev_step(const cell_ew *e, int64_t t) { return e->reverse ? t + 1 : t - 1; }
static inline int64_t next_step(const cell_ew *e, int64_t t) { return e->reverse ? t - 1 : t + 1; }

static inline int par_ok(int64_t work) { return work >= CELL_PAR_MIN; }

#define CELL_CPU_TYPED
#define REAL float
#define FN(name) name##_f32
#include "cell_cpu.c"
#undef REAL
#undef FN

#define REAL double
#define FN(name) name##_f64
#include "cell_cpu.c"
#undef REAL
#undef FN
#undef CELL_CPU_TYPED

/* ------------------------------------------------------------------------ */
/* Entry points: one per primitive, picking the element type.               */

prnn_status prnn_cpu_cell_gates_fwd(prnn_ctx *ctx, const cell_ew *e, void *a, void *b,
                                    const void *P, const void *bias)
{
    if (e->dtype == PRNN_DTYPE_F32) return gates_fwd_f32(ctx, e, a, b, P, bias);
    if (e->dtype == PRNN_DTYPE_F64) return gates_fwd_f64(ctx, e, a, b, P, bias);
    return PRNN_ERR_UNSUPPORTED;
}

prnn_status prnn_cpu_cell_out_fwd(prnn_ctx *ctx, const cell_ew *e, void *y, int64_t ldy,
                                  const void *c, const void *P, const void *bias, const void *x)
{
    if (e->dtype == PRNN_DTYPE_F32) return out_fwd_f32(ctx, e, y, ldy, c, P, bias, x);
    if (e->dtype == PRNN_DTYPE_F64) return out_fwd_f64(ctx, e, y, ldy, c, P, bias, x);
    return PRNN_ERR_UNSUPPORTED;
}

prnn_status prnn_cpu_cell_out_bwd(prnn_ctx *ctx, const cell_ew *e, void *dc, void *dP, void *dx,
                                  const void *dy, int64_t ldy, const void *c, const void *P,
                                  const void *bias, const void *x)
{
    if (e->dtype == PRNN_DTYPE_F32) return out_bwd_f32(ctx, e, dc, dP, dx, dy, ldy, c, P, bias, x);
    if (e->dtype == PRNN_DTYPE_F64) return out_bwd_f64(ctx, e, dc, dP, dx, dy, ldy, c, P, bias, x);
    return PRNN_ERR_UNSUPPORTED;
}

prnn_status prnn_cpu_cell_gates_bwd(prnn_ctx *ctx, const cell_ew *e, void *dP, const void *da,
                                    const void *db, const void *P, const void *bias, void *dbias)
{
    if (e->dtype == PRNN_DTYPE_F32) return gates_bwd_f32(ctx, e, dP, da, db, P, bias, dbias);
    if (e->dtype == PRNN_DTYPE_F64) return gates_bwd_f64(ctx, e, dP, da, db, P, bias, dbias);
    return PRNN_ERR_UNSUPPORTED;
}

prnn_status prnn_cpu_cell_logscan_fwd(prnn_ctx *ctx, const cell_ew *e, void *l, void *lT,
                                      const void *la, const void *lb, const void *l0)
{
    if (e->dtype == PRNN_DTYPE_F32) return logscan_fwd_f32(ctx, e, l, lT, la, lb, l0);
    if (e->dtype == PRNN_DTYPE_F64) return logscan_fwd_f64(ctx, e, l, lT, la, lb, l0);
    return PRNN_ERR_UNSUPPORTED;
}

prnn_status prnn_cpu_cell_logscan_w(prnn_ctx *ctx, const cell_ew *e, void *w, const void *la,
                                    const void *l, const void *l0)
{
    if (e->dtype == PRNN_DTYPE_F32) return logscan_w_f32(ctx, e, w, la, l, l0);
    if (e->dtype == PRNN_DTYPE_F64) return logscan_w_f64(ctx, e, w, la, l, l0);
    return PRNN_ERR_UNSUPPORTED;
}

prnn_status prnn_cpu_cell_logscan_bwd(prnn_ctx *ctx, const cell_ew *e, void *dla, void *dlb,
                                      void *dc0, const void *g, const void *w, const void *la,
                                      const void *l, const void *dcT)
{
    if (e->dtype == PRNN_DTYPE_F32) return logscan_bwd_f32(ctx, e, dla, dlb, dc0, g, w, la, l, dcT);
    if (e->dtype == PRNN_DTYPE_F64) return logscan_bwd_f64(ctx, e, dla, dlb, dc0, g, w, la, l, dcT);
    return PRNN_ERR_UNSUPPORTED;
}

prnn_status prnn_cpu_cell_shift(prnn_ctx *ctx, const cell_ew *e, int64_t n, void *dst,
                                int64_t ld_dst, const void *src, int64_t ld_src,
                                const void *init, int64_t ld_init)
{
    if (e->dtype == PRNN_DTYPE_F32)
        return shift_f32(ctx, e, n, dst, ld_dst, src, ld_src, init, ld_init);
    if (e->dtype == PRNN_DTYPE_F64)
        return shift_f64(ctx, e, n, dst, ld_dst, src, ld_src, init, ld_init);
    return PRNN_ERR_UNSUPPORTED;
}

prnn_status prnn_cpu_cell_unshift_add(prnn_ctx *ctx, const cell_ew *e, int64_t n, void *dst,
                                      int64_t ld_dst, const void *src, int64_t ld_src,
                                      void *dinit, int64_t ld_dinit)
{
    if (e->dtype == PRNN_DTYPE_F32)
        return unshift_add_f32(ctx, e, n, dst, ld_dst, src, ld_src, dinit, ld_dinit);
    if (e->dtype == PRNN_DTYPE_F64)
        return unshift_add_f64(ctx, e, n, dst, ld_dst, src, ld_src, dinit, ld_dinit);
    return PRNN_ERR_UNSUPPORTED;
}

prnn_status prnn_cpu_cell_last(prnn_ctx *ctx, const cell_ew *e, int dir, int64_t n, void *dst,
                               int64_t ld_dst, const void *src, int64_t ld_src, const void *init,
                               int64_t ld_init)
{
    if (e->dtype == PRNN_DTYPE_F32)
        return last_f32(ctx, e, dir, n, dst, ld_dst, src, ld_src, init, ld_init);
    if (e->dtype == PRNN_DTYPE_F64)
        return last_f64(ctx, e, dir, n, dst, ld_dst, src, ld_src, init, ld_init);
    return PRNN_ERR_UNSUPPORTED;
}

prnn_status prnn_cpu_cell_colsum_add(prnn_ctx *ctx, prnn_dtype dtype, int64_t rows, int64_t n,
                                     void *dst, const void *src, int64_t ld)
{
    if (dtype == PRNN_DTYPE_F32) return colsum_add_f32(ctx, rows, n, dst, src, ld);
    if (dtype == PRNN_DTYPE_F64) return colsum_add_f64(ctx, rows, n, dst, src, ld);
    return PRNN_ERR_UNSUPPORTED;
}

prnn_status prnn_cpu_cell_state_map(prnn_ctx *ctx, prnn_dtype dtype, cell_state_op op, int64_t n,
                                    void *dst, const void *src, const void *aux)
{
    if (dtype == PRNN_DTYPE_F32) return state_map_f32(ctx, op, n, dst, src, aux);
    if (dtype == PRNN_DTYPE_F64) return state_map_f64(ctx, op, n, dst, src, aux);
    return PRNN_ERR_UNSUPPORTED;
}

prnn_status prnn_cpu_cell_copy2d(prnn_ctx *ctx, void *dst, int64_t dpitch, const void *src,
                                 int64_t spitch, int64_t width, int64_t rows)
{
    char *d = dst;
    const char *s = src;
    if (width <= 0 || rows <= 0) return PRNN_OK;
    if (dpitch == width && spitch == width) {
        memmove(d, s, (size_t)(width * rows));
        return PRNN_OK;
    }
    const int par = par_ok(width * rows / 4);
#pragma omp parallel for num_threads(ctx->num_threads) schedule(static) if (par)
    for (int64_t r = 0; r < rows; r++)
        memcpy(d + r * dpitch, s + r * spitch, (size_t)width);
    return PRNN_OK;
}

/* The CPU's accumulation type is its storage type, so a conversion is a
 * strided copy whichever way it goes. */
prnn_status prnn_cpu_cell_convert(prnn_ctx *ctx, prnn_dtype dtype, int dir, int64_t rows,
                                  int64_t n, void *dst, int64_t ld_dst, const void *src,
                                  int64_t ld_src)
{
    (void)dir;
    const int64_t es = (int64_t)prnn_dtype_size(dtype);
    if (dtype != PRNN_DTYPE_F32 && dtype != PRNN_DTYPE_F64) return PRNN_ERR_UNSUPPORTED;
    return prnn_cpu_cell_copy2d(ctx, dst, ld_dst * es, src, ld_src * es, n * es, rows);
}

#else /* CELL_CPU_TYPED: the body for one element type */

/* ------------------------------------------------------------------------ */
/* Scalar functions, stable over the whole range of v                        */

/* e^-|v| overflows nowhere, and where it underflows sigma(v) is 1 or its
 * tail below the smallest normal. */
static inline REAL FN(sig)(REAL v)
{
    const REAL z = (REAL)exp(-(REAL)fabs(v)), big = (REAL)1 / ((REAL)1 + z);
    return v >= 0 ? big : z * big;
}

/* sigma(v), and sigma(-v) in *neg, from one exponential: both stay
 * accurate in their small tails (e^-|v| <= 1, no overflow). */
static inline REAL FN(sigs)(REAL v, REAL *neg)
{
    const REAL z = (REAL)exp(-(REAL)fabs(v));
    const REAL big = (REAL)1 / ((REAL)1 + z), small = z * big; /* sigma(|v|), sigma(-|v|) */
    *neg = v >= 0 ? small : big;
    return v >= 0 ? big : small;
}

/* log(1 + e^v) = max(v, 0) + log(1 + e^-|v|) */
static inline REAL FN(softplus)(REAL v)
{
    return (v > 0 ? v : (REAL)0) + (REAL)log1p(exp(-(REAL)fabs(v)));
}

/* g(v) = v + 1/2 for v >= 0, sigma(v) below: positive, continuous, C1 at 0.
 * Its derivative below 0 is sigma(v) sigma(-v). */
static inline REAL FN(gpos)(REAL v)
{
    const REAL s = FN(sig)(v);
    return v >= 0 ? v + (REAL)0.5 : s;
}

static inline REAL FN(gpos_d)(REAL v)
{
    REAL neg;
    const REAL s = FN(sigs)(v, &neg);
    return v >= 0 ? (REAL)1 : s * neg;
}

/* log g(v): log(v + 1/2), or log sigma(v) = -softplus(-v) for v < 0. */
static inline REAL FN(loggpos)(REAL v)
{
    return v >= 0 ? (REAL)log(v + (REAL)0.5) : -FN(softplus)(-v);
}

static inline REAL FN(loggpos_d)(REAL v)
{
    const REAL s = FN(sig)(-v);
    return v >= 0 ? (REAL)1 / (v + (REAL)0.5) : s;
}

/* log(exp(x) + exp(y)), exact when either side is -inf. */
static inline REAL FN(logaddexp)(REAL x, REAL y)
{
    const REAL m = x > y ? x : y;
    if (m == -(REAL)INFINITY) return m;
    return m + (REAL)log1p(exp(-(REAL)fabs(x - y)));
}

/* ------------------------------------------------------------------------ */
/* Gates and outputs                                                        */

/* P's group k at channel j, with the bias added. */
#define PV(k) (p[(k) * H + j] + (bias ? bias[(k) * H + j] : (REAL)0))

static prnn_status FN(gates_fwd)(prnn_ctx *ctx, const cell_ew *e, void *va, void *vb,
                                 const void *vP, const void *vbias)
{
    REAL *a = va, *b = vb;
    const REAL *P = vP, *bias = vbias;
    const int64_t B = e->B, T = e->T, H = e->H, GH = e->G * e->H;
    const int lg = e->log_space, sur = e->stage == CELL_STAGE_SURROGATE;
#pragma omp parallel for num_threads(ctx->num_threads) schedule(static) if (par_ok(B * T * H))
    for (int64_t r = 0; r < B * T; r++) {
        if (r % T >= row_len(e, r / T)) continue;
        const REAL *p = P + r * GH;
        REAL *pa = a + r * H, *pb = b ? b + r * H : NULL; /* NULL: a alone */
        switch (e->type) {
        case PRNN_CELL_MINGRU:
            if (lg) {
                for (int64_t j = 0; j < H; j++) {
                    const REAL k = PV(0), n = PV(1);
                    pa[j] = -FN(softplus)(k);
                    if (pb) pb[j] = -FN(softplus)(-k) + FN(loggpos)(n);
                }
            } else {
                for (int64_t j = 0; j < H; j++) {
                    const REAL k = PV(0), n = PV(1);
                    REAL sk_neg;
                    const REAL sk = FN(sigs)(k, &sk_neg);
                    pa[j] = sk_neg;
                    if (pb) pb[j] = sk * FN(gpos)(n);
                }
            }
            break;
        case PRNN_CELL_MINLSTM:
            /* f' = sigma(f) / (sigma(f) + sigma(i)) = sigma(-diff) with
             * diff = softplus(-f) - softplus(-i): no division, no underflow. */
            for (int64_t j = 0; j < H; j++) {
                const REAL f = PV(0), i = PV(1), n = PV(2);
                const REAL diff = FN(softplus)(-f) - FN(softplus)(-i);
                if (lg) {
                    pa[j] = -FN(softplus)(diff);
                    if (pb) pb[j] = -FN(softplus)(-diff) + FN(loggpos)(n);
                } else {
                    REAL sd_neg;
                    const REAL sd = FN(sigs)(diff, &sd_neg);
                    pa[j] = sd_neg;
                    if (pb) pb[j] = sd * FN(gpos)(n);
                }
            }
            break;
        case PRNN_CELL_QRNN: /* the input gate: i (ifo), else 1 - f */
            if (e->pooling == PRNN_QRNN_IFO) {
                for (int64_t j = 0; j < H; j++) {
                    const REAL z = PV(0), f = PV(1), i = PV(3);
                    pa[j] = FN(sig)(f);
                    if (pb) pb[j] = FN(sig)(i) * (REAL)tanh(z);
                }
            } else {
                for (int64_t j = 0; j < H; j++) {
                    const REAL z = PV(0), f = PV(1);
                    REAL sf_neg;
                    pa[j] = FN(sigs)(f, &sf_neg);
                    if (pb) pb[j] = sf_neg * (REAL)tanh(z);
                }
            }
            break;
        case PRNN_CELL_SRU:
            for (int64_t j = 0; j < H; j++) {
                const REAL u = PV(0), f = PV(1);
                REAL sf_neg;
                pa[j] = FN(sigs)(f, &sf_neg);
                if (pb) pb[j] = sf_neg * u;
            }
            break;
        case PRNN_CELL_GILR_LSTM:
            if (sur) {
                for (int64_t j = 0; j < H; j++) {
                    const REAL g = PV(0), jj = PV(1);
                    REAL sg_neg;
                    pa[j] = FN(sigs)(g, &sg_neg);
                    if (pb) pb[j] = sg_neg * (REAL)tanh(jj);
                }
            } else {
                for (int64_t j = 0; j < H; j++) {
                    const REAL f = PV(2), i = PV(3), z = PV(5);
                    pa[j] = FN(sig)(f);
                    if (pb) pb[j] = FN(sig)(i) * (REAL)tanh(z);
                }
            }
            break;
        default: break;
        }
    }
    return PRNN_OK;
}

/* The output gate's group, or -1 when y does not read one. */
static int FN(out_gate)(const cell_ew *e)
{
    if (e->type == PRNN_CELL_QRNN && e->pooling != PRNN_QRNN_F) return 2;
    if (e->type == PRNN_CELL_GILR_LSTM) return 4;
    return -1;
}

static prnn_status FN(out_fwd)(prnn_ctx *ctx, const cell_ew *e, void *vy, int64_t ldy,
                               const void *vc, const void *vP, const void *vbias, const void *vx)
{
    REAL *y = vy;
    const REAL *c = vc, *P = vP, *bias = vbias, *x = vx;
    const int64_t B = e->B, T = e->T, H = e->H, D = e->D, GH = e->G * e->H;
    const int og = FN(out_gate)(e);
#pragma omp parallel for num_threads(ctx->num_threads) schedule(static) if (par_ok(B * T * H))
    for (int64_t r = 0; r < B * T; r++) {
        REAL *py = y + r * ldy;
        if (r % T >= row_len(e, r / T)) {
            for (int64_t j = 0; j < H; j++) py[j] = 0;
            continue;
        }
        const REAL *p = P + r * GH, *pc = c + r * H;
        if (e->type == PRNN_CELL_SRU) {
            /* the highway: group p with its bias (D != H), else x */
            const REAL *hw = e->G == 4 ? p + 3 * H : x + r * D;
            const REAL *hwb = e->G == 4 ? bias ? bias + 3 * H : NULL : NULL;
            for (int64_t j = 0; j < H; j++) {
                const REAL rr = PV(2), h = hw[j] + (hwb ? hwb[j] : (REAL)0);
                REAL sr_neg;
                const REAL sr = FN(sigs)(rr, &sr_neg);
                py[j] = sr * (REAL)tanh(pc[j]) + sr_neg * h;
            }
        } else if (og >= 0) {
            for (int64_t j = 0; j < H; j++) py[j] = FN(sig)(PV(og)) * pc[j];
        } else if (e->log_space) {
            for (int64_t j = 0; j < H; j++) py[j] = (REAL)exp(pc[j]);
        } else {
            for (int64_t j = 0; j < H; j++) py[j] = pc[j];
        }
    }
    return PRNN_OK;
}

static prnn_status FN(out_bwd)(prnn_ctx *ctx, const cell_ew *e, void *vdc, void *vdP, void *vdx,
                               const void *vdy, int64_t ldy, const void *vc, const void *vP,
                               const void *vbias, const void *vx)
{
    REAL *dc = vdc, *dP = vdP, *dx = vdx;
    const REAL *dy = vdy, *c = vc, *P = vP, *bias = vbias, *x = vx;
    const int64_t B = e->B, T = e->T, H = e->H, D = e->D, GH = e->G * e->H;
    const int og = FN(out_gate)(e);
    const int sru = e->type == PRNN_CELL_SRU;
#pragma omp parallel for num_threads(ctx->num_threads) schedule(static) if (par_ok(B * T * H))
    for (int64_t r = 0; r < B * T; r++) {
        REAL *pdc = dc + r * H, *pdP = dP + r * GH;
        if (r % T >= row_len(e, r / T)) {
            for (int64_t j = 0; j < H; j++) pdc[j] = 0;
            if (og >= 0)
                for (int64_t j = 0; j < H; j++) pdP[og * H + j] = 0;
            if (sru)
                for (int64_t j = 0; j < (e->G - 2) * H; j++) pdP[2 * H + j] = 0;
            continue;
        }
        const REAL *p = P + r * GH, *pc = c + r * H, *pdy = dy + r * ldy;
        if (sru) {
            /* the highway as in out_fwd; its gradient: dP's group p, or dx += */
            const int proj = e->G == 4;
            const REAL *hw = proj ? p + 3 * H : x + r * D;
            const REAL *hwb = proj ? bias ? bias + 3 * H : NULL : NULL;
            for (int64_t j = 0; j < H; j++) {
                REAL sc;
                const REAL rr = PV(2), sr = FN(sigs)(rr, &sc);
                const REAL tc = (REAL)tanh(pc[j]), h = hw[j] + (hwb ? hwb[j] : (REAL)0);
                pdc[j] = pdy[j] * sr * ((REAL)1 - tc * tc);
                pdP[2 * H + j] = pdy[j] * (tc - h) * sr * sc;
                if (proj) pdP[3 * H + j] = pdy[j] * sc;
            }
            if (!proj && dx) { /* dx += (1 - sigma(r)) dy, in a loop of its own */
                REAL *pdx = dx + r * D;
                for (int64_t j = 0; j < H; j++) {
                    REAL sc;
                    (void)FN(sigs)(PV(2), &sc);
                    pdx[j] += pdy[j] * sc;
                }
            }
        } else if (og >= 0) {
            for (int64_t j = 0; j < H; j++) {
                REAL so_neg;
                const REAL o = PV(og), so = FN(sigs)(o, &so_neg);
                pdc[j] = pdy[j] * so;
                pdP[og * H + j] = pdy[j] * pc[j] * so * so_neg;
            }
        } else if (e->log_space) {
            for (int64_t j = 0; j < H; j++) pdc[j] = pdy[j] * (REAL)exp(pc[j]);
        } else {
            for (int64_t j = 0; j < H; j++) pdc[j] = pdy[j];
        }
    }
    return PRNN_OK;
}

static prnn_status FN(colsum_add)(prnn_ctx *ctx, int64_t rows, int64_t n, void *vdst,
                                  const void *vsrc, int64_t ld);

static prnn_status FN(gates_bwd)(prnn_ctx *ctx, const cell_ew *e, void *vdP, const void *vda,
                                 const void *vdb, const void *vP, const void *vbias,
                                 void *vdbias)
{
    REAL *dP = vdP;
    const REAL *da = vda, *db = vdb, *P = vP, *bias = vbias;
    const int64_t B = e->B, T = e->T, H = e->H, GH = e->G * e->H;
    const int lg = e->log_space, sur = e->stage == CELL_STAGE_SURROGATE;
    /* The groups this stage's gates read, zeroed past a row's length. */
    int groups[3], ng = 0;
    switch (e->type) {
    case PRNN_CELL_MINGRU: groups[0] = 0, groups[1] = 1, ng = 2; break;
    case PRNN_CELL_MINLSTM: groups[0] = 0, groups[1] = 1, groups[2] = 2, ng = 3; break;
    case PRNN_CELL_QRNN:
        groups[0] = 0, groups[1] = 1, ng = 2;
        if (e->pooling == PRNN_QRNN_IFO) groups[ng++] = 3;
        break;
    case PRNN_CELL_SRU: groups[0] = 0, groups[1] = 1, ng = 2; break;
    case PRNN_CELL_GILR_LSTM:
        if (sur)
            groups[0] = 0, groups[1] = 1, ng = 2;
        else
            groups[0] = 2, groups[1] = 3, groups[2] = 5, ng = 3;
        break;
    default: break;
    }
#pragma omp parallel for num_threads(ctx->num_threads) schedule(static) if (par_ok(B * T * H))
    for (int64_t r = 0; r < B * T; r++) {
        REAL *q = dP + r * GH;
        if (r % T >= row_len(e, r / T)) {
            for (int k = 0; k < ng; k++)
                for (int64_t j = 0; j < H; j++) q[groups[k] * H + j] = 0;
            continue;
        }
        const REAL *p = P + r * GH, *pda = da + r * H, *pdb = db + r * H;
        switch (e->type) {
        case PRNN_CELL_MINGRU:
            if (lg) {
                for (int64_t j = 0; j < H; j++) {
                    REAL zc;
                    const REAL k = PV(0), n = PV(1), z = FN(sigs)(k, &zc);
                    q[j] = -pda[j] * z + pdb[j] * zc;
                    q[H + j] = pdb[j] * FN(loggpos_d)(n);
                }
            } else {
                for (int64_t j = 0; j < H; j++) {
                    REAL zc;
                    const REAL k = PV(0), n = PV(1), z = FN(sigs)(k, &zc);
                    q[j] = z * zc * (pdb[j] * FN(gpos)(n) - pda[j]);
                    q[H + j] = pdb[j] * z * FN(gpos_d)(n);
                }
            }
            break;
        case PRNN_CELL_MINLSTM:
            for (int64_t j = 0; j < H; j++) {
                const REAL f = PV(0), i = PV(1), n = PV(2);
                const REAL diff = FN(softplus)(-f) - FN(softplus)(-i);
                REAL fp;
                const REAL ip = FN(sigs)(diff, &fp);
                REAL dd;
                if (lg) {
                    dd = -pda[j] * ip + pdb[j] * fp;
                    q[2 * H + j] = pdb[j] * FN(loggpos_d)(n);
                } else {
                    dd = fp * ip * (pdb[j] * FN(gpos)(n) - pda[j]);
                    q[2 * H + j] = pdb[j] * ip * FN(gpos_d)(n);
                }
                q[j] = -dd * FN(sig)(-f);
                q[H + j] = dd * FN(sig)(-i);
            }
            break;
        case PRNN_CELL_QRNN:
            if (e->pooling == PRNN_QRNN_IFO) {
                for (int64_t j = 0; j < H; j++) {
                    const REAL z = PV(0), f = PV(1), i = PV(3), tz = (REAL)tanh(z);
                    REAL sfc, si_neg;
                    const REAL sf = FN(sigs)(f, &sfc), si = FN(sigs)(i, &si_neg);
                    q[H + j] = pda[j] * sf * sfc;
                    q[3 * H + j] = pdb[j] * tz * si * si_neg;
                    q[j] = pdb[j] * si * ((REAL)1 - tz * tz);
                }
            } else {
                for (int64_t j = 0; j < H; j++) {
                    const REAL z = PV(0), f = PV(1), tz = (REAL)tanh(z);
                    REAL sfc;
                    const REAL sf = FN(sigs)(f, &sfc);
                    q[H + j] = sf * sfc * (pda[j] - pdb[j] * tz);
                    q[j] = pdb[j] * sfc * ((REAL)1 - tz * tz);
                }
            }
            break;
        case PRNN_CELL_SRU:
            for (int64_t j = 0; j < H; j++) {
                REAL sfc;
                const REAL u = PV(0), f = PV(1), sf = FN(sigs)(f, &sfc);
                q[H + j] = sf * sfc * (pda[j] - pdb[j] * u);
                q[j] = pdb[j] * sfc;
            }
            break;
        case PRNN_CELL_GILR_LSTM:
            if (sur) {
                for (int64_t j = 0; j < H; j++) {
                    const REAL g = PV(0), jj = PV(1), tj = (REAL)tanh(jj);
                    REAL sgc;
                    const REAL sg = FN(sigs)(g, &sgc);
                    q[j] = sg * sgc * (pda[j] - pdb[j] * tj);
                    q[H + j] = pdb[j] * sgc * ((REAL)1 - tj * tj);
                }
            } else {
                for (int64_t j = 0; j < H; j++) {
                    const REAL f = PV(2), i = PV(3), z = PV(5), tz = (REAL)tanh(z);
                    REAL si_neg, sf_neg;
                    const REAL si = FN(sigs)(i, &si_neg), sf = FN(sigs)(f, &sf_neg);
                    q[2 * H + j] = pda[j] * sf * sf_neg;
                    q[3 * H + j] = pdb[j] * tz * si * si_neg;
                    q[5 * H + j] = pdb[j] * si * ((REAL)1 - tz * tz);
                }
            }
            break;
        default: break;
        }
    }
    /* the bias gradients of the groups written above */
    for (int k = 0; vdbias && k < ng; k++) {
        prnn_status st = FN(colsum_add)(ctx, B * T, H, (REAL *)vdbias + groups[k] * H,
                                        dP + groups[k] * H, GH);
        if (st != PRNN_OK) return st;
    }
    return PRNN_OK;
}

#undef PV

/* ------------------------------------------------------------------------ */
/* Log-space scan                                                           */

/* Serial over T per lane (a row's block of up to CELL_LANE channels): the
 * log-space recurrence is not the linear scan, and the lanes already give
 * the CPU's few cores enough parallel work for the sizes it trains. */
static prnn_status FN(logscan_fwd)(prnn_ctx *ctx, const cell_ew *e, void *vl, void *vlT,
                                   const void *vla, const void *vlb, const void *vl0)
{
    REAL *l = vl, *lT = vlT;
    const REAL *la = vla, *lb = vlb, *l0 = vl0;
    const int64_t B = e->B, T = e->T, H = e->H;
    const int64_t nlane = (H + CELL_LANE - 1) / CELL_LANE;
#pragma omp parallel for num_threads(ctx->num_threads) schedule(dynamic, 1) if (par_ok(B * T * H))
    for (int64_t task = 0; task < B * nlane; task++) {
        const int64_t b = task / nlane, j0 = (task % nlane) * CELL_LANE;
        const int64_t w = H - j0 < CELL_LANE ? H - j0 : CELL_LANE;
        const int64_t L = row_len(e, b);
        REAL cur[CELL_LANE];
        for (int64_t j = 0; j < w; j++) cur[j] = l0 ? l0[b * H + j0 + j] : -(REAL)INFINITY;
        for (int64_t s = 0; s < L; s++) {
            const int64_t at = (b * T + (e->reverse ? L - 1 - s : s)) * H + j0;
            for (int64_t j = 0; j < w; j++) {
                cur[j] = FN(logaddexp)(la[at + j] + cur[j], lb[at + j]);
                l[at + j] = cur[j];
            }
        }
        for (int64_t t = L; t < T; t++)
            for (int64_t j = 0; j < w; j++) l[(b * T + t) * H + j0 + j] = 0;
        if (lT)
            for (int64_t j = 0; j < w; j++) lT[b * H + j0 + j] = cur[j];
    }
    return PRNN_OK;
}

static prnn_status FN(logscan_w)(prnn_ctx *ctx, const cell_ew *e, void *vw, const void *vla,
                                 const void *vl, const void *vl0)
{
    REAL *w = vw;
    const REAL *la = vla, *l = vl, *l0 = vl0;
    const int64_t B = e->B, T = e->T, H = e->H;
#pragma omp parallel for num_threads(ctx->num_threads) schedule(static) if (par_ok(B * T * H))
    for (int64_t r = 0; r < B * T; r++) {
        const int64_t b = r / T, t = r % T, L = row_len(e, b);
        REAL *pw = w + r * H;
        if (t >= L) {
            for (int64_t j = 0; j < H; j++) pw[j] = 0;
            continue;
        }
        const REAL *prev = t == first_step(e, L) ? (l0 ? l0 + b * H : NULL)
                                                 : l + (b * T + prev_step(e, t)) * H;
        for (int64_t j = 0; j < H; j++) {
            const REAL lp = prev ? prev[j] : -(REAL)INFINITY;
            /* A -inf previous state has no influence (and -inf - -inf is NaN). */
            pw[j] = lp == -(REAL)INFINITY ? (REAL)0 : (REAL)exp(la[r * H + j] + lp - l[r * H + j]);
        }
    }
    return PRNN_OK;
}

static prnn_status FN(logscan_bwd)(prnn_ctx *ctx, const cell_ew *e, void *vdla, void *vdlb,
                                   void *vdc0, const void *vg, const void *vw, const void *vla,
                                   const void *vl, const void *vdcT)
{
    REAL *dla = vdla, *dlb = vdlb, *dc0 = vdc0;
    const REAL *g = vg, *w = vw, *la = vla, *l = vl, *dcT = vdcT;
    const int64_t B = e->B, T = e->T, H = e->H;
#pragma omp parallel for num_threads(ctx->num_threads) schedule(static) if (par_ok(B * T * H))
    for (int64_t r = 0; r < B * T; r++) {
        const int64_t i = r * H;
        if (r % T >= row_len(e, r / T)) {
            for (int64_t j = 0; j < H; j++) dla[i + j] = dlb[i + j] = 0;
            continue;
        }
        for (int64_t j = 0; j < H; j++) {
            dla[i + j] = g[i + j] * w[i + j];
            dlb[i + j] = g[i + j] * ((REAL)1 - w[i + j]);
        }
    }
    if (dc0) {
        /* d l_first / d c0 = exp(la + l0 - l) / c0 = exp(la - l), which stays
         * finite as c0 -> 0 where dividing by c0 would not. */
        for (int64_t b = 0; b < B; b++) {
            const int64_t L = row_len(e, b);
            REAL *out = dc0 + b * H;
            if (L == 0) {
                for (int64_t j = 0; j < H; j++) out[j] = dcT ? dcT[b * H + j] : 0;
                continue;
            }
            const int64_t i = (b * T + first_step(e, L)) * H;
            for (int64_t j = 0; j < H; j++) out[j] = g[i + j] * (REAL)exp(la[i + j] - l[i + j]);
        }
    }
    return PRNN_OK;
}

/* ------------------------------------------------------------------------ */
/* Shifts, row ends, sums, maps                                             */

static prnn_status FN(shift)(prnn_ctx *ctx, const cell_ew *e, int64_t n, void *vdst,
                             int64_t ld_dst, const void *vsrc, int64_t ld_src, const void *vinit,
                             int64_t ld_init)
{
    REAL *dst = vdst;
    const REAL *src = vsrc, *init = vinit;
    const int64_t B = e->B, T = e->T;
#pragma omp parallel for num_threads(ctx->num_threads) schedule(static) if (par_ok(B * T * n))
    for (int64_t r = 0; r < B * T; r++) {
        const int64_t b = r / T, t = r % T, L = row_len(e, b);
        REAL *d = dst + r * ld_dst;
        if (t >= L) {
            for (int64_t j = 0; j < n; j++) d[j] = 0;
        } else if (t == first_step(e, L)) {
            for (int64_t j = 0; j < n; j++) d[j] = init ? init[b * ld_init + j] : (REAL)0;
        } else {
            const REAL *s = src + (b * T + prev_step(e, t)) * ld_src;
            for (int64_t j = 0; j < n; j++) d[j] = s[j];
        }
    }
    return PRNN_OK;
}

/* Each destination row takes its one source row (the next step), so rows
 * parallelise without races. */
static prnn_status FN(unshift_add)(prnn_ctx *ctx, const cell_ew *e, int64_t n, void *vdst,
                                   int64_t ld_dst, const void *vsrc, int64_t ld_src, void *vdinit,
                                   int64_t ld_dinit)
{
    REAL *dst = vdst, *dinit = vdinit;
    const REAL *src = vsrc;
    const int64_t B = e->B, T = e->T;
#pragma omp parallel for num_threads(ctx->num_threads) schedule(static) if (par_ok(B * T * n))
    for (int64_t r = 0; r < B * T; r++) {
        const int64_t b = r / T, t = r % T, L = row_len(e, b);
        if (t >= L || t == last_step(e, L)) continue;
        REAL *d = dst + r * ld_dst;
        const REAL *s = src + (b * T + next_step(e, t)) * ld_src;
        for (int64_t j = 0; j < n; j++) d[j] += s[j];
    }
    if (dinit) {
        for (int64_t b = 0; b < B; b++) {
            const int64_t L = row_len(e, b);
            REAL *d = dinit + b * ld_dinit;
            const REAL *s = L > 0 ? src + (b * T + first_step(e, L)) * ld_src : NULL;
            for (int64_t j = 0; j < n; j++) d[j] = s ? s[j] : (REAL)0;
        }
    }
    return PRNN_OK;
}

static prnn_status FN(last)(prnn_ctx *ctx, const cell_ew *e, int dir, int64_t n, void *vdst,
                            int64_t ld_dst, const void *vsrc, int64_t ld_src, const void *vinit,
                            int64_t ld_init)
{
    (void)ctx;
    REAL *dst = vdst;
    const REAL *src = vsrc, *init = vinit;
    const int64_t T = e->T;
    for (int64_t b = 0; b < e->B; b++) {
        const int64_t L = row_len(e, b);
        if (dir == 0) {
            REAL *d = dst + b * ld_dst;
            if (L > 0) {
                const REAL *s = src + (b * T + last_step(e, L)) * ld_src;
                for (int64_t j = 0; j < n; j++) d[j] = s[j];
            } else {
                for (int64_t j = 0; j < n; j++) d[j] = init ? init[b * ld_init + j] : (REAL)0;
            }
        } else if (L > 0) {
            REAL *d = dst + (b * T + last_step(e, L)) * ld_dst;
            const REAL *s = src + b * ld_src;
            for (int64_t j = 0; j < n; j++) d[j] += s[j];
        }
    }
    return PRNN_OK;
}

/* Rows are summed in fixed blocks whose partial sums are then added in
 * order, so the result does not depend on the thread count. */
#define CELL_SUM_BLOCK 512

static prnn_status FN(colsum_add)(prnn_ctx *ctx, int64_t rows, int64_t n, void *vdst,
                                  const void *vsrc, int64_t ld)
{
    REAL *dst = vdst;
    const REAL *src = vsrc;
    if (rows <= 0 || n <= 0) return PRNN_OK;
    const int64_t nblk = (rows + CELL_SUM_BLOCK - 1) / CELL_SUM_BLOCK;
    REAL *part = prnn_host_workspace(ctx, (size_t)(nblk * n) * sizeof(REAL));
    if (!part) return PRNN_ERR_OUT_OF_MEMORY;
#pragma omp parallel for num_threads(ctx->num_threads) schedule(static) if (par_ok(rows * n))
    for (int64_t k = 0; k < nblk; k++) {
        REAL *acc = part + k * n;
        const int64_t r1 = (k + 1) * CELL_SUM_BLOCK < rows ? (k + 1) * CELL_SUM_BLOCK : rows;
        for (int64_t j = 0; j < n; j++) acc[j] = 0;
        for (int64_t r = k * CELL_SUM_BLOCK; r < r1; r++) {
            const REAL *s = src + r * ld;
            for (int64_t j = 0; j < n; j++) acc[j] += s[j];
        }
    }
    for (int64_t k = 0; k < nblk; k++)
        for (int64_t j = 0; j < n; j++) dst[j] += part[k * n + j];
    return PRNN_OK;
}

static prnn_status FN(state_map)(prnn_ctx *ctx, cell_state_op op, int64_t n, void *vdst,
                                 const void *vsrc, const void *vaux)
{
    (void)ctx;
    REAL *dst = vdst;
    const REAL *src = vsrc, *aux = vaux;
    switch (op) {
    case CELL_MAP_LOG:
        for (int64_t i = 0; i < n; i++) dst[i] = (REAL)log(src[i]);
        break;
    case CELL_MAP_EXP:
        for (int64_t i = 0; i < n; i++) dst[i] = (REAL)exp(src[i]);
        break;
    case CELL_MAP_MUL_EXP:
        for (int64_t i = 0; i < n; i++) dst[i] = src[i] * (REAL)exp(aux[i]);
        break;
    case CELL_MAP_ADD:
        for (int64_t i = 0; i < n; i++) dst[i] = src[i] + aux[i];
        break;
    default: return PRNN_ERR_INVALID_ARGUMENT;
    }
    return PRNN_OK;
}

#endif /* CELL_CPU_TYPED */
