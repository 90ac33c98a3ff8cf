/*
 * test_blocks_cuda.c - the GPU test suite of the model blocks and optimizer
 * ops (prnn_blocks.h): every op on a CUDA context against the CPU library
 * (the oracle) run in F32 on the same inputs rounded to the storage type,
 * F32 with tight tolerances and BF16 with loose ones; plus
 *
 *   - dropout masks identical to the CPU's, bit for bit, in both dtypes;
 *   - AdamW identical to the CPU (fp32 weights, moments, bf16 copy);
 *   - the fixed-order sums (parameter gradients, loss, gradient norm) give
 *     the same bits when repeated;
 *   - out-of-range ids and targets: zero rows / ignored rows and the flag;
 *   - the statuses of dtypes a CUDA context does not take.
 *
 * Size letters: N rows, D features, O outputs, V vocabulary, n elements.
 *
 * Usage: prnn_gpu_test_blocks [--quick] [--seed N] (--quick: small shapes
 * only, for compute-sanitizer). PRNN_TEST_SEED=N also sets the seed.
 * Without a CUDA device it prints a skip line and passes.
 */
#include "test_util.h"

#include "prnn_blocks.h"

static prnn_ctx *g_cpu, *g_gpu;
static int g_quick;

#define F32 PRNN_DTYPE_F32
#define BF16 PRNN_DTYPE_BF16

/* ------------------------------------------------------------------------ */
/* Host storage conversions and device buffers                              */

