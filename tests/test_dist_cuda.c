/*
 * test_dist_cuda.c - the GPU suite of the distributed pieces (NCCL), one
 * GPU per process, run under mpirun (scripts/test.sh --gpu: -np 2):
 *
 *   1. the sequence-parallel scan on CUDA contexts, fp32, bf16 and fp16
 *      storage, chunked and tree local scans, every option, odd and
 *      one-step segments and segments long enough for many summary
 *      chunks, against the one-process CPU scan in double of the whole
 *      sequence on the same (storage-rounded) inputs;
 *   2. the all-reduce mean on device buffers: exact, identical bits on
 *      every rank;
 *   3. data parallel: the model's gradient on the GPU from rows split over
 *      the ranks equals the whole batch's on one GPU;
 *   4. the bucketed average on the side stream (prnn_dist_grad), mean and
 *      scatter (ZeRO-1), fed by hand and by the model's gradient hook
 *      during the backward, against prnn_dist_allreduce_mean; the shard
 *      all-gather.
 *
 * Process r takes the GPU of its rank on the node. Without CUDA, or with
 * fewer GPUs than processes on a node, it skips and passes. Every rank
 * draws the same problem from the seed rank 0 prints (PRNN_TEST_SEED
 * repeats a run).
 *
 * Size letters: B batch rows, T global time steps, Tr a rank's steps,
 * H channels.
 */
#define _POSIX_C_SOURCE 200809L /* mkdtemp (test_dist_util.h) */
#include <cuda_runtime.h>

#include "test_dist_util.h"

#include "check.h"
#include "prnn_dist.h"
#include "prnn_model.h"

static prnn_ctx *g_gpu;
static prnn_dist *g_dist;

/* ------------------------------------------------------------------------ */
/* Device buffers in a storage type, from and to host doubles               */

/* A device tensor of n elements in dt holding x (rounded to dt). */
static void *to_device(const double *x, int64_t n, prnn_dtype dt)
{
    float *f = tu_malloc((size_t)n * 4);
    for (int64_t i = 0; i < n; i++) f[i] = (float)x[i];
    void *f32 = NULL, *d = NULL;
    TU_REQUIRE(prnn_mem_alloc(g_gpu, &f32, (size_t)(n ? n : 1) * 4));
    TU_REQUIRE(prnn_mem_alloc(g_gpu, &d, (size_t)(n ? n : 1) * prnn_dtype_size(dt)));
    TU_REQUIRE(prnn_mem_upload(g_gpu, f32, f, (size_t)n * 4));
    if (dt == PRNN_DTYPE_F32) TU_REQUIRE(prnn_mem_copy(g_gpu, d, f32, (size_t)n * 4));
    else TU_REQUIRE(prnn_mem_convert(g_gpu, d, dt, f32, PRNN_DTYPE_F32, n));
    TU_REQUIRE(prnn_ctx_synchronize(g_gpu));
    prnn_mem_free(g_gpu, f32);
    free(f);
    return d;
}

static void from_device(double *x, const void *d, int64_t n, prnn_dtype dt)
{
    float *f = tu_malloc((size_t)n * 4);
    void *f32 = NULL;
    TU_REQUIRE(prnn_mem_alloc(g_gpu, &f32, (size_t)(n ? n : 1) * 4));
    if (dt == PRNN_DTYPE_F32) TU_REQUIRE(prnn_mem_copy(g_gpu, f32, d, (size_t)n * 4));
    else TU_REQUIRE(prnn_mem_convert(g_gpu, f32, PRNN_DTYPE_F32, d, dt, n));
    TU_REQUIRE(prnn_mem_download(g_gpu, f, f32, (size_t)n * 4));
    for (int64_t i = 0; i < n; i++) x[i] = f[i];
    prnn_mem_free(g_gpu, f32);
    free(f);
}

