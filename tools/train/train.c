/*
 * train.c - `prnn train`, `prnn sample` and `prnn eval`.
 *
 * Training step: draw a batch on the host into page-locked memory, upload it
 * on a copy context of its own (so the upload of batch k+1 overlaps the
 * compute of batch k), forward and backward over prnn_model, the global
 * gradient norm, clipping, and AdamW over the model's one parameter buffer
 * (decay on matrices only), all on the compute context. Checkpoints (weights
 * as safetensors, optimizer and data state beside them) are written
 * atomically; --resume continues exactly where the state file says, and on
 * the CPU reproduces the uninterrupted run's losses bit for bit. Ctrl-C
 * finishes the current step, saves a checkpoint and exits. With --dist the
 * processes of an MPI job split each batch's rows and average their
 * gradients (dist.h), or with --seq-parallel each row's time axis
 * (seqpar.h); rank 0 alone prints, logs and saves.
 *
 * Data parallel (--dist): the gradient average runs while the backward does
 * (dist.h); with --zero1 each process keeps the moments of its shard of the
 * parameters [lo, hi) and steps only those, and checkpoints hold all
 * moments, gathered on rank 0.
 *
 * Size letters: B batch rows, T steps per row, V vocabulary (256 bytes).
 */
#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "ckpt.h"
#include "data.h"
#include "dist.h"
#include "log.h"
#include "options.h"
#include "prnn.h"
#include "prnn_blocks.h"
#include "prnn_model.h"
#include "rng.h"
#include "sample.h"
#include "seqpar.h"
#include "train.h"

/* ------------------------------------------------------------------------ */
/* Common pieces                                                            */

static volatile sig_atomic_t g_stop;

static void on_sigint(int sig)
{
    (void)sig;
    g_stop = 1;
}

static int fail_status(const char *what, prnn_status s)
{
    fprintf(stderr, "prnn: %s failed: %s\n", what, prnn_strerror(s));
    return 1;
}

#define PCHECK(what, call)                                                     \
    do {                                                                       \
        prnn_status s_ = (call);                                               \
        if (s_ != PRNN_OK) {                                                   \
            rc = fail_status(what, s_);                                        \
            goto done;                                                         \
        }                                                                      \
    } while (0)

static int parse_or_exit(train_options *o, train_command cmd, int argc, char **argv, int *rc)
{
    char err[512];
    train_options_default(o, cmd);
    const int r = train_options_parse(o, cmd, argc, argv, err, sizeof err);
    if (r == TRAIN_OPTS_HELP) {
        train_options_usage(stdout, cmd);
        *rc = 0;
        return 0;
    }
    if (r != TRAIN_OPTS_OK) {
        fprintf(stderr, "%s\n", err);
        *rc = 2;
        return 0;
    }
    return 1;
}

static prnn_model_config model_config(const train_options *o)
{
    prnn_model_config c = prnn_model_config_default();
    c.vocab = TRAIN_VOCAB;
    c.dim = o->hidden;
    c.layers = o->layers;
    c.cell = prnn_cell_desc_make(o->cell, o->hidden, o->hidden);
    c.cell.bidirectional = o->bidirectional;
    if (o->deterministic) c.cell.algo = PRNN_SCAN_FIXED;
    c.cell.recompute = o->recompute;
    c.norm = o->norm;
    c.dropout = o->dropout;
    c.dtype = o->dtype;
    return c;
}

static prnn_status ctx_open(const train_options *o, int cuda_device, prnn_ctx **ctx)
{
    prnn_ctx_config cc = prnn_ctx_config_default();
    cc.device = o->device;
    cc.cuda_device = cuda_device;
    cc.num_threads = (int)o->threads;
    return prnn_ctx_init(ctx, &cc);
}

/* mkdir -p for the output directory. */
static int make_dirs(const char *path)
{
    char buf[TRAIN_PATH_MAX];
    snprintf(buf, sizeof buf, "%s", path);
    for (char *p = buf + 1;; p++) {
        const char c = *p;
        if (c == '/' || c == 0) {
            *p = 0;
            if (mkdir(buf, 0777) != 0 && errno != EEXIST) {
                fprintf(stderr, "prnn train: cannot create directory '%s': %s\n", buf,
                        strerror(errno));
                return -1;
            }
            *p = c;
        }
        if (c == 0) break;
    }
    return 0;
}

/* Model tensors as safetensors slots (or records to write), in table order. */
static train_st_tensor *model_tensors(prnn_model *m, const void *host_params, int64_t *n)
{
    const int nt = prnn_model_tensor_count(m);
    const prnn_model_config *c = prnn_model_config_get(m);
    const int64_t es = c->dtype == PRNN_DTYPE_F64 ? 8 : 4;
    train_st_tensor *t = calloc((size_t)nt, sizeof *t);
    if (!t) return NULL;
    for (int i = 0; i < nt; i++) {
        prnn_tensor_info info;
        prnn_model_tensor(m, i, &info);
        char *name = malloc(sizeof info.name);
        if (!name) {
            for (int j = 0; j < i; j++) free((char *)t[j].name);
            free(t);
            return NULL;
        }
        memcpy(name, info.name, sizeof info.name);
        t[i].name = name;
        t[i].dtype = es == 8 ? TRAIN_ST_F64 : TRAIN_ST_F32;
        t[i].ndim = info.ndim;
        t[i].shape[0] = info.shape[0];
        t[i].shape[1] = info.shape[1];
        t[i].data = (const char *)host_params + info.offset * es;
        t[i].nbytes = info.count * es;
    }
    *n = nt;
    return t;
}

