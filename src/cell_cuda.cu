/*
 * cell_cuda.cu - the CUDA backend of the cell layers' elementwise
 * primitives (cell_internal.h): gates and outputs, forward and backward;
 * the log-space scan, its local derivative and its backward; shifts in
 * time, their adjoint and a row's last step; column sums (bias gradients);
 * strided copies, conversions and the maps of states at a sequence's ends.
 * cell.c orchestrates them with the GEMMs and the linear scan; the CPU
 * versions (cell_cpu.c) are the oracle and these have the same semantics.
 *
 * Storage: "dtype" tensors are fp32, bf16 or fp16 in memory; every value is
 * fp32 in registers; "acc" tensors (states, parameter gradients) are fp32.
 * Elementwise kernels walk (B, T, n) with a grid-stride loop, one 16-byte
 * vector along the last axis per step when that axis, every row stride and
 * every base pointer allow it (n and strides multiples of the vector width,
 * pointers 16-byte aligned), else one element per step. Indices are int64.
 *
 * Manners: all work on the context's stream with its device current (the
 * guard restores the caller's); cudaGetLastError() after every launch; no
 * allocation per call (the lengths buffer is the context's, grown and kept;
 * scratch is left to cell.c, which owns it during a layer call).
 *
 * Size letters: B batch rows, T steps, H hidden units of one direction, D
 * input features, G gate groups (group k = columns [k*H, (k+1)*H) of P).
 */
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <math.h>
#include <stdint.h>

#include "cell_internal.h"
#include "cuda_common.cuh"
#include "scan_cuda.cuh" /* storage<T>, load_vec, store_vec, vec16, unpack16 */

/* Every launch goes through PRNN_LAUNCH (scan_cuda.cuh), so that a host
 * simulator (dev/cuda/sim, given the few calls used here beyond the scan's:
 * cudaMemcpy2DAsync, and ex2_fast / rcp_fast below as exp2f and 1 / x) can
 * run these kernels too. */

using namespace prnn_cuda;