/* x <- x as stored in dt (the inputs the GPU will see, for the oracle). */
static void round_to(double *x, int64_t n, prnn_dtype dt)
{
    void *d = to_device(x, n, dt);
    from_device(x, d, n, dt);
    prnn_mem_free(g_gpu, d);
}

/* NaN in every storage type, so an output left unwritten shows. */
static void *poisoned(int64_t n, size_t es)
{
    void *d = NULL;
    TU_REQUIRE(prnn_mem_alloc(g_gpu, &d, (size_t)(n ? n : 1) * es));
    CUDA_CHECK(cudaMemset(d, 0xff, (size_t)n * es));
    CUDA_CHECK(cudaDeviceSynchronize()); /* the context's stream does not wait for the legacy one */
    return d;
}

/* ------------------------------------------------------------------------ */
/* 1. The sequence-parallel scan                                            */

static prnn_status run_dist(const problem *p, prnn_dtype dt, prnn_scan_algo algo, result *got)
{
    const int64_t Tr = p->Tr[g_rank], n = p->B * Tr * p->H, s = p->B * p->H;
    const size_t es = prnn_dtype_size(dt);
    double *seg = tu_malloc((size_t)n * 8);
    segment(p, p->a, seg);
    void *a = to_device(seg, n, dt);
    segment(p, p->b, seg);
    void *b = to_device(seg, n, dt);
    segment(p, p->dh, seg);
    void *dh = to_device(seg, n, dt);
    void *h0 = to_device(g_rank == 0 ? p->h0 : p->junk_h0, s, PRNN_DTYPE_F32);
    void *dhT = to_device(p->dhT + g_rank * s, s, PRNN_DTYPE_F32);
    void *h = poisoned(n, es), *da = poisoned(n, es), *db = poisoned(n, es);
    void *hT = poisoned(s, 4), *dh0 = poisoned(s, 4);
    prnn_scan_desc d = prnn_scan_desc_make(p->B, Tr, p->H);
    d.dtype = dt;
    d.algo = algo;
    d.reverse = p->reverse;
    d.lengths = p->lengths;
    prnn_status st = prnn_dist_scan_forward(g_dist, &d, h, p->use_hT ? hT : NULL, a, b,
                                            p->use_h0 ? h0 : NULL);
    if (st == PRNN_OK)
        st = prnn_dist_scan_backward(g_dist, &d, da, db, dh0, a, h, p->use_h0 ? h0 : NULL,
                                     p->use_dh ? dh : NULL, p->use_dhT ? dhT : NULL);
    if (st == PRNN_OK) st = prnn_ctx_synchronize(g_gpu);
    from_device(got->h, h, n, dt);
    from_device(got->da, da, n, dt);
    from_device(got->db, db, n, dt);
    from_device(got->hT, hT, s, PRNN_DTYPE_F32);
    from_device(got->dh0, dh0, s, PRNN_DTYPE_F32);
    void *all[] = {a, b, dh, h0, dhT, h, da, db, hT, dh0};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) prnn_mem_free(g_gpu, all[i]);
    free(seg);
    return st;
}

/* This rank's worst relative errors: [0] the stored outputs h, da, db,
 * [1] the fp32 states hT, dh0 (zeros on ranks > 0). Floors: each global
 * tensor's RMS. */
static void compare_segment(const problem *p, const result *got, const result *ref, double *err)
{
    const int64_t Tr = p->Tr[g_rank], n = p->B * Tr * p->H, s = p->B * p->H;
    const int64_t nT = p->B * p->T * p->H;
    double *want = tu_malloc((size_t)n * 8);
    const double *outs[3] = {got->h, got->da, got->db}, *refs[3] = {ref->h, ref->da, ref->db};
    err[0] = err[1] = 0;
    for (int k = 0; k < 3; k++) {
        segment(p, refs[k], want);
        const double e = max_rel(outs[k], want, n, rms(refs[k], nT));
        if (!(e <= err[0])) err[0] = e;
    }
    free(want);
    double e = p->use_hT ? max_rel(got->hT, ref->hT, s, rms(ref->hT, s)) : 0;
    if (!(e <= err[1])) err[1] = e;
    if (g_rank == 0) {
        e = max_rel(got->dh0, ref->dh0, s, rms(ref->dh0, s));
    } else {
        e = 0;
        for (int64_t i = 0; i < s; i++)
            if (got->dh0[i] != 0) e = INFINITY;
    }
    if (!(e <= err[1])) err[1] = e;
}