static void free_tensors(train_st_tensor *t, int64_t n)
{
    if (!t) return;
    for (int64_t i = 0; i < n; i++) free((char *)t[i].name);
    free(t);
}

/* Reads a checkpoint's weights into the model (whose configuration must
 * already match the file's metadata). */
static int load_weights(prnn_ctx *ctx, prnn_model *m, const train_st_file *f)
{
    const int64_t P = prnn_model_param_count(m);
    const prnn_model_config *c = prnn_model_config_get(m);
    const size_t es = c->dtype == PRNN_DTYPE_F64 ? 8 : 4;
    void *host = malloc((size_t)P * es);
    int64_t nt = 0;
    train_st_tensor *t = host ? model_tensors(m, host, &nt) : NULL;
    train_st_slot *slots = t ? calloc((size_t)nt, sizeof *slots) : NULL;
    int rc = 1;
    if (!slots) {
        fprintf(stderr, "prnn: out of memory reading %s\n", f->path ? f->path : "checkpoint");
        goto done;
    }
    for (int64_t i = 0; i < nt; i++) {
        slots[i].name = t[i].name;
        slots[i].dtype = t[i].dtype;
        slots[i].ndim = t[i].ndim;
        slots[i].shape[0] = t[i].shape[0];
        slots[i].shape[1] = t[i].shape[1];
        slots[i].dst = (void *)t[i].data;
    }
    train_err e;
    memset(&e, 0, sizeof e);
    if (train_st_load(f, slots, nt, &e) != TRAIN_IO_OK) {
        fprintf(stderr, "prnn: %s\n", e.msg);
        goto done;
    }
    PCHECK("uploading the weights", prnn_mem_upload(ctx, prnn_model_params(m), host, (size_t)P * es));
    PCHECK("uploading the weights", prnn_ctx_synchronize(ctx));
    PCHECK("converting the weights", prnn_model_params_changed(m));
    PCHECK("converting the weights", prnn_ctx_synchronize(ctx));
    rc = 0;
done:
    free(slots);
    free_tensors(t, nt);
    free(host);
    return rc;
}

/* Host and device buffers of one batch. */
typedef struct dev_batch {
    int32_t *x, *y;       /* (B, T) on the compute device */
} dev_batch;

/* Mean loss over a batch's scored tokens, on the model (no dropout, nothing
 * saved). Returns the loss times the count in *sum. */
static prnn_status eval_batch(prnn_ctx *ctx, prnn_model *m, train_seq *seq,
                              const train_batch *hb, dev_batch *db, float *d_loss, double *sum)
{
    const int32_t *x = hb->x, *y = hb->y;
    const int64_t T = train_seq_slice(seq, hb, &x, &y);
    const size_t bytes = (size_t)(hb->B * T) * sizeof(int32_t);
    prnn_status s = prnn_mem_upload(ctx, db->x, x, bytes);
    if (s == PRNN_OK) s = prnn_mem_upload(ctx, db->y, y, bytes);
    if (s == PRNN_OK) s = prnn_model_forward(m, hb->B, T, d_loss, db->x, db->y, 0, 0);
    float loss = 0;
    if (s == PRNN_OK) s = prnn_mem_download(ctx, &loss, d_loss, sizeof loss);
    *sum = (double)loss * (double)hb->n_counted;
    return s;
}

/* Validation loss in nats per scored token over up to max_batches batches
 * (all of the held-out text when the data has fewer). */
static int evaluate(prnn_ctx *ctx, prnn_model *m, train_seq *seq, const train_data *d, int64_t B,
                    int64_t T, int64_t max_batches, dev_batch *db, float *d_loss, double *out)
{
    int64_t nb = train_data_eval_batches(d);
    if (nb < 0 || (max_batches > 0 && nb > max_batches)) nb = max_batches > 0 ? max_batches : 16;
    train_batch hb;
    if (train_batch_init(&hb, B, T) != 0) {
        fprintf(stderr, "prnn: out of memory for an evaluation batch\n");
        return 1;
    }
    double total = 0, count = 0;
    int rc = 0;
    for (int64_t i = 0; i < nb; i++) {
        if (train_data_eval(d, i, &hb) != 0) {
            fprintf(stderr, "prnn: cannot build evaluation batch %lld\n", (long long)i);
            rc = 1;
            break;
        }
        if (hb.n_counted == 0) continue;
        double sum = 0;
        prnn_status s = eval_batch(ctx, m, seq, &hb, db, d_loss, &sum);
        if (s != PRNN_OK) {
            rc = fail_status("evaluation", s);
            break;
        }
        total += sum;
        count += (double)hb.n_counted;
    }
    train_batch_free(&hb);
    *out = count > 0 ? total / count : NAN;
    return rc;
}

/* Generates `length` bytes after `prompt` in recurrent mode (one token at a
 * time, the state carried), writing them to f. */