namespace {

constexpr int kBlock = 256;       /* elementwise block size */
constexpr int kBlocksPerSM = 8;   /* grid cap: 2048 resident threads per SM */

/* ======================================================================== */
/* Scalar math (fp32). The CPU versions write the same formulas.           */

/* 2^x and 1/x as one special-function instruction each. The flushing
 * (.ftz) forms skip the subnormal fix-ups that exp2f-style intrinsics add
 * around the instruction: below, 2^x only ever takes x <= 0 (a subnormal
 * result, |v| > 87, becomes 0, where sigma is 0 or 1 in every precision
 * stored) and 1/x only x in [1, 4]. */
__device__ __forceinline__ float ex2_fast(float x)
{
#ifdef PRNN_CUDA_SIM
    return exp2f(x);
#else
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
#endif
}
__device__ __forceinline__ float rcp_fast(float x)
{
#ifdef PRNN_CUDA_SIM
    return 1.0f / x;
#else
    float y;
    asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
#endif
}
constexpr float kLog2e = 1.4426950408889634f;

/* sigma(v) and sigma(-v) = 1 - sigma(v) from one exponential and one fast
 * reciprocal (of a number in [1, 2]: ~1 ulp), each without cancellation
 * (1 - sigma(v) loses every digit where sigma(v) ~ 1). The gate maps are
 * issue-bound in bf16 (ncu: ~70% of issue slots at 50% of DRAM peak), so
 * the instruction count matters: no branches, one instruction per
 * special function. */
__device__ __forceinline__ void sig2(float v, float &s, float &sc)
{
    const float e = ex2_fast(-fabsf(v) * kLog2e), r = rcp_fast(1.0f + e);
    s = v >= 0.0f ? r : e * r;
    sc = v >= 0.0f ? e * r : r;
}

__device__ __forceinline__ float sigm(float v)
{
    float s, sc;
    sig2(v, s, sc);
    return s;
}

/* log(1 + e^x) without overflow, and accurate where it is tiny (log space
 * keeps its precision exactly there). */
__device__ __forceinline__ float softplus(float x)
{
    return fmaxf(x, 0.0f) + log1pf(expf(-fabsf(x)));
}

__device__ __forceinline__ float logaddexp(float x, float y)
{
    const float m = fmaxf(x, y);
    if (m == -INFINITY) return -INFINITY; /* both log 0: avoid inf - inf */
    return m + log1pf(expf(-fabsf(x - y)));
}

/* minGRU/minLSTM's positive activation g and its derivative, both sides
 * computed and selected (the lanes of a warp see both signs). */
__device__ __forceinline__ float gpos(float v)
{
    const float s = sigm(v);
    return v >= 0.0f ? v + 0.5f : s;
}
__device__ __forceinline__ float dgpos(float v)
{
    float s, sc;
    sig2(v, s, sc);
    return v >= 0.0f ? 1.0f : s * sc;
}
__device__ __forceinline__ float log_gpos(float v)
{
    return v >= 0.0f ? logf(v + 0.5f) : -softplus(-v);
}
/* d log g / dv: 1/(v + 1/2), or d log sigma(v) / dv = sigma(-v). */
__device__ __forceinline__ float dlog_gpos(float v)
{
    return v >= 0.0f ? 1.0f / (v + 0.5f) : sigm(-v);
}

/* ======================================================================== */
/* Which map: the cell's equations reduced to a few kinds                   */

/* Gates: a, b from up to three groups (v0, v1, v2) of P. */
enum gate_kind {
    GK_MINGRU = 0,  /* v0 k, v1 n:       a = 1 - sigma(k), b = sigma(k) g(n) */
    GK_MINGRU_LOG,  /*                   log a, log b of the same */
    GK_MINLSTM,     /* v0 f, v1 i, v2 n: a = f', b = i' g(n) */
    GK_MINLSTM_LOG, /*                   log a, log b of the same */
    GK_FORGET,      /* v0 f, v1 z:       a = sigma(f), b = (1 - a) tanh(z) */
    GK_IFO,         /* v0 f, v1 z, v2 i: a = sigma(f), b = sigma(i) tanh(z) */
    GK_SRU,         /* v0 f, v1 u:       a = sigma(f), b = (1 - a) u */
    GK_COUNT
};

constexpr int gate_groups(int k) { return k == GK_MINLSTM || k == GK_MINLSTM_LOG || k == GK_IFO ? 3 : 2; }

/* Outputs: y from c and what else the cell reads. */
enum out_kind {
    OK_IDENT = 0, /* y = c */
    OK_EXP,       /* y = exp(l)  (log space) */
    OK_OGATE,     /* y = sigma(o) c */
    OK_SRU_X,     /* y = sigma(r) tanh(c) + (1 - sigma(r)) x   (D == H) */
    OK_SRU_P,     /* y = sigma(r) tanh(c) + (1 - sigma(r)) p   (D != H) */
    OK_COUNT
};

struct cell_kinds {
    int gate, g0, g1, g2; /* gate kind and the groups of v0, v1, v2 */
    int out, go, gp;      /* output kind, its gate group (o or r), SRU's p */
};

/* Group indices follow prnn_cell.h: MINGRU [k, n], MINLSTM [f, i, n], QRNN
 * [z, f, o, i], SRU [u, f, r, p], GILR_LSTM [g, j, f, i, o, z]. The groups
 * y reads agree with cell_out_use_of (cell_internal.h), the layer's view. */
bool map_of(const cell_ew *e, cell_kinds *m)
{
    *m = cell_kinds{GK_COUNT, 0, 1, 2, OK_IDENT, 0, 0};
    switch (e->type) {
    case PRNN_CELL_MINGRU:
        m->gate = e->log_space ? GK_MINGRU_LOG : GK_MINGRU;
        m->out = e->log_space ? OK_EXP : OK_IDENT;
        return true;
    case PRNN_CELL_MINLSTM:
        m->gate = e->log_space ? GK_MINLSTM_LOG : GK_MINLSTM;
        m->out = e->log_space ? OK_EXP : OK_IDENT;
        return true;
    case PRNN_CELL_QRNN:
        m->g0 = 1; /* f */
        m->g1 = 0; /* z */
        if (e->pooling == PRNN_QRNN_IFO) {
            m->gate = GK_IFO;
            m->g2 = 3; /* i */
        } else {
            m->gate = GK_FORGET;
        }
        m->out = e->pooling == PRNN_QRNN_F ? OK_IDENT : OK_OGATE;
        m->go = 2;
        return e->pooling >= PRNN_QRNN_F && e->pooling < PRNN_QRNN_POOLING_COUNT_;
    case PRNN_CELL_SRU:
        m->gate = GK_SRU;
        m->g0 = 1; /* f */
        m->g1 = 0; /* u */
        m->out = e->G == 4 ? OK_SRU_P : OK_SRU_X;
        m->go = 2; /* r */
        m->gp = 3; /* p */
        return true;
    case PRNN_CELL_GILR_LSTM:
        if (e->stage == CELL_STAGE_SURROGATE) {
            m->gate = GK_FORGET;
            m->g0 = 0; /* g */
            m->g1 = 1; /* j */
            m->out = OK_IDENT;
        } else {
            m->gate = GK_IFO;
            m->g0 = 2; /* f */
            m->g1 = 5; /* z */
            m->g2 = 3; /* i */
            m->out = OK_OGATE;
            m->go = 4; /* o */
        }
        return true;
    default:
        return false;
    }
}

/*
 * minLSTM's normalised gates f' = sigma(f) / (sigma(f) + sigma(i)) and
 * i' = 1 - f'. Linear space: f' = A / (A + B), i' = B / (A + B) with
 * A = 1 + e^-i, B = 1 + e^-f, both scaled by e^-M, M = max(-f, -i, 0), so
 * that nothing overflows and A + B >= 1 (no 0/0 when both sigmoids
 * underflow): three exponentials and a reciprocal, no logarithm. Log space
 * needs log f' accurate where f' underflows, so it keeps the CPU's form
 * f' = sigma(-diff), diff = softplus(-f) - softplus(-i).
 */
__device__ __forceinline__ void minlstm_norm(float f, float i, float &fp, float &ip)
{
    const float u = -f, v = -i, M = fmaxf(fmaxf(u, v), 0.0f);
    const float ea = ex2_fast(-M * kLog2e), eu = ex2_fast((u - M) * kLog2e),
                ev = ex2_fast((v - M) * kLog2e);
    const float A = ea + ev, B = ea + eu, r = rcp_fast(A + B);
    fp = A * r;
    ip = B * r;
}

template <int K>
__device__ __forceinline__ void gate_fwd(float v0, float v1, float v2, float &a, float &b)
{
    if constexpr (K == GK_MINGRU) {
        float z, zc;
        sig2(v0, z, zc);
        a = zc;
        b = z * gpos(v1);
    } else if constexpr (K == GK_MINGRU_LOG) {
        a = -softplus(v0);                 /* log(1 - sigma(k)) */
        b = -softplus(-v0) + log_gpos(v1); /* log sigma(k) + log g(n) */
    } else if constexpr (K == GK_MINLSTM) {
        float fp, ip;
        minlstm_norm(v0, v1, fp, ip);
        a = fp;
        b = ip * gpos(v2);
    } else if constexpr (K == GK_MINLSTM_LOG) {
        const float diff = softplus(-v0) - softplus(-v1);
        a = -softplus(diff);
        b = -softplus(-diff) + log_gpos(v2);
    } else if constexpr (K == GK_FORGET) {
        float sf, sfc;
        sig2(v0, sf, sfc);
        a = sf;
        b = sfc * tanhf(v1);
    } else if constexpr (K == GK_IFO) {
        a = sigm(v0);
        b = sigm(v2) * tanhf(v1);
    } else { /* GK_SRU */
        float sf, sfc;
        sig2(v0, sf, sfc);
        a = sf;
        b = sfc * v1;
    }
}

/* Gradients of the three groups (d0, d1, d2 as v0, v1, v2) from da, db. */
template <int K>
__device__ __forceinline__ void gate_bwd(float v0, float v1, float v2, float da, float db,
                                         float &d0, float &d1, float &d2)
{
    d2 = 0.0f;
    if constexpr (K == GK_MINGRU) {
        float z, zc;
        sig2(v0, z, zc);
        d0 = z * zc * (db * gpos(v1) - da);
        d1 = db * z * dgpos(v1);
    } else if constexpr (K == GK_MINGRU_LOG) {
        float z, zc;
        sig2(v0, z, zc);
        d0 = db * zc - da * z;
        d1 = db * dlog_gpos(v1);
    } else if constexpr (K == GK_MINLSTM || K == GK_MINLSTM_LOG) {
        /* dd = dL/d diff; d diff/df = -sigma(-f), d diff/di = sigma(-i) */
        float ip, fp, dd;
        if constexpr (K == GK_MINLSTM) {
            minlstm_norm(v0, v1, fp, ip);
            dd = fp * ip * (db * gpos(v2) - da);
            d2 = db * ip * dgpos(v2);
        } else {
            sig2(softplus(-v0) - softplus(-v1), ip, fp);
            dd = db * fp - da * ip;
            d2 = db * dlog_gpos(v2);
        }
        d0 = -dd * sigm(-v0);
        d1 = dd * sigm(-v1);
    } else if constexpr (K == GK_FORGET) {
        float sf, sfc;
        sig2(v0, sf, sfc);
        const float th = tanhf(v1);
        d0 = sf * sfc * (da - db * th);
        d1 = db * sfc * (1.0f - th * th);
    } else if constexpr (K == GK_IFO) {
        float sf, sfc, si, sic;
        sig2(v0, sf, sfc);
        sig2(v2, si, sic);
        const float th = tanhf(v1);
        d0 = da * sf * sfc;
        d1 = db * si * (1.0f - th * th);
        d2 = db * th * si * sic;
    } else { /* GK_SRU */
        float sf, sfc;
        sig2(v0, sf, sfc);
        d0 = sf * sfc * (da - db * v1);
        d1 = db * sfc;
    }
}

/* ======================================================================== */
/* The walk: a grid-stride loop over (b, t, vector column) without dividing */
/* in the loop. The grid's stride is split once on the host into columns,  */
/* steps and rows, and each thread advances its position with carries.     */

struct walk {
    int64_t B, T, nv; /* rows, steps, vectors per step */
    int64_t sc, st, sb; /* the grid stride as (columns mod nv, steps mod T, rows) */
};

struct pos {
    int64_t b, t, c;
};

__device__ __forceinline__ void walk_first(const walk &w, pos &p)
{
    const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    const int64_t r = i / w.nv;
    p.c = i - r * w.nv;
    p.b = r / w.T;
    p.t = r - p.b * w.T;
}

__device__ __forceinline__ void walk_next(const walk &w, pos &p)
{
    p.c += w.sc;
    int64_t carry = 0;
    if (p.c >= w.nv) {
        p.c -= w.nv;
        carry = 1;
    }
    p.t += w.st + carry; /* < 2T: one wrap at most */
    p.b += w.sb;
    if (p.t >= w.T) {
        p.t -= w.T;
        p.b++;
    }
}

__device__ __forceinline__ int64_t row_len(const int64_t *lengths, int64_t b, int64_t T)
{
    return lengths ? __ldg(lengths + b) : T;
}

/* ======================================================================== */
/* Arguments of every elementwise kernel (each reads the fields it needs)   */

struct ew_args {
    walk w;
    int64_t H;             /* columns of a, b, c, da, db, dc */
    int64_t ldP;           /* row stride of P and dP: G*H */
    int64_t ldy, ldx;      /* row strides of y/dy and x/dx */
    int g0, g1, g2, go, gp;
    int reverse;
    const int64_t *lengths; /* (B) device, or NULL */
    const void *P, *bias, *x, *c, *dy, *da, *db;
    void *a, *b, *y, *dc, *dP, *dx;
    /* log-space derivative and backward */
    const void *la, *l, *g, *w_in;
    const float *l0, *dcT;
    void *wout, *dla, *dlb;
    float *dc0;
    /* shifts and conversions: (B, T, n) with per-step strides */
    int64_t ld_dst, ld_src, ld_st; /* ld_st: per batch row of init / dinit */
    const void *src;
    void *dst;
    const float *init;
    float *dinit;
    int64_t steps; /* T of (B, T, *) tensors when the walk is over (B, n) */
    int dir;
};

typedef void (*ew_kernel)(const ew_args);

/* A group's VEC values at (row r, col), bias added. */
template <typename T, int VEC>
__device__ __forceinline__ void load_group(const ew_args &p, int64_t r, int g, int64_t col,
                                           float (&v)[VEC])
{
    load_vec<T, VEC>(p.P, r * p.ldP + (int64_t)g * p.H + col, v);
    if (p.bias) {
        float bv[VEC];
        load_vec<T, VEC>(p.bias, (int64_t)g * p.H + col, bv);
#pragma unroll
        for (int k = 0; k < VEC; k++) v[k] += bv[k];
    }
}

/* Plain (coherent) load, for tensors this kernel also writes (dx += ...). */
template <typename T, int VEC>
__device__ __forceinline__ void load_rw(const void *base, int64_t i, float (&v)[VEC])
{
    using S = storage<T>;
    if constexpr (VEC == 1) {
        v[0] = S::to_f(static_cast<const typename S::raw *>(base)[i]);
    } else {
        unpack16<T>(*reinterpret_cast<const uint4 *>(static_cast<const T *>(base) + i), v);
    }
}

template <int VEC> __device__ __forceinline__ void fill(float (&v)[VEC], float x)
{
#pragma unroll
    for (int k = 0; k < VEC; k++) v[k] = x;
}

/* ======================================================================== */
/* Gates and outputs                                                        */

/* a, b at every step (values past a row's length are unspecified, so the
 * kernel does not look at lengths). WB false: a alone; the loads and math
 * only b needs are then dead code, and the compiler drops them. */
template <typename T, int VEC, int K, bool WB = true>
__global__ void __launch_bounds__(kBlock) gates_fwd_kernel(const ew_args p)
{
    grid_dep_begin();
    pos q;
    for (walk_first(p.w, q); q.b < p.w.B; walk_next(p.w, q)) {
        const int64_t r = q.b * p.w.T + q.t, col = q.c * VEC;
        float v0[VEC], v1[VEC], v2[VEC], a[VEC], b[VEC];
        load_group<T, VEC>(p, r, p.g0, col, v0);
        load_group<T, VEC>(p, r, p.g1, col, v1);
        if constexpr (gate_groups(K) > 2) load_group<T, VEC>(p, r, p.g2, col, v2);
        else fill(v2, 0.0f);
#pragma unroll
        for (int k = 0; k < VEC; k++) gate_fwd<K>(v0[k], v1[k], v2[k], a[k], b[k]);
        store_vec<T, VEC>(p.a, r * p.H + col, a);
        if constexpr (WB) store_vec<T, VEC>(p.b, r * p.H + col, b);
    }
}

/* The gate groups' dP at (row r = b*T + t, col), written and returned in
 * d0..d2 (zero past the row's length). */
template <typename T, int VEC, int K>
__device__ __forceinline__ void gates_bwd_at(const ew_args &p, int64_t b, int64_t t, int64_t col,
                                             float (&d0)[VEC], float (&d1)[VEC], float (&d2)[VEC])
{
    const int64_t r = b * p.w.T + t;
    if (t < row_len(p.lengths, b, p.w.T)) {
        float v0[VEC], v1[VEC], v2[VEC], da[VEC], db[VEC];
        load_group<T, VEC>(p, r, p.g0, col, v0);
        load_group<T, VEC>(p, r, p.g1, col, v1);
        if constexpr (gate_groups(K) > 2) load_group<T, VEC>(p, r, p.g2, col, v2);
        else fill(v2, 0.0f);
        load_vec<T, VEC>(p.da, r * p.H + col, da);
        load_vec<T, VEC>(p.db, r * p.H + col, db);
#pragma unroll
        for (int k = 0; k < VEC; k++)
            gate_bwd<K>(v0[k], v1[k], v2[k], da[k], db[k], d0[k], d1[k], d2[k]);
    } else {
        fill(d0, 0.0f);
        fill(d1, 0.0f);
        fill(d2, 0.0f);
    }
    const int64_t o = r * p.ldP + col;
    store_vec<T, VEC>(p.dP, o + (int64_t)p.g0 * p.H, d0);
    store_vec<T, VEC>(p.dP, o + (int64_t)p.g1 * p.H, d1);
    if constexpr (gate_groups(K) > 2) store_vec<T, VEC>(p.dP, o + (int64_t)p.g2 * p.H, d2);
}

template <typename T, int VEC, int K>
__global__ void __launch_bounds__(kBlock) gates_bwd_kernel(const ew_args p)
{
    grid_dep_begin();
    pos q;
    for (walk_first(p.w, q); q.b < p.w.B; walk_next(p.w, q)) {
        float d0[VEC], d1[VEC], d2[VEC];
        gates_bwd_at<T, VEC, K>(p, q.b, q.t, q.c * VEC, d0, d1, d2);
    }
}

/*
 * Gates backward with the bias gradients' partial sums, in one pass: block
 * = kSumX column threads x kSumY row threads (as colsum_kernel); a thread
 * keeps its VEC columns and walks the rows y, y + gridDim.y * kSumY, ...
 * (p.w.st, p.w.sb: that stride as steps mod T and rows), adding up the dP
 * it writes (fp32, before any rounding to the storage type); the block
 * adds its kSumY partial rows in shared memory and writes them to part
 * (gridDim.y, ng * H), the groups in order v0, v1, v2, for colsum_finish.
 */
constexpr int kSumX = 32, kSumY = 8;

template <typename T, int VEC, int K>
__global__ void __launch_bounds__(kSumX *kSumY) gates_bwd_sum_kernel(const ew_args p, float *part)
{
    grid_dep_begin();
    constexpr int NG = gate_groups(K);
    __shared__ float red[kSumY][NG * VEC][kSumX];
    const int tx = threadIdx.x, ty = threadIdx.y;
    const int64_t cv = (int64_t)blockIdx.x * kSumX + tx, col = cv * VEC;
    float s0[VEC], s1[VEC], s2[VEC];
    fill(s0, 0.0f);
    fill(s1, 0.0f);
    fill(s2, 0.0f);
    if (cv < p.w.nv) {
        const int64_t r0 = (int64_t)blockIdx.y * kSumY + ty;
        int64_t b = r0 / p.w.T, t = r0 - b * p.w.T;
        for (; b < p.w.B;) {
            float d0[VEC], d1[VEC], d2[VEC];
            gates_bwd_at<T, VEC, K>(p, b, t, col, d0, d1, d2);
#pragma unroll
            for (int k = 0; k < VEC; k++) {
                s0[k] += d0[k];
                s1[k] += d1[k];
                s2[k] += d2[k];
            }
            t += p.w.st;
            b += p.w.sb;
            if (t >= p.w.T) {
                t -= p.w.T;
                b++;
            }
        }
    }
#pragma unroll
    for (int k = 0; k < VEC; k++) {
        red[ty][k][tx] = s0[k];
        red[ty][VEC + k][tx] = s1[k];
        if constexpr (NG > 2) red[ty][2 * VEC + k][tx] = s2[k];
    }
    __syncthreads();
    if (ty == 0 && cv < p.w.nv) {
        float *out = part + (int64_t)blockIdx.y * NG * p.H + col;
#pragma unroll
        for (int j = 0; j < NG * VEC; j++) {
            float v = red[0][j][tx];
#pragma unroll
            for (int y = 1; y < kSumY; y++) v += red[y][j][tx];
            out[(int64_t)(j / VEC) * p.H + j % VEC] = v;
        }
    }
}

template <typename T, int VEC, int K>
__global__ void __launch_bounds__(kBlock) out_fwd_kernel(const ew_args p)
{
    grid_dep_begin();
    pos q;
    for (walk_first(p.w, q); q.b < p.w.B; walk_next(p.w, q)) {
        const int64_t r = q.b * p.w.T + q.t, col = q.c * VEC;
        float y[VEC];
        if (q.t < row_len(p.lengths, q.b, p.w.T)) {
            float c[VEC];
            load_vec<T, VEC>(p.c, r * p.H + col, c);
            if constexpr (K == OK_IDENT) {
#pragma unroll
                for (int k = 0; k < VEC; k++) y[k] = c[k];
            } else if constexpr (K == OK_EXP) {
#pragma unroll
                for (int k = 0; k < VEC; k++) y[k] = expf(c[k]);
            } else if constexpr (K == OK_OGATE) {
                float o[VEC];
                load_group<T, VEC>(p, r, p.go, col, o);
#pragma unroll
                for (int k = 0; k < VEC; k++) y[k] = sigm(o[k]) * c[k];
            } else { /* SRU: the highway is x (D == H) or the p group */
                float rr[VEC], hw[VEC];
                load_group<T, VEC>(p, r, p.go, col, rr);
                if constexpr (K == OK_SRU_X) load_vec<T, VEC>(p.x, r * p.ldx + col, hw);
                else load_group<T, VEC>(p, r, p.gp, col, hw);
#pragma unroll
                for (int k = 0; k < VEC; k++) {
                    float sr, sc;
                    sig2(rr[k], sr, sc);
                    y[k] = sr * tanhf(c[k]) + sc * hw[k];
                }
            }
        } else {
            fill(y, 0.0f);
        }
        store_vec<T, VEC>(p.y, r * p.ldy + col, y);
    }
}

template <typename T, int VEC, int K>
__global__ void __launch_bounds__(kBlock) out_bwd_kernel(const ew_args p)
{
    grid_dep_begin();
    pos q;
    for (walk_first(p.w, q); q.b < p.w.B; walk_next(p.w, q)) {
        const int64_t r = q.b * p.w.T + q.t, col = q.c * VEC;
        const bool valid = q.t < row_len(p.lengths, q.b, p.w.T);
        float dc[VEC], d1[VEC], d2[VEC]; /* dc; dP of o or r; dP of p */
        fill(dc, 0.0f);
        fill(d1, 0.0f);
        fill(d2, 0.0f);
        if (valid) {
            float dy[VEC], c[VEC];
            load_vec<T, VEC>(p.dy, r * p.ldy + col, dy);
            if constexpr (K == OK_IDENT) {
#pragma unroll
                for (int k = 0; k < VEC; k++) dc[k] = dy[k];
            } else if constexpr (K == OK_EXP) {
                load_vec<T, VEC>(p.c, r * p.H + col, c);
#pragma unroll
                for (int k = 0; k < VEC; k++) dc[k] = dy[k] * expf(c[k]);
            } else if constexpr (K == OK_OGATE) {
                float o[VEC];
                load_vec<T, VEC>(p.c, r * p.H + col, c);
                load_group<T, VEC>(p, r, p.go, col, o);
#pragma unroll
                for (int k = 0; k < VEC; k++) {
                    float so, soc;
                    sig2(o[k], so, soc);
                    dc[k] = dy[k] * so;
                    d1[k] = dy[k] * c[k] * so * soc;
                }
            } else {
                float rr[VEC], hw[VEC];
                load_vec<T, VEC>(p.c, r * p.H + col, c);
                load_group<T, VEC>(p, r, p.go, col, rr);
                if constexpr (K == OK_SRU_X) load_vec<T, VEC>(p.x, r * p.ldx + col, hw);
                else load_group<T, VEC>(p, r, p.gp, col, hw);
#pragma unroll
                for (int k = 0; k < VEC; k++) {
                    float sr, sc;
                    sig2(rr[k], sr, sc);
                    const float th = tanhf(c[k]);
                    dc[k] = dy[k] * sr * (1.0f - th * th);
                    d1[k] = dy[k] * (th - hw[k]) * sr * sc;
                    d2[k] = dy[k] * sc; /* d y / d highway */
                }
                if constexpr (K == OK_SRU_X) {
                    if (p.dx) {
                        float dx[VEC];
                        load_rw<T, VEC>(p.dx, r * p.ldx + col, dx);
#pragma unroll
                        for (int k = 0; k < VEC; k++) dx[k] += d2[k];
                        store_vec<T, VEC>(p.dx, r * p.ldx + col, dx);
                    }
                }
            }
        }
        store_vec<T, VEC>(p.dc, r * p.H + col, dc);
        if constexpr (K == OK_OGATE || K == OK_SRU_X || K == OK_SRU_P)
            store_vec<T, VEC>(p.dP, r * p.ldP + (int64_t)p.go * p.H + col, d1);
        if constexpr (K == OK_SRU_P)
            store_vec<T, VEC>(p.dP, r * p.ldP + (int64_t)p.gp * p.H + col, d2);
    }
}

/* ======================================================================== */
/* Log-space scan                                                           */

/*
 * Forward: one thread per lane (b, column) loops over the row's steps in the
 * scan's direction, loading U steps ahead so that U independent loads of la
 * and lb are in flight. This is the O(T)-depth form: correct for every shape
 * and fast enough while B*H fills the GPU; a chunked log-space scan (the
 * merge (A1, B1) then (A2, B2) = (A1 + A2, logaddexp(A2 + B1, B2))) would
 * split long rows over blocks the way the linear scan does.
 */
template <typename T>
__global__ void __launch_bounds__(kBlock) logscan_fwd_kernel(void *lout, float *lT, const void *la,
                                                             const void *lb, const float *l0,
                                                             const int64_t *lengths, int64_t B,
                                                             int64_t T_, int64_t H, int reverse)
{
    grid_dep_begin();
    constexpr int U = 8;
    const int64_t lanes = B * H, stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t idx = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; idx < lanes; idx += stride) {
        const int64_t b = idx / H, col = idx - b * H, row = b * T_;
        const int64_t L = row_len(lengths, b, T_);
        float l = l0 ? __ldg(l0 + b * H + col) : -INFINITY;
        for (int64_t u0 = 0; u0 < L; u0 += U) {
            float xa[U][1], xb[U][1];
#pragma unroll
            for (int k = 0; k < U; k++) {
                const int64_t u = u0 + k;
                if (u < L) {
                    const int64_t t = reverse ? L - 1 - u : u;
                    load_vec<T, 1>(la, (row + t) * H + col, xa[k]);
                    load_vec<T, 1>(lb, (row + t) * H + col, xb[k]);
                }
            }
#pragma unroll
            for (int k = 0; k < U; k++) {
                const int64_t u = u0 + k;
                if (u < L) {
                    const int64_t t = reverse ? L - 1 - u : u;
                    l = logaddexp(xa[k][0] + l, xb[k][0]);
                    const float o[1] = {l};
                    store_vec<T, 1>(lout, (row + t) * H + col, o);
                }
            }
        }
        const float z[1] = {0.0f};
        for (int64_t t = L; t < T_; t++) store_vec<T, 1>(lout, (row + t) * H + col, z);
        if (lT) lT[b * H + col] = l;
    }
}

