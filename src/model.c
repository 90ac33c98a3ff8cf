/*
 * model.c - the residual stack of cell layers behind prnn_model.h: the
 * parameter table, forward (parallel over time), backward, and the
 * recurrent one-token step. Every op it runs is a public op of prnn_cell.h
 * or prnn_blocks.h, so the model works on any device those support.
 *
 * Size letters: B batch rows, T steps, N = B*T tokens, V vocabulary,
 * E model width (cfg.dim), L layers.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "blocks_internal.h"
#include "prnn_blocks.h"
#include "prnn_internal.h"
#include "prnn_model.h"
#include "seq_internal.h"

#define MAX_LAYERS 4096

struct prnn_model {
    prnn_ctx *ctx;
    prnn_model_config cfg;
    prnn_cell_desc cell;  /* every layer's cell, dtype = cfg.dtype */
    prnn_dtype acc;       /* F64 for F64 models, F32 otherwise */
    size_t esz, asz;      /* bytes per element of dtype and acc */

    prnn_tensor_info *tensors;
    int ntensors;
    int64_t nparams;
    int64_t off_embed, off_head_w, off_head_b, off_normf_g, off_normf_b;
    int64_t *off_norm_g, *off_norm_b, *off_cell; /* (L) */
    int64_t cell_params;                         /* per layer */
    int64_t state_floats;                        /* per batch row, per layer */

    void *params, *grads, *params_bf16;
    prnn_model_grad_hook grad_hook; /* told of each finished slice of grads */
    void *grad_hook_user;

    /* Activations for up to cap_n tokens. */
    int64_t cap_n;
    size_t cell_act_bytes;
    void *x;        /* (L+1, N, E) dtype: the residual stream */
    void *nx;       /* (L+1, N, E) dtype: normalised inputs (L: before the head) */
    void *mean;     /* (L+1, N) acc (LayerNorm) */
    void *rstd;     /* (L+1, N) acc */
    void *u;        /* (N, E) dtype: a cell's output */
    void *act;      /* (L, cell_act_bytes) */
    void *logits;   /* (N, V) dtype */
    void *dlogits;  /* (N, V) dtype */
    void *lse;      /* (N) acc */
    void *dx, *dn, *dt; /* (N, E) dtype: gradient buffers */

    /* The last forward. */
    int64_t B, T;
    int trained;
    uint64_t drop_seed;
    const int32_t *ids, *targets;

    /* Recurrent mode, up to cap_b rows. */
    int64_t cap_b;
    void *sx, *sn, *su; /* (B, E) dtype */

    /* Sequence-parallel mode (seq_internal.h): the hook, the last
     * forward's segment [seq_off, seq_off + T) of seq_total steps, and its
     * local mean loss's factor in the global mean. */
    prnn_seq *seq;
    int64_t seq_off, seq_total;
    double loss_weight;
};

/* ------------------------------------------------------------------------ */
/* Configuration and the parameter table                                    */

prnn_model_config prnn_model_config_default(void)
{
    prnn_model_config c;
    memset(&c, 0, sizeof c);
    c.vocab = 256;
    c.dim = 128;
    c.layers = 2;
    c.cell = prnn_cell_desc_make(PRNN_CELL_MINGRU, 128, 128);
    c.norm = PRNN_NORM_RMS;
    c.dropout = 0.0;
    c.dtype = PRNN_DTYPE_F32;
    return c;
}

static prnn_status add_tensor(prnn_model *m, const char *name, int ndim, int64_t d0,
                              int64_t d1, int decay)
{
    prnn_tensor_info *t = &m->tensors[m->ntensors++];
    memset(t, 0, sizeof *t);
    snprintf(t->name, sizeof t->name, "%s", name);
    t->ndim = ndim;
    t->shape[0] = d0;
    t->shape[1] = ndim == 2 ? d1 : 1;
    t->count = d0 * t->shape[1];
    t->offset = m->nparams;
    t->decay = decay;
    m->nparams += t->count;
    return PRNN_OK;
}

/* The cell's parameter block, split into the tensors prnn_cell.h lists:
 * per direction W (Din, G*H), U (H, 4H) for GILR-LSTM, bias (G*H). */
