/*
 * test_scan.c - the CPU test suite of the scan.
 *
 *   1. every algorithm, forward and backward, in float against the serial
 *      loop in double, over many shapes and every option;
 *   2. every backward against central finite differences in double;
 *   3. state passing between consecutive chunks of a stream (truncated BPTT);
 *   4. bad input: every invalid argument gives its status and no crash.
 *
 * Size letters: B batch rows, T time steps, H channels.
 * Inputs are fresh random numbers each run; the seed is printed, and
 * PRNN_TEST_SEED=<seed> repeats a run.
 */
#include "test_util.h"

static prnn_ctx *g_ctx[3]; /* CPU contexts with 1, 2 and 3 threads */

/* ------------------------------------------------------------------------ */
/* A problem: inputs of one shape with its options                          */

typedef struct {
    int64_t B, T, H;
    int use_h0, use_hT, use_dh, use_dhT, reverse, varlen;
    int64_t *lengths;
    double *a, *b, *h0, *dh, *dhT; /* inputs in double */
} problem;

static const char *opts_name(const problem *p, char *buf, size_t n)
{
    snprintf(buf, n, "%s%s%s%s%s%s", p->use_h0 ? "h0," : "", p->use_hT ? "hT," : "",
             p->use_dh ? "dh," : "", p->use_dhT ? "dhT," : "", p->reverse ? "rev," : "",
             p->varlen ? "len," : "");
    size_t k = strlen(buf);
    if (k == 0) snprintf(buf, n, "plain");
    else buf[k - 1] = 0;
    return buf;
}

/* Decays: 0 = (0.5, 1), gates that forget within tens of steps; 1 = (-1, 1),
 * signs; 2 = (1 - 2^-10, 1), long memory, so that a wrong carry from far
 * back (a chunk or window several levels up the tree) cannot fade away
 * before the output shows it. */
static void problem_init(problem *p, int64_t B, int64_t T, int64_t H, unsigned opts, int decay)
{
    memset(p, 0, sizeof *p);
    p->B = B, p->T = T, p->H = H;
    p->use_h0 = opts & 1, p->use_hT = (opts >> 1) & 1, p->use_dhT = (opts >> 2) & 1;
    p->reverse = (opts >> 3) & 1, p->varlen = (opts >> 4) & 1;
    p->use_dh = !((opts >> 5) & 1);
    const int64_t n = B * T * H;
    p->a = tu_malloc((size_t)n * 8);
    p->b = tu_malloc((size_t)n * 8);
    p->dh = tu_malloc((size_t)n * 8);
    p->h0 = tu_malloc((size_t)(B * H) * 8);
    p->dhT = tu_malloc((size_t)(B * H) * 8);
    tu_fill_f64(p->a, n, decay == 1 ? -1.0 : decay == 2 ? 1.0 - 1.0 / 1024 : 0.5, 1.0);
    tu_fill_f64(p->b, n, -1.0, 1.0);
    tu_fill_f64(p->dh, n, -1.0, 1.0);
    tu_fill_f64(p->h0, B * H, -1.0, 1.0);
    tu_fill_f64(p->dhT, B * H, -1.0, 1.0);
    /* Inputs exactly representable in float, so that the float runs and the
     * double reference see the same numbers and differ by arithmetic only
     * (rounding a in (1 - 2^-10, 1) would otherwise bias long products). */
    double *all[] = {p->a, p->b, p->dh, p->h0, p->dhT};
    const int64_t len[] = {n, n, n, B * H, B * H};
    for (int k = 0; k < 5; k++)
        for (int64_t i = 0; i < len[k]; i++) all[k][i] = (double)(float)all[k][i];
    if (p->varlen) {
        p->lengths = tu_malloc((size_t)B * 8);
        /* Always include the edge lengths 0, T and 1 when there are rows. */
        for (int64_t r = 0; r < B; r++) {
            int64_t L = (int64_t)tu_uniform(0, (double)T + 1);
            if (r == 0) L = T;
            if (r == 1) L = 0;
            if (r == 2) L = 1;
            p->lengths[r] = L > T ? T : L;
        }
    }
}

static void problem_free(problem *p)
{
    free(p->a), free(p->b), free(p->dh), free(p->h0), free(p->dhT), free(p->lengths);
}

static prnn_scan_desc problem_desc(const problem *p, prnn_dtype dt, prnn_scan_algo algo, int64_t chunk)
{
    prnn_scan_desc d = prnn_scan_desc_make(p->B, p->T, p->H);
    d.dtype = dt;
    d.algo = algo;
    d.chunk = chunk;
    d.reverse = p->reverse;
    d.lengths = p->lengths;
    return d;
}

/* Outputs of one forward + backward run, in double. */
typedef struct {
    double *h, *hT, *da, *db, *dh0;
} result;

