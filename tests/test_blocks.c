/*
 * test_blocks.c - the CPU test suite of the model blocks and optimizer ops
 * (prnn_blocks.h):
 *
 *   1. every forward against a plain reference written here in double, in
 *      F64 and F32;
 *   2. every backward against central finite differences in F64, with the
 *      parameter gradients added onto random prior contents (the ops
 *      accumulate), and F32 backward against F64;
 *   3. sums over rows give the same bits on 1 and 3 threads;
 *   4. dropout: kept fraction, values, determinism, forward = backward mask;
 *   5. AdamW against a hand-computed step and a double reference; gradient
 *      norm and clipping;
 *   6. bad input: every invalid argument gives its status and writes nothing.
 *
 * Size letters: N rows, D features, O outputs, V vocabulary, n elements.
 * Inputs are fresh random numbers each run (never zeros); the seed is
 * printed and `--seed N` (or PRNN_TEST_SEED=N) repeats a run. Sizes are
 * small: the suite also runs under ASan + UBSan.
 */
#include "test_util.h"

#include "prnn_blocks.h"

static prnn_ctx *g_ctx;  /* CPU, 3 threads: the default for every check */
static prnn_ctx *g_ctx1; /* CPU, 1 thread: for thread-count independence */

#define F64 PRNN_DTYPE_F64
#define F32 PRNN_DTYPE_F32

/* ------------------------------------------------------------------------ */
/* Helpers                                                                  */

static double *rnd(int64_t n, double lo, double hi)
{
    double *x = tu_malloc((size_t)n * 8);
    tu_fill_f64(x, n, lo, hi);
    return x;
}

/* Uniform magnitude in [lo, hi) with a random sign: values bounded away
 * from zero. */
static double *rnd_signed(int64_t n, double lo, double hi)
{
    double *x = rnd(n, lo, hi);
    for (int64_t i = 0; i < n; i++)
        if (tu_next() & 1) x[i] = -x[i];
    return x;
}

static double *copy_f64(const double *x, int64_t n)
{
    double *y = tu_malloc((size_t)n * 8);
    memcpy(y, x, (size_t)n * 8);
    return y;
}

/* A float copy of x. */
static float *to_f32(const double *x, int64_t n)
{
    float *y = tu_malloc((size_t)n * 4);
    for (int64_t i = 0; i < n; i++) y[i] = (float)x[i];
    return y;
}

/* x rounded to float and back: the inputs an F32 run sees. */
static void round_f32(double *x, int64_t n)
{
    for (int64_t i = 0; i < n; i++) x[i] = (double)(float)x[i];
}

static double *from_f32(const float *x, int64_t n)
{
    double *y = tu_malloc((size_t)n * 8);
    for (int64_t i = 0; i < n; i++) y[i] = x[i];
    return y;
}

static double rms(const double *x, int64_t n)
{
    double s = 0;
    for (int64_t i = 0; i < n; i++) s += x[i] * x[i];
    return sqrt(s / (double)n) + 1e-300;
}

static double dot(const double *a, const double *b, int64_t n)
{
    double s = 0;
    for (int64_t i = 0; i < n; i++) s += a[i] * b[i];
    return s;
}

/* One check: got against want, error relative to |want| + rms(want). */
static int close_enough(const char *label, const double *got, const double *want, int64_t n,
                        double tol)
{
    tu_err e = tu_compare_f64(got, want, n, rms(want, n), tol, label);
    tu_check(e.bad == 0, "%s: max rel err %.2e (tol %.0e)", label, e.max_err, tol);
    return e.bad == 0;
}

static int close_f32(const char *label, const float *got, const double *want, int64_t n,
                     double tol)
{
    double *g = from_f32(got, n);
    int ok = close_enough(label, g, want, n, tol);
    free(g);
    return ok;
}

/*
 * Central differences of a scalar loss with respect to x (n entries):
 * out[j] = (L(x + h e_j) - L(x - h e_j)) / 2h. With h = 1e-5, the
 * truncation error is ~h^2 |L'''| ~ 1e-10 and the rounding error
 * ~eps |L x| / h ~ 1e-11 (1e-8 for the logits near 1000, where x + h
 * itself rounds: hence the step actually taken as the divisor). So the
 * derivatives are good to ~1e-8 relative; FD_TOL leaves a margin for
 * larger third derivatives.
 */
typedef double (*loss_fn)(void *state);
#define FD_TOL 1e-6

static void fd_grad(loss_fn loss, void *state, double *x, int64_t n, double *out)
{
    for (int64_t j = 0; j < n; j++) {
        const double x0 = x[j], xp = x0 + 1e-5, xm = x0 - 1e-5;
        x[j] = xp;
        const double lp = loss(state);
        x[j] = xm;
        const double lm = loss(state);
        x[j] = x0;
        out[j] = (lp - lm) / (xp - xm);
    }
}

/* Checks an accumulated gradient: (after - before) against the FD one. */
static void check_accumulated(const char *label, const double *after, const double *before,
                              double *fd, int64_t n)
{
    double *diff = tu_malloc((size_t)n * 8);
    for (int64_t i = 0; i < n; i++) diff[i] = after[i] - before[i];
    close_enough(label, diff, fd, n, FD_TOL);
    free(diff);
}

/*
 * F32 against F64 tolerance: one rounding of each input and output (~6e-8)
 * and double math inside, plus cancellation in the gradients of the norms
 * (dx = r (dxhat - mean - xhat * mean)) and the sums over <= 64 rows or
 * columns: 2e-5 of the tensor's rms covers them with a wide margin.
 */
#define TOL_F32 2e-5

/* ------------------------------------------------------------------------ */
/* 1. Embedding                                                             */

typedef struct {
    int64_t N, V, D;
    int32_t *ids;
    double *table, *w;
} emb_state;

static double emb_loss(void *p)
{
    emb_state *s = p;
    double *y = tu_malloc((size_t)(s->N * s->D) * 8);
    TU_REQUIRE(prnn_embedding_forward(g_ctx, y, NULL, s->ids, s->table, s->N, s->V, s->D, F64));
    const double L = dot(y, s->w, s->N * s->D);
    free(y);
    return L;
}