static void add_cell_tensors(prnn_model *m, int64_t l)
{
    const prnn_cell_desc *c = &m->cell;
    const int64_t G = prnn_cell_gates(c), H = c->H;
    const int64_t din = c->type == PRNN_CELL_QRNN && c->window == 2 ? 2 * c->D : c->D;
    char name[64];
    for (int dir = 0; dir < (c->bidirectional ? 2 : 1); dir++) {
        const char *dn = dir ? "rev" : "fwd";
        snprintf(name, sizeof name, "layers.%lld.cell.%s.W", (long long)l, dn);
        add_tensor(m, name, 2, din, G * H, 1);
        if (c->type == PRNN_CELL_GILR_LSTM) {
            snprintf(name, sizeof name, "layers.%lld.cell.%s.U", (long long)l, dn);
            add_tensor(m, name, 2, H, 4 * H, 1);
        }
        if (c->bias) {
            snprintf(name, sizeof name, "layers.%lld.cell.%s.bias", (long long)l, dn);
            add_tensor(m, name, 1, G * H, 1, 0);
        }
    }
}

static int device_dtype_ok(const prnn_ctx *ctx, prnn_dtype d)
{
    if (ctx->device == PRNN_DEVICE_CUDA) return d == PRNN_DTYPE_F32 || d == PRNN_DTYPE_BF16;
    return d == PRNN_DTYPE_F32 || d == PRNN_DTYPE_F64;
}

static void free_acts(prnn_model *m)
{
    prnn_ctx *ctx = m->ctx;
    void **bufs[] = {&m->x, &m->nx, &m->mean, &m->rstd, &m->u, &m->act, &m->logits,
                     &m->dlogits, &m->lse, &m->dx, &m->dn, &m->dt};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) {
        prnn_mem_free(ctx, *bufs[i]);
        *bufs[i] = NULL;
    }
    m->cap_n = 0;
}

static void free_step(prnn_model *m)
{
    prnn_mem_free(m->ctx, m->sx);
    prnn_mem_free(m->ctx, m->sn);
    prnn_mem_free(m->ctx, m->su);
    m->sx = m->sn = m->su = NULL;
    m->cap_b = 0;
}

void prnn_model_free(prnn_model *m)
{
    if (!m) return;
    prnn_model_set_seq_(m, NULL);
    free_acts(m);
    free_step(m);
    prnn_mem_free(m->ctx, m->params);
    prnn_mem_free(m->ctx, m->grads);
    prnn_mem_free(m->ctx, m->params_bf16);
    free(m->tensors);
    free(m->off_norm_g);
    free(m->off_norm_b);
    free(m->off_cell);
    free(m);
}

