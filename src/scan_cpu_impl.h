/*
 * scan_cpu_impl.h - the CPU scan for one element type, included by
 * scan_cpu.c once per type with REAL (float or double) and FN(name) (which
 * appends the type's suffix) defined. Not a public header.
 *
 * Size letters: B batch rows, T time steps, H channels; w the width of a
 * lane (a contiguous block of channels of one row); K the chunk length.
 *
 * Scan positions. Every row is processed in "scan order" p = 0 .. L-1 (L the
 * row's valid length). The physical time step of position p is
 * t(p) = t_first + dir * p: forward scans run p in the direction of the
 * recurrence, backward scans run it against. So one driver serves the forward
 * (h = a*h + b) and the backward (g = dh + a_next*g) in both directions.
 */

/* ------------------------------------------------------------------------ */
/* The serial reference: the plain loop over t, single-threaded. The state
 * lives in the output tensors themselves (h, and db = g in the backward). */

static void FN(serial_forward)(const prnn_scan_desc *d, REAL *h, REAL *hT, const REAL *a,
                               const REAL *b, const REAL *h0)
{
    const int64_t T = d->T, H = d->H;
    for (int64_t r = 0; r < d->B; r++) {
        const int64_t L = d->lengths ? d->lengths[r] : T;
#define ROW(s) (r * T + (d->reverse ? L - 1 - (s) : (s))) * H
        for (int64_t s = 0; s < L; s++) {
            const int64_t i = ROW(s);
            if (s > 0) {
                const int64_t prev = ROW(s - 1);
                for (int64_t j = 0; j < H; j++)
                    h[i + j] = a[i + j] * h[prev + j] + b[i + j];
            } else {
                for (int64_t j = 0; j < H; j++)
                    h[i + j] = a[i + j] * (h0 ? h0[r * H + j] : 0) + b[i + j];
            }
        }
        for (int64_t j = 0; j < H; j++)
            if (hT)
                hT[r * H + j] = L > 0 ? h[ROW(L - 1) + j] : h0 ? h0[r * H + j] : 0;
#undef ROW
        for (int64_t t = L; t < T; t++)
            for (int64_t j = 0; j < H; j++)
                h[(r * T + t) * H + j] = 0;
    }
}

/* g_s = dh_s + a_{s+1} g_{s+1} for s = L-1 .. 0, with g_L = dhT. */
static void FN(serial_backward)(const prnn_scan_desc *d, REAL *da, REAL *db, REAL *dh0,
                                const REAL *a, const REAL *h, const REAL *h0, const REAL *dh,
                                const REAL *dhT)
{
    const int64_t T = d->T, H = d->H;
    for (int64_t r = 0; r < d->B; r++) {
        const int64_t L = d->lengths ? d->lengths[r] : T;
#define ROW(s) (r * T + (d->reverse ? L - 1 - (s) : (s))) * H
        for (int64_t s = L - 1; s >= 0; s--) {
            const int64_t i = ROW(s);
            for (int64_t j = 0; j < H; j++) {
                REAL next =
                    s + 1 < L ? a[ROW(s + 1) + j] * db[ROW(s + 1) + j] : (dhT ? dhT[r * H + j] : 0);
                REAL g = (dh ? dh[i + j] : 0) + next;
                REAL hprev = s > 0 ? h[ROW(s - 1) + j] : (h0 ? h0[r * H + j] : 0);
                db[i + j] = g;
                da[i + j] = g * hprev;
            }
        }
        if (dh0)
            for (int64_t j = 0; j < H; j++)
                dh0[r * H + j] =
                    L > 0 ? a[ROW(0) + j] * db[ROW(0) + j] : (dhT ? dhT[r * H + j] : 0);
#undef ROW
        for (int64_t t = L; t < T; t++)
            for (int64_t j = 0; j < H; j++)
                da[(r * T + t) * H + j] = db[(r * T + t) * H + j] = 0;
    }
}