static void check_embedding(void)
{
    printf("embedding\n");
    const int64_t N = 11, V = 4, D = 70; /* V < N: ids repeat; D > 64: two column chunks */
    emb_state s = {N, V, D, NULL, NULL, NULL};
    s.ids = tu_malloc((size_t)N * 4);
    s.table = rnd_signed(V * D, 0.1, 1);
    s.w = rnd(N * D, -1, 1);
    for (int64_t n = 0; n < N; n++) s.ids[n] = (int32_t)(tu_next() % (uint64_t)V);

    /* forward: a copy of rows, exact in both dtypes */
    double *y = tu_malloc((size_t)(N * D) * 8);
    TU_REQUIRE(prnn_embedding_forward(g_ctx, y, NULL, s.ids, s.table, N, V, D, F64));
    int64_t bad = 0;
    for (int64_t n = 0; n < N; n++)
        for (int64_t d = 0; d < D; d++) bad += y[n * D + d] != s.table[s.ids[n] * D + d];
    tu_check(bad == 0, "embedding forward f64: rows copied exactly (%lld wrong)", (long long)bad);
    float *tf = to_f32(s.table, V * D), *yf = tu_malloc((size_t)(N * D) * 4);
    TU_REQUIRE(prnn_embedding_forward(g_ctx, yf, NULL, s.ids, tf, N, V, D, F32));
    bad = 0;
    for (int64_t n = 0; n < N; n++)
        for (int64_t d = 0; d < D; d++) bad += yf[n * D + d] != tf[s.ids[n] * D + d];
    tu_check(bad == 0, "embedding forward f32: rows copied exactly (%lld wrong)", (long long)bad);

    /* backward: accumulated onto random contents, against FD */
    double *dt0 = rnd(V * D, -1, 1), *dt = copy_f64(dt0, V * D), *fd = tu_malloc((size_t)(V * D) * 8);
    TU_REQUIRE(prnn_embedding_backward(g_ctx, dt, s.ids, s.w, N, V, D, F64));
    fd_grad(emb_loss, &s, s.table, V * D, fd);
    check_accumulated("embedding backward f64 dtable vs FD", dt, dt0, fd, V * D);

    /* f32: thread-count independent bits, close to f64 */
    float *wf = to_f32(s.w, N * D), *d3 = to_f32(dt0, V * D), *d1 = to_f32(dt0, V * D);
    TU_REQUIRE(prnn_embedding_backward(g_ctx, d3, s.ids, wf, N, V, D, F32));
    TU_REQUIRE(prnn_embedding_backward(g_ctx1, d1, s.ids, wf, N, V, D, F32));
    tu_check(!memcmp(d1, d3, (size_t)(V * D) * 4), "embedding backward f32: 1 and 3 threads give the same bits");
    close_f32("embedding backward f32 vs f64", d3, dt, V * D, TOL_F32);

    free(s.ids), free(s.table), free(s.w), free(y), free(tf), free(yf), free(dt0), free(dt);
    free(fd), free(wf), free(d3), free(d1);
}

/* ------------------------------------------------------------------------ */
/* 2. Linear                                                                */

typedef struct {
    int64_t N, D, O;
    double *x, *W, *bias, *w; /* bias may be NULL */
} lin_state;

static void lin_ref(const lin_state *s, double *y)
{
    for (int64_t n = 0; n < s->N; n++)
        for (int64_t o = 0; o < s->O; o++) {
            double a = s->bias ? s->bias[o] : 0;
            for (int64_t d = 0; d < s->D; d++) a += s->x[n * s->D + d] * s->W[d * s->O + o];
            y[n * s->O + o] = a;
        }
}

static double lin_loss(void *p)
{
    lin_state *s = p;
    double *y = tu_malloc((size_t)(s->N * s->O) * 8);
    TU_REQUIRE(prnn_linear_forward(g_ctx, y, s->x, s->W, s->bias, s->N, s->D, s->O, F64));
    const double L = dot(y, s->w, s->N * s->O);
    free(y);
    return L;
}

static void check_linear_case(int use_bias)
{
    const int64_t N = 6, D = 5, O = 7;
    lin_state s = {N, D, O, NULL, NULL, NULL, NULL};
    s.x = rnd_signed(N * D, 0.1, 1);
    s.W = rnd_signed(D * O, 0.1, 1);
    s.bias = use_bias ? rnd_signed(O, 0.1, 1) : NULL;
    s.w = rnd(N * O, -1, 1);
    round_f32(s.x, N * D), round_f32(s.W, D * O);
    if (s.bias) round_f32(s.bias, O);
    const char *tag = use_bias ? "bias" : "no bias";
    char label[128];

    double *ref = tu_malloc((size_t)(N * O) * 8), *y = tu_malloc((size_t)(N * O) * 8);
    lin_ref(&s, ref);
    TU_REQUIRE(prnn_linear_forward(g_ctx, y, s.x, s.W, s.bias, N, D, O, F64));
    snprintf(label, sizeof label, "linear forward f64 (%s)", tag);
    close_enough(label, y, ref, N * O, 1e-13);
    float *xf = to_f32(s.x, N * D), *Wf = to_f32(s.W, D * O);
    float *bf = s.bias ? to_f32(s.bias, O) : NULL, *yf = tu_malloc((size_t)(N * O) * 4);
    TU_REQUIRE(prnn_linear_forward(g_ctx, yf, xf, Wf, bf, N, D, O, F32));
    snprintf(label, sizeof label, "linear forward f32 (%s)", tag);
    close_f32(label, yf, ref, N * O, TOL_F32);

    /* backward against FD; dW and dbias accumulate onto random contents */
    double *dx = tu_malloc((size_t)(N * D) * 8), *dW0 = rnd(D * O, -1, 1), *db0 = rnd(O, -1, 1);
    double *dW = copy_f64(dW0, D * O), *db = copy_f64(db0, O);
    TU_REQUIRE(prnn_linear_backward(g_ctx, dx, dW, use_bias ? db : NULL, s.w, s.x, s.W, N, D, O, F64));
    double *fd = tu_malloc((size_t)(D * O) * 8);
    fd_grad(lin_loss, &s, s.x, N * D, fd);
    snprintf(label, sizeof label, "linear backward f64 dx vs FD (%s)", tag);
    close_enough(label, dx, fd, N * D, FD_TOL);
    fd_grad(lin_loss, &s, s.W, D * O, fd);
    snprintf(label, sizeof label, "linear backward f64 dW vs FD (%s)", tag);
    check_accumulated(label, dW, dW0, fd, D * O);
    if (use_bias) {
        fd_grad(lin_loss, &s, s.bias, O, fd);
        check_accumulated("linear backward f64 dbias vs FD", db, db0, fd, O);
    }

    /* f32 backward vs f64, dx optional, dbias on 1 and 3 threads */
    float *wf = to_f32(s.w, N * O), *dxf = tu_malloc((size_t)(N * D) * 4);
    float *dWf = to_f32(dW0, D * O), *dbf = to_f32(db0, O), *dbf1 = to_f32(db0, O);
    float *dWf1 = to_f32(dW0, D * O);
    TU_REQUIRE(prnn_linear_backward(g_ctx, dxf, dWf, use_bias ? dbf : NULL, wf, xf, Wf, N, D, O, F32));
    TU_REQUIRE(prnn_linear_backward(g_ctx1, NULL, dWf1, use_bias ? dbf1 : NULL, wf, xf, Wf, N, D, O, F32));
    snprintf(label, sizeof label, "linear backward f32 dx vs f64 (%s)", tag);
    close_f32(label, dxf, dx, N * D, TOL_F32);
    snprintf(label, sizeof label, "linear backward f32 dW vs f64 (%s)", tag);
    close_f32(label, dWf, dW, D * O, TOL_F32);
    if (use_bias) {
        close_f32("linear backward f32 dbias vs f64", dbf, db, O, TOL_F32);
        tu_check(!memcmp(dbf, dbf1, (size_t)O * 4), "linear backward f32 dbias: 1 and 3 threads give the same bits");
    }
    tu_check(!memcmp(dWf, dWf1, (size_t)(D * O) * 4), "linear backward f32 with dx = NULL: same dW");

    free(s.x), free(s.W), free(s.bias), free(s.w), free(ref), free(y), free(xf), free(Wf), free(bf);
    free(yf), free(dx), free(dW0), free(db0), free(dW), free(db), free(fd), free(wf), free(dxf);
    free(dWf), free(dbf), free(dbf1), free(dWf1);
}