prnn_status prnn_model_init(prnn_ctx *ctx, prnn_model **out, const prnn_model_config *cfg)
{
    if (!ctx || !out || !cfg) return PRNN_ERR_NULL_POINTER;
    *out = NULL;
    if (cfg->vocab < 1 || cfg->dim < 1 || cfg->layers < 1) return PRNN_ERR_INVALID_SIZE;
    if (cfg->vocab > INT32_MAX || cfg->layers > MAX_LAYERS || cfg->dim > ((int64_t)1 << 24))
        return PRNN_ERR_SIZE_OVERFLOW;
    if ((unsigned)cfg->norm >= PRNN_NORM_TYPE_COUNT_) return PRNN_ERR_INVALID_ARGUMENT;
    if (!(cfg->dropout >= 0.0 && cfg->dropout < 1.0)) return PRNN_ERR_INVALID_ARGUMENT;
    if ((unsigned)cfg->dtype >= PRNN_DTYPE_COUNT_) return PRNN_ERR_INVALID_ARGUMENT;
    if (!device_dtype_ok(ctx, cfg->dtype)) return PRNN_ERR_UNSUPPORTED;
    if (cfg->cell.bidirectional && cfg->dim % 2) return PRNN_ERR_INVALID_SIZE;

    prnn_model *m = calloc(1, sizeof *m);
    if (!m) return PRNN_ERR_OUT_OF_MEMORY;
    m->ctx = ctx;
    m->cfg = *cfg;
    m->cell = cfg->cell;
    m->cell.D = cfg->dim;
    m->cell.H = cfg->cell.bidirectional ? cfg->dim / 2 : cfg->dim;
    m->cell.dtype = cfg->dtype;
    m->cfg.cell = m->cell;
    m->acc = cfg->dtype == PRNN_DTYPE_F64 ? PRNN_DTYPE_F64 : PRNN_DTYPE_F32;
    m->esz = prnn_dtype_size(cfg->dtype);
    m->asz = prnn_dtype_size(m->acc);

    prnn_status s = prnn_cell_check(&m->cell);
    if (s == PRNN_OK) s = prnn_cell_param_count(&m->cell, &m->cell_params);
    if (s == PRNN_OK) s = prnn_cell_state_size(&m->cell, &m->state_floats);
    if (s != PRNN_OK) {
        prnn_model_free(m);
        return s;
    }

    const int64_t L = cfg->layers;
    m->tensors = calloc((size_t)(8 * L + 8), sizeof *m->tensors);
    m->off_norm_g = calloc((size_t)L, sizeof(int64_t));
    m->off_norm_b = calloc((size_t)L, sizeof(int64_t));
    m->off_cell = calloc((size_t)L, sizeof(int64_t));
    if (!m->tensors || !m->off_norm_g || !m->off_norm_b || !m->off_cell) {
        prnn_model_free(m);
        return PRNN_ERR_OUT_OF_MEMORY;
    }
    const int ln = cfg->norm == PRNN_NORM_LAYER;
    char name[64];
    m->off_embed = m->nparams;
    add_tensor(m, "embed.weight", 2, cfg->vocab, cfg->dim, 1);
    for (int64_t l = 0; l < L; l++) {
        m->off_norm_g[l] = m->nparams;
        snprintf(name, sizeof name, "layers.%lld.norm.weight", (long long)l);
        add_tensor(m, name, 1, cfg->dim, 1, 0);
        m->off_norm_b[l] = -1;
        if (ln) {
            m->off_norm_b[l] = m->nparams;
            snprintf(name, sizeof name, "layers.%lld.norm.bias", (long long)l);
            add_tensor(m, name, 1, cfg->dim, 1, 0);
        }
        m->off_cell[l] = m->nparams;
        add_cell_tensors(m, l);
        if (m->nparams - m->off_cell[l] != m->cell_params) {
            prnn_model_free(m);
            return PRNN_ERR_INVALID_ARGUMENT; /* table and cell layout disagree */
        }
    }
    m->off_normf_g = m->nparams;
    add_tensor(m, "norm_f.weight", 1, cfg->dim, 1, 0);
    m->off_normf_b = -1;
    if (ln) {
        m->off_normf_b = m->nparams;
        add_tensor(m, "norm_f.bias", 1, cfg->dim, 1, 0);
    }
    m->off_head_w = m->nparams;
    add_tensor(m, "head.weight", 2, cfg->dim, cfg->vocab, 1);
    m->off_head_b = m->nparams;
    add_tensor(m, "head.bias", 1, cfg->vocab, 1, 0);

    const size_t pbytes = (size_t)m->nparams * m->asz;
    s = prnn_mem_alloc(ctx, &m->params, pbytes);
    if (s == PRNN_OK) s = prnn_mem_alloc(ctx, &m->grads, pbytes);
    if (s == PRNN_OK && cfg->dtype == PRNN_DTYPE_BF16)
        s = prnn_mem_alloc(ctx, &m->params_bf16, (size_t)m->nparams * 2);
    if (s == PRNN_OK) s = prnn_mem_zero(ctx, m->grads, pbytes);
    if (s != PRNN_OK) {
        prnn_model_free(m);
        return s;
    }
    *out = m;
    return PRNN_OK;
}

const prnn_model_config *prnn_model_config_get(const prnn_model *m)
{
    return m ? &m->cfg : NULL;
}