/* ------------------------------------------------------------------------ */
/* Chunk kernels of the divide-and-conquer scan, vectorised over a lane.     */

/* One lane: row r's channels [j0, j0 + w), with the row's scan geometry. */
typedef struct {
    int64_t first; /* offset of scan position 0's element in a [B, T, H] tensor */
    int64_t step;  /* element distance between scan positions: +H or -H */
    int64_t L;     /* valid steps of the row */
    int64_t state; /* offset of the lane in a [B, H] tensor: r*H + j0 */
    int64_t w;
    int stream; /* write outputs with non-temporal stores (see scan_cpu.c) */
} FN(lane);

/* Summary of forward positions [p0, p1): A = prod a, S = scan from zero. */
static void FN(fwd_summarize)(REAL *restrict A, REAL *restrict S, const REAL *restrict a,
                              const REAL *restrict b, const FN(lane) * ln, int64_t p0, int64_t p1)
{
    const int64_t w = ln->w;
    for (int64_t j = 0; j < w; j++)
        A[j] = 1, S[j] = 0;
    for (int64_t p = p0; p < p1; p++) {
        const REAL *restrict pa = a + ln->first + p * ln->step;
        const REAL *restrict pb = b + ln->first + p * ln->step;
#pragma omp simd
        for (int64_t j = 0; j < w; j++) {
            S[j] = pa[j] * S[j] + pb[j];
            A[j] *= pa[j];
        }
    }
}

/* Forward positions [p0, p1) from the state `carry`, writing h; leaves the
 * final state in `carry`. */
static void FN(fwd_apply)(REAL *restrict h, const REAL *restrict a, const REAL *restrict b,
                          REAL *restrict carry, const FN(lane) * ln, int64_t p0, int64_t p1)
{
    const int64_t w = ln->w;
    REAL x[PRNN_LANE_MAX];
    for (int64_t j = 0; j < w; j++)
        x[j] = carry[j];
#ifdef PRNN_STREAM_F32
    /* Outputs far larger than the caches: write them around the caches, so
     * they are not first read in (as memcpy does for large copies). */
    if (ln->stream && PRNN_STREAM_F32(h + ln->first + p0 * ln->step, ln->step, w)) {
        for (int64_t p = p0; p < p1; p++) {
            const int64_t at = ln->first + p * ln->step;
            for (int64_t j = 0; j < w; j += 8) {
                __m256 v = _mm256_fmadd_ps(_mm256_loadu_ps(a + at + j), _mm256_loadu_ps(x + j),
                                           _mm256_loadu_ps(b + at + j));
                _mm256_storeu_ps(x + j, v);
                _mm256_stream_ps(h + at + j, v);
            }
        }
        _mm_sfence();
        for (int64_t j = 0; j < w; j++)
            carry[j] = x[j];
        return;
    }
#endif
    for (int64_t p = p0; p < p1; p++) {
        const int64_t at = ln->first + p * ln->step;
        const REAL *restrict pa = a + at;
        const REAL *restrict pb = b + at;
        REAL *restrict ph = h + at;
#pragma omp simd
        for (int64_t j = 0; j < w; j++) {
            x[j] = pa[j] * x[j] + pb[j];
            ph[j] = x[j];
        }
    }
    for (int64_t j = 0; j < w; j++)
        carry[j] = x[j];
}

/*
 * Backward positions [p0, p1). Position p is logical step s = L-1-p, so the
 * coefficient a_{s+1} sits at position p-1 (1 at p = 0, where g_L = dhT) and
 * h_{s-1} at position p+1 (h0 at p = L-1). Absent operands read a zero row,
 * so that every step is one fused loop; p = 0 (coefficient 1) has its own.
 */
static const REAL FN(zeros)[PRNN_LANE_MAX];