static void check_linear(void)
{
    printf("linear\n");
    check_linear_case(1);
    check_linear_case(0);
}

/* ------------------------------------------------------------------------ */
/* 3. RMSNorm and LayerNorm                                                 */

typedef struct {
    int layer; /* 0 RMSNorm, 1 LayerNorm */
    int64_t N, D;
    double eps;
    double *x, *gain, *bias, *w; /* bias: LayerNorm, may be NULL */
} norm_state;

static void norm_ref(const norm_state *s, double *y, double *mean, double *rstd)
{
    for (int64_t n = 0; n < s->N; n++) {
        const double *x = s->x + n * s->D;
        double mu = 0, var = 0;
        if (s->layer) {
            for (int64_t d = 0; d < s->D; d++) mu += x[d];
            mu /= (double)s->D;
        }
        for (int64_t d = 0; d < s->D; d++) var += (x[d] - mu) * (x[d] - mu);
        const double r = 1 / sqrt(var / (double)s->D + s->eps);
        mean[n] = mu, rstd[n] = r;
        for (int64_t d = 0; d < s->D; d++)
            y[n * s->D + d] = (x[d] - mu) * r * s->gain[d] + (s->bias ? s->bias[d] : 0);
    }
}

static void norm_fwd(prnn_ctx *ctx, const norm_state *s, void *y, void *mean, void *rstd,
                     const void *x, const void *gain, const void *bias, prnn_dtype dt)
{
    if (s->layer)
        TU_REQUIRE(prnn_layernorm_forward(ctx, y, mean, rstd, x, gain, bias, s->N, s->D, s->eps, dt));
    else
        TU_REQUIRE(prnn_rmsnorm_forward(ctx, y, rstd, x, gain, s->N, s->D, s->eps, dt));
}

static void norm_bwd(prnn_ctx *ctx, const norm_state *s, void *dx, void *dgain, void *dbias,
                     const void *dy, const void *x, const void *gain, const void *mean,
                     const void *rstd, prnn_dtype dt)
{
    if (s->layer)
        TU_REQUIRE(prnn_layernorm_backward(ctx, dx, dgain, dbias, dy, x, gain, mean, rstd, s->N, s->D, dt));
    else
        TU_REQUIRE(prnn_rmsnorm_backward(ctx, dx, dgain, dy, x, gain, rstd, s->N, s->D, dt));
}

static double norm_loss(void *p)
{
    norm_state *s = p;
    double *y = tu_malloc((size_t)(s->N * s->D) * 8);
    norm_fwd(g_ctx, s, y, NULL, NULL, s->x, s->gain, s->bias, F64);
    const double L = dot(y, s->w, s->N * s->D);
    free(y);
    return L;
}

static void check_norm_case(int layer, int use_bias)
{
    const int64_t N = 5, D = 67; /* D > 64: two column chunks in the parameter sums */
    /* x with an offset (mean ~ 2 against a spread of 1) so LayerNorm's
     * centring matters; eps large enough to show in the result. */
    norm_state s = {layer, N, D, 1e-3, NULL, NULL, NULL, NULL};
    s.x = rnd(N * D, 1.5, 2.5);
    s.gain = rnd_signed(D, 0.5, 1.5);
    s.bias = layer && use_bias ? rnd_signed(D, 0.1, 1) : NULL;
    s.w = rnd(N * D, -1, 1);
    for (int64_t i = 0; i < N * D; i += 3) s.x[i] -= 2; /* both signs */
    round_f32(s.x, N * D), round_f32(s.gain, D);
    if (s.bias) round_f32(s.bias, D);
    const char *name = layer ? (use_bias ? "layernorm" : "layernorm (no bias)") : "rmsnorm";
    char label[128];

    double *ref = tu_malloc((size_t)(N * D) * 8), *rmean = tu_malloc((size_t)N * 8);
    double *rrstd = tu_malloc((size_t)N * 8);
    norm_ref(&s, ref, rmean, rrstd);
    double *y = tu_malloc((size_t)(N * D) * 8), *mean = tu_malloc((size_t)N * 8);
    double *rstd = tu_malloc((size_t)N * 8);
    norm_fwd(g_ctx, &s, y, mean, rstd, s.x, s.gain, s.bias, F64);
    snprintf(label, sizeof label, "%s forward f64 y", name);
    close_enough(label, y, ref, N * D, 1e-13);
    snprintf(label, sizeof label, "%s forward f64 saved rstd", name);
    close_enough(label, rstd, rrstd, N, 1e-13);
    if (layer) {
        snprintf(label, sizeof label, "%s forward f64 saved mean", name);
        close_enough(label, mean, rmean, N, 1e-13);
    }

    float *xf = to_f32(s.x, N * D), *gf = to_f32(s.gain, D), *bf = s.bias ? to_f32(s.bias, D) : NULL;
    float *yf = tu_malloc((size_t)(N * D) * 4), *meanf = tu_malloc((size_t)N * 4);
    float *rstdf = tu_malloc((size_t)N * 4);
    norm_fwd(g_ctx, &s, yf, meanf, rstdf, xf, gf, bf, F32);
    snprintf(label, sizeof label, "%s forward f32 y", name);
    close_f32(label, yf, ref, N * D, TOL_F32);

    /* backward vs FD; dgain and dbias accumulate onto random contents */
    double *dx = tu_malloc((size_t)(N * D) * 8), *dg0 = rnd(D, -1, 1), *db0 = rnd(D, -1, 1);
    double *dg = copy_f64(dg0, D), *db = copy_f64(db0, D), *fd = tu_malloc((size_t)(N * D) * 8);
    norm_bwd(g_ctx, &s, dx, dg, s.bias ? db : NULL, s.w, s.x, s.gain, mean, rstd, F64);
    fd_grad(norm_loss, &s, s.x, N * D, fd);
    snprintf(label, sizeof label, "%s backward f64 dx vs FD", name);
    close_enough(label, dx, fd, N * D, FD_TOL);
    fd_grad(norm_loss, &s, s.gain, D, fd);
    snprintf(label, sizeof label, "%s backward f64 dgain vs FD", name);
    check_accumulated(label, dg, dg0, fd, D);
    if (s.bias) {
        fd_grad(norm_loss, &s, s.bias, D, fd);
        snprintf(label, sizeof label, "%s backward f64 dbias vs FD", name);
        check_accumulated(label, db, db0, fd, D);
    }

    /* f32 vs f64, and the parameter sums on 1 and 3 threads */
    float *wf = to_f32(s.w, N * D), *dxf = tu_malloc((size_t)(N * D) * 4);
    float *dgf = to_f32(dg0, D), *dbf = to_f32(db0, D), *dgf1 = to_f32(dg0, D), *dbf1 = to_f32(db0, D);
    norm_bwd(g_ctx, &s, dxf, dgf, s.bias ? dbf : NULL, wf, xf, gf, meanf, rstdf, F32);
    norm_bwd(g_ctx1, &s, dxf, dgf1, s.bias ? dbf1 : NULL, wf, xf, gf, meanf, rstdf, F32);
    snprintf(label, sizeof label, "%s backward f32 dx vs f64", name);
    close_f32(label, dxf, dx, N * D, TOL_F32);
    snprintf(label, sizeof label, "%s backward f32 dgain vs f64", name);
    close_f32(label, dgf, dg, D, TOL_F32);
    tu_check(!memcmp(dgf, dgf1, (size_t)D * 4) && !memcmp(dbf, dbf1, (size_t)D * 4),
             "%s backward f32: parameter sums on 1 and 3 threads give the same bits", name);

    free(s.x), free(s.gain), free(s.bias), free(s.w), free(ref), free(rmean), free(rrstd);
    free(y), free(mean), free(rstd), free(xf), free(gf), free(bf), free(yf), free(meanf);
    free(rstdf), free(dx), free(dg0), free(db0), free(dg), free(db), free(fd), free(wf);
    free(dxf), free(dgf), free(dbf), free(dgf1), free(dbf1);
}