int64_t prnn_model_param_count(const prnn_model *m) { return m ? m->nparams : 0; }
int prnn_model_tensor_count(const prnn_model *m) { return m ? m->ntensors : 0; }

prnn_status prnn_model_tensor(const prnn_model *m, int i, prnn_tensor_info *info)
{
    if (!m || !info) return PRNN_ERR_NULL_POINTER;
    if (i < 0 || i >= m->ntensors) return PRNN_ERR_INVALID_ARGUMENT;
    *info = m->tensors[i];
    return PRNN_OK;
}

void *prnn_model_params(prnn_model *m) { return m ? m->params : NULL; }
void *prnn_model_grads(prnn_model *m) { return m ? m->grads : NULL; }
void *prnn_model_params_bf16(prnn_model *m) { return m ? m->params_bf16 : NULL; }

prnn_status prnn_model_zero_grads(prnn_model *m)
{
    if (!m) return PRNN_ERR_NULL_POINTER;
    return prnn_mem_zero(m->ctx, m->grads, (size_t)m->nparams * m->asz);
}

prnn_status prnn_model_params_changed(prnn_model *m)
{
    if (!m) return PRNN_ERR_NULL_POINTER;
    if (!m->params_bf16) return PRNN_OK;
    return prnn_mem_convert(m->ctx, m->params_bf16, PRNN_DTYPE_BF16, m->params, PRNN_DTYPE_F32,
                            m->nparams);
}

/* splitmix64: a small, well-mixed generator for the initial weights. */
static uint64_t mix64(uint64_t *s)
{
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static double uniform_pm1(uint64_t *s) /* in (-1, 1) */
{
    return ((double)(mix64(s) >> 11) + 0.5) * 0x1.0p-52 - 1.0;
}

prnn_status prnn_model_init_params(prnn_model *m, uint64_t seed)
{
    if (!m) return PRNN_ERR_NULL_POINTER;
    const prnn_model_config *c = &m->cfg;
    double *w = malloc((size_t)m->nparams * sizeof(double));
    if (!w) return PRNN_ERR_OUT_OF_MEMORY;
    for (int64_t i = 0; i < m->nparams; i++) w[i] = 0.0;

    uint64_t s = seed ^ 0x70726e6e6d6f646cull; /* "prnnmodl" */
    /* Embedding rows of unit RMS (the first norm rescales them anyway), the
     * head at 1/sqrt(fan_in) so initial logits are O(1) and the loss starts
     * near log(V). */
    const double r3 = sqrt(3.0);
    for (int64_t i = 0; i < c->vocab * c->dim; i++) w[m->off_embed + i] = r3 * uniform_pm1(&s);
    const double hs = 1.0 / sqrt((double)c->dim);
    for (int64_t i = 0; i < c->dim * c->vocab; i++) w[m->off_head_w + i] = hs * uniform_pm1(&s);
    for (int64_t l = 0; l < c->layers; l++)
        for (int64_t i = 0; i < c->dim; i++) w[m->off_norm_g[l] + i] = 1.0;
    for (int64_t i = 0; i < c->dim; i++) w[m->off_normf_g + i] = 1.0;

    /* Cells through their own initializer, in double, one seed per layer. */
    prnn_cell_desc cd = m->cell;
    cd.dtype = PRNN_DTYPE_F64;
    double *cp = malloc((size_t)m->cell_params * sizeof(double));
    if (!cp) {
        free(w);
        return PRNN_ERR_OUT_OF_MEMORY;
    }
    prnn_status st = PRNN_OK;
    for (int64_t l = 0; l < c->layers && st == PRNN_OK; l++) {
        st = prnn_cell_init_params(&cd, cp, mix64(&s));
        for (int64_t i = 0; i < m->cell_params; i++) w[m->off_cell[l] + i] = cp[i];
    }
    free(cp);

    if (st == PRNN_OK) {
        void *host = w;
        if (m->acc == PRNN_DTYPE_F32) { /* narrow in place: floats fit in the doubles' room */
            float *f = (float *)w;
            for (int64_t i = 0; i < m->nparams; i++) f[i] = (float)w[i];
        }
        st = prnn_mem_upload(m->ctx, m->params, host, (size_t)m->nparams * m->asz);
        if (st == PRNN_OK) st = prnn_ctx_synchronize(m->ctx);
        if (st == PRNN_OK) st = prnn_model_params_changed(m);
        if (st == PRNN_OK) st = prnn_ctx_synchronize(m->ctx);
    }
    free(w);
    return st;
}

/* ------------------------------------------------------------------------ */
/* Buffers                                                                  */

static prnn_status ensure_acts(prnn_model *m, int64_t N, int64_t B, int64_t T)
{
    size_t act_bytes = 0;
    prnn_status s = prnn_cell_act_bytes(&m->cell, B, T, &act_bytes);
    if (s != PRNN_OK) return s;
    if (N <= m->cap_n && act_bytes <= m->cell_act_bytes) return PRNN_OK;
    free_acts(m);
    prnn_ctx *ctx = m->ctx;
    const int64_t L = m->cfg.layers, E = m->cfg.dim, V = m->cfg.vocab;
    int64_t ne, nv, nl, tmp;
    if (!prnn_mul_ok(N, E, &ne) || !prnn_mul_ok(N, V, &nv) || !prnn_mul_ok(N, L + 1, &nl) ||
        !prnn_mul_ok(ne, L + 1, &tmp) || !prnn_mul_ok(tmp, (int64_t)m->esz, &tmp) ||
        act_bytes > (size_t)INT64_MAX / (size_t)(L + 1))
        return PRNN_ERR_SIZE_OVERFLOW;
    const size_t es = m->esz, as = m->asz;
    struct {
        void **p;
        size_t bytes;
    } want[] = {
        {&m->x, (size_t)ne * (size_t)(L + 1) * es},
        {&m->nx, (size_t)ne * (size_t)(L + 1) * es},
        {&m->mean, (size_t)nl * as},
        {&m->rstd, (size_t)nl * as},
        {&m->u, (size_t)ne * es},
        {&m->act, act_bytes ? act_bytes * (size_t)L : 1},
        {&m->logits, (size_t)nv * es},
        {&m->dlogits, (size_t)nv * es},
        {&m->lse, (size_t)N * as},
        {&m->dx, (size_t)ne * es},
        {&m->dn, (size_t)ne * es},
        {&m->dt, (size_t)ne * es},
    };
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        s = prnn_mem_alloc(ctx, want[i].p, want[i].bytes);
        if (s != PRNN_OK) {
            free_acts(m);
            return s;
        }
    }
    m->cap_n = N;
    m->cell_act_bytes = act_bytes;
    return PRNN_OK;
}