static void FN(bwd_summarize)(REAL *restrict A, REAL *restrict S, const REAL *restrict a,
                              const REAL *restrict dh, const FN(lane) * ln, int64_t p0, int64_t p1)
{
    const int64_t w = ln->w;
    for (int64_t j = 0; j < w; j++)
        A[j] = 1, S[j] = 0;
    for (int64_t p = p0; p < p1; p++) {
        const int64_t at = ln->first + p * ln->step;
        const REAL *restrict pd = dh ? dh + at : FN(zeros);
        if (p == 0) {
            for (int64_t j = 0; j < w; j++)
                S[j] += pd[j];
            continue;
        }
        const REAL *restrict pc = a + at - ln->step;
#pragma omp simd
        for (int64_t j = 0; j < w; j++) {
            S[j] = pc[j] * S[j] + pd[j];
            A[j] *= pc[j];
        }
    }
}

static void FN(bwd_apply_plain)(REAL *restrict da, REAL *restrict db, const REAL *restrict a,
                                const REAL *restrict h, const REAL *restrict h0,
                                const REAL *restrict dh, REAL *restrict carry, const FN(lane) * ln,
                                int64_t p0, int64_t p1)
{
    const int64_t w = ln->w;
    REAL g[PRNN_LANE_MAX];
    for (int64_t j = 0; j < w; j++)
        g[j] = carry[j];
    for (int64_t p = p0; p < p1; p++) {
        const int64_t at = ln->first + p * ln->step;
        const REAL *restrict pd = dh ? dh + at : FN(zeros);
        const REAL *restrict ph = p + 1 < ln->L ? h + at + ln->step
                                  : h0          ? h0 + ln->state
                                                : FN(zeros);
        REAL *restrict pda = da + at;
        REAL *restrict pdb = db + at;
        if (p == 0) {
            for (int64_t j = 0; j < w; j++) {
                g[j] += pd[j];
                pda[j] = g[j] * ph[j];
                pdb[j] = g[j];
            }
            continue;
        }
        const REAL *restrict pc = a + at - ln->step;
#pragma omp simd
        for (int64_t j = 0; j < w; j++) {
            g[j] = pc[j] * g[j] + pd[j];
            pda[j] = g[j] * ph[j];
            pdb[j] = g[j];
        }
    }
    for (int64_t j = 0; j < w; j++)
        carry[j] = g[j];
}

static void FN(bwd_apply)(REAL *restrict da, REAL *restrict db, const REAL *restrict a,
                          const REAL *restrict h, const REAL *restrict h0, const REAL *restrict dh,
                          REAL *restrict carry, const FN(lane) * ln, int64_t p0, int64_t p1)
{
#ifdef PRNN_STREAM_F32
    /* Interior steps (0 < p < L-1) have every operand in the tensors: one
     * fused loop with streaming stores; the two end steps take the plain one. */
    const int64_t q0 = p0 > 1 ? p0 : 1, q1 = p1 < ln->L - 1 ? p1 : ln->L - 1;
    const int64_t w = ln->w;
    if (ln->stream && dh && q0 < q1 &&
        PRNN_STREAM_F32(da + ln->first + q0 * ln->step, ln->step, w) &&
        PRNN_STREAM_F32(db + ln->first + q0 * ln->step, ln->step, w)) {
        FN(bwd_apply_plain)(da, db, a, h, h0, dh, carry, ln, p0, q0);
        for (int64_t p = q0; p < q1; p++) {
            const int64_t at = ln->first + p * ln->step;
            const REAL *pc = a + at - ln->step, *ph = h + at + ln->step;
            for (int64_t j = 0; j < w; j += 8) {
                __m256 v = _mm256_fmadd_ps(_mm256_loadu_ps(pc + j), _mm256_loadu_ps(carry + j),
                                           _mm256_loadu_ps(dh + at + j));
                _mm256_storeu_ps(carry + j, v);
                _mm256_stream_ps(da + at + j, _mm256_mul_ps(v, _mm256_loadu_ps(ph + j)));
                _mm256_stream_ps(db + at + j, v);
            }
        }
        _mm_sfence();
        FN(bwd_apply_plain)(da, db, a, h, h0, dh, carry, ln, q1, p1);
        return;
    }
#endif
    FN(bwd_apply_plain)(da, db, a, h, h0, dh, carry, ln, p0, p1);
}