static void check_norms(void)
{
    printf("rmsnorm, layernorm\n");
    check_norm_case(0, 0);
    check_norm_case(1, 1);
    check_norm_case(1, 0);
}

/* ------------------------------------------------------------------------ */
/* 4. Softmax cross-entropy                                                 */

typedef struct {
    int64_t N, V;
    double *z, dloss;
    int32_t *t;
} xent_state;

/* The reference in long double where it matters: logsumexp of the row. */
static double xent_ref(const xent_state *s, double *row_loss, double *lse)
{
    double total = 0;
    int64_t count = 0;
    for (int64_t n = 0; n < s->N; n++) {
        const double *z = s->z + n * s->V;
        double m = z[0];
        for (int64_t v = 1; v < s->V; v++) m = z[v] > m ? z[v] : m;
        long double sum = 0;
        for (int64_t v = 0; v < s->V; v++) sum += expl((long double)z[v] - m);
        lse[n] = m + (double)logl(sum);
        row_loss[n] = s->t[n] >= 0 ? lse[n] - z[s->t[n]] : 0;
        if (s->t[n] >= 0) total += row_loss[n], count++;
    }
    return count ? total / (double)count : 0;
}

static double xent_loss(void *p)
{
    xent_state *s = p;
    double loss;
    TU_REQUIRE(prnn_xent_forward(g_ctx, &loss, NULL, NULL, NULL, s->z, s->t, s->N, s->V, F64));
    return s->dloss * loss;
}

static void check_xent_case(int64_t N, int64_t V, double shift, int ignore_all)
{
    xent_state s = {N, V, NULL, 0, NULL};
    s.z = rnd(N * V, -3, 3);
    s.dloss = tu_uniform(0.5, 2);
    s.t = tu_malloc((size_t)N * 4);
    /* shift: large logits, where an unshifted exp overflows */
    for (int64_t i = 0; i < N * V; i++) s.z[i] = (double)(float)(s.z[i] + shift);
    for (int64_t n = 0; n < N; n++)
        s.t[n] = ignore_all || n % 4 == 1 ? -1 : (int32_t)(tu_next() % (uint64_t)V);
    char label[160], tag[64];
    snprintf(tag, sizeof tag, "N=%lld V=%lld shift %g%s", (long long)N, (long long)V, shift,
             ignore_all ? ", all ignored" : "");

    double *rl_ref = tu_malloc((size_t)N * 8), *lse_ref = tu_malloc((size_t)N * 8);
    const double loss_ref = xent_ref(&s, rl_ref, lse_ref);
    double loss, *rl = tu_malloc((size_t)N * 8), *lse = tu_malloc((size_t)N * 8);
    TU_REQUIRE(prnn_xent_forward(g_ctx, &loss, rl, lse, NULL, s.z, s.t, N, V, F64));
    /* loss of a few units, sums of <= 16 rows: 1e-13 is ~500 ulp */
    const double lerr = fabs(loss - loss_ref) / (fabs(loss_ref) + 1e-300);
    tu_check(ignore_all ? loss == 0 : lerr <= 1e-13, "xent forward f64 loss (%s): %.6f, rel err %.1e (tol 1e-13)",
             tag, loss, ignore_all ? 0.0 : lerr);
    snprintf(label, sizeof label, "xent forward f64 row losses (%s)", tag);
    if (!ignore_all) close_enough(label, rl, rl_ref, N, 1e-12);
    snprintf(label, sizeof label, "xent forward f64 lse (%s)", tag);
    close_enough(label, lse, lse_ref, N, 1e-13);

    float *zf = to_f32(s.z, N * V), lossf, lossf1, *lsef = tu_malloc((size_t)N * 4);
    TU_REQUIRE(prnn_xent_forward(g_ctx, &lossf, NULL, lsef, NULL, zf, s.t, N, V, F32));
    TU_REQUIRE(prnn_xent_forward(g_ctx1, &lossf1, NULL, NULL, NULL, zf, s.t, N, V, F32));
    /* f32: the loss rounds once from double math (logits were float-exact) */
    const double lerrf = fabs(lossf - loss_ref) / (fabs(loss_ref) + 1e-30);
    tu_check(isfinite(lossf) && lerrf <= 1e-6 && lossf == lossf1,
             "xent forward f32 loss (%s): rel err %.1e (tol 1e-6), same bits on 1 and 3 threads", tag, lerrf);

    double *dz = tu_malloc((size_t)(N * V) * 8), *fd = tu_malloc((size_t)(N * V) * 8);
    TU_REQUIRE(prnn_xent_backward(g_ctx, dz, s.z, s.t, lse, N, V, s.dloss, F64));
    fd_grad(xent_loss, &s, s.z, N * V, fd);
    snprintf(label, sizeof label, "xent backward f64 dlogits vs FD (%s)", tag);
    if (ignore_all) {
        int64_t nz = 0;
        for (int64_t i = 0; i < N * V; i++) nz += dz[i] != 0;
        tu_check(nz == 0, "%s: all zero (%lld nonzero)", label, (long long)nz);
    } else {
        close_enough(label, dz, fd, N * V, FD_TOL);
    }
    float *dzf = tu_malloc((size_t)(N * V) * 4);
    TU_REQUIRE(prnn_xent_backward(g_ctx, dzf, zf, s.t, lsef, N, V, s.dloss, F32));
    /* The saved lse is fp32: its rounding, up to half an ulp of |lse|
     * (3e-5 near 1000), is an absolute error in every exponent, so a
     * relative one in every softmax entry. */
    double lse_max = 0;
    for (int64_t n = 0; n < N; n++) lse_max = fabs(lse[n]) > lse_max ? fabs(lse[n]) : lse_max;
    snprintf(label, sizeof label, "xent backward f32 vs f64 (%s)", tag);
    if (!ignore_all) close_f32(label, dzf, dz, N * V, TOL_F32 + lse_max * 0x1p-23);

    free(s.z), free(s.t), free(rl_ref), free(lse_ref), free(rl), free(lse), free(zf), free(lsef);
    free(dz), free(fd), free(dzf);
}