static int generate(prnn_ctx *ctx, prnn_model *m, const char *prompt, int64_t length,
                    double temperature, int64_t top_k, uint64_t seed, FILE *f)
{
    const prnn_model_config *c = prnn_model_config_get(m);
    const int64_t V = c->vocab;
    const size_t as = c->dtype == PRNN_DTYPE_F64 ? 8 : 4;
    int64_t S = 0;
    int rc = 1;
    void *state = NULL, *logits = NULL, *logits32 = NULL;
    int32_t *d_id = NULL;
    float *host = malloc((size_t)V * sizeof(float));
    double *host64 = malloc((size_t)V * sizeof(double));
    train_rng r;
    train_rng_seed2(&r, seed, 0x73616d706c65ull); /* "sample" */
    if (!host || !host64) goto done;
    PCHECK("sampling", prnn_model_state_floats(m, &S));
    PCHECK("sampling", prnn_mem_alloc(ctx, &state, (size_t)S * as));
    PCHECK("sampling", prnn_mem_zero(ctx, state, (size_t)S * as));
    PCHECK("sampling", prnn_mem_alloc(ctx, &logits, (size_t)V * 8));
    PCHECK("sampling", prnn_mem_alloc(ctx, &logits32, (size_t)V * 8));
    PCHECK("sampling", prnn_mem_alloc(ctx, (void **)&d_id, sizeof(int32_t)));

    const size_t np = strlen(prompt);
    int32_t tok = '\n'; /* an empty prompt starts as at a line break */
    fwrite(prompt, 1, np, f);
    for (int64_t i = 0; i < (int64_t)np + length; i++) {
        if (i < (int64_t)np) tok = (unsigned char)prompt[i];
        PCHECK("sampling", prnn_mem_upload(ctx, d_id, &tok, sizeof tok));
        PCHECK("sampling", prnn_model_step(m, 1, logits, state, d_id));
        if (i + 1 < (int64_t)np) continue; /* still reading the prompt */
        if (c->dtype == PRNN_DTYPE_F64) {
            PCHECK("sampling", prnn_mem_download(ctx, host64, logits, (size_t)V * 8));
            for (int64_t v = 0; v < V; v++) host[v] = (float)host64[v];
        } else {
            PCHECK("sampling", prnn_mem_convert(ctx, logits32, PRNN_DTYPE_F32, logits, c->dtype, V));
            PCHECK("sampling", prnn_mem_download(ctx, host, logits32, (size_t)V * 4));
        }
        if (i + 1 >= (int64_t)np + length) break;
        const int64_t next = train_sample_token(host, V, temperature, top_k, &r);
        if (next < 0) {
            fprintf(stderr, "prnn: the model produced no finite logits\n");
            goto done;
        }
        tok = (int32_t)next;
        fputc((int)tok, f);
    }
    fputc('\n', f);
    fflush(f);
    rc = 0;
done:
    prnn_mem_free(ctx, state);
    prnn_mem_free(ctx, logits);
    prnn_mem_free(ctx, logits32);
    prnn_mem_free(ctx, d_id);
    free(host);
    free(host64);
    return rc;
}

/* ------------------------------------------------------------------------ */
/* prnn train                                                               */

typedef struct trainer {
    train_options o;
    train_data data;
    prnn_ctx *ctx;      /* compute */
    prnn_ctx *copy;     /* uploads (the same as ctx on the CPU) */
    prnn_model *model;
    int64_t P;
    int64_t lo, hi;     /* this process's shard of the optimizer: [0, P) unless --zero1 */
    float *m, *v;       /* (hi - lo) AdamW moments on the device */
    float *d_loss, *d_sumsq;
    int32_t *pin[2][2]; /* [slot][x, y] page-locked host batches */
    dev_batch dev[2];
    train_state st;     /* step, tokens, sampler, rng, best loss (m, v unused) */
    train_log log;
    train_dist *dist;   /* --dist: this process's part of the job (dist.h) */
    train_seq *seq;     /* --seq-parallel: its slice of the time axis (seqpar.h) */
    int64_t rows;       /* rows of each batch this process trains on */
    double share[2];    /* [slot] this process's share of the batch's scored tokens */
} trainer;

static int save_checkpoint(trainer *t)
{
    prnn_ctx *ctx = t->ctx;
    const int64_t P = t->P;
    int rc = 1;
    float *host = malloc((size_t)P * sizeof(float) * 3);
    int64_t nt = 0;
    train_st_tensor *tens = NULL;
    train_meta meta;
    memset(&meta, 0, sizeof meta);
    train_err e;
    memset(&e, 0, sizeof e);
    if (!host) {
        fprintf(stderr, "prnn train: out of memory writing a checkpoint\n");
        return 1;
    }
    /* With --zero1 every process calls this: its shard of the moments goes
     * to rank 0, which writes the whole state. */
    const size_t sb = (size_t)(t->hi - t->lo) * 4;
    if (train_dist_lead(t->dist))
        PCHECK("reading the weights", prnn_mem_download(ctx, host, prnn_model_params(t->model), (size_t)P * 4));
    if (sb > 0) {
        PCHECK("reading the optimizer", prnn_mem_download(ctx, host + P + t->lo, t->m, sb));
        PCHECK("reading the optimizer", prnn_mem_download(ctx, host + 2 * P + t->lo, t->v, sb));
    }
    PCHECK("gathering the optimizer", train_dist_gather_host(t->dist, host + P, P));
    PCHECK("gathering the optimizer", train_dist_gather_host(t->dist, host + 2 * P, P));
    if (!train_dist_lead(t->dist)) {
        rc = 0;
        goto done;
    }
    tens = model_tensors(t->model, host, &nt);
    char b[32];
    snprintf(b, sizeof b, "%lld", (long long)t->st.step);
    if (!tens || train_options_metadata(&t->o, &meta) != 0 || train_meta_set(&meta, "step", b) != 0) {
        fprintf(stderr, "prnn train: out of memory writing a checkpoint\n");
        goto done;
    }
    /* The state first: a crash between the two files leaves weights older
     * than the state, which --resume refuses (the step differs), instead of
     * a silent mix. */
    train_state s = t->st;
    s.n_params = P;
    s.m = host + P;
    s.v = host + 2 * P;
    if (train_state_write(t->o.state_path, &s, &e) != TRAIN_IO_OK ||
        train_st_write(t->o.model_path, tens, nt, meta.kv, meta.n, &e) != TRAIN_IO_OK) {
        fprintf(stderr, "prnn train: %s\n", e.msg);
        goto done;
    }
    rc = 0;
done:
    free_tensors(tens, nt);
    train_meta_free(&meta);
    free(host);
    return rc;
}