/* ------------------------------------------------------------------------ */
/* The divide-and-conquer driver                                             */

/* Everything one forward or backward call needs. */
typedef struct {
    const prnn_scan_desc *d;
    int backward;
    /* forward: h, hT out; a, b, h0 in */
    REAL *h, *hT;
    const REAL *a, *b, *h0;
    /* backward: da, db, dh0 out; a, hin (the forward's h), h0, dh, dhT in */
    REAL *da, *db, *dh0;
    const REAL *hin, *dh, *dhT;
} FN(job);

static FN(lane) FN(lane_make)(const FN(job) * jb, int64_t lane, int64_t ncb, int64_t wmax)
{
    const prnn_scan_desc *d = jb->d;
    const int64_t r = lane / ncb, j0 = (lane % ncb) * wmax;
    FN(lane) ln;
    ln.L = d->lengths ? d->lengths[r] : d->T;
    ln.w = d->H - j0 < wmax ? d->H - j0 : wmax;
    ln.state = r * d->H + j0;
    /* Forward scans walk the recurrence's direction, backward ones against it. */
    const int walk_down = d->reverse != jb->backward;
    const int64_t t_first = walk_down ? ln.L - 1 : 0;
    ln.step = walk_down ? -d->H : d->H;
    ln.first = r * d->T * d->H + (ln.L > 0 ? t_first : 0) * d->H + j0;
    ln.stream = d->B * d->T * d->H * (int64_t)sizeof(REAL) >= PRNN_STREAM_MIN_BYTES;
    return ln;
}

static void FN(summarize)(const FN(job) * jb, REAL *A, REAL *S, const FN(lane) * ln, int64_t p0,
                          int64_t p1)
{
    if (jb->backward)
        FN(bwd_summarize)(A, S, jb->a, jb->dh, ln, p0, p1);
    else
        FN(fwd_summarize)(A, S, jb->a, jb->b, ln, p0, p1);
}

static void FN(apply)(const FN(job) * jb, REAL *carry, const FN(lane) * ln, int64_t p0, int64_t p1)
{
    if (jb->backward)
        FN(bwd_apply)(jb->da, jb->db, jb->a, jb->hin, jb->h0, jb->dh, carry, ln, p0, p1);
    else
        FN(fwd_apply)(jb->h, jb->a, jb->b, carry, ln, p0, p1);
}

/*
 * Rows of one channel (H = 1) go in groups of PRNN_ROWS lanes: alone, a lane
 * is one dependent chain that waits on every multiply-add's latency; side by
 * side the chains overlap. The forward runs the 4 rows in lock step, the
 * backward (5 streams a row) 2 at a time: on the 2-core reference machine
 * about 10-12 concurrent streams per core is where the prefetchers keep up
 * (4 forward rows: 0.86 of memcpy's speed, 8: 0.37; 2 backward rows: 0.89,
 * 4: 0.24). The rows of a group share one length; states stay in registers.
 */
#define PRNN_ROWS 4