/* Element and byte offsets into the typed buffers. */
static void *eptr(const prnn_model *m, void *base, int64_t elems)
{
    return (char *)base + (size_t)elems * m->esz;
}
static void *aptr(const prnn_model *m, void *base, int64_t elems)
{
    return (char *)base + (size_t)elems * m->asz;
}
/* The weights the layers read: the bf16 copy for BF16 models. */
static const void *wptr(const prnn_model *m, int64_t off)
{
    if (off < 0) return NULL;
    if (m->params_bf16) return (const char *)m->params_bf16 + (size_t)off * 2;
    return (const char *)m->params + (size_t)off * m->asz;
}
static void *gptr(const prnn_model *m, int64_t off)
{
    if (off < 0) return NULL;
    return (char *)m->grads + (size_t)off * m->asz;
}

/* A dropout seed per (step seed, layer). */
static uint64_t layer_seed(uint64_t seed, int64_t l)
{
    uint64_t s = seed ^ ((uint64_t)l * 0xD1B54A32D192ED03ull);
    return mix64(&s);
}

/* Dropout over a layer's output (B, T, E), forward or backward (the same
 * map). In sequence-parallel mode a row is a slice of the whole sequence's
 * row, and draws the mask bits the whole (B, seq_total, E) tensor has
 * there. */
