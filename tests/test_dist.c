/*
 * test_dist.c - the CPU suite of the distributed pieces (prnn_dist.h, and
 * `prnn train --dist`), run under mpirun with 2, 3 or more processes
 * (scripts/test.sh runs -np 2 and -np 3):
 *
 *   1. the sequence-parallel scan, forward and backward, every option, odd
 *      and one-step segments, f64 and f32, against the one-process scan of
 *      the whole sequence (each rank checks its own segment);
 *   2. the distributed backward against central finite differences of the
 *      distributed forward, in double;
 *   3. bad arguments: every rank returns an error and none waits for ever;
 *   4. the all-reduce mean: exact, with identical bits on every rank;
 *   5. data parallel: the model's gradient from rows split over the ranks,
 *      weighted by their scored tokens, equals the whole batch's gradient;
 *   6. `prnn train --dist` at global batch B equals `prnn train` in one
 *      process at batch B: losses and weights;
 *   7. the bucketed average (prnn_dist_grad) against the one-pass mean:
 *      the same bits, on slices of any order and size and on the model's
 *      gradient hook; each rank's shard (ZeRO-1), the shard gathers; misuse;
 *   8. `prnn train --dist` with the average overlapped or not (the same
 *      bits), with --zero1 or not (fp32 tolerance), checkpoints of either
 *      resumed by the other and on another process count against an
 *      uninterrupted run, and options that need --dist (exit 2).
 *
 * Every rank draws the same global problem from the seed rank 0 prints
 * (PRNN_TEST_SEED repeats a run). Each check is made on every rank and
 * passes when it passed on all; rank 0 prints it with the largest error
 * over the ranks and where it was. Other ranks print nothing.
 *
 * Size letters: B batch rows, T global time steps, Tr a rank's steps,
 * H channels, N ranks.
 */
#define _POSIX_C_SOURCE 200809L /* mkdtemp, dup, dup2 */
#include <fcntl.h>
#include <unistd.h>

#include "test_dist_cmd.h"

#include "prnn_dist.h"
#include "prnn_model.h"
#include "train/train.h"

static prnn_ctx *g_ctx; /* = g_cpu, where the distributed scan runs */
static prnn_dist *g_dist;

/* ------------------------------------------------------------------------ */
/* 1. The sequence-parallel scan against the whole sequence in one process  */

/* The distributed forward + backward in dtype (F32 or F64) on this rank's
 * segment; outputs in double. */
static prnn_status run_dist(const problem *p, prnn_dtype dt, prnn_scan_algo algo, int64_t chunk,
                            result *got)
{
    const int64_t Tr = p->Tr[g_rank], n = p->B * Tr * p->H, s = p->B * p->H;
    const int f64 = dt == PRNN_DTYPE_F64;
    const size_t es = f64 ? 8 : 4;
    double *seg = tu_malloc((size_t)n * 8);
    void *a = tu_malloc((size_t)n * es), *b = tu_malloc((size_t)n * es);
    void *dh = tu_malloc((size_t)n * es), *h = tu_malloc((size_t)n * es);
    void *da = tu_malloc((size_t)n * es), *db = tu_malloc((size_t)n * es);
    void *h0 = tu_malloc((size_t)s * es), *hT = tu_malloc((size_t)s * es);
    void *dhT = tu_malloc((size_t)s * es), *dh0 = tu_malloc((size_t)s * es);
#define PUT(dst, src, cnt)                                                     \
    for (int64_t i_ = 0; i_ < (cnt); i_++) {                                   \
        if (f64) ((double *)(dst))[i_] = (src)[i_];                            \
        else ((float *)(dst))[i_] = (float)(src)[i_];                          \
    }
#define GET(dst, src, cnt)                                                     \
    for (int64_t i_ = 0; i_ < (cnt); i_++)                                     \
        (dst)[i_] = f64 ? ((const double *)(src))[i_] : (double)((const float *)(src))[i_];
    segment(p, p->a, seg);
    PUT(a, seg, n);
    segment(p, p->b, seg);
    PUT(b, seg, n);
    segment(p, p->dh, seg);
    PUT(dh, seg, n);
    PUT(h0, g_rank == 0 ? p->h0 : p->junk_h0, s);
    PUT(dhT, p->dhT + g_rank * s, s);
    prnn_scan_desc d = prnn_scan_desc_make(p->B, Tr, p->H);
    d.dtype = dt;
    d.algo = algo;
    d.chunk = chunk;
    d.reverse = p->reverse;
    d.lengths = p->lengths;
    /* dh0 starts as garbage: ranks > 0 must zero it. */
    PUT(dh0, p->junk_h0, s);
    prnn_status st = prnn_dist_scan_forward(g_dist, &d, h, p->use_hT ? hT : NULL, a, b,
                                            p->use_h0 ? h0 : NULL);
    if (st == PRNN_OK)
        st = prnn_dist_scan_backward(g_dist, &d, da, db, dh0, a, h, p->use_h0 ? h0 : NULL,
                                     p->use_dh ? dh : NULL, p->use_dhT ? dhT : NULL);
    GET(got->h, h, n);
    GET(got->da, da, n);
    GET(got->db, db, n);
    GET(got->hT, hT, s);
    GET(got->dh0, dh0, s);
#undef PUT
#undef GET
    free(seg), free(a), free(b), free(dh), free(h), free(da), free(db), free(h0), free(hT);
    free(dhT), free(dh0);
    return st;
}

/* This rank's worst relative error over its outputs (floors: each global
 * tensor's RMS, so near-zero entries are judged on the tensor's scale, and
 * at least 1, the scale of the inputs: fp32 rounding follows the size of the
 * terms summed, so a tiny tensor (T = 2, H = 1) whose entries cancel to near
 * zero would otherwise be judged against its own small RMS). */
static double floor1(double r) { return r > 1.0 ? r : 1.0; }