static void result_alloc(result *r, const problem *p)
{
    const int64_t n = p->B * p->T * p->H, s = p->B * p->H;
    r->h = tu_malloc((size_t)n * 8), r->da = tu_malloc((size_t)n * 8);
    r->db = tu_malloc((size_t)n * 8);
    r->hT = tu_malloc((size_t)s * 8), r->dh0 = tu_malloc((size_t)s * 8);
}

static void result_free(result *r) { free(r->h), free(r->hT), free(r->da), free(r->db), free(r->dh0); }

/* Runs forward + backward in double. */
static void run_f64(prnn_ctx *ctx, const problem *p, prnn_scan_algo algo, int64_t chunk, result *r)
{
    prnn_scan_desc d = problem_desc(p, PRNN_DTYPE_F64, algo, chunk);
    TU_REQUIRE(prnn_scan_forward(ctx, &d, r->h, p->use_hT ? r->hT : NULL, p->a, p->b,
                                 p->use_h0 ? p->h0 : NULL));
    TU_REQUIRE(prnn_scan_backward(ctx, &d, r->da, r->db, r->dh0, p->a, r->h,
                                  p->use_h0 ? p->h0 : NULL, p->use_dh ? p->dh : NULL,
                                  p->use_dhT ? p->dhT : NULL));
}

/* Runs forward + backward in float (inputs rounded), results widened. The
 * outputs are poisoned with NaN first so that an unwritten element fails. */
static void run_f32(prnn_ctx *ctx, const problem *p, prnn_scan_algo algo, int64_t chunk, result *r)
{
    const int64_t n = p->B * p->T * p->H, s = p->B * p->H;
    float *buf = tu_malloc((size_t)(7 * n + 5 * s) * 4);
    float *a = buf, *b = a + n, *dh = b + n, *h = dh + n, *da = h + n, *db = da + n;
    float *h0 = db + n + n, *dhT = h0 + s, *hT = dhT + s, *dh0 = hT + s;
    for (int64_t i = 0; i < n; i++) a[i] = (float)p->a[i], b[i] = (float)p->b[i], dh[i] = (float)p->dh[i];
    for (int64_t i = 0; i < s; i++) h0[i] = (float)p->h0[i], dhT[i] = (float)p->dhT[i];
    for (int64_t i = 0; i < n; i++) h[i] = da[i] = db[i] = NAN;
    for (int64_t i = 0; i < s; i++) hT[i] = dh0[i] = NAN;

    prnn_scan_desc d = problem_desc(p, PRNN_DTYPE_F32, algo, chunk);
    TU_REQUIRE(prnn_scan_forward(ctx, &d, h, p->use_hT ? hT : NULL, a, b, p->use_h0 ? h0 : NULL));
    TU_REQUIRE(prnn_scan_backward(ctx, &d, da, db, dh0, a, h, p->use_h0 ? h0 : NULL,
                                  p->use_dh ? dh : NULL, p->use_dhT ? dhT : NULL));
    for (int64_t i = 0; i < n; i++) r->h[i] = h[i], r->da[i] = da[i], r->db[i] = db[i];
    for (int64_t i = 0; i < s; i++) r->hT[i] = hT[i], r->dh0[i] = dh0[i];
    free(buf);
}

/* Root mean square: the scale below which an entry's error is judged
 * against the tensor's typical size rather than its own. */
static double rms(const double *x, int64_t n)
{
    double s = 0;
    for (int64_t i = 0; i < n; i++) s += x[i] * x[i];
    return n ? sqrt(s / (double)n) + 1e-30 : 1.0;
}

static int compare_all(const problem *p, const result *x, const result *ref, double tol,
                       const char *label)
{
    const int64_t n = p->B * p->T * p->H, s = p->B * p->H;
    /* A state is judged against the scale of the sequence it ends (hT: h;
     * dh0: the gradient db it is built from), not its own: with B*H = 1 it
     * is one number, which cancellation can make far smaller than the sums
     * whose rounding it carries (dh0 = 0.026 against |g| ~ 10 at long
     * memory: 6.7e-6 off, 1.3e-4 of itself). */
    const double rms_h = rms(ref->h, n), rms_db = rms(ref->db, n);
    struct {
        const char *name;
        const double *got, *want;
        int64_t n;
        double scale; /* at least the output's own RMS */
    } outs[] = {{"h", x->h, ref->h, n, 0},      {"hT", x->hT, ref->hT, p->use_hT ? s : 0, rms_h},
                {"da", x->da, ref->da, n, 0},   {"db", x->db, ref->db, n, 0},
                {"dh0", x->dh0, ref->dh0, s, rms_db}};
    double worst = 0;
    int64_t bad = 0;
    for (size_t k = 0; k < sizeof outs / sizeof outs[0]; k++) {
        if (!outs[k].n) continue;
        const double own = rms(outs[k].want, outs[k].n);
        tu_err e = tu_compare_f64(outs[k].got, outs[k].want, outs[k].n,
                                  outs[k].scale > own ? outs[k].scale : own, tol, outs[k].name);
        if (e.max_err > worst || e.bad) worst = e.max_err > worst ? e.max_err : worst;
        bad += e.bad;
    }
    tu_check(bad == 0, "%s: max rel err %.2e (tol %.1e)", label, worst, tol);
    return bad == 0;
}