/* w_t = exp(la_t + l_prev - l_t); l_prev of a row's first step is l0 (log 0
 * without it, so w = 0: nothing flows into a zero initial state). */
template <typename T, int VEC>
__global__ void __launch_bounds__(kBlock) logscan_w_kernel(const ew_args p)
{
    grid_dep_begin();
    pos q;
    for (walk_first(p.w, q); q.b < p.w.B; walk_next(p.w, q)) {
        const int64_t row = q.b * p.w.T, col = q.c * VEC, i = (row + q.t) * p.H + col;
        const int64_t L = row_len(p.lengths, q.b, p.w.T);
        float w[VEC];
        fill(w, 0.0f);
        if (q.t < L) {
            const int64_t tp = p.reverse ? q.t + 1 : q.t - 1;
            float lp[VEC], la[VEC], l[VEC];
            if (tp >= 0 && tp < L) {
                load_vec<T, VEC>(p.l, (row + tp) * p.H + col, lp);
            } else if (p.l0) {
#pragma unroll
                for (int k = 0; k < VEC; k++) lp[k] = __ldg(p.l0 + q.b * p.H + col + k);
            } else {
                fill(lp, -INFINITY);
            }
            load_vec<T, VEC>(p.la, i, la);
            load_vec<T, VEC>(p.l, i, l);
#pragma unroll
            for (int k = 0; k < VEC; k++) w[k] = lp[k] == -INFINITY ? 0.0f : expf(la[k] + lp[k] - l[k]);
        }
        store_vec<T, VEC>(p.wout, i, w);
    }
}

