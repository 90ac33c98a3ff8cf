/*
 * test_model.c - the residual model of prnn_model.h on the CPU: its
 * gradients against central finite differences in double (every cell type,
 * both norms, dropout, bidirectional), the recurrent one-token step against
 * the parallel forward, the parameter table, a loss that falls under AdamW,
 * and bad arguments.
 *
 * Size letters: B batch rows, T steps, V vocabulary, E model width.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "prnn.h"
#include "prnn_blocks.h"
#include "prnn_cell.h"
#include "prnn_model.h"
#include "test_util.h"

static uint64_t g_seed;

static uint64_t next_u64(uint64_t *s)
{
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static prnn_ctx *cpu_ctx(int threads)
{
    prnn_ctx_config c = prnn_ctx_config_default();
    c.num_threads = threads;
    prnn_ctx *ctx = NULL;
    if (prnn_ctx_init(&ctx, &c) != PRNN_OK) {
        fprintf(stderr, "cannot create a CPU context\n");
        exit(1);
    }
    return ctx;
}

static prnn_model_config small_config(prnn_cell_type type, int64_t V, int64_t E, int64_t L,
                                      prnn_dtype dt)
{
    prnn_model_config c = prnn_model_config_default();
    c.vocab = V;
    c.dim = E;
    c.layers = L;
    c.cell = prnn_cell_desc_make(type, E, E);
    c.dtype = dt;
    return c;
}

static void random_tokens(int32_t *ids, int32_t *targets, int64_t n, int64_t V, uint64_t *s)
{
    for (int64_t i = 0; i < n; i++) {
        ids[i] = (int32_t)(next_u64(s) % (uint64_t)V);
        /* about one target in eight ignored, as padding would be */
        targets[i] = next_u64(s) % 8 == 0 ? -1 : (int32_t)(next_u64(s) % (uint64_t)V);
    }
}

static double model_loss(prnn_model *m, int64_t B, int64_t T, const int32_t *ids,
                         const int32_t *tg, uint64_t drop_seed)
{
    double loss = 0;
    /* train = 1 so dropout applies, with the same masks as the backward's */
    if (prnn_model_forward(m, B, T, &loss, ids, tg, 1, drop_seed) != PRNN_OK) return NAN;
    return loss;
}

/* ------------------------------------------------------------------------ */
/* Gradients against central differences                                    */

static void check_gradients(const char *label, prnn_model_config cfg, int64_t B, int64_t T)
{
    prnn_ctx *ctx = cpu_ctx(2);
    prnn_model *m = NULL;
    prnn_status s = prnn_model_init(ctx, &m, &cfg);
    if (s != PRNN_OK) {
        tu_check(0, "%s: model_init: %s", label, prnn_strerror(s));
        prnn_ctx_free(ctx);
        return;
    }
    uint64_t rs = g_seed ^ (uint64_t)strlen(label) * 7919u;
    prnn_model_init_params(m, next_u64(&rs));
    const int64_t P = prnn_model_param_count(m), N = B * T;
    double *p = prnn_model_params(m), *g = prnn_model_grads(m);
    /* Perturb gains and biases away from 1 and 0 so that their gradients
     * are exercised in general position. */
    for (int64_t i = 0; i < P; i++) p[i] += 0.2 * ((double)(next_u64(&rs) >> 11) * 0x1.0p-53 - 0.5);
    int32_t *ids = malloc((size_t)N * sizeof *ids), *tg = malloc((size_t)N * sizeof *tg);
    random_tokens(ids, tg, N, cfg.vocab, &rs);
    tg[0] = 1; /* at least one counted target */
    const uint64_t ds = next_u64(&rs);

    prnn_model_zero_grads(m);
    double loss = model_loss(m, B, T, ids, tg, ds);
    s = prnn_model_backward(m, 1.0);
    double *ga = malloc((size_t)P * sizeof *ga);
    memcpy(ga, g, (size_t)P * sizeof *ga);

    /* Every parameter: central differences with h = 1e-6 have truncation
     * error ~h^2 * f''' ~ 1e-12 and rounding ~eps * |f| / h ~ 1e-10, so
     * agreement to 1e-6 relative to the largest gradient is a sharp test. */
    const double h = 1e-6;
    double gmax = 0, emax = 0;
    int64_t worst = -1;
    /* All parameters of small models; a random 160 of bigger ones (the
     * sanitizer build runs this too). */
    const int64_t nprobe = P < 160 ? P : 160;
    for (int64_t k = 0; k < nprobe; k++) {
        const int64_t i = P <= 160 ? k : (int64_t)(next_u64(&rs) % (uint64_t)P);
        const double keep = p[i];
        p[i] = keep + h;
        const double lp = model_loss(m, B, T, ids, tg, ds);
        p[i] = keep - h;
        const double lm = model_loss(m, B, T, ids, tg, ds);
        p[i] = keep;
        const double fd = (lp - lm) / (2 * h);
        if (fabs(fd) > gmax) gmax = fabs(fd);
        const double e = fabs(fd - ga[i]);
        if (e > emax) emax = e, worst = i;
    }
    const double rel = gmax > 0 ? emax / gmax : emax;
    tu_check(s == PRNN_OK && isfinite(loss) && rel < 1e-6,
          "%s: dL/dparams (%lld of %lld) vs central differences: max err %.2e rel %.2e (tol 1e-6) at %lld",
          label, (long long)nprobe, (long long)P, emax, rel, (long long)worst);
    free(ga);
    free(ids);
    free(tg);
    prnn_model_free(m);
    prnn_ctx_free(ctx);
}

