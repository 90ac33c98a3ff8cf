/*
 * test_scan_cuda.c - the GPU test suite: every CUDA scan algorithm (SERIAL,
 * TREE, CHUNKED, STRIPED, and AUTO's choices) x storage dtype (F32, BF16, F16) x option set (plain, h0+hT,
 * dhT, reverse, varlen, all combined), forward and backward, checked against
 * the CPU library (the oracle) run in F32 on the same inputs rounded to the
 * storage type. Plus workspace reuse across sizes, a user-supplied stream
 * and the error paths.
 *
 * Size letters: B batch rows, T time steps, H channels.
 *
 * Usage: prnn_tests_cuda [--quick] [--window | --many]   (--quick: small
 * shapes only, for compute-sanitizer and for dev/cuda/sim, which runs this
 * same program on the host; --window: only the few-chain cases,
 * test_window; --many: only the many-channel cases and the kernel choices,
 * test_many_channels and test_kernel_choice; each at full size, or the
 * quick ones with --quick).
 * PRNN_TEST_SEED=N repeats a run. Without a CUDA device it skips and
 * passes.
 */
#include <cuda_runtime.h>

#include "test_util.h"

#include "check.h"

/* ------------------------------------------------------------------------ */
/* Storage conversions on the host (round to nearest even)                  */