/*
 * Tolerances, relative to each tensor's RMS. fp32 against the double
 * oracle: the argument of test_dist.c (a state sums about M = 1/(1 - a)
 * remembered terms in fp32, plus one merge rounding per rank): 2e-5 for
 * a in (0.5, 1), 6e-5 for long memory. The fp32 states (hT, dh0) of every
 * storage type: the same, since the inputs are exactly what the oracle
 * sees. Outputs stored as bf16 / fp16: one rounding of the fp32 result
 * (unit roundoff 2^-8 / 2^-11) and, for da = g * h_prev, the rounding of
 * the stored h_prev it reads: twice the unit roundoff, plus the fp32 part.
 */
static double tol_stored(prnn_dtype dt, int long_mem)
{
    const double f32 = long_mem ? 6e-5 : 2e-5;
    if (dt == PRNN_DTYPE_BF16) return 2.0 / 256 + f32;
    if (dt == PRNN_DTYPE_F16) return 2.0 / 2048 + f32;
    return f32;
}

static const char *dtype_name(prnn_dtype dt)
{
    return dt == PRNN_DTYPE_F32 ? "f32" : dt == PRNN_DTYPE_BF16 ? "bf16" : "f16";
}

static void check_scan(void)
{
    if (g_rank == 0) printf("\n== sequence-parallel scan (NCCL) vs the whole sequence in one process ==\n");
    const struct {
        int64_t B, H, maxr;
    } shapes[] = {{1, 1, 1}, {3, 17, 13}, {6, 5, 40}, {2, 64, 300}, {1, 256, 20000}, {4, 1000, 3000}};
    const unsigned optsets[] = {0, O_H0 | O_HT, O_DHT | O_NO_DH, O_REV | O_HT, O_LEN | O_HT,
                                O_H0 | O_HT | O_DHT | O_REV | O_LEN, O_H0 | O_HT | O_DHT | O_LEN};
    const prnn_dtype dts[] = {PRNN_DTYPE_F32, PRNN_DTYPE_BF16, PRNN_DTYPE_F16};
    for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
        for (size_t oi = 0; oi < sizeof optsets / sizeof optsets[0]; oi++) {
            const int big = shapes[si].B * shapes[si].H * shapes[si].maxr > 1000000;
            if (big && oi != 0 && oi != 5) continue; /* keeps it short */
            const int long_mem = oi == 6;
            for (size_t di = 0; di < sizeof dts / sizeof dts[0]; di++) {
                const prnn_dtype dt = dts[di];
                problem p;
                problem_init(&p, shapes[si].B, shapes[si].H, shapes[si].maxr, optsets[oi],
                             long_mem ? 1.0 - 1.0 / 1024 : 0.5);
                const int64_t nT = p.B * p.T * p.H, s = p.B * p.H;
                const int64_t n = p.B * p.Tr[g_rank] * p.H;
                round_to(p.a, nT, dt), round_to(p.b, nT, dt), round_to(p.dh, nT, dt);
                result ref, got;
                result_alloc(&ref, nT, s);
                result_alloc(&got, n, s);
                run_reference(&p, &ref);
                const prnn_scan_algo algo = (si + oi + di) % 2 ? PRNN_SCAN_TREE : PRNN_SCAN_AUTO;
                prnn_status st = run_dist(&p, dt, algo, &got);
                double err[2] = {INFINITY, INFINITY};
                if (st == PRNN_OK) compare_segment(&p, &got, &ref, err);
                const double tol = tol_stored(dt, long_mem), tol_s = tol_stored(PRNN_DTYPE_F32, long_mem);
                char o[64];
                dcheck(st == PRNN_OK && err[0] <= tol && err[1] <= tol_s, err[0] > err[1] ? err[0] : err[1],
                       "%-4s %-7s B=%lld T=%lld H=%lld (segments up to %lld) [%s]%s: outputs tol "
                       "%.1e, states tol %.0e%s%s",
                       dtype_name(dt), algo == PRNN_SCAN_TREE ? "tree" : "chunked", (long long)p.B,
                       (long long)p.T, (long long)p.H, (long long)shapes[si].maxr,
                       opts_name(&p, o, sizeof o), long_mem ? " long memory" : "", tol, tol_s,
                       st == PRNN_OK ? "" : ": ", st == PRNN_OK ? "" : prnn_strerror(st));
                result_free(&ref), result_free(&got);
                problem_free(&p);
            }
        }
    }
}