static int resume(trainer *t)
{
    train_err e;
    memset(&e, 0, sizeof e);
    train_st_file f;
    memset(&f, 0, sizeof f);
    train_state s;
    memset(&s, 0, sizeof s);
    int rc = 1;
    if (train_st_read(&f, t->o.model_path, &e) != TRAIN_IO_OK ||
        train_state_read(&s, t->o.state_path, &e) != TRAIN_IO_OK ||
        train_state_check(&s, t->o.state_path, train_options_model_hash(&t->o), t->P, &e) !=
            TRAIN_IO_OK) {
        fprintf(stderr, "prnn train: cannot resume: %s\n", e.msg);
        goto done;
    }
    const char *step = train_st_meta(&f, "step");
    if (!step || strtoll(step, NULL, 10) != s.step) {
        fprintf(stderr,
                "prnn train: cannot resume: %s is from step %s but %s from step %lld "
                "(an interrupted save?)\n",
                t->o.model_path, step ? step : "?", t->o.state_path, (long long)s.step);
        goto done;
    }
    if (load_weights(t->ctx, t->model, &f) != 0) goto done;
    /* The state holds all moments; a process takes its shard. */
    const size_t sb = (size_t)(t->hi - t->lo) * 4;
    if ((sb > 0 && prnn_mem_upload(t->ctx, t->m, s.m + t->lo, sb) != PRNN_OK) ||
        (sb > 0 && prnn_mem_upload(t->ctx, t->v, s.v + t->lo, sb) != PRNN_OK) ||
        prnn_ctx_synchronize(t->ctx) != PRNN_OK) {
        fprintf(stderr, "prnn train: cannot upload the optimizer state\n");
        goto done;
    }
    t->st.step = s.step;
    t->st.tokens = s.tokens;
    t->st.sampler = s.sampler;
    t->st.rng = s.rng;
    t->st.best_val_loss = s.best_val_loss;
    rc = 0;
done:
    train_state_free(&s);
    train_st_free(&f);
    return rc;
}

/* Draws the next training batch and starts its upload into slot k. */
static int stage_batch(trainer *t, train_batch *hb, int k)
{
    if (train_data_next(&t->data, &t->st.sampler, hb) != 0) {
        fprintf(stderr, "prnn train: cannot draw a training batch\n");
        return 1;
    }
    int64_t first = 0;
    t->rows = t->seq ? hb->B : train_dist_rows(t->dist, hb->B, &first);
    t->share[k] = train_dist_share(t->dist, hb, first, t->rows);
    const int32_t *x = hb->x + first * hb->T, *y = hb->y + first * hb->T;
    const size_t bytes = (size_t)(t->rows * train_seq_slice(t->seq, hb, &x, &y)) * sizeof(int32_t);
    memcpy(t->pin[k][0], x, bytes);
    memcpy(t->pin[k][1], y, bytes);
    prnn_status s = prnn_mem_upload(t->copy, t->dev[k].x, t->pin[k][0], bytes);
    if (s == PRNN_OK) s = prnn_mem_upload(t->copy, t->dev[k].y, t->pin[k][1], bytes);
    if (s != PRNN_OK) return fail_status("uploading a batch", s);
    return 0;
}

/* One optimizer step over the model's tensors, decay on matrices only: the
 * parts of them in this process's shard [lo, hi) (a shard boundary may cut
 * a tensor; each element keeps its tensor's decay). With --zero1 the bf16
 * copy is refreshed after the weights are gathered. */
static prnn_status adamw(trainer *t, double lr)
{
    prnn_model *m = t->model;
    float *p = prnn_model_params(m), *g = prnn_model_grads(m);
    unsigned char *p16 = train_dist_sharded(t->dist) ? NULL : prnn_model_params_bf16(m);
    const int nt = prnn_model_tensor_count(m);
    for (int i = 0; i < nt; i++) {
        prnn_tensor_info info;
        prnn_model_tensor(m, i, &info);
        const int64_t a = info.offset > t->lo ? info.offset : t->lo;
        const int64_t b = info.offset + info.count < t->hi ? info.offset + info.count : t->hi;
        if (a >= b) continue;
        prnn_adamw_config c = prnn_adamw_config_default();
        c.lr = lr;
        c.beta1 = 0.9;
        c.beta2 = 0.95;
        c.weight_decay = info.decay ? t->o.weight_decay : 0.0;
        prnn_status s = prnn_adamw_step(t->ctx, p + a, t->m + (a - t->lo), t->v + (a - t->lo),
                                        p16 ? p16 + 2 * a : NULL, g + a, b - a, t->st.step + 1,
                                        &c);
        if (s != PRNN_OK) return s;
    }
    return PRNN_OK;
}

