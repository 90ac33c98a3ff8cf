/*
 * test_cell.c - the CPU test suite of the cell layers (prnn_cell.h): minGRU,
 * minLSTM, QRNN, SRU and GILR-LSTM.
 *
 *   1. sizes, and the forward (F64 and F32) against a plain step-by-step
 *      reference in double written from the header's equations; the F32
 *      backward against the F64 one;
 *   2. prnn_cell_step looped over t against the forward and the reference;
 *   3. every backward against central finite differences in double, with
 *      dparams pre-filled (the backward adds to it); log space against
 *      linear space;
 *   4. the memory option (recompute = k) against k = 0;
 *   5. a sequence in two chunks, state passed on, against the whole;
 *   6. prnn_cell_init_params: determinism and the documented ranges;
 *   7. bad input: every invalid argument gives a status and no crash;
 *   8. one and two threads give the same results.
 *
 * Size letters: B batch rows, T time steps, D input features, H hidden units
 * per direction, G gate groups, S state floats per direction (S2 for the
 * whole layer), P parameters.
 * Inputs are fresh random numbers each run; the seed is printed, and
 * --seed <seed> (or PRNN_TEST_SEED=<seed>) repeats a run.
 */
#include "test_util.h"

#include "prnn_cell.h"

/* CPU contexts with 1 and 2 threads. Checks run on one thread, and on two
 * where threads are the point (the larger forward shapes, whose scans the
 * tree splits over the threads, and the thread check): on a busy machine a
 * parallel region costs a scheduler slice, more than a small problem's
 * whole work. */
static prnn_ctx *g_ctx[2];

/* ------------------------------------------------------------------------ */
/* Cell variants and options                                                */

typedef struct {
    const char *name;
    prnn_cell_type type;
    prnn_qrnn_pooling pooling;
    int window;    /* QRNN: 1 or 2 (1 for the others) */
    int log_space; /* MINGRU, MINLSTM */
    int proj;      /* SRU: 1 = D != H (projection group p), 0 = D == H */
} variant;

static const variant k_variants[] = {
    {"mingru", PRNN_CELL_MINGRU, PRNN_QRNN_FO, 1, 0, 0},
    {"mingru-log", PRNN_CELL_MINGRU, PRNN_QRNN_FO, 1, 1, 0},
    {"minlstm", PRNN_CELL_MINLSTM, PRNN_QRNN_FO, 1, 0, 0},
    {"minlstm-log", PRNN_CELL_MINLSTM, PRNN_QRNN_FO, 1, 1, 0},
    {"qrnn-f-w1", PRNN_CELL_QRNN, PRNN_QRNN_F, 1, 0, 0},
    {"qrnn-fo-w1", PRNN_CELL_QRNN, PRNN_QRNN_FO, 1, 0, 0},
    {"qrnn-ifo-w1", PRNN_CELL_QRNN, PRNN_QRNN_IFO, 1, 0, 0},
    {"qrnn-f-w2", PRNN_CELL_QRNN, PRNN_QRNN_F, 2, 0, 0},
    {"qrnn-fo-w2", PRNN_CELL_QRNN, PRNN_QRNN_FO, 2, 0, 0},
    {"qrnn-ifo-w2", PRNN_CELL_QRNN, PRNN_QRNN_IFO, 2, 0, 0},
    {"sru-highway", PRNN_CELL_SRU, PRNN_QRNN_FO, 1, 0, 0},
    {"sru-proj", PRNN_CELL_SRU, PRNN_QRNN_FO, 1, 0, 1},
    {"gilr-lstm", PRNN_CELL_GILR_LSTM, PRNN_QRNN_FO, 1, 0, 0},
};
enum { N_VARIANTS = (int)(sizeof k_variants / sizeof k_variants[0]) };

enum {
    OPT_BIAS = 1,  /* desc.bias */
    OPT_H0 = 2,    /* h0 given (else NULL = zeros) */
    OPT_HT = 4,    /* hT requested and dhT given */
    OPT_BIDIR = 8, /* desc.bidirectional */
    OPT_LEN = 16,  /* lengths given, including 0, 1 and T */
    OPT_ALL = 31
};

static const char *opts_name(unsigned o, char *buf, size_t n)
{
    snprintf(buf, n, "%s%s%s%s%s", o & OPT_BIAS ? "bias," : "", o & OPT_H0 ? "h0," : "",
             o & OPT_HT ? "hT," : "", o & OPT_BIDIR ? "bidir," : "", o & OPT_LEN ? "len," : "");
    size_t k = strlen(buf);
    if (k == 0) snprintf(buf, n, "plain");
    else buf[k - 1] = 0;
    return buf;
}

/* ------------------------------------------------------------------------ */
/* A problem: one layer with its inputs, all in double                      */

typedef struct {
    const variant *v;
    prnn_cell_desc d; /* dtype F64; runs in other dtypes copy it */
    unsigned opts;
    int64_t B, T, D, H;
    /* Sizes from the header's text, not from the library. */
    int64_t G, Din, dirs, Hout, S, S2, blk, P;
    int64_t *lengths;                     /* (B) or NULL */
    double *x, *params, *h0, *dy, *dhT;  /* (B,T,D) (P) (B,S2) (B,T,Hout) (B,S2) */
} problem;

static int64_t expected_gates(const variant *v, int64_t D, int64_t H)
{
    switch (v->type) {
    case PRNN_CELL_MINGRU: return 2;
    case PRNN_CELL_MINLSTM: return 3;
    case PRNN_CELL_QRNN: return v->pooling == PRNN_QRNN_F ? 2 : v->pooling == PRNN_QRNN_FO ? 3 : 4;
    case PRNN_CELL_SRU: return D == H ? 3 : 4;
    case PRNN_CELL_GILR_LSTM: return 6;
    default: return 0;
    }
}

static int is_gilr(const problem *p) { return p->v->type == PRNN_CELL_GILR_LSTM; }
static int is_w2(const problem *p) { return p->v->type == PRNN_CELL_QRNN && p->v->window == 2; }

/* Offsets inside one direction's parameter block. */
static int64_t off_U(const problem *p) { return p->Din * p->G * p->H; }
static int64_t off_bias(const problem *p) { return off_U(p) + (is_gilr(p) ? 4 * p->H * p->H : 0); }

static int64_t row_len(const problem *p, int64_t b) { return p->lengths ? p->lengths[b] : p->T; }

static double sigm(double v) { return 1.0 / (1.0 + exp(-v)); }
/* minGRU/minLSTM's positive activation. */
static double gpos(double v) { return v >= 0 ? v + 0.5 : sigm(v); }

/* Rounds to float so that the F32 runs and the double reference see the
 * same numbers and differ by arithmetic only. */
static void round_f32(double *x, int64_t n)
{
    for (int64_t i = 0; i < n; i++) x[i] = (double)(float)x[i];
}

/* Smallest |n| over all tokens, n the pre-activation of minGRU/minLSTM's
 * g(n): g has a kink at 0 (slopes 1/4 and 1), where central differences
 * are wrong (see away_from_kink). */
static double min_abs_n(const problem *p)
{
    const int64_t GH = p->G * p->H, ng = p->v->type == PRNN_CELL_MINGRU ? 1 : 2;
    double m = INFINITY;
    for (int64_t dir = 0; dir < p->dirs; dir++) {
        const double *w = p->params + dir * p->blk;
        for (int64_t bt = 0; bt < p->B * p->T; bt++)
            for (int64_t j = ng * p->H; j < (ng + 1) * p->H; j++) {
                double s = p->d.bias ? w[off_bias(p) + j] : 0.0;
                for (int64_t i = 0; i < p->D; i++) s += p->x[bt * p->D + i] * w[i * GH + j];
                m = fmin(m, fabs(s));
            }
    }
    return m;
}

static void problem_draw(problem *p)
{
    const int64_t nx = p->B * p->T * p->D, ny = p->B * p->T * p->Hout, ns = p->B * p->S2;
    const int64_t GH = p->G * p->H;
    tu_fill_f64(p->x, nx, -1, 1);
    /* Weights of twice the default init's range: pre-activations of O(1),
     * so gates from near 0 to near 1 and decays with memory of tens of
     * steps all occur. */
    for (int64_t dir = 0; dir < p->dirs; dir++) {
        double *w = p->params + dir * p->blk;
        tu_fill_f64(w, p->Din * GH, -2 / sqrt((double)p->Din), 2 / sqrt((double)p->Din));
        if (is_gilr(p)) tu_fill_f64(w + off_U(p), 4 * p->H * p->H, -2 / sqrt((double)p->H), 2 / sqrt((double)p->H));
        if (p->d.bias) tu_fill_f64(w + off_bias(p), GH, -1, 1);
    }
    /* States: c positive in log space (documented), x_prev and s any sign. */
    for (int64_t i = 0; i < ns; i++) {
        const int64_t k = i % p->S;
        const int is_c = is_gilr(p) ? k >= p->H : k < p->H;
        p->h0[i] = (is_c && p->v->log_space) ? tu_uniform(0.1, 1) : tu_uniform(-1, 1);
    }
    tu_fill_f64(p->dy, ny, -1, 1);
    tu_fill_f64(p->dhT, ns, -1, 1);
    round_f32(p->x, nx), round_f32(p->params, p->P), round_f32(p->h0, ns);
    round_f32(p->dy, ny), round_f32(p->dhT, ns);
}

/* Redraws a minGRU/minLSTM problem until no n lies within 1e-5 of g's
 * kink: a finite-difference step moves n by at most 1e-6 * max(|x|, |W|) <
 * 2e-6, so no partial then straddles it. Small problems only (~1000 n's:
 * a redraw is needed ~1% of the time). */
static void away_from_kink(problem *p)
{
    if (p->v->type != PRNN_CELL_MINGRU && p->v->type != PRNN_CELL_MINLSTM) return;
    for (int tries = 0; tries < 100 && min_abs_n(p) < 1e-5; tries++) problem_draw(p);
}

/* Builds a problem; returns 0 (after a failed check) when the library's
 * sizes disagree with the header's, since every buffer is cut to those. */