static void check_xent(void)
{
    printf("softmax cross-entropy\n");
    check_xent_case(9, 6, 0, 0);
    check_xent_case(7, 33, 1000, 0); /* exp(1000) overflows double: needs the max shift */
    check_xent_case(4, 5, 0, 1);
}

/* ------------------------------------------------------------------------ */
/* 5. Dropout                                                               */

typedef struct {
    int64_t n;
    double p, *x, *w;
    uint64_t seed;
} drop_state;

static double drop_loss(void *ps)
{
    drop_state *s = ps;
    double *y = tu_malloc((size_t)s->n * 8);
    TU_REQUIRE(prnn_dropout_forward(g_ctx, y, s->x, s->n, s->p, s->seed, F64));
    const double L = dot(y, s->w, s->n);
    free(y);
    return L;
}

static void check_dropout(void)
{
    printf("dropout\n");
    const int64_t n = 100003;
    const double p = tu_uniform(0.1, 0.5);
    const uint64_t seed = tu_next();
    double *x = rnd_signed(n, 0.5, 1.5);
    float *xf = to_f32(x, n), *yf = tu_malloc((size_t)n * 4), *yf2 = tu_malloc((size_t)n * 4);
    TU_REQUIRE(prnn_dropout_forward(g_ctx, yf, xf, n, p, seed, F32));

    /* every element is 0 or x / (1 - p) (rounded to float once) */
    const float scale = (float)(1.0 / (1.0 - p));
    int64_t dropped = 0, wrong = 0, mismatch = 0;
    for (int64_t i = 0; i < n; i++) {
        const int keep = prnn_dropout_keep(seed, i, p);
        dropped += yf[i] == 0;
        wrong += yf[i] != 0 && yf[i] != xf[i] * scale;
        mismatch += keep != (yf[i] != 0);
    }
    /* kept ~ Binomial(n, 1 - p): 6 standard deviations */
    const double frac = (double)dropped / (double)n, sd = sqrt(p * (1 - p) / (double)n);
    tu_check(fabs(frac - p) <= 6 * sd, "dropout f32 p=%.3f: dropped %.4f (|diff| %.1e, tol 6 sd = %.1e)",
             p, frac, fabs(frac - p), 6 * sd);
    tu_check(wrong == 0, "dropout f32: every kept value is x * (float)(1/(1-p)) exactly (%lld wrong)", (long long)wrong);
    tu_check(mismatch == 0, "dropout f32: zeros are where prnn_dropout_keep says (%lld differ)", (long long)mismatch);

    /* determinism: same seed same bits (on 1 thread too); another seed another mask */
    TU_REQUIRE(prnn_dropout_forward(g_ctx1, yf2, xf, n, p, seed, F32));
    tu_check(!memcmp(yf, yf2, (size_t)n * 4), "dropout f32: same seed, 1 and 3 threads: same bits");
    TU_REQUIRE(prnn_dropout_forward(g_ctx, yf2, xf, n, p, seed + 1, F32));
    int64_t differ = 0;
    for (int64_t i = 0; i < n; i++) differ += (yf[i] == 0) != (yf2[i] == 0);
    /* two independent masks differ in 2 p (1 - p) of the elements */
    tu_check(fabs((double)differ / (double)n - 2 * p * (1 - p)) < 0.02,
             "dropout f32: seed + 1 gives an independent mask (%.4f differ, expect %.4f)",
             (double)differ / (double)n, 2 * p * (1 - p));

    /* backward: the same mask on dy, and in place */
    double *w = rnd_signed(n, 0.5, 1.5);
    float *wf = to_f32(w, n), *dxf = tu_malloc((size_t)n * 4);
    TU_REQUIRE(prnn_dropout_backward(g_ctx, dxf, wf, n, p, seed, F32));
    int64_t same_mask = 0;
    for (int64_t i = 0; i < n; i++) same_mask += (dxf[i] == 0) == (yf[i] == 0) && (dxf[i] == 0 || dxf[i] == wf[i] * scale);
    tu_check(same_mask == n, "dropout backward f32: the forward's mask and scale (%lld of %lld)", (long long)same_mask, (long long)n);
    memcpy(yf2, xf, (size_t)n * 4);
    TU_REQUIRE(prnn_dropout_forward(g_ctx, yf2, yf2, n, p, seed, F32));
    tu_check(!memcmp(yf, yf2, (size_t)n * 4), "dropout f32 in place (y == x): same bits");

    /* p = 0 is the identity */
    TU_REQUIRE(prnn_dropout_forward(g_ctx, yf2, xf, n, 0.0, seed, F32));
    tu_check(!memcmp(xf, yf2, (size_t)n * 4), "dropout p=0: identity");

    /* f64 backward vs FD on a small tensor */
    drop_state s = {40, 0.3, NULL, NULL, 0};
    s.x = rnd_signed(40, 0.5, 1.5);
    s.w = rnd(40, -1, 1);
    s.seed = tu_next();
    double *dx = tu_malloc(40 * 8), *fd = tu_malloc(40 * 8);
    TU_REQUIRE(prnn_dropout_backward(g_ctx, dx, s.w, s.n, s.p, s.seed, F64));
    fd_grad(drop_loss, &s, s.x, s.n, fd);
    close_enough("dropout backward f64 vs FD", dx, fd, s.n, FD_TOL);

    free(x), free(xf), free(yf), free(yf2), free(w), free(wf), free(dxf), free(s.x), free(s.w);
    free(dx), free(fd);
}