/* ------------------------------------------------------------------------ */
/* 2. The all-reduce mean on device buffers                                 */

static void check_allreduce(void)
{
    if (g_rank == 0) printf("\n== all-reduce mean (NCCL) ==\n");
    /* Integers below 2^20 from every rank: the float sum is exact, so the
     * mean must be the correctly rounded quotient, bit for bit. */
    const int64_t sizes[] = {1, 1000003, ((int64_t)1 << 26) + 7};
    for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
        const int64_t n = sizes[k];
        float *x = tu_malloc((size_t)n * 4);
        const uint64_t seed = tu_next();
#define VAL(r, i) ((double)((int64_t)((seed ^ ((uint64_t)(r) << 40) ^ (uint64_t)(i)) * 0x9E3779B97F4A7C15ull >> 44) - (1 << 19)))
        for (int64_t i = 0; i < n; i++) x[i] = (float)VAL(g_rank, i);
        float *d = NULL;
        TU_REQUIRE(prnn_mem_alloc(g_gpu, (void **)&d, (size_t)n * 4));
        TU_REQUIRE(prnn_mem_upload(g_gpu, d, x, (size_t)n * 4));
        prnn_status st = prnn_dist_allreduce_mean(g_dist, d, n);
        if (st == PRNN_OK) st = prnn_mem_download(g_gpu, x, d, (size_t)n * 4);
        int64_t wrong = 0;
        for (int64_t i = 0; i < n; i++) {
            double sum = 0;
            for (int r = 0; r < g_size; r++) sum += VAL(r, i);
            if (x[i] != (float)sum / (float)g_size) wrong++;
        }
#undef VAL
        const int same = same_everywhere(hash_bytes(x, (size_t)n * 4));
        dcheck(st == PRNN_OK && wrong == 0 && same, (double)wrong,
               "mean of %lld integer floats on the GPU: exact (wrong entries counted), identical "
               "bits on every rank: %s", (long long)n, same ? "yes" : "no");
        prnn_mem_free(g_gpu, d);
        free(x);
    }
}

/* ------------------------------------------------------------------------ */
/* 3. Data parallel on GPUs                                                 */

/* n token ids and targets on the GPU, and room for the loss (8 bytes). */
static void upload_tokens(const int32_t *ids, const int32_t *tg, int64_t n, int32_t **d_ids,
                          int32_t **d_tg, float **d_loss)
{
    TU_REQUIRE(prnn_mem_alloc(g_gpu, (void **)d_ids, (size_t)n * 4));
    TU_REQUIRE(prnn_mem_alloc(g_gpu, (void **)d_tg, (size_t)n * 4));
    TU_REQUIRE(prnn_mem_alloc(g_gpu, (void **)d_loss, 8));
    TU_REQUIRE(prnn_mem_upload(g_gpu, *d_ids, ids, (size_t)n * 4));
    TU_REQUIRE(prnn_mem_upload(g_gpu, *d_tg, tg, (size_t)n * 4));
}

/* As test_dist.c: the split batch's averaged gradient against the whole
 * batch's on one GPU; 1e-5 of the gradient's RMS (summation order). */