/* ------------------------------------------------------------------------ */
/* Recurrent step against the parallel forward                              */

static void check_step(const char *label, prnn_model_config cfg, int64_t B, int64_t T)
{
    prnn_ctx *ctx = cpu_ctx(2);
    prnn_model *m = NULL;
    if (prnn_model_init(ctx, &m, &cfg) != PRNN_OK) {
        tu_check(0, "%s: model_init", label);
        prnn_ctx_free(ctx);
        return;
    }
    uint64_t rs = g_seed ^ 0x5735u;
    prnn_model_init_params(m, next_u64(&rs));
    const int64_t N = B * T, V = cfg.vocab;
    int32_t *ids = malloc((size_t)N * sizeof *ids), *tg = malloc((size_t)N * sizeof *tg);
    random_tokens(ids, tg, N, V, &rs);
    prnn_status s = prnn_model_forward(m, B, T, NULL, ids, NULL, 0, 0);
    const double *par = prnn_model_logits(m); /* (B, T, V) */

    int64_t S = 0;
    prnn_model_state_floats(m, &S);
    double *state = calloc((size_t)(B * S), sizeof *state);
    double *lg = malloc((size_t)(B * V) * sizeof *lg);
    int32_t *col = malloc((size_t)B * sizeof *col);
    double emax = 0, rms = 0;
    for (int64_t t = 0; t < T && s == PRNN_OK; t++) {
        for (int64_t b = 0; b < B; b++) col[b] = ids[b * T + t];
        s = prnn_model_step(m, B, lg, state, col);
        for (int64_t b = 0; b < B; b++)
            for (int64_t v = 0; v < V; v++) {
                const double want = par[(b * T + t) * V + v];
                const double e = fabs(lg[b * V + v] - want);
                if (e > emax) emax = e;
                rms += want * want;
            }
    }
    rms = sqrt(rms / (double)(N * V));
    /* Both evaluate the same recurrence in double; they differ only in
     * summation order (tree scan vs step): ~1e-15 relative per step. */
    tu_check(s == PRNN_OK && emax <= 1e-10 * (rms + 1),
          "%s: recurrent step vs parallel forward, logits max err %.2e (tol 1e-10 x rms %.2f)",
          label, emax, rms);
    free(state);
    free(lg);
    free(col);
    free(ids);
    free(tg);
    prnn_model_free(m);
    prnn_ctx_free(ctx);
}

/* ------------------------------------------------------------------------ */
/* Training: the loss falls                                                 */