static void FN(apply_rows)(const FN(job) * jb, REAL *carry, const FN(lane) * ln)
{
    const int64_t L = ln[0].L, step = ln[0].step;
    if (!jb->backward) {
        const REAL *a = jb->a, *b = jb->b;
        REAL *h = jb->h;
        REAL x[4];
        int64_t at[4];
#pragma GCC unroll 4
        for (int k = 0; k < 4; k++)
            x[k] = carry[k], at[k] = ln[k].first;
        for (int64_t p = 0; p < L; p++) {
#pragma GCC unroll 4
            for (int k = 0; k < 4; k++) {
                x[k] = a[at[k]] * x[k] + b[at[k]];
                h[at[k]] = x[k];
                at[k] += step;
            }
        }
#pragma GCC unroll 4
        for (int k = 0; k < 4; k++)
            carry[k] = x[k];
        return;
    }
    /* As bwd_apply_plain: the coefficient is 1 at p = 0 and h_prev is h0 (or
     * 0) at p = L-1; the steps between are uniform. */
    const REAL *a = jb->a, *hin = jb->hin, *dh = jb->dh, *h0 = jb->h0;
    REAL *da = jb->da, *db = jb->db;
    for (int k0 = 0; k0 < 4; k0 += 2) {
        REAL x[2] = {carry[k0], carry[k0 + 1]};
        int64_t at[2] = {ln[k0].first, ln[k0 + 1].first};
        for (int64_t p = 0; p < L; p++) {
            if (p == 0 || p + 1 == L || !dh) {
                for (int k = 0; k < 2; k++) {
                    const REAL c = p > 0 ? a[at[k] - step] : 1;
                    const REAL hp = p + 1 < L ? hin[at[k] + step] : h0 ? h0[ln[k0 + k].state] : 0;
                    x[k] = c * x[k] + (dh ? dh[at[k]] : 0);
                    da[at[k]] = x[k] * hp;
                    db[at[k]] = x[k];
                    at[k] += step;
                }
                continue;
            }
#pragma GCC unroll 2
            for (int k = 0; k < 2; k++) {
                x[k] = a[at[k] - step] * x[k] + dh[at[k]];
                da[at[k]] = x[k] * hin[at[k] + step];
                db[at[k]] = x[k];
                at[k] += step;
            }
        }
        carry[k0] = x[0], carry[k0 + 1] = x[1];
    }
}

/* (A1, S1) then (A2, S2) = (A2*A1, A2*S1 + S2), written into the second. */
static void FN(merge_into)(const REAL *restrict A1, const REAL *restrict S1, REAL *restrict A2,
                           REAL *restrict S2, int64_t w)
{
#pragma omp simd
    for (int64_t j = 0; j < w; j++) {
        S2[j] = A2[j] * S1[j] + S2[j];
        A2[j] *= A1[j];
    }
}

/* Blelloch down-sweep step on one node: the left child takes the parent's
 * prefix P, the right child P then (left subtree's total). */
static void FN(down_node)(REAL *restrict Al, REAL *restrict Sl, REAL *restrict Ar,
                          REAL *restrict Sr, int64_t w)
{
    for (int64_t j = 0; j < w; j++) {
        REAL pa = Ar[j], ps = Sr[j], la = Al[j], ls = Sl[j];
        Al[j] = pa, Sl[j] = ps;
        Ar[j] = la * pa, Sr[j] = la * ps + ls;
    }
}

/* Up-sweep level `lev` of every lane's tree of W summaries, merge items
 * [it0, it1): item it is node c = (it % per_lane) * 2d + 2d - 1 of lane
 * it / per_lane, which takes in its left neighbour c - d (d = 2^lev). */
static void FN(up_level)(REAL *sumA, REAL *sumS, int64_t it0, int64_t it1, int lev, int64_t W,
                         int64_t wmax)
{
    const int64_t dd = (int64_t)1 << lev, per_lane = W / (2 * dd);
    for (int64_t it = it0; it < it1; it++) {
        const int64_t i = it / per_lane, c = (it % per_lane) * 2 * dd + 2 * dd - 1;
        REAL *la = sumA + i * W * wmax, *ls = sumS + i * W * wmax;
        FN(merge_into)(la + (c - dd) * wmax, ls + (c - dd) * wmax, la + c * wmax, ls + c * wmax,
                       wmax);
    }
}

/* Down-sweep of lane i's tree. A chunk's starting state is its exclusive
 * prefix applied to the lane's carry (left in the chunk's S slot); the carry
 * then moves on by the window's total, the tree's root. */
