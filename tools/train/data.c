/*
 * data.c - text loading, the validation split, the synthetic long-range
 * tasks and batch sampling (see data.h for what each task is).
 *
 * Size letters: B batch rows, T time steps.
 */
#define _POSIX_C_SOURCE 200809L /* lstat, opendir */

#include "data.h"

#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static const char *const task_names[TRAIN_TASK_COUNT_] = {
    "builtin", "text", "selective-copy", "adding", "delayed-recall",
};

const char *train_task_name(train_task task)
{
    if ((int)task < 0 || task >= TRAIN_TASK_COUNT_) return NULL;
    return task_names[task];
}

int train_task_parse(const char *name, train_task *task)
{
    for (int i = 0; i < TRAIN_TASK_COUNT_; i++) {
        if (name && !strcmp(name, task_names[i])) {
            *task = (train_task)i;
            return 0;
        }
    }
    return -1;
}

int train_task_is_synthetic(train_task task)
{
    return task == TRAIN_TASK_SELECTIVE_COPY || task == TRAIN_TASK_ADDING ||
           task == TRAIN_TASK_DELAYED_RECALL;
}

static const char *const order_names[TRAIN_ORDER_COUNT_] = {"random", "sequential"};

const char *train_order_name(train_order order)
{
    if ((int)order < 0 || order >= TRAIN_ORDER_COUNT_) return NULL;
    return order_names[order];
}

int train_order_parse(const char *name, train_order *order)
{
    for (int i = 0; i < TRAIN_ORDER_COUNT_; i++) {
        if (name && !strcmp(name, order_names[i])) {
            *order = (train_order)i;
            return 0;
        }
    }
    return -1;
}

double train_bits_per_byte(double nats) { return nats / log(2.0); }

/* ------------------------------------------------------------------------ */
/* Batches                                                                  */

/* The largest batch in tokens: 2^34 tokens already take 144 GiB of host
 * memory, and the bound keeps every byte count far from overflow. */
#define TRAIN_MAX_BATCH_TOKENS ((int64_t)1 << 34)

int train_batch_init(train_batch *batch, int64_t B, int64_t T)
{
    memset(batch, 0, sizeof *batch);
    if (B < 1 || T < 1 || B > TRAIN_MAX_BATCH_TOKENS / T) return -1;
    size_t n = (size_t)(B * T);
    batch->x = malloc(n * sizeof(int32_t));
    batch->y = malloc(n * sizeof(int32_t));
    batch->mask = malloc(n);
    if (!batch->x || !batch->y || !batch->mask) {
        train_batch_free(batch);
        return -1;
    }
    batch->B = B;
    batch->T = T;
    return 0;
}

void train_batch_free(train_batch *batch)
{
    free(batch->x);
    free(batch->y);
    free(batch->mask);
    memset(batch, 0, sizeof *batch);
}

/* ------------------------------------------------------------------------ */
/* Reading text                                                             */

/* Files above this are refused: the whole text lives in memory. */
#define TRAIN_MAX_TEXT_BYTES ((int64_t)1 << 40)
#define BINARY_SNIFF_BYTES 8192
#define MAX_DIR_DEPTH 64

typedef struct text_buf {
    uint8_t *p;
    int64_t n, cap;
    int64_t files, skipped;
} text_buf;

static int text_append(text_buf *t, const uint8_t *src, int64_t n, const char *path, train_err *e)
{
    if (n > TRAIN_MAX_TEXT_BYTES - t->n) {
        return train_err_set(e, TRAIN_IO_ERR_SIZE, "%s: the text would exceed %lld bytes", path,
                             (long long)TRAIN_MAX_TEXT_BYTES);
    }
    if (t->n + n > t->cap) {
        int64_t cap = t->cap ? t->cap : 1 << 16;
        while (cap < t->n + n) cap *= 2;
        uint8_t *q = realloc(t->p, (size_t)cap);
        if (!q) return train_err_set(e, TRAIN_IO_ERR_NOMEM, "%s: out of memory", path);
        t->p = q;
        t->cap = cap;
    }
    if (n) memcpy(t->p + t->n, src, (size_t)n);
    t->n += n;
    return TRAIN_IO_OK;
}

static int looks_binary(const uint8_t *p, int64_t n)
{
    int64_t m = n < BINARY_SNIFF_BYTES ? n : BINARY_SNIFF_BYTES;
    return memchr(p, 0, (size_t)m) != NULL;
}