/* ------------------------------------------------------------------------ */
/* 1. Algorithms against the serial loop in double                          */

/*
 * Tolerance for float against double: the scan's error grows with the
 * number of roundings a state has been through, which the decays bound:
 * with a <= 1 - 1/M, a state remembers about M steps, and summing M terms
 * in float has error ~ sqrt(M) * eps (random rounding) against the scale
 * of the tensor. The tree merges in another order but performs the same
 * number of dependent operations up to log2(T/K) merges. Inputs here have
 * a in (0.5, 1) (M up to a few hundred steps in practice, 1/(1-max a) over
 * the draw) and T up to 65537; 2e-5 is ~300 eps, well above the ~1e-6
 * observed and far below a wrong answer (which shows as O(1)).
 */
#define TOL_F32_VS_F64 2e-5
/* Long memory (a in (1 - 2^-10, 1)): a state sums ~M = 1024 remembered
 * terms, whose worst-case float error is ~M * eps = 6e-5 of the scale (the
 * observed ~1e-5 is the random-rounding sqrt(M)-like growth over longer
 * effective sums). */
#define TOL_F32_LONG_MEMORY 6e-5

/* On the CPU, CHUNKED, STRIPED and FIXED are the tree: the same bits. */
static void check_cpu_aliases(void)
{
    printf("\n== CHUNKED, STRIPED and FIXED on the CPU are TREE ==\n");
    const struct {
        int64_t B, T, H;
        unsigned opts;
    } cases[] = {{3, 1000, 17, 1 | 2 | 4 | 8 | 16}, {2, 33, 600, 0}, {4, 777, 5, 32 | 8}};
    const prnn_scan_algo algos[] = {PRNN_SCAN_CHUNKED, PRNN_SCAN_STRIPED, PRNN_SCAN_FIXED};
    for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++) {
        problem p;
        problem_init(&p, cases[ci].B, cases[ci].T, cases[ci].H, cases[ci].opts, 0);
        const int64_t n = p.B * p.T * p.H, st = p.B * p.H;
        result ref, got;
        result_alloc(&ref, &p), result_alloc(&got, &p);
        run_f32(g_ctx[1], &p, PRNN_SCAN_TREE, 5, &ref);
        for (size_t ai = 0; ai < sizeof algos / sizeof algos[0]; ai++) {
            run_f32(g_ctx[1], &p, algos[ai], 5, &got);
            const int same = !memcmp(got.h, ref.h, (size_t)n * 8) && !memcmp(got.da, ref.da, (size_t)n * 8) &&
                             !memcmp(got.db, ref.db, (size_t)n * 8) && !memcmp(got.hT, ref.hT, (size_t)st * 8) &&
                             !memcmp(got.dh0, ref.dh0, (size_t)st * 8);
            char o[64];
            tu_check(same, "f32 %-7s B=%lld T=%lld H=%lld [%s]: every output bit-identical to the tree's",
                     prnn_scan_algo_name(algos[ai]), (long long)p.B, (long long)p.T, (long long)p.H,
                     opts_name(&p, o, sizeof o));
        }
        result_free(&ref), result_free(&got);
        problem_free(&p);
    }
}

