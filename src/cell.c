/*
 * cell.c - the cell layers of prnn_cell.h: names, descriptors and sizes,
 * argument validation, parameter initialisation, and the forward, backward
 * and step passes, which orchestrate GEMMs (prnn_gemm), linear scans
 * (prnn_scan_*) and the elementwise primitives of cell_internal.h. The
 * primitives' cell_* entry points are defined here too: each dispatches to
 * the CPU backend (cell_cpu.c) or, in builds with cell_cuda.cu
 * (PRNN_CELL_CUDA), to the CUDA backend.
 *
 * One direction of a layer runs
 *
 *   forward    P = X W (QRNN window 2: + Xs W1, Xs = x shifted one step)
 *              [GILR: a, b = surrogate gates(P); s = scan; P[f,i,o,z] += s_prev U]
 *              a, b = gates(P); c = scan(a, b, c0) (log space: the log scan)
 *              y = out(c, P, x) (where y = c and c is not kept, the scan
 *              writes y)
 *   backward   dc, dP[out groups] = out_bwd(dy) (where y = c: dc is dy);
 *              a = gates(P) again (a alone);
 *              da, db = scan_bwd(a, c, dc); dP[gate groups] = gates_bwd, which
 *              also adds their column sums to dbias
 *              [GILR: dU, ds_prev from dP[f,i,o,z]; the surrogate the same way]
 *              dW += X^T dP, dbias[out groups] += colsum dP, dx += dP W^T
 *
 * What the forward saves (act), per direction: P and c (and GILR's s), or
 * with desc.recompute = k > 1 only the state entering each chunk of k steps
 * (B, ceil(T/k), H) in the accumulation type; the backward then recomputes
 * P by the GEMM and c by one scan over the chunks, seen as B*ceil(T/k) rows
 * of k steps, each starting from its saved state. When k does not divide T,
 * that scan runs on copies padded to ceil(T/k)*k steps per row.
 *
 * Everything else the passes need lives in the context's layer scratch,
 * taken once per call and cut up by a plan (plan_fwd, plan_bwd).
 *
 * Size letters: B batch rows, T steps, D input features, H hidden units per
 * direction, G gate groups, S state floats per direction (S2 of the layer),
 * Din rows of W (D, or 2D for QRNN window 2), k the recompute chunk, nc the
 * chunks per row.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cell_internal.h"
#include "seq_internal.h"

#define TRY(call)                                                                                  \
    do {                                                                                           \
        prnn_status st_ = (call);                                                                  \
        if (st_ != PRNN_OK) return st_;                                                            \
    } while (0)

/* ------------------------------------------------------------------------ */
/* Primitive dispatch                                                       */