static prnn_status dropout(prnn_model *m, void *y, const void *x, int64_t B, int64_t T,
                           uint64_t seed)
{
    const int64_t E = m->cfg.dim;
    const prnn_dtype dt = m->cfg.dtype;
    if (!m->seq) return prnn_dropout_forward(m->ctx, y, x, B * T * E, m->cfg.dropout, seed, dt);
    for (int64_t b = 0; b < B; b++) {
        const size_t at = (size_t)(b * T * E) * m->esz;
        prnn_status s = blocks_dropout_at(m->ctx, (char *)y + at, (const char *)x + at, T * E,
                                          m->cfg.dropout, seed,
                                          (b * m->seq_total + m->seq_off) * E, dt);
        if (s != PRNN_OK) return s;
    }
    return PRNN_OK;
}

static prnn_status norm_fwd(prnn_model *m, void *y, void *mean, void *rstd, const void *x,
                            int64_t g_off, int64_t b_off, int64_t n)
{
    const double eps = 1e-5;
    if (m->cfg.norm == PRNN_NORM_LAYER)
        return prnn_layernorm_forward(m->ctx, y, mean, rstd, x, wptr(m, g_off), wptr(m, b_off),
                                      n, m->cfg.dim, eps, m->cfg.dtype);
    return prnn_rmsnorm_forward(m->ctx, y, rstd, x, wptr(m, g_off), n, m->cfg.dim, eps,
                                m->cfg.dtype);
}

static prnn_status norm_bwd(prnn_model *m, void *dx, const void *dy, const void *x,
                            const void *mean, const void *rstd, int64_t g_off, int64_t b_off,
                            int64_t n)
{
    if (m->cfg.norm == PRNN_NORM_LAYER)
        return prnn_layernorm_backward(m->ctx, dx, gptr(m, g_off), gptr(m, b_off), dy, x,
                                       wptr(m, g_off), mean, rstd, n, m->cfg.dim,
                                       m->cfg.dtype);
    return prnn_rmsnorm_backward(m->ctx, dx, gptr(m, g_off), dy, x, wptr(m, g_off), rstd, n,
                                 m->cfg.dim, m->cfg.dtype);
}

/* ------------------------------------------------------------------------ */
/* Forward and backward                                                     */

prnn_status prnn_model_set_grad_hook(prnn_model *m, prnn_model_grad_hook hook, void *user)
{
    if (!m) return PRNN_ERR_NULL_POINTER;
    m->grad_hook = hook;
    m->grad_hook_user = user;
    return PRNN_OK;
}

/* Gradients [lo, hi) are final for this backward: their ops are queued. */
static prnn_status grad_ready(prnn_model *m, int64_t lo, int64_t hi)
{
    return m->grad_hook ? m->grad_hook(m->grad_hook_user, lo, hi - lo) : PRNN_OK;
}

#define TRY(call)                                                              \
    do {                                                                       \
        prnn_status s_ = (call);                                               \
        if (s_ != PRNN_OK) return s_;                                          \
    } while (0)