static void check_algorithms(void)
{
    printf("\n== algorithms vs the serial loop in double ==\n");
    const int64_t Ts[] = {1, 2, 31, 32, 33, 1000, 65537};
    const struct {
        int64_t B, H;
    } BH[] = {{1, 1}, {3, 17}, {2, 600}, {1, 255}, {13, 1}};
    const prnn_scan_algo algos[] = {PRNN_SCAN_SERIAL, PRNN_SCAN_TREE, PRNN_SCAN_AUTO};
    int count = 0;
    for (size_t ti = 0; ti < sizeof Ts / sizeof Ts[0]; ti++) {
        for (size_t bi = 0; bi < sizeof BH / sizeof BH[0]; bi++) {
            const int64_t B = BH[bi].B, H = BH[bi].H, T = Ts[ti];
            if (B * T * H > 8000000) continue; /* keeps the suite short */
            /* Every option alone, all together, and none. */
            const unsigned optsets[] = {0, 1 | 2, 4, 8, 16, 1 | 2 | 4 | 8 | 16, 32 | 8};
            for (size_t oi = 0; oi < sizeof optsets / sizeof optsets[0]; oi++) {
                if (T > 1000 && oi % 2 == 1 && oi != 5) continue;
                problem p;
                const int decay = (oi % 2) ? 2 : 0;
                problem_init(&p, B, T, H, optsets[oi], decay);
                result ref, got;
                result_alloc(&ref, &p), result_alloc(&got, &p);
                run_f64(g_ctx[0], &p, PRNN_SCAN_SERIAL, 0, &ref);
                for (size_t ai = 0; ai < sizeof algos / sizeof algos[0]; ai++) {
                    const int64_t chunk = (count++ % 3 == 0) ? 5 : 0;
                    prnn_ctx *ctx = g_ctx[(count + (int)ai) % 3];
                    run_f32(ctx, &p, algos[ai], chunk, &got);
                    char o[64], label[256];
                    snprintf(label, sizeof label, "f32 %-7s B=%lld T=%lld H=%lld chunk=%lld threads=%d [%s]%s",
                             prnn_scan_algo_name(algos[ai]), (long long)B, (long long)T, (long long)H,
                             (long long)chunk, prnn_ctx_num_threads(ctx), opts_name(&p, o, sizeof o),
                             decay == 2 ? " long memory" : "");
                    compare_all(&p, &got, &ref, decay == 2 ? TOL_F32_LONG_MEMORY : TOL_F32_VS_F64, label);
                }
                /* The tree in double agrees with the serial loop in double
                 * to double rounding. */
                run_f64(g_ctx[1], &p, PRNN_SCAN_TREE, 7, &got);
                char o[64], label[256];
                snprintf(label, sizeof label, "f64 tree    B=%lld T=%lld H=%lld chunk=7 [%s]",
                         (long long)B, (long long)T, (long long)H, opts_name(&p, o, sizeof o));
                compare_all(&p, &got, &ref, 1e-12, label);
                result_free(&ref), result_free(&got);
                problem_free(&p);
            }
        }
    }
}

/* Outputs of 64 MiB and more take the streaming-store paths; one shape per
 * path (a tree over T, and one pass per lane), sizes multiple of 8. */
static void check_streaming(void)
{
    printf("\n== large outputs (streaming stores) ==\n");
    const int64_t shapes[][3] = {{1, 65536 + 8, 256}, {16, 4099, 264}};
    for (size_t si = 0; si < 2; si++) {
        for (unsigned opts = 0; opts <= (1 | 2 | 4 | 8); opts += 1 | 2 | 4 | 8) {
            problem p;
            problem_init(&p, shapes[si][0], shapes[si][1], shapes[si][2], opts, 0);
            result ref, got;
            result_alloc(&ref, &p), result_alloc(&got, &p);
            run_f64(g_ctx[0], &p, PRNN_SCAN_SERIAL, 0, &ref);
            run_f32(g_ctx[1], &p, PRNN_SCAN_TREE, 0, &got);
            char o[64], label[256];
            snprintf(label, sizeof label, "f32 tree B=%lld T=%lld H=%lld threads=2 [%s]",
                     (long long)p.B, (long long)p.T, (long long)p.H, opts_name(&p, o, sizeof o));
            compare_all(&p, &got, &ref, TOL_F32_VS_F64, label);
            result_free(&ref), result_free(&got);
            problem_free(&p);
        }
    }
}

/* Chunks of one step make the tree within a window large enough that its
 * levels are merged in parallel (the usual 32-step chunks keep it small). */
static void check_large_tree(void)
{
    printf("\n== level-parallel tree (chunk = 1) ==\n");
    for (int ti = 1; ti <= 2; ti++) {
        problem p;
        problem_init(&p, 1, 65537, 255, 1 | 2 | 4 | (ti == 2 ? 8 : 0), 2);
        result ref, got;
        result_alloc(&ref, &p), result_alloc(&got, &p);
        run_f64(g_ctx[0], &p, PRNN_SCAN_SERIAL, 0, &ref);
        run_f32(g_ctx[ti], &p, PRNN_SCAN_TREE, 1, &got);
        char o[64], label[256];
        snprintf(label, sizeof label, "f32 tree B=1 T=65537 H=255 chunk=1 threads=%d [%s] long memory",
                 prnn_ctx_num_threads(g_ctx[ti]), opts_name(&p, o, sizeof o));
        compare_all(&p, &got, &ref, TOL_F32_LONG_MEMORY, label);
        result_free(&ref), result_free(&got);
        problem_free(&p);
    }
}

/* ------------------------------------------------------------------------ */
/* 2. Backward against central finite differences in double                 */