/* dla = g w, dlb = g (1 - w); the thread at t = 0 of each row (every row
 * has one) also writes dc0 = g_first exp(la_first - l_first), which is
 * dL/dc0 = dL/dl_first * w_first / c0 without dividing by c0 (finite at
 * c0 = 0), or dL/dc_T itself for an empty row (c_T = c0 there). */
template <typename T, int VEC>
__global__ void __launch_bounds__(kBlock) logscan_bwd_kernel(const ew_args p)
{
    grid_dep_begin();
    pos q;
    for (walk_first(p.w, q); q.b < p.w.B; walk_next(p.w, q)) {
        const int64_t row = q.b * p.w.T, col = q.c * VEC, i = (row + q.t) * p.H + col;
        const int64_t L = row_len(p.lengths, q.b, p.w.T);
        float dla[VEC], dlb[VEC];
        fill(dla, 0.0f);
        fill(dlb, 0.0f);
        if (q.t < L) {
            float g[VEC], w[VEC];
            load_vec<T, VEC>(p.g, i, g);
            load_vec<T, VEC>(p.w_in, i, w);
#pragma unroll
            for (int k = 0; k < VEC; k++) {
                dla[k] = g[k] * w[k];
                dlb[k] = g[k] * (1.0f - w[k]);
            }
        }
        store_vec<T, VEC>(p.dla, i, dla);
        store_vec<T, VEC>(p.dlb, i, dlb);
        if (p.dc0 && q.t == 0) {
            float d[VEC];
            if (L > 0) {
                const int64_t f = (row + (p.reverse ? L - 1 : 0)) * p.H + col;
                float g[VEC], la[VEC], l[VEC];
                load_vec<T, VEC>(p.g, f, g);
                load_vec<T, VEC>(p.la, f, la);
                load_vec<T, VEC>(p.l, f, l);
#pragma unroll
                for (int k = 0; k < VEC; k++) d[k] = g[k] * expf(la[k] - l[k]);
            } else {
#pragma unroll
                for (int k = 0; k < VEC; k++) d[k] = p.dcT ? __ldg(p.dcT + q.b * p.H + col + k) : 0.0f;
            }
#pragma unroll
            for (int k = 0; k < VEC; k++) p.dc0[q.b * p.H + col + k] = d[k];
        }
    }
}

/* ======================================================================== */
/* Shifts in time, row ends, column sums, conversions, state maps           */

template <typename T, int VEC>
__global__ void __launch_bounds__(kBlock) shift_kernel(const ew_args p)
{
    grid_dep_begin();
    pos q;
    for (walk_first(p.w, q); q.b < p.w.B; walk_next(p.w, q)) {
        const int64_t row = q.b * p.w.T, col = q.c * VEC;
        const int64_t L = row_len(p.lengths, q.b, p.w.T);
        float v[VEC];
        fill(v, 0.0f);
        if (q.t < L) {
            const int64_t first = p.reverse ? L - 1 : 0;
            if (q.t == first) {
                if (p.init) {
#pragma unroll
                    for (int k = 0; k < VEC; k++) v[k] = __ldg(p.init + q.b * p.ld_st + col + k);
                }
            } else {
                const int64_t tp = p.reverse ? q.t + 1 : q.t - 1;
                load_vec<T, VEC>(p.src, (row + tp) * p.ld_src + col, v);
            }
        }
        store_vec<T, VEC>(p.dst, (row + q.t) * p.ld_dst + col, v);
    }
}

/* dst[s] += src[next(s)] for every valid s that is some valid step's
 * previous; the thread at t = 0 of each row also writes dinit (every row has
 * a t = 0, including rows of length 0). */
template <typename T, int VEC>
__global__ void __launch_bounds__(kBlock) unshift_add_kernel(const ew_args p)
{
    grid_dep_begin();
    pos q;
    for (walk_first(p.w, q); q.b < p.w.B; walk_next(p.w, q)) {
        const int64_t row = q.b * p.w.T, col = q.c * VEC;
        const int64_t L = row_len(p.lengths, q.b, p.w.T);
        if (q.t < L) {
            const int64_t tn = p.reverse ? q.t - 1 : q.t + 1;
            if (tn >= 0 && tn < L) {
                float d[VEC], s[VEC];
                load_rw<T, VEC>(p.dst, (row + q.t) * p.ld_dst + col, d);
                load_vec<T, VEC>(p.src, (row + tn) * p.ld_src + col, s);
#pragma unroll
                for (int k = 0; k < VEC; k++) d[k] += s[k];
                store_vec<T, VEC>(p.dst, (row + q.t) * p.ld_dst + col, d);
            }
        }
        if (p.dinit && q.t == 0) {
            float s[VEC];
            fill(s, 0.0f);
            if (L > 0) load_vec<T, VEC>(p.src, (row + (p.reverse ? L - 1 : 0)) * p.ld_src + col, s);
#pragma unroll
            for (int k = 0; k < VEC; k++) p.dinit[q.b * p.ld_st + col + k] = s[k];
        }
    }
}