static double compare_segment(const problem *p, const result *got, const result *ref)
{
    const int64_t Tr = p->Tr[g_rank], n = p->B * Tr * p->H, s = p->B * p->H;
    const int64_t nT = p->B * p->T * p->H;
    double *want = tu_malloc((size_t)n * 8);
    double worst = 0, e;
    const double *outs[3] = {got->h, got->da, got->db}, *refs[3] = {ref->h, ref->da, ref->db};
    for (int k = 0; k < 3; k++) {
        segment(p, refs[k], want);
        e = max_rel(outs[k], want, n, floor1(rms(refs[k], nT)));
        if (!(e <= worst)) worst = e;
    }
    free(want);
    if (p->use_hT) {
        e = max_rel(got->hT, ref->hT, s, floor1(rms(ref->hT, s)));
        if (!(e <= worst)) worst = e;
    }
    if (g_rank == 0) {
        e = max_rel(got->dh0, ref->dh0, s, floor1(rms(ref->dh0, s)));
    } else {
        e = 0;
        for (int64_t i = 0; i < s; i++)
            if (got->dh0[i] != 0) e = INFINITY; /* must be zeroed */
    }
    if (!(e <= worst)) worst = e;
    return worst;
}

/*
 * Tolerances. f64: the distributed scan does the one-process arithmetic in
 * another association (one summary merge per rank), so it agrees to double
 * rounding: 1e-12 of the tensor's scale, as test_scan's tree vs serial.
 * f32 against the f64 reference: the bounds of test_scan, whose argument
 * holds here: with a <= 1 - 1/M a state sums about M remembered terms, and
 * the merge adds one rounding per rank. a in (0.5, 1): 2e-5 (~300 eps);
 * long memory, a in (1 - 2^-10, 1): M * eps = 6e-5.
 */
#define TOL_F64 1e-12
#define TOL_F32 2e-5
#define TOL_F32_LONG 6e-5

static void check_scan(void)
{
    if (g_rank == 0) printf("\n== sequence-parallel scan vs the whole sequence in one process ==\n");
    const struct {
        int64_t B, H, maxr;
    } shapes[] = {{1, 1, 1}, {1, 1, 9}, {3, 17, 13}, {6, 5, 40}, {2, 64, 300}, {7, 3, 1000}};
    const unsigned optsets[] = {0,       O_H0 | O_HT, O_DHT, O_REV, O_LEN, O_H0 | O_HT | O_DHT | O_REV | O_LEN,
                                O_NO_DH | O_REV | O_H0, O_H0 | O_HT | O_DHT | O_LEN};
    int count = 0;
    for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
        for (size_t oi = 0; oi < sizeof optsets / sizeof optsets[0]; oi++) {
            if (shapes[si].maxr >= 300 && oi % 3 != 0 && oi != 5) continue; /* keeps it short */
            const int long_mem = oi == 7;
            problem p;
            problem_init(&p, shapes[si].B, shapes[si].H, shapes[si].maxr, optsets[oi],
                         long_mem ? 1.0 - 1.0 / 1024 : 0.5);
            const int64_t nT = p.B * p.T * p.H, s = p.B * p.H;
            const int64_t n = p.B * p.Tr[g_rank] * p.H;
            result ref, got;
            result_alloc(&ref, nT, s);
            result_alloc(&got, n, s);
            run_reference(&p, &ref);
            for (int k = 0; k < 2; k++) {
                const prnn_dtype dt = k == 0 ? PRNN_DTYPE_F64 : PRNN_DTYPE_F32;
                const prnn_scan_algo algo = (si + oi + k) % 2 ? PRNN_SCAN_SERIAL : PRNN_SCAN_TREE;
                const int64_t chunk = count++ % 3 == 0 ? 5 : 0;
                prnn_status st = run_dist(&p, dt, algo, chunk, &got);
                const double err = st == PRNN_OK ? compare_segment(&p, &got, &ref) : INFINITY;
                const double tol = k == 0 ? TOL_F64 : long_mem ? TOL_F32_LONG : TOL_F32;
                char o[64];
                dcheck(st == PRNN_OK && err <= tol, err,
                       "%s %-6s B=%lld T=%lld H=%lld (segments up to %lld) [%s]%s: tol %.0e%s%s",
                       k == 0 ? "f64" : "f32", prnn_scan_algo_name(algo), (long long)p.B,
                       (long long)p.T, (long long)p.H, (long long)shapes[si].maxr,
                       opts_name(&p, o, sizeof o), long_mem ? " long memory" : "", tol,
                       st == PRNN_OK ? "" : ": ", st == PRNN_OK ? "" : prnn_strerror(st));
            }
            result_free(&ref), result_free(&got);
            problem_free(&p);
        }
    }
}

/* ------------------------------------------------------------------------ */
/* 2. Finite differences through the distributed forward                     */

/* L = sum over the sequence of dh . h + (sum of the ranks' dhT) . hT, from
 * the distributed forward in double, summed over the ranks. */