/* ------------------------------------------------------------------------ */
/* 6. Elementwise                                                           */

typedef struct {
    int64_t n;
    double alpha, beta, *a, *b, *w;
} axpby_state;

static double axpby_loss(void *p)
{
    axpby_state *s = p;
    double *y = tu_malloc((size_t)s->n * 8);
    TU_REQUIRE(prnn_axpby(g_ctx, y, s->a, s->b, s->n, s->alpha, s->beta, F64));
    const double L = dot(y, s->w, s->n);
    free(y);
    return L;
}

static void check_elementwise(void)
{
    printf("elementwise\n");
    const int64_t n = 1001;
    double *a = rnd_signed(n, 0.1, 1), *b = rnd_signed(n, 0.1, 1), *ref = tu_malloc((size_t)n * 8);
    round_f32(a, n), round_f32(b, n);
    double *y = tu_malloc((size_t)n * 8);
    for (int64_t i = 0; i < n; i++) ref[i] = a[i] + b[i];
    TU_REQUIRE(prnn_add(g_ctx, y, a, b, n, F64));
    close_enough("add f64", y, ref, n, 1e-15);
    float *af = to_f32(a, n), *bf = to_f32(b, n), *yf = tu_malloc((size_t)n * 4);
    TU_REQUIRE(prnn_add(g_ctx, yf, af, bf, n, F32));
    close_f32("add f32", yf, ref, n, 1e-7); /* one float rounding: 6e-8 */
    TU_REQUIRE(prnn_add(g_ctx, af, af, bf, n, F32)); /* in place: a += b */
    tu_check(!memcmp(af, yf, (size_t)n * 4), "add f32 in place (y == a): same bits");

    const double al = tu_uniform(-2, 2), be = tu_uniform(-2, 2);
    for (int64_t i = 0; i < n; i++) ref[i] = al * a[i] + be * b[i];
    TU_REQUIRE(prnn_axpby(g_ctx, y, a, b, n, al, be, F64));
    close_enough("axpby f64", y, ref, n, 1e-15);
    for (int64_t i = 0; i < n; i++) ref[i] = al * a[i];
    TU_REQUIRE(prnn_axpby(g_ctx, y, a, NULL, n, al, 0, F64));
    close_enough("axpby f64 with b = NULL (scale)", y, ref, n, 1e-15);

    /* the map's own gradient: dL/da = alpha dy, dL/db = beta dy, by the same op */
    axpby_state s = {17, al, be, NULL, NULL, NULL};
    s.a = rnd(17, -1, 1);
    s.b = rnd(17, -1, 1);
    s.w = rnd(17, -1, 1);
    double *g = tu_malloc(17 * 8), *fd = tu_malloc(17 * 8);
    TU_REQUIRE(prnn_axpby(g_ctx, g, s.w, NULL, s.n, al, 0, F64));
    fd_grad(axpby_loss, &s, s.a, s.n, fd);
    close_enough("axpby backward (alpha dy) vs FD", g, fd, s.n, FD_TOL);
    TU_REQUIRE(prnn_axpby(g_ctx, g, s.w, NULL, s.n, be, 0, F64));
    fd_grad(axpby_loss, &s, s.b, s.n, fd);
    close_enough("axpby backward (beta dy) vs FD", g, fd, s.n, FD_TOL);

    free(a), free(b), free(ref), free(y), free(af), free(bf), free(yf), free(s.a), free(s.b);
    free(s.w), free(g), free(fd);
}

/* ------------------------------------------------------------------------ */
/* 7. Optimizer ops                                                         */

static uint16_t bf16_bits(float f)
{
    uint32_t x;
    memcpy(&x, &f, 4);
    x += 0x7fffu + ((x >> 16) & 1u);
    return (uint16_t)(x >> 16);
}