/* A row's last valid step in the scan's direction, walked as (B, 1, n):
 * dir 0 reads it into dst (B, n) acc (init or zeros for an empty row), dir
 * 1 adds src (B, n) acc to it (empty rows untouched). */
template <typename T>
__global__ void __launch_bounds__(kBlock) last_kernel(const ew_args p)
{
    grid_dep_begin();
    pos q;
    for (walk_first(p.w, q); q.b < p.w.B; walk_next(p.w, q)) {
        const int64_t L = row_len(p.lengths, q.b, p.steps);
        const int64_t at = (q.b * p.steps + (p.reverse ? 0 : L - 1)) * p.ld_src + q.c;
        float v[1];
        if (p.dir == 0) {
            if (L > 0) load_vec<T, 1>(p.src, at, v);
            else v[0] = p.init ? __ldg(p.init + q.b * p.ld_st + q.c) : 0.0f;
            p.dinit[q.b * p.ld_dst + q.c] = v[0];
        } else if (L > 0) {
            const int64_t d = (q.b * p.steps + (p.reverse ? 0 : L - 1)) * p.ld_dst + q.c;
            load_rw<T, 1>(p.dst, d, v);
            v[0] += __ldg(static_cast<const float *>(p.src) + q.b * p.ld_src + q.c);
            store_vec<T, 1>(p.dst, d, v);
        }
    }
}

/* n contiguous floats, dst may be src (each thread reads before it writes
 * its own element). */
__global__ void __launch_bounds__(kBlock) state_map_kernel(float *dst, const float *src,
                                                           const float *aux, int op, int64_t n)
{
    grid_dep_begin();
    const int64_t stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        const float v = src[i];
        float r;
        switch (op) {
        case CELL_MAP_LOG: r = logf(v); break;
        case CELL_MAP_EXP: r = expf(v); break;
        case CELL_MAP_MUL_EXP: r = v * expf(aux[i]); break;
        default: r = v + aux[i]; break; /* CELL_MAP_ADD */
        }
        dst[i] = r;
    }
}

/* dir 0: dst float <- src T; dir 1: dst T <- src float. (rows, n) walked as
 * (B = rows, T = 1, n). */
template <typename T, int DIR>
__global__ void __launch_bounds__(kBlock) convert_kernel(const ew_args p)
{
    grid_dep_begin();
    pos q;
    for (walk_first(p.w, q); q.b < p.w.B; walk_next(p.w, q)) {
        float v[1];
        if constexpr (DIR == 0) {
            load_vec<T, 1>(p.src, q.b * p.ld_src + q.c, v);
            p.dinit[q.b * p.ld_dst + q.c] = v[0];
        } else {
            v[0] = __ldg(static_cast<const float *>(p.src) + q.b * p.ld_src + q.c);
            store_vec<T, 1>(p.dst, q.b * p.ld_dst + q.c, v);
        }
    }
}

/*
 * Column sums: block = 32 column threads x 8 row threads; each thread sums
 * its VEC columns over rows y, y + 8 * gridDim.y, ... (four rows' loads in
 * flight at a time), the block reduces its 8 partial rows in shared memory
 * and writes them to part (gridDim.y, n); colsum_finish then adds the
 * gridDim.y partial rows to dst in order. No atomics: the same inputs give
 * the same bits on every run. gridDim.y is chosen so that the grid fills
 * the GPU even when n is small and rows are millions.
 */
template <typename T, int VEC>
__global__ void __launch_bounds__(kSumX *kSumY) colsum_kernel(float *part_out, const void *src,
                                                              int64_t rows, int64_t n, int64_t ld)
{
    grid_dep_begin();
    __shared__ float part[kSumY][VEC][kSumX];
    const int tx = threadIdx.x, ty = threadIdx.y;
    const int64_t col = ((int64_t)blockIdx.x * kSumX + tx) * VEC;
    float acc[VEC];
    fill(acc, 0.0f);
    if (col < n) {
        const int64_t step = (int64_t)gridDim.y * kSumY;
        int64_t r = (int64_t)blockIdx.y * kSumY + ty;
        for (; r + 3 * step < rows; r += 4 * step) {
            float v[4][VEC];
#pragma unroll
            for (int j = 0; j < 4; j++) load_vec<T, VEC>(src, (r + j * step) * ld + col, v[j]);
#pragma unroll
            for (int j = 0; j < 4; j++)
#pragma unroll
                for (int k = 0; k < VEC; k++) acc[k] += v[j][k];
        }
        for (; r < rows; r += step) {
            float v[VEC];
            load_vec<T, VEC>(src, r * ld + col, v);
#pragma unroll
            for (int k = 0; k < VEC; k++) acc[k] += v[k];
        }
    }
#pragma unroll
    for (int k = 0; k < VEC; k++) part[ty][k][tx] = acc[k];
    __syncthreads();
    if (ty == 0 && col < n) {
#pragma unroll
        for (int k = 0; k < VEC; k++) {
            float s = part[0][k][tx];
#pragma unroll
            for (int y = 1; y < kSumY; y++) s += part[y][k][tx];
            if (col + k < n) part_out[(int64_t)blockIdx.y * n + col + k] = s;
        }
    }
}

/* Where column c of the partial rows goes: dst[g[c / width] * width +
 * c % width] (the gate groups of gates_bwd_sum_kernel; one run of width n
 * for colsum_kernel). */
struct col_map {
    int64_t width;
    int g[3];
};

/* dst[map(c)] += sum over g of part[g][c]: kSumX columns a block and kFinY
 * lanes per column, lane y summing groups y, y + kFinY, ... into 4
 * accumulators (loads in flight: one serial chain over all groups took
 * ~34 us for 264 groups x 2048 columns on an H200, most of a column sum),
 * then the lanes' sums added in lane order. The order is fixed: the same
 * bits on every run. */
constexpr int kFinY = 32;
__global__ void __launch_bounds__(kSumX *kFinY) colsum_finish_kernel(float *dst, const float *part,
                                                                    int64_t groups, int64_t n,
                                                                    const col_map m)
{
    grid_dep_begin();
    __shared__ float lane_sum[kFinY][kSumX];
    const int tx = threadIdx.x, ty = threadIdx.y;
    const int64_t c = (int64_t)blockIdx.x * kSumX + tx;
    float acc = 0.0f;
    if (c < n) {
        float a[4] = {0.0f, 0.0f, 0.0f, 0.0f};
        int64_t g = ty;
        for (; g + 3 * kFinY < groups; g += 4 * kFinY) {
#pragma unroll
            for (int j = 0; j < 4; j++) a[j] += part[(g + j * kFinY) * n + c];
        }
        for (; g < groups; g += kFinY) a[0] += part[g * n + c];
        acc = (a[0] + a[1]) + (a[2] + a[3]);
    }
    lane_sum[ty][tx] = acc;
    __syncthreads();
    if (ty == 0 && c < n) {
        float sum = lane_sum[0][tx];
        for (int y = 1; y < kFinY; y++) sum += lane_sum[y][tx];
        const int64_t k = c / m.width;
        dst[m.g[k] * m.width + (c - k * m.width)] += sum;
    }
}

/* Byte copy of rows x width with pitches, for pitches beyond what
 * cudaMemcpy2DAsync accepts. */
__global__ void __launch_bounds__(kBlock) copy2d_kernel(unsigned char *dst, int64_t dpitch,
                                                        const unsigned char *src, int64_t spitch,
                                                        int64_t width, int64_t rows)
{
    grid_dep_begin();
    const int64_t n = width * rows, stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        const int64_t r = i / width, c = i - r * width;
        dst[r * dpitch + c] = src[r * spitch + c];
    }
}

/* ======================================================================== */
/* Picking the template instance: one place per kernel family               */

typedef void (*gsum_kernel)(const ew_args, float *);

/* The instance of a gate-kind kernel family F for kind k (F::of<K>). */
template <typename F> auto by_gate_kind(int k) -> decltype(F::template of<GK_MINGRU>())
{
    switch (k) {
    case GK_MINGRU: return F::template of<GK_MINGRU>();
    case GK_MINGRU_LOG: return F::template of<GK_MINGRU_LOG>();
    case GK_MINLSTM: return F::template of<GK_MINLSTM>();
    case GK_MINLSTM_LOG: return F::template of<GK_MINLSTM_LOG>();
    case GK_FORGET: return F::template of<GK_FORGET>();
    case GK_IFO: return F::template of<GK_IFO>();
    case GK_SRU: return F::template of<GK_SRU>();
    default: return nullptr;
    }
}

template <typename T, int VEC, bool WB> struct gates_fwd_family {
    template <int K> static ew_kernel of() { return gates_fwd_kernel<T, VEC, K, WB>; }
};
template <typename T, int VEC> struct gates_bwd_family {
    template <int K> static ew_kernel of() { return gates_bwd_kernel<T, VEC, K>; }
};
template <typename T, int VEC> struct gates_bwd_sum_family {
    template <int K> static gsum_kernel of() { return gates_bwd_sum_kernel<T, VEC, K>; }
};