prnn_status prnn_model_forward(prnn_model *m, int64_t B, int64_t T, void *loss,
                               const int32_t *ids, const int32_t *targets, int train,
                               uint64_t dropout_seed)
{
    if (!m || !ids) return PRNN_ERR_NULL_POINTER;
    if (loss && !targets) return PRNN_ERR_NULL_POINTER;
    if (B < 1 || T < 1) return PRNN_ERR_INVALID_SIZE;
    int64_t N;
    if (!prnn_mul_ok(B, T, &N)) return PRNN_ERR_SIZE_OVERFLOW;
    TRY(ensure_acts(m, N, B, T));
    m->trained = 0;
    m->seq_off = 0;
    m->seq_total = T;
    if (m->seq) TRY(m->seq->begin(m->seq->self, B, T, &m->seq_off, &m->seq_total));

    prnn_ctx *ctx = m->ctx;
    const prnn_model_config *c = &m->cfg;
    const int64_t E = c->dim, L = c->layers;
    const prnn_dtype dt = c->dtype;
    TRY(prnn_embedding_forward(ctx, m->x, NULL, ids, wptr(m, m->off_embed), N, c->vocab, E, dt));
    for (int64_t l = 0; l < L; l++) {
        void *xl = eptr(m, m->x, l * N * E), *nl = eptr(m, m->nx, l * N * E);
        void *xn = eptr(m, m->x, (l + 1) * N * E);
        TRY(norm_fwd(m, nl, aptr(m, m->mean, l * N), aptr(m, m->rstd, l * N), xl,
                     m->off_norm_g[l], m->off_norm_b[l], N));
        void *act = train ? (char *)m->act + (size_t)l * m->cell_act_bytes : NULL;
        TRY(prnn_cell_forward_seq(ctx, &m->cell, m->seq, B, T, m->u, act, nl,
                                  wptr(m, m->off_cell[l])));
        if (train && c->dropout > 0)
            TRY(dropout(m, m->u, m->u, B, T, layer_seed(dropout_seed, l)));
        TRY(prnn_add(ctx, xn, xl, m->u, N * E, dt));
    }
    void *nL = eptr(m, m->nx, L * N * E);
    TRY(norm_fwd(m, nL, aptr(m, m->mean, L * N), aptr(m, m->rstd, L * N),
                 eptr(m, m->x, L * N * E), m->off_normf_g, m->off_normf_b, N));
    TRY(prnn_linear_forward(ctx, m->logits, nL, wptr(m, m->off_head_w), wptr(m, m->off_head_b),
                            N, E, c->vocab, dt));
    m->loss_weight = 1.0;
    if (targets)
        TRY(prnn_xent_forward(ctx, loss, NULL, train ? m->lse : NULL, NULL, m->logits, targets,
                              N, c->vocab, dt));
    if (targets && m->seq)
        TRY(m->seq->loss(m->seq->self, loss, m->acc, targets, N, c->vocab, &m->loss_weight));
    m->B = B;
    m->T = T;
    m->ids = ids;
    m->targets = targets;
    m->drop_seed = dropout_seed;
    m->trained = train && targets;
    return PRNN_OK;
}

const void *prnn_model_logits(const prnn_model *m) { return m ? m->logits : NULL; }

prnn_status prnn_model_backward(prnn_model *m, double dloss)
{
    if (!m) return PRNN_ERR_NULL_POINTER;
    if (!m->trained) return PRNN_ERR_INVALID_ARGUMENT; /* no train-mode forward to undo */
    prnn_ctx *ctx = m->ctx;
    const prnn_model_config *c = &m->cfg;
    const int64_t E = c->dim, L = c->layers, B = m->B, T = m->T, N = B * T;
    const prnn_dtype dt = c->dtype;

    TRY(prnn_xent_backward(ctx, m->dlogits, m->logits, m->targets, m->lse, N, c->vocab,
                           dloss * m->loss_weight, dt));
    void *nL = eptr(m, m->nx, L * N * E);
    TRY(prnn_linear_backward(ctx, m->dn, gptr(m, m->off_head_w), gptr(m, m->off_head_b),
                             m->dlogits, nL, wptr(m, m->off_head_w), N, E, c->vocab, dt));
    TRY(grad_ready(m, m->off_head_w, m->nparams)); /* head.weight, head.bias */
    TRY(norm_bwd(m, m->dx, m->dn, eptr(m, m->x, L * N * E), aptr(m, m->mean, L * N),
                 aptr(m, m->rstd, L * N), m->off_normf_g, m->off_normf_b, N));
    TRY(grad_ready(m, m->off_normf_g, m->off_head_w));
    for (int64_t l = L - 1; l >= 0; l--) {
        /* dx holds dL/dx_{l+1}: it flows to x_l unchanged (the residual) and
         * through dropout, the cell and the norm. */
        const void *du = m->dx;
        if (c->dropout > 0) {
            TRY(dropout(m, m->dt, m->dx, B, T, layer_seed(m->drop_seed, l)));
            du = m->dt;
        }
        void *xl = eptr(m, m->x, l * N * E), *nl = eptr(m, m->nx, l * N * E);
        const void *act = (char *)m->act + (size_t)l * m->cell_act_bytes;
        TRY(prnn_cell_backward_seq(ctx, &m->cell, m->seq, B, T, m->dn, gptr(m, m->off_cell[l]),
                                   du, nl, wptr(m, m->off_cell[l]), act));
        TRY(norm_bwd(m, m->dt, m->dn, xl, aptr(m, m->mean, l * N), aptr(m, m->rstd, l * N),
                     m->off_norm_g[l], m->off_norm_b[l], N));
        TRY(grad_ready(m, m->off_norm_g[l], m->off_cell[l] + m->cell_params)); /* norm, cell */
        TRY(prnn_add(ctx, m->dx, m->dx, m->dt, N * E, dt));
    }
    TRY(prnn_embedding_backward(ctx, gptr(m, m->off_embed), m->ids, m->dx, N, c->vocab, E, dt));
    TRY(grad_ready(m, m->off_embed, m->off_norm_g[0]));
    return PRNN_OK;
}