/* The global gradient norm and clipping. With --zero1 this process holds
 * only its shard's averaged gradients: the norm is the root of the shards'
 * sums of squares summed over the processes, and each clips its shard. */
static prnn_status clip_grads(trainer *t, double *gnorm)
{
    float *g = prnn_model_grads(t->model);
    if (!train_dist_sharded(t->dist)) {
        double sumsq = 0;
        prnn_status s = prnn_grad_sumsq(t->ctx, t->d_sumsq, &sumsq, g, t->P);
        *gnorm = sqrt(sumsq);
        if (s == PRNN_OK && t->o.grad_clip > 0 && *gnorm > t->o.grad_clip)
            s = prnn_grad_clip(t->ctx, g, t->d_sumsq, t->P, t->o.grad_clip);
        return s;
    }
    const int64_t n = t->hi - t->lo;
    double sumsq = 0;
    prnn_status s = n > 0 ? prnn_grad_sumsq(t->ctx, NULL, &sumsq, g + t->lo, n) : PRNN_OK;
    if (s == PRNN_OK) s = train_dist_sum(t->dist, &sumsq, 1);
    *gnorm = sqrt(sumsq);
    if (s != PRNN_OK || !(t->o.grad_clip > 0 && *gnorm > t->o.grad_clip) || n == 0) return s;
    const float total = (float)sumsq;
    s = prnn_mem_upload(t->ctx, t->d_sumsq, &total, sizeof total);
    if (s == PRNN_OK) s = prnn_grad_clip(t->ctx, g + t->lo, t->d_sumsq, n, t->o.grad_clip);
    return s;
}

static void print_config(const trainer *t)
{
    const train_options *o = &t->o;
    printf("prnn train: %s\n", t->data.describe);
    printf("  model   %s x %lld layers, width %lld%s, %s, dropout %.2f, %lld parameters\n",
           prnn_cell_type_name(o->cell), (long long)o->layers, (long long)o->hidden,
           o->bidirectional ? " (bidirectional)" : "", o->norm == PRNN_NORM_RMS ? "rmsnorm" : "layernorm",
           o->dropout, (long long)t->P);
    printf("  train   %lld steps of %lld x %lld tokens, lr %.2e -> %.2e (warmup %lld), "
           "AdamW wd %.3g, clip %.3g\n",
           (long long)o->steps, (long long)o->batch, (long long)o->seq_len, o->lr, o->min_lr,
           (long long)o->warmup, o->weight_decay, o->grad_clip);
    size_t act = 0;
    prnn_cell_desc cd = prnn_model_config_get(t->model)->cell;
    if (prnn_cell_act_bytes(&cd, o->batch, o->seq_len, &act) == PRNN_OK)
        printf("  memory  %.1f MiB of saved cell activations per layer%s\n",
               (double)act / (1 << 20), o->recompute > 1 ? " (recompute on)" : "");
    const double mib = 8.0 / (1 << 20); /* two fp32 moments per parameter */
    if (train_dist_sharded(t->dist))
        printf("  optim   AdamW moments %.2f MiB per process (ZeRO-1: this one holds %lld of the "
               "%lld parameters' moments; %.2f MiB unsharded)\n",
               (double)(t->hi - t->lo) * mib, (long long)(t->hi - t->lo), (long long)t->P,
               (double)t->P * mib);
    else
        printf("  optim   AdamW moments %.2f MiB per process\n", (double)t->P * mib);
    if (o->dist && o->seq_parallel)
        printf("  dist    gradients summed over the processes' time slices after the backward\n");
    else if (o->dist)
        printf("  dist    gradients averaged %s\n",
               o->no_overlap ? "after the backward (--no-overlap)"
                             : "while the backward runs, in buckets of up to 4 MiB as layers finish");
    printf("  device  %s, %s, seed %llu; chance loss %.4f nats\n",
           o->device == PRNN_DEVICE_CUDA ? "cuda" : "cpu",
           o->dtype == PRNN_DTYPE_BF16 ? "bf16 (fp32 master weights)" : "fp32",
           (unsigned long long)o->seed, t->data.chance_loss);
    printf("  output  %s (log %s)\n", o->model_path, o->log_path);
    fflush(stdout);
}