#ifdef PRNN_CELL_CUDA
#define CELL_CALL(name, ...)                                                                       \
    (ctx->device == PRNN_DEVICE_CUDA ? prnn_cuda_cell_##name(__VA_ARGS__)                         \
                                     : prnn_cpu_cell_##name(__VA_ARGS__))
#else
#define CELL_CALL(name, ...)                                                                       \
    (ctx->device == PRNN_DEVICE_CUDA ? PRNN_ERR_NO_DEVICE : prnn_cpu_cell_##name(__VA_ARGS__))
#endif

prnn_status cell_gates_fwd(prnn_ctx *ctx, const cell_ew *e, void *a, void *b, const void *P,
                           const void *bias)
{
    return CELL_CALL(gates_fwd, ctx, e, a, b, P, bias);
}

prnn_status cell_out_fwd(prnn_ctx *ctx, const cell_ew *e, void *y, int64_t ldy, const void *c,
                         const void *P, const void *bias, const void *x)
{
    return CELL_CALL(out_fwd, ctx, e, y, ldy, c, P, bias, x);
}

prnn_status cell_out_bwd(prnn_ctx *ctx, const cell_ew *e, void *dc, void *dP, void *dx,
                         const void *dy, int64_t ldy, const void *c, const void *P,
                         const void *bias, const void *x)
{
    return CELL_CALL(out_bwd, ctx, e, dc, dP, dx, dy, ldy, c, P, bias, x);
}

prnn_status cell_gates_bwd(prnn_ctx *ctx, const cell_ew *e, void *dP, const void *da,
                           const void *db, const void *P, const void *bias, void *dbias)
{
    return CELL_CALL(gates_bwd, ctx, e, dP, da, db, P, bias, dbias);
}

prnn_status cell_logscan_fwd(prnn_ctx *ctx, const cell_ew *e, void *l, void *lT, const void *la,
                             const void *lb, const void *l0)
{
    return CELL_CALL(logscan_fwd, ctx, e, l, lT, la, lb, l0);
}

prnn_status cell_logscan_w(prnn_ctx *ctx, const cell_ew *e, void *w, const void *la,
                           const void *l, const void *l0)
{
    return CELL_CALL(logscan_w, ctx, e, w, la, l, l0);
}

prnn_status cell_logscan_bwd(prnn_ctx *ctx, const cell_ew *e, void *dla, void *dlb, void *dc0,
                             const void *g, const void *w, const void *la, const void *l,
                             const void *dcT)
{
    return CELL_CALL(logscan_bwd, ctx, e, dla, dlb, dc0, g, w, la, l, dcT);
}

prnn_status cell_shift(prnn_ctx *ctx, const cell_ew *e, int64_t n, void *dst, int64_t ld_dst,
                       const void *src, int64_t ld_src, const void *init, int64_t ld_init)
{
    return CELL_CALL(shift, ctx, e, n, dst, ld_dst, src, ld_src, init, ld_init);
}

prnn_status cell_unshift_add(prnn_ctx *ctx, const cell_ew *e, int64_t n, void *dst,
                             int64_t ld_dst, const void *src, int64_t ld_src, void *dinit,
                             int64_t ld_dinit)
{
    return CELL_CALL(unshift_add, ctx, e, n, dst, ld_dst, src, ld_src, dinit, ld_dinit);
}

prnn_status cell_last(prnn_ctx *ctx, const cell_ew *e, int dir, int64_t n, void *dst,
                      int64_t ld_dst, const void *src, int64_t ld_src, const void *init,
                      int64_t ld_init)
{
    return CELL_CALL(last, ctx, e, dir, n, dst, ld_dst, src, ld_src, init, ld_init);
}

prnn_status cell_colsum_add(prnn_ctx *ctx, prnn_dtype dtype, int64_t rows, int64_t n, void *dst,
                            const void *src, int64_t ld)
{
    return CELL_CALL(colsum_add, ctx, dtype, rows, n, dst, src, ld);
}

prnn_status cell_copy2d(prnn_ctx *ctx, void *dst, int64_t dpitch, const void *src,
                        int64_t spitch, int64_t width, int64_t rows)
{
    return CELL_CALL(copy2d, ctx, dst, dpitch, src, spitch, width, rows);
}

prnn_status cell_convert(prnn_ctx *ctx, prnn_dtype dtype, int dir, int64_t rows, int64_t n,
                         void *dst, int64_t ld_dst, const void *src, int64_t ld_src)
{
    return CELL_CALL(convert, ctx, dtype, dir, rows, n, dst, ld_dst, src, ld_src);
}

prnn_status cell_state_map(prnn_ctx *ctx, prnn_dtype dtype, cell_state_op op, int64_t n,
                           void *dst, const void *src, const void *aux)
{
    return CELL_CALL(state_map, ctx, dtype, op, n, dst, src, aux);
}

/* ------------------------------------------------------------------------ */
/* Names, descriptors, sizes                                                */

static const char *const cell_names[PRNN_CELL_TYPE_COUNT_] = {"mingru", "minlstm", "qrnn", "sru",
                                                              "gilr-lstm"};

const char *prnn_cell_type_name(prnn_cell_type type)
{
    if ((unsigned)type >= PRNN_CELL_TYPE_COUNT_) return NULL;
    return cell_names[type];
}

prnn_status prnn_cell_type_parse(const char *name, prnn_cell_type *type)
{
    if (!name || !type) return PRNN_ERR_NULL_POINTER;
    for (int i = 0; i < PRNN_CELL_TYPE_COUNT_; i++) {
        if (strcmp(name, cell_names[i]) == 0) {
            *type = (prnn_cell_type)i;
            return PRNN_OK;
        }
    }
    return PRNN_ERR_INVALID_ARGUMENT;
}

prnn_cell_desc prnn_cell_desc_make(prnn_cell_type type, int64_t D, int64_t H)
{
    prnn_cell_desc d;
    memset(&d, 0, sizeof d);
    d.type = type;
    d.D = D;
    d.H = H;
    d.dtype = PRNN_DTYPE_F32;
    d.bias = 1;
    d.pooling = PRNN_QRNN_FO;
    d.window = 1;
    d.algo = PRNN_SCAN_AUTO;
    return d;
}

/* Gate groups and state floats of one direction; the descriptor's options
 * are assumed in range. */
static int64_t gates_of(const prnn_cell_desc *d)
{
    switch (d->type) {
    case PRNN_CELL_MINGRU: return 2;
    case PRNN_CELL_MINLSTM: return 3;
    case PRNN_CELL_QRNN: return d->pooling == PRNN_QRNN_F ? 2 : d->pooling == PRNN_QRNN_FO ? 3 : 4;
    case PRNN_CELL_SRU: return d->D == d->H ? 3 : 4;
    case PRNN_CELL_GILR_LSTM: return 6;
    default: return 0;
    }
}

static int is_qrnn2(const prnn_cell_desc *d)
{
    return d->type == PRNN_CELL_QRNN && d->window == 2;
}

/* Per direction: parameters (W, U, bias) and state floats, overflow-checked. */
static int dir_sizes(const prnn_cell_desc *d, int64_t *nW, int64_t *nU, int64_t *nb, int64_t *S)
{
    *nW = *nU = *nb = *S = 0;
    if (d->D > INT64_MAX / 2) return 0;
    const int64_t G = gates_of(d), Din = is_qrnn2(d) ? 2 * d->D : d->D;
    int64_t GH, HH;
    if (!prnn_mul_ok(G, d->H, &GH) || !prnn_mul_ok(Din, GH, nW)) return 0;
    *nU = 0;
    if (d->type == PRNN_CELL_GILR_LSTM) {
        if (!prnn_mul_ok(d->H, 4 * d->H, &HH) || d->H > INT64_MAX / 4) return 0;
        *nU = HH;
    }
    *nb = d->bias ? GH : 0;
    if (*nW > INT64_MAX - *nU - *nb) return 0;
    if (is_qrnn2(d)) {
        if (d->H > INT64_MAX - d->D) return 0;
        *S = d->H + d->D;
    } else {
        if (d->type == PRNN_CELL_GILR_LSTM && d->H > INT64_MAX / 2) return 0;
        *S = d->type == PRNN_CELL_GILR_LSTM ? 2 * d->H : d->H;
    }
    return 1;
}

prnn_status prnn_cell_check(const prnn_cell_desc *d)
{
    if (!d) return PRNN_ERR_NULL_POINTER;
    if ((unsigned)d->type >= PRNN_CELL_TYPE_COUNT_) return PRNN_ERR_INVALID_ARGUMENT;
    if (d->D <= 0 || d->H <= 0) return PRNN_ERR_INVALID_SIZE;
    if ((unsigned)d->dtype >= PRNN_DTYPE_COUNT_) return PRNN_ERR_INVALID_ARGUMENT;
    if (d->dtype == PRNN_DTYPE_F16) return PRNN_ERR_UNSUPPORTED;
    if (d->bidirectional != 0 && d->bidirectional != 1) return PRNN_ERR_INVALID_ARGUMENT;
    if (d->bias != 0 && d->bias != 1) return PRNN_ERR_INVALID_ARGUMENT;
    if (d->log_space != 0 && d->log_space != 1) return PRNN_ERR_INVALID_ARGUMENT;
    if (d->log_space && d->type != PRNN_CELL_MINGRU && d->type != PRNN_CELL_MINLSTM)
        return PRNN_ERR_INVALID_ARGUMENT;
    if ((unsigned)d->pooling >= PRNN_QRNN_POOLING_COUNT_) return PRNN_ERR_INVALID_ARGUMENT;
    /* Other cells ignore the window; 0 and the default 1 both mean "none". */
    if (d->type == PRNN_CELL_QRNN ? d->window != 1 && d->window != 2
                                  : d->window != 0 && d->window != 1)
        return PRNN_ERR_INVALID_ARGUMENT;
    if (d->recompute < 0) return PRNN_ERR_INVALID_ARGUMENT;
    if ((unsigned)d->algo >= PRNN_SCAN_ALGO_COUNT_) return PRNN_ERR_INVALID_ARGUMENT;
    int64_t nW, nU, nb, S;
    if (!dir_sizes(d, &nW, &nU, &nb, &S)) return PRNN_ERR_SIZE_OVERFLOW;
    if (nW + nU + nb > INT64_MAX / 2 || S > INT64_MAX / 16) return PRNN_ERR_SIZE_OVERFLOW;
    return PRNN_OK;
}

int64_t prnn_cell_out_size(const prnn_cell_desc *desc)
{
    if (prnn_cell_check(desc) != PRNN_OK) return 0;
    return desc->bidirectional ? 2 * desc->H : desc->H;
}

int64_t prnn_cell_gates(const prnn_cell_desc *desc)
{
    if (prnn_cell_check(desc) != PRNN_OK) return 0;
    return gates_of(desc);
}

prnn_status prnn_cell_param_count(const prnn_cell_desc *desc, int64_t *count)
{
    if (!count) return PRNN_ERR_NULL_POINTER;
    TRY(prnn_cell_check(desc));
    int64_t nW, nU, nb, S;
    dir_sizes(desc, &nW, &nU, &nb, &S);
    *count = (nW + nU + nb) * (desc->bidirectional ? 2 : 1);
    return PRNN_OK;
}

prnn_status prnn_cell_state_size(const prnn_cell_desc *desc, int64_t *floats)
{
    if (!floats) return PRNN_ERR_NULL_POINTER;
    TRY(prnn_cell_check(desc));
    int64_t nW, nU, nb, S;
    dir_sizes(desc, &nW, &nU, &nb, &S);
    *floats = S * (desc->bidirectional ? 2 : 1);
    return PRNN_OK;
}

/* ------------------------------------------------------------------------ */
/* Layer geometry                                                           */

/* Checked size arithmetic: any overflow clears *ok and the result is 0. */
static int64_t mulc(int64_t x, int64_t y, int *ok)
{
    int64_t r;
    if (!prnn_mul_ok(x, y, &r)) {
        *ok = 0;
        return 0;
    }
    return r;
}

static int64_t addc(int64_t x, int64_t y, int *ok)
{
    if (x < 0 || y < 0 || x > INT64_MAX - y) {
        *ok = 0;
        return 0;
    }
    return x + y;
}

static int64_t align256(int64_t x, int *ok) { return addc(x, 255, ok) & ~(int64_t)255; }

/* Everything about one layer call that its passes share. */
typedef struct layer {
    prnn_ctx *ctx;
    const prnn_cell_desc *d;
    int64_t B, T, D, H, G, GH, Din, S, S2, Hout, ndir, BT;
    prnn_dtype dt, at; /* storage and accumulation types */
    int64_t es, as;    /* their element sizes */
    const int64_t *lengths; /* (B) host, or NULL */
    int64_t nW, nU, nb, npd; /* parameters of one direction */
    int64_t off_c, off_s, off_xp; /* parts of one direction's state */
    int log, qrnn2, gilr, sru_x;  /* sru_x: SRU's highway is x itself */
    int rec;                /* recompute mode */
    int64_t k, nc, Tp;      /* chunk steps, chunks per row, padded steps */
    int64_t *chunk_len;     /* (B*nc) steps of each chunk, or NULL (all k) */
    int64_t *chunk_cnt;     /* (B) non-empty chunks of each row, or NULL (all nc) */
    /* act layout of one direction (byte offsets; -1 absent) */
    int64_t act_P, act_c, act_s, act_Sc, act_Ss, act_dir;
    /* The device copy of lengths the primitives see last (CUDA). */
    const int64_t *dev_src;
    int64_t dev_n;
    const int64_t *dev;
    /* Sequence-parallel mode (seq_internal.h): the hook, and (B, max(D, H))
     * acc scratch for the values crossing a segment boundary. */
    const prnn_seq *seq;
    void *halo, *halo_row;
} layer;

/* Fills the layer from a checked descriptor; ctx may be NULL (sizes only).
 * Returns 0 on overflow. */
static int layer_sizes(layer *L, prnn_ctx *ctx, const prnn_cell_desc *d, int64_t B, int64_t T)
{
    int ok = 1;
    memset(L, 0, sizeof *L);
    L->ctx = ctx;
    L->d = d;
    L->B = B;
    L->T = T;
    L->D = d->D;
    L->H = d->H;
    L->G = gates_of(d);
    L->GH = L->G * L->H;
    L->qrnn2 = is_qrnn2(d);
    L->Din = L->qrnn2 ? 2 * d->D : d->D;
    L->ndir = d->bidirectional ? 2 : 1;
    L->Hout = L->ndir * L->H;
    dir_sizes(d, &L->nW, &L->nU, &L->nb, &L->S);
    L->npd = L->nW + L->nU + L->nb;
    L->S2 = L->ndir * L->S;
    L->dt = d->dtype;
    L->at = d->dtype == PRNN_DTYPE_F64 ? PRNN_DTYPE_F64 : PRNN_DTYPE_F32;
    L->es = (int64_t)prnn_dtype_size(L->dt);
    L->as = (int64_t)prnn_dtype_size(L->at);
    L->log = d->log_space;
    L->gilr = d->type == PRNN_CELL_GILR_LSTM;
    L->sru_x = d->type == PRNN_CELL_SRU && d->D == d->H;
    L->off_c = L->gilr ? L->H : 0;
    L->off_s = L->gilr ? 0 : -1;
    L->off_xp = L->qrnn2 ? L->H : -1;
    L->BT = mulc(B, T, &ok);
    L->rec = d->recompute > 1;
    if (L->rec) {
        L->k = d->recompute < T ? d->recompute : T;
        L->nc = (T + L->k - 1) / L->k;
        L->Tp = mulc(L->nc, L->k, &ok);
    }

    /* act: per direction, 256-byte aligned parts */
    int64_t off = 0;
    const int64_t seq = mulc(L->BT, L->H, &ok);
    L->act_P = L->act_c = L->act_s = L->act_Sc = L->act_Ss = -1;
    if (!L->rec) {
        L->act_P = off;
        off = align256(addc(off, mulc(mulc(L->BT, L->GH, &ok), L->es, &ok), &ok), &ok);
        L->act_c = off;
        off = align256(addc(off, mulc(seq, L->es, &ok), &ok), &ok);
        if (L->gilr) {
            L->act_s = off;
            off = align256(addc(off, mulc(seq, L->es, &ok), &ok), &ok);
        }
    } else {
        const int64_t st = mulc(mulc(mulc(B, L->nc, &ok), L->H, &ok), L->as, &ok);
        L->act_Sc = off;
        off = align256(addc(off, st, &ok), &ok);
        if (L->gilr) {
            L->act_Ss = off;
            off = align256(addc(off, st, &ok), &ok);
        }
    }
    L->act_dir = off;
    mulc(off, L->ndir, &ok);

    /* the largest tensors the passes address */
    mulc(mulc(L->BT, addc(addc(L->Din, L->GH, &ok), L->Hout, &ok), &ok), 8, &ok);
    mulc(mulc(mulc(B, L->Tp, &ok), L->H, &ok), 8, &ok);
    mulc(mulc(B, L->S2, &ok), 8, &ok);
    return ok;
}

prnn_status prnn_cell_act_bytes(const prnn_cell_desc *desc, int64_t B, int64_t T, size_t *bytes)
{
    if (!bytes) return PRNN_ERR_NULL_POINTER;
    TRY(prnn_cell_check(desc));
    if (B <= 0 || T <= 0) return PRNN_ERR_INVALID_SIZE;
    layer L;
    if (!layer_sizes(&L, NULL, desc, B, T)) return PRNN_ERR_SIZE_OVERFLOW;
    const int64_t n = L.act_dir * L.ndir;
    if ((uint64_t)n > (uint64_t)SIZE_MAX) return PRNN_ERR_SIZE_OVERFLOW;
    *bytes = (size_t)n;
    return PRNN_OK;
}

/* The lengths the primitives read: host memory on the CPU, the context's
 * device copy on CUDA. That copy is one buffer, so it is uploaded again
 * whenever a different host array was the last one uploaded; callers build
 * a cell_ew right before using it. */
static prnn_status dev_lengths(layer *L, const int64_t *host, int64_t n, const int64_t **out)
{
    *out = host;
    if (!host || L->ctx->device == PRNN_DEVICE_CPU) return PRNN_OK;
#ifdef PRNN_CELL_CUDA
    if (L->dev_src != host || L->dev_n != n) {
        TRY(prnn_cuda_cell_lengths(L->ctx, host, n, &L->dev));
        L->dev_src = host;
        L->dev_n = n;
    }
    *out = L->dev;
    return PRNN_OK;
#else
    (void)n;
    return PRNN_ERR_NO_DEVICE;
#endif
}

/* The primitives' view of direction `dir` over the full (B, T) tensors. */
static prnn_status ew_full(layer *L, int dir, cell_stage stage, cell_ew *e)
{
    memset(e, 0, sizeof *e);
    e->type = L->d->type;
    e->pooling = L->d->pooling;
    e->log_space = L->log;
    e->stage = stage;
    e->dtype = L->dt;
    e->B = L->B;
    e->T = L->T;
    e->H = L->H;
    e->D = L->D;
    e->G = L->G;
    e->reverse = dir;
    return dev_lengths(L, L->lengths, L->B, &e->lengths);
}

static prnn_scan_desc scan_desc(const layer *L, int dir)
{
    prnn_scan_desc sd = prnn_scan_desc_make(L->B, L->T, L->H);
    sd.dtype = L->dt;
    sd.algo = L->d->algo;
    sd.reverse = dir;
    sd.lengths = L->lengths;
    return sd;
}

/* The layer's scans over the whole sequence: local, or across the segments
 * in sequence-parallel mode. */
static prnn_status scan_fwd(layer *L, const prnn_scan_desc *sd, void *h, void *hT,
                            const void *a, const void *b, const void *h0)
{
    if (L->seq) return L->seq->scan_forward(L->seq->self, sd, h, hT, a, b, h0);
    return prnn_scan_forward(L->ctx, sd, h, hT, a, b, h0);
}

static prnn_status scan_bwd(layer *L, const prnn_scan_desc *sd, void *da, void *db, void *dh0,
                            const void *a, const void *h, const void *h0, const void *dh,
                            const void *dhT)
{
    if (L->seq) return L->seq->scan_backward(L->seq->self, sd, da, db, dh0, a, h, h0, dh, dhT);
    return prnn_scan_backward(L->ctx, sd, da, db, dh0, a, h, h0, dh, dhT);
}

/*
 * Sequence-parallel mode: L->halo (B, n) acc <- the row of src (B, T, n)
 * dtype at the last step, in direction dir, of the segment before this one
 * in that direction (zeros for the first segment): the value a one-step
 * shift carries across the boundary. With dir flipped it is the next
 * segment's first step, which is how gradients of a shift travel back.
 */
static prnn_status halo_in(layer *L, int dir, int64_t n, const void *src)
{
    cell_ew e;
    TRY(ew_full(L, dir, CELL_STAGE_MAIN, &e));
    TRY(cell_last(L->ctx, &e, 0, n, L->halo_row, n, src, n, NULL, 0));
    return L->seq->pass(L->seq->self, dir, L->B * n, L->at, L->halo, L->halo_row);
}

static const void *state_at(const layer *L, const void *base, int dir, int64_t off);

/* What a one-step shift of src (B, T, n) brings in before the first step:
 * the part at `off` of h0, or in sequence-parallel mode the neighbouring
 * segment's row (halo_in). */
static prnn_status shift_init(layer *L, int dir, int64_t n, const void *src, const void *h0,
                              int64_t off, const void **init, int64_t *ld)
{
    if (!L->seq) {
        *init = state_at(L, h0, dir, off);
        *ld = L->S2;
        return PRNN_OK;
    }
    *init = L->halo;
    *ld = n;
    return halo_in(L, dir, n, src);
}

/* Host arrays of the chunk geometry for recompute mode (NULL where every
 * chunk is full, resp. every row has nc chunks). */
static prnn_status chunk_arrays(layer *L)
{
    if (!L->rec || (!L->lengths && L->T % L->k == 0)) return PRNN_OK;
    L->chunk_len = malloc((size_t)(L->B * L->nc) * sizeof(int64_t));
    if (!L->chunk_len) return PRNN_ERR_OUT_OF_MEMORY;
    if (L->lengths) {
        L->chunk_cnt = malloc((size_t)L->B * sizeof(int64_t));
        if (!L->chunk_cnt) return PRNN_ERR_OUT_OF_MEMORY;
    }
    for (int64_t b = 0; b < L->B; b++) {
        const int64_t len = L->lengths ? L->lengths[b] : L->T;
        for (int64_t j = 0; j < L->nc; j++) {
            const int64_t left = len - j * L->k;
            L->chunk_len[b * L->nc + j] = left < 0 ? 0 : left < L->k ? left : L->k;
        }
        if (L->chunk_cnt) L->chunk_cnt[b] = (len + L->k - 1) / L->k;
    }
    return PRNN_OK;
}

static void layer_release(layer *L)
{
    free(L->chunk_len);
    free(L->chunk_cnt);
    L->chunk_len = L->chunk_cnt = NULL;
}

/* ------------------------------------------------------------------------ */
/* Scratch plans                                                            */

/* Hands out 256-byte aligned pieces of the scratch; with base NULL it only
 * counts, so the same plan sizes the scratch and then cuts it up. */
typedef struct {
    char *base;
    int64_t off;
    int ok;
} carver;

static void *carve(carver *cv, int64_t n, int64_t esize)
{
    const int64_t bytes = mulc(n, esize, &cv->ok);
    void *p = cv->base && cv->ok ? cv->base + cv->off : NULL;
    cv->off = align256(addc(cv->off, bytes, &cv->ok), &cv->ok);
    return p;
}

typedef struct {
    void *P, *c, *s, *a, *b, *xs;    /* (B, T, *) dtype */
    void *h0c, *h0s, *hTc, *hTs, *l0, *lT; /* (B, H) acc */
    void *Y, *cpad;                  /* recompute: chunk ends (B, nc, H) acc, padded c */
    void *halo, *halo_row;           /* sequence-parallel: (B, max(D, H)) acc */
} fwd_bufs;

static void plan_fwd(const layer *L, int keep, carver *cv, fwd_bufs *f)
{
    const int64_t seq = L->BT * L->H, st = L->B * L->H;
    const int in_act = keep && !L->rec; /* P, c, s live in act */
    memset(f, 0, sizeof *f);
    if (!in_act) {
        f->P = carve(cv, L->BT * L->GH, L->es);
        f->c = carve(cv, seq, L->es);
        if (L->gilr) f->s = carve(cv, seq, L->es);
    }
    f->a = carve(cv, seq, L->es);
    f->b = carve(cv, seq, L->es);
    if (L->qrnn2) f->xs = carve(cv, L->BT * L->D, L->es);
    f->h0c = carve(cv, st, L->as);
    f->hTc = carve(cv, st, L->as);
    if (L->gilr) {
        f->h0s = carve(cv, st, L->as);
        f->hTs = carve(cv, st, L->as);
    }
    if (L->log) {
        f->l0 = carve(cv, st, L->as);
        f->lT = carve(cv, st, L->as);
    }
    if (keep && L->rec) {
        f->Y = carve(cv, L->B * L->nc * L->H, L->as);
        if (L->Tp != L->T) f->cpad = carve(cv, L->B * L->Tp * L->H, L->es);
    }
    if (L->seq) {
        f->halo = carve(cv, L->B * (L->D > L->H ? L->D : L->H), L->as);
        f->halo_row = carve(cv, L->B * (L->D > L->H ? L->D : L->H), L->as);
    }
}

typedef struct {
    void *P, *c, *s;                   /* recompute only */
    void *dP, *a, *b, *dc, *da, *db, *w; /* (B, T, *) dtype */
    void *xs, *dXs;                    /* QRNN window 2 */
    void *ss, *dss, *ds;               /* GILR */
    void *apad, *bpad, *cpad;          /* recompute with k not dividing T */
    void *h0c, *h0s, *dhTc, *dhTs, *dh0c, *dh0s, *l0, *lT, *dlT, *tmp; /* (B, H) acc */
    void *halo, *halo_row;             /* sequence-parallel: (B, max(D, H)) acc */
} bwd_bufs;

static void plan_bwd(const layer *L, carver *cv, bwd_bufs *g)
{
    const int64_t seq = L->BT * L->H, st = L->B * L->H;
    memset(g, 0, sizeof *g);
    if (L->rec) {
        g->P = carve(cv, L->BT * L->GH, L->es);
        g->c = carve(cv, seq, L->es);
        if (L->gilr) g->s = carve(cv, seq, L->es);
        if (L->Tp != L->T) {
            const int64_t pad = L->B * L->Tp * L->H;
            g->apad = carve(cv, pad, L->es);
            g->bpad = carve(cv, pad, L->es);
            g->cpad = carve(cv, pad, L->es);
        }
    }
    g->dP = carve(cv, L->BT * L->GH, L->es);
    g->a = carve(cv, seq, L->es);
    g->b = carve(cv, seq, L->es);
    g->dc = carve(cv, seq, L->es);
    g->da = carve(cv, seq, L->es);
    g->db = carve(cv, seq, L->es);
    if (L->log) g->w = carve(cv, seq, L->es);
    if (L->qrnn2) {
        g->xs = carve(cv, L->BT * L->D, L->es);
        g->dXs = carve(cv, L->BT * L->D, L->es);
    }
    if (L->gilr) {
        g->ss = carve(cv, seq, L->es);
        g->dss = carve(cv, seq, L->es);
        g->ds = carve(cv, seq, L->es);
    }
    g->h0c = carve(cv, st, L->as);
    g->dhTc = carve(cv, st, L->as);
    g->dh0c = carve(cv, st, L->as);
    if (L->gilr) {
        g->h0s = carve(cv, st, L->as);
        g->dhTs = carve(cv, st, L->as);
        g->dh0s = carve(cv, st, L->as);
        g->tmp = carve(cv, st, L->as);
    }
    if (L->log) {
        g->l0 = carve(cv, st, L->as);
        g->lT = carve(cv, st, L->as);
        g->dlT = carve(cv, st, L->as);
    }
    if (L->seq) {
        g->halo = carve(cv, L->B * (L->D > L->H ? L->D : L->H), L->as);
        g->halo_row = carve(cv, L->B * (L->D > L->H ? L->D : L->H), L->as);
    }
}

/* ------------------------------------------------------------------------ */
/* States                                                                   */

/* The layer's state tensors are (B, S2) acc with direction blocks of S
 * floats; the scans and primitives take one part as a contiguous (B, H)
 * tensor. A layer whose state is exactly that (S2 == H) is used in place. */
static int state_whole(const layer *L) { return L->S2 == L->H; }

static const void *state_at(const layer *L, const void *base, int dir, int64_t off)
{
    return base ? (const char *)base + (dir * L->S + off) * L->as : NULL;
}

/* *out = the part [off, off + H) of direction dir of base, contiguous. */
static prnn_status state_in(layer *L, const void *base, int dir, int64_t off, void *tmp,
                            const void **out)
{
    if (!base || state_whole(L)) {
        *out = base;
        return PRNN_OK;
    }
    *out = tmp;
    return cell_copy2d(L->ctx, tmp, L->H * L->as, state_at(L, base, dir, off), L->S2 * L->as,
                       L->H * L->as, L->B);
}

/* Where to compute a part that goes into base: in place when possible. */
static void *state_dst(const layer *L, void *base, void *tmp)
{
    if (!base) return NULL;
    return state_whole(L) ? base : tmp;
}

static prnn_status state_out(layer *L, void *base, int dir, int64_t off, const void *src)
{
    if (!base || src == base) return PRNN_OK;
    return cell_copy2d(L->ctx, (char *)base + (dir * L->S + off) * L->as, L->S2 * L->as, src,
                       L->H * L->as, L->H * L->as, L->B);
}

/* log c0 as a (B, H) tensor; -inf for a zero initial state. */
static prnn_status log_state(layer *L, void *l0, const void *c0)
{
    if (!c0) TRY(prnn_mem_zero(L->ctx, l0, (size_t)(L->B * L->H * L->as)));
    return cell_state_map(L->ctx, L->at, CELL_MAP_LOG, L->B * L->H, l0, c0 ? c0 : l0, NULL);
}

/* ------------------------------------------------------------------------ */
/* Recompute chunks                                                         */

/*
 * Saves the state entering each chunk of k steps of one direction:
 * Sv (B, nc, H) acc from c (B, T, H) dtype (log c in log space) and the
 * initial state init (B, H) acc (NULL = zeros). The last state of every chunk
 * (forward: step jk+k-1, reverse: step jk) is gathered, then shifted by one
 * chunk in the scan's direction with init entering the first, over rows of
 * ceil(len/k) chunks. The gather reads one uniform stride, which a padded copy
 * of c provides when k does not divide T.
 */
static prnn_status save_chunks(layer *L, int dir, const fwd_bufs *f, void *Sv, const void *c,
                               const void *init)
{
    prnn_ctx *ctx = L->ctx;
    const int64_t H = L->H, k = L->k;
    const char *src = c;
    if (L->Tp != L->T) {
        TRY(cell_copy2d(ctx, f->cpad, L->Tp * H * L->es, c, L->T * H * L->es, L->T * H * L->es,
                        L->B));
        src = f->cpad;
    }
    /* The forward's gather of the last chunk reads the padding; that value
     * is never used (no chunk follows the last). */
    src += (dir ? 0 : (k - 1) * H) * L->es;
    TRY(cell_convert(ctx, L->dt, 0, L->B * L->nc, H, f->Y, H, src, k * H));

    cell_ew e;
    memset(&e, 0, sizeof e);
    e.type = L->d->type;
    e.pooling = L->d->pooling;
    e.stage = CELL_STAGE_MAIN;
    e.dtype = L->at; /* the chunk states are acc tensors */
    e.B = L->B;
    e.T = L->nc;
    e.H = H;
    e.D = L->D;
    e.G = L->G;
    e.reverse = dir;
    TRY(dev_lengths(L, L->chunk_cnt, L->B, &e.lengths));
    return cell_shift(ctx, &e, H, Sv, H, f->Y, H, init, H);
}

/*
 * Recomputes c (B, T, H) dtype from a, b (B, T, H) dtype and the saved chunk
 * states Sv (B, nc, H) acc: one scan (or log scan) over B*nc rows of k steps,
 * on padded copies when k does not divide T.
 */
static prnn_status chunk_scan(layer *L, int dir, const bwd_bufs *g, void *c, const void *a,
                              const void *b, const void *Sv)
{
    prnn_ctx *ctx = L->ctx;
    const int64_t row = L->T * L->H * L->es, prow = L->Tp * L->H * L->es;
    const void *pa = a, *pb = b;
    void *pc = c;
    if (L->Tp != L->T) {
        TRY(cell_copy2d(ctx, g->apad, prow, a, row, row, L->B));
        TRY(cell_copy2d(ctx, g->bpad, prow, b, row, row, L->B));
        pa = g->apad;
        pb = g->bpad;
        pc = g->cpad;
    }
    if (L->log) {
        cell_ew e;
        memset(&e, 0, sizeof e);
        e.type = L->d->type;
        e.pooling = L->d->pooling;
        e.log_space = 1;
        e.dtype = L->dt;
        e.B = L->B * L->nc;
        e.T = L->k;
        e.H = L->H;
        e.D = L->D;
        e.G = L->G;
        e.reverse = dir;
        TRY(dev_lengths(L, L->chunk_len, L->B * L->nc, &e.lengths));
        TRY(cell_logscan_fwd(ctx, &e, pc, NULL, pa, pb, Sv));
    } else {
        prnn_scan_desc sd = prnn_scan_desc_make(L->B * L->nc, L->k, L->H);
        sd.dtype = L->dt;
        sd.algo = L->d->algo;
        sd.reverse = dir;
        sd.lengths = L->chunk_len;
        TRY(prnn_scan_forward(ctx, &sd, pc, NULL, pa, pb, Sv));
    }
    if (L->Tp != L->T) TRY(cell_copy2d(ctx, c, row, pc, prow, row, L->B));
    return PRNN_OK;
}

/* ------------------------------------------------------------------------ */
/* Forward                                                                  */

/* One direction's parameter blocks. */
typedef struct {
    const char *W, *U, *bias;
} dir_params;

static dir_params params_of(const layer *L, const void *params, int dir)
{
    dir_params p;
    const char *base = (const char *)params + dir * L->npd * L->es;
    p.W = base;
    p.U = L->gilr ? base + L->nW * L->es : NULL;
    p.bias = L->d->bias ? base + (L->nW + L->nU) * L->es : NULL;
    return p;
}

/* P = x W (+ xs W1 for QRNN window 2, xs = x one step back, x_prev first). */
static prnn_status gemm_P(layer *L, int dir, void *P, void *xs, const void *x, const char *W,
                          const void *h0)
{
    prnn_ctx *ctx = L->ctx;
    TRY(prnn_gemm(ctx, 0, 0, L->BT, L->GH, L->D, 1.0, x, L->D, W, L->GH, 0.0, P, L->GH, L->dt,
                  L->dt));
    if (!L->qrnn2) return PRNN_OK;
    cell_ew e;
    const void *init;
    int64_t ld;
    TRY(shift_init(L, dir, L->D, x, h0, L->off_xp, &init, &ld));
    TRY(ew_full(L, dir, CELL_STAGE_MAIN, &e));
    TRY(cell_shift(ctx, &e, L->D, xs, L->D, x, L->D, init, ld));
    return prnn_gemm(ctx, 0, 0, L->BT, L->GH, L->D, 1.0, xs, L->D, W + L->D * L->GH * L->es,
                     L->GH, 1.0, P, L->GH, L->dt, L->dt);
}

/* GILR: P[f, i, o, z] += s_prev U with s_prev = s one step back (s0 first). */
static prnn_status gemm_U(layer *L, int dir, void *P, void *ss, const void *s, const char *U,
                          const void *h0)
{
    cell_ew e;
    const void *init;
    int64_t ld;
    TRY(shift_init(L, dir, L->H, s, h0, L->off_s, &init, &ld));
    TRY(ew_full(L, dir, CELL_STAGE_MAIN, &e));
    TRY(cell_shift(L->ctx, &e, L->H, ss, L->H, s, L->H, init, ld));
    return prnn_gemm(L->ctx, 0, 0, L->BT, 4 * L->H, L->H, 1.0, ss, L->H, U, 4 * L->H, 1.0,
                     (char *)P + 2 * L->H * L->es, L->GH, L->dt, L->dt);
}

/* What the output map takes from P (cell_internal.h). */
static cell_out_use out_use(const layer *L)
{
    return cell_out_use_of(L->d->type, L->d->pooling, L->log, L->sru_x);
}

/*
 * One direction of the forward. y is the layer's output (B, T, Hout); hT,
 * h0 the layer's states (B, S2) or NULL; act_d this direction's block of act
 * or NULL.
 */
static prnn_status fwd_dir(layer *L, int dir, const fwd_bufs *f, void *y, void *hT, char *act_d,
                           const void *x, const void *params, const void *h0)
{
    prnn_ctx *ctx = L->ctx;
    const dir_params p = params_of(L, params, dir);
    const int in_act = act_d && !L->rec;
    void *P = in_act ? act_d + L->act_P : f->P;
    void *c = in_act ? act_d + L->act_c : f->c;
    void *s = in_act && L->gilr ? act_d + L->act_s : f->s;
    /* y = c in the same layout and c not kept: the scan writes y itself */
    const int c_is_y = !in_act && out_use(L).y_is_c && L->Hout == L->H;
    if (c_is_y) c = y;
    cell_ew e;

    TRY(gemm_P(L, dir, P, f->xs, x, p.W, h0));

    const void *h0s = NULL, *h0c = NULL;
    if (L->gilr) {
        void *hTs = state_dst(L, hT, f->hTs);
        TRY(state_in(L, h0, dir, L->off_s, f->h0s, &h0s));
        TRY(ew_full(L, dir, CELL_STAGE_SURROGATE, &e));
        TRY(cell_gates_fwd(ctx, &e, f->a, f->b, P, p.bias));
        const prnn_scan_desc sd = scan_desc(L, dir);
        TRY(scan_fwd(L, &sd, s, hTs, f->a, f->b, h0s));
        TRY(state_out(L, hT, dir, L->off_s, hTs));
        TRY(gemm_U(L, dir, P, f->a, s, p.U, h0));
    }

    TRY(state_in(L, h0, dir, L->off_c, f->h0c, &h0c));
    void *hTc = state_dst(L, hT, f->hTc);
    TRY(ew_full(L, dir, CELL_STAGE_MAIN, &e));
    TRY(cell_gates_fwd(ctx, &e, f->a, f->b, P, p.bias));
    if (L->log) {
        TRY(log_state(L, f->l0, h0c));
        TRY(ew_full(L, dir, CELL_STAGE_MAIN, &e));
        TRY(cell_logscan_fwd(ctx, &e, c, hT ? f->lT : NULL, f->a, f->b, f->l0));
        if (hT) TRY(cell_state_map(ctx, L->at, CELL_MAP_EXP, L->B * L->H, hTc, f->lT, NULL));
    } else {
        const prnn_scan_desc sd = scan_desc(L, dir);
        TRY(scan_fwd(L, &sd, c, hTc, f->a, f->b, h0c));
    }
    if (!c_is_y)
        TRY(cell_out_fwd(ctx, &e, (char *)y + dir * L->H * L->es, L->Hout, c, P, p.bias, x));
    TRY(state_out(L, hT, dir, L->off_c, hTc));
    if (L->qrnn2 && hT) {
        /* x_prev after the row: x at its last step (x_prev itself if empty) */
        TRY(cell_last(ctx, &e, 0, L->D, (char *)hT + (dir * L->S + L->off_xp) * L->as, L->S2,
                      x, L->D, state_at(L, h0, dir, L->off_xp), L->S2));
    }

    if (act_d && L->rec) {
        /* A segment's first chunk starts from the state entering it. */
        const void *c0 = L->log ? f->l0 : h0c, *s0 = h0s;
        if (L->seq) TRY(halo_in(L, dir, L->H, c));
        TRY(save_chunks(L, dir, f, act_d + L->act_Sc, c, L->seq ? L->halo : c0));
        if (L->gilr && L->seq) TRY(halo_in(L, dir, L->H, s));
        if (L->gilr) TRY(save_chunks(L, dir, f, act_d + L->act_Ss, s, L->seq ? L->halo : s0));
    }
    return PRNN_OK;
}

/* ------------------------------------------------------------------------ */
/* Backward                                                                 */

typedef struct {
    void *dx;
    int dx_set; /* dx already holds contributions (GEMMs then accumulate) */
} dx_acc;

static prnn_status bwd_dir(layer *L, int dir, const bwd_bufs *g, dx_acc *dxa, void *dparams,
                           void *dh0, const void *dy, const void *dhT, const void *x,
                           const void *params, const void *h0, const char *act_d)
{
    prnn_ctx *ctx = L->ctx;
    const dir_params p = params_of(L, params, dir);
    char *dW = (char *)dparams + dir * L->npd * L->as;
    char *dU = dW + L->nW * L->as, *dbias = dW + (L->nW + L->nU) * L->as;
    const int64_t H = L->H, GH = L->GH, BT = L->BT;
    const prnn_scan_desc sd = scan_desc(L, dir);
    cell_ew e, er;
    void *dbg = p.bias ? dbias : NULL; /* gates_bwd adds its groups' bias gradients */

    const void *h0c = NULL, *h0s = NULL;
    TRY(state_in(L, h0, dir, L->off_c, g->h0c, &h0c));
    if (L->gilr) TRY(state_in(L, h0, dir, L->off_s, g->h0s, &h0s));

    /* P, c (and s), as the forward had them */
    const void *P, *c, *s = NULL;
    int a_ready = 0;
    if (L->rec) {
        TRY(gemm_P(L, dir, g->P, g->xs, x, p.W, h0));
        if (L->gilr) {
            TRY(ew_full(L, dir, CELL_STAGE_SURROGATE, &e));
            TRY(cell_gates_fwd(ctx, &e, g->a, g->b, g->P, p.bias));
            TRY(chunk_scan(L, dir, g, g->s, g->a, g->b, act_d + L->act_Ss));
            TRY(gemm_U(L, dir, g->P, g->ss, g->s, p.U, h0));
        }
        TRY(ew_full(L, dir, CELL_STAGE_MAIN, &e));
        TRY(cell_gates_fwd(ctx, &e, g->a, g->b, g->P, p.bias));
        TRY(chunk_scan(L, dir, g, g->c, g->a, g->b, act_d + L->act_Sc));
        P = g->P;
        c = g->c;
        s = g->s;
        a_ready = 1;
    } else {
        P = act_d + L->act_P;
        c = act_d + L->act_c;
        const void *init;
        int64_t ld;
        if (L->gilr) {
            s = act_d + L->act_s;
            TRY(shift_init(L, dir, H, s, h0, L->off_s, &init, &ld));
            TRY(ew_full(L, dir, CELL_STAGE_MAIN, &e));
            TRY(cell_shift(ctx, &e, H, g->ss, H, s, H, init, ld));
        }
        if (L->qrnn2) {
            TRY(shift_init(L, dir, L->D, x, h0, L->off_xp, &init, &ld));
            TRY(ew_full(L, dir, CELL_STAGE_MAIN, &e));
            TRY(cell_shift(ctx, &e, L->D, g->xs, L->D, x, L->D, init, ld));
        }
    }

    /* through y, then the main scan; where y = c in the same layout, dL/dc
     * is dy itself (the scan ignores it past a row's length, where out_bwd
     * would write zeros) */
    TRY(ew_full(L, dir, CELL_STAGE_MAIN, &e));
    const void *dc = g->dc;
    if (out_use(L).y_is_c && L->Hout == H)
        dc = dy;
    else
        TRY(cell_out_bwd(ctx, &e, g->dc, g->dP, L->sru_x ? dxa->dx : NULL,
                         (const char *)dy + dir * H * L->es, L->Hout, c, P, p.bias, x));
    if (!a_ready) TRY(cell_gates_fwd(ctx, &e, g->a, NULL, P, p.bias)); /* the scan needs a */
    const void *dhTc = NULL;
    TRY(state_in(L, dhT, dir, L->off_c, g->dhTc, &dhTc));
    void *dh0c = state_dst(L, dh0, g->dh0c);
    if (L->log) {
        /* g = the linear scan backward with a := w; the log scan's own
         * gradients (and dL/dc0) follow from g. */
        const void *dlT = NULL;
        TRY(log_state(L, g->l0, h0c));
        TRY(ew_full(L, dir, CELL_STAGE_MAIN, &e));
        TRY(cell_logscan_w(ctx, &e, g->w, g->a, c, g->l0));
        if (dhTc) {
            TRY(cell_last(ctx, &e, 0, H, g->lT, H, c, H, g->l0, H));
            TRY(cell_state_map(ctx, L->at, CELL_MAP_MUL_EXP, L->B * H, g->dlT, dhTc, g->lT));
            dlT = g->dlT;
        }
        TRY(prnn_scan_backward(ctx, &sd, g->da, g->db, NULL, g->w, c, NULL, g->dc, dlT));
        TRY(ew_full(L, dir, CELL_STAGE_MAIN, &e));
        TRY(cell_logscan_bwd(ctx, &e, g->da, g->b, dh0c, g->db, g->w, g->a, c, dhTc));
        TRY(cell_gates_bwd(ctx, &e, g->dP, g->da, g->b, P, p.bias, dbg));
    } else {
        TRY(scan_bwd(L, &sd, g->da, g->db, dh0c, g->a, c, h0c, dc, dhTc));
        TRY(ew_full(L, dir, CELL_STAGE_MAIN, &e));
        TRY(cell_gates_bwd(ctx, &e, g->dP, g->da, g->db, P, p.bias, dbg));
    }
    TRY(state_out(L, dh0, dir, L->off_c, dh0c));

    if (L->gilr) {
        /* s reaches the loss only through s_prev U (and hT) */
        char *dPu = (char *)g->dP + 2 * H * L->es;
        TRY(prnn_gemm(ctx, 1, 0, H, 4 * H, BT, 1.0, g->ss, H, dPu, GH, 1.0, dU, 4 * H, L->dt,
                      L->at));
        TRY(prnn_gemm(ctx, 0, 1, BT, H, 4 * H, 1.0, dPu, GH, p.U, 4 * H, 0.0, g->dss, H, L->dt,
                      L->dt));
        /* ds_t = dss_{t+1}; the segment's last step takes the next segment's first */
        if (L->seq) TRY(halo_in(L, !dir, H, g->dss));
        TRY(ew_full(L, !dir, CELL_STAGE_MAIN, &er)); /* er: "previous" is the next step */
        TRY(cell_shift(ctx, &er, H, g->ds, H, g->dss, H, L->seq ? L->halo : NULL, H));
        const void *dhTs = NULL;
        TRY(state_in(L, dhT, dir, L->off_s, g->dhTs, &dhTs));
        TRY(ew_full(L, dir, CELL_STAGE_SURROGATE, &e));
        TRY(cell_gates_fwd(ctx, &e, g->a, NULL, P, p.bias));
        TRY(scan_bwd(L, &sd, g->da, g->db, dh0 ? g->dh0s : NULL, g->a, s, h0s, g->ds, dhTs));
        TRY(ew_full(L, dir, CELL_STAGE_SURROGATE, &e));
        TRY(cell_gates_bwd(ctx, &e, g->dP, g->da, g->db, P, p.bias, dbg));
        if (dh0) {
            /* s0 also enters directly as the first step's s_prev */
            TRY(ew_full(L, !dir, CELL_STAGE_MAIN, &er));
            TRY(cell_last(ctx, &er, 0, H, g->tmp, H, g->dss, H, NULL, 0));
            TRY(cell_state_map(ctx, L->at, CELL_MAP_ADD, L->B * H, g->dh0s, g->dh0s, g->tmp));
            TRY(state_out(L, dh0, dir, L->off_s, g->dh0s));
        }
    }

    /* parameters */
    TRY(prnn_gemm(ctx, 1, 0, L->D, GH, BT, 1.0, x, L->D, g->dP, GH, 1.0, dW, GH, L->dt, L->at));
    if (L->qrnn2)
        TRY(prnn_gemm(ctx, 1, 0, L->D, GH, BT, 1.0, g->xs, L->D, g->dP, GH, 1.0,
                      dW + L->D * GH * L->as, GH, L->dt, L->at));
    /* the bias gradients of the groups out_bwd wrote (gates_bwd added the rest) */
    const cell_out_use ou = out_use(L);
    if (p.bias && ou.count > 0)
        TRY(cell_colsum_add(ctx, L->dt, BT, ou.count * H, dbias + ou.first * H * L->as,
                            (const char *)g->dP + ou.first * H * L->es, GH));

    /* inputs */
    TRY(prnn_gemm(ctx, 0, 1, BT, L->D, GH, 1.0, g->dP, GH, p.W, GH, dxa->dx_set ? 1.0 : 0.0,
                  dxa->dx, L->D, L->dt, L->dt));
    dxa->dx_set = 1;
    if (L->qrnn2) {
        const void *xpT = state_at(L, dhT, dir, L->off_xp);
        TRY(prnn_gemm(ctx, 0, 1, BT, L->D, GH, 1.0, g->dP, GH, p.W + L->D * GH * L->es, GH, 0.0,
                      g->dXs, L->D, L->dt, L->dt));
        TRY(ew_full(L, dir, CELL_STAGE_MAIN, &e));
        TRY(cell_unshift_add(ctx, &e, L->D, dxa->dx, L->D, g->dXs, L->D, NULL, 0));
        if (xpT) TRY(cell_last(ctx, &e, 1, L->D, dxa->dx, L->D, xpT, L->S2, NULL, 0));
        if (L->seq) {
            /* the next segment's first x_prev is this one's last x */
            TRY(halo_in(L, !dir, L->D, g->dXs));
            TRY(ew_full(L, dir, CELL_STAGE_MAIN, &e));
            TRY(cell_last(ctx, &e, 1, L->D, dxa->dx, L->D, L->halo, L->D, NULL, 0));
        }
        if (dh0) {
            /* x_prev enters as the first step's xs (or passes through an
             * empty row to hT) */
            TRY(ew_full(L, !dir, CELL_STAGE_MAIN, &er));
            TRY(cell_last(ctx, &er, 0, L->D, (char *)dh0 + (dir * L->S + L->off_xp) * L->as,
                          L->S2, g->dXs, L->D, xpT, L->S2));
        }
    }
    return PRNN_OK;
}

/* ------------------------------------------------------------------------ */
/* Validation                                                               */

/* Byte sizes of a call's tensors. */
typedef struct {
    int64_t x, y, state, params, dparams, act;
} tensor_bytes;

/* Checks a call and fills the layer and the tensors' byte sizes. */
static prnn_status layer_init(layer *L, prnn_ctx *ctx, const prnn_cell_desc *d, int64_t B,
                              int64_t T, const int64_t *lengths, tensor_bytes *tb)
{
    if (!ctx || !d) return PRNN_ERR_NULL_POINTER;
    TRY(prnn_cell_check(d));
    if (B <= 0 || T <= 0) return PRNN_ERR_INVALID_SIZE;
    if (ctx->device == PRNN_DEVICE_CPU) {
        if (d->dtype != PRNN_DTYPE_F32 && d->dtype != PRNN_DTYPE_F64)
            return PRNN_ERR_UNSUPPORTED;
    } else if (d->dtype != PRNN_DTYPE_F32 && d->dtype != PRNN_DTYPE_BF16) {
        return PRNN_ERR_UNSUPPORTED;
    }
    if (!layer_sizes(L, ctx, d, B, T)) return PRNN_ERR_SIZE_OVERFLOW;
    int ok = 1;
    tb->x = mulc(mulc(L->BT, L->D, &ok), L->es, &ok);
    tb->y = mulc(mulc(L->BT, L->Hout, &ok), L->es, &ok);
    tb->state = mulc(mulc(B, L->S2, &ok), L->as, &ok);
    tb->params = mulc(mulc(L->npd, L->ndir, &ok), L->es, &ok);
    tb->dparams = mulc(mulc(L->npd, L->ndir, &ok), L->as, &ok);
    tb->act = mulc(L->act_dir, L->ndir, &ok);
    if (!ok) return PRNN_ERR_SIZE_OVERFLOW;
    if (lengths) {
        for (int64_t b = 0; b < B; b++)
            if (lengths[b] < 0 || lengths[b] > T) return PRNN_ERR_INVALID_LENGTH;
    }
    L->lengths = lengths;
    return PRNN_OK;
}

/* Takes the scratch for a plan (plus `extra` bytes at its end). */
static prnn_status take_scratch(layer *L, carver *cv, int64_t extra, char **extra_at)
{
    const int64_t need = addc(cv->off, extra, &cv->ok);
    if (!cv->ok || (uint64_t)need > (uint64_t)SIZE_MAX / 2) return PRNN_ERR_SIZE_OVERFLOW;
    char *base = prnn_scratch(L->ctx, (size_t)need);
    if (!base) return PRNN_ERR_OUT_OF_MEMORY;
    if (extra_at) *extra_at = base + cv->off;
    cv->base = base;
    cv->off = 0;
    return PRNN_OK;
}

/* ------------------------------------------------------------------------ */
/* Public passes                                                            */

static prnn_status forward_impl(layer *L, void *y, void *hT, void *act, const void *x,
                                const void *params, const void *h0, const fwd_bufs *f)
{
    TRY(chunk_arrays(L));
    L->halo = f->halo;
    L->halo_row = f->halo_row;
    for (int dir = 0; dir < L->ndir; dir++)
        TRY(fwd_dir(L, dir, f, y, hT, act ? (char *)act + dir * L->act_dir : NULL, x, params,
                    h0));
    return PRNN_OK;
}

/* Sequence-parallel mode takes no lengths or states, and scans in linear
 * space only. */
static prnn_status seq_check(const prnn_cell_desc *desc, const prnn_seq *seq)
{
    if (!seq) return PRNN_OK;
    if (!seq->scan_forward || !seq->scan_backward || !seq->pass) return PRNN_ERR_NULL_POINTER;
    return desc->log_space ? PRNN_ERR_UNSUPPORTED : PRNN_OK;
}

static prnn_status cell_forward(prnn_ctx *ctx, const prnn_cell_desc *desc, const prnn_seq *seq,
                                int64_t B, int64_t T, const int64_t *lengths, void *y, void *hT,
                                void *act, const void *x, const void *params, const void *h0)
{
    layer L;
    tensor_bytes tb;
    TRY(layer_init(&L, ctx, desc, B, T, lengths, &tb));
    TRY(seq_check(desc, seq));
    L.seq = seq;
    if (!y || !x || !params) return PRNN_ERR_NULL_POINTER;
    const prnn_span out[] = {{y, tb.y}, {hT, tb.state}, {act, tb.act}};
    const prnn_span in[] = {{x, tb.x}, {params, tb.params}, {h0, tb.state}};
    if (prnn_any_overlap(out, 3, in, 3)) return PRNN_ERR_ALIASING;

    carver cv = {NULL, 0, 1};
    fwd_bufs f;
    plan_fwd(&L, act != NULL, &cv, &f);
    TRY(take_scratch(&L, &cv, 0, NULL));
    plan_fwd(&L, act != NULL, &cv, &f);
    prnn_status st = forward_impl(&L, y, hT, act, x, params, h0, &f);
    layer_release(&L);
    return st;
}

prnn_status prnn_cell_forward(prnn_ctx *ctx, const prnn_cell_desc *desc, int64_t B, int64_t T,
                              const int64_t *lengths, void *y, void *hT, void *act,
                              const void *x, const void *params, const void *h0)
{
    return cell_forward(ctx, desc, NULL, B, T, lengths, y, hT, act, x, params, h0);
}

prnn_status prnn_cell_forward_seq(prnn_ctx *ctx, const prnn_cell_desc *desc, const prnn_seq *seq,
                                  int64_t B, int64_t T, void *y, void *act, const void *x,
                                  const void *params)
{
    return cell_forward(ctx, desc, seq, B, T, NULL, y, NULL, act, x, params, NULL);
}

static prnn_status backward_impl(layer *L, void *dx, void *dparams, void *dh0, const void *dy,
                                 const void *dhT, const void *x, const void *params,
                                 const void *h0, const void *act, const bwd_bufs *g)
{
    dx_acc dxa = {dx, 0};
    TRY(chunk_arrays(L));
    L->halo = g->halo;
    L->halo_row = g->halo_row;
    if (L->sru_x) {
        /* the highway's gradient accumulates into dx before any GEMM */
        TRY(prnn_mem_zero(L->ctx, dx, (size_t)(L->BT * L->D * L->es)));
        dxa.dx_set = 1;
    }
    for (int dir = 0; dir < L->ndir; dir++)
        TRY(bwd_dir(L, dir, g, &dxa, dparams, dh0, dy, dhT, x, params, h0,
                    (const char *)act + dir * L->act_dir));
    return PRNN_OK;
}

static prnn_status cell_backward(prnn_ctx *ctx, const prnn_cell_desc *desc, const prnn_seq *seq,
                                 int64_t B, int64_t T, const int64_t *lengths, void *dx,
                                 void *dparams, void *dh0, const void *dy, const void *dhT,
                                 const void *x, const void *params, const void *h0,
                                 const void *act)
{
    layer L;
    tensor_bytes tb;
    TRY(layer_init(&L, ctx, desc, B, T, lengths, &tb));
    TRY(seq_check(desc, seq));
    L.seq = seq;
    if (!dx || !dparams || !dy || !x || !params || !act) return PRNN_ERR_NULL_POINTER;
    const prnn_span out[] = {{dx, tb.x}, {dparams, tb.dparams}, {dh0, tb.state}};
    const prnn_span in[] = {{dy, tb.y},        {dhT, tb.state}, {x, tb.x},
                       {params, tb.params}, {h0, tb.state},  {act, tb.act}};
    if (prnn_any_overlap(out, 3, in, 6)) return PRNN_ERR_ALIASING;

    carver cv = {NULL, 0, 1};
    bwd_bufs g;
    plan_bwd(&L, &cv, &g);
    TRY(take_scratch(&L, &cv, 0, NULL));
    plan_bwd(&L, &cv, &g);
    prnn_status st = backward_impl(&L, dx, dparams, dh0, dy, dhT, x, params, h0, act, &g);
    layer_release(&L);
    return st;
}

prnn_status prnn_cell_backward(prnn_ctx *ctx, const prnn_cell_desc *desc, int64_t B, int64_t T,
                               const int64_t *lengths, void *dx, void *dparams, void *dh0,
                               const void *dy, const void *dhT, const void *x,
                               const void *params, const void *h0, const void *act)
{
    return cell_backward(ctx, desc, NULL, B, T, lengths, dx, dparams, dh0, dy, dhT, x, params,
                         h0, act);
}

prnn_status prnn_cell_backward_seq(prnn_ctx *ctx, const prnn_cell_desc *desc,
                                   const prnn_seq *seq, int64_t B, int64_t T, void *dx,
                                   void *dparams, const void *dy, const void *x,
                                   const void *params, const void *act)
{
    return cell_backward(ctx, desc, seq, B, T, NULL, dx, dparams, NULL, dy, NULL, x, params,
                         NULL, act);
}

prnn_status prnn_cell_step(prnn_ctx *ctx, const prnn_cell_desc *desc, int64_t B, void *y,
                           void *state, const void *x, const void *params)
{
    layer L;
    tensor_bytes tb;
    TRY(layer_init(&L, ctx, desc, B, 1, NULL, &tb));
    if (!y || !state || !x || !params) return PRNN_ERR_NULL_POINTER;
    if (desc->bidirectional) return PRNN_ERR_INVALID_ARGUMENT;
    const prnn_span out[] = {{y, tb.y}, {state, tb.state}};
    const prnn_span in[] = {{x, tb.x}, {params, tb.params}};
    if (prnn_any_overlap(out, 2, in, 2)) return PRNN_ERR_ALIASING;

    /* The state is read and written: the forward reads a copy of it. */
    carver cv = {NULL, 0, 1};
    fwd_bufs f;
    char *s0;
    plan_fwd(&L, 0, &cv, &f);
    TRY(take_scratch(&L, &cv, tb.state, &s0));
    plan_fwd(&L, 0, &cv, &f);
    TRY(cell_copy2d(ctx, s0, tb.state, state, tb.state, tb.state, 1));
    return forward_impl(&L, y, state, NULL, x, params, s0, &f);
}

/* ------------------------------------------------------------------------ */
/* Initial parameters                                                       */

/*
 * The generator is splitmix64 seeded with `seed`; W (then U) entries take one
 * draw each in memory order, direction after direction, as
 * (2u - 1) / sqrt(fan_in) with u = (draw >> 11) * 2^-53 and fan_in the
 * matrix's rows (Din for W, H for U). Biases take no draws.
 */
static uint64_t splitmix64(uint64_t *state)
{
    uint64_t z = (*state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static void fill_uniform(void *dst, int64_t at, int64_t n, double bound, int f64, uint64_t *rng)
{
    for (int64_t i = 0; i < n; i++) {
        const double u = (double)(splitmix64(rng) >> 11) * (1.0 / 9007199254740992.0);
        const double v = (2.0 * u - 1.0) * bound;
        if (f64)
            ((double *)dst)[at + i] = v;
        else
            ((float *)dst)[at + i] = (float)v;
    }
}

/* Bias groups of the forget-type gates. */
static int forget_group(const prnn_cell_desc *d, int64_t k)
{
    switch (d->type) {
    case PRNN_CELL_MINLSTM: return k == 0;
    case PRNN_CELL_QRNN: return k == 1;
    case PRNN_CELL_SRU: return k == 1;
    case PRNN_CELL_GILR_LSTM: return k == 0 || k == 2;
    default: return 0;
    }
}

prnn_status prnn_cell_init_params(const prnn_cell_desc *desc, void *params, uint64_t seed)
{
    if (!params) return PRNN_ERR_NULL_POINTER;
    TRY(prnn_cell_check(desc));
    if (desc->dtype != PRNN_DTYPE_F32 && desc->dtype != PRNN_DTYPE_F64)
        return PRNN_ERR_UNSUPPORTED;
    layer L;
    if (!layer_sizes(&L, NULL, desc, 1, 1)) return PRNN_ERR_SIZE_OVERFLOW;
    const int f64 = desc->dtype == PRNN_DTYPE_F64;
    uint64_t rng = seed;
    for (int64_t dir = 0; dir < L.ndir; dir++) {
        const int64_t base = dir * L.npd;
        fill_uniform(params, base, L.nW, 1.0 / sqrt((double)L.Din), f64, &rng);
        if (L.gilr) fill_uniform(params, base + L.nW, L.nU, 1.0 / sqrt((double)L.H), f64, &rng);
        for (int64_t i = 0; i < L.nb; i++) {
            const double v = forget_group(desc, i / L.H) ? 1.0 : 0.0;
            const int64_t at = base + L.nW + L.nU + i;
            if (f64)
                ((double *)params)[at] = v;
            else
                ((float *)params)[at] = (float)v;
        }
    }
    return PRNN_OK;
}
