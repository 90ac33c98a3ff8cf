/*
 * dist_combine.h - the merge of the records the ranks exchange (layout in
 * dist_internal.h), one (b, h) element at a time: written once for the CPU
 * (float and double, dist.c) and the GPU (float, dist_cuda.cu). Included
 * once per type with REAL, FN(name) (the name with the type's suffix) and
 * PRNN_DIST_HD (nothing, or __host__ __device__) defined. Not a public
 * header; no include guard, by design.
 *
 * Size letters: N ranks, BH = B*H elements of one slot.
 */

/* Element i: the state entering the segment of the rank at scan position p,
 * and the state after the last segment (the global final state). */
PRNN_DIST_HD static inline void FN(dist_fwd_combine_at)(const REAL *rec, int64_t BH, int N,
                                                        int reverse, int p, int64_t i,
                                                        REAL *carry, REAL *final_state)
{
    const int64_t K = PRNN_DIST_KF;
    REAL c = rec[DF_H0 * BH + i]; /* rank 0's h0 */
    for (int q = 0; q < N; q++) {
        if (q == p) *carry = c;
        const REAL *R = rec + (int64_t)(reverse ? N - 1 - q : q) * K * BH;
        c = R[DF_A * BH + i] * c + R[DF_S * BH + i];
    }
    *final_state = c;
}

/* Element i, backward: the forward state entering position p's segment, the
 * gradient entering it from the segments after it, and the gradient of the
 * global initial state. */
PRNN_DIST_HD static inline void FN(dist_bwd_combine_at)(const REAL *rec, int64_t BH, int N,
                                                        int reverse, int p, int64_t i,
                                                        REAL *h0l, REAL *dhTl, REAL *dh0)
{
    const int64_t K = PRNN_DIST_KB;
    REAL c = rec[DB_H0 * BH + i];
    for (int q = 0; q < p; q++) {
        const REAL *R = rec + (int64_t)(reverse ? N - 1 - q : q) * K * BH;
        c = R[DB_AF * BH + i] * c + R[DB_SF * BH + i];
    }
    *h0l = c;
    REAL g = 0;
    for (int r = 0; r < N; r++)
        g += rec[((int64_t)r * K + DB_DT) * BH + i];
    for (int q = N - 1; q >= 0; q--) {
        if (q == p) *dhTl = g;
        const REAL *R = rec + (int64_t)(reverse ? N - 1 - q : q) * K * BH;
        g = R[DB_A * BH + i] * g + R[DB_G * BH + i];
    }
    *dh0 = g;
}