/* The loss: L = sum dh * h + sum dhT * hT, whose gradient the backward
 * computes given dL/dh = dh and dL/dhT = dhT. */
static double loss(prnn_ctx *ctx, const problem *p, prnn_scan_algo algo, int64_t chunk,
                   double *hbuf, double *hTbuf)
{
    prnn_scan_desc d = problem_desc(p, PRNN_DTYPE_F64, algo, chunk);
    TU_REQUIRE(prnn_scan_forward(ctx, &d, hbuf, hTbuf, p->a, p->b, p->use_h0 ? p->h0 : NULL));
    double L = 0;
    for (int64_t i = 0; i < p->B * p->T * p->H; i++) L += (p->use_dh ? p->dh[i] : 0) * hbuf[i];
    if (p->use_dhT)
        for (int64_t i = 0; i < p->B * p->H; i++) L += p->dhT[i] * hTbuf[i];
    return L;
}

/*
 * Central differences with step 1e-6: L is linear in b and h0 (exact up to
 * rounding) and a polynomial in a whose third derivative is O(T) here, so
 * the truncation error is ~1e-12 * T and the rounding error ~1e-16 * |L| /
 * 1e-6 ~ 1e-9. Tolerance 1e-6 relative (floor: the gradient's RMS).
 */
static void check_fd(void)
{
    printf("\n== backward vs central finite differences (double) ==\n");
    const int64_t shapes[][3] = {{1, 1, 1}, {2, 7, 3}, {3, 33, 2}, {2, 70, 3}, {9, 20, 1}};
    const unsigned optsets[] = {0, 1 | 2 | 4, 8 | 1 | 4, 16 | 1 | 2 | 4, 16 | 8 | 1 | 2 | 4, 32 | 4};
    const prnn_scan_algo algos[] = {PRNN_SCAN_SERIAL, PRNN_SCAN_TREE};
    for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
        for (size_t oi = 0; oi < sizeof optsets / sizeof optsets[0]; oi++) {
            for (size_t ai = 0; ai < 2; ai++) {
                problem p;
                problem_init(&p, shapes[si][0], shapes[si][1], shapes[si][2], optsets[oi], 1);
                const int64_t n = p.B * p.T * p.H, s = p.B * p.H, chunk = 2;
                result r;
                result_alloc(&r, &p);
                prnn_ctx *ctx = g_ctx[1];
                prnn_scan_desc d = problem_desc(&p, PRNN_DTYPE_F64, algos[ai], chunk);
                TU_REQUIRE(prnn_scan_forward(ctx, &d, r.h, r.hT, p.a, p.b, p.use_h0 ? p.h0 : NULL));
                TU_REQUIRE(prnn_scan_backward(ctx, &d, r.da, r.db, r.dh0, p.a, r.h,
                                              p.use_h0 ? p.h0 : NULL, p.use_dh ? p.dh : NULL,
                                              p.use_dhT ? p.dhT : NULL));
                double *hb = tu_malloc((size_t)n * 8), *hTb = tu_malloc((size_t)s * 8);
                double *fd = tu_malloc((size_t)(2 * n + s) * 8), *an = tu_malloc((size_t)(2 * n + s) * 8);
                const double eps = 1e-6;
                struct {
                    double *x, *grad;
                    int64_t n;
                } ins[] = {{p.a, r.da, n}, {p.b, r.db, n}, {p.h0, r.dh0, p.use_h0 ? s : 0}};
                int64_t m = 0;
                for (size_t k = 0; k < 3; k++) {
                    for (int64_t i = 0; i < ins[k].n; i++, m++) {
                        double keep = ins[k].x[i];
                        ins[k].x[i] = keep + eps;
                        double lp = loss(ctx, &p, algos[ai], chunk, hb, hTb);
                        ins[k].x[i] = keep - eps;
                        double lm = loss(ctx, &p, algos[ai], chunk, hb, hTb);
                        ins[k].x[i] = keep;
                        fd[m] = (lp - lm) / (2 * eps);
                        an[m] = ins[k].grad[i];
                    }
                }
                char o[64], label[256];
                snprintf(label, sizeof label, "fd %-6s B=%lld T=%lld H=%lld [%s]: %lld partials",
                         prnn_scan_algo_name(algos[ai]), (long long)p.B, (long long)p.T, (long long)p.H,
                         opts_name(&p, o, sizeof o), (long long)m);
                tu_err e = tu_compare_f64(an, fd, m, rms(fd, m), 1e-6, "grad");
                tu_check(e.bad == 0, "%s: max rel err %.2e (tol 1e-6)", label, e.max_err);
                free(hb), free(hTb), free(fd), free(an);
                result_free(&r);
                problem_free(&p);
            }
        }
    }
}

/* ------------------------------------------------------------------------ */
/* 3. A stream in two chunks equals the whole (truncated BPTT state passing) */