static float bits_to_f32(uint32_t u)
{
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static uint32_t f32_to_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

static uint16_t f32_to_bf16(float f)
{
    uint32_t x = f32_to_bits(f);
    if ((x & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((x >> 16) | 0x40u); /* NaN */
    x += 0x7fffu + ((x >> 16) & 1u);
    return (uint16_t)(x >> 16);
}

static float bf16_to_f32(uint16_t h) { return bits_to_f32((uint32_t)h << 16); }

static uint16_t f32_to_f16(float f)
{
    const uint32_t x = f32_to_bits(f);
    const uint16_t sign = (uint16_t)((x >> 16) & 0x8000u);
    const uint32_t ax = x & 0x7fffffffu;
    if (ax > 0x7f800000u) return sign | 0x7e00u;  /* NaN */
    if (ax >= 0x477ff000u) return sign | 0x7c00u; /* rounds to infinity */
    if (ax < 0x38800000u) {                       /* zero or subnormal half */
        const float q = bits_to_f32(ax) * 16777216.0f; /* in units of 2^-24, exact */
        return (uint16_t)(sign | (uint16_t)nearbyintf(q));
    }
    const uint32_t m = ax & 0x7fffffu;
    uint32_t h = ((((ax >> 23) - 127u + 15u)) << 10) | (m >> 13);
    const uint32_t rem = m & 0x1fffu;
    if (rem > 0x1000u || (rem == 0x1000u && (h & 1u))) h++; /* may carry into the exponent */
    return (uint16_t)(sign | h);
}

static float f16_to_f32(uint16_t h)
{
    const uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    const uint32_t e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
    if (e == 0x1f) return bits_to_f32(sign | 0x7f800000u | (m << 13));
    if (e == 0) {
        const float v = (float)m * (1.0f / 16777216.0f);
        return sign ? -v : v;
    }
    return bits_to_f32(sign | ((e + 127u - 15u) << 23) | (m << 13));
}

/* Writes x in the storage type and rounds x itself to what was stored. */
static void to_storage(float *x, void *out, int64_t n, prnn_dtype dt)
{
    if (dt == PRNN_DTYPE_F32) {
        memcpy(out, x, (size_t)n * 4);
        return;
    }
    uint16_t *o = (uint16_t *)out;
    for (int64_t i = 0; i < n; i++) {
        if (dt == PRNN_DTYPE_BF16) {
            o[i] = f32_to_bf16(x[i]);
            x[i] = bf16_to_f32(o[i]);
        } else {
            o[i] = f32_to_f16(x[i]);
            x[i] = f16_to_f32(o[i]);
        }
    }
}

static void from_storage(const void *in, float *x, int64_t n, prnn_dtype dt)
{
    if (dt == PRNN_DTYPE_F32) {
        memcpy(x, in, (size_t)n * 4);
        return;
    }
    const uint16_t *s = (const uint16_t *)in;
    for (int64_t i = 0; i < n; i++)
        x[i] = dt == PRNN_DTYPE_BF16 ? bf16_to_f32(s[i]) : f16_to_f32(s[i]);
}

static const char *dtype_name(prnn_dtype dt)
{
    return dt == PRNN_DTYPE_F32 ? "f32" : dt == PRNN_DTYPE_BF16 ? "bf16" : "f16";
}

/* ------------------------------------------------------------------------ */
/* Tolerances, with where they come from                                    */

/* Measure: |gpu - cpu| / (|cpu| + floor). */
typedef struct {
    double tol, floor_;
    const char *why;
} tolerance;

/* fp32 results (and every fp32 state: hT, dh0): the GPU composes chunk
 * summaries in another order than the serial loop; a few ulps of the
 * magnitudes involved, ~1e-6 for O(1) values, so 1e-5 relative with an
 * absolute floor of 1. */
static const tolerance tol_f32 = {1e-5, 1.0, "fp32: accumulation order differs from serial"};

/* Outputs stored as bf16/fp16: one rounding of the fp32 result (unit
 * roundoff 2^-8 / 2^-11 relative), plus the fp32 difference above
 * (<= 1e-6 absolute, i.e. <= 1e-4 relative over the floor 1e-2). */
static tolerance tol_storage(prnn_dtype dt)
{
    if (dt == PRNN_DTYPE_BF16)
        return (tolerance){0.00390625 + 1e-4, 1e-2, "bf16 output rounding 2^-8 + fp32 accumulation"};
    if (dt == PRNN_DTYPE_F16)
        return (tolerance){0.00048828125 + 1e-4, 1e-2, "fp16 output rounding 2^-11 + fp32 accumulation"};
    return tol_f32;
}

/* ------------------------------------------------------------------------ */
/* One case                                                                 */

typedef struct {
    const char *name;
    int h0, hT, dhT, no_dh, reverse, varlen, dh0;
} options;

static const options OPTS[] = {
    {"plain", 0, 0, 0, 0, 0, 0, 0},
    {"h0+hT", 1, 1, 0, 0, 0, 0, 1},
    {"dhT", 0, 0, 1, 1, 0, 0, 1}, /* dhT given, dh NULL */
    {"reverse", 0, 1, 0, 0, 1, 0, 1},
    {"varlen", 0, 1, 0, 0, 0, 1, 1},
    {"all", 1, 1, 1, 0, 1, 1, 1},
};
#define N_OPTS ((int)(sizeof OPTS / sizeof OPTS[0]))

typedef struct {
    int64_t B, T, H;
    int unaligned; /* tensors start one element past an aligned address */
} shape;

static prnn_ctx *g_cpu, *g_gpu;

/* Device buffer of n elements of size es (plus one when unaligned). */
static void *dev_alloc(int64_t n, size_t es, int unaligned, void **base)
{
    CUDA_CHECK(cudaMalloc(base, (size_t)(n + 1) * es));
    return (char *)*base + (unaligned ? es : 0);
}

/* Setup copies and fills run on the legacy default stream, which the
 * context's non-blocking stream does not wait for: each helper waits for
 * its own transfer, so a library call never races its inputs or the
 * poison of its outputs (a poison still landing during the backward once
 * showed as NaN in db and dh0 on an H200). */
static void *dev_upload(const void *host, int64_t n, size_t es, int unaligned, void **base)
{
    void *d = dev_alloc(n, es, unaligned, base);
    CUDA_CHECK(cudaMemcpy(d, host, (size_t)n * es, cudaMemcpyHostToDevice));
    CUDA_CHECK(cudaDeviceSynchronize());
    return d;
}

/* NaN in every storage type: all-ones bytes. */
static void poison(void *d, int64_t n, size_t es)
{
    CUDA_CHECK(cudaMemset(d, 0xff, (size_t)n * es));
    CUDA_CHECK(cudaDeviceSynchronize());
}

static void download(float *host, const void *d, int64_t n, prnn_dtype dt, void *scratch)
{
    CUDA_CHECK(cudaMemcpy(scratch, d, (size_t)n * prnn_dtype_size(dt), cudaMemcpyDeviceToHost));
    from_storage(scratch, host, n, dt);
}

/* Long-memory inputs (a near 1): states grow like a random walk and cross
 * zero, so errors are judged against the tensor's RMS, and fp32 allows 16x
 * more. Rounding accumulates over the remembered steps (thousands, up to
 * all of T when a is within 2^-16 of 1): an fp32 emulation of the chunked
 * order against the serial loop at T = 65537 (dev/cuda/order_noise.py)
 * reaches 3.2-3.7e-5 of |ref| + RMS, and another tile shape 4.6e-5, so the
 * old 4x (4e-5) sat at that noise floor. A carry folded wrongly is off by
 * about the carry itself, i.e. ~RMS: three orders above this bound. */
static tolerance scaled(tolerance t, int longmem, const float *ref, int64_t n)
{
    if (!longmem || n == 0) return t;
    double s = 0;
    for (int64_t i = 0; i < n; i++) s += (double)ref[i] * ref[i];
    t.floor_ = fmax(t.floor_, sqrt(s / (double)n));
    if (t.tol < 1e-4) t.tol *= 16;
    return t;
}

/* Compares one output; appends "name err/tol" to the line; returns ok. */
static int cmp(char *line, size_t cap, const char *name, const float *got, const float *want,
               int64_t n, tolerance t)
{
    tu_err e = tu_compare_f32(got, want, n, t.floor_, t.tol, name);
    size_t len = strlen(line);
    snprintf(line + len, cap - len, " %s %.2e", name, e.max_err);
    return e.bad == 0;
}

static void run_case(prnn_scan_algo algo, prnn_dtype dt, shape sh, const options *o)
{
    const int64_t B = sh.B, T = sh.T, H = sh.H, n = B * T * H, ns = B * H;
    const size_t es = prnn_dtype_size(dt);
    /* Decays: (0.5, 1) half the time; (-1, 1) a quarter (signs); and a
     * quarter long memory, (1 - 2^-12, 1): with short memory a state forgets
     * its carry within a tile, so an error in folding distant tiles' carries
     * would vanish; with long memory it shows. Long-memory states grow like
     * a random walk, so their errors are judged against the tensor's RMS. */
    const unsigned pick_a = (unsigned)(tu_next() & 3);
    const int mixed = pick_a == 0, longmem = pick_a == 1;

    float *a = tu_malloc((size_t)n * 4), *b = tu_malloc((size_t)n * 4);
    float *dh = tu_malloc((size_t)n * 4), *hin = tu_malloc((size_t)n * 4);
    float *h0 = tu_malloc((size_t)ns * 4), *dhT = tu_malloc((size_t)ns * 4);
    /* storage-typed staging; also holds fp32 state tensors on download */
    void *st = tu_malloc((size_t)(n * (int64_t)es > ns * 4 ? n * (int64_t)es : ns * 4));
    int64_t *len = tu_malloc((size_t)B * sizeof(int64_t));
    tu_fill_f32(a, n, mixed ? -1.0 : longmem ? 1.0 - 1.0 / 4096 : 0.5, 1.0);
    tu_fill_f32(b, n, -1.0, 1.0);
    tu_fill_f32(dh, n, -1.0, 1.0);
    tu_fill_f32(hin, n, -1.0, 1.0); /* the backward's h: any tensor will do */
    tu_fill_f32(h0, ns, -1.0, 1.0);
    tu_fill_f32(dhT, ns, -1.0, 1.0);
    for (int64_t i = 0; i < B; i++) {
        const int64_t pick = B >= 3 ? i : (int64_t)(tu_next() % 4);
        len[i] = pick == 0 ? 0 : pick == 1 ? 1 : pick == 2 ? T : (int64_t)(tu_next() % (uint64_t)(T + 1));
    }

    /* inputs in the storage type on the device; the host copies rounded */
    void *base[12] = {0};
    void *d_a, *d_b, *d_dh = NULL, *d_hin;
    to_storage(a, st, n, dt);
    d_a = dev_upload(st, n, es, sh.unaligned, &base[0]);
    to_storage(b, st, n, dt);
    d_b = dev_upload(st, n, es, sh.unaligned, &base[1]);
    to_storage(dh, st, n, dt);
    if (!o->no_dh) d_dh = dev_upload(st, n, es, sh.unaligned, &base[2]);
    to_storage(hin, st, n, dt);
    d_hin = dev_upload(st, n, es, sh.unaligned, &base[3]);
    float *d_h0 = dev_upload(h0, ns, 4, 0, &base[4]);
    float *d_dhT = dev_upload(dhT, ns, 4, 0, &base[5]);
    void *d_h = dev_alloc(n, es, sh.unaligned, &base[6]);
    void *d_da = dev_alloc(n, es, sh.unaligned, &base[7]);
    void *d_db = dev_alloc(n, es, sh.unaligned, &base[8]);
    float *d_hT = dev_alloc(ns, 4, 0, &base[9]);
    float *d_dh0 = dev_alloc(ns, 4, 0, &base[10]);

    /* CPU oracle: F32 serial scan on the rounded inputs */
    prnn_scan_desc cd = prnn_scan_desc_make(B, T, H);
    cd.algo = PRNN_SCAN_SERIAL;
    cd.reverse = o->reverse;
    cd.lengths = o->varlen ? len : NULL;
    float *ref_h = tu_malloc((size_t)n * 4), *ref_hT = tu_malloc((size_t)ns * 4);
    float *ref_da = tu_malloc((size_t)n * 4), *ref_db = tu_malloc((size_t)n * 4);
    float *ref_dh0 = tu_malloc((size_t)ns * 4);
    TU_REQUIRE(prnn_scan_forward(g_cpu, &cd, ref_h, o->hT ? ref_hT : NULL, a, b, o->h0 ? h0 : NULL));
    TU_REQUIRE(prnn_scan_backward(g_cpu, &cd, ref_da, ref_db, o->dh0 ? ref_dh0 : NULL, a, hin,
                                  o->h0 ? h0 : NULL, o->no_dh ? NULL : dh, o->dhT ? dhT : NULL));

    /* GPU */
    prnn_scan_desc gd = cd;
    gd.algo = algo;
    gd.dtype = dt;
    poison(d_h, n, es);
    poison(d_hT, ns, 4);
    poison(d_da, n, es);
    poison(d_db, n, es);
    poison(d_dh0, ns, 4);
    const prnn_status sf = prnn_scan_forward(g_gpu, &gd, d_h, o->hT ? d_hT : NULL, d_a, d_b,
                                             o->h0 ? d_h0 : NULL);
    const prnn_status sb = prnn_scan_backward(g_gpu, &gd, d_da, d_db, o->dh0 ? d_dh0 : NULL, d_a,
                                              d_hin, o->h0 ? d_h0 : NULL, d_dh, o->dhT ? d_dhT : NULL);
    const prnn_status ss = prnn_ctx_synchronize(g_gpu);

    char what[160];
    snprintf(what, sizeof what, "%-7s %-4s %-7s B=%lld T=%lld H=%lld%s%s", prnn_scan_algo_name(algo),
             dtype_name(dt), o->name, (long long)B, (long long)T, (long long)H,
             sh.unaligned ? " unaligned" : "", mixed ? " a~(-1,1)" : longmem ? " a~(1-2^-12,1)" : "");
    if (sf != PRNN_OK || sb != PRNN_OK || ss != PRNN_OK) {
        tu_check(0, "%s: status fwd %s, bwd %s, sync %s", what, prnn_strerror(sf),
                 prnn_strerror(sb), prnn_strerror(ss));
    } else {
        const tolerance ts = tol_storage(dt);
        float *got = tu_malloc((size_t)n * 4);
        char line[512] = "";
        int ok = 1;

        download(got, d_h, n, dt, st);
        ok &= cmp(line, sizeof line, "h", got, ref_h, n, scaled(ts, longmem, ref_h, n));
        if (o->hT) {
            download(got, d_hT, ns, PRNN_DTYPE_F32, st);
            ok &= cmp(line, sizeof line, "hT", got, ref_hT, ns, scaled(tol_f32, longmem, ref_hT, ns));
        }
        tu_check(ok, "%s fwd:%s (tol %.1e: %s; states %.0e: fp32)", what, line, ts.tol, ts.why,
                 tol_f32.tol);

        line[0] = '\0';
        ok = 1;
        download(got, d_da, n, dt, st);
        ok &= cmp(line, sizeof line, "da", got, ref_da, n, scaled(ts, longmem, ref_da, n));
        download(got, d_db, n, dt, st);
        ok &= cmp(line, sizeof line, "db", got, ref_db, n, scaled(ts, longmem, ref_db, n));
        if (o->dh0) {
            download(got, d_dh0, ns, PRNN_DTYPE_F32, st);
            ok &= cmp(line, sizeof line, "dh0", got, ref_dh0, ns, scaled(tol_f32, longmem, ref_dh0, ns));
        }
        tu_check(ok, "%s bwd:%s (tol %.1e: %s; states %.0e: fp32)", what, line, ts.tol, ts.why,
                 tol_f32.tol);
        free(got);
    }

    for (int i = 0; i < 12; i++)
        if (base[i]) CUDA_CHECK(cudaFree(base[i]));
    free(a); free(b); free(dh); free(hin); free(h0); free(dhT); free(st); free(len);
    free(ref_h); free(ref_hT); free(ref_da); free(ref_db); free(ref_dh0);
}

/* AUTO's backward for 1 to 4 chains of 64 channels (B x H = 64 .. 256,
 * H a multiple of 64) at long T: on sm_90 WINDOW (scan_window.cu, from
 * T = 2048), elsewhere the chunked scan; its forward as well from T =
 * 2^16 (2^17 for one chain) to under 3 x 2^17 (the full-size shapes
 * from 65539 to 300007 steps; 1 x 65537 x 64 and 1 x 524309 x 128
 * outside), and for fp32, cut into 2 to 8 chains of 32 channels, from
 * T = 2^15 on (every full-size shape; 3 x 80021 x 64 is six of them; one
 * row of 64 from 2^18 steps, 1 x 300007 x 64, has its forward's h copied
 * out by tensor-map stores); the fp32 backward keeps 64 channels from
 * three rows of 64 on (3 x 80021 x 64, 4 x 70001 x 64, 1 x 262147 x 256).
 * On a card of under 30 GB/s an SM (an H100) the 16-bit forward of one or
 * two rows of 64 from 2^18 steps takes chains of 32 as well (1 x 300007 x
 * 64, 1 x 524309 x 128).
 * Odd T leave a short last tile.
 * The options it takes (h0, dhT beside dh, dh0) in every dtype; those it
 * leaves to the chunked scan (reverse, lengths, dh NULL) once. The short
 * T (also in --quick, for compute-sanitizer) reach WINDOW in builds with
 * PRNN_WINDOW_MIN_T lowered: one tile, part of one, windows with a last
 * one cut short; T = 2047 and 2048 straddle the threshold. */
static const char *forward_kernel(prnn_scan_algo algo, prnn_dtype dt, int64_t B, int64_t T,
                                  int64_t H);

/* The card's peak memory bandwidth in GB/s as the library takes it (memory
 * clock x bus width x 2), its SMs in *sms and its compute capability's
 * major number in *cc. */
static long long card_peak_gbps(int *sms, int *cc)
{
    int khz = 0, bits = 0;
    CUDA_CHECK(cudaDeviceGetAttribute(sms, cudaDevAttrMultiProcessorCount, 0));
    CUDA_CHECK(cudaDeviceGetAttribute(cc, cudaDevAttrComputeCapabilityMajor, 0));
    CUDA_CHECK(cudaDeviceGetAttribute(&khz, cudaDevAttrMemoryClockRate, 0));
    CUDA_CHECK(cudaDeviceGetAttribute(&bits, cudaDevAttrGlobalMemoryBusWidth, 0));
    return (long long)(2.0 * khz * 1e3 * (bits / 8) / 1e9);
}

static void test_window(int quick)
{
    const prnn_dtype dtypes[] = {PRNN_DTYPE_F32, PRNN_DTYPE_BF16, PRNN_DTYPE_F16};
    static const options window_opts[] = {
        {"plain", 0, 0, 0, 0, 0, 0, 0},
        {"h0+dhT+dh0", 1, 1, 1, 0, 0, 0, 1},
    };
    const shape window_shapes[] = {
        {1, 1, 64, 0},       {1, 31, 64, 0},       {1, 81, 128, 0},    {3, 33, 64, 0},
        {2, 97, 128, 0},     {1, 4001, 256, 0},    {2, 2047, 64, 0},   {1, 2048, 64, 0},
        {1, 65537, 64, 0},   {1, 300007, 64, 0},   {1, 262147, 256, 0}, {1, 524309, 128, 0},
        {2, 100003, 64, 0},  {4, 70001, 64, 0},    {2, 65539, 128, 0}, {3, 80021, 64, 0},
    };
    const int nwin = quick ? 8 : (int)(sizeof window_shapes / sizeof window_shapes[0]);
    for (int si = 0; si < nwin; si++)
        for (int di = 0; di < 3; di++)
            for (int oi = 0; oi < 2; oi++)
                run_case(PRNN_SCAN_AUTO, dtypes[di], window_shapes[si], &window_opts[oi]);
    /* FIXED takes WINDOW too outside graph capture (T >= 2048), its
     * forward as well */
    static const int fixed_shapes[] = {7, 9, 12, 13};
    const int nfix = quick ? nwin : 4;
    for (int fi = 0; fi < nfix; fi++)
        for (int di = 0; di < 3; di++)
            run_case(PRNN_SCAN_FIXED, dtypes[di], window_shapes[quick ? fi : fixed_shapes[fi]],
                     &window_opts[1]);
    if (!quick)
        for (int oi = 0; oi < N_OPTS; oi++)
            run_case(PRNN_SCAN_AUTO, PRNN_DTYPE_F32, window_shapes[12], &OPTS[oi]);
    /* the chains AUTO's 16-bit forward takes for one row of 64: 32 channels
     * only on a card under 30 GB/s an SM; at 300007 steps (full size) on
     * sm_90 WINDOW, in chains of 32 exactly there */
    int sms = 0, cc = 0;
    const long long gbps = card_peak_gbps(&sms, &cc);
    const int lean = gbps > 0 && gbps / sms < 30;
    const int64_t T = quick ? 4001 : 300007;
    const char *k = forward_kernel(PRNN_SCAN_AUTO, PRNN_DTYPE_BF16, 1, T, 64);
    const int window = !strncmp(k, "window", 6), narrow = strstr(k, "chains of 32") != NULL;
    tu_check(window ? (narrow ? lean : quick || !lean) : quick || cc < 9,
             "auto bf16 forward B=1 T=%lld H=64 (%lld GB/s peak, %lld an SM): %s", (long long)T, gbps,
             gbps / sms, k);
}

/* ------------------------------------------------------------------------ */
/* Other behaviour                                                          */

/* Forward F32 of one shape on ctx/stream; returns the max error vs the CPU. */
static double forward_error(prnn_ctx *ctx, prnn_scan_algo algo, int64_t B, int64_t T, int64_t H,
                            cudaStream_t wait_on)
{
    const int64_t n = B * T * H;
    float *a = tu_malloc((size_t)n * 4), *b = tu_malloc((size_t)n * 4);
    float *ref = tu_malloc((size_t)n * 4), *got = tu_malloc((size_t)n * 4);
    tu_fill_f32(a, n, 0.5, 1.0);
    tu_fill_f32(b, n, -1.0, 1.0);
    prnn_scan_desc d = prnn_scan_desc_make(B, T, H);
    d.algo = PRNN_SCAN_SERIAL;
    TU_REQUIRE(prnn_scan_forward(g_cpu, &d, ref, NULL, a, b, NULL));
    void *pa, *pb, *ph;
    float *d_a = dev_upload(a, n, 4, 0, &pa), *d_b = dev_upload(b, n, 4, 0, &pb);
    float *d_h = dev_alloc(n, 4, 0, &ph);
    poison(d_h, n, 4);
    d.algo = algo;
    TU_REQUIRE(prnn_scan_forward(ctx, &d, d_h, NULL, d_a, d_b, NULL));
    if (wait_on) CUDA_CHECK(cudaStreamSynchronize(wait_on));
    else TU_REQUIRE(prnn_ctx_synchronize(ctx));
    CUDA_CHECK(cudaMemcpy(got, d_h, (size_t)n * 4, cudaMemcpyDeviceToHost));
    tu_err e = tu_compare_f32(got, ref, n, tol_f32.floor_, tol_f32.tol, "h");
    CUDA_CHECK(cudaFree(pa));
    CUDA_CHECK(cudaFree(pb));
    CUDA_CHECK(cudaFree(ph));
    free(a); free(b); free(ref); free(got);
    return e.bad ? INFINITY : e.max_err;
}

/* The kernel a forward on the GPU context chose (prnn_scan_last_kernel),
 * on inputs of zeros. */
static const char *forward_kernel(prnn_scan_algo algo, prnn_dtype dt, int64_t B, int64_t T,
                                  int64_t H)
{
    static char text[256];
    const size_t es = prnn_dtype_size(dt);
    const int64_t n = B * T * H;
    void *pa, *pb, *ph;
    void *d_a = dev_alloc(n, es, 0, &pa), *d_b = dev_alloc(n, es, 0, &pb);
    void *d_h = dev_alloc(n, es, 0, &ph);
    CUDA_CHECK(cudaMemset(d_a, 0, (size_t)n * es));
    CUDA_CHECK(cudaMemset(d_b, 0, (size_t)n * es));
    prnn_scan_desc d = prnn_scan_desc_make(B, T, H);
    d.dtype = dt;
    d.algo = algo;
    TU_REQUIRE(prnn_scan_forward(g_gpu, &d, d_h, NULL, d_a, d_b, NULL));
    TU_REQUIRE(prnn_ctx_synchronize(g_gpu));
    snprintf(text, sizeof text, "%s", prnn_scan_last_kernel(g_gpu));
    CUDA_CHECK(cudaFree(pa));
    CUDA_CHECK(cudaFree(pb));
    CUDA_CHECK(cudaFree(ph));
    return text;
}

/* The kernel a scan chose, in words (prnn_scan_last_kernel): "" on a CPU
 * context; FIXED's never one with look-back, at any shape; AUTO's 16-bit
 * forward in 256-byte stripes numbering 0.7-1 x the SMs (16 x 768: 96,
 * 16 x 1024: 128) walks whole rows: short rows one staged tile on every
 * card, long ones (from 16384 steps; the simulator's test builds from 300)
 * unstaged at 6 steps a lane exactly where each block's share of the
 * card's peak memory bandwidth (clock x bus width x 2) is under 45 GB/s,
 * else two staged tiles (the lab kernel that finishes each tile late, lab
 * setting PRNN_LATE16, its own count). */
static void test_kernel_choice(int quick)
{
    tu_check(!strcmp(prnn_scan_last_kernel(g_cpu), "") && !strcmp(prnn_scan_last_kernel(NULL), ""),
             "last kernel: \"\" on a CPU context and for NULL");
    const int64_t fixed_shapes[][3] = {{1, quick ? 3000 : 70000, 64}, {16, 600, 1024}, {3, 500, 7}};
    for (int i = 0; i < 3; i++)
        for (int di = 0; di < 2; di++) {
            const prnn_dtype dt = di ? PRNN_DTYPE_BF16 : PRNN_DTYPE_F32;
            const char *k = forward_kernel(PRNN_SCAN_FIXED, dt, fixed_shapes[i][0],
                                           fixed_shapes[i][1], fixed_shapes[i][2]);
            tu_check(*k && !strstr(k, "look-back"), "fixed %s B=%lld T=%lld H=%lld: %s",
                     di ? "bf16" : "f32", (long long)fixed_shapes[i][0],
                     (long long)fixed_shapes[i][1], (long long)fixed_shapes[i][2], k);
        }
    int sms = 0, cc = 0;
    const long long gbps = card_peak_gbps(&sms, &cc);
    const int64_t Hs[] = {768, 1024};
    for (int i = 0; i < 2; i++) {
        const int64_t T = quick ? 600 : 16400, blocks = 16 * Hs[i] * 2 / 256;
        if (10 * blocks < 7 * (int64_t)sms || blocks >= sms) continue;
        const char *k = forward_kernel(PRNN_SCAN_AUTO, PRNN_DTYPE_BF16, 16, T, Hs[i]);
        const int short_rows = strstr(k, "1 tile staged") != NULL;
        const int unstaged = gbps > 0 && gbps < 45 * blocks;
        const int late = strstr(k, "each finished a tile late") != NULL;
        const char *want = short_rows ? "1 tile staged"
                           : unstaged ? "6 steps a lane, 1 block an SM, unstaged"
                           : late     ? "tiles staged"
                                      : "2 tiles staged";
        tu_check(!strncmp(k, "striped: 256-byte stripes", 25) && strstr(k, want) &&
                     strstr(k, "whole rows") && !(short_rows && !quick),
                 "auto bf16 forward B=16 T=%lld H=%lld (%lld blocks, %lld GB/s peak: %lld a block): %s",
                 (long long)T, (long long)Hs[i], (long long)blocks, gbps, gbps / blocks, k);
    }
}

/* The workspace grows and is kept; flags of an earlier, larger launch must
 * never be mistaken for this launch's (epoch tags). */
static void test_workspace_reuse(int quick)
{
    const int64_t shapes[][3] = {{4, 4099, 256}, {1, 70, 3}, {2, 1000, 64}, {4, 4099, 256},
                                 {1, 3000, 1}};
    const int count = (int)(sizeof shapes / sizeof shapes[0]);
    for (int algo = PRNN_SCAN_TREE; algo <= PRNN_SCAN_FIXED; algo++)
        for (int i = 0; i < count; i++) {
            const int64_t T = quick ? (shapes[i][1] < 300 ? shapes[i][1] : 300) : shapes[i][1];
            const double e = forward_error(g_gpu, (prnn_scan_algo)algo, shapes[i][0], T, shapes[i][2], 0);
            tu_check(e <= tol_f32.tol, "workspace reuse %s call %d B=%lld T=%lld H=%lld: max err %.2e (tol %.0e: %s)",
                     prnn_scan_algo_name((prnn_scan_algo)algo), i, (long long)shapes[i][0],
                     (long long)T, (long long)shapes[i][2], e, tol_f32.tol, tol_f32.why);
        }
}

/* FIXED gives the same bits on every run (no look-back, no order that
 * depends on timing): forward and backward twice on one shape. */
static void fixed_repeat(int64_t B, int64_t T, int64_t H)
{
    const int64_t n = B * T * H;
    float *host = tu_malloc((size_t)n * 4 * 3), *out[2];
    tu_fill_f32(host, n, 0.5, 1.0);
    tu_fill_f32(host + n, 2 * n, -1.0, 1.0);
    void *pa, *pb, *pdh, *ph, *pda, *pdb;
    float *d_a = dev_upload(host, n, 4, 0, &pa), *d_b = dev_upload(host + n, n, 4, 0, &pb);
    float *d_dh = dev_upload(host + 2 * n, n, 4, 0, &pdh);
    float *d_h = dev_alloc(n, 4, 0, &ph), *d_da = dev_alloc(n, 4, 0, &pda), *d_db = dev_alloc(n, 4, 0, &pdb);
    prnn_scan_desc d = prnn_scan_desc_make(B, T, H);
    d.algo = PRNN_SCAN_FIXED;
    for (int run = 0; run < 2; run++) {
        poison(d_h, n, 4), poison(d_da, n, 4), poison(d_db, n, 4);
        TU_REQUIRE(prnn_scan_forward(g_gpu, &d, d_h, NULL, d_a, d_b, NULL));
        TU_REQUIRE(prnn_scan_backward(g_gpu, &d, d_da, d_db, NULL, d_a, d_h, NULL, d_dh, NULL));
        TU_REQUIRE(prnn_ctx_synchronize(g_gpu));
        out[run] = tu_malloc((size_t)n * 4 * 3);
        CUDA_CHECK(cudaMemcpy(out[run], d_h, (size_t)n * 4, cudaMemcpyDeviceToHost));
        CUDA_CHECK(cudaMemcpy(out[run] + n, d_da, (size_t)n * 4, cudaMemcpyDeviceToHost));
        CUDA_CHECK(cudaMemcpy(out[run] + 2 * n, d_db, (size_t)n * 4, cudaMemcpyDeviceToHost));
    }
    tu_check(!memcmp(out[0], out[1], (size_t)n * 4 * 3),
             "fixed B=%lld T=%lld H=%lld: two runs give the same h, da, db bit for bit",
             (long long)B, (long long)T, (long long)H);
    void *bases[] = {pa, pb, pdh, ph, pda, pdb};
    for (int i = 0; i < 6; i++) CUDA_CHECK(cudaFree(bases[i]));
    free(host), free(out[0]), free(out[1]);
}

/* Shapes FIXED runs as STRIPED (16 x 1024 channels), as the tree (few
 * short chains) and with WINDOW's backward (few chains, T >= 2048). */
static void test_fixed_repeats(int quick)
{
    fixed_repeat(16, quick ? 70 : 700, 1024);
    fixed_repeat(2, quick ? 700 : 1500, 64);
    fixed_repeat(2, quick ? 2048 : 70001, 64);
}

/* A context on a new non-blocking stream of the caller's (*s). */
static prnn_ctx *user_stream_ctx(cudaStream_t *s)
{
    CUDA_CHECK(cudaStreamCreateWithFlags(s, cudaStreamNonBlocking));
    prnn_ctx_config cfg = prnn_ctx_config_default();
    cfg.device = PRNN_DEVICE_CUDA;
    cfg.cuda_device = 0;
    cfg.cuda_stream = (void *)*s;
    prnn_ctx *ctx = NULL;
    TU_REQUIRE(prnn_ctx_init(&ctx, &cfg));
    return ctx;
}

#ifndef PRNN_CUDA_SIM /* the simulator has no graphs */
/* FIXED in a CUDA graph: a captured call takes no tickets (a few long
 * chains run the tree there, WINDOW outside capture), so the graph can be
 * replayed. A replayed WINDOW would find its tickets used and leave the
 * poisoned outputs. The first, uncaptured calls also grow the workspace,
 * so that nothing is allocated during capture. */
static void test_fixed_capture(void)
{
    const int64_t B = 1, T = 4001, H = 64, n = B * T * H;
    cudaStream_t s;
    prnn_ctx *ctx = user_stream_ctx(&s);
    float *host = tu_malloc((size_t)n * 4 * 3), *ref = tu_malloc((size_t)n * 4 * 3), *out[2];
    tu_fill_f32(host, n, 0.5, 1.0);
    tu_fill_f32(host + n, 2 * n, -1.0, 1.0);
    void *pa, *pb, *pdh, *ph, *pda, *pdb;
    float *d_a = dev_upload(host, n, 4, 0, &pa), *d_b = dev_upload(host + n, n, 4, 0, &pb);
    float *d_dh = dev_upload(host + 2 * n, n, 4, 0, &pdh);
    float *d_h = dev_alloc(n, 4, 0, &ph), *d_da = dev_alloc(n, 4, 0, &pda), *d_db = dev_alloc(n, 4, 0, &pdb);
    float *const outs[3] = {d_h, d_da, d_db};
    prnn_scan_desc d = prnn_scan_desc_make(B, T, H);
    d.algo = PRNN_SCAN_FIXED;
    TU_REQUIRE(prnn_scan_forward(ctx, &d, d_h, NULL, d_a, d_b, NULL));
    TU_REQUIRE(prnn_scan_backward(ctx, &d, d_da, d_db, NULL, d_a, d_h, NULL, d_dh, NULL));
    CUDA_CHECK(cudaStreamSynchronize(s));
    for (int i = 0; i < 3; i++)
        CUDA_CHECK(cudaMemcpy(ref + i * n, outs[i], (size_t)n * 4, cudaMemcpyDeviceToHost));

    cudaGraph_t g = NULL;
    CUDA_CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
    const prnn_status sf = prnn_scan_forward(ctx, &d, d_h, NULL, d_a, d_b, NULL);
    const prnn_status sb = prnn_scan_backward(ctx, &d, d_da, d_db, NULL, d_a, d_h, NULL, d_dh, NULL);
    CUDA_CHECK(cudaStreamEndCapture(s, &g));
    tu_check(sf == PRNN_OK && sb == PRNN_OK, "fixed capture: forward and backward captured (%s, %s)",
             prnn_strerror(sf), prnn_strerror(sb));
    cudaGraphExec_t ge;
    CUDA_CHECK(cudaGraphInstantiate(&ge, g, 0));
    for (int run = 0; run < 2; run++) {
        for (int i = 0; i < 3; i++) poison(outs[i], n, 4);
        CUDA_CHECK(cudaGraphLaunch(ge, s));
        CUDA_CHECK(cudaStreamSynchronize(s));
        out[run] = tu_malloc((size_t)n * 4 * 3);
        for (int i = 0; i < 3; i++)
            CUDA_CHECK(cudaMemcpy(out[run] + i * n, outs[i], (size_t)n * 4, cudaMemcpyDeviceToHost));
    }
    tu_check(!memcmp(out[0], out[1], (size_t)n * 4 * 3),
             "fixed capture: two replays of the graph give the same h, da, db bit for bit");
    const tu_err e = tu_compare_f32(out[1], ref, 3 * n, tol_f32.floor_, tol_f32.tol, "h, da, db");
    tu_check(!e.bad, "fixed capture: the replayed scans (tree) against the uncaptured ones (WINDOW): max err %.2e (tol %.0e: %s)",
             e.max_err, tol_f32.tol, tol_f32.why);
    CUDA_CHECK(cudaGraphExecDestroy(ge));
    CUDA_CHECK(cudaGraphDestroy(g));
    void *bases[] = {pa, pb, pdh, ph, pda, pdb};
    for (int i = 0; i < 6; i++) CUDA_CHECK(cudaFree(bases[i]));
    prnn_ctx_free(ctx);
    CUDA_CHECK(cudaStreamDestroy(s));
    free(host), free(ref), free(out[0]), free(out[1]);
}
#endif

static void test_user_stream(void)
{
    cudaStream_t s;
    prnn_ctx *ctx = user_stream_ctx(&s);
    tu_check(prnn_ctx_cuda_stream(ctx) == (void *)s, "user stream: the context runs on the given stream");
    const double e = forward_error(ctx, PRNN_SCAN_CHUNKED, 3, 2000, 40, s);
    tu_check(e <= tol_f32.tol, "user stream: results complete after cudaStreamSynchronize(user stream): max err %.2e (tol %.0e)",
             e, tol_f32.tol);
    prnn_ctx_free(ctx);
    tu_check(cudaStreamQuery(s) == cudaSuccess, "user stream: still valid after prnn_ctx_free (not destroyed by the context)");
    CUDA_CHECK(cudaStreamDestroy(s));
}

static void test_errors(void)
{
    prnn_scan_desc d = prnn_scan_desc_make(2, 8, 4);
    d.dtype = PRNN_DTYPE_F64;
    void *buf;
    CUDA_CHECK(cudaMalloc(&buf, 2 * 8 * 4 * 8 * 6));
    char *p = (char *)buf;
    const size_t t = 2 * 8 * 4 * 8;
    prnn_status s = prnn_scan_forward(g_gpu, &d, p, NULL, p + t, p + 2 * t, NULL);
    tu_check(s == PRNN_ERR_UNSUPPORTED, "F64 forward on CUDA -> PRNN_ERR_UNSUPPORTED (got %s)", prnn_strerror(s));
    s = prnn_scan_backward(g_gpu, &d, p, p + t, NULL, p + 2 * t, p + 3 * t, NULL, p + 4 * t, NULL);
    tu_check(s == PRNN_ERR_UNSUPPORTED, "F64 backward on CUDA -> PRNN_ERR_UNSUPPORTED (got %s)", prnn_strerror(s));
    CUDA_CHECK(cudaFree(buf));

    int count = 0;
    CUDA_CHECK(cudaGetDeviceCount(&count));
    prnn_ctx_config cfg = prnn_ctx_config_default();
    cfg.device = PRNN_DEVICE_CUDA;
    cfg.cuda_device = count; /* one past the last */
    prnn_ctx *ctx = NULL;
    s = prnn_ctx_init(&ctx, &cfg);
    tu_check(s == PRNN_ERR_INVALID_ARGUMENT && ctx == NULL,
             "device ordinal %d of %d -> PRNN_ERR_INVALID_ARGUMENT (got %s)", count, count, prnn_strerror(s));
    if (s == PRNN_OK) prnn_ctx_free(ctx);
    tu_check(prnn_ctx_device(g_gpu) == PRNN_DEVICE_CUDA && prnn_ctx_cuda_stream(g_gpu) != NULL,
             "CUDA context reports its device and stream");
}

/* Many channels: the striped scan's configurations (on an H200, fp32
 * in 256-byte stripes: 16 x 1024 forward 3 steps at 2 blocks per SM,
 * backward 4 at 1; 16 x 768 backward 2 at 2; 32 x 1024 two waves of
 * 2 per SM forward; in 128-byte stripes: 1 x 8960 forward 4 at 1 and
 * backward 4 at 1; 16-bit in 256-byte stripes: 32 x 1024 forward 8 at
 * 1, backward 2 at 2; in 128-byte stripes: 32 x 768, where 256-byte
 * ones would make a single wave at 2 per SM, 16 x 1024, 16 x 768), the
 * AUTO choice between it and the chunked scan, and FIXED's
 * between it and the tree, both directions, every dtype. Where the card's
 * memory gives under 30 GB/s an SM (an H100; the simulator with
 * PRNN_SIM_MEM_KHZ=2619000 PRNN_SIM_BUS_BITS=5120), the 16-bit backward
 * at 16 x 768 (96 stripes) is unstaged. The 16-bit forward's long rows in
 * 256-byte stripes run unstaged where each block gets under 45 GB/s of
 * the peak bandwidth: on an H100 at 16 x 768 and 16 x 1024 (96 and 128
 * stripes), on an H200 (and the simulator's default memory) at 16 x 1024
 * only. */
static void test_many_channels(int quick)
{
    const prnn_dtype dtypes[] = {PRNN_DTYPE_F32, PRNN_DTYPE_BF16, PRNN_DTYPE_F16};
    for (int di = 0; di < 3; di++) {
        run_case(PRNN_SCAN_STRIPED, dtypes[di], (shape){16, quick ? 70 : 1000, 1024, 0}, &OPTS[5]);
        run_case(PRNN_SCAN_AUTO, dtypes[di], (shape){16, quick ? 70 : 1000, 1024, 0}, &OPTS[5]);
        run_case(PRNN_SCAN_FIXED, dtypes[di], (shape){16, quick ? 70 : 1000, 1024, 0}, &OPTS[5]);
        run_case(PRNN_SCAN_FIXED, dtypes[di], (shape){3, quick ? 300 : 1000, 128, 0}, &OPTS[5]);
        run_case(PRNN_SCAN_AUTO, dtypes[di], (shape){32, quick ? 40 : 300, 1024, 0}, &OPTS[5]);
        run_case(PRNN_SCAN_AUTO, dtypes[di], (shape){16, quick ? 70 : 700, 768, 0}, &OPTS[5]);
        run_case(PRNN_SCAN_AUTO, dtypes[di], (shape){1, quick ? 70 : 700, 8960, 0}, &OPTS[5]);
        run_case(PRNN_SCAN_AUTO, dtypes[di], (shape){32, quick ? 40 : 300, 768, 0}, &OPTS[5]);
        /* 16 x 768 and 16 x 1024 with rows of several tiles in every
         * configuration; the 16-bit forward stages tiles ahead there (2 of
         * 12 steps a lane from T = 16384 on unless unstaged, else 1 of 8),
         * and so does the 16-bit backward (1 of 8), on cards of at least
         * 30 GB/s an SM */
        run_case(PRNN_SCAN_AUTO, dtypes[di], (shape){16, quick ? 600 : 16400, 768, 0}, &OPTS[5]);
        run_case(PRNN_SCAN_AUTO, dtypes[di], (shape){16, quick ? 600 : 16400, 1024, 0}, &OPTS[5]);
        /* 16 x 704: 96 stripes of 256 bytes in 16-bit storage, as at 16 x
         * 768, but the last stripe of each row holds 64 of its 128 channels */
        run_case(PRNN_SCAN_AUTO, dtypes[di], (shape){16, quick ? 600 : 16400, 704, 0}, &OPTS[5]);
        run_case(PRNN_SCAN_STRIPED, dtypes[di], (shape){16, quick ? 600 : 2000, 768, 0}, &OPTS[0]);
    }
}

/* ------------------------------------------------------------------------ */

int main(int argc, char **argv)
{
    int quick = 0, window_only = 0, many_only = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--quick")) quick = 1;
        else if (!strcmp(argv[i], "--window")) window_only = 1;
        else if (!strcmp(argv[i], "--many")) many_only = 1;
        else {
            fprintf(stderr, "usage: %s [--quick] [--window | --many]\n", argv[0]);
            return 2;
        }
    }
    if (!prnn_cuda_available()) {
        printf("no CUDA device: GPU tests skipped\n");
        printf("0 passed, 0 failed\n");
        return 0;
    }
    const uint64_t seed = tu_seed_from_env();
    printf("seed %llu (PRNN_TEST_SEED=%llu repeats this run)%s\n", (unsigned long long)seed,
           (unsigned long long)seed, quick ? ", quick" : "");
    tu_seed(seed);

    TU_REQUIRE(prnn_ctx_init(&g_cpu, NULL));
    prnn_ctx_config cfg = prnn_ctx_config_default();
    cfg.device = PRNN_DEVICE_CUDA;
    cfg.cuda_device = 0;
    TU_REQUIRE(prnn_ctx_init(&g_gpu, &cfg));
    /* --window or --many: those cases alone (at full size unless --quick) */
    if (window_only || many_only) {
        if (window_only) {
            test_window(quick);
        } else {
            test_many_channels(quick);
            test_kernel_choice(quick);
        }
        prnn_ctx_free(g_gpu);
        prnn_ctx_free(g_cpu);
        return tu_finish();
    }

    /* Shapes run for every algorithm x dtype x option set. They cover T = 1,
     * 31, 33 and 65537 (many look-back windows), B*H = 1, 255 and 16*1024,
     * odd H (scalar path), H a multiple of the vector width, and unaligned
     * pointers (scalar fallback). */
    const shape full[] = {
        {1, 1, 1, 0},     {3, 1, 255, 0},    {2, 31, 3, 0},       {3, 33, 255, 0},
        {5, 33, 8, 0},    {3, 65, 64, 1},    {4, 300, 40, 0},     {16, 33, 1024, 0},
        {1, 65537, 1, 0}, {3, 65537, 3, 0},  {1, 65537, 255, 0},
    };
    const shape quick_shapes[] = {
        {1, 1, 1, 0},     {2, 31, 3, 0},   {3, 33, 255, 0},  {5, 33, 8, 0},
        {3, 65, 64, 1},   {2, 700, 16, 0}, {1, 2600, 128, 0}, /* 41 chunks in one chain */
    };
    const shape *shapes = quick ? quick_shapes : full;
    const int nshapes = quick ? (int)(sizeof quick_shapes / sizeof quick_shapes[0])
                              : (int)(sizeof full / sizeof full[0]);
    const prnn_dtype dtypes[] = {PRNN_DTYPE_F32, PRNN_DTYPE_BF16, PRNN_DTYPE_F16};
    const prnn_scan_algo algos[] = {PRNN_SCAN_SERIAL, PRNN_SCAN_TREE, PRNN_SCAN_CHUNKED,
                                    PRNN_SCAN_STRIPED};
    const int nalgos = (int)(sizeof algos / sizeof algos[0]);

    for (int si = 0; si < nshapes; si++)
        for (int ai = 0; ai < nalgos; ai++)
            for (int di = 0; di < 3; di++)
                for (int oi = 0; oi < N_OPTS; oi++) {
                    /* the largest full shape: plain, varlen and all only */
                    if (shapes[si].B * shapes[si].H >= 255 && shapes[si].T > 60000 &&
                        oi != 0 && oi != 4 && oi != 5)
                        continue;
                    run_case(algos[ai], dtypes[di], shapes[si], &OPTS[oi]);
                }

    if (!quick) {
        /* T = 2^20 + 3 with small B*H: the chunked scan splits time over
         * hundreds of blocks; every algorithm on the scalar path, the
         * parallel ones also on the vector path. */
        const shape longT[] = {{1, (1 << 20) + 3, 1, 0}, {1, (1 << 20) + 3, 64, 0}};
        for (int ai = 0; ai < nalgos; ai++)
            for (int di = 0; di < 3; di++) {
                run_case(algos[ai], dtypes[di], longT[0], &OPTS[5]);
                if (algos[ai] != PRNN_SCAN_SERIAL && dtypes[di] != PRNN_DTYPE_F16)
                    run_case(algos[ai], dtypes[di], longT[1], &OPTS[5]);
            }
        /* AUTO there: CHUNKED (the backward with h_{s-1} staged in
         * shared memory on the vector path) */
        for (int di = 0; di < 2; di++) run_case(PRNN_SCAN_AUTO, dtypes[di], longT[1], &OPTS[5]);
        /* Few long chains on the vector path (CHUNKED's few-chain tiles:
         * the forward's staged steps, the backward's staged h_{s-1}) with
         * every option set and dtype: one chain, three, and H = 96, which
         * the 64-column tiles (fp32, the 16-bit forward) cut into two,
         * the second half empty. */
        const shape few_long[] = {{1, 300007, 64, 0}, {3, 150001, 64, 0}, {2, 100003, 96, 0}};
        for (int si = 0; si < (int)(sizeof few_long / sizeof few_long[0]); si++)
            for (int di = 0; di < 3; di++)
                for (int oi = 0; oi < N_OPTS; oi++)
                    run_case(PRNN_SCAN_CHUNKED, dtypes[di], few_long[si], &OPTS[oi]);
    }
    test_window(quick);
    test_many_channels(quick);
    test_kernel_choice(quick);
    run_case(PRNN_SCAN_AUTO, PRNN_DTYPE_F32, (shape){3, 1000, 128, 0}, &OPTS[5]);
    /* Lengths for more rows than the device copy first holds (256 rows):
     * it grows twice between scans, the smaller copy freed only once the
     * kernels queued before are done. */
    run_case(PRNN_SCAN_AUTO, PRNN_DTYPE_F32, (shape){300, 17, 3, 0}, &OPTS[4]);
    run_case(PRNN_SCAN_STRIPED, PRNN_DTYPE_BF16, (shape){700, 9, 2, 0}, &OPTS[5]);

    test_workspace_reuse(quick);
    test_fixed_repeats(quick);
#ifndef PRNN_CUDA_SIM
    test_fixed_capture();
#endif
    test_user_stream();
    test_errors();

    prnn_ctx_free(g_gpu);
    prnn_ctx_free(g_cpu);
    return tu_finish();
}