template <typename T, int VEC> ew_kernel pick_gates_fwd(int k)
{
    return by_gate_kind<gates_fwd_family<T, VEC, true>>(k);
}
template <typename T, int VEC> ew_kernel pick_gates_a(int k)
{
    return by_gate_kind<gates_fwd_family<T, VEC, false>>(k);
}
template <typename T, int VEC> ew_kernel pick_gates_bwd(int k)
{
    return by_gate_kind<gates_bwd_family<T, VEC>>(k);
}
template <typename T, int VEC> gsum_kernel pick_gates_bwd_sum(int k)
{
    return by_gate_kind<gates_bwd_sum_family<T, VEC>>(k);
}

template <typename F> ew_kernel by_out_kind(int k)
{
    switch (k) {
    case OK_IDENT: return F::template of<OK_IDENT>();
    case OK_EXP: return F::template of<OK_EXP>();
    case OK_OGATE: return F::template of<OK_OGATE>();
    case OK_SRU_X: return F::template of<OK_SRU_X>();
    case OK_SRU_P: return F::template of<OK_SRU_P>();
    default: return nullptr;
    }
}

template <typename T, int VEC> struct out_fwd_family {
    template <int K> static ew_kernel of() { return out_fwd_kernel<T, VEC, K>; }
};
template <typename T, int VEC> struct out_bwd_family {
    template <int K> static ew_kernel of() { return out_bwd_kernel<T, VEC, K>; }
};

template <typename T, int VEC> ew_kernel pick_out_fwd(int k)
{
    return by_out_kind<out_fwd_family<T, VEC>>(k);
}
template <typename T, int VEC> ew_kernel pick_out_bwd(int k)
{
    return by_out_kind<out_bwd_family<T, VEC>>(k);
}

template <typename T, int VEC> ew_kernel pick_logscan_w(int) { return logscan_w_kernel<T, VEC>; }
template <typename T, int VEC> ew_kernel pick_shift(int) { return shift_kernel<T, VEC>; }
template <typename T, int VEC> ew_kernel pick_unshift(int) { return unshift_add_kernel<T, VEC>; }
template <typename T, int VEC> ew_kernel pick_logscan_bwd(int) { return logscan_bwd_kernel<T, VEC>; }

/* dtype x vector path -> instance. */
#define PICK_TYPED(fn) PICK_TYPED_AS(ew_kernel, fn)
#define PICK_TYPED_AS(ret, fn)                                                               \
    ret fn##_typed(prnn_dtype dt, int kind, bool vec)                                        \
    {                                                                                        \
        switch (dt) {                                                                        \
        case PRNN_DTYPE_F32: return vec ? fn<float, 4>(kind) : fn<float, 1>(kind);           \
        case PRNN_DTYPE_BF16:                                                                \
            return vec ? fn<__nv_bfloat16, 8>(kind) : fn<__nv_bfloat16, 1>(kind);            \
        case PRNN_DTYPE_F16: return vec ? fn<__half, 8>(kind) : fn<__half, 1>(kind);         \
        default: return nullptr;                                                             \
        }                                                                                    \
    }
PICK_TYPED(pick_gates_fwd)
PICK_TYPED(pick_gates_a)
PICK_TYPED(pick_gates_bwd)
PICK_TYPED(pick_out_fwd)
PICK_TYPED(pick_out_bwd)
PICK_TYPED(pick_logscan_w)
PICK_TYPED(pick_shift)
PICK_TYPED(pick_unshift)
PICK_TYPED(pick_logscan_bwd)
PICK_TYPED_AS(gsum_kernel, pick_gates_bwd_sum)
#undef PICK_TYPED
#undef PICK_TYPED_AS

/* ======================================================================== */
/* Host helpers                                                             */

bool dtype_ok(prnn_dtype dt)
{
    return dt == PRNN_DTYPE_F32 || dt == PRNN_DTYPE_BF16 || dt == PRNN_DTYPE_F16;
}

/* Elements per 16-byte vector of a dtype. */
int64_t vec_width(prnn_dtype dt) { return 16 / (int64_t)prnn_dtype_size(dt); }

bool aligned16(const void *p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

cudaStream_t stream_of(prnn_ctx *ctx) { return static_cast<cudaStream_t>(prnn_cuda_stream(ctx)); }

int sm_count(prnn_ctx *ctx) { return prnn_cuda::sm_count_of(prnn_cuda_device_of(ctx)); }

/* Grid for B * T * nv work items and the walk's split of its stride: at
 * most the blocks of k that are resident at once (one wave, so that every
 * block starts, and lets the next kernel be scheduled, at the start). */
walk make_walk(prnn_ctx *ctx, ew_kernel k, int64_t B, int64_t T, int64_t nv, unsigned *grid)
{
    const int64_t total = B * T * nv;
    int64_t blocks = (total + kBlock - 1) / kBlock;
    int per_sm = prnn_cuda::resident_blocks(prnn_cuda_device_of(ctx), k, kBlock, 0);
    if (per_sm <= 0 || per_sm > kBlocksPerSM) per_sm = kBlocksPerSM;
    const int64_t cap = (int64_t)sm_count(ctx) * per_sm;
    if (blocks > cap) blocks = cap;
    if (blocks < 1) blocks = 1;
    *grid = (unsigned)blocks;
    const int64_t S = blocks * kBlock, sr = S / nv;
    walk w;
    w.B = B;
    w.T = T;
    w.nv = nv;
    w.sc = S % nv;
    w.st = sr % T;
    w.sb = sr / T;
    return w;
}

/* Launches k over (B, T, n / vec) items. */
prnn_status run_ew(prnn_ctx *ctx, ew_kernel k, ew_args &p, int64_t B, int64_t T, int64_t n,
                   int64_t vec)
{
    if (!k) return PRNN_ERR_UNSUPPORTED;
    if (B <= 0 || T <= 0 || n <= 0) return PRNN_OK;
    unsigned grid;
    p.w = make_walk(ctx, k, B, T, n / vec, &grid);
    PRNN_LAUNCH(k, grid, kBlock, stream_of(ctx), p);
    PRNN_CU_LAUNCHED();
    return PRNN_OK;
}

ew_args args_of(const cell_ew *e, const cell_kinds &m)
{
    ew_args p = {};
    p.H = e->H;
    p.ldP = e->G * e->H;
    p.ldx = e->D;
    p.g0 = m.g0;
    p.g1 = m.g1;
    p.g2 = m.g2;
    p.go = m.go;
    p.gp = m.gp;
    p.reverse = e->reverse ? 1 : 0;
    p.lengths = e->lengths;
    return p;
}

/* Grid of a column-sum walk (colsum_kernel, gates_bwd_sum_kernel) over nv
 * column vectors and `rows` rows: per_sm blocks per SM, never more than
 * there are row groups. */
bool sum_grid(prnn_ctx *ctx, int64_t nv, int64_t rows, int per_sm, dim3 *grid)
{
    const int64_t gx = (nv + kSumX - 1) / kSumX;
    if (gx > INT32_MAX) return false;
    int64_t gy = (int64_t)sm_count(ctx) * per_sm / gx;
    const int64_t row_groups = (rows + kSumY - 1) / kSumY;
    if (gy > row_groups) gy = row_groups;
    if (gy > 65535) gy = 65535;
    if (gy < 1) gy = 1;
    *grid = dim3((unsigned)gx, (unsigned)gy);
    return true;
}

/* dst[m(c)] += the sum of the `groups` partial rows of part (groups, n). */
prnn_status colsum_finish(prnn_ctx *ctx, float *dst, const float *part, int64_t groups, int64_t n,
                          const col_map &m)
{
    const int64_t fb = (n + kSumX - 1) / kSumX;
    if (fb > INT32_MAX) return PRNN_ERR_UNSUPPORTED;
    PRNN_LAUNCH(colsum_finish_kernel, (unsigned)fb, dim3(kSumX, kFinY), stream_of(ctx), dst, part,
                groups, n, m);
    PRNN_CU_LAUNCHED();
    return PRNN_OK;
}

#define CELL_GUARD(ctx)                                                                      \
    device_guard guard_(prnn_cuda_device_of(ctx));                                           \
    if (guard_.err != cudaSuccess) return map_cuda_error(guard_.err)

} // namespace

/* ======================================================================== */
/* Entry points (cell_internal.h)                                           */

extern "C" prnn_status prnn_cuda_cell_lengths(prnn_ctx *ctx, const int64_t *lengths, int64_t B,
                                              const int64_t **dev)
{
    *dev = nullptr;
    if (!lengths) return PRNN_OK;
    CELL_GUARD(ctx);
    return upload_lengths(&ctx->cell_lengths, &ctx->cell_lengths_cap, stream_of(ctx), lengths, B,
                          dev);
}

extern "C" prnn_status prnn_cuda_cell_gates_fwd(prnn_ctx *ctx, const cell_ew *e, void *a, void *b,
                                                const void *P, const void *bias)
{
    cell_kinds m;
    if (!map_of(e, &m)) return PRNN_ERR_INVALID_ARGUMENT;
    if (!dtype_ok(e->dtype)) return PRNN_ERR_UNSUPPORTED;
    CELL_GUARD(ctx);
    ew_args p = args_of(e, m);
    p.P = P;
    p.bias = bias;
    p.a = a;
    p.b = b;
    const int64_t V = vec_width(e->dtype);
    const bool vec = e->H % V == 0 && aligned16(P) && aligned16(bias) && aligned16(a) && aligned16(b);
    const ew_kernel k = b ? pick_gates_fwd_typed(e->dtype, m.gate, vec)
                          : pick_gates_a_typed(e->dtype, m.gate, vec);
    return run_ew(ctx, k, p, e->B, e->T, e->H, vec ? V : 1);
}