static double dist_loss(const problem *p, double *a, double *b, double *h0)
{
    const int64_t Tr = p->Tr[g_rank], n = p->B * Tr * p->H, s = p->B * p->H;
    double *h = tu_malloc((size_t)n * 8), *hT = tu_malloc((size_t)s * 8);
    double *dh = tu_malloc((size_t)n * 8);
    segment(p, p->dh, dh);
    prnn_scan_desc d = prnn_scan_desc_make(p->B, Tr, p->H);
    d.dtype = PRNN_DTYPE_F64;
    d.reverse = p->reverse;
    d.lengths = p->lengths;
    TU_REQUIRE(prnn_dist_scan_forward(g_dist, &d, h, hT, a, b, g_rank == 0 ? h0 : NULL));
    double L = 0;
    for (int64_t i = 0; i < n; i++) L += dh[i] * h[i];
    for (int64_t i = 0; i < s; i++) L += p->dhT[g_rank * s + i] * hT[i];
    double total = 0;
    MPI_Allreduce(&L, &total, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
    free(h), free(hT), free(dh);
    return total;
}

/*
 * Central differences with step 1e-6: L is linear in b and h0 (only the
 * rounding error ~1e-16 |L| / 1e-6 ~ 1e-9 remains) and polynomial in a,
 * whose truncation error is ~1e-12 per unit curvature. Tolerance 1e-6
 * relative with a floor of 1 (the gradients here are O(1)).
 */
static void check_finite_differences(void)
{
    if (g_rank == 0) printf("\n== distributed backward vs central differences (f64) ==\n");
    for (int rev = 0; rev < 2; rev++) {
        for (int len = 0; len < 2; len++) {
            problem p;
            problem_init(&p, 3, 2, 7, O_H0 | O_HT | O_DHT | (rev ? O_REV : 0) | (len ? O_LEN : 0),
                         0.5);
            const int64_t Tr = p.Tr[g_rank], n = p.B * Tr * p.H, s = p.B * p.H;
            double *a = tu_malloc((size_t)n * 8), *b = tu_malloc((size_t)n * 8);
            double *dh = tu_malloc((size_t)n * 8), *h = tu_malloc((size_t)n * 8);
            double *da = tu_malloc((size_t)n * 8), *db = tu_malloc((size_t)n * 8);
            double *dh0 = tu_malloc((size_t)s * 8), *hT = tu_malloc((size_t)s * 8);
            double *h0 = tu_malloc((size_t)s * 8);
            segment(&p, p.a, a), segment(&p, p.b, b), segment(&p, p.dh, dh);
            memcpy(h0, p.h0, (size_t)s * 8);
            prnn_scan_desc d = prnn_scan_desc_make(p.B, Tr, p.H);
            d.dtype = PRNN_DTYPE_F64;
            d.reverse = p.reverse;
            d.lengths = p.lengths;
            TU_REQUIRE(prnn_dist_scan_forward(g_dist, &d, h, hT, a, b, h0));
            TU_REQUIRE(prnn_dist_scan_backward(g_dist, &d, da, db, dh0, a, h, h0, dh,
                                               p.dhT + g_rank * s));
            /* Every entry of a, b on every rank (they are few), and h0. */
            double worst = 0;
            int bad = 0;
            for (int owner = 0; owner < g_size; owner++) {
                const int64_t cnt = p.B * p.Tr[owner] * p.H;
                for (int which = 0; which < 3; which++) {
                    const int64_t m = which == 2 ? (owner == 0 ? s : 0) : cnt;
                    for (int64_t i = 0; i < m; i++) {
                        double *x = which == 0 ? a : which == 1 ? b : h0;
                        const int mine = g_rank == owner;
                        const double keep = mine ? x[i] : 0, eps = 1e-6;
                        if (mine) x[i] = keep + eps;
                        const double lp = dist_loss(&p, a, b, h0);
                        if (mine) x[i] = keep - eps;
                        const double lm = dist_loss(&p, a, b, h0);
                        if (mine) x[i] = keep;
                        if (!mine) continue;
                        const double fd = (lp - lm) / (2 * eps);
                        const double an = which == 0 ? da[i] : which == 1 ? db[i] : dh0[i];
                        const double e = fabs(an - fd) / (fabs(fd) + 1.0);
                        if (!(e <= 1e-6)) bad++;
                        if (!(e <= worst)) worst = e;
                    }
                }
            }
            char o[64];
            dcheck(bad == 0, worst, "d/da, d/db, d/dh0 B=%lld T=%lld H=%lld [%s]: tol 1e-6",
                   (long long)p.B, (long long)p.T, (long long)p.H, opts_name(&p, o, sizeof o));
            free(a), free(b), free(dh), free(h), free(da), free(db), free(dh0), free(hT), free(h0);
            problem_free(&p);
        }
    }
}

/* ------------------------------------------------------------------------ */
/* 3. Bad arguments                                                         */

/* Every rank gets an error (possibly another rank's), and all return. */
static void check_bad_arguments(void)
{
    if (g_rank == 0) printf("\n== bad arguments: every rank returns an error ==\n");
    const int64_t B = 2, T = 3, H = 4, n = B * T * H;
    float *x = tu_malloc((size_t)n * 4), *y = tu_malloc((size_t)n * 4);
    float *z = tu_malloc((size_t)n * 4), *w = tu_malloc((size_t)n * 4);
    tu_fill_f32(x, n, 0.5, 1), tu_fill_f32(y, n, -1, 1);
    prnn_scan_desc d = prnn_scan_desc_make(B, T, H);
    prnn_status s;

    if (g_size < 2) {
        printf("one process: nothing to disagree about, bad-argument checks skipped\n");
        free(x), free(y), free(z), free(w);
        return;
    }
    prnn_scan_desc dh = d;
    if (g_rank == g_size - 1) dh.H = H - 1; /* the last rank disagrees on H */
    s = prnn_dist_scan_forward(g_dist, &dh, z, NULL, x, y, NULL);
    dcheck(s == PRNN_ERR_INVALID_ARGUMENT, 0, "H differs on one rank -> %s", prnn_strerror(s));

    s = prnn_dist_scan_forward(g_dist, &d, g_rank == 0 ? NULL : z, NULL, x, y, NULL);
    dcheck(s == PRNN_ERR_NULL_POINTER, 0, "h NULL on rank 0 -> %s", prnn_strerror(s));

    prnn_scan_desc dr = d;
    if (g_rank == 1) dr.reverse = 1;
    s = prnn_dist_scan_backward(g_dist, &dr, z, w, NULL, x, y, NULL, NULL, NULL);
    dcheck(s == PRNN_ERR_INVALID_ARGUMENT, 0, "reverse differs (backward) -> %s", prnn_strerror(s));

    int64_t len[2] = {T * g_size + 1, 0}; /* past the global T */
    prnn_scan_desc dl = d;
    dl.lengths = len;
    s = prnn_dist_scan_forward(g_dist, &dl, z, NULL, x, y, NULL);
    dcheck(s == PRNN_ERR_INVALID_LENGTH, 0, "length past the global T -> %s", prnn_strerror(s));

    int64_t len2[2] = {g_rank == 0 ? 1 : 2, 0}; /* ranks disagree on the lengths */
    dl.lengths = len2;
    s = prnn_dist_scan_forward(g_dist, &dl, z, NULL, x, y, NULL);
    dcheck(s == PRNN_ERR_INVALID_ARGUMENT, 0, "lengths differ between ranks -> %s",
           prnn_strerror(s));

    prnn_scan_desc df = d;
    df.dtype = PRNN_DTYPE_BF16;
    s = prnn_dist_scan_forward(g_dist, &df, z, NULL, x, y, NULL);
    dcheck(s == PRNN_ERR_UNSUPPORTED, 0, "bf16 on the CPU -> %s", prnn_strerror(s));

    prnn_scan_desc dz = d;
    if (g_rank == 0) dz.T = 0;
    s = prnn_dist_scan_backward(g_dist, &dz, z, w, NULL, x, y, NULL, NULL, NULL);
    dcheck(s == PRNN_ERR_INVALID_SIZE, 0, "an empty segment on rank 0 -> %s", prnn_strerror(s));

    s = prnn_dist_allreduce_mean(g_dist, x, -1);
    dcheck(s == PRNN_ERR_INVALID_SIZE, 0, "all-reduce of -1 elements -> %s", prnn_strerror(s));
    s = prnn_dist_scan_forward(NULL, &d, z, NULL, x, y, NULL);
    dcheck(s == PRNN_ERR_NULL_POINTER, 0, "no distributed context -> %s", prnn_strerror(s));

    /* Still in step after all that. */
    s = prnn_dist_scan_forward(g_dist, &d, z, NULL, x, y, NULL);
    dcheck(s == PRNN_OK, 0, "a good call afterwards -> %s", prnn_strerror(s));
    free(x), free(y), free(z), free(w);
}

/* ------------------------------------------------------------------------ */
/* 4. The all-reduce mean                                                   */

static void check_allreduce(void)
{
    if (g_rank == 0) printf("\n== all-reduce mean ==\n");
    /* Integers below 2^20 from every rank: their sum is exact in float, so
     * the mean must be the correctly rounded quotient, bit for bit. The
     * largest size crosses the 2^24-element rounds. */
    const int64_t sizes[] = {1, 2, 1000003, ((int64_t)1 << 24) + 5};
    for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
        const int64_t n = sizes[k];
        float *x = tu_malloc((size_t)n * 4);
        const uint64_t seed = tu_next();
        /* Rank r's value at i is a hash of (seed, r, i), so each rank can
         * recompute everyone's. */
#define VAL(r, i) ((double)((int64_t)((seed ^ ((uint64_t)(r) << 40) ^ (uint64_t)(i)) * 0x9E3779B97F4A7C15ull >> 44) - (1 << 19)))
        for (int64_t i = 0; i < n; i++) x[i] = (float)VAL(g_rank, i);
        prnn_status st = prnn_dist_allreduce_mean(g_dist, x, n);
        int64_t wrong = 0;
        for (int64_t i = 0; i < n; i++) {
            double sum = 0;
            for (int r = 0; r < g_size; r++) sum += VAL(r, i);
            if (x[i] != (float)sum / (float)g_size) wrong++;
        }
#undef VAL
        const int same = same_everywhere(hash_bytes(x, (size_t)n * 4));
        dcheck(st == PRNN_OK && wrong == 0 && same, (double)wrong,
               "mean of %lld integer floats: exact (wrong entries counted), identical bits on "
               "every rank: %s", (long long)n, same ? "yes" : "no");
        free(x);
    }
    double v[3] = {1.0 + g_rank, 0.5, -2.0 * g_rank}, want0 = 0;
    for (int r = 0; r < g_size; r++) want0 += 1.0 + r;
    prnn_status st = prnn_dist_allreduce_sum_host(g_dist, v, 3);
    dcheck(st == PRNN_OK && v[0] == want0 && v[1] == 0.5 * g_size, fabs(v[0] - want0),
           "host sum of doubles: exact for small integers");
}