static void check_state_passing(void)
{
    printf("\n== state passing between chunks of a stream ==\n");
    for (int rev = 0; rev <= 1; rev++) {
        enum { B = 2, T = 300, H = 5, T1 = 123, T2 = T - T1 };
        problem whole;
        problem_init(&whole, B, T, H, 1 | 2 | 4 | (rev ? 8 : 0), 0);
        result rw;
        result_alloc(&rw, &whole);
        run_f64(g_ctx[1], &whole, PRNN_SCAN_TREE, 0, &rw);
        /* Split every [B, T, H] input into [B, T1, H] and [B, T2, H]. The
         * scan's direction decides which part runs first. */
        double *part[2][3];
        const int64_t Tp[2] = {T1, T2};
        for (int k = 0; k < 2; k++) {
            for (int q = 0; q < 3; q++) part[k][q] = tu_malloc((size_t)(B * Tp[k] * H) * 8);
            for (int64_t r = 0; r < B; r++)
                for (int64_t t = 0; t < Tp[k]; t++) {
                    int64_t src = (r * T + t + (k ? T1 : 0)) * H, dst = (r * Tp[k] + t) * H;
                    memcpy(part[k][0] + dst, whole.a + src, (size_t)H * 8);
                    memcpy(part[k][1] + dst, whole.b + src, (size_t)H * 8);
                    memcpy(part[k][2] + dst, whole.dh + src, (size_t)H * 8);
                }
        }
        const int first = rev ? 1 : 0, second = 1 - first;
        double *h[2], *da[2], *db[2], hT1[B * H], hT2[B * H], dmid[B * H], dh0[B * H];
        for (int k = 0; k < 2; k++) {
            h[k] = tu_malloc((size_t)(B * Tp[k] * H) * 8);
            da[k] = tu_malloc((size_t)(B * Tp[k] * H) * 8);
            db[k] = tu_malloc((size_t)(B * Tp[k] * H) * 8);
        }
        prnn_scan_desc d1 = prnn_scan_desc_make(B, Tp[first], H), d2 = prnn_scan_desc_make(B, Tp[second], H);
        d1.dtype = d2.dtype = PRNN_DTYPE_F64;
        d1.reverse = d2.reverse = rev;
        TU_REQUIRE(prnn_scan_forward(g_ctx[1], &d1, h[first], hT1, part[first][0], part[first][1], whole.h0));
        TU_REQUIRE(prnn_scan_forward(g_ctx[1], &d2, h[second], hT2, part[second][0], part[second][1], hT1));
        /* Backward runs the stream's chunks in the opposite order. */
        TU_REQUIRE(prnn_scan_backward(g_ctx[1], &d2, da[second], db[second], dmid, part[second][0],
                                      h[second], hT1, part[second][2], whole.dhT));
        TU_REQUIRE(prnn_scan_backward(g_ctx[1], &d1, da[first], db[first], dh0, part[first][0],
                                      h[first], whole.h0, part[first][2], dmid));
        double err = 0;
        for (int64_t r = 0; r < B; r++)
            for (int64_t t = 0; t < T; t++)
                for (int64_t j = 0; j < H; j++) {
                    int k = t < T1 ? 0 : 1;
                    int64_t tt = k ? t - T1 : t, i = (r * T + t) * H + j, ip = (r * Tp[k] + tt) * H + j;
                    err = fmax(err, fabs(h[k][ip] - rw.h[i]));
                    err = fmax(err, fabs(da[k][ip] - rw.da[i]));
                    err = fmax(err, fabs(db[k][ip] - rw.db[i]));
                }
        for (int64_t i = 0; i < B * H; i++) {
            err = fmax(err, fabs(hT2[i] - rw.hT[i]));
            err = fmax(err, fabs(dh0[i] - rw.dh0[i]));
        }
        tu_check(err < 1e-11, "two chunks == whole, %s: max abs err %.2e (tol 1e-11, double rounding)",
                 rev ? "reverse" : "forward", err);
        for (int k = 0; k < 2; k++) {
            for (int q = 0; q < 3; q++) free(part[k][q]);
            free(h[k]), free(da[k]), free(db[k]);
        }
        result_free(&rw);
        problem_free(&whole);
    }
}

/* ------------------------------------------------------------------------ */
/* 4. Bad input                                                             */