static void check_learns(void)
{
    prnn_ctx *ctx = cpu_ctx(2);
    prnn_model_config cfg = small_config(PRNN_CELL_MINGRU, 16, 32, 2, PRNN_DTYPE_F32);
    prnn_model *m = NULL;
    prnn_model_init(ctx, &m, &cfg);
    prnn_model_init_params(m, 7);
    const int64_t B = 4, T = 64, N = B * T, P = prnn_model_param_count(m);
    /* A sequence with memory: token t+1 = (token t + token t-3) mod 16, so
     * predicting it needs the last four tokens. */
    int32_t *ids = malloc((size_t)N * sizeof *ids), *tg = malloc((size_t)N * sizeof *tg);
    uint64_t rs = g_seed;
    for (int64_t b = 0; b < B; b++) {
        int32_t w[64 + 1];
        for (int k = 0; k < 4; k++) w[k] = (int32_t)(next_u64(&rs) % 16);
        for (int64_t t = 4; t <= T; t++) w[t] = (w[t - 1] + w[t - 4]) % 16;
        for (int64_t t = 0; t < T; t++) ids[b * T + t] = w[t], tg[b * T + t] = t >= 4 ? w[t + 1] : -1;
    }
    float *mo = calloc((size_t)P, sizeof *mo), *vo = calloc((size_t)P, sizeof *vo);
    prnn_adamw_config ac = prnn_adamw_config_default();
    ac.lr = 1e-2;
    float first = 0, last = 0;
    prnn_status s = PRNN_OK;
    for (int step = 1; step <= 150 && s == PRNN_OK; step++) {
        float loss = 0;
        prnn_model_zero_grads(m);
        s = prnn_model_forward(m, B, T, &loss, ids, tg, 1, (uint64_t)step);
        if (s == PRNN_OK) s = prnn_model_backward(m, 1.0);
        if (s == PRNN_OK)
            s = prnn_adamw_step(ctx, prnn_model_params(m), mo, vo, NULL, prnn_model_grads(m), P,
                                step, &ac);
        if (step == 1) first = loss;
        last = loss;
    }
    /* ln 16 = 2.77 at the start; a model that learns the rule goes far
     * below it (seen: ~0.1 after 150 steps). */
    tu_check(s == PRNN_OK && first > 2.0f && last < 0.5f * first,
          "model learns a rule with memory: loss %.3f -> %.3f after 150 AdamW steps (want < half)",
          (double)first, (double)last);
    free(mo);
    free(vo);
    free(ids);
    free(tg);
    prnn_model_free(m);
    prnn_ctx_free(ctx);
}

/* ------------------------------------------------------------------------ */
/* Parameter table and bad input                                            */