/* ------------------------------------------------------------------------ */
/* 5. Data parallel: split rows, averaged gradients                         */

/*
 * A batch of B rows split over the ranks as the trainer splits it
 * (contiguous, B*r/N .. B*(r+1)/N), targets partly ignored (-1) so the
 * ranks' scored tokens differ: each rank's loss is the mean over its own
 * scored tokens, its backward is scaled by N * (its tokens / all tokens),
 * and the average over the ranks is the whole batch's gradient.
 *
 * Tolerance: each gradient entry is a sum over the batch's tokens, summed
 * here in per-rank parts and then across ranks: float rounding of order
 * sqrt(B*T) * eps of the summands' scale ~ 1e-6 of the gradient's RMS.
 * 1e-5 of the RMS leaves room and is far below a wrong weighting (a
 * rank's share off by one token of 40 is 2.5%).
 */
static void check_data_parallel(void)
{
    if (g_rank == 0) printf("\n== data parallel: split batch, averaged gradient ==\n");
    const int64_t Bs[] = {g_size, 7, 2 * g_size + 1};
    for (size_t k = 0; k < sizeof Bs / sizeof Bs[0]; k++) {
        const int64_t B = Bs[k], T = 11;
        prnn_model_config mc = prnn_model_config_default();
        mc.dim = 16;
        mc.layers = 2;
        prnn_model *m = NULL;
        TU_REQUIRE(prnn_model_init(g_ctx, &m, &mc));
        const uint64_t seed = tu_next();
        TU_REQUIRE(prnn_model_init_params(m, seed));
        const int64_t P = prnn_model_param_count(m);
        int32_t *ids = tu_malloc((size_t)(B * T) * 4), *tg = tu_malloc((size_t)(B * T) * 4);
        int64_t total = 0;
        for (int64_t i = 0; i < B * T; i++) {
            ids[i] = (int32_t)tu_uniform(0, 256);
            tg[i] = tu_uniform(0, 1) < 0.3 ? -1 : (int32_t)tu_uniform(0, 256);
            total += tg[i] != -1;
        }
        float loss = 0, *ref = tu_malloc((size_t)P * 4);
        TU_REQUIRE(prnn_model_zero_grads(m));
        TU_REQUIRE(prnn_model_forward(m, B, T, &loss, ids, tg, 1, 0));
        TU_REQUIRE(prnn_model_backward(m, 1.0));
        memcpy(ref, prnn_model_grads(m), (size_t)P * 4);
        const double ref_loss = loss;

        const int64_t first = B * g_rank / g_size, rows = B * (g_rank + 1) / g_size - first;
        int64_t mine = 0;
        for (int64_t i = first * T; i < (first + rows) * T; i++) mine += tg[i] != -1;
        const double share = (double)mine / (double)total;
        TU_REQUIRE(prnn_model_zero_grads(m));
        TU_REQUIRE(prnn_model_forward(m, rows, T, &loss, ids + first * T, tg + first * T, 1, 0));
        TU_REQUIRE(prnn_model_backward(m, share * g_size));
        float *g = prnn_model_grads(m);
        prnn_status st = prnn_dist_allreduce_mean(g_dist, g, P);
        double gl = mine ? (double)loss * share : 0; /* a rank with no tokens adds nothing */
        if (st == PRNN_OK) st = prnn_dist_allreduce_sum_host(g_dist, &gl, 1);

        double *gd = tu_malloc((size_t)P * 8), *rd = tu_malloc((size_t)P * 8);
        for (int64_t i = 0; i < P; i++) gd[i] = g[i], rd[i] = ref[i];
        const double err = max_rel(gd, rd, P, rms(rd, P));
        const double lerr = fabs(gl - ref_loss) / fabs(ref_loss);
        const int same = same_everywhere(hash_bytes(g, (size_t)P * 4));
        dcheck(st == PRNN_OK && err <= 1e-5 && lerr <= 1e-6 && same, err,
               "B=%lld T=%lld, %lld parameters: gradient == whole batch's (tol 1e-5 of RMS), "
               "loss (tol 1e-6, rel err %.1e), identical on every rank: %s",
               (long long)B, (long long)T, (long long)P, lerr, same ? "yes" : "no");
        free(gd), free(rd), free(ids), free(tg), free(ref);
        prnn_model_free(m);
    }
}