static int problem_init(problem *p, const variant *v, int64_t B, int64_t T, int64_t D, int64_t H,
                        unsigned opts)
{
    memset(p, 0, sizeof *p);
    if (v->type == PRNN_CELL_SRU) D = v->proj ? (D == H ? D + 1 : D) : H;
    p->v = v, p->opts = opts, p->B = B, p->T = T, p->D = D, p->H = H;
    p->d = prnn_cell_desc_make(v->type, D, H);
    p->d.dtype = PRNN_DTYPE_F64;
    p->d.bidirectional = (opts & OPT_BIDIR) ? 1 : 0;
    p->d.bias = (opts & OPT_BIAS) ? 1 : 0;
    p->d.log_space = v->log_space;
    p->d.pooling = v->pooling;
    p->d.window = v->window;
    p->G = expected_gates(v, D, H);
    p->Din = is_w2(p) ? 2 * D : D;
    p->dirs = p->d.bidirectional ? 2 : 1;
    p->Hout = p->dirs * H;
    p->S = is_gilr(p) ? 2 * H : is_w2(p) ? H + D : H;
    p->S2 = p->dirs * p->S;
    p->blk = p->Din * p->G * H + (is_gilr(p) ? 4 * H * H : 0) + (p->d.bias ? p->G * H : 0);
    p->P = p->dirs * p->blk;

    int64_t P = -1, S2 = -1;
    prnn_status s1 = prnn_cell_param_count(&p->d, &P), s2 = prnn_cell_state_size(&p->d, &S2);
    if (s1 != PRNN_OK || s2 != PRNN_OK || P != p->P || S2 != p->S2 ||
        prnn_cell_gates(&p->d) != p->G || prnn_cell_out_size(&p->d) != p->Hout) {
        tu_check(0, "%s D=%lld H=%lld: sizes: params %lld (want %lld, %s), state %lld (want %lld, %s), "
                 "gates %lld (want %lld), out %lld (want %lld)", v->name, (long long)D, (long long)H,
                 (long long)P, (long long)p->P, prnn_strerror(s1), (long long)S2, (long long)p->S2,
                 prnn_strerror(s2), (long long)prnn_cell_gates(&p->d), (long long)p->G,
                 (long long)prnn_cell_out_size(&p->d), (long long)p->Hout);
        return 0;
    }
    p->x = tu_malloc((size_t)(B * T * D) * 8);
    p->params = tu_malloc((size_t)p->P * 8);
    p->h0 = tu_malloc((size_t)(B * p->S2) * 8);
    p->dy = tu_malloc((size_t)(B * T * p->Hout) * 8);
    p->dhT = tu_malloc((size_t)(B * p->S2) * 8);
    problem_draw(p);
    if (opts & OPT_LEN) {
        p->lengths = tu_malloc((size_t)B * 8);
        /* Edge lengths T, 0 and 1 in rows 0, 1, 2; a single row gets a
         * random non-empty length. */
        for (int64_t b = 0; b < B; b++) {
            int64_t L = (int64_t)tu_uniform(0, (double)T + 1);
            if (B == 1) L = 1 + (int64_t)tu_uniform(0, (double)T);
            else if (b == 0) L = T;
            else if (b == 1) L = 0;
            else if (b == 2) L = 1;
            p->lengths[b] = L > T ? T : L;
        }
    }
    return 1;
}

static void problem_free(problem *p)
{
    free(p->x), free(p->params), free(p->h0), free(p->dy), free(p->dhT), free(p->lengths);
}

static const char *problem_label(const problem *p, const char *what, char *buf, size_t n)
{
    char o[64];
    snprintf(buf, n, "%-4s %-11s B=%lld T=%lld D=%lld H=%lld [%s]", what, p->v->name, (long long)p->B,
             (long long)p->T, (long long)p->D, (long long)p->H, opts_name(p->opts, o, sizeof o));
    return buf;
}

/* ------------------------------------------------------------------------ */
/* The reference: the recurrent form, one token at a time, in double        */

/*
 * One step of one direction, straight from the header's equations: the
 * gates from x_t (and x_prev, s_{t-1}), the state update, the output.
 *   w  the direction's parameter block
 *   st (S) the direction's state, updated
 *   xt (D), yt (H) out, Pb (G*H) scratch
 */
static void ref_step(const problem *p, const double *w, double *st, const double *xt, double *yt,
                     double *Pb)
{
    const int64_t D = p->D, H = p->H, GH = p->G * H;
    const double *bias = p->d.bias ? w + off_bias(p) : NULL;
    for (int64_t j = 0; j < GH; j++) Pb[j] = bias ? bias[j] : 0.0;
    for (int64_t i = 0; i < D; i++)
        for (int64_t j = 0; j < GH; j++) Pb[j] += xt[i] * w[i * GH + j];
    if (is_w2(p)) /* x_{t-1} W_1 with x_{t-1} the state's x_prev */
        for (int64_t i = 0; i < D; i++)
            for (int64_t j = 0; j < GH; j++) Pb[j] += st[H + i] * w[(D + i) * GH + j];
    double *c = st;
    switch (p->v->type) {
    case PRNN_CELL_MINGRU: /* [k, n] */
        for (int64_t j = 0; j < H; j++) {
            const double z = sigm(Pb[j]);
            c[j] = (1 - z) * c[j] + z * gpos(Pb[H + j]);
            yt[j] = c[j];
        }
        break;
    case PRNN_CELL_MINLSTM: /* [f, i, n] */
        for (int64_t j = 0; j < H; j++) {
            const double sf = sigm(Pb[j]), si = sigm(Pb[H + j]);
            c[j] = sf / (sf + si) * c[j] + si / (sf + si) * gpos(Pb[2 * H + j]);
            yt[j] = c[j];
        }
        break;
    case PRNN_CELL_QRNN: /* [z, f, o, i] */
        for (int64_t j = 0; j < H; j++) {
            const double a = sigm(Pb[H + j]);
            const double b = p->v->pooling == PRNN_QRNN_IFO ? sigm(Pb[3 * H + j]) * tanh(Pb[j])
                                                            : (1 - a) * tanh(Pb[j]);
            c[j] = a * c[j] + b;
            yt[j] = p->v->pooling == PRNN_QRNN_F ? c[j] : sigm(Pb[2 * H + j]) * c[j];
        }
        break;
    case PRNN_CELL_SRU: /* [u, f, r, p] */
        for (int64_t j = 0; j < H; j++) {
            const double a = sigm(Pb[H + j]), r = sigm(Pb[2 * H + j]);
            c[j] = a * c[j] + (1 - a) * Pb[j];
            const double hw = p->G == 4 ? Pb[3 * H + j] : xt[j];
            yt[j] = r * tanh(c[j]) + (1 - r) * hw;
        }
        break;
    case PRNN_CELL_GILR_LSTM: { /* [g, j, f, i, o, z]; state [s, c] */
        const double *U = w + off_U(p);
        double *s = st;
        c = st + H;
        for (int64_t m = 0; m < 4 * H; m++) { /* [f, i, o, z] += s_{t-1} U */
            double acc = 0;
            for (int64_t k = 0; k < H; k++) acc += s[k] * U[k * 4 * H + m];
            Pb[2 * H + m] += acc;
        }
        for (int64_t j = 0; j < H; j++) {
            const double sg = sigm(Pb[j]);
            s[j] = sg * s[j] + (1 - sg) * tanh(Pb[H + j]);
            c[j] = sigm(Pb[2 * H + j]) * c[j] + sigm(Pb[3 * H + j]) * tanh(Pb[5 * H + j]);
            yt[j] = sigm(Pb[4 * H + j]) * c[j];
        }
        break;
    }
    default: break;
    }
    if (is_w2(p)) memcpy(st + H, xt, (size_t)D * 8);
}

/* The whole layer: every row, both directions, lengths. h0 NULL = zeros;
 * hT may be NULL. */
static void ref_forward(const problem *p, const double *h0, double *y, double *hT)
{
    const int64_t T = p->T, D = p->D, H = p->H, S = p->S;
    double *st = tu_malloc((size_t)S * 8), *Pb = tu_malloc((size_t)(p->G * H) * 8);
    memset(y, 0, (size_t)(p->B * T * p->Hout) * 8);
    for (int64_t b = 0; b < p->B; b++) {
        const int64_t L = row_len(p, b);
        for (int64_t dir = 0; dir < p->dirs; dir++) {
            if (h0) memcpy(st, h0 + b * p->S2 + dir * S, (size_t)S * 8);
            else memset(st, 0, (size_t)S * 8);
            for (int64_t k = 0; k < L; k++) {
                const int64_t t = dir ? L - 1 - k : k;
                ref_step(p, p->params + dir * p->blk, st, p->x + (b * T + t) * D,
                         y + (b * T + t) * p->Hout + dir * H, Pb);
            }
            if (hT) memcpy(hT + b * p->S2 + dir * S, st, (size_t)S * 8);
        }
    }
    free(st), free(Pb);
}

/* ------------------------------------------------------------------------ */
/* Running the library                                                      */

/* Outputs of one library run, widened to double. dp is what the backward
 * added to dparams. */
typedef struct {
    double *y, *hT, *dx, *dp, *dh0;
} result;

static void result_alloc(result *r, const problem *p)
{
    r->y = tu_malloc((size_t)(p->B * p->T * p->Hout) * 8);
    r->hT = tu_malloc((size_t)(p->B * p->S2) * 8);
    r->dx = tu_malloc((size_t)(p->B * p->T * p->D) * 8);
    r->dp = tu_malloc((size_t)p->P * 8);
    r->dh0 = tu_malloc((size_t)(p->B * p->S2) * 8);
}

static void result_free(result *r) { free(r->y), free(r->hT), free(r->dx), free(r->dp), free(r->dh0); }

/* A copy of n doubles in dtype F32 or F64 (NULL for NULL). */
static void *to_dtype(const double *src, int64_t n, prnn_dtype dt)
{
    if (!src) return NULL;
    if (dt == PRNN_DTYPE_F64) {
        double *d = tu_malloc((size_t)n * 8);
        memcpy(d, src, (size_t)n * 8);
        return d;
    }
    float *f = tu_malloc((size_t)n * 4);
    for (int64_t i = 0; i < n; i++) f[i] = (float)src[i];
    return f;
}

static void from_dtype(double *dst, const void *src, int64_t n, prnn_dtype dt)
{
    if (dt == PRNN_DTYPE_F64) memcpy(dst, src, (size_t)n * 8);
    else
        for (int64_t i = 0; i < n; i++) dst[i] = ((const float *)src)[i];
}

static void *zeros(int64_t n, size_t elem)
{
    void *p = tu_malloc((size_t)n * elem);
    memset(p, 0, (size_t)n * elem);
    return p;
}

/* n NaNs in dtype: an element the library should write and does not fails. */
static void *poisoned(int64_t n, prnn_dtype dt)
{
    void *p = tu_malloc((size_t)n * prnn_dtype_size(dt));
    for (int64_t i = 0; i < n; i++) {
        if (dt == PRNN_DTYPE_F64) ((double *)p)[i] = NAN;
        else ((float *)p)[i] = NAN;
    }
    return p;
}

typedef struct {
    prnn_dtype dtype;
    int64_t recompute;
    prnn_scan_algo algo;
    int backward;
    const double *dp_init; /* dparams before the backward (NULL = zeros) */
    size_t act_bytes;      /* out: prnn_cell_act_bytes */
} run_cfg;

/*
 * Forward (and backward) of the problem on ctx in rc->dtype, inputs rounded
 * to it, outputs widened into r. Buffers are cut to the exact documented
 * sizes so that the sanitizer build catches any overrun. A failed call
 * records a failed check with label and returns 0.
 */
static int lib_run(prnn_ctx *ctx, const problem *p, run_cfg *rc, result *r, const char *label)
{
    const prnn_dtype dt = rc->dtype;
    prnn_cell_desc d = p->d;
    d.dtype = dt, d.recompute = rc->recompute, d.algo = rc->algo;
    const int64_t nx = p->B * p->T * p->D, ny = p->B * p->T * p->Hout, ns = p->B * p->S2;
    const int use_h0 = (p->opts & OPT_H0) != 0, use_hT = (p->opts & OPT_HT) != 0;
    void *x = to_dtype(p->x, nx, dt), *w = to_dtype(p->params, p->P, dt);
    void *h0 = use_h0 ? to_dtype(p->h0, ns, dt) : NULL;
    void *y = poisoned(ny, dt), *hT = use_hT ? poisoned(ns, dt) : NULL;
    void *act = NULL, *dy = NULL, *dhT = NULL, *dx = NULL, *dp = NULL, *dh0 = NULL;
    const char *what = "prnn_cell_act_bytes";
    prnn_status s = prnn_cell_act_bytes(&d, p->B, p->T, &rc->act_bytes);
    if (s == PRNN_OK) {
        if (rc->backward) act = tu_malloc(rc->act_bytes);
        what = "prnn_cell_forward";
        s = prnn_cell_forward(ctx, &d, p->B, p->T, p->lengths, y, hT, act, x, w, h0);
    }
    if (s == PRNN_OK) {
        from_dtype(r->y, y, ny, dt);
        if (use_hT) from_dtype(r->hT, hT, ns, dt);
    }
    if (s == PRNN_OK && rc->backward) {
        dy = to_dtype(p->dy, ny, dt);
        dhT = use_hT ? to_dtype(p->dhT, ns, dt) : NULL;
        dx = poisoned(nx, dt), dh0 = poisoned(ns, dt);
        if (rc->dp_init) dp = to_dtype(rc->dp_init, p->P, dt);
        else dp = zeros(p->P, prnn_dtype_size(dt));
        what = "prnn_cell_backward";
        s = prnn_cell_backward(ctx, &d, p->B, p->T, p->lengths, dx, dp, dh0, dy, dhT, x, w, h0, act);
        if (s == PRNN_OK) {
            from_dtype(r->dx, dx, nx, dt);
            from_dtype(r->dh0, dh0, ns, dt);
            from_dtype(r->dp, dp, p->P, dt);
            if (rc->dp_init) /* as rounded to dtype on the way in */
                for (int64_t i = 0; i < p->P; i++)
                    r->dp[i] -= dt == PRNN_DTYPE_F64 ? rc->dp_init[i] : (double)(float)rc->dp_init[i];
        }
    }
    if (s != PRNN_OK) tu_check(0, "%s: %s: %s", label, what, prnn_strerror(s));
    free(x), free(w), free(h0), free(y), free(hT), free(act);
    free(dy), free(dhT), free(dx), free(dp), free(dh0);
    return s == PRNN_OK;
}