static void check_data_parallel(void)
{
    if (g_rank == 0) printf("\n== data parallel on GPUs: split batch, averaged gradient ==\n");
    const int64_t B = 2 * g_size + 1, T = 64;
    prnn_model_config mc = prnn_model_config_default();
    mc.dim = 64;
    mc.layers = 2;
    prnn_model *m = NULL;
    TU_REQUIRE(prnn_model_init(g_gpu, &m, &mc));
    TU_REQUIRE(prnn_model_init_params(m, tu_next()));
    const int64_t P = prnn_model_param_count(m);
    int32_t *ids = tu_malloc((size_t)(B * T) * 4), *tg = tu_malloc((size_t)(B * T) * 4);
    int64_t total = 0;
    for (int64_t i = 0; i < B * T; i++) {
        ids[i] = (int32_t)tu_uniform(0, 256);
        tg[i] = tu_uniform(0, 1) < 0.3 ? -1 : (int32_t)tu_uniform(0, 256);
        total += tg[i] != -1;
    }
    int32_t *d_ids, *d_tg;
    float *d_loss, *ref = tu_malloc((size_t)P * 4), *g = tu_malloc((size_t)P * 4);
    upload_tokens(ids, tg, B * T, &d_ids, &d_tg, &d_loss);
    TU_REQUIRE(prnn_model_zero_grads(m));
    TU_REQUIRE(prnn_model_forward(m, B, T, d_loss, d_ids, d_tg, 1, 0));
    TU_REQUIRE(prnn_model_backward(m, 1.0));
    TU_REQUIRE(prnn_mem_download(g_gpu, ref, prnn_model_grads(m), (size_t)P * 4));

    const int64_t first = B * g_rank / g_size, rows = B * (g_rank + 1) / g_size - first;
    int64_t mine = 0;
    for (int64_t i = first * T; i < (first + rows) * T; i++) mine += tg[i] != -1;
    TU_REQUIRE(prnn_model_zero_grads(m));
    TU_REQUIRE(prnn_model_forward(m, rows, T, d_loss, d_ids + first * T, d_tg + first * T, 1, 0));
    TU_REQUIRE(prnn_model_backward(m, (double)mine / (double)total * g_size));
    prnn_status st = prnn_dist_allreduce_mean(g_dist, prnn_model_grads(m), P);
    if (st == PRNN_OK) st = prnn_mem_download(g_gpu, g, prnn_model_grads(m), (size_t)P * 4);
    double *gd = tu_malloc((size_t)P * 8), *rd = tu_malloc((size_t)P * 8);
    for (int64_t i = 0; i < P; i++) gd[i] = g[i], rd[i] = ref[i];
    const double err = max_rel(gd, rd, P, rms(rd, P));
    const int same = same_everywhere(hash_bytes(g, (size_t)P * 4));
    dcheck(st == PRNN_OK && err <= 1e-5 && same, err,
           "B=%lld T=%lld, %lld parameters: gradient == whole batch's (tol 1e-5 of RMS), "
           "identical on every rank: %s", (long long)B, (long long)T, (long long)P,
           same ? "yes" : "no");
    prnn_mem_free(g_gpu, d_ids), prnn_mem_free(g_gpu, d_tg), prnn_mem_free(g_gpu, d_loss);
    free(gd), free(rd), free(ids), free(tg), free(ref), free(g);
    prnn_model_free(m);
}

/* ------------------------------------------------------------------------ */
/* 4. The bucketed average on the side stream                               */

/* Rank r's value at i: 24 significant bits, scattered exponents (the sums
 * round, so their order shows in the bits). */
static float grad_value(uint64_t seed, int r, int64_t i)
{
    uint64_t z = seed ^ ((uint64_t)(r + 1) << 48) ^ (uint64_t)i;
    z = (z ^ (z >> 31)) * 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 29)) * 0xBF58476D1CE4E5B9ull;
    const double m = (double)(z >> 40) / (double)(1 << 24) - 0.5;
    return (float)ldexp(m, (int)((z >> 8) % 20) - 9);
}