/* ------------------------------------------------------------------------ */
/* 6. prnn train --dist against prnn train in one process                   */

static char g_dir[256];

/*
 * The same run, once in one process (rank 0) and once over every rank with
 * --dist. Tolerances: the only difference is the summation order of each
 * gradient entry (per-rank partial sums, then the average), ~1e-6 of a
 * gradient's scale; AdamW divides by the root of the second moment, so a
 * weight's update differs by about lr times that relative amount, except
 * for entries whose gradient is itself at rounding level. Losses: 1e-4
 * relative over 5 steps (observed ~1e-7); weights: DIST_TRAIN_WEIGHT_TOL
 * (lr / 10, test_dist_util.h) absolute with lr = 3e-3 over 5 steps, but for
 * a thousandth of the entries (those whose gradient sits at rounding level;
 * a wrong gradient moves most entries by ~lr).
 */
static void check_trainer(void)
{
    if (g_rank == 0) printf("\n== prnn train --dist vs one process ==\n");
    dist_tmpdir(g_dir, sizeof g_dir, "/tmp/prnn_test_dist_XXXXXX");
    if (!g_dir[0]) {
        dcheck(0, 0, "cannot make a temporary directory");
        return;
    }
    const struct {
        const char *what, *args;
    } runs[] = {
        {"builtin text, batch 6", "--batch 6 --seq-len 32"},
        {"selective copy (ignored targets), batch 5 (uneven split)",
         "--task selective-copy --batch 5 --seq-len 24"},
    };
    for (size_t k = 0; k < sizeof runs / sizeof runs[0]; k++) {
        char common[1024];
        dist_train_common(common, sizeof common, runs[k].args);
        dist_vs_one r;
        dist_run_vs_one(g_dir, k, common, "--dist", "dist", &r);
        dist_check_vs_one(runs[k].what, &r);
    }
}

/* The runs' directory goes when everything passed. */
static void remove_runs(void)
{
    MPI_Barrier(MPI_COMM_WORLD);
    if (g_rank == 0 && g_dir[0] && tu_failed == 0) {
        char cmd[300];
        snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_dir);
        if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", g_dir);
    }
}

/* ------------------------------------------------------------------------ */
/* 7. The bucketed average                                                  */

/* Rank r's value at i: a hash of (seed, r, i) in about +-2^9 with 24
 * significant bits and scattered exponents, so sums round and their order
 * shows in the bits. */
static float grad_value(uint64_t seed, int r, int64_t i)
{
    uint64_t z = seed ^ ((uint64_t)(r + 1) << 48) ^ (uint64_t)i;
    z = (z ^ (z >> 31)) * 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 29)) * 0xBF58476D1CE4E5B9ull;
    const double m = (double)(z >> 40) / (double)(1 << 24) - 0.5; /* 24 bits */
    return (float)ldexp(m, (int)((z >> 8) % 20) - 9);
}

/* Feeds [0, n) to g as slices: from the end backwards (as a backward
 * finishes layers) with lengths drawn in [1, maxlen], or in a scrambled
 * order of fixed pieces. The same slices on every rank (shared seed). */