/* ------------------------------------------------------------------------ */
/* Comparisons                                                              */

/* Root mean square: the scale below which an entry's error is judged
 * against the tensor's typical size rather than its own. */
static double rms(const double *x, int64_t n)
{
    double s = 0;
    for (int64_t i = 0; i < n; i++) s += x[i] * x[i];
    return n ? sqrt(s / (double)n) + 1e-30 : 1.0;
}

typedef struct {
    const char *name;
    const double *got, *want;
    int64_t n;
} tensor_pair;

/* Compares each pair (relative error, floor: the reference's RMS, or
 * min_floor where that is larger) and records one check whose line shows
 * every tensor's max error beside the tolerance; tol 0 asks for identical
 * values. extra_bad adds failures the caller found (reported by the
 * caller). */
static int compare_pairs_floor(const tensor_pair *tp, int n, double tol, double min_floor,
                               int64_t extra_bad, const char *label)
{
    char buf[256] = "";
    size_t k = 0;
    int64_t bad = extra_bad;
    for (int i = 0; i < n; i++) {
        if (!tp[i].n) continue;
        const double floor_ = fmax(rms(tp[i].want, tp[i].n), min_floor);
        tu_err e = tu_compare_f64(tp[i].got, tp[i].want, tp[i].n, floor_, tol, tp[i].name);
        bad += e.bad;
        if (k < sizeof buf)
            k += (size_t)snprintf(buf + k, sizeof buf - k, " %s %.1e", tp[i].name, e.max_err);
    }
    if (tol == 0) tu_check(bad == 0, "%s: identical:%s", label, buf);
    else tu_check(bad == 0, "%s:%s (tol %.0e)", label, buf, tol);
    return bad == 0;
}

static int compare_pairs(const tensor_pair *tp, int n, double tol, int64_t extra_bad, const char *label)
{
    return compare_pairs_floor(tp, n, tol, 0, extra_bad, label);
}

/* Entries of y (and dx) past a row's length that are not exactly zero
 * (documented: zero there). */
static int64_t nonzero_past_len(const problem *p, const double *t, int64_t width, const char *what)
{
    int64_t bad = 0;
    if (!p->lengths) return 0;
    for (int64_t b = 0; b < p->B; b++)
        for (int64_t ti = p->lengths[b]; ti < p->T; ti++)
            for (int64_t j = 0; j < width; j++)
                if (t[(b * p->T + ti) * width + j] != 0.0) {
                    if (bad++ < 3)
                        printf("        %s past the length: b=%lld t=%lld j=%lld is %.9g (length %lld)\n",
                               what, (long long)b, (long long)ti, (long long)j,
                               t[(b * p->T + ti) * width + j], (long long)p->lengths[b]);
                }
    return bad;
}

/* ------------------------------------------------------------------------ */
/* 1. Sizes; the forward against the reference                              */

/*
 * F64 against the reference in double: the library sums the GEMM and the
 * scan in other orders (blocked GEMM, tree scan) and log space goes through
 * log/exp; each costs a few ulps of the tensor's scale per operation over
 * at most D + T terms here, ~1e-14. 1e-12 leaves room and still catches any
 * mistake (which shows as O(1e-3) or more).
 */
#define TOL_F64 1e-12
/*
 * F32 against double, inputs identical (rounded to float): float GEMM over
 * Din <= 32 terms (~sqrt(Din) eps), gate math in float (a few eps), and the
 * scan's sum over the states it remembers (decays here remember up to tens
 * of steps: ~sqrt(M) eps); tanh/sigma of a rounded argument re-round. All
 * against the tensor's RMS: ~10-30 eps expected, 1e-6 (~8 eps) the worst
 * seen over many seeds; 1e-5 (~85 eps) keeps random worst cases in and a
 * wrong gate or a lost step (O(1e-3) and more) out.
 */
#define TOL_F32 1e-5
/*
 * F32 gradients against the F64 library's: each parameter gradient sums
 * B*T (up to ~1000) tokens' products in float (~sqrt(B*T) eps = 4e-6 of the
 * scale, random), on top of the forward's error flowing back through the
 * backward scan; 2.4e-6 the worst seen over many seeds: 3e-5 (~250 eps).
 */
#define TOL_F32_GRAD 3e-5

static void check_sizes(void)
{
    printf("\n== sizes: gates, parameters, states, outputs ==\n");
    const prnn_cell_desc d0 = prnn_cell_desc_make(PRNN_CELL_QRNN, 3, 4);
    tu_check(d0.dtype == PRNN_DTYPE_F32 && d0.bidirectional == 0 && d0.bias == 1 && d0.log_space == 0 &&
                 d0.pooling == PRNN_QRNN_FO && d0.window == 1 && d0.recompute == 0 &&
                 d0.algo == PRNN_SCAN_AUTO && d0.D == 3 && d0.H == 4,
             "prnn_cell_desc_make: F32, unidirectional, bias, linear, fo-pooling, window 1, AUTO");
    for (int vi = 0; vi < N_VARIANTS; vi++) {
        for (unsigned opts = 0; opts <= (OPT_BIAS | OPT_BIDIR); opts += OPT_BIAS | OPT_BIDIR) {
            problem p;
            char o[64];
            if (!problem_init(&p, &k_variants[vi], 1, 1, 5, 7, opts)) continue;
            tu_check(prnn_cell_check(&p.d) == PRNN_OK,
                     "%-11s [%s]: G=%lld P=%lld S2=%lld Hout=%lld as documented, prnn_cell_check ok",
                     p.v->name, opts_name(opts, o, sizeof o), (long long)p.G, (long long)p.P,
                     (long long)p.S2, (long long)p.Hout);
            problem_free(&p);
        }
    }
    const char *names[] = {"mingru", "minlstm", "qrnn", "sru", "gilr-lstm"};
    int names_ok = 1;
    for (int t = 0; t < PRNN_CELL_TYPE_COUNT_; t++) {
        prnn_cell_type back = PRNN_CELL_TYPE_COUNT_;
        const char *n = prnn_cell_type_name((prnn_cell_type)t);
        names_ok &= n && strcmp(n, names[t]) == 0 && prnn_cell_type_parse(n, &back) == PRNN_OK &&
                    back == (prnn_cell_type)t;
    }
    tu_check(names_ok, "prnn_cell_type_name / parse: mingru, minlstm, qrnn, sru, gilr-lstm round-trip");
}

/*
 * Forward F64 and F32 against the reference (y, hT, exact zeros past the
 * lengths), and the F32 backward against the F64 backward (which the
 * finite-difference checks validate).
 */
static void check_forward(void)
{
    printf("\n== forward vs the reference in double; F32 backward vs F64 ==\n");
    /* The last two: several of the tree scan's 32-step chunks and windows;
     * the last with odd T and H. */
    const int64_t shapes[][4] = {{1, 1, 3, 2}, {3, 2, 4, 4},    {3, 7, 5, 3},
                                 {2, 33, 4, 6}, {3, 100, 12, 20}, {2, 257, 6, 17}};
    const unsigned optsets[] = {0, OPT_BIAS, OPT_BIAS | OPT_H0 | OPT_HT, OPT_BIAS | OPT_BIDIR,
                                OPT_BIAS | OPT_LEN, OPT_ALL, OPT_H0 | OPT_HT | OPT_BIDIR | OPT_LEN};
    const prnn_scan_algo algos[] = {PRNN_SCAN_AUTO, PRNN_SCAN_SERIAL, PRNN_SCAN_TREE};
    int count = 0;
    for (int vi = 0; vi < N_VARIANTS; vi++)
        for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++)
            for (size_t oi = 0; oi < sizeof optsets / sizeof optsets[0]; oi++) {
                /* The larger shapes with every option, with and without
                 * bias, alternating (run time). */
                if (si >= 4 && oi != (((size_t)vi + si) % 2 ? 5 : 6)) continue;
                problem p;
                if (!problem_init(&p, &k_variants[vi], shapes[si][0], shapes[si][1], shapes[si][2],
                                  shapes[si][3], optsets[oi]))
                    continue;
                const int64_t ny = p.B * p.T * p.Hout, ns = p.B * p.S2, nx = p.B * p.T * p.D;
                const int use_hT = (p.opts & OPT_HT) != 0;
                double *yr = tu_malloc((size_t)ny * 8), *hTr = tu_malloc((size_t)ns * 8);
                ref_forward(&p, (p.opts & OPT_H0) ? p.h0 : NULL, yr, hTr);
                result r64, r32;
                result_alloc(&r64, &p), result_alloc(&r32, &p);
                const prnn_scan_algo algo = algos[count % 3];
                prnn_ctx *ctx = g_ctx[si >= 4];
                count++;
                char label[192], lab[320];
                problem_label(&p, "f64", label, sizeof label);
                snprintf(lab, sizeof lab, "%s %s t%d", label, prnn_scan_algo_name(algo), prnn_ctx_num_threads(ctx));
                run_cfg c64 = {PRNN_DTYPE_F64, 0, algo, 1, NULL, 0};
                run_cfg c32 = {PRNN_DTYPE_F32, 0, algo, 1, NULL, 0};
                const int ok64 = lib_run(ctx, &p, &c64, &r64, lab);
                if (ok64) {
                    int64_t z = nonzero_past_len(&p, r64.y, p.Hout, "y") + nonzero_past_len(&p, r64.dx, p.D, "dx");
                    tensor_pair tp[] = {{"y", r64.y, yr, ny}, {"hT", r64.hT, hTr, use_hT ? ns : 0}};
                    compare_pairs(tp, 2, TOL_F64, z, lab);
                }
                problem_label(&p, "f32", label, sizeof label);
                snprintf(lab, sizeof lab, "%s %s t%d", label, prnn_scan_algo_name(algo), prnn_ctx_num_threads(ctx));
                const int ok32 = lib_run(ctx, &p, &c32, &r32, lab);
                if (ok32) {
                    int64_t z = nonzero_past_len(&p, r32.y, p.Hout, "y") + nonzero_past_len(&p, r32.dx, p.D, "dx");
                    tensor_pair tp[] = {{"y", r32.y, yr, ny}, {"hT", r32.hT, hTr, use_hT ? ns : 0}};
                    compare_pairs(tp, 2, TOL_F32, z, lab);
                }
                if (ok64 && ok32) {
                    snprintf(lab, sizeof lab, "%s backward vs f64", label);
                    tensor_pair tg[] = {{"dx", r32.dx, r64.dx, nx}, {"dparams", r32.dp, r64.dp, p.P},
                                        {"dh0", r32.dh0, r64.dh0, ns}};
                    compare_pairs(tg, 3, TOL_F32_GRAD, 0, lab);
                }
                free(yr), free(hTr);
                result_free(&r64), result_free(&r32);
                problem_free(&p);
            }
}

