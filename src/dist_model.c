/*
 * dist_model.c - the sequence-parallel model of prnn_dist.h: the hook of
 * seq_internal.h filled in over a distributed context. Built with
 * dist.c (only when CMake finds MPI); it uses the distributed context's
 * public functions only, so one text serves CPU (MPI) and CUDA (NCCL)
 * contexts.
 *
 *   begin          the ranks' segment lengths, summed on the host
 *   scans          prnn_dist_scan_forward / backward
 *   pass           a boundary row carried to the neighbouring rank by a
 *                  two-step scan (below)
 *   loss           local mean x scored targets, summed over the ranks
 *
 * Size letters: B batch rows, T this rank's steps, N ranks, n elements,
 * P parameters.
 */
#include <stdlib.h>
#include <string.h>

#include "prnn_blocks.h"
#include "prnn_dist.h"
#include "prnn_model.h"
#include "seq_internal.h"

typedef struct seq_model {
    prnn_seq ops;
    prnn_dist *dist;
    prnn_ctx *ctx;
    int rank, size;
    double *lens;     /* (2N) host: the ranks' T, then their B */

    /* pass: ones (cap) in the acc type `ones_dt`, uploaded from ones_host
     * (kept while the upload may run); a, b, h (3 cap) acc scratch */
    void *ones, *ones_host, *a, *b, *h;
    int64_t cap;
    prnn_dtype ones_dt;

    int32_t *targets; /* (tcap) host copy of the last targets */
    int64_t tcap;
    double loss_d;    /* the global loss, uploaded from here */
    float loss_f;
} seq_model;

#define TRY(call)                                                                                  \
    do {                                                                                           \
        prnn_status s_ = (call);                                                                   \
        if (s_ != PRNN_OK) return s_;                                                              \
    } while (0)

/* ------------------------------------------------------------------------ */
/* The hook                                                                 */

static prnn_status seq_begin(void *self, int64_t B, int64_t T, int64_t *offset, int64_t *total)
{
    seq_model *s = self;
    const int N = s->size;
    memset(s->lens, 0, (size_t)(2 * N) * sizeof(double));
    s->lens[s->rank] = (double)T;
    s->lens[N + s->rank] = (double)B;
    TRY(prnn_dist_allreduce_sum_host(s->dist, s->lens, 2 * N));
    int64_t off = 0, sum = 0;
    for (int r = 0; r < N; r++) {
        /* every rank sees the same numbers, so all return the same verdict */
        if (s->lens[N + r] != s->lens[N] || s->lens[r] < 1) return PRNN_ERR_INVALID_ARGUMENT;
        if (r < s->rank) off += (int64_t)s->lens[r];
        sum += (int64_t)s->lens[r];
    }
    *offset = off;
    *total = sum;
    return PRNN_OK;
}

static prnn_status seq_scan_forward(void *self, const prnn_scan_desc *desc, void *h, void *hT,
                                    const void *a, const void *b, const void *h0)
{
    return prnn_dist_scan_forward(((seq_model *)self)->dist, desc, h, hT, a, b, h0);
}

static prnn_status seq_scan_backward(void *self, const prnn_scan_desc *desc, void *da, void *db,
                                     void *dh0, const void *a, const void *h, const void *h0,
                                     const void *dh, const void *dhT)
{
    return prnn_dist_scan_backward(((seq_model *)self)->dist, desc, da, db, dh0, a, h, h0, dh,
                                   dhT);
}