int train_cmd_train(int argc, char **argv)
{
    int rc = 0;
    trainer tr;
    memset(&tr, 0, sizeof tr);
    trainer *t = &tr;
    train_batch hb;
    memset(&hb, 0, sizeof hb);
    void (*prev_handler)(int) = SIG_ERR;
    if (!parse_or_exit(&t->o, TRAIN_CMD_TRAIN, argc, argv, &rc)) return rc;
    const train_options *o = &t->o;
    const int64_t B = o->batch, T = o->seq_len;
    train_err e;
    memset(&e, 0, sizeof e);
    rc = 1;

    if (o->dist && train_dist_open(&t->dist) != 0) goto done;
    const int lead = train_dist_lead(t->dist);
    if (make_dirs(o->out_dir) != 0) goto done;
    train_data_config dc = train_options_data_config(o);
    if (train_data_open(&t->data, &dc, &e) != TRAIN_IO_OK) {
        fprintf(stderr, "prnn train: %s\n", e.msg);
        goto done;
    }
    PCHECK("creating the context", ctx_open(o, train_dist_device(t->dist), &t->ctx));
    if (o->device == PRNN_DEVICE_CUDA)
        PCHECK("creating the copy context", ctx_open(o, train_dist_device(t->dist), &t->copy));
    else
        t->copy = t->ctx;
    if (!o->seq_parallel && train_dist_attach(t->dist, t->ctx, B) != 0) goto done;
    prnn_model_config mc = model_config(o);
    PCHECK("building the model", prnn_model_init(t->ctx, &t->model, &mc));
    t->P = prnn_model_param_count(t->model);
    if (train_dist_grads(t->dist, t->model, !o->no_overlap, o->zero1) != 0) goto done;
    train_dist_shard(t->dist, t->P, &t->lo, &t->hi);
    if (o->seq_parallel && train_seq_attach(&t->seq, t->ctx, t->model, B, T) != 0) goto done;

    const size_t mbytes = (size_t)(t->hi > t->lo ? t->hi - t->lo : 1) * 4;
    PCHECK("allocating", prnn_mem_alloc(t->ctx, (void **)&t->m, mbytes));
    PCHECK("allocating", prnn_mem_alloc(t->ctx, (void **)&t->v, mbytes));
    PCHECK("allocating", prnn_mem_zero(t->ctx, t->m, mbytes));
    PCHECK("allocating", prnn_mem_zero(t->ctx, t->v, mbytes));
    PCHECK("allocating", prnn_mem_alloc(t->ctx, (void **)&t->d_loss, 8));
    PCHECK("allocating", prnn_mem_alloc(t->ctx, (void **)&t->d_sumsq, 8));
    const size_t bbytes = (size_t)(B * train_seq_steps(t->seq, T)) * sizeof(int32_t);
    for (int k = 0; k < 2; k++) {
        PCHECK("allocating", prnn_mem_alloc_pinned(t->ctx, (void **)&t->pin[k][0], bbytes));
        PCHECK("allocating", prnn_mem_alloc_pinned(t->ctx, (void **)&t->pin[k][1], bbytes));
        PCHECK("allocating", prnn_mem_alloc(t->ctx, (void **)&t->dev[k].x, bbytes));
        PCHECK("allocating", prnn_mem_alloc(t->ctx, (void **)&t->dev[k].y, bbytes));
    }
    if (train_batch_init(&hb, B, T) != 0) {
        fprintf(stderr, "prnn train: out of memory for a batch\n");
        goto done;
    }

    t->st.config_hash = train_options_model_hash(o);
    t->st.best_val_loss = INFINITY;
    if (o->resume) {
        if (resume(t) != 0) goto done;
        printf("prnn train: resuming %s at step %lld\n", o->model_path, (long long)t->st.step);
    } else {
        PCHECK("initialising the weights", prnn_model_init_params(t->model, o->seed));
        train_sampler_init(&t->st.sampler, o->seed);
        train_rng_seed2(&t->st.rng, o->seed, 0x747261696eull); /* "train" */
    }
    if (train_log_open(&t->log, lead ? o->log_path : "/dev/null", o->resume, t->data.describe,
                       &e) != TRAIN_IO_OK) {
        fprintf(stderr, "prnn train: %s\n", e.msg);
        goto done;
    }
    print_config(t);
    g_stop = 0;
    prev_handler = signal(SIGINT, on_sigint);

    const double t0 = train_clock_seconds();
    int64_t done_here = 0;
    int k = 0;
    train_sampler sampler_after = t->st.sampler; /* as of the batches consumed */
    if (t->st.step < o->steps) {
        if (stage_batch(t, &hb, k) != 0) goto done;
        sampler_after = t->st.sampler;
    }
    /* --phase-times: seconds spent in [batch wait, forward, backward,
     * optimizer] over the steps of this invocation. */
    double phase[4] = {0, 0, 0, 0};
    double mark = 0;
    /* The first step of an invocation (buffers allocated, libraries
     * initialised) is left out of the averages. */
#define PHASE(i)                                                               \
    do {                                                                       \
        if (o->phase_times) {                                                  \
            PCHECK("synchronizing", prnn_ctx_synchronize(t->ctx));             \
            const double now_ = train_clock_seconds();                         \
            if (done_here > 0) phase[i] += now_ - mark;                        \
            mark = now_;                                                       \
        }                                                                      \
    } while (0)
    while (t->st.step < o->steps) {
        const double ts = train_clock_seconds();
        mark = ts;
        const int64_t step = t->st.step;
        const double lr = train_lr_at(o, step);
        PCHECK("waiting for the batch", prnn_ctx_wait_for(t->ctx, t->copy));
        PHASE(0);
        prnn_model *m = t->model;
        PCHECK("zeroing gradients", prnn_model_zero_grads(m));
        /* Dropout masks depend on (seed, step) only, so a resumed run draws
         * the same masks (and on the rank with --dist: dist.h). */
        const uint64_t seed0 = o->seed * 0x9E3779B97F4A7C15ull + (uint64_t)step;
        const uint64_t drop_seed = t->seq ? seed0 : train_dist_seed(t->dist, seed0);
        const int64_t Tl = train_seq_steps(t->seq, T);
        PCHECK("forward", prnn_model_forward(m, t->rows, Tl, t->d_loss, t->dev[k].x, t->dev[k].y, 1, drop_seed));
        PHASE(1);
        PCHECK("averaging gradients", train_dist_backward_begin(t->dist));
        PCHECK("backward", prnn_model_backward(m, t->seq ? 1.0 : train_dist_loss_scale(t->dist, t->share[k])));
        if (t->seq) PCHECK("summing gradients", train_seq_reduce(t->seq));
        else PCHECK("averaging gradients", train_dist_average(t->dist));
        PHASE(2);

        /* While the GPU works: the next batch, into the other slot. */
        const train_sampler before_next = t->st.sampler;
        if (step + 1 < o->steps) {
            if (stage_batch(t, &hb, k ^ 1) != 0) goto done;
        }

        double gnorm = 0;
        PCHECK("gradient norm and clipping", clip_grads(t, &gnorm));
        PCHECK("optimizer", adamw(t, lr));
        if (train_dist_sharded(t->dist)) {
            PCHECK("gathering the weights", train_dist_gather_params(t->dist, prnn_model_params(m), t->P));
            PCHECK("converting the weights", prnn_model_params_changed(m));
        }
        PHASE(3);
        float loss = 0;
        PCHECK("reading the loss", prnn_mem_download(t->ctx, &loss, t->d_loss, sizeof loss));
        int stop = g_stop;
        if (t->seq) PCHECK("ending the step", train_seq_step_end(t->seq, &stop));
        else PCHECK("averaging the loss", train_dist_step_end(t->dist, &loss, t->share[k], &stop));
        g_stop = stop;
        if (!isfinite(loss)) {
            fprintf(stderr, "prnn train: the loss is %f at step %lld; stopping (lower --lr?)\n",
                    (double)loss, (long long)step + 1);
            goto done;
        }

        t->st.step = step + 1;
        t->st.tokens += B * T;
        sampler_after = before_next; /* batch step+1 is staged, not consumed */
        k ^= 1;
        done_here++;
        const double now = train_clock_seconds();
        train_progress p = {.step = t->st.step, .steps = o->steps, .loss = loss,
                            .grad_norm = gnorm, .lr = lr, .ms_per_step = (now - ts) * 1e3,
                            .tokens_per_s = (double)(B * T) / (now - ts),
                            .elapsed_s = now - t0, .steps_done = done_here};
        char line[256];
        puts(train_fmt_progress(line, sizeof line, &p));
        fflush(stdout);
        if (train_log_step(&t->log, t->st.step, loss, gnorm, lr, p.ms_per_step, p.tokens_per_s,
                           &e) != TRAIN_IO_OK) {
            fprintf(stderr, "prnn train: %s\n", e.msg);
            goto done;
        }

        if (o->stop_after && done_here >= o->stop_after) g_stop = 1;
        const int last = t->st.step == o->steps || g_stop;
        if ((o->eval_interval && t->st.step % o->eval_interval == 0) || last) {
            double val = 0;
            if (evaluate(t->ctx, m, t->seq, &t->data, B, T, o->eval_batches, &t->dev[k ^ 1],
                         t->d_loss,
                         &val) != 0)
                goto done;
            puts(train_fmt_eval(line, sizeof line, t->st.step, val));
            fflush(stdout);
            if (val < t->st.best_val_loss) t->st.best_val_loss = val;
            if (train_log_eval(&t->log, t->st.step, val, &e) != TRAIN_IO_OK) {
                fprintf(stderr, "prnn train: %s\n", e.msg);
                goto done;
            }
        }
        if ((lead || train_dist_sharded(t->dist)) &&
            ((o->ckpt_interval && t->st.step % o->ckpt_interval == 0) || last)) {
            train_sampler cur = t->st.sampler;
            t->st.sampler = sampler_after;
            const int r = save_checkpoint(t);
            t->st.sampler = cur;
            if (r != 0) goto done;
            if (lead) printf("saved %s at step %lld\n", o->model_path, (long long)t->st.step);
        }
        if (g_stop) {
            printf("stopped after step %lld; continue with --resume\n", (long long)t->st.step);
            break;
        }
    }
#undef PHASE
    if (o->phase_times && done_here > 1) {
        const double tot = phase[0] + phase[1] + phase[2] + phase[3];
        static const char *names[4] = {"batch wait", "forward", "backward",
                                       "optimizer (and staging the next batch)"};
        printf("phase times over %lld steps after the first (ms/step, share):",
               (long long)done_here - 1);
        for (int i = 0; i < 4; i++)
            printf(" %s %.3f (%.0f%%)%s", names[i], phase[i] * 1e3 / (double)(done_here - 1),
                   tot > 0 ? 100.0 * phase[i] / tot : 0.0, i < 3 ? "," : "\n");
    }
    if (!g_stop && lead && o->bidirectional) {
        printf("\nno sample: a bidirectional model sees the future of every step, so it "
               "cannot generate (prnn eval scores it)\n");
    } else if (!g_stop && lead) {
        printf("\nsample (temperature %.2f):\n", o->temperature);
        if (generate(t->ctx, t->model, "The ", 300, o->temperature, o->top_k, o->seed, stdout) != 0)
            goto done;
    }
    rc = 0;
done:
    if (prev_handler != SIG_ERR) signal(SIGINT, prev_handler);
    if (t->log.f && train_log_close(&t->log, &e) != TRAIN_IO_OK) {
        fprintf(stderr, "prnn train: %s\n", e.msg);
        rc = 1;
    }
    train_batch_free(&hb);
    train_seq_close(t->seq, rc);
    train_dist_close(t->dist, rc);
    if (t->ctx) {
        for (int j = 0; j < 2; j++) {
            prnn_mem_free_pinned(t->ctx, t->pin[j][0]);
            prnn_mem_free_pinned(t->ctx, t->pin[j][1]);
            prnn_mem_free(t->ctx, t->dev[j].x);
            prnn_mem_free(t->ctx, t->dev[j].y);
        }
        prnn_mem_free(t->ctx, t->m);
        prnn_mem_free(t->ctx, t->v);
        prnn_mem_free(t->ctx, t->d_loss);
        prnn_mem_free(t->ctx, t->d_sumsq);
    }
    prnn_model_free(t->model);
    if (t->copy != t->ctx) prnn_ctx_free(t->copy);
    prnn_ctx_free(t->ctx);
    train_data_free(&t->data);
    train_options_free(&t->o);
    return rc;
}