/*
 * Tolerance against the one-pass mean. NCCL sums each element once, but in
 * an order that may depend on its place in the call, so a bucket's sums may
 * round differently from the whole buffer's: with two ranks a + b is the
 * same bits in any order (required: 0 differences); with N ranks each
 * result is within N roundings of the exact sum: |x - y| <= 2 N eps of the
 * sum of the |values| / N.
 */
static int64_t count_off(const float *x, const float *y, int64_t lo, int64_t hi, uint64_t seed,
                         double *worst)
{
    int64_t bad = 0;
    for (int64_t i = lo; i < hi; i++) {
        double mag = 0;
        for (int r = 0; r < g_size; r++) mag += fabs((double)grad_value(seed, r, i));
        mag /= g_size;
        const double e = fabs((double)x[i] - (double)y[i]);
        const double tol = g_size == 2 ? 0.0 : 2.0 * g_size * 0x1p-24 * mag;
        if (e > tol) bad++;
        if (mag > 0 && !(e / mag <= *worst)) *worst = e / mag;
    }
    return bad;
}

static void check_bucketed(void)
{
    if (g_rank == 0) printf("\n== bucketed average on the side stream (NCCL) ==\n");
    const struct {
        int64_t n, bucket, slice;
    } cases[] = {
        {3, 1, 1},
        {100003, 4096, 777},
        {((int64_t)1 << 24) + 5, 0, (int64_t)1 << 21},
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        const int64_t n = cases[k].n;
        const uint64_t seed = tu_next();
        float *x = tu_malloc((size_t)n * 4), *ref = tu_malloc((size_t)n * 4);
        for (int64_t i = 0; i < n; i++) x[i] = grad_value(seed, g_rank, i);
        float *d = NULL;
        TU_REQUIRE(prnn_mem_alloc(g_gpu, (void **)&d, (size_t)n * 4));
        TU_REQUIRE(prnn_mem_upload(g_gpu, d, x, (size_t)n * 4));
        TU_REQUIRE(prnn_dist_allreduce_mean(g_dist, d, n));
        TU_REQUIRE(prnn_mem_download(g_gpu, ref, d, (size_t)n * 4));
        for (int mode = 0; mode < 2; mode++) {
            TU_REQUIRE(prnn_mem_zero(g_gpu, d, (size_t)n * 4));
            prnn_dist_grad *g = NULL;
            prnn_status s = prnn_dist_grad_init(&g, g_dist, d, n,
                                                mode ? PRNN_DIST_GRAD_SCATTER : PRNN_DIST_GRAD_MEAN,
                                                cases[k].bucket);
            if (s == PRNN_OK) s = prnn_dist_grad_begin(g);
            /* Slices from the end backwards, each made ready right after
             * its values were uploaded on the context's stream (over zeros):
             * a bucket that did not wait for that stream would read zeros. */
            for (int64_t hi = n; hi > 0 && s == PRNN_OK;) {
                const int64_t c = hi < cases[k].slice ? hi : cases[k].slice;
                s = prnn_mem_upload(g_gpu, d + hi - c, x + hi - c, (size_t)c * 4);
                if (s == PRNN_OK) s = prnn_dist_grad_ready(g, hi - c, c);
                hi -= c;
            }
            const prnn_status f = g ? prnn_dist_grad_finish(g) : PRNN_OK;
            if (s == PRNN_OK) s = f;
            /* Read back on the context's stream: finish ordered it after the
             * side stream. */
            float *got = tu_malloc((size_t)n * 4);
            if (s == PRNN_OK) s = prnn_mem_download(g_gpu, got, d, (size_t)n * 4);
            int64_t lo = 0, hi = n;
            if (mode) prnn_dist_shard(g_dist, n, -1, &lo, &hi);
            double worst = 0;
            const int64_t bad = count_off(got, ref, lo, hi, seed, &worst);
            const int same = mode || same_everywhere(hash_bytes(got, (size_t)n * 4));
            dcheck(s == PRNN_OK && bad == 0 && same, worst,
                   "%s, n=%lld, %d buckets: == one-pass mean (%s; entries off %lld)%s",
                   mode ? "scatter (each rank its shard)" : "mean", (long long)n,
                   prnn_dist_grad_buckets(g), g_size == 2 ? "bit for bit with 2 ranks" : "fp32",
                   (long long)bad, mode ? "" : ", identical on every rank");
            prnn_dist_grad_free(g);
            free(got);
        }
        /* The shard all-gather: exact. */
        int64_t mlo, mhi;
        prnn_dist_shard(g_dist, n, -1, &mlo, &mhi);
        for (int64_t i = 0; i < n; i++) x[i] = i >= mlo && i < mhi ? grad_value(seed, 0, i) : -1.f;
        TU_REQUIRE(prnn_mem_upload(g_gpu, d, x, (size_t)n * 4));
        prnn_status s = prnn_dist_allgather_shards(g_dist, d, n);
        if (s == PRNN_OK) s = prnn_mem_download(g_gpu, x, d, (size_t)n * 4);
        int64_t wrong = 0;
        for (int64_t i = 0; i < n; i++) wrong += x[i] != grad_value(seed, 0, i);
        dcheck(s == PRNN_OK && wrong == 0, (double)wrong,
               "n=%lld: all-gather of the shards exact", (long long)n);
        prnn_mem_free(g_gpu, d);
        free(x), free(ref);
    }
}

