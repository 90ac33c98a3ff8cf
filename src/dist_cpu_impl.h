/*
 * dist_cpu_impl.h - the CPU side of the sequence-parallel scan for one
 * element type: the segment summaries each rank sends (record layout in
 * dist_internal.h) and the merge of what it receives. Included by dist.c
 * once per type with REAL (float or double) and FN(name) defined. Not a
 * public header.
 *
 * Size letters: B batch rows, T the local time steps, H channels; L a row's
 * local valid steps; w the width of a block of channels.
 */

#define PRNN_DIST_HD
#include "dist_combine.h"
#undef PRNN_DIST_HD

/* Channels per unit of work: rows x blocks of this many channels are spread
 * over the threads, each block a contiguous run the inner loop vectorises. */
#ifndef DIST_CPU_BLOCK
#define DIST_CPU_BLOCK 256
#endif

/* Forward summary over each row's valid steps in scan order: A = prod a,
 * S = the scan from zero. rec gets slots DF_A and DF_S (K = 3). */
static void FN(cpu_fwd_summary)(const prnn_scan_desc *d, const int64_t *len, REAL *rec,
                                const REAL *a, const REAL *b, int threads)
{
    const int64_t T = d->T, H = d->H, BH = d->B * d->H;
    const int64_t blocks = (H + DIST_CPU_BLOCK - 1) / DIST_CPU_BLOCK;
    REAL *A = rec + DF_A * BH, *S = rec + DF_S * BH;
#pragma omp parallel for collapse(2) schedule(static) num_threads(threads) if (threads > 1)
    for (int64_t r = 0; r < d->B; r++) {
        for (int64_t k = 0; k < blocks; k++) {
            const int64_t j0 = k * DIST_CPU_BLOCK;
            const int64_t w = H - j0 < DIST_CPU_BLOCK ? H - j0 : DIST_CPU_BLOCK;
            const int64_t L = len ? len[r] : T;
            REAL *restrict Ar = A + r * H + j0, *restrict Sr = S + r * H + j0;
            for (int64_t j = 0; j < w; j++)
                Ar[j] = 1, Sr[j] = 0;
            for (int64_t s = 0; s < L; s++) {
                const int64_t t = d->reverse ? L - 1 - s : s;
                const REAL *restrict pa = a + (r * T + t) * H + j0;
                const REAL *restrict pb = b + (r * T + t) * H + j0;
#pragma omp simd
                for (int64_t j = 0; j < w; j++) {
                    Sr[j] = pa[j] * Sr[j] + pb[j];
                    Ar[j] *= pa[j];
                }
            }
        }
    }
}

/* Backward summary (K = 6 slots DB_A, DB_G, DB_AF, DB_SF). The gradient
 * runs against the scan order: x -> a_t * (x + dh_t) from the last valid
 * step to the first, from x = 0, gives G; A = prod a. The forward's view of
 * the segment: a row with valid steps leaves its last valid h whatever came
 * in (Af = 0, Sf = h_last), a row without passes the state through. */
static void FN(cpu_bwd_summary)(const prnn_scan_desc *d, const int64_t *len, REAL *rec,
                                const REAL *a, const REAL *h, const REAL *dh, int threads)
{
    const int64_t T = d->T, H = d->H, BH = d->B * d->H;
    const int64_t blocks = (H + DIST_CPU_BLOCK - 1) / DIST_CPU_BLOCK;
    REAL *A = rec + DB_A * BH, *G = rec + DB_G * BH;
    REAL *Af = rec + DB_AF * BH, *Sf = rec + DB_SF * BH;
#pragma omp parallel for collapse(2) schedule(static) num_threads(threads) if (threads > 1)
    for (int64_t r = 0; r < d->B; r++) {
        for (int64_t k = 0; k < blocks; k++) {
            const int64_t j0 = k * DIST_CPU_BLOCK;
            const int64_t w = H - j0 < DIST_CPU_BLOCK ? H - j0 : DIST_CPU_BLOCK;
            const int64_t L = len ? len[r] : T;
            REAL *restrict Ar = A + r * H + j0, *restrict Gr = G + r * H + j0;
            for (int64_t j = 0; j < w; j++)
                Ar[j] = 1, Gr[j] = 0;
            for (int64_t s = L - 1; s >= 0; s--) {
                const int64_t t = d->reverse ? L - 1 - s : s;
                const REAL *restrict pa = a + (r * T + t) * H + j0;
                if (dh) {
                    const REAL *restrict pd = dh + (r * T + t) * H + j0;
#pragma omp simd
                    for (int64_t j = 0; j < w; j++) {
                        Gr[j] = pa[j] * (Gr[j] + pd[j]);
                        Ar[j] *= pa[j];
                    }
                } else {
#pragma omp simd
                    for (int64_t j = 0; j < w; j++) {
                        Gr[j] = pa[j] * Gr[j];
                        Ar[j] *= pa[j];
                    }
                }
            }
            const int64_t t_last = d->reverse ? 0 : L - 1;
            for (int64_t j = 0; j < w; j++) {
                Af[r * H + j0 + j] = L > 0 ? 0 : 1;
                Sf[r * H + j0 + j] = L > 0 ? h[(r * T + t_last) * H + j0 + j] : 0;
            }
        }
    }
}

/* The merges of dist_combine.h over every element. */
static void FN(cpu_fwd_combine)(const REAL *rec, int64_t BH, int N, int reverse, int p,
                                REAL *carry, REAL *hT)
{
    for (int64_t i = 0; i < BH; i++) {
        REAL c = 0, f = 0;
        FN(dist_fwd_combine_at)(rec, BH, N, reverse, p, i, &c, &f);
        carry[i] = c;
        if (hT) hT[i] = f;
    }
}

static void FN(cpu_bwd_combine)(const REAL *rec, int64_t BH, int N, int reverse, int p,
                                REAL *h0l, REAL *dhTl, REAL *dh0)
{
    for (int64_t i = 0; i < BH; i++) {
        REAL c = 0, g = 0, g0 = 0;
        FN(dist_bwd_combine_at)(rec, BH, N, reverse, p, i, &c, &g, &g0);
        h0l[i] = c;
        dhTl[i] = g;
        if (dh0) dh0[i] = g0;
    }
}