static prnn_status feed(prnn_dist_grad *g, int64_t n, int64_t maxlen, int scrambled)
{
    prnn_status s = PRNN_OK;
    if (!scrambled) {
        for (int64_t hi = n; hi > 0 && s == PRNN_OK;) {
            int64_t c = 1 + (int64_t)tu_uniform(0, (double)maxlen);
            if (c > hi) c = hi;
            s = prnn_dist_grad_ready(g, hi - c, c);
            hi -= c;
        }
        return s;
    }
    const int64_t pieces = (n + maxlen - 1) / maxlen;
    int64_t *order = tu_malloc((size_t)pieces * sizeof(int64_t));
    for (int64_t k = 0; k < pieces; k++) order[k] = k;
    for (int64_t k = pieces - 1; k > 0; k--) { /* Fisher-Yates */
        const int64_t j = (int64_t)tu_uniform(0, (double)(k + 1)), t = order[k];
        order[k] = order[j], order[j] = t;
    }
    for (int64_t k = 0; k < pieces && s == PRNN_OK; k++) {
        const int64_t lo = order[k] * maxlen, hi = lo + maxlen < n ? lo + maxlen : n;
        s = prnn_dist_grad_ready(g, lo, hi - lo);
    }
    free(order);
    return s;
}

/* Entries of x and y (n) whose bits differ. */
static int64_t bits_differ(const float *x, const float *y, int64_t n)
{
    int64_t d = 0;
    for (int64_t i = 0; i < n; i++) d += memcmp(&x[i], &y[i], 4) != 0;
    return d;
}

static void check_bucketed(void)
{
    if (g_rank == 0) printf("\n== bucketed gradient average vs the one-pass mean ==\n");
    const struct {
        int64_t n, bucket, maxlen;
        int scrambled;
    } cases[] = {
        {1, 0, 1, 0},             /* one element, fewer than the ranks */
        {2, 1, 1, 0},             /* element-sized buckets */
        {1000, 64, 37, 0},        /* many small buckets, slices merged */
        {1000, 64, 100, 1},       /* slices out of order: buckets break */
        {300007, 0, 50000, 0},    /* default buckets, large slices */
        {((int64_t)1 << 24) + 3, (int64_t)1 << 24, (int64_t)1 << 25, 0}, /* past the cap */
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        const int64_t n = cases[k].n;
        const uint64_t seed = tu_next();
        float *ref = tu_malloc((size_t)n * 4), *got = tu_malloc((size_t)n * 4);
        for (int64_t i = 0; i < n; i++) ref[i] = got[i] = grad_value(seed, g_rank, i);
        prnn_status st = prnn_dist_allreduce_mean(g_dist, ref, n);
        for (int mode = 0; mode < 2; mode++) {
            for (int64_t i = 0; i < n; i++) got[i] = grad_value(seed, g_rank, i);
            prnn_dist_grad *g = NULL;
            prnn_status s = prnn_dist_grad_init(&g, g_dist, got, n,
                                                mode ? PRNN_DIST_GRAD_SCATTER : PRNN_DIST_GRAD_MEAN,
                                                cases[k].bucket);
            /* Two steps through the same object: its buckets are reused. */
            for (int step = 0; step < 2 && s == PRNN_OK; step++) {
                if (step)
                    for (int64_t i = 0; i < n; i++) got[i] = grad_value(seed, g_rank, i);
                s = prnn_dist_grad_begin(g);
                if (s == PRNN_OK) s = feed(g, n, cases[k].maxlen, cases[k].scrambled);
                const prnn_status f = prnn_dist_grad_finish(g);
                if (s == PRNN_OK) s = f;
            }
            int64_t lo = 0, hi = n;
            if (mode) prnn_dist_shard(g_dist, n, -1, &lo, &hi);
            const int64_t wrong = bits_differ(got + lo, ref + lo, hi - lo);
            const int same = mode || same_everywhere(hash_bytes(got, (size_t)n * 4));
            dcheck(st == PRNN_OK && s == PRNN_OK && wrong == 0 && same, (double)wrong,
                   "%s, n=%lld, bucket %lld, slices up to %lld%s, %d buckets: bits of the one-pass "
                   "mean (differing entries counted)%s",
                   mode ? "scatter (each rank its shard)" : "mean", (long long)n,
                   (long long)cases[k].bucket, (long long)cases[k].maxlen,
                   cases[k].scrambled ? " out of order" : "", prnn_dist_grad_buckets(g),
                   mode ? "" : ", identical on every rank");
            prnn_dist_grad_free(g);
        }
        free(ref), free(got);
    }

    /* Shards cover the buffer in rank order; the gathers. */
    const int64_t sizes[] = {1, (int64_t)g_size + 1, 1000003};
    for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
        const int64_t n = sizes[k];
        int64_t covered = 0, ok = 1;
        for (int r = 0; r < g_size; r++) {
            int64_t lo, hi;
            prnn_dist_shard(g_dist, n, r, &lo, &hi);
            ok &= lo == covered && hi >= lo;
            covered = hi;
        }
        ok &= covered == n;
        const uint64_t seed = tu_next();
        float *x = tu_malloc((size_t)n * 4), *h = tu_malloc((size_t)n * 4);
        int64_t mlo, mhi;
        prnn_dist_shard(g_dist, n, -1, &mlo, &mhi);
        for (int64_t i = 0; i < n; i++) /* mine where I own it, junk elsewhere */
            x[i] = h[i] = i >= mlo && i < mhi ? grad_value(seed, 0, i) : -1.f;
        prnn_status s = prnn_dist_allgather_shards(g_dist, x, n);
        if (s == PRNN_OK) s = prnn_dist_gather_shards_host(g_dist, h, n, g_size - 1);
        int64_t wrong = 0;
        for (int64_t i = 0; i < n; i++) {
            wrong += x[i] != grad_value(seed, 0, i);
            if (g_rank == g_size - 1) wrong += h[i] != grad_value(seed, 0, i);
        }
        dcheck(ok && s == PRNN_OK && wrong == 0, (double)wrong,
               "n=%lld: shards tile the buffer in rank order; all-gather of the shards and "
               "gather to the last rank exact", (long long)n);
        free(x), free(h);
    }

    /* Misuse: every rank makes the same mistake, so none waits. */
    float buf[8] = {0};
    prnn_dist_grad *g = NULL;
    prnn_status s = prnn_dist_grad_init(&g, g_dist, buf, 8, PRNN_DIST_GRAD_MEAN, 0);
    const prnn_status early = prnn_dist_grad_ready(g, 0, 8);
    prnn_status out = PRNN_OK, missing = PRNN_OK, twice = PRNN_OK;
    if (s == PRNN_OK) s = prnn_dist_grad_begin(g);
    if (s == PRNN_OK) twice = prnn_dist_grad_begin(g);
    if (s == PRNN_OK) out = prnn_dist_grad_ready(g, 4, 5);
    if (s == PRNN_OK) s = prnn_dist_grad_ready(g, 0, 4);
    if (s == PRNN_OK) missing = prnn_dist_grad_finish(g);
    dcheck(s == PRNN_OK && early == PRNN_ERR_INVALID_ARGUMENT &&
               twice == PRNN_ERR_INVALID_ARGUMENT && out == PRNN_ERR_INVALID_SIZE &&
               missing == PRNN_ERR_INVALID_ARGUMENT,
           0, "misuse: ready before begin -> %s, begin twice -> %s, slice past the end -> %s, "
              "finish with elements never ready -> %s", prnn_strerror(early),
           prnn_strerror(twice), prnn_strerror(out), prnn_strerror(missing));
    prnn_dist_grad_free(g);
}