static void check_table(void)
{
    prnn_ctx *ctx = cpu_ctx(1);
    prnn_model_config cfg = small_config(PRNN_CELL_GILR_LSTM, 11, 8, 3, PRNN_DTYPE_F32);
    cfg.norm = PRNN_NORM_LAYER;
    prnn_model *m = NULL;
    prnn_status s = prnn_model_init(ctx, &m, &cfg);
    int ok = s == PRNN_OK;
    int64_t next = 0, decayed = 0;
    for (int i = 0; ok && i < prnn_model_tensor_count(m); i++) {
        prnn_tensor_info t;
        prnn_model_tensor(m, i, &t);
        ok = t.offset == next && t.count == t.shape[0] * t.shape[1] && t.name[0];
        next += t.count;
        decayed += t.decay ? t.count : 0;
    }
    tu_check(ok && next == prnn_model_param_count(m) && decayed > 0 && decayed < next,
          "parameter table tiles the buffer in order (%d tensors, %lld params, %lld decayed)",
          ok ? prnn_model_tensor_count(m) : 0, (long long)next, (long long)decayed);
    prnn_tensor_info t;
    tu_check(prnn_model_tensor(m, -1, &t) == PRNN_ERR_INVALID_ARGUMENT &&
              prnn_model_tensor(m, prnn_model_tensor_count(m), &t) == PRNN_ERR_INVALID_ARGUMENT,
          "tensor index out of range is rejected");
    tu_check(prnn_model_backward(m, 1.0) == PRNN_ERR_INVALID_ARGUMENT,
          "backward without a train-mode forward is rejected");
    int32_t id = 0;
    float lg[11];
    float st[1];
    tu_check(prnn_model_forward(m, 0, 4, NULL, &id, NULL, 0, 0) == PRNN_ERR_INVALID_SIZE &&
              prnn_model_forward(m, 1, 1, NULL, NULL, NULL, 0, 0) == PRNN_ERR_NULL_POINTER &&
              prnn_model_step(m, 1, lg, NULL, &id) == PRNN_ERR_NULL_POINTER &&
              prnn_model_step(m, 0, lg, st, &id) == PRNN_ERR_INVALID_SIZE,
          "bad forward and step arguments get their status");
    prnn_model_free(m);

    prnn_model_config bad = cfg;
    bad.layers = 0;
    tu_check(prnn_model_init(ctx, &m, &bad) == PRNN_ERR_INVALID_SIZE && !m, "layers = 0 rejected");
    bad = cfg;
    bad.dropout = 1.0;
    tu_check(prnn_model_init(ctx, &m, &bad) == PRNN_ERR_INVALID_ARGUMENT, "dropout = 1 rejected");
    bad = cfg;
    bad.dtype = PRNN_DTYPE_BF16;
    tu_check(prnn_model_init(ctx, &m, &bad) == PRNN_ERR_UNSUPPORTED, "bf16 on the CPU rejected");
    bad = cfg;
    bad.cell.bidirectional = 1;
    bad.dim = 7;
    tu_check(prnn_model_init(ctx, &m, &bad) == PRNN_ERR_INVALID_SIZE,
          "bidirectional with an odd width rejected");
    bad = cfg;
    bad.norm = (prnn_norm_type)9;
    tu_check(prnn_model_init(ctx, &m, &bad) == PRNN_ERR_INVALID_ARGUMENT, "bad norm rejected");
    tu_check(prnn_model_init(NULL, &m, &cfg) == PRNN_ERR_NULL_POINTER &&
              prnn_model_init(ctx, NULL, &cfg) == PRNN_ERR_NULL_POINTER &&
              prnn_model_init(ctx, &m, NULL) == PRNN_ERR_NULL_POINTER,
          "NULL arguments rejected");
    prnn_model_free(NULL);
    prnn_ctx_free(ctx);
}

int main(int argc, char **argv)
{
    (void)argc, (void)argv;
    g_seed = tu_seed_from_env();
    printf("prnn model tests, seed %llu (PRNN_TEST_SEED=%llu repeats this run)\n",
           (unsigned long long)g_seed, (unsigned long long)g_seed);

    static const prnn_cell_type cells[] = {PRNN_CELL_MINGRU, PRNN_CELL_MINLSTM, PRNN_CELL_QRNN,
                                           PRNN_CELL_SRU, PRNN_CELL_GILR_LSTM};
    char label[128];
    for (size_t i = 0; i < sizeof cells / sizeof cells[0]; i++) {
        prnn_model_config c = small_config(cells[i], 7, 6, 2, PRNN_DTYPE_F64);
        snprintf(label, sizeof label, "f64 %s rmsnorm", prnn_cell_type_name(cells[i]));
        check_gradients(label, c, 2, 5);
        c.norm = PRNN_NORM_LAYER;
        c.dropout = 0.3;
        snprintf(label, sizeof label, "f64 %s layernorm dropout", prnn_cell_type_name(cells[i]));
        check_gradients(label, c, 3, 4);
        c.dropout = 0;
        c.cell.bidirectional = 1;
        snprintf(label, sizeof label, "f64 %s bidirectional", prnn_cell_type_name(cells[i]));
        check_gradients(label, c, 2, 5);
    }
    prnn_model_config q = small_config(PRNN_CELL_QRNN, 7, 6, 2, PRNN_DTYPE_F64);
    q.cell.window = 2;
    q.cell.pooling = PRNN_QRNN_IFO;
    check_gradients("f64 qrnn ifo window 2", q, 2, 5);

    for (size_t i = 0; i < sizeof cells / sizeof cells[0]; i++) {
        prnn_model_config c = small_config(cells[i], 9, 8, 3, PRNN_DTYPE_F64);
        snprintf(label, sizeof label, "f64 %s", prnn_cell_type_name(cells[i]));
        check_step(label, c, 3, 17);
    }
    check_step("f64 qrnn ifo window 2", q, 2, 9);

    check_table();
    check_learns();
    return tu_finish();
}