static void check_optimizer(void)
{
    printf("optimizer\n");
    /* A step worked by hand. lr 0.1, betas (0.9, 0.999), eps 1e-8, wd 0.01,
     * p = 1, m = v = 0, step 1:
     *   g = 0.5: m = 0.05, v = 2.5e-4, m_hat = 0.5, v_hat = 0.25,
     *            p = 1 - 0.1 (0.5 / (0.5 + 1e-8) + 0.01) = 0.899000002
     *   g = -2:  m_hat = -2, v_hat = 4, p = 1 - 0.1 (-2 / (2 + 1e-8) + 0.01) = 1.0990000005 */
    prnn_adamw_config cfg = prnn_adamw_config_default();
    cfg.lr = 0.1, cfg.weight_decay = 0.01;
    float p[2] = {1, 1}, m[2] = {0, 0}, v[2] = {0, 0}, g[2] = {0.5f, -2};
    uint16_t lp[2];
    TU_REQUIRE(prnn_adamw_step(g_ctx, p, m, v, lp, g, 2, 1, &cfg));
    /* fp32 of numbers near 1: ulp 6e-8 (1.2e-7 above 1); a few roundings */
    tu_check(fabs(p[0] - 0.899000002) < 3e-7 && fabs(p[1] - 1.0990000005) < 3e-7 &&
                 fabs(m[0] - 0.05) < 1e-8 && fabs(v[1] - 0.004) < 1e-9,
             "adamw step 1 by hand: p = (%.9f, %.9f), want (0.899000002, 1.099000000)", p[0], p[1]);
    tu_check(lp[0] == bf16_bits(p[0]) && lp[1] == bf16_bits(p[1]), "adamw bf16 copy = rounded new weights");

    /* 5 steps of a double reference on random data */
    const int64_t n = 1000;
    cfg = prnn_adamw_config_default();
    cfg.lr = 3e-3, cfg.weight_decay = 0.1, cfg.beta2 = 0.99;
    double *pd = rnd_signed(n, 0.1, 1), *md = tu_malloc((size_t)n * 8), *vd = tu_malloc((size_t)n * 8);
    round_f32(pd, n);
    float *pf = to_f32(pd, n), *mf = tu_malloc((size_t)n * 4), *vf = tu_malloc((size_t)n * 4);
    memset(md, 0, (size_t)n * 8), memset(vd, 0, (size_t)n * 8);
    memset(mf, 0, (size_t)n * 4), memset(vf, 0, (size_t)n * 4);
    uint16_t *lpn = tu_malloc((size_t)n * 2);
    for (int step = 1; step <= 5; step++) {
        double *gd = rnd_signed(n, 0.01, 1);
        round_f32(gd, n);
        float *gf = to_f32(gd, n);
        TU_REQUIRE(prnn_adamw_step(g_ctx, pf, mf, vf, step == 5 ? lpn : NULL, gf, n, step, &cfg));
        const double bc1 = 1 - pow(cfg.beta1, step), bc2 = 1 - pow(cfg.beta2, step);
        for (int64_t i = 0; i < n; i++) {
            md[i] = cfg.beta1 * md[i] + (1 - cfg.beta1) * gd[i];
            vd[i] = cfg.beta2 * vd[i] + (1 - cfg.beta2) * gd[i] * gd[i];
            pd[i] -= cfg.lr * (md[i] / bc1 / (sqrt(vd[i] / bc2) + cfg.eps) + cfg.weight_decay * pd[i]);
        }
        free(gd), free(gf);
    }
    /* fp32 state over 5 steps: each step moves p by ~lr with ~1e-7 relative
     * error in the update; p itself carries ~1 ulp per step */
    close_f32("adamw 5 steps vs double reference: params", pf, pd, n, 1e-6);
    close_f32("adamw 5 steps vs double reference: m", mf, md, n, 1e-6);
    close_f32("adamw 5 steps vs double reference: v", vf, vd, n, 1e-6);
    int64_t bad = 0;
    for (int64_t i = 0; i < n; i++) bad += lpn[i] != bf16_bits(pf[i]);
    tu_check(bad == 0, "adamw bf16 copy: round-to-nearest-even of the fp32 weights (%lld wrong)", (long long)bad);

    /* gradient norm: double reference; the same bits on 1 and 3 threads */
    const int64_t ng = 50021; /* several 4096-element blocks and a partial one */
    double *gd = rnd_signed(ng, 0.01, 2), ref = 0;
    round_f32(gd, ng);
    for (int64_t i = 0; i < ng; i++) ref += gd[i] * gd[i];
    float *gf = to_f32(gd, ng), s3, s1;
    double h3, h1;
    TU_REQUIRE(prnn_grad_sumsq(g_ctx, &s3, &h3, gf, ng));
    TU_REQUIRE(prnn_grad_sumsq(g_ctx1, &s1, &h1, gf, ng));
    tu_check(fabs(h3 - ref) / ref < 1e-12 && fabs(s3 - ref) / ref < 1e-7,
             "grad sumsq vs double: rel err %.1e (tol 1e-12), f32 %.1e (tol 1e-7)", fabs(h3 - ref) / ref,
             fabs(s3 - ref) / ref);
    tu_check(h1 == h3 && s1 == s3, "grad sumsq: 1 and 3 threads give the same bits");

    /* clipping: scaled to max_norm when above, untouched when below */
    const double norm = sqrt(ref), max_norm = norm / 3;
    float *gc = to_f32(gd, ng);
    TU_REQUIRE(prnn_grad_clip(g_ctx, gc, &s3, ng, max_norm));
    double after = 0;
    for (int64_t i = 0; i < ng; i++) after += (double)gc[i] * gc[i];
    tu_check(fabs(sqrt(after) - max_norm) / max_norm < 1e-6,
             "grad clip: norm %.4f -> %.6f (want %.6f)", norm, sqrt(after), max_norm);
    memcpy(gc, gf, (size_t)ng * 4);
    TU_REQUIRE(prnn_grad_clip(g_ctx, gc, &s3, ng, norm * 2));
    tu_check(!memcmp(gc, gf, (size_t)ng * 4), "grad clip: below max_norm the buffer is untouched");

    free(pd), free(md), free(vd), free(pf), free(mf), free(vf), free(lpn), free(gd), free(gf), free(gc);
}

/* ------------------------------------------------------------------------ */
/* 8. Bad input                                                             */

static void expect(prnn_status got, prnn_status want, const char *what)
{
    tu_check(got == want, "bad input: %s -> %s", what, prnn_strerror(got));
}