static int add_file(text_buf *t, const char *path, int skip_binary, train_err *e)
{
    uint8_t *buf;
    int64_t n;
    int rc = train_read_file(path, TRAIN_MAX_TEXT_BYTES, &buf, &n, e);
    if (rc) return rc;
    if (skip_binary && looks_binary(buf, n)) {
        t->skipped++;
    } else {
        rc = text_append(t, buf, n, path, e);
        t->files++;
    }
    free(buf);
    return rc;
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

static int add_dir(text_buf *t, const char *dir, int depth, train_err *e)
{
    if (depth > MAX_DIR_DEPTH) {
        return train_err_set(e, TRAIN_IO_ERR_DATA, "%s: directories nested more than %d deep", dir,
                             MAX_DIR_DEPTH);
    }
    DIR *dh = opendir(dir);
    if (!dh) {
        return train_err_set(e, TRAIN_IO_ERR_OPEN, "%s: cannot open directory: %s", dir,
                             strerror(errno));
    }
    char **names = NULL;
    int64_t n = 0, cap = 0;
    int rc = TRAIN_IO_OK;
    struct dirent *ent;
    while ((ent = readdir(dh)) != NULL) {
        if (ent->d_name[0] == '.') continue; /* ".", ".." and hidden entries */
        if (n == cap) {
            int64_t c = cap ? 2 * cap : 64;
            char **q = realloc(names, (size_t)c * sizeof *q);
            if (!q) {
                rc = train_err_set(e, TRAIN_IO_ERR_NOMEM, "%s: out of memory", dir);
                break;
            }
            names = q;
            cap = c;
        }
        size_t len = strlen(dir) + strlen(ent->d_name) + 2;
        names[n] = malloc(len);
        if (!names[n]) {
            rc = train_err_set(e, TRAIN_IO_ERR_NOMEM, "%s: out of memory", dir);
            break;
        }
        snprintf(names[n], len, "%s/%s", dir, ent->d_name);
        n++;
    }
    closedir(dh);
    if (rc == TRAIN_IO_OK && n > 1) qsort(names, (size_t)n, sizeof *names, cmp_str);
    for (int64_t i = 0; i < n && rc == TRAIN_IO_OK; i++) {
        struct stat st;
        if (lstat(names[i], &st) != 0) {
            rc = train_err_set(e, TRAIN_IO_ERR_OPEN, "%s: cannot stat: %s", names[i],
                               strerror(errno));
        } else if (S_ISDIR(st.st_mode)) {
            rc = add_dir(t, names[i], depth + 1, e);
        } else if (S_ISREG(st.st_mode)) {
            rc = add_file(t, names[i], 1, e);
        } /* symbolic links, devices, sockets: skipped */
    }
    for (int64_t i = 0; i < n; i++) free(names[i]);
    free(names);
    return rc;
}

static int load_paths(text_buf *t, const char *const *paths, int n_paths, train_err *e)
{
    if (n_paths < 1 || !paths) {
        return train_err_set(e, TRAIN_IO_ERR_DATA, "text task: no files or directories given");
    }
    for (int i = 0; i < n_paths; i++) {
        const char *p = paths[i];
        struct stat st;
        if (!p || !*p) return train_err_set(e, TRAIN_IO_ERR_ARG, "text task: an empty path");
        if (stat(p, &st) != 0) {
            return train_err_set(e, TRAIN_IO_ERR_OPEN, "%s: cannot open: %s", p, strerror(errno));
        }
        if (S_ISDIR(st.st_mode)) {
            int64_t before = t->files, skipped = t->skipped;
            int rc = add_dir(t, p, 0, e);
            if (rc) return rc;
            if (t->files == before) {
                return train_err_set(e, TRAIN_IO_ERR_DATA,
                                     "%s: no text files in this directory (%lld skipped as binary; "
                                     "hidden entries and links are not read)",
                                     p, (long long)(t->skipped - skipped));
            }
        } else {
            int rc = add_file(t, p, 0, e);
            if (rc) return rc;
        }
    }
    return TRAIN_IO_OK;
}

/* Entropy in nats of the byte histogram of p[0..n): the loss of the best
 * predictor that ignores context. */
static double unigram_entropy(const uint8_t *p, int64_t n)
{
    if (n <= 0) return 0.0;
    int64_t count[256] = {0};
    for (int64_t i = 0; i < n; i++) count[p[i]]++;
    double h = 0.0;
    for (int i = 0; i < 256; i++) {
        if (count[i]) {
            double q = (double)count[i] / (double)n;
            h -= q * log(q);
        }
    }
    return h;
}

/* ------------------------------------------------------------------------ */
/* Opening a data set                                                       */

#define SYNTH_MIN_T 4

/* H(a + b)/2 for independent uniform digits a, b: the adding task's loss
 * per answer digit without memory (tens digit, then units given tens). */
static double adding_chance(void)
{
    double h = 0.0;
    for (int s = 0; s <= 18; s++) {
        double p = (10.0 - fabs(s - 9.0)) / 100.0;
        h -= p * log(p);
    }
    return h / 2.0;
}

int train_data_open(train_data *d, const train_data_config *cfg, train_err *e)
{
    memset(d, 0, sizeof *d);
    if (!cfg) return train_err_set(e, TRAIN_IO_ERR_ARG, "data: no configuration");
    d->cfg = *cfg;
    d->cfg.paths = NULL;
    d->cfg.n_paths = 0;
    const int64_t T = cfg->T, B = cfg->B;
    if (T < 1 || B < 1 || B > TRAIN_MAX_BATCH_TOKENS / T) {
        return train_err_set(e, TRAIN_IO_ERR_ARG,
                             "data: batch %lld x sequence length %lld is out of range",
                             (long long)B, (long long)T);
    }
    if ((int)cfg->task < 0 || cfg->task >= TRAIN_TASK_COUNT_) {
        return train_err_set(e, TRAIN_IO_ERR_ARG, "data: unknown task %d", (int)cfg->task);
    }
    if ((int)cfg->order < 0 || cfg->order >= TRAIN_ORDER_COUNT_) {
        return train_err_set(e, TRAIN_IO_ERR_ARG, "data: unknown order %d", (int)cfg->order);
    }

    if (train_task_is_synthetic(cfg->task)) {
        if (T < SYNTH_MIN_T) {
            return train_err_set(e, TRAIN_IO_ERR_DATA,
                                 "task %s: sequence length %lld is too short (at least %d)",
                                 train_task_name(cfg->task), (long long)T, SYNTH_MIN_T);
        }
        switch (cfg->task) {
        case TRAIN_TASK_SELECTIVE_COPY:
            d->k = T / 4 < 16 ? T / 4 : 16;
            d->chance_loss = log(16.0);
            break;
        case TRAIN_TASK_DELAYED_RECALL:
            d->k = T / 4 < 10 ? T / 4 : 10;
            d->chance_loss = log(8.0);
            break;
        default:
            d->k = 2;
            d->chance_loss = adding_chance();
            break;
        }
        snprintf(d->describe, sizeof d->describe,
                 "task %s, T %lld, %lld scored tokens per example, chance %.4f nats",
                 train_task_name(cfg->task), (long long)T, (long long)d->k, d->chance_loss);
        return TRAIN_IO_OK;
    }

    if (!(cfg->val_frac > 0.0 && cfg->val_frac <= 1.0)) {
        return train_err_set(e, TRAIN_IO_ERR_ARG, "data: validation fraction %g is not in (0, 1]",
                             cfg->val_frac);
    }
    text_buf t = {0};
    if (cfg->task == TRAIN_TASK_BUILTIN) {
        t.p = train_corpus_builtin(&t.n);
        if (!t.p) return train_err_set(e, TRAIN_IO_ERR_NOMEM, "builtin corpus: out of memory");
        t.files = 1;
    } else {
        int rc = load_paths(&t, cfg->paths, cfg->n_paths, e);
        if (rc) {
            free(t.p);
            return rc;
        }
    }
    d->text = t.p;
    d->n_text = t.n;
    d->n_files = t.files;
    d->n_skipped = t.skipped;
    const char *what = cfg->task == TRAIN_TASK_BUILTIN ? "the builtin corpus"
                       : cfg->n_paths == 1            ? cfg->paths[0]
                                                      : "the text";
    if (t.n == 0) {
        train_data_free(d);
        return train_err_set(e, TRAIN_IO_ERR_DATA, "%s: no bytes to learn from (empty)", what);
    }
    /* Validation gets the last ceil(n * val_frac) bytes. */
    double nv = ceil((double)t.n * cfg->val_frac);
    int64_t n_val = nv >= (double)t.n ? t.n : (int64_t)nv;
    d->n_train = t.n - n_val;
    if (n_val < 2) {
        train_data_free(d);
        return train_err_set(e, TRAIN_IO_ERR_DATA,
                             "%s: %lld bytes leave %lld for validation; at least 2 are needed "
                             "(a larger --val-frac or more text)",
                             what, (long long)t.n, (long long)n_val);
    }
    if (cfg->val_frac < 1.0) {
        int64_t need = cfg->order == TRAIN_ORDER_SEQUENTIAL ? B * (T + 1) : T + 1;
        if (d->n_train < need) {
            train_data_free(d);
            return train_err_set(e, TRAIN_IO_ERR_DATA,
                                 "%s: %lld bytes, of which %lld train: fewer than the %lld that %s "
                                 "needs (use a shorter --seq-len, a smaller --batch or more text)",
                                 what, (long long)t.n, (long long)d->n_train, (long long)need,
                                 cfg->order == TRAIN_ORDER_SEQUENTIAL
                                     ? "batch x (seq-len + 1) in sequential order"
                                     : "one window of seq-len + 1 bytes");
        }
    }
    d->chance_loss = unigram_entropy(d->text, d->n_train ? d->n_train : d->n_text);
    char files[96] = "";
    if (cfg->task == TRAIN_TASK_TEXT) {
        snprintf(files, sizeof files, " from %lld file%s (%lld skipped as binary)",
                 (long long)t.files, t.files == 1 ? "" : "s", (long long)t.skipped);
    }
    snprintf(d->describe, sizeof d->describe,
             "%s: %lld bytes%s, %lld train, %lld validation, unigram entropy %.4f nats",
             cfg->task == TRAIN_TASK_BUILTIN ? "builtin corpus" : "text", (long long)t.n, files,
             (long long)d->n_train, (long long)n_val, d->chance_loss);
    return TRAIN_IO_OK;
}

void train_data_free(train_data *d)
{
    free(d->text);
    memset(d, 0, sizeof *d);
}

/* ------------------------------------------------------------------------ */
/* Synthetic examples: one row (T tokens) from r                            */

/* Writes the example s[0..T+1) as x = s[0..T), y = s[1..T+1), scoring the
 * targets y[t] for t in [first, first + n). */
static int64_t emit_row(const uint8_t *s, int64_t T, int64_t first, int64_t n, int32_t *x,
                        int32_t *y, uint8_t *mask)
{
    for (int64_t t = 0; t < T; t++) {
        int scored = t >= first && t < first + n;
        x[t] = s[t];
        y[t] = scored ? s[t + 1] : -1;
        mask[t] = (uint8_t)scored;
    }
    return n;
}

static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

/* s has T+1 entries. */
static int64_t synth_row(const train_data *d, train_rng *r, uint8_t *s, int32_t *x, int32_t *y,
                         uint8_t *mask)
{
    const int64_t T = d->cfg.T, K = d->k;
    switch (d->cfg.task) {
    case TRAIN_TASK_SELECTIVE_COPY: {
        /* L = T - K positions of noise hold the K tokens, then '|' and the
         * answers: L + 1 + K = T + 1 entries. */
        const int64_t L = T - K;
        int64_t pos[16];
        for (int64_t i = 0; i < K; i++) {
            int fresh;
            do {
                pos[i] = (int64_t)train_rng_below(r, (uint64_t)L);
                fresh = 1;
                for (int64_t j = 0; j < i; j++) fresh &= pos[j] != pos[i];
            } while (!fresh);
        }
        qsort(pos, (size_t)K, sizeof pos[0], cmp_i64);
        memset(s, '.', (size_t)L);
        s[L] = '|';
        for (int64_t i = 0; i < K; i++) {
            uint8_t tok = (uint8_t)('a' + train_rng_below(r, 16));
            s[pos[i]] = tok;
            s[L + 1 + i] = tok;
        }
        return emit_row(s, T, L, K, x, y, mask);
    }
    case TRAIN_TASK_DELAYED_RECALL: {
        const int64_t L = T - K;
        memset(s, '.', (size_t)L);
        s[L] = '|';
        for (int64_t i = 0; i < K; i++) {
            uint8_t tok = (uint8_t)('a' + train_rng_below(r, 8));
            s[i] = tok;
            s[L + 1 + i] = tok;
        }
        return emit_row(s, T, L, K, x, y, mask);
    }
    default: { /* adding: L = T - 2 digits, '=', tens, units */
        const int64_t L = T - 2;
        for (int64_t i = 0; i < L; i++) s[i] = (uint8_t)('0' + train_rng_below(r, 10));
        int64_t half = L / 2;
        int64_t p1 = (int64_t)train_rng_below(r, (uint64_t)half);
        int64_t p2 = half + (int64_t)train_rng_below(r, (uint64_t)(L - half));
        int sum = (s[p1] - '0') + (s[p2] - '0');
        s[p1] = (uint8_t)(s[p1] - '0' + 'A');
        s[p2] = (uint8_t)(s[p2] - '0' + 'A');
        s[L] = '=';
        s[L + 1] = (uint8_t)('0' + sum / 10);
        s[L + 2] = (uint8_t)('0' + sum % 10);
        return emit_row(s, T, L, 2, x, y, mask);
    }
    }
}

static int check_batch(const train_data *d, const train_batch *batch)
{
    return d && batch && batch->x && batch->B == d->cfg.B && batch->T == d->cfg.T ? 0 : -1;
}

/* Fills the batch from r: synthetic rows. */
static int synth_batch(const train_data *d, train_rng *r, train_batch *batch)
{
    const int64_t T = batch->T;
    uint8_t *s = malloc((size_t)T + 1);
    if (!s) return -1;
    batch->n_counted = 0;
    for (int64_t b = 0; b < batch->B; b++) {
        batch->n_counted +=
            synth_row(d, r, s, batch->x + b * T, batch->y + b * T, batch->mask + b * T);
    }
    free(s);
    batch->continues = 0;
    return 0;
}

/* Row from the window of text starting at p with n_targets scored targets
 * (n_targets <= T; positions after them are zero and unscored). */
static int64_t text_row(const uint8_t *p, int64_t T, int64_t n_targets, int32_t *x, int32_t *y,
                        uint8_t *mask)
{
    for (int64_t t = 0; t < T; t++) {
        int in = t < n_targets;
        x[t] = in ? p[t] : 0;
        y[t] = in ? p[t + 1] : -1;
        mask[t] = (uint8_t)in;
    }
    return n_targets;
}

/* ------------------------------------------------------------------------ */
/* Sampling                                                                 */

void train_sampler_init(train_sampler *s, uint64_t seed)
{
    train_rng_seed(&s->rng, seed);
    s->batches = 0;
    s->pos = 0;
}

int train_data_next(const train_data *d, train_sampler *s, train_batch *batch)
{
    if (check_batch(d, batch) || !s) return -1;
    const int64_t B = batch->B, T = batch->T;
    if (train_task_is_synthetic(d->cfg.task)) {
        if (synth_batch(d, &s->rng, batch)) return -1;
        s->batches++;
        return 0;
    }
    if (d->n_train < T + 1) return -1; /* an evaluation-only data set */
    batch->n_counted = 0;
    if (d->cfg.order == TRAIN_ORDER_SEQUENTIAL) {
        const int64_t seg = d->n_train / B;
        if (seg < T + 1) return -1;
        if (s->pos < 0 || s->pos + T + 1 > seg) s->pos = 0;
        batch->continues = s->pos > 0;
        for (int64_t b = 0; b < B; b++) {
            batch->n_counted += text_row(d->text + b * seg + s->pos, T, T, batch->x + b * T,
                                         batch->y + b * T, batch->mask + b * T);
        }
        s->pos += T;
    } else {
        batch->continues = 0;
        for (int64_t b = 0; b < B; b++) {
            int64_t start = (int64_t)train_rng_below(&s->rng, (uint64_t)(d->n_train - T));
            batch->n_counted += text_row(d->text + start, T, T, batch->x + b * T,
                                         batch->y + b * T, batch->mask + b * T);
        }
    }
    s->batches++;
    return 0;
}

/* Stream of evaluation example batches, far from any seed's training stream
 * (which starts from the seed itself). */
#define EVAL_STREAM 0x65766131ull

int64_t train_data_eval_batches(const train_data *d)
{
    if (train_task_is_synthetic(d->cfg.task)) return -1;
    int64_t n_val = d->n_text - d->n_train;
    int64_t windows = (n_val - 1 + d->cfg.T - 1) / d->cfg.T;
    return (windows + d->cfg.B - 1) / d->cfg.B;
}

int train_data_eval(const train_data *d, int64_t index, train_batch *batch)
{
    if (check_batch(d, batch) || index < 0) return -1;
    const int64_t B = batch->B, T = batch->T;
    if (train_task_is_synthetic(d->cfg.task)) {
        train_rng r;
        train_rng_seed2(&r, d->cfg.seed ^ EVAL_STREAM, (uint64_t)index);
        return synth_batch(d, &r, batch);
    }
    const uint8_t *val = d->text + d->n_train;
    const int64_t n_val = d->n_text - d->n_train;
    const int64_t windows = (n_val - 1 + T - 1) / T;
    batch->n_counted = 0;
    batch->continues = 0;
    const int64_t n_batches = (windows + B - 1) / B;
    for (int64_t b = 0; b < B; b++) {
        /* Window k of the validation text; k >= windows is past its end.
         * index < n_batches keeps index * B below windows + B: no overflow. */
        int64_t k = index < n_batches ? index * B + b : windows;
        int64_t n = k < windows ? n_val - 1 - k * T : 0;
        if (n > T) n = T;
        batch->n_counted += text_row(k < windows ? val + k * T : val, T, n, batch->x + b * T,
                                     batch->y + b * T, batch->mask + b * T);
    }
    return 0;
}