/* ------------------------------------------------------------------------ */
/* 2. prnn_cell_step looped over t                                          */

/*
 * The step and the forward differ only in summation order (a GEMM over B
 * rows or over B*T, the serial loop or the tree), so they agree to TOL_F64
 * in double; in float each is within TOL_F32 of the exact values, and so of
 * each other. The state carries x_prev (QRNN window 2) and s (GILR-LSTM).
 */
static void check_step(void)
{
    printf("\n== prnn_cell_step over t vs the forward and the reference ==\n");
    const prnn_dtype dts[] = {PRNN_DTYPE_F64, PRNN_DTYPE_F32};
    for (int vi = 0; vi < N_VARIANTS; vi++)
        for (int di = 0; di < 2; di++) {
            const prnn_dtype dt = dts[di];
            problem p;
            if (!problem_init(&p, &k_variants[vi], 3, 9, 5, 4, OPT_BIAS | OPT_H0 | OPT_HT)) continue;
            const int64_t B = p.B, T = p.T, D = p.D, H = p.H, S = p.S;
            char label[192], lab[320];
            problem_label(&p, di ? "f32" : "f64", label, sizeof label);
            prnn_ctx *ctx = g_ctx[0];
            result fw;
            result_alloc(&fw, &p);
            run_cfg rc = {dt, 0, PRNN_SCAN_AUTO, 0, NULL, 0};
            snprintf(lab, sizeof lab, "%s forward", label);
            if (!lib_run(ctx, &p, &rc, &fw, lab)) {
                result_free(&fw), problem_free(&p);
                continue;
            }
            double *yr = tu_malloc((size_t)(B * T * H) * 8), *hTr = tu_malloc((size_t)(B * S) * 8);
            ref_forward(&p, p.h0, yr, hTr);

            prnn_cell_desc d = p.d;
            d.dtype = dt;
            void *state = to_dtype(p.h0, B * S, dt), *w = to_dtype(p.params, p.P, dt);
            double *ys = tu_malloc((size_t)(B * T * H) * 8), *hs = tu_malloc((size_t)(B * S) * 8);
            double *xd = tu_malloc((size_t)(B * D) * 8), *yd = tu_malloc((size_t)(B * H) * 8);
            prnn_status s = PRNN_OK;
            for (int64_t t = 0; t < T && s == PRNN_OK; t++) {
                for (int64_t b = 0; b < B; b++) memcpy(xd + b * D, p.x + (b * T + t) * D, (size_t)D * 8);
                void *xt = to_dtype(xd, B * D, dt), *yt = poisoned(B * H, dt);
                s = prnn_cell_step(ctx, &d, B, yt, state, xt, w);
                from_dtype(yd, yt, B * H, dt);
                for (int64_t b = 0; b < B; b++) memcpy(ys + (b * T + t) * H, yd + b * H, (size_t)H * 8);
                free(xt), free(yt);
            }
            snprintf(lab, sizeof lab, "%s step x%lld", label, (long long)T);
            if (s != PRNN_OK) {
                tu_check(0, "%s: prnn_cell_step: %s", lab, prnn_strerror(s));
            } else {
                from_dtype(hs, state, B * S, dt);
                const double tol = di ? TOL_F32 : TOL_F64;
                char l2[400];
                snprintf(l2, sizeof l2, "%s == forward", lab);
                tensor_pair a[] = {{"y", ys, fw.y, B * T * H}, {"state", hs, fw.hT, B * S}};
                compare_pairs(a, 2, tol, 0, l2);
                snprintf(l2, sizeof l2, "%s == reference", lab);
                tensor_pair b2[] = {{"y", ys, yr, B * T * H}, {"state", hs, hTr, B * S}};
                compare_pairs(b2, 2, tol, 0, l2);
            }
            free(state), free(w), free(ys), free(hs), free(xd), free(yd), free(yr), free(hTr);
            result_free(&fw);
            problem_free(&p);
        }
}

/* ------------------------------------------------------------------------ */
/* 3. Backward against central finite differences in double                 */

/* L = sum dy * y + sum dhT * hT, whose gradient the backward computes given
 * dL/dy = dy and dL/dhT = dhT. Evaluated with the reference, so that the
 * backward is checked against the header's equations themselves. */
static double ref_loss(const problem *p, const double *h0, double *y, double *hT)
{
    ref_forward(p, h0, y, hT);
    double L = 0;
    for (int64_t i = 0; i < p->B * p->T * p->Hout; i++) L += p->dy[i] * y[i];
    if (p->opts & OPT_HT)
        for (int64_t i = 0; i < p->B * p->S2; i++) L += p->dhT[i] * hT[i];
    return L;
}

/* Classes for sampling, so that every part of a tensor gets checked. */
static int class_x(const problem *p, int64_t i)
{
    const int64_t b = i / (p->T * p->D), t = (i / p->D) % p->T;
    return t >= row_len(p, b); /* valid steps, and steps past the length */
}

static int class_param(const problem *p, int64_t i)
{
    const int64_t dir = i / p->blk, j = i % p->blk, GH = p->G * p->H;
    int part, group;
    if (j < off_U(p)) part = j / GH >= p->D, group = (int)((j % GH) / p->H); /* W_0, W_1 */
    else if (j < off_bias(p)) part = 2, group = (int)(((j - off_U(p)) % (4 * p->H)) / p->H);
    else part = 3, group = (int)((j - off_bias(p)) / p->H);
    return (int)dir * 64 + part * 16 + group;
}

static int class_state(const problem *p, int64_t i)
{
    return (int)((i % p->S2) / p->S) * 2 + ((i % p->S) >= p->H);
}

/* Up to `per` random indices of each class in [0, n), all when n <= all. */
static int64_t sample(const problem *p, int64_t n, int64_t all, int per,
                      int (*class_of)(const problem *, int64_t), int64_t *idx)
{
    int64_t m = 0;
    if (n <= all) {
        for (int64_t i = 0; i < n; i++) idx[m++] = i;
        return m;
    }
    int64_t *perm = tu_malloc((size_t)n * 8);
    int cnt[256] = {0};
    for (int64_t i = 0; i < n; i++) perm[i] = i;
    for (int64_t i = n - 1; i > 0; i--) {
        int64_t k = (int64_t)(tu_next() % (uint64_t)(i + 1)), t = perm[i];
        perm[i] = perm[k], perm[k] = t;
    }
    for (int64_t i = 0; i < n; i++) {
        int c = class_of(p, perm[i]);
        if (cnt[c] < per) cnt[c]++, idx[m++] = perm[i];
    }
    free(perm);
    return m;
}

/*
 * Central differences with step 1e-6 on the reference's loss. Truncation:
 * eps^2/6 |L'''|, with L''' of O(1..10) here (sigma, tanh and products of
 * O(1) weights over the steps a state remembers): ~1e-11. Rounding: the
 * loss sums B*T*Hout <= ~1000 terms of O(1), so its rounding is ~1e-16 *
 * 1000 / 1e-6 = 1e-7 absolute at worst, ~1e-9 typical, against gradient
 * scales of 0.1 to 10. Tolerance 1e-6 relative (floor: the RMS of the
 * sampled finite differences of that tensor).
 */
#define TOL_FD 1e-6

static void fd_problem(problem *p, prnn_ctx *ctx)
{
    const int64_t nx = p->B * p->T * p->D, ns = p->B * p->S2, ny = p->B * p->T * p->Hout;
    char label[192], lab[320];
    problem_label(p, "fd", label, sizeof label);
    /* dparams pre-filled with random values: the backward must add. */
    double *dp0 = tu_malloc((size_t)p->P * 8);
    tu_fill_f64(dp0, p->P, -1, 1);
    result r;
    result_alloc(&r, p);
    run_cfg rc = {PRNN_DTYPE_F64, 0, PRNN_SCAN_AUTO, 1, dp0, 0};
    if (!lib_run(ctx, p, &rc, &r, label)) {
        result_free(&r), free(dp0);
        return;
    }
    const int use_h0 = (p->opts & OPT_H0) != 0;
    /* Without h0 the gradient is taken at zeros, except in log space, where
     * c must stay positive (check_log_space covers that case). */
    const int check_h0 = use_h0 || !p->v->log_space;
    double *h0 = use_h0 ? p->h0 : zeros(ns, 8);
    double *yb = tu_malloc((size_t)ny * 8), *hTb = tu_malloc((size_t)ns * 8);
    int64_t *ix = tu_malloc((size_t)nx * 8), *ip = tu_malloc((size_t)p->P * 8), *ih = tu_malloc((size_t)ns * 8);
    const int64_t mx = sample(p, nx, 48, 20, class_x, ix);
    const int64_t mp = sample(p, p->P, 96, 3, class_param, ip);
    const int64_t mh = check_h0 ? sample(p, ns, 36, 6, class_state, ih) : 0;
    struct {
        double *v;
        const double *grad;
        const int64_t *idx;
        int64_t m;
        double *fd, *an;
    } parts[3] = {{p->x, r.dx, ix, mx, NULL, NULL}, {p->params, r.dp, ip, mp, NULL, NULL},
                  {h0, r.dh0, ih, mh, NULL, NULL}};
    const double eps = 1e-6;
    for (int k = 0; k < 3; k++) {
        parts[k].fd = tu_malloc((size_t)(parts[k].m + 1) * 8);
        parts[k].an = tu_malloc((size_t)(parts[k].m + 1) * 8);
        for (int64_t q = 0; q < parts[k].m; q++) {
            const int64_t i = parts[k].idx[q];
            const double keep = parts[k].v[i];
            parts[k].v[i] = keep + eps;
            const double lp = ref_loss(p, h0, yb, hTb);
            parts[k].v[i] = keep - eps;
            const double lm = ref_loss(p, h0, yb, hTb);
            parts[k].v[i] = keep;
            parts[k].fd[q] = (lp - lm) / (2 * eps);
            parts[k].an[q] = parts[k].grad[i];
        }
    }
    snprintf(lab, sizeof lab, "%s (%lld+%lld+%lld partials)", label, (long long)mx, (long long)mp, (long long)mh);
    tensor_pair tp[] = {{"dx", parts[0].an, parts[0].fd, mx},
                        {"dparams", parts[1].an, parts[1].fd, mp},
                        {"dh0", parts[2].an, parts[2].fd, mh}};
    compare_pairs(tp, 3, TOL_FD, nonzero_past_len(p, r.dx, p->D, "dx"), lab);
    for (int k = 0; k < 3; k++) free(parts[k].fd), free(parts[k].an);
    if (!use_h0) free(h0);
    free(yb), free(hTb), free(ix), free(ip), free(ih), free(dp0);
    result_free(&r);
}