/* The model's gradient hook drives the average during the backward: the
 * same bits as averaging after it. */
static void check_model_hook(void)
{
    if (g_rank == 0) printf("\n== model gradient hook: averaged during the backward ==\n");
    const prnn_norm_type norms[] = {PRNN_NORM_RMS, PRNN_NORM_LAYER};
    for (int k = 0; k < 2; k++) {
        const int64_t B = 3, T = 9;
        prnn_model_config mc = prnn_model_config_default();
        mc.dim = 24;
        mc.layers = 3;
        mc.norm = norms[k];
        prnn_model *m = NULL;
        TU_REQUIRE(prnn_model_init(g_ctx, &m, &mc));
        TU_REQUIRE(prnn_model_init_params(m, tu_next()));
        const int64_t P = prnn_model_param_count(m);
        int32_t *ids = tu_malloc((size_t)(B * T) * 4), *tg = tu_malloc((size_t)(B * T) * 4);
        for (int i = 0; i < g_size; i++) /* rank r takes the r-th draw */
            for (int64_t j = 0; j < B * T; j++) {
                const int32_t a = (int32_t)tu_uniform(0, 256), b = (int32_t)tu_uniform(0, 256);
                if (i == g_rank) ids[j] = a, tg[j] = b;
            }
        float loss = 0, *ref = tu_malloc((size_t)P * 4);
        TU_REQUIRE(prnn_model_zero_grads(m));
        TU_REQUIRE(prnn_model_forward(m, B, T, &loss, ids, tg, 1, 0));
        TU_REQUIRE(prnn_model_backward(m, 1.0));
        TU_REQUIRE(prnn_dist_allreduce_mean(g_dist, prnn_model_grads(m), P));
        memcpy(ref, prnn_model_grads(m), (size_t)P * 4);

        prnn_dist_grad *g = NULL;
        TU_REQUIRE(prnn_dist_grad_init(&g, g_dist, prnn_model_grads(m), P, PRNN_DIST_GRAD_MEAN,
                                       P / 5));
        TU_REQUIRE(prnn_model_set_grad_hook(m, prnn_dist_grad_hook, g));
        TU_REQUIRE(prnn_model_zero_grads(m));
        TU_REQUIRE(prnn_model_forward(m, B, T, &loss, ids, tg, 1, 0));
        prnn_status s = prnn_dist_grad_begin(g);
        if (s == PRNN_OK) s = prnn_model_backward(m, 1.0);
        const prnn_status f = prnn_dist_grad_finish(g); /* also checks every slice came */
        if (s == PRNN_OK) s = f;
        const int64_t wrong = bits_differ(prnn_model_grads(m), ref, P);
        const int same = same_everywhere(hash_bytes(prnn_model_grads(m), (size_t)P * 4));
        dcheck(s == PRNN_OK && wrong == 0 && same, (double)wrong,
               "%s, 3 layers, %lld parameters, %d buckets: gradients averaged during the "
               "backward == after it, bit for bit; identical on every rank",
               k ? "layernorm" : "rmsnorm", (long long)P, prnn_dist_grad_buckets(g));
        TU_REQUIRE(prnn_model_set_grad_hook(m, NULL, NULL));
        prnn_dist_grad_free(g);
        free(ids), free(tg), free(ref);
        prnn_model_free(m);
    }
}

/* ------------------------------------------------------------------------ */
/* 8. prnn train --dist: overlap, ZeRO-1, checkpoints across both           */

/*
 * Tolerances. Overlapped and one-pass averages give the same bits on the
 * CPU (rank-order sums), so those runs must agree exactly. ZeRO-1 averages
 * the same bits too, but its global norm sums the shards' sums of squares
 * (in double, over the ranks) instead of one fixed-order pass: the clipping
 * factor (clip 0.5 here, so it acts) can differ by fp32 rounding, ~1e-7
 * relative; as in check_trainer, dist_runs_agree on the weights after 6 steps
 * at lr 3e-3 and 1e-4 relative on the losses leave room, while a wrong
 * shard, decay or moment shows as ~1e-3. Resumed runs add nothing: state
 * and weights are saved in full precision.
 */