static void check_bad_input(void)
{
    printf("bad input\n");
    enum { N = 4, D = 3, V = 5 };
    float x[N * D], y[N * D], W[D * D], g[D], s[N], big[64];
    double xd[N * D];
    int32_t ids[N] = {0, 1, 2, 3}, bad = 0;
    tu_fill_f32(x, N * D, 0.5, 1.5), tu_fill_f32(W, D * D, 0.5, 1.5), tu_fill_f32(g, D, 0.5, 1.5);
    tu_fill_f32(big, 64, 0.5, 1.5);
    tu_fill_f64(xd, N * D, 0.5, 1.5);
    const int64_t huge = INT64_MAX / 2;
    const prnn_dtype bf16 = PRNN_DTYPE_BF16;

    /* pointers, sizes, dtypes */
    expect(prnn_embedding_forward(NULL, y, NULL, ids, x, N, V, D, F32), PRNN_ERR_NULL_POINTER, "embedding ctx NULL");
    expect(prnn_embedding_forward(g_ctx, y, NULL, NULL, x, N, V, D, F32), PRNN_ERR_NULL_POINTER, "embedding ids NULL");
    expect(prnn_embedding_forward(g_ctx, y, NULL, ids, x, 0, V, D, F32), PRNN_ERR_INVALID_SIZE, "embedding N = 0");
    expect(prnn_embedding_forward(g_ctx, y, NULL, ids, x, N, V, -1, F32), PRNN_ERR_INVALID_SIZE, "embedding D < 0");
    expect(prnn_embedding_forward(g_ctx, y, NULL, ids, x, N, V, D, bf16), PRNN_ERR_UNSUPPORTED, "embedding bf16 on the CPU");
    expect(prnn_embedding_forward(g_ctx, y, NULL, ids, x, N, V, D, (prnn_dtype)99), PRNN_ERR_INVALID_ARGUMENT, "embedding dtype 99");
    expect(prnn_embedding_forward(g_ctx, y, NULL, ids, x, huge, V, D, F32), PRNN_ERR_SIZE_OVERFLOW, "embedding N*D overflows");
    expect(prnn_linear_forward(g_ctx, y, x, W, NULL, N, huge, D, F32), PRNN_ERR_SIZE_OVERFLOW, "linear N*D overflows");
    expect(prnn_linear_forward(g_ctx, y, x, NULL, NULL, N, D, D, F32), PRNN_ERR_NULL_POINTER, "linear W NULL");
    expect(prnn_linear_backward(g_ctx, y, NULL, NULL, x, x, W, N, D, D, F32), PRNN_ERR_NULL_POINTER, "linear dW NULL");
    expect(prnn_rmsnorm_backward(g_ctx, y, g, x, x, g, NULL, N, D, F32), PRNN_ERR_NULL_POINTER, "rmsnorm backward rstd NULL");
    expect(prnn_layernorm_backward(g_ctx, y, g, NULL, x, x, g, NULL, s, N, D, F32), PRNN_ERR_NULL_POINTER, "layernorm backward mean NULL");
    expect(prnn_xent_backward(g_ctx, y, x, ids, NULL, N, D, 1.0, F32), PRNN_ERR_NULL_POINTER, "xent backward lse NULL");
    expect(prnn_grad_sumsq(g_ctx, NULL, NULL, x, N), PRNN_ERR_NULL_POINTER, "grad sumsq without an output");
    expect(prnn_adamw_step(g_ctx, x, y, W, NULL, g, D, 1, NULL), PRNN_ERR_NULL_POINTER, "adamw cfg NULL");

    /* options */
    expect(prnn_rmsnorm_forward(g_ctx, y, s, x, g, N, D, -1e-5, F32), PRNN_ERR_INVALID_ARGUMENT, "rmsnorm eps < 0");
    expect(prnn_layernorm_forward(g_ctx, y, NULL, s, x, g, NULL, N, D, NAN, F32), PRNN_ERR_INVALID_ARGUMENT, "layernorm eps NaN");
    expect(prnn_dropout_forward(g_ctx, y, x, N * D, 1.0, 1, F32), PRNN_ERR_INVALID_ARGUMENT, "dropout p = 1");
    expect(prnn_dropout_forward(g_ctx, y, x, N * D, -0.1, 1, F32), PRNN_ERR_INVALID_ARGUMENT, "dropout p < 0");
    expect(prnn_dropout_forward(g_ctx, y, x, N * D, NAN, 1, F32), PRNN_ERR_INVALID_ARGUMENT, "dropout p NaN");
    expect(prnn_xent_backward(g_ctx, y, x, ids, s, N, D, INFINITY, F32), PRNN_ERR_INVALID_ARGUMENT, "xent backward dloss inf");
    expect(prnn_axpby(g_ctx, y, x, x, N, NAN, 1, F32), PRNN_ERR_INVALID_ARGUMENT, "axpby alpha NaN");
    prnn_adamw_config cfg = prnn_adamw_config_default();
    expect(prnn_adamw_step(g_ctx, x, y, W, NULL, g, D, 0, &cfg), PRNN_ERR_INVALID_ARGUMENT, "adamw step 0");
    cfg.beta1 = 1;
    expect(prnn_adamw_step(g_ctx, x, y, W, NULL, g, D, 1, &cfg), PRNN_ERR_INVALID_ARGUMENT, "adamw beta1 = 1");
    cfg = prnn_adamw_config_default(), cfg.eps = 0;
    expect(prnn_adamw_step(g_ctx, x, y, W, NULL, g, D, 1, &cfg), PRNN_ERR_INVALID_ARGUMENT, "adamw eps = 0");
    cfg = prnn_adamw_config_default(), cfg.lr = NAN;
    expect(prnn_adamw_step(g_ctx, x, y, W, NULL, g, D, 1, &cfg), PRNN_ERR_INVALID_ARGUMENT, "adamw lr NaN");
    expect(prnn_grad_clip(g_ctx, x, s, N, 0.0), PRNN_ERR_INVALID_ARGUMENT, "grad clip max_norm = 0");

    /* aliasing */
    expect(prnn_linear_forward(g_ctx, x, x, W, NULL, N, D, D, F32), PRNN_ERR_ALIASING, "linear y == x");
    expect(prnn_rmsnorm_backward(g_ctx, y, g, y, x, g, s, N, D, F32), PRNN_ERR_ALIASING, "rmsnorm dx == dy");
    expect(prnn_layernorm_forward(g_ctx, y, s, s, x, g, NULL, N, D, 1e-5, F32), PRNN_ERR_ALIASING, "layernorm mean == rstd");
    expect(prnn_dropout_forward(g_ctx, big + 1, big, 32, 0.5, 1, F32), PRNN_ERR_ALIASING, "dropout y = x + 1 (shifted overlap)");
    expect(prnn_add(g_ctx, big + 2, big, big + 30, 16, F32), PRNN_ERR_ALIASING, "add y = a + 2 (shifted overlap)");
    cfg = prnn_adamw_config_default();
    expect(prnn_adamw_step(g_ctx, x, x, W, NULL, g, D, 1, &cfg), PRNN_ERR_ALIASING, "adamw m == params");
    expect(prnn_grad_clip(g_ctx, x, x + 1, N, 1.0), PRNN_ERR_ALIASING, "grad clip sumsq inside g");

    /* out-of-range indices: a status and the flag, nothing written */
    for (int i = 0; i < N * D; i++) y[i] = -7;
    int32_t ids_bad[N] = {0, 1, V, 2};
    expect(prnn_embedding_forward(g_ctx, y, &bad, ids_bad, x, N, V, D, F32), PRNN_ERR_INVALID_ARGUMENT, "embedding id = V");
    int untouched = 1;
    for (int i = 0; i < N * D; i++) untouched &= y[i] == -7;
    tu_check(bad == 1 && untouched, "bad input: embedding id = V sets the flag and writes nothing");
    ids_bad[2] = -1;
    expect(prnn_embedding_backward(g_ctx, big, ids_bad, x, N, V, D, F32), PRNN_ERR_INVALID_ARGUMENT, "embedding backward id = -1");
    int32_t t_bad[N] = {0, -1, -2, 1};
    float loss = -7;
    bad = 0;
    expect(prnn_xent_forward(g_ctx, &loss, NULL, NULL, &bad, x, t_bad, N, D, F32), PRNN_ERR_INVALID_ARGUMENT, "xent target = -2");
    tu_check(bad == 1 && loss == -7, "bad input: xent target = -2 sets the flag and writes nothing");
    t_bad[2] = D;
    expect(prnn_xent_backward(g_ctx, y, x, t_bad, s, N, D, 1.0, F32), PRNN_ERR_INVALID_ARGUMENT, "xent backward target = V");
}

/* ------------------------------------------------------------------------ */

int main(int argc, char **argv)
{
    uint64_t seed = tu_seed_from_env();
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--seed") && i + 1 < argc) {
            seed = strtoull(argv[++i], NULL, 0);
        } else {
            fprintf(stderr, "usage: %s [--seed N]\n", argv[0]);
            return 2;
        }
    }
    printf("seed %llu (--seed %llu repeats this run)\n", (unsigned long long)seed,
           (unsigned long long)seed);
    tu_seed(seed);

    prnn_ctx_config cfg = prnn_ctx_config_default();
    cfg.num_threads = 3;
    TU_REQUIRE(prnn_ctx_init(&g_ctx, &cfg));
    cfg.num_threads = 1;
    TU_REQUIRE(prnn_ctx_init(&g_ctx1, &cfg));

    check_embedding();
    check_linear();
    check_norms();
    check_xent();
    check_dropout();
    check_elementwise();
    check_optimizer();
    check_bad_input();

    prnn_ctx_free(g_ctx);
    prnn_ctx_free(g_ctx1);
    return tu_finish();
}