static void check_fd(void)
{
    printf("\n== backward vs central finite differences (double) ==\n");
    const int64_t shapes[][4] = {{1, 1, 3, 2}, {3, 2, 4, 4}, {3, 7, 5, 3}, {1, 33, 4, 4}, {3, 33, 4, 3}};
    enum { NS = 5 };
    const unsigned optsets[] = {0, OPT_BIAS, OPT_H0 | OPT_HT, OPT_BIDIR, OPT_LEN, OPT_ALL};
    enum { NO = 6, ALL_INDEX = 5 };
    for (int vi = 0; vi < N_VARIANTS; vi++) {
        /* Every option alone and all combined, on rotating shapes ... */
        for (int oi = 0; oi < NO; oi++) {
            const int si = (oi + vi) % NS;
            problem p;
            if (!problem_init(&p, &k_variants[vi], shapes[si][0], shapes[si][1], shapes[si][2],
                              shapes[si][3], optsets[oi]))
                continue;
            away_from_kink(&p);
            fd_problem(&p, g_ctx[0]);
            problem_free(&p);
        }
        /* ... and all combined on every shape. */
        for (int si = 0; si < NS; si++) {
            if (si == (ALL_INDEX + vi) % NS) continue; /* done above */
            problem p;
            if (!problem_init(&p, &k_variants[vi], shapes[si][0], shapes[si][1], shapes[si][2],
                              shapes[si][3], OPT_ALL))
                continue;
            away_from_kink(&p);
            fd_problem(&p, g_ctx[0]);
            problem_free(&p);
        }
    }
}

/* Backward accumulates: two calls from zero add up to twice one call. */
static void check_accumulate(void)
{
    printf("\n== backward adds to dparams ==\n");
    for (int vi = 0; vi < N_VARIANTS; vi++) {
        problem p;
        if (!problem_init(&p, &k_variants[vi], 2, 5, 3, 4, OPT_ALL)) continue;
        prnn_cell_desc d = p.d;
        const int64_t ns = p.B * p.S2, nx = p.B * p.T * p.D;
        size_t ab = 0;
        TU_REQUIRE(prnn_cell_act_bytes(&d, p.B, p.T, &ab));
        void *act = tu_malloc(ab);
        double *y = tu_malloc((size_t)(p.B * p.T * p.Hout) * 8), *hT = tu_malloc((size_t)ns * 8);
        double *dx = tu_malloc((size_t)nx * 8), *dh0 = tu_malloc((size_t)ns * 8);
        double *one = zeros(p.P, 8), *two = zeros(p.P, 8), *twice = tu_malloc((size_t)p.P * 8);
        char label[192];
        problem_label(&p, "acc", label, sizeof label);
        prnn_status s = prnn_cell_forward(g_ctx[0], &d, p.B, p.T, p.lengths, y, hT, act, p.x, p.params, p.h0);
        if (s == PRNN_OK)
            s = prnn_cell_backward(g_ctx[0], &d, p.B, p.T, p.lengths, dx, one, dh0, p.dy, p.dhT, p.x, p.params, p.h0, act);
        for (int k = 0; k < 2 && s == PRNN_OK; k++)
            s = prnn_cell_backward(g_ctx[0], &d, p.B, p.T, p.lengths, dx, two, dh0, p.dy, p.dhT, p.x, p.params, p.h0, act);
        if (s != PRNN_OK) {
            tu_check(0, "%s: %s", label, prnn_strerror(s));
        } else {
            for (int64_t i = 0; i < p.P; i++) twice[i] = 2 * one[i];
            /* The sum of two equal partial sums in double: exact unless
             * the backward adds its own partial sums to dparams one at a
             * time, then a few ulps. */
            tensor_pair tp[] = {{"dparams", two, twice, p.P}};
            char lab[320];
            snprintf(lab, sizeof lab, "%s two backwards == 2 x one", label);
            compare_pairs(tp, 1, TOL_F64, 0, lab);
        }
        free(act), free(y), free(hT), free(dx), free(dh0), free(one), free(two), free(twice);
        problem_free(&p);
    }
}

/* Log space computes the same function as linear space: every output and
 * gradient agrees, including dh0 at h0 = zeros (log c = -inf). */
static void check_log_space(void)
{
    printf("\n== log space vs linear space (double) ==\n");
    const unsigned optsets[] = {OPT_BIAS | OPT_HT, OPT_ALL, OPT_BIAS | OPT_HT | OPT_BIDIR | OPT_LEN};
    for (int vi = 0; vi < N_VARIANTS; vi++) {
        if (!k_variants[vi].log_space) continue;
        for (size_t oi = 0; oi < sizeof optsets / sizeof optsets[0]; oi++) {
            problem p;
            if (!problem_init(&p, &k_variants[vi], 3, 40, 6, 5, optsets[oi])) continue;
            char label[192];
            problem_label(&p, "log", label, sizeof label);
            result rl, rn;
            result_alloc(&rl, &p), result_alloc(&rn, &p);
            run_cfg rc = {PRNN_DTYPE_F64, 0, PRNN_SCAN_AUTO, 1, NULL, 0};
            int ok = lib_run(g_ctx[0], &p, &rc, &rl, label);
            p.d.log_space = 0;
            ok = ok && lib_run(g_ctx[0], &p, &rc, &rn, label);
            if (ok) {
                const int64_t ns = p.B * p.S2;
                const int use_hT = (p.opts & OPT_HT) != 0;
                tensor_pair tp[] = {{"y", rl.y, rn.y, p.B * p.T * p.Hout}, {"hT", rl.hT, rn.hT, use_hT ? ns : 0},
                                    {"dx", rl.dx, rn.dx, p.B * p.T * p.D}, {"dparams", rl.dp, rn.dp, p.P},
                                    {"dh0", rl.dh0, rn.dh0, ns}};
                char lab[320];
                snprintf(lab, sizeof lab, "%s == linear", label);
                compare_pairs(tp, 5, TOL_F64, 0, lab);
            }
            result_free(&rl), result_free(&rn);
            problem_free(&p);
        }
    }
}

/*
 * Saturated gates: biases of +-100 to +-300 put every pre-activation where
 * sigma, tanh and softplus saturate and e^|v| overflows float (and, past
 * 709, double). The maps' stable forms must give finite outputs and
 * gradients. F32 against F64:
 * - a pre-activation near 300 is rounded to float with an absolute error
 *   of up to 300 * 2^-24 = 1.8e-5, which a map reading the difference of
 *   two of them (minLSTM's normalised gates: f - i) carries into its
 *   outputs and gradients at that size (worst seen over 300 seeds: 6.2e-5
 *   of the RMS): TOL_SATURATED = 1e-3 leaves room;
 * - saturation can shrink a whole gradient tensor to 1e-8 of the O(1)
 *   inputs and dy, where float resolves it only to about its own eps of
 *   the terms it is computed from: errors are taken relative to the
 *   tensor's RMS or SATURATED_FLOOR = 1e-3, whichever is larger (seen: a
 *   minLSTM log-space dparams of RMS ~1e-8, F32 and F64 apart by 2e-8).
 * A map gone wrong in saturation (NaN, the wrong tail, a lost sign) shows
 * as O(1). Odd H = 11 runs the vectorized maps' main loop and their scalar
 * remainder.
 */
#define TOL_SATURATED 1e-3
#define SATURATED_FLOOR 1e-3

static int all_finite(const double *v, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        if (!isfinite(v[i])) return 0;
    return 1;
}

static void check_saturated(void)
{
    printf("\n== saturated gates: biases of +-100 to +-300 ==\n");
    for (int vi = 0; vi < N_VARIANTS; vi++) {
        problem p;
        if (!problem_init(&p, &k_variants[vi], 2, 9, 6, 11, OPT_BIAS | OPT_H0 | OPT_HT)) continue;
        const int64_t nb = p.G * p.H; /* bias entries of one direction */
        for (int64_t dir = 0; dir < p.dirs; dir++)
            for (int64_t i = 0; i < nb; i++)
                p.params[dir * p.blk + off_bias(&p) + i] =
                    (tu_next() & 1 ? 1.0 : -1.0) * tu_uniform(100, 300);
        char label[192];
        problem_label(&p, "f64/f32", label, sizeof label);
        result r64, r32;
        result_alloc(&r64, &p), result_alloc(&r32, &p);
        run_cfg c64 = {PRNN_DTYPE_F64, 0, PRNN_SCAN_AUTO, 1, NULL, 0};
        run_cfg c32 = {PRNN_DTYPE_F32, 0, PRNN_SCAN_AUTO, 1, NULL, 0};
        if (lib_run(g_ctx[0], &p, &c64, &r64, label) && lib_run(g_ctx[0], &p, &c32, &r32, label)) {
            const int64_t ny = p.B * p.T * p.Hout, ns = p.B * p.S2, nx = p.B * p.T * p.D;
            int finite = 1;
            for (int k = 0; k < 2; k++) {
                const result *r = k ? &r32 : &r64;
                finite = finite && all_finite(r->y, ny) && all_finite(r->hT, ns) &&
                         all_finite(r->dx, nx) && all_finite(r->dp, p.P) && all_finite(r->dh0, ns);
            }
            tu_check(finite, "%s: y, hT, dx, dparams, dh0 finite in both", label);
            tensor_pair fw[] = {{"y", r32.y, r64.y, ny}, {"hT", r32.hT, r64.hT, ns}};
            tensor_pair bw[] = {{"dx", r32.dx, r64.dx, nx}, {"dparams", r32.dp, r64.dp, p.P},
                                {"dh0", r32.dh0, r64.dh0, ns}};
            char lab[320];
            snprintf(lab, sizeof lab, "%s: F32 forward == F64", label);
            compare_pairs_floor(fw, 2, TOL_SATURATED, SATURATED_FLOOR, 0, lab);
            snprintf(lab, sizeof lab, "%s: F32 gradients == F64", label);
            compare_pairs_floor(bw, 3, TOL_SATURATED, SATURATED_FLOOR, 0, lab);
        }
        result_free(&r64), result_free(&r32);
        problem_free(&p);
    }
}

/* ------------------------------------------------------------------------ */
/* 4. The memory option                                                     */

/*
 * recompute = k saves states every k steps and recomputes the rest in the
 * backward. The forward is the same computation, so y and hT are
 * identical; the backward recomputes the same values, possibly summed in
 * another order: gradients agree to TOL_F64 (double) and TOL_F32_GRAD
 * (float, relative to the tensor's RMS).
 */
static void check_recompute(void)
{
    printf("\n== memory option: recompute = k vs k = 0 ==\n");
    /* 7 and 31: no k of 2, 3, 5 divides T (padded last chunks); 30: all do. */
    const int64_t Ts[] = {7, 31, 30};
    for (int vi = 0; vi < N_VARIANTS; vi++)
        for (int ti = 0; ti < 3; ti++) {
            const int64_t T = Ts[ti];
            problem p;
            const unsigned opts = ti == 0 ? OPT_BIAS | OPT_H0 | OPT_HT : OPT_ALL;
            if (!problem_init(&p, &k_variants[vi], 3, T, 5, 4, opts)) continue;
            const int64_t ks[] = {2, 3, 5, T + 3};
            for (int di = 0; di < 2; di++) {
                const prnn_dtype dt = di ? PRNN_DTYPE_F32 : PRNN_DTYPE_F64;
                result r0;
                result_alloc(&r0, &p);
                char label[192], lab[320];
                problem_label(&p, di ? "f32" : "f64", label, sizeof label);
                run_cfg c0 = {dt, 0, PRNN_SCAN_AUTO, 1, NULL, 0};
                if (!lib_run(g_ctx[0], &p, &c0, &r0, label)) {
                    result_free(&r0);
                    continue;
                }
                for (int ki = 0; ki < 4; ki++) {
                    if (di && ki != 1) continue; /* float: k = 3 only */
                    result rk;
                    result_alloc(&rk, &p);
                    run_cfg ck = {dt, ks[ki], PRNN_SCAN_AUTO, 1, NULL, 0};
                    snprintf(lab, sizeof lab, "%s k=%lld", label, (long long)ks[ki]);
                    if (lib_run(g_ctx[0], &p, &ck, &rk, lab)) {
                        const int64_t ns = p.B * p.S2;
                        tensor_pair fw[] = {{"y", rk.y, r0.y, p.B * p.T * p.Hout},
                                            {"hT", rk.hT, r0.hT, (p.opts & OPT_HT) ? ns : 0}};
                        char l2[400];
                        snprintf(l2, sizeof l2, "%s forward", lab);
                        compare_pairs(fw, 2, 0, 0, l2);
                        tensor_pair bw[] = {{"dx", rk.dx, r0.dx, p.B * p.T * p.D},
                                            {"dparams", rk.dp, r0.dp, p.P}, {"dh0", rk.dh0, r0.dh0, ns}};
                        snprintf(l2, sizeof l2, "%s backward", lab);
                        compare_pairs(bw, 3, di ? TOL_F32_GRAD : TOL_F64, 0, l2);
                        tu_check(ck.act_bytes < c0.act_bytes, "%s act_bytes %zu < %zu (k = 0)", lab,
                                 ck.act_bytes, c0.act_bytes);
                    }
                    result_free(&rk);
                }
                /* k = 1 is documented as the same as k = 0. */
                prnn_cell_desc d1 = p.d;
                d1.dtype = dt, d1.recompute = 1;
                size_t b1 = 0;
                prnn_status s = prnn_cell_act_bytes(&d1, p.B, p.T, &b1);
                tu_check(s == PRNN_OK && b1 == c0.act_bytes, "%s act_bytes(k=1) %zu == act_bytes(k=0) %zu",
                         label, b1, c0.act_bytes);
                result_free(&r0);
            }
            problem_free(&p);
        }
}