#define EXPECT_STATUS(call, want)                                                              \
    do {                                                                                       \
        prnn_status got_ = (call);                                                             \
        tu_check(got_ == (want), "%-62s -> %s", #call, prnn_strerror(got_));                   \
    } while (0)

static void check_bad_input(void)
{
    printf("\n== bad input ==\n");
    prnn_ctx *ctx = g_ctx[1];
    enum { B = 2, T = 5, H = 3, N = B * T * H };
    float a[N], b[N], h[N], h2[N], da[N], db[N], st[B * H];
    tu_fill_f32(a, N, 0.5, 1), tu_fill_f32(b, N, -1, 1);
    for (int i = 0; i < N; i++) h2[i] = -7.0f;
    prnn_scan_desc d = prnn_scan_desc_make(B, T, H);

    EXPECT_STATUS(prnn_scan_forward(NULL, &d, h, NULL, a, b, NULL), PRNN_ERR_NULL_POINTER);
    tu_check(!strcmp(prnn_scan_last_kernel(NULL), "") && !strcmp(prnn_scan_last_kernel(ctx), ""),
             "prnn_scan_last_kernel: \"\" for NULL and on a CPU context");
    EXPECT_STATUS(prnn_scan_forward(ctx, NULL, h, NULL, a, b, NULL), PRNN_ERR_NULL_POINTER);
    EXPECT_STATUS(prnn_scan_forward(ctx, &d, NULL, NULL, a, b, NULL), PRNN_ERR_NULL_POINTER);
    EXPECT_STATUS(prnn_scan_forward(ctx, &d, h, NULL, NULL, b, NULL), PRNN_ERR_NULL_POINTER);
    EXPECT_STATUS(prnn_scan_forward(ctx, &d, h, NULL, a, NULL, NULL), PRNN_ERR_NULL_POINTER);
    EXPECT_STATUS(prnn_scan_backward(ctx, &d, NULL, db, NULL, a, h, NULL, NULL, NULL), PRNN_ERR_NULL_POINTER);
    EXPECT_STATUS(prnn_scan_backward(ctx, &d, da, NULL, NULL, a, h, NULL, NULL, NULL), PRNN_ERR_NULL_POINTER);
    EXPECT_STATUS(prnn_scan_backward(ctx, &d, da, db, NULL, NULL, h, NULL, NULL, NULL), PRNN_ERR_NULL_POINTER);
    EXPECT_STATUS(prnn_scan_backward(ctx, &d, da, db, NULL, a, NULL, NULL, NULL, NULL), PRNN_ERR_NULL_POINTER);

    prnn_scan_desc bad = d;
    bad.B = 0;
    EXPECT_STATUS(prnn_scan_forward(ctx, &bad, h, NULL, a, b, NULL), PRNN_ERR_INVALID_SIZE);
    bad = d, bad.T = -1;
    EXPECT_STATUS(prnn_scan_forward(ctx, &bad, h, NULL, a, b, NULL), PRNN_ERR_INVALID_SIZE);
    bad = d, bad.H = 0;
    EXPECT_STATUS(prnn_scan_backward(ctx, &bad, da, db, NULL, a, h, NULL, NULL, NULL), PRNN_ERR_INVALID_SIZE);
    bad = d, bad.B = (int64_t)1 << 22, bad.T = (int64_t)1 << 22, bad.H = (int64_t)1 << 22;
    EXPECT_STATUS(prnn_scan_forward(ctx, &bad, h, NULL, a, b, NULL), PRNN_ERR_SIZE_OVERFLOW);
    bad = d, bad.B = INT64_MAX, bad.T = 2, bad.H = 1;
    EXPECT_STATUS(prnn_scan_forward(ctx, &bad, h, NULL, a, b, NULL), PRNN_ERR_SIZE_OVERFLOW);
    bad = d, bad.B = (int64_t)1 << 40, bad.T = (int64_t)1 << 20, bad.H = 1; /* bytes overflow */
    EXPECT_STATUS(prnn_scan_forward(ctx, &bad, h, NULL, a, b, NULL), PRNN_ERR_SIZE_OVERFLOW);
    bad = d, bad.dtype = (prnn_dtype)99;
    EXPECT_STATUS(prnn_scan_forward(ctx, &bad, h, NULL, a, b, NULL), PRNN_ERR_INVALID_ARGUMENT);
    bad = d, bad.algo = (prnn_scan_algo)-1;
    EXPECT_STATUS(prnn_scan_forward(ctx, &bad, h, NULL, a, b, NULL), PRNN_ERR_INVALID_ARGUMENT);
    bad = d, bad.reverse = 2;
    EXPECT_STATUS(prnn_scan_forward(ctx, &bad, h, NULL, a, b, NULL), PRNN_ERR_INVALID_ARGUMENT);
    bad = d, bad.chunk = -1;
    EXPECT_STATUS(prnn_scan_forward(ctx, &bad, h, NULL, a, b, NULL), PRNN_ERR_INVALID_ARGUMENT);
    bad = d, bad.dtype = PRNN_DTYPE_BF16;
    EXPECT_STATUS(prnn_scan_forward(ctx, &bad, h, NULL, a, b, NULL), PRNN_ERR_UNSUPPORTED);

    int64_t lens[B] = {3, T + 1};
    bad = d, bad.lengths = lens;
    EXPECT_STATUS(prnn_scan_forward(ctx, &bad, h, NULL, a, b, NULL), PRNN_ERR_INVALID_LENGTH);
    lens[1] = -1;
    EXPECT_STATUS(prnn_scan_backward(ctx, &bad, da, db, NULL, a, h, NULL, NULL, NULL), PRNN_ERR_INVALID_LENGTH);

    /* Aliasing: in place, partial overlap, and outputs on each other. */
    float big[2 * N];
    memcpy(big, a, sizeof a);
    EXPECT_STATUS(prnn_scan_forward(ctx, &d, a, NULL, a, b, NULL), PRNN_ERR_ALIASING);
    EXPECT_STATUS(prnn_scan_forward(ctx, &d, big + N / 2, NULL, big, b, NULL), PRNN_ERR_ALIASING);
    EXPECT_STATUS(prnn_scan_forward(ctx, &d, h, h + 3, a, b, NULL), PRNN_ERR_ALIASING);
    EXPECT_STATUS(prnn_scan_forward(ctx, &d, h, st, a, b, st), PRNN_ERR_ALIASING);
    EXPECT_STATUS(prnn_scan_backward(ctx, &d, da, da, NULL, a, h, NULL, NULL, NULL), PRNN_ERR_ALIASING);
    EXPECT_STATUS(prnn_scan_backward(ctx, &d, da, db, NULL, a, da, NULL, NULL, NULL), PRNN_ERR_ALIASING);
    EXPECT_STATUS(prnn_scan_backward(ctx, &d, da, db, NULL, a, h, NULL, db, NULL), PRNN_ERR_ALIASING);

    /* A failed call leaves its outputs untouched. */
    bad = d, bad.lengths = lens;
    prnn_status s = prnn_scan_forward(ctx, &bad, h2, NULL, a, b, NULL);
    int untouched = 1;
    for (int i = 0; i < N; i++) untouched &= h2[i] == -7.0f;
    tu_check(s != PRNN_OK && untouched, "a rejected call writes nothing");

    /* Contexts. */
    prnn_ctx *c2 = (prnn_ctx *)&c2;
    prnn_ctx_config cfg = prnn_ctx_config_default();
    EXPECT_STATUS(prnn_ctx_init(NULL, NULL), PRNN_ERR_NULL_POINTER);
    cfg.num_threads = -2;
    EXPECT_STATUS(prnn_ctx_init(&c2, &cfg), PRNN_ERR_INVALID_ARGUMENT);
    tu_check(c2 == NULL, "a failed prnn_ctx_init sets *ctx to NULL");
    cfg = prnn_ctx_config_default(), cfg.device = (prnn_device)7;
    EXPECT_STATUS(prnn_ctx_init(&c2, &cfg), PRNN_ERR_INVALID_ARGUMENT);
    if (!prnn_cuda_available()) {
        cfg = prnn_ctx_config_default(), cfg.device = PRNN_DEVICE_CUDA;
        EXPECT_STATUS(prnn_ctx_init(&c2, &cfg), PRNN_ERR_NO_DEVICE);
    }
    prnn_ctx_free(NULL); /* a no-op */
    EXPECT_STATUS(prnn_ctx_synchronize(NULL), PRNN_ERR_NULL_POINTER);

    /* Every status has its own message. */
    int distinct = 1;
    for (int i = 0; i < PRNN_STATUS_COUNT_; i++)
        for (int j = i + 1; j < PRNN_STATUS_COUNT_; j++)
            distinct &= strcmp(prnn_strerror((prnn_status)i), prnn_strerror((prnn_status)j)) != 0;
    tu_check(distinct && prnn_strerror((prnn_status)1234) != NULL, "prnn_strerror: distinct messages, unknown codes handled");
}

int main(void)
{
    uint64_t seed = tu_seed_from_env();
    tu_seed(seed);
    printf("prnn %s CPU tests, seed %llu (PRNN_TEST_SEED=%llu repeats this run)\n", prnn_version(),
           (unsigned long long)seed, (unsigned long long)seed);
    for (int i = 0; i < 3; i++) {
        prnn_ctx_config cfg = prnn_ctx_config_default();
        cfg.num_threads = i + 1;
        TU_REQUIRE(prnn_ctx_init(&g_ctx[i], &cfg));
    }
    check_bad_input();
    check_fd();
    check_state_passing();
    check_algorithms();
    check_cpu_aliases();
    check_streaming();
    check_large_tree();
    for (int i = 0; i < 3; i++) prnn_ctx_free(g_ctx[i]);
    return tu_finish();
}