/* ------------------------------------------------------------------------ */
/* prnn sample, prnn eval                                                   */

/* Opens a checkpoint, takes its model configuration into o and builds the
 * model with its weights. */
static int open_checkpoint(train_options *o, prnn_ctx **ctx, prnn_model **m)
{
    train_err e;
    memset(&e, 0, sizeof e);
    train_st_file f;
    memset(&f, 0, sizeof f);
    int rc = 1;
    if (train_st_read(&f, o->model_path, &e) != TRAIN_IO_OK ||
        train_options_from_checkpoint(o, &f, &e) != TRAIN_IO_OK) {
        fprintf(stderr, "prnn %s: %s\n", train_command_name(o->command), e.msg);
        goto done;
    }
    PCHECK("creating the context", ctx_open(o, 0, ctx));
    prnn_model_config mc = model_config(o);
    PCHECK("building the model", prnn_model_init(*ctx, m, &mc));
    rc = load_weights(*ctx, *m, &f);
done:
    train_st_free(&f);
    return rc;
}

int train_cmd_sample(int argc, char **argv)
{
    int rc = 0;
    train_options o;
    if (!parse_or_exit(&o, TRAIN_CMD_SAMPLE, argc, argv, &rc)) return rc;
    prnn_ctx *ctx = NULL;
    prnn_model *m = NULL;
    rc = open_checkpoint(&o, &ctx, &m);
    if (rc == 0 && o.bidirectional) {
        fprintf(stderr, "prnn sample: %s is a bidirectional model, which cannot generate "
                        "(each output sees the future)\n", o.model_path);
        rc = 1;
    }
    if (rc == 0) rc = generate(ctx, m, o.prompt, o.length, o.temperature, o.top_k, o.seed, stdout);
    prnn_model_free(m);
    prnn_ctx_free(ctx);
    train_options_free(&o);
    return rc;
}