/* ------------------------------------------------------------------------ */
/* 5. Two chunks with hT -> h0 equal the whole sequence                     */

/* Copies steps [t0, t0 + n) of a (B, T, w) tensor into a (B, n, w) one. */
static void slice_t(double *dst, const double *src, int64_t B, int64_t T, int64_t w, int64_t t0, int64_t n)
{
    for (int64_t b = 0; b < B; b++) memcpy(dst + b * n * w, src + (b * T + t0) * w, (size_t)(n * w) * 8);
}

static void check_chunks(void)
{
    printf("\n== a sequence in two chunks (state passed on) vs the whole ==\n");
    enum { B = 3, T = 20, T1 = 7, T2 = T - T1 };
    for (int vi = 0; vi < N_VARIANTS; vi++)
        for (int di = 0; di < 2; di++) {
            const prnn_dtype dt = di ? PRNN_DTYPE_F32 : PRNN_DTYPE_F64;
            problem w;
            if (!problem_init(&w, &k_variants[vi], B, T, 5, 4, OPT_BIAS | OPT_H0 | OPT_HT)) continue;
            char label[192], lab[320];
            problem_label(&w, di ? "f32" : "f64", label, sizeof label);
            result rw;
            result_alloc(&rw, &w);
            run_cfg rc = {dt, 0, PRNN_SCAN_AUTO, !di, NULL, 0};
            if (!lib_run(g_ctx[0], &w, &rc, &rw, label)) {
                result_free(&rw), problem_free(&w);
                continue;
            }
            /* The two chunks as problems of their own, sharing the
             * parameters; chunk 2 starts from chunk 1's hT. */
            problem c[2];
            result rc2[2];
            const int64_t Tc[2] = {T1, T2}, t0[2] = {0, T1};
            int ok = 1;
            for (int k = 0; k < 2; k++) {
                c[k] = w;
                c[k].T = Tc[k];
                c[k].x = tu_malloc((size_t)(B * Tc[k] * w.D) * 8);
                c[k].dy = tu_malloc((size_t)(B * Tc[k] * w.Hout) * 8);
                c[k].h0 = tu_malloc((size_t)(B * w.S2) * 8);
                c[k].dhT = tu_malloc((size_t)(B * w.S2) * 8);
                slice_t(c[k].x, w.x, B, T, w.D, t0[k], Tc[k]);
                slice_t(c[k].dy, w.dy, B, T, w.Hout, t0[k], Tc[k]);
                result_alloc(&rc2[k], &c[k]);
            }
            memcpy(c[0].h0, w.h0, (size_t)(B * w.S2) * 8);
            memcpy(c[1].dhT, w.dhT, (size_t)(B * w.S2) * 8);
            run_cfg fwd = {dt, 0, PRNN_SCAN_AUTO, 0, NULL, 0};
            snprintf(lab, sizeof lab, "%s chunk 1", label);
            ok = lib_run(g_ctx[0], &c[0], &fwd, &rc2[0], lab);
            if (ok) {
                /* hT as the library returned it (already in dtype). */
                memcpy(c[1].h0, rc2[0].hT, (size_t)(B * w.S2) * 8);
                snprintf(lab, sizeof lab, "%s chunk 2", label);
                run_cfg bwd = {dt, 0, PRNN_SCAN_AUTO, !di, NULL, 0};
                ok = lib_run(g_ctx[0], &c[1], &bwd, &rc2[1], lab);
            }
            if (ok && !di) {
                /* Backward: chunk 2's dh0 is chunk 1's dhT; chunk 1's
                 * backward adds onto chunk 2's parameter gradients. */
                memcpy(c[0].dhT, rc2[1].dh0, (size_t)(B * w.S2) * 8);
                run_cfg bwd = {dt, 0, PRNN_SCAN_AUTO, 1, rc2[1].dp, 0};
                snprintf(lab, sizeof lab, "%s chunk 1 backward", label);
                ok = lib_run(g_ctx[0], &c[0], &bwd, &rc2[0], lab);
                for (int64_t i = 0; ok && i < w.P; i++) rc2[0].dp[i] += rc2[1].dp[i];
            }
            if (ok) {
                double *y = tu_malloc((size_t)(B * T * w.Hout) * 8), *dx = tu_malloc((size_t)(B * T * w.D) * 8);
                for (int64_t b = 0; b < B; b++)
                    for (int k = 0; k < 2; k++) {
                        memcpy(y + (b * T + t0[k]) * w.Hout, rc2[k].y + b * Tc[k] * w.Hout, (size_t)(Tc[k] * w.Hout) * 8);
                        memcpy(dx + (b * T + t0[k]) * w.D, rc2[k].dx + b * Tc[k] * w.D, (size_t)(Tc[k] * w.D) * 8);
                    }
                tensor_pair tp[] = {{"y", y, rw.y, B * T * w.Hout},      {"hT", rc2[1].hT, rw.hT, B * w.S2},
                                    {"dx", dx, rw.dx, di ? 0 : B * T * w.D}, {"dparams", rc2[0].dp, rw.dp, di ? 0 : w.P},
                                    {"dh0", rc2[0].dh0, rw.dh0, di ? 0 : B * w.S2}};
                snprintf(lab, sizeof lab, "%s %d+%d steps == %d", label, T1, T2, T);
                compare_pairs(tp, 5, di ? TOL_F32 : TOL_F64, 0, lab);
                free(y), free(dx);
            }
            for (int k = 0; k < 2; k++) {
                free(c[k].x), free(c[k].dy), free(c[k].h0), free(c[k].dhT);
                result_free(&rc2[k]);
            }
            result_free(&rw);
            problem_free(&w);
        }
}

/* ------------------------------------------------------------------------ */
/* 6. prnn_cell_init_params                                                 */

/* Is group k of the bias a forget-type gate (initialised to +1)? */
static int forget_group(prnn_cell_type type, int64_t k)
{
    switch (type) {
    case PRNN_CELL_MINLSTM: return k == 0;       /* [f, i, n] */
    case PRNN_CELL_QRNN: return k == 1;          /* [z, f, ...] */
    case PRNN_CELL_SRU: return k == 1;           /* [u, f, r, p] */
    case PRNN_CELL_GILR_LSTM: return k == 0 || k == 2; /* [g, j, f, ...] */
    default: return 0;
    }
}

/* Values uniform in +-bound: all inside, the largest within 20/n of the
 * bound (missed with probability e^-20), mean
 * |v| near bound/2 and mean near 0 (5 standard errors: the sd of |v|/bound
 * is 1/sqrt(12), of v/bound 1/sqrt(3)). Returns the problems found. */
static int uniform_ok(const double *v, int64_t n, double bound, char *why, size_t wn)
{
    double mx = 0, ma = 0, m = 0;
    for (int64_t i = 0; i < n; i++) mx = fmax(mx, fabs(v[i])), ma += fabs(v[i]), m += v[i];
    ma /= (double)n * bound, m /= (double)n * bound;
    const double se = 1 / sqrt((double)n);
    /* float rounding of the bound itself: one ulp */
    int ok = mx <= bound * (1 + 1e-7) && mx >= bound * (1 - 20.0 / (double)n) &&
             fabs(ma - 0.5) <= 5 * se / sqrt(12.0) && fabs(m) <= 5 * se / sqrt(3.0);
    snprintf(why, wn, "max %.4f mean|v| %.3f mean %+.3f (of bound %.4f, n=%lld)", mx / bound, ma, m, bound,
             (long long)n);
    return ok;
}

static void check_init(void)
{
    printf("\n== prnn_cell_init_params ==\n");
    const uint64_t seed = tu_next();
    for (int vi = 0; vi < N_VARIANTS; vi++)
        for (int di = 0; di < 2; di++)
            for (unsigned opts = OPT_BIAS; opts <= (OPT_BIAS | OPT_BIDIR); opts += OPT_BIDIR) {
                const prnn_dtype dt = di ? PRNN_DTYPE_F32 : PRNN_DTYPE_F64;
                problem p;
                if (!problem_init(&p, &k_variants[vi], 1, 1, 24, 20, opts)) continue;
                prnn_cell_desc d = p.d;
                d.dtype = dt;
                const size_t es = prnn_dtype_size(dt);
                void *a = tu_malloc((size_t)p.P * es), *b = tu_malloc((size_t)p.P * es), *c = tu_malloc((size_t)p.P * es);
                char label[192], o[64];
                snprintf(label, sizeof label, "init %s %-11s D=%lld H=%lld [%s]", di ? "f32" : "f64", p.v->name,
                         (long long)p.D, (long long)p.H, opts_name(opts, o, sizeof o));
                prnn_status s1 = prnn_cell_init_params(&d, a, seed), s2 = prnn_cell_init_params(&d, b, seed);
                prnn_status s3 = prnn_cell_init_params(&d, c, seed + 1);
                if (s1 || s2 || s3) {
                    tu_check(0, "%s: %s", label, prnn_strerror(s1 ? s1 : s2 ? s2 : s3));
                } else {
                    double *v = tu_malloc((size_t)p.P * 8), *v3 = tu_malloc((size_t)p.P * 8);
                    from_dtype(v, a, p.P, dt), from_dtype(v3, c, p.P, dt);
                    int64_t same = 0, weights = 0;
                    for (int64_t i = 0; i < off_bias(&p); i++)
                        for (int64_t dir = 0; dir < p.dirs; dir++)
                            same += v[dir * p.blk + i] == v3[dir * p.blk + i], weights++;
                    tu_check(memcmp(a, b, (size_t)p.P * es) == 0 && same * 100 < weights,
                             "%s: same seed same values; seed+1 changes %lld of %lld weights", label,
                             (long long)(weights - same), (long long)weights);
                    for (int64_t dir = 0; dir < p.dirs; dir++) {
                        const double *w = v + dir * p.blk;
                        char why[160];
                        int ok = uniform_ok(w, off_U(&p), 1 / sqrt((double)p.Din), why, sizeof why);
                        tu_check(ok, "%s dir %lld: W uniform in +-1/sqrt(%lld): %s", label, (long long)dir,
                                 (long long)p.Din, why);
                        if (is_gilr(&p)) {
                            ok = uniform_ok(w + off_U(&p), 4 * p.H * p.H, 1 / sqrt((double)p.H), why, sizeof why);
                            tu_check(ok, "%s dir %lld: U uniform in +-1/sqrt(%lld): %s", label, (long long)dir,
                                     (long long)p.H, why);
                        }
                        int64_t bad = 0;
                        for (int64_t j = 0; j < p.G * p.H; j++) {
                            const double want = forget_group(p.v->type, j / p.H) ? 1.0 : 0.0;
                            if (w[off_bias(&p) + j] != want && bad++ < 3)
                                printf("        bias[%lld] = %.9g, want %g\n", (long long)j, w[off_bias(&p) + j], want);
                        }
                        tu_check(bad == 0, "%s dir %lld: biases 0, forget-type gates +1 (%lld wrong)", label,
                                 (long long)dir, (long long)bad);
                    }
                    free(v), free(v3);
                }
                free(a), free(b), free(c);
                problem_free(&p);
            }
}