extern "C" prnn_status prnn_cuda_cell_gates_bwd(prnn_ctx *ctx, const cell_ew *e, void *dP,
                                                const void *da, const void *db, const void *P,
                                                const void *bias, void *dbias)
{
    cell_kinds m;
    if (!map_of(e, &m)) return PRNN_ERR_INVALID_ARGUMENT;
    if (!dtype_ok(e->dtype)) return PRNN_ERR_UNSUPPORTED;
    CELL_GUARD(ctx);
    ew_args p = args_of(e, m);
    p.P = P;
    p.bias = bias;
    p.da = da;
    p.db = db;
    p.dP = dP;
    const int64_t V = vec_width(e->dtype);
    const bool vec = e->H % V == 0 && aligned16(P) && aligned16(bias) && aligned16(da) &&
                     aligned16(db) && aligned16(dP);
    if (!dbias)
        return run_ew(ctx, pick_gates_bwd_typed(e->dtype, m.gate, vec), p, e->B, e->T, e->H,
                      vec ? V : 1);
    /* with the bias gradients: the column-sum walk, then the partial rows' sum */
    if (e->B <= 0 || e->T <= 0 || e->H <= 0) return PRNN_OK;
    const gsum_kernel k = pick_gates_bwd_sum_typed(e->dtype, m.gate, vec);
    if (!k) return PRNN_ERR_UNSUPPORTED;
    const int64_t nv = vec ? e->H / V : e->H, rows = e->B * e->T;
    /* one wave of the blocks that fit at once: every thread walks about as
     * many rows as any other */
    const int per_sm = prnn_cuda::resident_blocks(prnn_cuda_device_of(ctx), k, kSumX * kSumY, 0);
    dim3 grid;
    if (!sum_grid(ctx, nv, rows, per_sm > 0 ? per_sm : 1, &grid)) return PRNN_ERR_UNSUPPORTED;
    const int64_t step = (int64_t)grid.y * kSumY, ng = gate_groups(m.gate);
    p.w = walk{e->B, e->T, nv, 0, step % e->T, step / e->T};
    float *part = static_cast<float *>(
        prnn_cuda_aux(ctx, PRNN_AUX_CELL_COLSUM, (size_t)(grid.y * ng * e->H) * sizeof(float)));
    if (!part) return PRNN_ERR_OUT_OF_MEMORY;
    PRNN_LAUNCH(k, grid, dim3(kSumX, kSumY), stream_of(ctx), p, part);
    PRNN_CU_LAUNCHED();
    return colsum_finish(ctx, static_cast<float *>(dbias), part, grid.y, ng * e->H,
                         col_map{e->H, {m.g0, m.g1, m.g2}});
}

extern "C" prnn_status prnn_cuda_cell_out_fwd(prnn_ctx *ctx, const cell_ew *e, void *y,
                                              int64_t ldy, const void *c, const void *P,
                                              const void *bias, const void *x)
{
    cell_kinds m;
    if (!map_of(e, &m)) return PRNN_ERR_INVALID_ARGUMENT;
    if (!dtype_ok(e->dtype)) return PRNN_ERR_UNSUPPORTED;
    if (m.out == OK_SRU_X && !x) return PRNN_ERR_NULL_POINTER;
    CELL_GUARD(ctx);
    ew_args p = args_of(e, m);
    p.y = y;
    p.ldy = ldy;
    p.c = c;
    p.P = P;
    p.bias = bias;
    p.x = x;
    const int64_t V = vec_width(e->dtype);
    const bool vec = e->H % V == 0 && ldy % V == 0 && (m.out != OK_SRU_X || e->D % V == 0) &&
                     aligned16(y) && aligned16(c) && aligned16(P) && aligned16(bias) &&
                     aligned16(x);
    return run_ew(ctx, pick_out_fwd_typed(e->dtype, m.out, vec), p, e->B, e->T, e->H,
                  vec ? V : 1);
}

extern "C" prnn_status prnn_cuda_cell_out_bwd(prnn_ctx *ctx, const cell_ew *e, void *dc, void *dP,
                                              void *dx, const void *dy, int64_t ldy, const void *c,
                                              const void *P, const void *bias, const void *x)
{
    cell_kinds m;
    if (!map_of(e, &m)) return PRNN_ERR_INVALID_ARGUMENT;
    if (!dtype_ok(e->dtype)) return PRNN_ERR_UNSUPPORTED;
    if (m.out == OK_SRU_X && !x) return PRNN_ERR_NULL_POINTER;
    CELL_GUARD(ctx);
    ew_args p = args_of(e, m);
    p.dc = dc;
    p.dP = dP;
    p.dx = m.out == OK_SRU_X ? dx : nullptr;
    p.dy = dy;
    p.ldy = ldy;
    p.c = c;
    p.P = P;
    p.bias = bias;
    p.x = x;
    const int64_t V = vec_width(e->dtype);
    const bool vec = e->H % V == 0 && ldy % V == 0 && (m.out != OK_SRU_X || e->D % V == 0) &&
                     aligned16(dc) && aligned16(dP) && aligned16(p.dx) && aligned16(dy) &&
                     aligned16(c) && aligned16(P) && aligned16(bias) && aligned16(x);
    return run_ew(ctx, pick_out_bwd_typed(e->dtype, m.out, vec), p, e->B, e->T, e->H,
                  vec ? V : 1);
}

extern "C" prnn_status prnn_cuda_cell_logscan_fwd(prnn_ctx *ctx, const cell_ew *e, void *l,
                                                  void *lT, const void *la, const void *lb,
                                                  const void *l0)
{
    if (!dtype_ok(e->dtype)) return PRNN_ERR_UNSUPPORTED;
    CELL_GUARD(ctx);
    const int64_t lanes = e->B * e->H;
    if (lanes <= 0 || e->T <= 0) return PRNN_OK;
    int64_t blocks = (lanes + kBlock - 1) / kBlock;
    const int64_t cap = (int64_t)sm_count(ctx) * kBlocksPerSM;
    if (blocks > cap) blocks = cap;
    float *lT_ = static_cast<float *>(lT);
    const float *l0_ = static_cast<const float *>(l0);
    const int rev = e->reverse ? 1 : 0;
    auto *k = logscan_fwd_kernel<float>;
    if (e->dtype == PRNN_DTYPE_BF16) k = logscan_fwd_kernel<__nv_bfloat16>;
    else if (e->dtype == PRNN_DTYPE_F16) k = logscan_fwd_kernel<__half>;
    PRNN_LAUNCH(k, (unsigned)blocks, kBlock, stream_of(ctx), l, lT_, la, lb, l0_, e->lengths, e->B,
                e->T, e->H, rev);
    PRNN_CU_LAUNCHED();
    return PRNN_OK;
}

extern "C" prnn_status prnn_cuda_cell_logscan_w(prnn_ctx *ctx, const cell_ew *e, void *w,
                                                const void *la, const void *l, const void *l0)
{
    if (!dtype_ok(e->dtype)) return PRNN_ERR_UNSUPPORTED;
    CELL_GUARD(ctx);
    ew_args p = {};
    p.H = e->H;
    p.reverse = e->reverse ? 1 : 0;
    p.lengths = e->lengths;
    p.wout = w;
    p.la = la;
    p.l = l;
    p.l0 = static_cast<const float *>(l0);
    const int64_t V = vec_width(e->dtype);
    const bool vec = e->H % V == 0 && aligned16(w) && aligned16(la) && aligned16(l);
    return run_ew(ctx, pick_logscan_w_typed(e->dtype, 0, vec), p, e->B, e->T, e->H, vec ? V : 1);
}

extern "C" prnn_status prnn_cuda_cell_shift(prnn_ctx *ctx, const cell_ew *e, int64_t n, void *dst,
                                            int64_t ld_dst, const void *src, int64_t ld_src,
                                            const void *init, int64_t ld_init)
{
    if (!dtype_ok(e->dtype)) return PRNN_ERR_UNSUPPORTED;
    CELL_GUARD(ctx);
    ew_args p = {};
    p.reverse = e->reverse ? 1 : 0;
    p.lengths = e->lengths;
    p.dst = dst;
    p.ld_dst = ld_dst;
    p.src = src;
    p.ld_src = ld_src;
    p.init = static_cast<const float *>(init);
    p.ld_st = ld_init;
    const int64_t V = vec_width(e->dtype);
    const bool vec = n % V == 0 && ld_dst % V == 0 && ld_src % V == 0 && aligned16(dst) &&
                     aligned16(src);
    return run_ew(ctx, pick_shift_typed(e->dtype, 0, vec), p, e->B, e->T, n, vec ? V : 1);
}