/* The model's gradient hook drives the average during the backward on the
 * GPU: the same as averaging after it (bits with 2 ranks; else NCCL's
 * order: 1e-6 of the gradient's RMS, far below any wrong slice). */
static void check_model_hook(void)
{
    if (g_rank == 0) printf("\n== model gradient hook on the GPU ==\n");
    const prnn_dtype dts[] = {PRNN_DTYPE_F32, PRNN_DTYPE_BF16};
    for (int k = 0; k < 2; k++) {
        const int64_t B = 4, T = 128;
        prnn_model_config mc = prnn_model_config_default();
        mc.dim = 256;
        mc.layers = 3;
        mc.dtype = dts[k];
        prnn_model *m = NULL;
        TU_REQUIRE(prnn_model_init(g_gpu, &m, &mc));
        TU_REQUIRE(prnn_model_init_params(m, tu_next()));
        const int64_t P = prnn_model_param_count(m);
        int32_t *ids = tu_malloc((size_t)(B * T) * 4), *tg = tu_malloc((size_t)(B * T) * 4);
        for (int i = 0; i < g_size; i++)
            for (int64_t j = 0; j < B * T; j++) {
                const int32_t a = (int32_t)tu_uniform(0, 256), b = (int32_t)tu_uniform(0, 256);
                if (i == g_rank) ids[j] = a, tg[j] = b;
            }
        int32_t *d_ids, *d_tg;
        float *d_loss, *ref = tu_malloc((size_t)P * 4), *got = tu_malloc((size_t)P * 4);
        upload_tokens(ids, tg, B * T, &d_ids, &d_tg, &d_loss);
        TU_REQUIRE(prnn_model_zero_grads(m));
        TU_REQUIRE(prnn_model_forward(m, B, T, d_loss, d_ids, d_tg, 1, 0));
        TU_REQUIRE(prnn_model_backward(m, 1.0));
        TU_REQUIRE(prnn_dist_allreduce_mean(g_dist, prnn_model_grads(m), P));
        TU_REQUIRE(prnn_mem_download(g_gpu, ref, prnn_model_grads(m), (size_t)P * 4));

        prnn_dist_grad *g = NULL;
        TU_REQUIRE(prnn_dist_grad_init(&g, g_dist, prnn_model_grads(m), P, PRNN_DIST_GRAD_MEAN,
                                       P / 6));
        TU_REQUIRE(prnn_model_set_grad_hook(m, prnn_dist_grad_hook, g));
        prnn_status s = PRNN_OK;
        for (int step = 0; step < 2 && s == PRNN_OK; step++) { /* twice: events reused */
            s = prnn_model_zero_grads(m);
            if (s == PRNN_OK) s = prnn_model_forward(m, B, T, d_loss, d_ids, d_tg, 1, 0);
            if (s == PRNN_OK) s = prnn_dist_grad_begin(g);
            if (s == PRNN_OK) s = prnn_model_backward(m, 1.0);
            const prnn_status f = prnn_dist_grad_finish(g);
            if (s == PRNN_OK) s = f;
        }
        if (s == PRNN_OK) s = prnn_mem_download(g_gpu, got, prnn_model_grads(m), (size_t)P * 4);
        double *gd = tu_malloc((size_t)P * 8), *rd = tu_malloc((size_t)P * 8);
        for (int64_t i = 0; i < P; i++) gd[i] = got[i], rd[i] = ref[i];
        const double err = max_rel(gd, rd, P, rms(rd, P));
        const int64_t differ = (int64_t)(memcmp(got, ref, (size_t)P * 4) != 0);
        const int same = same_everywhere(hash_bytes(got, (size_t)P * 4));
        const int ok = g_size == 2 ? differ == 0 : err <= 1e-6;
        dcheck(s == PRNN_OK && ok && same, err,
               "%s, 3 layers of 256, %lld parameters, %d buckets: averaged during the backward "
               "== after it (%s), identical on every rank: %s",
               k ? "bf16" : "f32", (long long)P, prnn_dist_grad_buckets(g),
               g_size == 2 ? "bit for bit with 2 ranks" : "tol 1e-6 of RMS",
               same ? "yes" : "no");
        TU_REQUIRE(prnn_model_set_grad_hook(m, NULL, NULL));
        prnn_dist_grad_free(g);
        prnn_mem_free(g_gpu, d_ids), prnn_mem_free(g_gpu, d_tg), prnn_mem_free(g_gpu, d_loss);
        free(gd), free(rd), free(ids), free(tg), free(ref), free(got);
        prnn_model_free(m);
    }
}