/* ------------------------------------------------------------------------ */
/* 7. Bad input                                                             */

#define EXPECT_STATUS(call, want)                                                              \
    do {                                                                                       \
        prnn_status got_ = (call);                                                             \
        tu_check(got_ == (want), "%-70s -> %s", #call, prnn_strerror(got_));                   \
    } while (0)

/* For the cases where the header leaves the exact status open. */
#define EXPECT_STATUS2(call, want1, want2)                                                     \
    do {                                                                                       \
        prnn_status got_ = (call);                                                             \
        tu_check(got_ == (want1) || got_ == (want2), "%-70s -> %s", #call, prnn_strerror(got_)); \
    } while (0)

static void check_bad_input(void)
{
    printf("\n== bad input ==\n");
    prnn_ctx *ctx = g_ctx[1];
    enum { B = 2, T = 3, D = 2, H = 2, N = 256 };
    float x[N], y[N], w[N], st[N], dx[N], dw[N], dy[N], act[4096];
    tu_fill_f32(x, N, -1, 1), tu_fill_f32(w, N, -1, 1), tu_fill_f32(dy, N, -1, 1);
    memset(dw, 0, sizeof dw), memset(st, 0, sizeof st);
    const prnn_cell_desc d = prnn_cell_desc_make(PRNN_CELL_MINGRU, D, H);
    prnn_cell_desc bad = d;
    size_t ab = 0;
    TU_REQUIRE(prnn_cell_act_bytes(&d, B, T, &ab));
    tu_check(ab <= sizeof act, "act_bytes %zu for B=%d T=%d D=%d H=%d fits the test's buffer", ab, B, T, D, H);
    if (ab > sizeof act) return;
    int64_t cnt = 0;

    /* NULL pointers */
    EXPECT_STATUS(prnn_cell_forward(NULL, &d, B, T, NULL, y, NULL, NULL, x, w, NULL), PRNN_ERR_NULL_POINTER);
    EXPECT_STATUS(prnn_cell_forward(ctx, NULL, B, T, NULL, y, NULL, NULL, x, w, NULL), PRNN_ERR_NULL_POINTER);
    EXPECT_STATUS(prnn_cell_forward(ctx, &d, B, T, NULL, NULL, NULL, NULL, x, w, NULL), PRNN_ERR_NULL_POINTER);
    EXPECT_STATUS(prnn_cell_forward(ctx, &d, B, T, NULL, y, NULL, NULL, NULL, w, NULL), PRNN_ERR_NULL_POINTER);
    EXPECT_STATUS(prnn_cell_forward(ctx, &d, B, T, NULL, y, NULL, NULL, x, NULL, NULL), PRNN_ERR_NULL_POINTER);
    TU_REQUIRE(prnn_cell_forward(ctx, &d, B, T, NULL, y, NULL, act, x, w, NULL));
    EXPECT_STATUS(prnn_cell_backward(NULL, &d, B, T, NULL, dx, dw, NULL, dy, NULL, x, w, NULL, act), PRNN_ERR_NULL_POINTER);
    EXPECT_STATUS(prnn_cell_backward(ctx, NULL, B, T, NULL, dx, dw, NULL, dy, NULL, x, w, NULL, act), PRNN_ERR_NULL_POINTER);
    EXPECT_STATUS(prnn_cell_backward(ctx, &d, B, T, NULL, NULL, dw, NULL, dy, NULL, x, w, NULL, act), PRNN_ERR_NULL_POINTER);
    EXPECT_STATUS(prnn_cell_backward(ctx, &d, B, T, NULL, dx, NULL, NULL, dy, NULL, x, w, NULL, act), PRNN_ERR_NULL_POINTER);
    EXPECT_STATUS(prnn_cell_backward(ctx, &d, B, T, NULL, dx, dw, NULL, NULL, NULL, x, w, NULL, act), PRNN_ERR_NULL_POINTER);
    EXPECT_STATUS(prnn_cell_backward(ctx, &d, B, T, NULL, dx, dw, NULL, dy, NULL, NULL, w, NULL, act), PRNN_ERR_NULL_POINTER);
    EXPECT_STATUS(prnn_cell_backward(ctx, &d, B, T, NULL, dx, dw, NULL, dy, NULL, x, NULL, NULL, act), PRNN_ERR_NULL_POINTER);
    EXPECT_STATUS(prnn_cell_backward(ctx, &d, B, T, NULL, dx, dw, NULL, dy, NULL, x, w, NULL, NULL), PRNN_ERR_NULL_POINTER);
    EXPECT_STATUS(prnn_cell_step(NULL, &d, B, y, st, x, w), PRNN_ERR_NULL_POINTER);
    EXPECT_STATUS(prnn_cell_step(ctx, NULL, B, y, st, x, w), PRNN_ERR_NULL_POINTER);
    EXPECT_STATUS(prnn_cell_step(ctx, &d, B, NULL, st, x, w), PRNN_ERR_NULL_POINTER);
    EXPECT_STATUS(prnn_cell_step(ctx, &d, B, y, NULL, x, w), PRNN_ERR_NULL_POINTER);
    EXPECT_STATUS(prnn_cell_step(ctx, &d, B, y, st, NULL, w), PRNN_ERR_NULL_POINTER);
    EXPECT_STATUS(prnn_cell_step(ctx, &d, B, y, st, x, NULL), PRNN_ERR_NULL_POINTER);
    EXPECT_STATUS(prnn_cell_init_params(NULL, w, 1), PRNN_ERR_NULL_POINTER);
    EXPECT_STATUS(prnn_cell_init_params(&d, NULL, 1), PRNN_ERR_NULL_POINTER);
    EXPECT_STATUS(prnn_cell_check(NULL), PRNN_ERR_NULL_POINTER);
    EXPECT_STATUS(prnn_cell_param_count(&d, NULL), PRNN_ERR_NULL_POINTER);
    EXPECT_STATUS(prnn_cell_param_count(NULL, &cnt), PRNN_ERR_NULL_POINTER);
    EXPECT_STATUS(prnn_cell_state_size(NULL, &cnt), PRNN_ERR_NULL_POINTER);
    EXPECT_STATUS(prnn_cell_act_bytes(&d, B, T, NULL), PRNN_ERR_NULL_POINTER);
    EXPECT_STATUS(prnn_cell_type_parse(NULL, &bad.type), PRNN_ERR_NULL_POINTER);
    EXPECT_STATUS(prnn_cell_type_parse("mingru", NULL), PRNN_ERR_NULL_POINTER);

    /* Sizes */
    EXPECT_STATUS(prnn_cell_forward(ctx, &d, 0, T, NULL, y, NULL, NULL, x, w, NULL), PRNN_ERR_INVALID_SIZE);
    EXPECT_STATUS(prnn_cell_forward(ctx, &d, B, -1, NULL, y, NULL, NULL, x, w, NULL), PRNN_ERR_INVALID_SIZE);
    EXPECT_STATUS(prnn_cell_backward(ctx, &d, B, 0, NULL, dx, dw, NULL, dy, NULL, x, w, NULL, act), PRNN_ERR_INVALID_SIZE);
    EXPECT_STATUS(prnn_cell_step(ctx, &d, 0, y, st, x, w), PRNN_ERR_INVALID_SIZE);
    EXPECT_STATUS(prnn_cell_act_bytes(&d, -3, T, &ab), PRNN_ERR_INVALID_SIZE);
    bad = d, bad.D = 0;
    EXPECT_STATUS(prnn_cell_check(&bad), PRNN_ERR_INVALID_SIZE);
    EXPECT_STATUS(prnn_cell_forward(ctx, &bad, B, T, NULL, y, NULL, NULL, x, w, NULL), PRNN_ERR_INVALID_SIZE);
    bad = d, bad.H = -2;
    EXPECT_STATUS(prnn_cell_param_count(&bad, &cnt), PRNN_ERR_INVALID_SIZE);
    EXPECT_STATUS(prnn_cell_init_params(&bad, w, 1), PRNN_ERR_INVALID_SIZE);
    bad = d, bad.D = (int64_t)1 << 40, bad.H = (int64_t)1 << 40;
    EXPECT_STATUS(prnn_cell_param_count(&bad, &cnt), PRNN_ERR_SIZE_OVERFLOW);
    EXPECT_STATUS(prnn_cell_forward(ctx, &bad, B, T, NULL, y, NULL, NULL, x, w, NULL), PRNN_ERR_SIZE_OVERFLOW);
    bad = d, bad.H = (int64_t)1 << 62, bad.bidirectional = 1; /* 2H floats */
    EXPECT_STATUS(prnn_cell_state_size(&bad, &cnt), PRNN_ERR_SIZE_OVERFLOW);
    EXPECT_STATUS(prnn_cell_act_bytes(&d, (int64_t)1 << 31, (int64_t)1 << 31, &ab), PRNN_ERR_SIZE_OVERFLOW);
    EXPECT_STATUS(prnn_cell_forward(ctx, &d, INT64_MAX, 2, NULL, y, NULL, NULL, x, w, NULL), PRNN_ERR_SIZE_OVERFLOW);
    EXPECT_STATUS(prnn_cell_forward(ctx, &d, (int64_t)1 << 40, (int64_t)1 << 22, NULL, y, NULL, NULL, x, w, NULL),
                  PRNN_ERR_SIZE_OVERFLOW);

    /* Enums and options */
    bad = d, bad.type = PRNN_CELL_TYPE_COUNT_;
    EXPECT_STATUS(prnn_cell_check(&bad), PRNN_ERR_INVALID_ARGUMENT);
    EXPECT_STATUS(prnn_cell_forward(ctx, &bad, B, T, NULL, y, NULL, NULL, x, w, NULL), PRNN_ERR_INVALID_ARGUMENT);
    bad = d, bad.type = (prnn_cell_type)-1;
    EXPECT_STATUS(prnn_cell_param_count(&bad, &cnt), PRNN_ERR_INVALID_ARGUMENT);
    bad = prnn_cell_desc_make(PRNN_CELL_QRNN, D, H), bad.pooling = PRNN_QRNN_POOLING_COUNT_;
    EXPECT_STATUS(prnn_cell_check(&bad), PRNN_ERR_INVALID_ARGUMENT);
    bad = d, bad.dtype = PRNN_DTYPE_COUNT_;
    EXPECT_STATUS(prnn_cell_forward(ctx, &bad, B, T, NULL, y, NULL, NULL, x, w, NULL), PRNN_ERR_INVALID_ARGUMENT);
    bad = d, bad.algo = PRNN_SCAN_ALGO_COUNT_;
    EXPECT_STATUS(prnn_cell_forward(ctx, &bad, B, T, NULL, y, NULL, NULL, x, w, NULL), PRNN_ERR_INVALID_ARGUMENT);
    bad = d, bad.bidirectional = 2;
    EXPECT_STATUS(prnn_cell_check(&bad), PRNN_ERR_INVALID_ARGUMENT);
    bad = d, bad.bias = -1;
    EXPECT_STATUS(prnn_cell_check(&bad), PRNN_ERR_INVALID_ARGUMENT);
    bad = d, bad.log_space = 2;
    EXPECT_STATUS(prnn_cell_check(&bad), PRNN_ERR_INVALID_ARGUMENT);
    bad = d, bad.recompute = -1;
    EXPECT_STATUS(prnn_cell_check(&bad), PRNN_ERR_INVALID_ARGUMENT);
    const prnn_cell_type nolog[] = {PRNN_CELL_QRNN, PRNN_CELL_SRU, PRNN_CELL_GILR_LSTM};
    for (int i = 0; i < 3; i++) {
        bad = prnn_cell_desc_make(nolog[i], D, H), bad.log_space = 1;
        prnn_status s = prnn_cell_check(&bad);
        prnn_status s2 = prnn_cell_forward(ctx, &bad, B, T, NULL, y, NULL, NULL, x, w, NULL);
        tu_check(s == PRNN_ERR_INVALID_ARGUMENT && s2 == PRNN_ERR_INVALID_ARGUMENT,
                 "log_space on %-9s -> check: %s, forward: %s", prnn_cell_type_name(nolog[i]),
                 prnn_strerror(s), prnn_strerror(s2));
    }
    bad = prnn_cell_desc_make(PRNN_CELL_QRNN, D, H), bad.window = 3;
    EXPECT_STATUS(prnn_cell_check(&bad), PRNN_ERR_INVALID_ARGUMENT);
    EXPECT_STATUS(prnn_cell_forward(ctx, &bad, B, T, NULL, y, NULL, NULL, x, w, NULL), PRNN_ERR_INVALID_ARGUMENT);
    bad.window = 0;
    EXPECT_STATUS(prnn_cell_check(&bad), PRNN_ERR_INVALID_ARGUMENT);
    bad = d, bad.window = 2; /* window is a QRNN option */
    EXPECT_STATUS(prnn_cell_check(&bad), PRNN_ERR_INVALID_ARGUMENT);
    tu_check(prnn_cell_type_name(PRNN_CELL_TYPE_COUNT_) == NULL && prnn_cell_type_name((prnn_cell_type)-1) == NULL,
             "prnn_cell_type_name of bad values is NULL");
    EXPECT_STATUS(prnn_cell_type_parse("lstm", &bad.type), PRNN_ERR_INVALID_ARGUMENT);
    EXPECT_STATUS(prnn_cell_type_parse("", &bad.type), PRNN_ERR_INVALID_ARGUMENT);

    /* A step is unidirectional only: either status says so. */
    bad = d, bad.bidirectional = 1;
    EXPECT_STATUS2(prnn_cell_step(ctx, &bad, B, y, st, x, w), PRNN_ERR_INVALID_ARGUMENT, PRNN_ERR_UNSUPPORTED);

    /* Lengths */
    int64_t lens[B] = {T, T + 1};
    EXPECT_STATUS(prnn_cell_forward(ctx, &d, B, T, lens, y, NULL, NULL, x, w, NULL), PRNN_ERR_INVALID_LENGTH);
    lens[1] = -1;
    EXPECT_STATUS(prnn_cell_forward(ctx, &d, B, T, lens, y, NULL, NULL, x, w, NULL), PRNN_ERR_INVALID_LENGTH);
    EXPECT_STATUS(prnn_cell_backward(ctx, &d, B, T, lens, dx, dw, NULL, dy, NULL, x, w, NULL, act), PRNN_ERR_INVALID_LENGTH);

    /* Dtypes the CPU does not run. */
    const prnn_dtype half[] = {PRNN_DTYPE_BF16, PRNN_DTYPE_F16};
    for (int i = 0; i < 2; i++) {
        bad = d, bad.dtype = half[i];
        prnn_status s1 = prnn_cell_forward(ctx, &bad, B, T, NULL, y, NULL, NULL, x, w, NULL);
        prnn_status s2 = prnn_cell_backward(ctx, &bad, B, T, NULL, dx, dw, NULL, dy, NULL, x, w, NULL, act);
        prnn_status s3 = prnn_cell_step(ctx, &bad, B, y, st, x, w);
        prnn_status s4 = prnn_cell_init_params(&bad, w, 1);
        tu_check(s1 == PRNN_ERR_UNSUPPORTED && s2 == PRNN_ERR_UNSUPPORTED && s3 == PRNN_ERR_UNSUPPORTED &&
                     s4 == PRNN_ERR_UNSUPPORTED,
                 "%s on the CPU -> forward: %s, backward: %s, step: %s, init_params: %s",
                 i ? "F16" : "BF16", prnn_strerror(s1), prnn_strerror(s2), prnn_strerror(s3), prnn_strerror(s4));
    }

    /* A rejected call writes nothing. */
    float y2[N], dx2[N], dw2[N], st2[N];
    for (int i = 0; i < N; i++) y2[i] = dx2[i] = dw2[i] = st2[i] = -7.0f;
    lens[1] = T + 1;
    prnn_status s1 = prnn_cell_forward(ctx, &d, B, T, lens, y2, st2, NULL, x, w, NULL);
    prnn_status s2 = prnn_cell_backward(ctx, &d, B, T, lens, dx2, dw2, st2, dy, NULL, x, w, NULL, act);
    bad = d, bad.bidirectional = 1;
    prnn_status s3 = prnn_cell_step(ctx, &bad, B, y2, st2, x, w);
    int untouched = 1;
    for (int i = 0; i < N; i++) untouched &= y2[i] == -7.0f && dx2[i] == -7.0f && dw2[i] == -7.0f && st2[i] == -7.0f;
    tu_check(s1 != PRNN_OK && s2 != PRNN_OK && s3 != PRNN_OK && untouched, "rejected calls write nothing");

    /* No CUDA device here: a CUDA context fails cleanly. */
    if (!prnn_cuda_available()) {
        prnn_ctx *c2 = (prnn_ctx *)&c2;
        prnn_ctx_config cfg = prnn_ctx_config_default();
        cfg.device = PRNN_DEVICE_CUDA;
        prnn_status s = prnn_ctx_init(&c2, &cfg);
        tu_check(s == PRNN_ERR_NO_DEVICE && c2 == NULL, "prnn_ctx_init(CUDA) without a device -> %s, ctx NULL",
                 prnn_strerror(s));
    }
}

/* ------------------------------------------------------------------------ */
/* 8. Threads                                                               */

/*
 * One and two threads. With the serial scan, threads only share out
 * independent rows and columns, so every value the library computes itself
 * is identical. The GEMMs come from OpenBLAS, whose blocking (even a split
 * of the inner dimension) depends on the context's thread count, so their
 * outputs may differ by rounding: the backward's dx and parameter
 * gradients (and the part of dh0 that is the gradient of QRNN window 2's
 * x_prev: DGEMM's differed by 6e-16, relative, between 1 and 2 threads on
 * a 2-core x86-64 machine), and in float also the forward's input
 * projection, and with it
 * everything after it (SGEMM with D = 32, SRU's highway layer, differed by
 * 4e-7 between 1 and 2 threads on a 2-core x86-64 machine; the smaller D of
 * the other variants and DGEMM have stayed identical), so the float
 * comparison is to TOL_F32 / TOL_F32_GRAD. The tree scan (AUTO) sizes its windows over T by
 * the thread count (scan_cpu_impl.h, tree()), so its sums run in another
 * order: the forward agrees to TOL_F64 / TOL_F32 and the backward to
 * TOL_F64 / TOL_F32_GRAD. Each variant runs one dtype and one scan, in
 * turns (run time).
 */
static void check_threads(void)
{
    printf("\n== 1 thread vs 2 threads ==\n");
    for (int vi = 0; vi < N_VARIANTS; vi++) {
        const prnn_dtype dt = (vi / 2) % 2 ? PRNN_DTYPE_F32 : PRNN_DTYPE_F64;
        const prnn_scan_algo algo = vi % 2 ? PRNN_SCAN_AUTO : PRNN_SCAN_SERIAL;
        const int64_t k = vi % 3 == 2 ? 5 : 0; /* the memory option too */
        const int f32 = dt == PRNN_DTYPE_F32, exact = algo == PRNN_SCAN_SERIAL && !f32;
        problem p;
        /* B*T*H at the size from which the CPU backend's elementwise loops
         * go parallel (32768). */
        if (!problem_init(&p, &k_variants[vi], 8, 128, 6, 32, OPT_ALL)) continue;
        char label[192], lab[320], l2[400];
        problem_label(&p, f32 ? "f32" : "f64", label, sizeof label);
        snprintf(lab, sizeof lab, "%s %s k=%lld", label, prnn_scan_algo_name(algo), (long long)k);
        result r1, r2;
        result_alloc(&r1, &p), result_alloc(&r2, &p);
        run_cfg rc = {dt, k, algo, 1, NULL, 0};
        if (lib_run(g_ctx[0], &p, &rc, &r1, lab) && lib_run(g_ctx[1], &p, &rc, &r2, lab)) {
            const int64_t ns = p.B * p.S2;
            tensor_pair fw[] = {{"y", r2.y, r1.y, p.B * p.T * p.Hout}, {"hT", r2.hT, r1.hT, ns}};
            snprintf(l2, sizeof l2, "%s forward", lab);
            compare_pairs(fw, 2, exact ? 0 : f32 ? TOL_F32 : TOL_F64, 0, l2);
            /* QRNN window 2: the state holds x_prev, and its gradient in
             * dh0 is a GEMM output (above) */
            const int exact_bw = exact && !is_w2(&p);
            tensor_pair bw[] = {{"dh0", r2.dh0, r1.dh0, ns}};
            snprintf(l2, sizeof l2, "%s backward", lab);
            compare_pairs(bw, 1, exact_bw ? 0 : f32 ? TOL_F32_GRAD : TOL_F64, 0, l2);
            tensor_pair bp[] = {{"dx", r2.dx, r1.dx, p.B * p.T * p.D}, {"dparams", r2.dp, r1.dp, p.P}};
            snprintf(l2, sizeof l2, "%s backward GEMM outputs", lab);
            compare_pairs(bp, 2, f32 ? TOL_F32_GRAD : TOL_F64, 0, l2);
        }
        result_free(&r1), result_free(&r2);
        problem_free(&p);
    }
}

/* ------------------------------------------------------------------------ */

int main(int argc, char **argv)
{
    uint64_t seed = tu_seed_from_env();
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--seed") == 0 && i + 1 < argc) {
            seed = strtoull(argv[++i], NULL, 0);
        } else {
            fprintf(stderr, "usage: %s [--seed N]\n", argv[0]);
            return 2;
        }
    }
    tu_seed(seed);
    printf("prnn %s cell layer CPU tests, seed %llu (--seed %llu repeats this run)\n", prnn_version(),
           (unsigned long long)seed, (unsigned long long)seed);
    for (int i = 0; i < 2; i++) {
        prnn_ctx_config cfg = prnn_ctx_config_default();
        cfg.num_threads = i + 1;
        TU_REQUIRE(prnn_ctx_init(&g_ctx[i], &cfg));
    }
    check_sizes();
    check_bad_input();
    check_init();
    check_forward();
    check_step();
    check_fd();
    check_accumulate();
    check_log_space();
    check_saturated();
    check_recompute();
    check_chunks();
    check_threads();
    for (int i = 0; i < 2; i++) prnn_ctx_free(g_ctx[i]);
    return tu_finish();
}