/* ------------------------------------------------------------------------ */
/* Sequence-parallel mode                                                   */

prnn_status prnn_model_set_seq_(prnn_model *m, prnn_seq *seq)
{
    if (!m) return PRNN_ERR_NULL_POINTER;
    if (m->seq && m->seq->release) m->seq->release(m->seq->self);
    m->seq = seq;
    m->trained = 0; /* a backward belongs to the forward of its own mode */
    return PRNN_OK;
}

const prnn_seq *prnn_model_seq_(const prnn_model *m) { return m ? m->seq : NULL; }

/* ------------------------------------------------------------------------ */
/* Recurrent mode                                                           */

prnn_status prnn_model_state_floats(const prnn_model *m, int64_t *floats)
{
    if (!m || !floats) return PRNN_ERR_NULL_POINTER;
    *floats = m->state_floats * m->cfg.layers;
    return PRNN_OK;
}

/* The state buffer is layer-major: layer l's cell state is the (B, S)
 * block at l * B * S, so each block is what prnn_cell_step takes. */
prnn_status prnn_model_step(prnn_model *m, int64_t B, void *logits, void *state,
                            const int32_t *ids)
{
    if (!m || !logits || !state || !ids) return PRNN_ERR_NULL_POINTER;
    if (B < 1) return PRNN_ERR_INVALID_SIZE;
    if (m->cell.bidirectional) return PRNN_ERR_UNSUPPORTED;
    prnn_ctx *ctx = m->ctx;
    const prnn_model_config *c = &m->cfg;
    const int64_t E = c->dim;
    const prnn_dtype dt = c->dtype;
    if (B > m->cap_b) {
        free_step(m);
        int64_t be;
        if (!prnn_mul_ok(B, E, &be)) return PRNN_ERR_SIZE_OVERFLOW;
        const size_t bytes = (size_t)be * m->esz;
        prnn_status s = prnn_mem_alloc(ctx, &m->sx, bytes);
        if (s == PRNN_OK) s = prnn_mem_alloc(ctx, &m->sn, bytes);
        if (s == PRNN_OK) s = prnn_mem_alloc(ctx, &m->su, bytes);
        if (s != PRNN_OK) {
            free_step(m);
            return s;
        }
        m->cap_b = B;
    }
    TRY(prnn_embedding_forward(ctx, m->sx, NULL, ids, wptr(m, m->off_embed), B, c->vocab, E,
                               dt));
    for (int64_t l = 0; l < c->layers; l++) {
        TRY(norm_fwd(m, m->sn, NULL, NULL, m->sx, m->off_norm_g[l], m->off_norm_b[l], B));
        void *st = (char *)state + (size_t)(l * B * m->state_floats) * m->asz;
        TRY(prnn_cell_step(ctx, &m->cell, B, m->su, st, m->sn, wptr(m, m->off_cell[l])));
        TRY(prnn_add(ctx, m->sx, m->sx, m->su, B * E, dt));
    }
    TRY(norm_fwd(m, m->sn, NULL, NULL, m->sx, m->off_normf_g, m->off_normf_b, B));
    TRY(prnn_linear_forward(ctx, logits, m->sn, wptr(m, m->off_head_w), wptr(m, m->off_head_b),
                            B, E, c->vocab, dt));
    return PRNN_OK;
}