static uint16_t f32_to_bf16(float f) /* round to nearest even */
{
    uint32_t x;
    memcpy(&x, &f, 4);
    if ((x & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((x >> 16) | 0x40u);
    x += 0x7fffu + ((x >> 16) & 1u);
    return (uint16_t)(x >> 16);
}

static float bf16_to_f32(uint16_t h)
{
    const uint32_t x = (uint32_t)h << 16;
    float f;
    memcpy(&f, &x, 4);
    return f;
}

static const char *dt_name(prnn_dtype dt) { return dt == BF16 ? "bf16" : "f32"; }

static size_t esize(prnn_dtype dt) { return dt == BF16 ? 2 : 4; }

static float *rnd_f32(int64_t n, double lo, double hi)
{
    float *x = tu_malloc((size_t)n * 4);
    tu_fill_f32(x, n, lo, hi);
    return x;
}

/* Magnitudes in [lo, hi) with random signs: never zero. */
static float *rnd_signed(int64_t n, double lo, double hi)
{
    float *x = rnd_f32(n, lo, hi);
    for (int64_t i = 0; i < n; i++)
        if (tu_next() & 1) x[i] = -x[i];
    return x;
}

/* Rounds x (n floats) to dt in place (what the GPU stores) and returns a
 * device copy in dt. */
static void *dev_from(float *x, int64_t n, prnn_dtype dt)
{
    void *d, *h = tu_malloc((size_t)n * esize(dt));
    if (dt == BF16) {
        uint16_t *o = h;
        for (int64_t i = 0; i < n; i++) {
            o[i] = f32_to_bf16(x[i]);
            x[i] = bf16_to_f32(o[i]);
        }
    } else {
        memcpy(h, x, (size_t)n * 4);
    }
    TU_REQUIRE(prnn_mem_alloc(g_gpu, &d, (size_t)n * esize(dt)));
    TU_REQUIRE(prnn_mem_upload(g_gpu, d, h, (size_t)n * esize(dt)));
    TU_REQUIRE(prnn_ctx_synchronize(g_gpu)); /* h is freed next */
    free(h);
    return d;
}

/* A device buffer of `bytes` poisoned with 0xFF (NaN in fp32 and bf16), so
 * an element an op fails to write shows as a mismatch. */
static void *dev_poison(size_t bytes)
{
    void *d, *h = tu_malloc(bytes);
    memset(h, 0xFF, bytes);
    TU_REQUIRE(prnn_mem_alloc(g_gpu, &d, bytes));
    TU_REQUIRE(prnn_mem_upload(g_gpu, d, h, bytes));
    TU_REQUIRE(prnn_ctx_synchronize(g_gpu));
    free(h);
    return d;
}

static void *dev_bytes(const void *h, size_t bytes)
{
    void *d;
    TU_REQUIRE(prnn_mem_alloc(g_gpu, &d, bytes));
    TU_REQUIRE(prnn_mem_upload(g_gpu, d, h, bytes));
    TU_REQUIRE(prnn_ctx_synchronize(g_gpu));
    return d;
}

/* n elements of dt from the device, as floats. */
static float *host_from(const void *d, int64_t n, prnn_dtype dt)
{
    float *x = tu_malloc((size_t)n * 4);
    if (dt == BF16) {
        uint16_t *h = tu_malloc((size_t)n * 2);
        TU_REQUIRE(prnn_mem_download(g_gpu, h, d, (size_t)n * 2));
        for (int64_t i = 0; i < n; i++) x[i] = bf16_to_f32(h[i]);
        free(h);
    } else {
        TU_REQUIRE(prnn_mem_download(g_gpu, x, d, (size_t)n * 4));
    }
    return x;
}

static float *copy_f32(const float *x, int64_t n)
{
    float *y = tu_malloc((size_t)n * 4);
    memcpy(y, x, (size_t)n * 4);
    return y;
}

static void dfree(void *d) { prnn_mem_free(g_gpu, d); }

/* ------------------------------------------------------------------------ */
/* Tolerances, with where they come from                                    */

/*
 * Measure: |gpu - cpu| / (|cpu| + rms(cpu)). The CPU oracle computes in
 * double from the same (rounded) inputs and rounds once to fp32.
 *
 * F32: fp32 arithmetic on the GPU: sums of up to a few thousand terms
 * (rows of D or V, column sums over N rows in two passes) in a different
 * order, ~sqrt(terms) * 6e-8 of the scale, and the cancellation in the
 * norms' dx: 2e-5 is ~300 ulp, far below a wrong answer.
 *
 * BF16 outputs: one rounding to 8 significant bits (half an ulp is 2^-9
 * to 2^-8 of the value, 2e-3 to 3.9e-3) on top of the fp32 error: 5e-3.
 * The fp32 outputs of BF16 runs (statistics, parameter gradients, losses)
 * see the same rounded inputs as the CPU and take the F32 tolerance.
 */
#define TOL_F32 2e-5
#define TOL_BF16 5e-3

static double tol_out(prnn_dtype dt) { return dt == BF16 ? TOL_BF16 : TOL_F32; }

static double rms_f32(const float *x, int64_t n)
{
    double s = 0;
    for (int64_t i = 0; i < n; i++) s += (double)x[i] * x[i];
    return sqrt(s / (double)n) + 1e-30;
}

static int close_to(const char *label, const float *got, const float *want, int64_t n, double tol)
{
    tu_err e = tu_compare_f32(got, want, n, rms_f32(want, n), tol, label);
    tu_check(e.bad == 0, "%s: max rel err %.2e (tol %.0e)", label, e.max_err, tol);
    return e.bad == 0;
}

/* Downloads a device tensor of dt and checks it against the CPU's. */
static void check_dev(const char *label, const void *d, prnn_dtype dt, const float *want,
                      int64_t n, double tol)
{
    float *got = host_from(d, n, dt);
    close_to(label, got, want, n, tol);
    free(got);
}

static void check_same_bits(const char *label, const void *d1, const void *d2, size_t bytes)
{
    void *a = tu_malloc(bytes), *b = tu_malloc(bytes);
    TU_REQUIRE(prnn_mem_download(g_gpu, a, d1, bytes));
    TU_REQUIRE(prnn_mem_download(g_gpu, b, d2, bytes));
    tu_check(!memcmp(a, b, bytes), "%s", label);
    free(a), free(b);
}

/* ------------------------------------------------------------------------ */
/* Embedding                                                                */

static void check_embedding(int64_t N, int64_t V, int64_t D, prnn_dtype dt)
{
    char label[160];
    char tag[64];
    snprintf(tag, sizeof tag, "%s N=%lld V=%lld D=%lld", dt_name(dt), (long long)N, (long long)V,
             (long long)D);
    int32_t *ids = tu_malloc((size_t)N * 4);
    for (int64_t n = 0; n < N; n++) ids[n] = (int32_t)(tu_next() % (uint64_t)V);
    float *table = rnd_signed(V * D, 0.1, 1), *dy = rnd_signed(N * D, 0.1, 1);
    float *dt0 = rnd_f32(V * D, -1, 1);
    void *d_table = dev_from(table, V * D, dt), *d_dy = dev_from(dy, N * D, dt);
    void *d_ids = dev_bytes(ids, (size_t)N * 4), *d_dt = dev_from(dt0, V * D, F32);
    void *d_y = dev_poison((size_t)(N * D) * esize(dt));

    float *y = tu_malloc((size_t)(N * D) * 4), *dtab = copy_f32(dt0, V * D);
    TU_REQUIRE(prnn_embedding_forward(g_cpu, y, NULL, ids, table, N, V, D, F32));
    TU_REQUIRE(prnn_embedding_backward(g_cpu, dtab, ids, dy, N, V, D, F32));
    TU_REQUIRE(prnn_embedding_forward(g_gpu, d_y, NULL, d_ids, d_table, N, V, D, dt));
    TU_REQUIRE(prnn_embedding_backward(g_gpu, d_dt, d_ids, d_dy, N, V, D, dt));
    snprintf(label, sizeof label, "embedding forward %s (a copy: exact)", tag);
    check_dev(label, d_y, dt, y, N * D, 0.0);
    /* atomics: repeated ids sum in another order than the CPU's */
    snprintf(label, sizeof label, "embedding backward %s dtable (fp32 atomics)", tag);
    check_dev(label, d_dt, F32, dtab, V * D, TOL_F32);

    free(ids), free(table), free(dy), free(dt0), free(y), free(dtab);
    dfree(d_table), dfree(d_dy), dfree(d_ids), dfree(d_dt), dfree(d_y);
}

/* Out-of-range ids on CUDA: zero rows, skipped in the backward, the flag. */
static void check_embedding_bad_ids(void)
{
    const int64_t N = 40, V = 9, D = 20;
    int32_t *ids = tu_malloc((size_t)N * 4), *ok_ids = tu_malloc((size_t)N * 4);
    int64_t nok = 0;
    for (int64_t n = 0; n < N; n++) {
        ids[n] = n % 7 == 3 ? (n % 2 ? (int32_t)V : -5) : (int32_t)(tu_next() % (uint64_t)V);
        if (ids[n] >= 0 && ids[n] < V) ok_ids[nok++] = ids[n];
    }
    float *table = rnd_signed(V * D, 0.1, 1), *dy = rnd_signed(N * D, 0.1, 1);
    float *dy_ok = tu_malloc((size_t)(N * D) * 4), *dtab = tu_malloc((size_t)(V * D) * 4);
    for (int64_t n = 0, k = 0; n < N; n++)
        if (ids[n] >= 0 && ids[n] < V) memcpy(dy_ok + (k++) * D, dy + n * D, (size_t)D * 4);
    memset(dtab, 0, (size_t)(V * D) * 4);
    TU_REQUIRE(prnn_embedding_backward(g_cpu, dtab, ok_ids, dy_ok, nok, V, D, F32));

    void *d_table = dev_from(table, V * D, F32), *d_dy = dev_from(dy, N * D, F32);
    void *d_ids = dev_bytes(ids, (size_t)N * 4), *d_y = dev_poison((size_t)(N * D) * 4);
    void *d_dt, *d_bad;
    TU_REQUIRE(prnn_mem_alloc(g_gpu, &d_dt, (size_t)(V * D) * 4));
    TU_REQUIRE(prnn_mem_alloc(g_gpu, &d_bad, 4));
    TU_REQUIRE(prnn_mem_zero(g_gpu, d_dt, (size_t)(V * D) * 4));
    TU_REQUIRE(prnn_mem_zero(g_gpu, d_bad, 4));
    TU_REQUIRE(prnn_embedding_forward(g_gpu, d_y, d_bad, d_ids, d_table, N, V, D, F32));
    TU_REQUIRE(prnn_embedding_backward(g_gpu, d_dt, d_ids, d_dy, N, V, D, F32));
    float *y = host_from(d_y, N * D, F32);
    int32_t bad = 0;
    TU_REQUIRE(prnn_mem_download(g_gpu, &bad, d_bad, 4));
    int64_t wrong = 0;
    for (int64_t n = 0; n < N; n++)
        for (int64_t d = 0; d < D; d++) {
            const int valid = ids[n] >= 0 && ids[n] < V;
            wrong += y[n * D + d] != (valid ? table[ids[n] * D + d] : 0.0f);
        }
    tu_check(bad == 1 && wrong == 0,
             "embedding f32 out-of-range ids: flag %d, zero rows and table rows (%lld wrong)", bad,
             (long long)wrong);
    check_dev("embedding f32 out-of-range ids: backward skips them", d_dt, F32, dtab, V * D, TOL_F32);

    free(ids), free(ok_ids), free(table), free(dy), free(dy_ok), free(dtab), free(y);
    dfree(d_table), dfree(d_dy), dfree(d_ids), dfree(d_y), dfree(d_dt), dfree(d_bad);
}

/* ------------------------------------------------------------------------ */
/* Linear                                                                   */

static void check_linear(int64_t N, int64_t D, int64_t O, int use_bias, prnn_dtype dt)
{
    char label[160], tag[80];
    snprintf(tag, sizeof tag, "%s N=%lld D=%lld O=%lld%s", dt_name(dt), (long long)N, (long long)D,
             (long long)O, use_bias ? "" : " no bias");
    float *x = rnd_signed(N * D, 0.1, 1), *W = rnd_signed(D * O, 0.1, 1), *b = rnd_signed(O, 0.1, 1);
    float *dy = rnd_signed(N * O, 0.1, 1), *dW0 = rnd_f32(D * O, -1, 1), *db0 = rnd_f32(O, -1, 1);
    void *d_x = dev_from(x, N * D, dt), *d_W = dev_from(W, D * O, dt), *d_b = dev_from(b, O, dt);
    void *d_dy = dev_from(dy, N * O, dt), *d_dW = dev_from(dW0, D * O, F32);
    void *d_db = dev_from(db0, O, F32), *d_db2 = dev_from(db0, O, F32);
    void *d_y = dev_poison((size_t)(N * O) * esize(dt)), *d_dx = dev_poison((size_t)(N * D) * esize(dt));

    float *y = tu_malloc((size_t)(N * O) * 4), *dx = tu_malloc((size_t)(N * D) * 4);
    float *dW = copy_f32(dW0, D * O), *db = copy_f32(db0, O);
    TU_REQUIRE(prnn_linear_forward(g_cpu, y, x, W, use_bias ? b : NULL, N, D, O, F32));
    TU_REQUIRE(prnn_linear_backward(g_cpu, dx, dW, use_bias ? db : NULL, dy, x, W, N, D, O, F32));
    TU_REQUIRE(prnn_linear_forward(g_gpu, d_y, d_x, d_W, use_bias ? d_b : NULL, N, D, O, dt));
    TU_REQUIRE(prnn_linear_backward(g_gpu, d_dx, d_dW, use_bias ? d_db : NULL, d_dy, d_x, d_W, N, D, O, dt));
    snprintf(label, sizeof label, "linear forward %s", tag);
    check_dev(label, d_y, dt, y, N * O, tol_out(dt));
    snprintf(label, sizeof label, "linear backward %s dx", tag);
    check_dev(label, d_dx, dt, dx, N * D, tol_out(dt));
    /* cuBLAS sums the N products in its own order, in fp32 */
    snprintf(label, sizeof label, "linear backward %s dW (accumulated)", tag);
    check_dev(label, d_dW, F32, dW, D * O, TOL_F32);
    if (use_bias) {
        snprintf(label, sizeof label, "linear backward %s dbias (accumulated)", tag);
        check_dev(label, d_db, F32, db, O, TOL_F32);
        TU_REQUIRE(prnn_linear_backward(g_gpu, NULL, d_dW, d_db2, d_dy, d_x, d_W, N, D, O, dt));
        snprintf(label, sizeof label, "linear backward %s dbias: same bits when repeated (dx = NULL)", tag);
        check_same_bits(label, d_db, d_db2, (size_t)O * 4);
    }

    free(x), free(W), free(b), free(dy), free(dW0), free(db0), free(y), free(dx), free(dW), free(db);
    dfree(d_x), dfree(d_W), dfree(d_b), dfree(d_dy), dfree(d_dW), dfree(d_db), dfree(d_db2);
    dfree(d_y), dfree(d_dx);
}

/* ------------------------------------------------------------------------ */
/* RMSNorm and LayerNorm                                                    */

static void check_norm(int layer, int64_t N, int64_t D, int use_bias, prnn_dtype dt)
{
    char label[160], tag[80];
    snprintf(tag, sizeof tag, "%s %s N=%lld D=%lld%s", layer ? "layernorm" : "rmsnorm",
             dt_name(dt), (long long)N, (long long)D, layer && !use_bias ? " no bias" : "");
    const double eps = 1e-5;
    float *x = rnd_f32(N * D, -1, 3), *g = rnd_signed(D, 0.5, 1.5), *b = rnd_signed(D, 0.1, 1);
    float *dy = rnd_signed(N * D, 0.1, 1), *dg0 = rnd_f32(D, -1, 1), *db0 = rnd_f32(D, -1, 1);
    void *d_x = dev_from(x, N * D, dt), *d_g = dev_from(g, D, dt), *d_b = dev_from(b, D, dt);
    void *d_dy = dev_from(dy, N * D, dt), *d_dg = dev_from(dg0, D, F32), *d_db = dev_from(db0, D, F32);
    void *d_dg2 = dev_from(dg0, D, F32), *d_db2 = dev_from(db0, D, F32);
    void *d_y = dev_poison((size_t)(N * D) * esize(dt)), *d_dx = dev_poison((size_t)(N * D) * esize(dt));
    void *d_mean = dev_poison((size_t)N * 4), *d_rstd = dev_poison((size_t)N * 4);
    const void *bias = use_bias ? b : NULL, *d_bias = use_bias ? d_b : NULL;

    float *y = tu_malloc((size_t)(N * D) * 4), *dx = tu_malloc((size_t)(N * D) * 4);
    float *mean = tu_malloc((size_t)N * 4), *rstd = tu_malloc((size_t)N * 4);
    float *dg = copy_f32(dg0, D), *db = copy_f32(db0, D);
    if (layer) {
        TU_REQUIRE(prnn_layernorm_forward(g_cpu, y, mean, rstd, x, g, bias, N, D, eps, F32));
        TU_REQUIRE(prnn_layernorm_backward(g_cpu, dx, dg, use_bias ? db : NULL, dy, x, g, mean, rstd, N, D, F32));
        TU_REQUIRE(prnn_layernorm_forward(g_gpu, d_y, d_mean, d_rstd, d_x, d_g, d_bias, N, D, eps, dt));
        /* the backward from the CPU's saved statistics, so that dx compares
         * the backward alone */
        void *d_cm = dev_from(mean, N, F32), *d_cr = dev_from(rstd, N, F32);
        TU_REQUIRE(prnn_layernorm_backward(g_gpu, d_dx, d_dg, use_bias ? d_db : NULL, d_dy, d_x, d_g, d_cm, d_cr, N, D, dt));
        TU_REQUIRE(prnn_layernorm_backward(g_gpu, d_dx, d_dg2, use_bias ? d_db2 : NULL, d_dy, d_x, d_g, d_cm, d_cr, N, D, dt));
        dfree(d_cm), dfree(d_cr);
        snprintf(label, sizeof label, "%s saved mean", tag);
        check_dev(label, d_mean, F32, mean, N, TOL_F32);
    } else {
        TU_REQUIRE(prnn_rmsnorm_forward(g_cpu, y, rstd, x, g, N, D, eps, F32));
        TU_REQUIRE(prnn_rmsnorm_backward(g_cpu, dx, dg, dy, x, g, rstd, N, D, F32));
        TU_REQUIRE(prnn_rmsnorm_forward(g_gpu, d_y, d_rstd, d_x, d_g, N, D, eps, dt));
        void *d_cr = dev_from(rstd, N, F32);
        TU_REQUIRE(prnn_rmsnorm_backward(g_gpu, d_dx, d_dg, d_dy, d_x, d_g, d_cr, N, D, dt));
        TU_REQUIRE(prnn_rmsnorm_backward(g_gpu, d_dx, d_dg2, d_dy, d_x, d_g, d_cr, N, D, dt));
        dfree(d_cr);
    }
    snprintf(label, sizeof label, "%s forward y", tag);
    check_dev(label, d_y, dt, y, N * D, tol_out(dt));
    snprintf(label, sizeof label, "%s saved rstd", tag);
    check_dev(label, d_rstd, F32, rstd, N, TOL_F32);
    snprintf(label, sizeof label, "%s backward dx", tag);
    check_dev(label, d_dx, dt, dx, N * D, tol_out(dt));
    snprintf(label, sizeof label, "%s backward dgain (accumulated)", tag);
    check_dev(label, d_dg, F32, dg, D, TOL_F32);
    if (layer && use_bias) {
        snprintf(label, sizeof label, "%s backward dbias (accumulated)", tag);
        check_dev(label, d_db, F32, db, D, TOL_F32);
    }
    snprintf(label, sizeof label, "%s backward: parameter gradients, same bits when repeated", tag);
    check_same_bits(label, d_dg, d_dg2, (size_t)D * 4);
    if (layer && use_bias) {
        snprintf(label, sizeof label, "%s backward: dbias, same bits when repeated", tag);
        check_same_bits(label, d_db, d_db2, (size_t)D * 4);
    }

    free(x), free(g), free(b), free(dy), free(dg0), free(db0), free(y), free(dx), free(mean);
    free(rstd), free(dg), free(db);
    dfree(d_x), dfree(d_g), dfree(d_b), dfree(d_dy), dfree(d_dg), dfree(d_db), dfree(d_dg2);
    dfree(d_db2), dfree(d_y), dfree(d_dx), dfree(d_mean), dfree(d_rstd);
}

/* ------------------------------------------------------------------------ */
/* Softmax cross-entropy                                                    */

static void check_xent(int64_t N, int64_t V, double shift, prnn_dtype dt)
{
    char label[160], tag[80];
    snprintf(tag, sizeof tag, "xent %s N=%lld V=%lld%s", dt_name(dt), (long long)N, (long long)V,
             shift != 0 ? " shift 1000" : "");
    float *z = rnd_f32(N * V, -4, 4);
    for (int64_t i = 0; i < N * V; i++) z[i] += (float)shift;
    int32_t *t = tu_malloc((size_t)N * 4);
    for (int64_t n = 0; n < N; n++) t[n] = n % 5 == 2 ? -1 : (int32_t)(tu_next() % (uint64_t)V);
    const double dloss = tu_uniform(0.5, 2);
    void *d_z = dev_from(z, N * V, dt), *d_t = dev_bytes(t, (size_t)N * 4);
    void *d_loss = dev_poison(4), *d_loss2 = dev_poison(4), *d_rl = dev_poison((size_t)N * 4);
    void *d_lse = dev_poison((size_t)N * 4), *d_dz = dev_poison((size_t)(N * V) * esize(dt));

    float loss, *rl = tu_malloc((size_t)N * 4), *lse = tu_malloc((size_t)N * 4);
    float *dz = tu_malloc((size_t)(N * V) * 4);
    TU_REQUIRE(prnn_xent_forward(g_cpu, &loss, rl, lse, NULL, z, t, N, V, F32));
    TU_REQUIRE(prnn_xent_backward(g_cpu, dz, z, t, lse, N, V, dloss, F32));
    TU_REQUIRE(prnn_xent_forward(g_gpu, d_loss, d_rl, d_lse, NULL, d_z, d_t, N, V, dt));
    TU_REQUIRE(prnn_xent_forward(g_gpu, d_loss2, NULL, NULL, NULL, d_z, d_t, N, V, dt));
    /* the backward from the CPU's lse: it checks the backward alone */
    void *d_clse = dev_from(lse, N, F32);
    TU_REQUIRE(prnn_xent_backward(g_gpu, d_dz, d_z, d_t, d_clse, N, V, dloss, dt));
    dfree(d_clse);

    /* A row loss is lse - logit, and an fp32 lse near 1000 rounds by up to
     * half an ulp (|lse| 2^-24 = 6e-5 absolute): against losses of a few
     * units that is |lse| 2^-23 relative on top of the fp32 tolerance. */
    const double lse_tol = TOL_F32 + (fabs(shift) + 10) * 0x1p-23;
    snprintf(label, sizeof label, "%s loss (mean of row losses)", tag);
    check_dev(label, d_loss, F32, &loss, 1, lse_tol);
    snprintf(label, sizeof label, "%s row losses", tag);
    check_dev(label, d_rl, F32, rl, N, lse_tol);
    snprintf(label, sizeof label, "%s lse", tag);
    check_dev(label, d_lse, F32, lse, N, TOL_F32);
    snprintf(label, sizeof label, "%s backward dlogits", tag);
    check_dev(label, d_dz, dt, dz, N * V, tol_out(dt));
    snprintf(label, sizeof label, "%s loss: same bits when repeated (without row losses)", tag);
    check_same_bits(label, d_loss, d_loss2, 4);

    free(z), free(t), free(rl), free(lse), free(dz);
    dfree(d_z), dfree(d_t), dfree(d_loss), dfree(d_loss2), dfree(d_rl), dfree(d_lse), dfree(d_dz);
}

/* Out-of-range targets on CUDA: ignored rows and the flag; -1 is no error. */
static void check_xent_bad_targets(void)
{
    const int64_t N = 30, V = 11;
    float *z = rnd_f32(N * V, -2, 2);
    int32_t *t = tu_malloc((size_t)N * 4), *t_ok = tu_malloc((size_t)N * 4);
    for (int64_t n = 0; n < N; n++) {
        t[n] = n % 6 == 1 ? (n % 4 == 1 ? (int32_t)V : -3) : (int32_t)(tu_next() % (uint64_t)V);
        t_ok[n] = t[n] >= 0 && t[n] < V ? t[n] : -1;
    }
    t[4] = -1;
    t_ok[4] = -1;
    float loss, *lse = tu_malloc((size_t)N * 4), *dz = tu_malloc((size_t)(N * V) * 4);
    TU_REQUIRE(prnn_xent_forward(g_cpu, &loss, NULL, lse, NULL, z, t_ok, N, V, F32));
    TU_REQUIRE(prnn_xent_backward(g_cpu, dz, z, t_ok, lse, N, V, 1.0, F32));

    void *d_z = dev_from(z, N * V, F32), *d_t = dev_bytes(t, (size_t)N * 4);
    void *d_ok = dev_bytes(t_ok, (size_t)N * 4), *d_loss = dev_poison(4), *d_lse = dev_poison((size_t)N * 4);
    void *d_dz = dev_poison((size_t)(N * V) * 4), *d_loss_ok = dev_poison(4), *d_bad, *d_bad_ok;
    TU_REQUIRE(prnn_mem_alloc(g_gpu, &d_bad, 4));
    TU_REQUIRE(prnn_mem_alloc(g_gpu, &d_bad_ok, 4));
    TU_REQUIRE(prnn_mem_zero(g_gpu, d_bad, 4));
    TU_REQUIRE(prnn_mem_zero(g_gpu, d_bad_ok, 4));
    TU_REQUIRE(prnn_xent_forward(g_gpu, d_loss, NULL, d_lse, d_bad, d_z, d_t, N, V, F32));
    TU_REQUIRE(prnn_xent_backward(g_gpu, d_dz, d_z, d_t, d_lse, N, V, 1.0, F32));
    int32_t bad = 0, bad_ok = 0;
    TU_REQUIRE(prnn_xent_forward(g_gpu, d_loss_ok, NULL, NULL, d_bad_ok, d_z, d_ok, N, V, F32));
    TU_REQUIRE(prnn_mem_download(g_gpu, &bad, d_bad, 4));
    TU_REQUIRE(prnn_mem_download(g_gpu, &bad_ok, d_bad_ok, 4));
    tu_check(bad == 1 && bad_ok == 0, "xent f32 out-of-range targets: flag %d (want 1); with -1 only: %d (want 0)",
             bad, bad_ok);
    check_dev("xent f32 out-of-range targets: loss as if ignored", d_loss, F32, &loss, 1, TOL_F32);
    check_dev("xent f32 out-of-range targets: dlogits rows zero", d_dz, F32, dz, N * V, TOL_F32);

    free(z), free(t), free(t_ok), free(lse), free(dz);
    dfree(d_z), dfree(d_t), dfree(d_ok), dfree(d_loss), dfree(d_lse), dfree(d_dz), dfree(d_bad);
    dfree(d_bad_ok), dfree(d_loss_ok);
}

/* ------------------------------------------------------------------------ */
/* Dropout: the CPU's mask, bit for bit                                     */

static void check_dropout(int64_t n, double p, prnn_dtype dt)
{
    const uint64_t seed = tu_next();
    float *x = rnd_signed(n, 0.5, 1.5);
    void *d_x = dev_from(x, n, dt), *d_y = dev_poison((size_t)n * esize(dt));
    void *d_dx = dev_poison((size_t)n * esize(dt));
    TU_REQUIRE(prnn_dropout_forward(g_gpu, d_y, d_x, n, p, seed, dt));
    TU_REQUIRE(prnn_dropout_backward(g_gpu, d_dx, d_x, n, p, seed, dt));
    float *y = host_from(d_y, n, dt), *dx = host_from(d_dx, n, dt);

    /* The oracle: the CPU op in f32 (x is exactly representable), and for
     * bf16 the same product rounded once to bf16 on the host. */
    float *want = tu_malloc((size_t)n * 4);
    TU_REQUIRE(prnn_dropout_forward(g_cpu, want, x, n, p, seed, F32));
    if (dt == BF16)
        for (int64_t i = 0; i < n; i++) want[i] = bf16_to_f32(f32_to_bf16(want[i]));
    int64_t mask_diff = 0, val_diff = 0, dropped = 0;
    for (int64_t i = 0; i < n; i++) {
        mask_diff += (y[i] == 0) != (want[i] == 0) || (dx[i] == 0) != (want[i] == 0);
        val_diff += memcmp(&y[i], &want[i], 4) != 0 || memcmp(&dx[i], &want[i], 4) != 0;
        dropped += y[i] == 0;
    }
    tu_check(mask_diff == 0 && val_diff == 0,
             "dropout %s n=%lld p=%.2f: mask and values identical to the CPU, forward and backward "
             "(%lld mask / %lld value diffs; dropped %.4f)",
             dt_name(dt), (long long)n, p, (long long)mask_diff, (long long)val_diff,
             (double)dropped / (double)n);

    free(x), free(y), free(dx), free(want);
    dfree(d_x), dfree(d_y), dfree(d_dx);
}

/* ------------------------------------------------------------------------ */
/* Elementwise                                                              */

static void check_axpby(int64_t n, prnn_dtype dt)
{
    char label[160];
    float *a = rnd_signed(n, 0.1, 1), *b = rnd_signed(n, 0.1, 1);
    const double al = tu_uniform(-2, 2), be = tu_uniform(-2, 2);
    void *d_a = dev_from(a, n, dt), *d_b = dev_from(b, n, dt), *d_y = dev_poison((size_t)n * esize(dt));
    float *y = tu_malloc((size_t)n * 4), *s = tu_malloc((size_t)n * 4);
    TU_REQUIRE(prnn_axpby(g_cpu, y, a, b, n, al, be, F32));
    TU_REQUIRE(prnn_axpby(g_cpu, s, a, NULL, n, al, 0, F32));
    TU_REQUIRE(prnn_axpby(g_gpu, d_y, d_a, d_b, n, al, be, dt));
    snprintf(label, sizeof label, "axpby %s n=%lld", dt_name(dt), (long long)n);
    check_dev(label, d_y, dt, y, n, tol_out(dt));
    TU_REQUIRE(prnn_axpby(g_gpu, d_a, d_a, NULL, n, al, 0, dt)); /* in place scale */
    snprintf(label, sizeof label, "axpby %s in place, b = NULL (scale)", dt_name(dt));
    check_dev(label, d_a, dt, s, n, tol_out(dt));
    for (int64_t i = 0; i < n; i++) y[i] = a[i] + b[i];
    TU_REQUIRE(prnn_add(g_gpu, d_b, d_b, d_b, n, dt)); /* b + b, both inputs aliased to y */
    for (int64_t i = 0; i < n; i++) s[i] = 2 * b[i];
    snprintf(label, sizeof label, "add %s y == a == b", dt_name(dt));
    check_dev(label, d_b, dt, s, n, 0.0); /* doubling is exact */

    free(a), free(b), free(y), free(s);
    dfree(d_a), dfree(d_b), dfree(d_y);
}

/* ------------------------------------------------------------------------ */
/* Optimizer ops                                                            */

/* Distance in units in the last place between two finite floats. */
static int64_t ulp_diff(float a, float b)
{
    int32_t ia, ib;
    memcpy(&ia, &a, 4);
    memcpy(&ib, &b, 4);
    if (ia < 0) ia = INT32_MIN - ia;
    if (ib < 0) ib = INT32_MIN - ib;
    return ia > ib ? (int64_t)ia - ib : (int64_t)ib - ia;
}

static void check_adamw(int64_t n)
{
    /* Both devices round the same operations in the same order, so the
     * weights and moments match to the bit; the check allows 1 ulp (a
     * host compiler that contracted a*b+c on its own would cost that) and
     * reports how many are bit-identical. */
    prnn_adamw_config cfg = prnn_adamw_config_default();
    cfg.lr = 1e-2, cfg.weight_decay = 0.05, cfg.beta2 = 0.95;
    float *p = rnd_signed(n, 0.1, 1), *m = tu_malloc((size_t)n * 4), *v = tu_malloc((size_t)n * 4);
    memset(m, 0, (size_t)n * 4), memset(v, 0, (size_t)n * 4);
    void *d_p = dev_from(p, n, F32), *d_m = dev_from(m, n, F32), *d_v = dev_from(v, n, F32);
    void *d_lp = dev_poison((size_t)n * 2);
    uint16_t *lp = tu_malloc((size_t)n * 2), *dlp = tu_malloc((size_t)n * 2);
    for (int step = 1; step <= 3; step++) {
        float *g = rnd_signed(n, 1e-3, 1);
        void *d_g = dev_from(g, n, F32);
        TU_REQUIRE(prnn_adamw_step(g_cpu, p, m, v, lp, g, n, step, &cfg));
        TU_REQUIRE(prnn_adamw_step(g_gpu, d_p, d_m, d_v, d_lp, d_g, n, step, &cfg));
        free(g);
        dfree(d_g);
    }
    float *gp = host_from(d_p, n, F32), *gm = host_from(d_m, n, F32), *gv = host_from(d_v, n, F32);
    TU_REQUIRE(prnn_mem_download(g_gpu, dlp, d_lp, (size_t)n * 2));
    int64_t exact = 0, worst = 0, lp_bad = 0;
    for (int64_t i = 0; i < n; i++) {
        const int64_t u = ulp_diff(gp[i], p[i]), um = ulp_diff(gm[i], m[i]), uv = ulp_diff(gv[i], v[i]);
        const int64_t w = u > um ? (u > uv ? u : uv) : (um > uv ? um : uv);
        worst = w > worst ? w : worst;
        exact += w == 0;
        lp_bad += dlp[i] != f32_to_bf16(gp[i]);
    }
    tu_check(worst <= 1, "adamw n=%lld, 3 steps: weights and moments vs CPU: max %lld ulp (tol 1), %lld of %lld bit-identical",
             (long long)n, (long long)worst, (long long)exact, (long long)n);
    tu_check(lp_bad == 0, "adamw bf16 copy = round-to-nearest-even of the GPU weights (%lld wrong)", (long long)lp_bad);

    free(p), free(m), free(v), free(lp), free(dlp), free(gp), free(gm), free(gv);
    dfree(d_p), dfree(d_m), dfree(d_v), dfree(d_lp);
}

static void check_sumsq_clip(int64_t n)
{
    float *g = rnd_signed(n, 1e-3, 2);
    void *d_g = dev_from(g, n, F32), *d_s = dev_poison(4), *d_s2 = dev_poison(4);
    double ref = 0, host = 0;
    for (int64_t i = 0; i < n; i++) ref += (double)g[i] * g[i];
    TU_REQUIRE(prnn_grad_sumsq(g_gpu, d_s, &host, d_g, n));
    TU_REQUIRE(prnn_grad_sumsq(g_gpu, d_s2, NULL, d_g, n));
    float dev = NAN;
    TU_REQUIRE(prnn_mem_download(g_gpu, &dev, d_s, 4));
    /* fp32 squares summed in runs of <= 256 per thread, then fp64 */
    const double eh = fabs(host - ref) / ref, ed = fabs(dev - ref) / ref;
    tu_check(eh <= 1e-6 && ed <= 1e-6, "grad sumsq n=%lld vs fp64: host %.1e, device %.1e (tol 1e-6)",
             (long long)n, eh, ed);
    check_same_bits("grad sumsq: same bits when repeated", d_s, d_s2, 4);

    /* clipping from the same sumsq on both devices: identical bits */
    const float s = (float)ref;
    const double max_norm = sqrt(ref) / 4;
    float *gc = copy_f32(g, n);
    TU_REQUIRE(prnn_grad_clip(g_cpu, gc, &s, n, max_norm));
    void *d_sc = dev_bytes(&s, 4);
    TU_REQUIRE(prnn_grad_clip(g_gpu, d_g, d_sc, n, max_norm));
    float *got = host_from(d_g, n, F32);
    tu_check(!memcmp(got, gc, (size_t)n * 4), "grad clip n=%lld: identical to the CPU", (long long)n);
    TU_REQUIRE(prnn_grad_clip(g_gpu, d_g, d_sc, n, sqrt(ref) * 10)); /* below: untouched */
    float *got2 = host_from(d_g, n, F32);
    tu_check(!memcmp(got, got2, (size_t)n * 4), "grad clip below max_norm: untouched");

    free(g), free(gc), free(got), free(got2);
    dfree(d_g), dfree(d_s), dfree(d_s2), dfree(d_sc);
}

/* ------------------------------------------------------------------------ */
/* Statuses on a CUDA context                                               */

static void check_statuses(void)
{
    void *d;
    TU_REQUIRE(prnn_mem_alloc(g_gpu, &d, 4096));
    int32_t *ids = (int32_t *)d;
    prnn_status s = prnn_embedding_forward(g_gpu, (char *)d + 1024, NULL, ids, (char *)d + 2048, 4, 4, 4, PRNN_DTYPE_F64);
    tu_check(s == PRNN_ERR_UNSUPPORTED, "cuda: f64 -> %s", prnn_strerror(s));
    s = prnn_rmsnorm_forward(g_gpu, (char *)d + 1024, NULL, (char *)d + 2048, d, 4, 4, 1e-5, PRNN_DTYPE_F16);
    tu_check(s == PRNN_ERR_UNSUPPORTED, "cuda: f16 -> %s", prnn_strerror(s));
    s = prnn_dropout_forward(g_gpu, (char *)d + 4, d, 64, 0.5, 1, F32);
    tu_check(s == PRNN_ERR_ALIASING, "cuda: dropout shifted overlap -> %s", prnn_strerror(s));
    prnn_mem_free(g_gpu, d);
}

/* ------------------------------------------------------------------------ */

int main(int argc, char **argv)
{
    uint64_t seed = tu_seed_from_env();
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--quick")) {
            g_quick = 1;
        } else if (!strcmp(argv[i], "--seed") && i + 1 < argc) {
            seed = strtoull(argv[++i], NULL, 0);
        } else {
            fprintf(stderr, "usage: %s [--quick] [--seed N]\n", argv[0]);
            return 2;
        }
    }
    if (!prnn_cuda_available()) {
        printf("no CUDA device: GPU tests of the blocks skipped\n");
        printf("0 passed, 0 failed\n");
        return 0;
    }
    printf("seed %llu (--seed %llu repeats this run)%s\n", (unsigned long long)seed,
           (unsigned long long)seed, g_quick ? ", quick" : "");
    tu_seed(seed);

    TU_REQUIRE(prnn_ctx_init(&g_cpu, NULL));
    prnn_ctx_config cfg = prnn_ctx_config_default();
    cfg.device = PRNN_DEVICE_CUDA;
    TU_REQUIRE(prnn_ctx_init(&g_gpu, &cfg));

    const prnn_dtype dts[] = {F32, BF16};
    for (int k = 0; k < 2; k++) {
        const prnn_dtype dt = dts[k];
        printf("%s\n", dt_name(dt));
        check_embedding(37, 7, 33, dt);
        check_embedding(1000, 50, 96, dt);
        check_linear(7, 5, 3, 1, dt);
        check_linear(300, 96, 130, 1, dt);
        check_linear(64, 33, 17, 0, dt);
        check_norm(0, 37, 33, 0, dt);
        check_norm(0, 500, 1000, 0, dt);
        check_norm(1, 37, 33, 1, dt);
        check_norm(1, 500, 1000, 1, dt);
        check_norm(1, 40, 70, 0, dt);
        check_xent(64, 50, 0, dt);
        check_xent(300, 5000, 0, dt);
        check_xent(20, 37, 1000, dt);
        check_dropout(g_quick ? 10007 : (1 << 20) + 3, 0.1, dt);
        check_dropout(g_quick ? 10007 : 300007, 0.5, dt);
        check_axpby(g_quick ? 10007 : 300007, dt);
        if (!g_quick) { /* grid-stride loops: more rows than one launch covers */
            check_embedding(70000, 300, 8, dt);
            check_norm(0, 70000, 8, 0, dt);
            check_norm(1, 70000, 8, 1, dt);
            check_xent(9000, 16, 0, dt);
        }
    }
    printf("out-of-range indices\n");
    check_embedding_bad_ids();
    check_xent_bad_targets();
    printf("optimizer\n");
    check_adamw(g_quick ? 10007 : 1000003);
    check_sumsq_clip(g_quick ? 10007 : 3000017);
    printf("statuses\n");
    check_statuses();

    prnn_ctx_free(g_gpu);
    prnn_ctx_free(g_cpu);
    return tu_finish();
}