static void FN(down_lane)(REAL *sumA, REAL *sumS, REAL *carry, int64_t i, int64_t W, int64_t wmax)
{
    REAL *la = sumA + i * W * wmax, *ls = sumS + i * W * wmax;
    REAL *ra = la + (W - 1) * wmax, *rs = ls + (W - 1) * wmax;
    REAL *c = carry + i * wmax;
    REAL old[PRNN_LANE_MAX];
    for (int64_t j = 0; j < wmax; j++) {
        old[j] = c[j];
        c[j] = ra[j] * c[j] + rs[j];
        ra[j] = 1, rs[j] = 0;
    }
    for (int64_t dd = W / 2; dd >= 1; dd /= 2)
        for (int64_t cc = 2 * dd - 1; cc < W; cc += 2 * dd)
            FN(down_node)(la + (cc - dd) * wmax, ls + (cc - dd) * wmax, la + cc * wmax,
                          ls + cc * wmax, wmax);
    for (int64_t cc = 0; cc < W; cc++)
        for (int64_t j = 0; j < wmax; j++)
            ls[cc * wmax + j] = la[cc * wmax + j] * old[j] + ls[cc * wmax + j];
}

#ifdef DEBUG_MERGE
/* Compares every node of up-sweep level `lev` against a direct serial
 * evaluation of the steps it covers and prints the largest differences. */
static void FN(debug_level)(const FN(job) * jb, const REAL *sumA, const REAL *sumS, int64_t lanes,
                            int64_t W, int64_t K, int64_t k, int lev, int64_t ncb, int64_t wmax)
{
    REAL A[PRNN_LANE_MAX], S[PRNN_LANE_MAX];
    double ea = 0, es = 0;
    const int64_t dd = (int64_t)1 << lev;
    for (int64_t i = 0; i < lanes; i++) {
        FN(lane) ln = FN(lane_make)(jb, i, ncb, wmax);
        for (int64_t c = 2 * dd - 1; c < W; c += 2 * dd) {
            int64_t p0 = (k * W + c - 2 * dd + 1) * K, p1 = (k * W + c + 1) * K;
            if (p1 > ln.L)
                p1 = ln.L;
            if (p0 >= p1)
                continue;
            FN(summarize)(jb, A, S, &ln, p0, p1);
            const REAL *mA = sumA + (i * W + c) * wmax, *mS = sumS + (i * W + c) * wmax;
            for (int64_t j = 0; j < ln.w; j++) {
                double x = fabs((double)mA[j] - (double)A[j]),
                       y = fabs((double)mS[j] - (double)S[j]);
                if (x > ea)
                    ea = x;
                if (y > es)
                    es = y;
            }
        }
    }
    fprintf(stderr,
            "DEBUG_MERGE %s window %lld level %d (intervals of %lld steps): "
            "max |dA| %.3g, max |dstate| %.3g vs serial\n",
            jb->backward ? "backward" : "forward", (long long)k, lev + 1, (long long)(2 * dd * K),
            ea, es);
}
#endif

/*
 * The divide-and-conquer scan. Lanes (row, block of channels) are processed
 * together, their time axis in windows of W chunks of K steps,
 * sized so that a window's inputs stay in cache between the two passes:
 *
 *   1. local states: every chunk's summary (A, S), in parallel;
 *   2. merge: the summaries are merged level by level up the tree (each
 *      level's merges in parallel), then the prefixes flow down it, giving
 *      every chunk its true starting state;
 *   3. every chunk rescans its steps from that state, writing the outputs.
 *
 * When there are enough lanes to fill the threads on their own (W = 1), a
 * tree has nothing to add and each lane is one streaming pass.
 */