/* Scratch for rows of n elements of type dt. */
static prnn_status pass_scratch(seq_model *s, int64_t n, prnn_dtype dt)
{
    if (n <= s->cap && dt == s->ones_dt) return PRNN_OK;
    const int64_t cap = n > s->cap ? n : s->cap;
    prnn_mem_free(s->ctx, s->ones); /* waits for the device: ones_host is free again */
    prnn_mem_free(s->ctx, s->a);
    prnn_mem_free(s->ctx, s->b);
    prnn_mem_free(s->ctx, s->h);
    free(s->ones_host);
    s->ones = s->a = s->b = s->h = s->ones_host = NULL;
    s->cap = 0;
    const size_t es = prnn_dtype_size(dt);
    s->ones_host = malloc((size_t)cap * es);
    if (!s->ones_host) return PRNN_ERR_OUT_OF_MEMORY;
    for (int64_t i = 0; i < cap; i++) {
        if (dt == PRNN_DTYPE_F64)
            ((double *)s->ones_host)[i] = 1.0;
        else
            ((float *)s->ones_host)[i] = 1.0f;
    }
    TRY(prnn_mem_alloc(s->ctx, &s->ones, (size_t)cap * es));
    TRY(prnn_mem_alloc(s->ctx, &s->a, (size_t)(3 * cap) * es));
    TRY(prnn_mem_alloc(s->ctx, &s->b, (size_t)(3 * cap) * es));
    TRY(prnn_mem_alloc(s->ctx, &s->h, (size_t)(3 * cap) * es));
    TRY(prnn_mem_upload(s->ctx, s->ones, s->ones_host, (size_t)cap * es));
    s->cap = cap;
    s->ones_dt = dt;
    return PRNN_OK;
}

/*
 * The row travels by the scan itself, so that it takes the distributed
 * context's own path on either device: a scan of two steps per rank over
 * (1, 2, n), with a = [1, 0] and b = [0, src] in the forward direction
 * (a = [0, 1], b = [src, 0] reverse). Each segment then sends on exactly
 * its src (0 * carry + src) and its first step holds exactly what came in
 * (1 * carry + 0): the previous segment's src, or zeros on the first.
 * Laid out as a = [1 | 0 | 1], b = [0 | src | 0] (n each), the forward
 * direction reads both from element 0 and the reverse from element n.
 */
static prnn_status seq_pass(void *self, int reverse, int64_t n, prnn_dtype acc, void *dst,
                            const void *src)
{
    seq_model *s = self;
    if (acc != PRNN_DTYPE_F32 && acc != PRNN_DTYPE_F64) return PRNN_ERR_UNSUPPORTED;
    TRY(pass_scratch(s, n, acc));
    prnn_ctx *ctx = s->ctx;
    const size_t es = prnn_dtype_size(acc), row = (size_t)n * es;
    char *a = s->a, *b = s->b, *h = s->h;
    TRY(prnn_mem_copy(ctx, a, s->ones, row));
    TRY(prnn_mem_zero(ctx, a + row, row));
    TRY(prnn_mem_copy(ctx, a + 2 * row, s->ones, row));
    TRY(prnn_mem_zero(ctx, b, 3 * row));
    TRY(prnn_mem_copy(ctx, b + row, src, row));
    prnn_scan_desc d = prnn_scan_desc_make(1, 2, n);
    d.dtype = acc;
    d.reverse = reverse;
    const size_t at = reverse ? row : 0;
    TRY(prnn_dist_scan_forward(s->dist, &d, h, NULL, a + at, b + at, NULL));
    /* the segment's first step in scan order: element 0, or 1 reversed */
    return prnn_mem_copy(ctx, dst, h + (reverse ? row : 0), row);
}