/* ------------------------------------------------------------------------ */

int main(void)
{
    int devices = 0;
    if (cudaGetDeviceCount(&devices) != cudaSuccess) devices = 0;
    prnn_dist_info info;
    const int go = dist_gpu_suite_start(devices, &info);
    if (go <= 0) return go < 0 ? 2 : 0;
    /* The test's own CUDA calls (cudaMemset) go to this process's GPU. */
    CUDA_CHECK(cudaSetDevice(info.local_rank));
    prnn_ctx_config cfg = prnn_ctx_config_default();
    cfg.num_threads = 1;
    TU_REQUIRE(prnn_ctx_init(&g_cpu, &cfg));
    cfg.device = PRNN_DEVICE_CUDA;
    cfg.cuda_device = info.local_rank;
    TU_REQUIRE(prnn_ctx_init(&g_gpu, &cfg));
    TU_REQUIRE(prnn_dist_init(&g_dist, g_gpu, NULL));

    uint64_t seed = tu_seed_from_env();
    MPI_Bcast(&seed, 1, MPI_UINT64_T, 0, MPI_COMM_WORLD);
    tu_seed(seed);
    if (g_rank == 0)
        printf("%d processes (%s), one GPU each, seed %llu (PRNN_TEST_SEED=%llu repeats this "
               "run)\n", g_size, prnn_dist_backend(g_dist), (unsigned long long)seed,
               (unsigned long long)seed);

    check_scan();
    check_allreduce();
    check_data_parallel();
    check_bucketed();
    check_model_hook();

    prnn_dist_free(g_dist);
    prnn_ctx_free(g_gpu);
    prnn_ctx_free(g_cpu);
    return dist_suite_finish();
}