static prnn_status FN(tree)(prnn_ctx *ctx, const FN(job) * jb)
{
    const prnn_scan_desc *d = jb->d;
    /* Small scans run on one thread: waking a team costs microseconds (and
     * far more when the machine is oversubscribed), more than the work. */
    const int nt = d->B * d->T * d->H < PRNN_SMALL_SCAN ? 1 : ctx->num_threads;
    const int64_t K = d->chunk > 0 ? d->chunk : 32;
    const int64_t wmax = d->H <= PRNN_LANE_MAX ? d->H : PRNN_LANE_WIDTH;
    const int64_t ncb = (d->H + wmax - 1) / wmax;
    const int64_t lanes = d->B * ncb;

    /* Tiles (chunk of one lane) per window: the cache budget over the bytes
     * of the two streamed inputs of one tile. */
    const int64_t tile_bytes = K * wmax * 2 * (int64_t)sizeof(REAL);
    int64_t nt_tiles = (int64_t)nt * PRNN_WINDOW_BYTES / tile_bytes;
    if (nt_tiles < 1)
        nt_tiles = 1;
    int64_t maxL = 0;
    for (int64_t r = 0; r < d->B; r++) {
        int64_t L = d->lengths ? d->lengths[r] : d->T;
        if (L > maxL)
            maxL = L;
    }
    /* With enough lanes to keep every thread busy, each lane is one
     * streaming pass; otherwise the time axis is split into a tree. */
    int64_t W = 1;
    if (lanes < 4 * (int64_t)nt)
        while (2 * W * lanes <= nt_tiles && W * K < maxL)
            W *= 2;

    /* Workspace: W summaries and one carry per lane. (W > 1 only when
     * lanes * W tiles fit the cache budget, so this stays small.) */
    const int64_t nsum = lanes * W * wmax;
    REAL *ws = prnn_host_workspace(ctx, (size_t)(2 * nsum + lanes * wmax) * sizeof(REAL));
    if (!ws)
        return PRNN_ERR_OUT_OF_MEMORY;
    REAL *sumA = ws, *sumS = ws + nsum, *carry = ws + 2 * nsum;
    const REAL *init = jb->backward ? jb->dhT : jb->h0;
    const int levels = (int)log2((double)W);
    /* A level's merges are spread over the threads only when there are
     * enough of them to pay for the barrier. */
    const int64_t par_min = 4096;

#pragma omp parallel num_threads(nt)
    {
        if (W == 1) {
            /* Single-channel rows of equal length go PRNN_ROWS at a time. */
            const int64_t per = d->H == 1 && !d->lengths ? PRNN_ROWS : 1;
#pragma omp for schedule(dynamic, 1)
            for (int64_t i0 = 0; i0 < lanes; i0 += per) {
                const int nr = (int)(lanes - i0 < per ? lanes - i0 : per);
                FN(lane) ln[PRNN_ROWS];
                for (int k = 0; k < nr; k++) {
                    ln[k] = FN(lane_make)(jb, i0 + k, ncb, wmax);
                    REAL *c = carry + (i0 + k) * wmax;
                    for (int64_t j = 0; j < ln[k].w; j++)
                        c[j] = init ? init[ln[k].state + j] : 0;
                }
                if (nr == PRNN_ROWS)
                    FN(apply_rows)(jb, carry + i0 * wmax, ln);
                else
                    for (int k = 0; k < nr; k++)
                        FN(apply)(jb, carry + (i0 + k) * wmax, &ln[k], 0, ln[k].L);
            }
        } else {
#pragma omp for
            for (int64_t i = 0; i < lanes; i++) {
                FN(lane) ln = FN(lane_make)(jb, i, ncb, wmax);
                for (int64_t j = 0; j < wmax; j++)
                    carry[i * wmax + j] = init && j < ln.w ? init[ln.state + j] : 0;
            }
            const int64_t nwin = (maxL + W * K - 1) / (W * K);
            for (int64_t k = 0; k < nwin; k++) {
                /* 1. local states */
#pragma omp for schedule(static)
                for (int64_t tile = 0; tile < lanes * W; tile++) {
                    const int64_t i = tile / W, c = tile % W;
                    FN(lane) ln = FN(lane_make)(jb, i, ncb, wmax);
                    int64_t p0 = (k * W + c) * K, p1 = p0 + K;
                    if (p1 > ln.L)
                        p1 = ln.L;
                    REAL *A = sumA + tile * wmax, *S = sumS + tile * wmax;
                    int64_t j = 0;
                    if (p0 < p1) {
                        FN(summarize)(jb, A, S, &ln, p0, p1);
                        j = ln.w;
                    }
                    for (; j < wmax; j++)
                        A[j] = 1, S[j] = 0; /* identity */
                }
                /* 2. merge up the tree, level by level, then the prefixes
                 * down it. A small tree (the usual case: it holds 1/K of the
                 * window's data) is one thread's work between two barriers;
                 * a large one spreads each level's merges over the threads. */
                if (lanes * W * wmax <= 8 * par_min) {
#pragma omp single
                    {
                        for (int lev = 0; lev < levels; lev++) {
                            FN(up_level)(sumA, sumS, 0, lanes * (W >> (lev + 1)), lev, W, wmax);
#ifdef DEBUG_MERGE
                            FN(debug_level)(jb, sumA, sumS, lanes, W, K, k, lev, ncb, wmax);
#endif
                        }
                        for (int64_t i = 0; i < lanes; i++)
                            FN(down_lane)(sumA, sumS, carry, i, W, wmax);
                    }
                } else {
                    for (int lev = 0; lev < levels; lev++) {
                        const int64_t items = lanes * (W >> (lev + 1));
                        if (items * wmax >= par_min) {
#pragma omp for schedule(static)
                            for (int64_t it = 0; it < items; it++)
                                FN(up_level)(sumA, sumS, it, it + 1, lev, W, wmax);
                        } else {
#pragma omp single
                            FN(up_level)(sumA, sumS, 0, items, lev, W, wmax);
                        }
#ifdef DEBUG_MERGE
#pragma omp single
                        FN(debug_level)(jb, sumA, sumS, lanes, W, K, k, lev, ncb, wmax);
#endif
                    }
#pragma omp for schedule(static)
                    for (int64_t i = 0; i < lanes; i++)
                        FN(down_lane)(sumA, sumS, carry, i, W, wmax);
                }
                /* 3. rescan every chunk from its starting state */
#pragma omp for schedule(static)
                for (int64_t tile = 0; tile < lanes * W; tile++) {
                    const int64_t i = tile / W, c = tile % W;
                    FN(lane) ln = FN(lane_make)(jb, i, ncb, wmax);
                    int64_t p0 = (k * W + c) * K, p1 = p0 + K;
                    if (p1 > ln.L)
                        p1 = ln.L;
                    if (p0 < p1)
                        FN(apply)(jb, sumS + tile * wmax, &ln, p0, p1);
                }
            }
        }

        /* Final states, and zeros past every row's length. */
#pragma omp for schedule(static)
        for (int64_t i = 0; i < lanes; i++) {
            FN(lane) ln = FN(lane_make)(jb, i, ncb, wmax);
            const REAL *c = carry + i * wmax;
            if (!jb->backward && jb->hT) {
                for (int64_t j = 0; j < ln.w; j++)
                    jb->hT[ln.state + j] = c[j];
            } else if (jb->backward && jb->dh0) {
                /* dh0 = a_0 * g_0; logical step 0 is the last scan position. */
                const REAL *a0 = jb->a + ln.first + (ln.L - 1) * ln.step;
                for (int64_t j = 0; j < ln.w; j++)
                    jb->dh0[ln.state + j] = ln.L > 0 ? a0[j] * c[j] : c[j];
            }
            const int64_t r = (i) / ncb, j0 = ln.state - r * d->H;
            for (int64_t t = ln.L; t < d->T; t++) {
                const int64_t at = (r * d->T + t) * d->H + j0;
                REAL *o1 = jb->backward ? jb->da + at : jb->h + at;
                memset(o1, 0, (size_t)ln.w * sizeof(REAL));
                if (jb->backward)
                    memset(jb->db + at, 0, (size_t)ln.w * sizeof(REAL));
            }
        }
    }
    return PRNN_OK;
}