int train_cmd_eval(int argc, char **argv)
{
    int rc = 0;
    train_options o;
    if (!parse_or_exit(&o, TRAIN_CMD_EVAL, argc, argv, &rc)) return rc;
    prnn_ctx *ctx = NULL;
    prnn_model *m = NULL;
    train_data d;
    memset(&d, 0, sizeof d);
    dev_batch db = {0};
    float *d_loss = NULL;
    rc = open_checkpoint(&o, &ctx, &m);
    if (rc == 0) {
        rc = 1;
        train_err e;
        memset(&e, 0, sizeof e);
        train_data_config dc = train_options_data_config(&o);
        if (train_data_open(&d, &dc, &e) != TRAIN_IO_OK) {
            fprintf(stderr, "prnn eval: %s\n", e.msg);
            goto done;
        }
        const size_t bytes = (size_t)(o.batch * o.seq_len) * sizeof(int32_t);
        PCHECK("allocating", prnn_mem_alloc(ctx, (void **)&db.x, bytes));
        PCHECK("allocating", prnn_mem_alloc(ctx, (void **)&db.y, bytes));
        PCHECK("allocating", prnn_mem_alloc(ctx, (void **)&d_loss, 8));
        double val = 0;
        if (evaluate(ctx, m, NULL, &d, o.batch, o.seq_len, o.eval_batches, &db, d_loss, &val) !=
            0)
            goto done;
        printf("%s: loss %.4f nats/byte, %.4f bits/byte (%s)\n", o.model_path, val,
               train_bits_per_byte(val), d.describe);
        rc = 0;
    }
done:
    if (ctx) {
        prnn_mem_free(ctx, db.x);
        prnn_mem_free(ctx, db.y);
        prnn_mem_free(ctx, d_loss);
    }
    train_data_free(&d);
    prnn_model_free(m);
    prnn_ctx_free(ctx);
    train_options_free(&o);
    return rc;
}