static prnn_status seq_loss(void *self, void *loss, prnn_dtype acc, const int32_t *targets,
                            int64_t N, int64_t V, double *weight)
{
    seq_model *s = self;
    if (N > s->tcap) {
        int32_t *p = realloc(s->targets, (size_t)N * sizeof(int32_t));
        if (!p) return PRNN_ERR_OUT_OF_MEMORY;
        s->targets = p;
        s->tcap = N;
    }
    TRY(prnn_mem_download(s->ctx, s->targets, targets, (size_t)N * sizeof(int32_t)));
    int64_t mine = 0;
    for (int64_t i = 0; i < N; i++)
        mine += s->targets[i] >= 0 && s->targets[i] < V;
    double mean = 0;
    if (loss && acc == PRNN_DTYPE_F64) {
        TRY(prnn_mem_download(s->ctx, &s->loss_d, loss, sizeof(double)));
        mean = s->loss_d;
    } else if (loss) {
        TRY(prnn_mem_download(s->ctx, &s->loss_f, loss, sizeof(float)));
        mean = s->loss_f;
    }
    double v[2] = {mean * (double)mine, (double)mine};
    TRY(prnn_dist_allreduce_sum_host(s->dist, v, 2));
    *weight = v[1] > 0 ? (double)mine / v[1] : 0.0;
    if (!loss) return PRNN_OK;
    s->loss_d = v[1] > 0 ? v[0] / v[1] : 0.0;
    s->loss_f = (float)s->loss_d;
    if (acc == PRNN_DTYPE_F64) TRY(prnn_mem_upload(s->ctx, loss, &s->loss_d, sizeof(double)));
    else TRY(prnn_mem_upload(s->ctx, loss, &s->loss_f, sizeof(float)));
    return prnn_ctx_synchronize(s->ctx); /* the source is reused by the next call */
}

static void seq_release(void *self)
{
    seq_model *s = self;
    if (!s) return;
    prnn_mem_free(s->ctx, s->ones);
    prnn_mem_free(s->ctx, s->a);
    prnn_mem_free(s->ctx, s->b);
    prnn_mem_free(s->ctx, s->h);
    free(s->ones_host);
    free(s->targets);
    free(s->lens);
    free(s);
}

/* ------------------------------------------------------------------------ */
/* Public entry points                                                      */

prnn_status prnn_model_set_seq_dist(prnn_model *model, prnn_dist *dist)
{
    if (!model) return PRNN_ERR_NULL_POINTER;
    if (!dist) return prnn_model_set_seq_(model, NULL);
    const prnn_model_config *c = prnn_model_config_get(model);
    if (c->cell.log_space) return PRNN_ERR_UNSUPPORTED;
    seq_model *s = calloc(1, sizeof *s);
    if (!s) return PRNN_ERR_OUT_OF_MEMORY;
    s->dist = dist;
    s->ctx = prnn_dist_ctx(dist);
    s->rank = prnn_dist_rank(dist);
    s->size = prnn_dist_size(dist);
    s->lens = calloc((size_t)(2 * s->size), sizeof(double));
    if (!s->lens) {
        free(s);
        return PRNN_ERR_OUT_OF_MEMORY;
    }
    s->ones_dt = PRNN_DTYPE_COUNT_;
    s->ops.self = s;
    s->ops.begin = seq_begin;
    s->ops.scan_forward = seq_scan_forward;
    s->ops.scan_backward = seq_scan_backward;
    s->ops.pass = seq_pass;
    s->ops.loss = seq_loss;
    s->ops.release = seq_release;
    return prnn_model_set_seq_(model, &s->ops);
}

prnn_status prnn_model_seq_reduce_grads(prnn_model *model)
{
    if (!model) return PRNN_ERR_NULL_POINTER;
    const prnn_seq *seq = prnn_model_seq_(model);
    if (!seq || seq->release != seq_release) return PRNN_ERR_INVALID_ARGUMENT;
    seq_model *s = seq->self;
    void *g = prnn_model_grads(model);
    const int64_t P = prnn_model_param_count(model);
    if (prnn_model_config_get(model)->dtype == PRNN_DTYPE_F64) /* CPU only: host memory */
        return prnn_dist_allreduce_sum_host(s->dist, g, P);
    /* fp32: the mean's sum is formed once (identical bits everywhere), and
     * times N it is the sum again up to one rounding. */
    TRY(prnn_dist_allreduce_mean(s->dist, g, P));
    if (s->size == 1) return PRNN_OK;
    return prnn_axpby(s->ctx, g, g, NULL, P, (double)s->size, 0.0, PRNN_DTYPE_F32);
}