extern "C" prnn_status prnn_cuda_cell_unshift_add(prnn_ctx *ctx, const cell_ew *e, int64_t n,
                                                  void *dst, int64_t ld_dst, const void *src,
                                                  int64_t ld_src, void *dinit, int64_t ld_dinit)
{
    if (!dtype_ok(e->dtype)) return PRNN_ERR_UNSUPPORTED;
    CELL_GUARD(ctx);
    ew_args p = {};
    p.reverse = e->reverse ? 1 : 0;
    p.lengths = e->lengths;
    p.dst = dst;
    p.ld_dst = ld_dst;
    p.src = src;
    p.ld_src = ld_src;
    p.dinit = static_cast<float *>(dinit);
    p.ld_st = ld_dinit;
    const int64_t V = vec_width(e->dtype);
    const bool vec = n % V == 0 && ld_dst % V == 0 && ld_src % V == 0 && aligned16(dst) &&
                     aligned16(src);
    return run_ew(ctx, pick_unshift_typed(e->dtype, 0, vec), p, e->B, e->T, n, vec ? V : 1);
}

extern "C" prnn_status prnn_cuda_cell_colsum_add(prnn_ctx *ctx, prnn_dtype dtype, int64_t rows,
                                                 int64_t n, void *dst, const void *src, int64_t ld)
{
    if (!dtype_ok(dtype)) return PRNN_ERR_UNSUPPORTED;
    if (rows <= 0 || n <= 0) return PRNN_OK;
    CELL_GUARD(ctx);
    const int64_t V = vec_width(dtype);
    const bool vec = n % V == 0 && ld % V == 0 && aligned16(src);
    const int64_t nv = vec ? n / V : n;
    dim3 grid;
    if (!sum_grid(ctx, nv, rows, 2 * kBlocksPerSM, &grid)) return PRNN_ERR_UNSUPPORTED;
    auto *k = vec ? colsum_kernel<float, 4> : colsum_kernel<float, 1>;
    if (dtype == PRNN_DTYPE_BF16) k = vec ? colsum_kernel<__nv_bfloat16, 8> : colsum_kernel<__nv_bfloat16, 1>;
    else if (dtype == PRNN_DTYPE_F16) k = vec ? colsum_kernel<__half, 8> : colsum_kernel<__half, 1>;
    float *part = static_cast<float *>(
        prnn_cuda_aux(ctx, PRNN_AUX_CELL_COLSUM, (size_t)(grid.y * n) * sizeof(float)));
    if (!part) return PRNN_ERR_OUT_OF_MEMORY;
    PRNN_LAUNCH(k, grid, dim3(kSumX, kSumY), stream_of(ctx), part, src, rows, n, ld);
    PRNN_CU_LAUNCHED();
    return colsum_finish(ctx, static_cast<float *>(dst), part, grid.y, n, col_map{n, {0, 0, 0}});
}

extern "C" prnn_status prnn_cuda_cell_copy2d(prnn_ctx *ctx, void *dst, int64_t dpitch,
                                             const void *src, int64_t spitch, int64_t width,
                                             int64_t rows)
{
    if (width <= 0 || rows <= 0) return PRNN_OK;
    CELL_GUARD(ctx);
    cudaStream_t s = stream_of(ctx);
    if (rows == 1 || (dpitch == width && spitch == width)) {
        PRNN_CU(cudaMemcpyAsync(dst, src, (size_t)(width * rows), cudaMemcpyDeviceToDevice, s));
        return PRNN_OK;
    }
    /* cudaMemcpy2DAsync takes pitches up to the device's cudaDevAttrMaxPitch
     * (2^31 - 1 bytes on current parts); beyond that, a plain kernel. */
    if (dpitch <= INT32_MAX && spitch <= INT32_MAX) {
        PRNN_CU(cudaMemcpy2DAsync(dst, (size_t)dpitch, src, (size_t)spitch, (size_t)width,
                                  (size_t)rows, cudaMemcpyDeviceToDevice, s));
        return PRNN_OK;
    }
    int64_t blocks = (width * rows + kBlock - 1) / kBlock;
    const int64_t cap = (int64_t)sm_count(ctx) * kBlocksPerSM;
    if (blocks > cap) blocks = cap;
    PRNN_LAUNCH(copy2d_kernel, (unsigned)blocks, kBlock, s, static_cast<unsigned char *>(dst),
                dpitch, static_cast<const unsigned char *>(src), spitch, width, rows);
    PRNN_CU_LAUNCHED();
    return PRNN_OK;
}

extern "C" prnn_status prnn_cuda_cell_convert(prnn_ctx *ctx, prnn_dtype dtype, int dir,
                                              int64_t rows, int64_t n, void *dst, int64_t ld_dst,
                                              const void *src, int64_t ld_src)
{
    if (!dtype_ok(dtype)) return PRNN_ERR_UNSUPPORTED;
    if (dir != 0 && dir != 1) return PRNN_ERR_INVALID_ARGUMENT;
    CELL_GUARD(ctx);
    ew_args p = {};
    p.src = src;
    p.ld_src = ld_src;
    p.ld_dst = ld_dst;
    if (dir == 0) p.dinit = static_cast<float *>(dst);
    else p.dst = dst;
    ew_kernel k = nullptr;
    switch (dtype) {
    case PRNN_DTYPE_F32: k = dir ? convert_kernel<float, 1> : convert_kernel<float, 0>; break;
    case PRNN_DTYPE_BF16:
        k = dir ? convert_kernel<__nv_bfloat16, 1> : convert_kernel<__nv_bfloat16, 0>;
        break;
    default: k = dir ? convert_kernel<__half, 1> : convert_kernel<__half, 0>; break;
    }
    return run_ew(ctx, k, p, rows, 1, n, 1);
}

extern "C" prnn_status prnn_cuda_cell_logscan_bwd(prnn_ctx *ctx, const cell_ew *e, void *dla,
                                                  void *dlb, void *dc0, const void *g,
                                                  const void *w, const void *la, const void *l,
                                                  const void *dcT)
{
    if (!dtype_ok(e->dtype)) return PRNN_ERR_UNSUPPORTED;
    CELL_GUARD(ctx);
    ew_args p = {};
    p.H = e->H;
    p.reverse = e->reverse ? 1 : 0;
    p.lengths = e->lengths;
    p.dla = dla;
    p.dlb = dlb;
    p.dc0 = static_cast<float *>(dc0);
    p.g = g;
    p.w_in = w;
    p.la = la;
    p.l = l;
    p.dcT = static_cast<const float *>(dcT);
    const int64_t V = vec_width(e->dtype);
    /* dc0 and dcT are read as single floats, so they need no alignment. */
    const bool vec = e->H % V == 0 && aligned16(dla) && aligned16(dlb) && aligned16(g) &&
                     aligned16(w) && aligned16(la) && aligned16(l);
    return run_ew(ctx, pick_logscan_bwd_typed(e->dtype, 0, vec), p, e->B, e->T, e->H, vec ? V : 1);
}

extern "C" prnn_status prnn_cuda_cell_last(prnn_ctx *ctx, const cell_ew *e, int dir, int64_t n,
                                           void *dst, int64_t ld_dst, const void *src,
                                           int64_t ld_src, const void *init, int64_t ld_init)
{
    if (!dtype_ok(e->dtype)) return PRNN_ERR_UNSUPPORTED;
    if (dir != 0 && dir != 1) return PRNN_ERR_INVALID_ARGUMENT;
    CELL_GUARD(ctx);
    ew_args p = {};
    p.reverse = e->reverse ? 1 : 0;
    p.lengths = e->lengths;
    p.steps = e->T;
    p.dir = dir;
    p.ld_dst = ld_dst;
    p.ld_src = ld_src;
    p.ld_st = ld_init;
    p.src = src;
    p.init = static_cast<const float *>(init);
    if (dir == 0) p.dinit = static_cast<float *>(dst);
    else p.dst = dst;
    ew_kernel k = nullptr;
    switch (e->dtype) {
    case PRNN_DTYPE_F32: k = last_kernel<float>; break;
    case PRNN_DTYPE_BF16: k = last_kernel<__nv_bfloat16>; break;
    default: k = last_kernel<__half>; break;
    }
    return run_ew(ctx, k, p, e->B, 1, n, 1);
}

extern "C" prnn_status prnn_cuda_cell_state_map(prnn_ctx *ctx, prnn_dtype dtype, cell_state_op op,
                                                int64_t n, void *dst, const void *src,
                                                const void *aux)
{
    if (!dtype_ok(dtype)) return PRNN_ERR_UNSUPPORTED;
    if (op != CELL_MAP_LOG && op != CELL_MAP_EXP && op != CELL_MAP_MUL_EXP && op != CELL_MAP_ADD)
        return PRNN_ERR_INVALID_ARGUMENT;
    if ((op == CELL_MAP_MUL_EXP || op == CELL_MAP_ADD) && !aux) return PRNN_ERR_NULL_POINTER;
    if (n <= 0) return PRNN_OK;
    CELL_GUARD(ctx);
    int64_t blocks = (n + kBlock - 1) / kBlock;
    const int64_t cap = (int64_t)sm_count(ctx) * kBlocksPerSM;
    if (blocks > cap) blocks = cap;
    PRNN_LAUNCH(state_map_kernel, (unsigned)blocks, kBlock, stream_of(ctx), static_cast<float *>(dst),
                static_cast<const float *>(src), static_cast<const float *>(aux), (int)op, n);
    PRNN_CU_LAUNCHED();
    return PRNN_OK;
}