static void check_trainer_zero1(void)
{
    if (g_rank == 0) printf("\n== prnn train --dist: overlap, --zero1, resumes across them ==\n");
    char common[1024], args[1400];
    snprintf(common, sizeof common,
             "--task selective-copy --batch 7 --seq-len 24 --steps 6 --warmup 1 --lr 0.003 "
             "--grad-clip 0.5 --hidden 16 --layers 2 --threads 1 --eval-interval 0 "
             "--eval-batches 1 --ckpt-interval 0 --seed %llu",
             (unsigned long long)(tu_next() % 1000000));
    const struct {
        const char *tag, *opts;
        int dist;
    } runs[] = {
        {"ref", "--dist", 1},
        {"noov", "--dist --no-overlap", 1},
        {"z1", "--dist --zero1", 1},
        {"z1noov", "--dist --zero1 --no-overlap", 1},
    };
    int rc[4];
    for (int k = 0; k < 4; k++) {
        snprintf(args, sizeof args, "%s %s --out %s/%s", common, runs[k].opts, g_dir, runs[k].tag);
        rc[k] = dist_train_run(g_dir, args, runs[k].tag, runs[k].dist);
    }
    char words[256];
    tc_runs_diff d = dist_compare_runs(g_dir, "ref", "noov");
    dcheck(rc[0] == 0 && rc[1] == 0 && (g_rank != 0 || (d.nl == 6 && d.err_loss == 0 && d.err_w == 0)),
           d.err_w,
           "--no-overlap == overlapped: exit %d and %d, 6 losses and the weights bit for bit "
           "(loss rel err %.1e)", rc[0], rc[1], d.err_loss);
    d = dist_compare_runs(g_dir, "ref", "z1");
    dist_runs_words(words, sizeof words, &d);
    dcheck(rc[2] == 0 && dist_runs_agree(&d, 6), d.err_w, "--zero1 == without: exit %d, 6 steps: %s",
           rc[2], words);
    d = dist_compare_runs(g_dir, "z1", "z1noov");
    dcheck(rc[3] == 0 && (g_rank != 0 || (d.nl == 6 && d.err_loss == 0 && d.err_w == 0)), d.err_w,
           "--zero1 --no-overlap == --zero1: exit %d, bit for bit (loss rel err %.1e)", rc[3],
           d.err_loss);

    /* Interrupted after 3 steps, resumed by the other kind of run; the last
     * one resumes a ZeRO-1 checkpoint of all ranks in one process. */
    const struct {
        const char *tag, *first, *second, *what;
        int dist2;
    } resumes[] = {
        {"r_z1_plain", "--dist --zero1", "--dist", "--zero1 checkpoint resumed without", 1},
        {"r_plain_z1", "--dist", "--dist --zero1", "plain checkpoint resumed with --zero1", 1},
        {"r_z1_one", "--dist --zero1", "", "--zero1 checkpoint resumed in one process", 0},
    };
    for (size_t k = 0; k < sizeof resumes / sizeof resumes[0]; k++) {
        char tag[64];
        snprintf(args, sizeof args, "%s %s --stop-after 3 --out %s/%s", common, resumes[k].first,
                 g_dir, resumes[k].tag);
        snprintf(tag, sizeof tag, "%s_a", resumes[k].tag);
        const int r1 = dist_train_run(g_dir, args, tag, 1);
        snprintf(args, sizeof args, "%s %s --resume --out %s/%s", common, resumes[k].second, g_dir,
                 resumes[k].tag);
        snprintf(tag, sizeof tag, "%s_b", resumes[k].tag);
        const int r2 = r1 == 0 ? dist_train_run(g_dir, args, tag, resumes[k].dist2) : -1;
        d = dist_compare_runs(g_dir, "ref", resumes[k].tag);
        dist_runs_words(words, sizeof words, &d);
        dcheck(r1 == 0 && r2 == 0 && dist_runs_agree(&d, 6), d.err_w,
               "%s: exit %d and %d, 6 steps == the uninterrupted run's: %s", resumes[k].what, r1,
               r2, words);
    }

    /* Options that need --dist: a message and exit 2. */
    const char *bad[] = {"--zero1", "--no-overlap"};
    for (int k = 0; k < 2; k++) {
        snprintf(args, sizeof args, "%s %s --out %s/bad%d", common, bad[k], g_dir, k);
        char tag[32];
        snprintf(tag, sizeof tag, "bad%d", k);
        const int r = dist_train_run(g_dir, args, tag, 0);
        int said = 0;
        if (g_rank == 0) {
            char path[512];
            long n = 0;
            snprintf(path, sizeof path, "%s/%s.rank0.txt", g_dir, tag);
            char *txt = tc_slurp(path, &n);
            char want[64];
            snprintf(want, sizeof want, "%s needs --dist", bad[k]);
            said = txt && strstr(txt, want);
            free(txt);
        }
        MPI_Bcast(&said, 1, MPI_INT, 0, MPI_COMM_WORLD);
        dcheck(r == 2 && said, 0, "%s without --dist: exit %d (want 2), message names --dist",
               bad[k], r);
    }
}

/* ------------------------------------------------------------------------ */

int main(void)
{
    prnn_dist_info info;
    prnn_status s = prnn_dist_mpi_start(&info);
    if (s != PRNN_OK) {
        fprintf(stderr, "cannot start MPI: %s\n", prnn_strerror(s));
        return 2;
    }
    g_rank = info.rank, g_size = info.size;
    prnn_ctx_config cfg = prnn_ctx_config_default();
    cfg.num_threads = 1;
    TU_REQUIRE(prnn_ctx_init(&g_ctx, &cfg));
    g_cpu = g_ctx;
    TU_REQUIRE(prnn_dist_init(&g_dist, g_ctx, NULL));

    uint64_t seed = tu_seed_from_env();
    MPI_Bcast(&seed, 1, MPI_UINT64_T, 0, MPI_COMM_WORLD);
    tu_seed(seed);
    if (g_rank == 0)
        printf("%d processes (%s), seed %llu (PRNN_TEST_SEED=%llu repeats this run)\n", g_size,
               prnn_dist_backend(g_dist), (unsigned long long)seed, (unsigned long long)seed);

    check_scan();
    check_finite_differences();
    check_bad_arguments();
    check_allreduce();
    check_data_parallel();
    check_bucketed();
    check_model_hook();
    check_trainer();
    if (g_dir[0]) check_trainer_zero1();
    remove_runs();

    prnn_dist_free(g_dist);
    prnn_ctx_free(g_ctx);
    return dist_suite_finish();
}
