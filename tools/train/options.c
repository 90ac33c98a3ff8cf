/*
 * options.c - command-line parsing for `prnn train | sample | eval`, driven
 * by one table of options that also writes the --help text, so the two can
 * never disagree.
 */
#include "options.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

static const char *const command_names[TRAIN_CMD_COUNT_] = {"train", "sample", "eval"};

const char *train_command_name(train_command cmd)
{
    return (int)cmd >= 0 && cmd < TRAIN_CMD_COUNT_ ? command_names[cmd] : "?";
}

/* ------------------------------------------------------------------------ */
/* Names of enumerated values                                               */

typedef struct named {
    const char *name;
    int value;
} named;

static const named cell_names[] = {
    {"mingru", PRNN_CELL_MINGRU}, {"minlstm", PRNN_CELL_MINLSTM},     {"qrnn", PRNN_CELL_QRNN},
    {"sru", PRNN_CELL_SRU},       {"gilr-lstm", PRNN_CELL_GILR_LSTM}, {NULL, 0},
};
static const named norm_names[] = {{"rms", PRNN_NORM_RMS}, {"layer", PRNN_NORM_LAYER}, {NULL, 0}};
static const named dtype_names[] = {{"f32", PRNN_DTYPE_F32}, {"bf16", PRNN_DTYPE_BF16}, {NULL, 0}};
static const named device_names[] = {
    {"cpu", PRNN_DEVICE_CPU}, {"cuda", PRNN_DEVICE_CUDA}, {NULL, 0}};
static const named task_names[] = {
    {"builtin", TRAIN_TASK_BUILTIN},
    {"text", TRAIN_TASK_TEXT},
    {"selective-copy", TRAIN_TASK_SELECTIVE_COPY},
    {"adding", TRAIN_TASK_ADDING},
    {"delayed-recall", TRAIN_TASK_DELAYED_RECALL},
    {NULL, 0},
};
static const named order_names[] = {
    {"random", TRAIN_ORDER_RANDOM}, {"sequential", TRAIN_ORDER_SEQUENTIAL}, {NULL, 0}};

/* Enumerated options are stored through an int (set_value). */
_Static_assert(sizeof(prnn_cell_type) == sizeof(int), "enum size");
_Static_assert(sizeof(prnn_norm_type) == sizeof(int), "enum size");
_Static_assert(sizeof(prnn_dtype) == sizeof(int), "enum size");
_Static_assert(sizeof(prnn_device) == sizeof(int), "enum size");
_Static_assert(sizeof(train_task) == sizeof(int), "enum size");
_Static_assert(sizeof(train_order) == sizeof(int), "enum size");

static int lookup(const named *t, const char *s, int *value)
{
    for (; t->name; t++) {
        if (!strcmp(t->name, s)) {
            *value = t->value;
            return 0;
        }
    }
    return -1;
}

static const char *name_of(const named *t, int value)
{
    for (; t->name; t++) {
        if (t->value == value) return t->name;
    }
    return "?";
}

/* "a, b or c" into buf. */
static const char *list_names(const named *t, char *buf, size_t n)
{
    size_t k = 0;
    buf[0] = 0;
    for (const named *p = t; p->name && k < n; p++) {
        const char *sep = p == t ? "" : (p + 1)->name ? ", " : " or ";
        k += (size_t)snprintf(buf + k, n - k, "%s%s", sep, p->name);
    }
    return buf;
}

/* ------------------------------------------------------------------------ */
/* The option table                                                         */

typedef enum opt_kind {
    K_I64,
    K_F64,
    K_U64,
    K_FLAG,
    K_STR,  /* a string kept as given (const char * into argv) */
    K_PATH, /* a path copied into a char[TRAIN_PATH_MAX] */
    K_DATA, /* repeatable path */
    K_ENUM
} opt_kind;

#define FOR_TRAIN (1u << TRAIN_CMD_TRAIN)
#define FOR_SAMPLE (1u << TRAIN_CMD_SAMPLE)
#define FOR_EVAL (1u << TRAIN_CMD_EVAL)
#define FOR_ALL (FOR_TRAIN | FOR_SAMPLE | FOR_EVAL)

typedef struct opt_spec {
    const char *name;
    opt_kind kind;
    unsigned cmds;
    const char *group;
    const char *metavar;
    double lo, hi; /* numbers: the accepted range, inclusive ... */
    int lo_open;   /* ... except lo itself when set */
    size_t offset;
    const named *names; /* K_ENUM */
    const char *help;
    const char *dflt; /* the default as --help shows it; NULL for none */
} opt_spec;

#define OFF(field) offsetof(train_options, field)
#define TRILLION 1e12

static const opt_spec specs[] = {
    {"task", K_ENUM, FOR_TRAIN, "Data", "NAME", 0, 0, 0, OFF(task), task_names,
     "what to learn: builtin (a generated English-like text built into prnn), text (the --data "
     "files), or a synthetic long-range task: selective-copy, adding, delayed-recall",
     "builtin; text when --data is given"},
    {"data", K_DATA, FOR_TRAIN, "Data", "PATH", 0, 0, 0, 0, NULL,
     "a text file or a directory of them to learn from, byte by byte; repeat for several. In a "
     "directory, hidden entries, links and binary files are skipped",
     NULL},
    {"data", K_DATA, FOR_EVAL, "Data", "PATH", 0, 0, 0, 0, NULL,
     "a text file or a directory of them to score, every byte; repeat for several",
     "the validation part of the data the model was trained on"},
    {"val-frac", K_F64, FOR_TRAIN, "Data", "F", 0, 0.5, 1, OFF(val_frac), NULL,
     "fraction of the text held out at its end for validation, in (0, 0.5]", "0.05"},
    {"data-order", K_ENUM, FOR_TRAIN, "Data", "ORDER", 0, 0, 0, OFF(order), order_names,
     "random: each row a window at a random offset; sequential: each row reads on through its "
     "own part of the text, batch after batch",
     "random"},

    {"cell", K_ENUM, FOR_TRAIN, "Model", "NAME", 0, 0, 0, OFF(cell), cell_names,
     "recurrent cell: mingru, minlstm, qrnn, sru or gilr-lstm", "mingru"},
    {"layers", K_I64, FOR_TRAIN, "Model", "N", 1, 64, 0, OFF(layers), NULL,
     "recurrent layers, 1 to 64", "2"},
    {"hidden", K_I64, FOR_TRAIN, "Model", "N", 1, 65536, 0, OFF(hidden), NULL,
     "the model's width: byte embedding, residual stream and each layer's output, 1 to 65536 "
     "(bidirectional layers give each direction half, so it must be even)",
     "128"},
    {"bidirectional", K_FLAG, FOR_TRAIN, "Model", NULL, 0, 0, 0, OFF(bidirectional), NULL,
     "layers also read the sequence backwards. They then see the byte they are asked to "
     "predict, so the loss means little and such models cannot sample; for experiments only",
     "off"},
    {"norm", K_ENUM, FOR_TRAIN, "Model", "NAME", 0, 0, 0, OFF(norm), norm_names,
     "normalization before each layer and the output head: rms or layer", "rms"},
    {"recompute", K_I64, FOR_TRAIN, "Model", "K", 0, 1 << 30, 0, OFF(recompute), NULL,
     "memory option: keep only every K-th recurrent state in the forward and recompute the "
     "rest in the backward (saved cell activations shrink about K-fold; 0: keep all)",
     "0"},
    {"dropout", K_F64, FOR_TRAIN, "Model", "P", 0, 0.95, 0, OFF(dropout), NULL,
     "dropout probability on each layer's output during training, 0 to 0.95", "0"},

    {"seq-len", K_I64, FOR_TRAIN, "Training", "T", 1, 1073741824, 0, OFF(seq_len), NULL,
     "time steps (bytes) per sequence, up to 2^30 (cut over the processes with "
     "--seq-parallel); the synthetic tasks need at least 4",
     "128"},
    {"seq-len", K_I64, FOR_EVAL, "Evaluation", "T", 1, 1073741824, 0, OFF(seq_len), NULL,
     "time steps (bytes) per sequence, up to 2^30", "the one the model was trained with"},
    {"batch", K_I64, FOR_TRAIN, "Training", "B", 1, 65536, 0, OFF(batch), NULL,
     "sequences per batch, 1 to 65536", "16"},
    {"batch", K_I64, FOR_EVAL, "Evaluation", "B", 1, 65536, 0, OFF(batch), NULL,
     "sequences per batch, 1 to 65536", "16"},
    {"eval-batches", K_I64, FOR_EVAL, "Evaluation", "N", 0, 1e9, 0, OFF(eval_batches), NULL,
     "score at most N batches (0: all of the data)", "0"},
    {"steps", K_I64, FOR_TRAIN, "Training", "N", 1, TRILLION, 0, OFF(steps), NULL,
     "optimizer steps to train for, in total: those before a --resume count", "1000"},
    {"lr", K_F64, FOR_TRAIN, "Training", "LR", 0, 10, 1, OFF(lr), NULL,
     "peak learning rate of AdamW", "0.003"},
    {"min-lr", K_F64, FOR_TRAIN, "Training", "LR", 0, 10, 0, OFF(min_lr), NULL,
     "learning rate at the last step: after warmup it falls from --lr to this on a cosine",
     "0.0003"},
    {"warmup", K_I64, FOR_TRAIN, "Training", "N", 0, TRILLION, 0, OFF(warmup), NULL,
     "steps over which the learning rate rises linearly from near 0 to --lr", "50"},
    {"weight-decay", K_F64, FOR_TRAIN, "Training", "W", 0, 10, 0, OFF(weight_decay), NULL,
     "AdamW decoupled weight decay", "0.01"},
    {"grad-clip", K_F64, FOR_TRAIN, "Training", "G", 0, 1e6, 0, OFF(grad_clip), NULL,
     "largest global gradient norm; larger gradients are scaled down to it, and 0 turns "
     "clipping off",
     "1.0"},
    {"seed", K_U64, FOR_TRAIN | FOR_SAMPLE, "Training", "S", 0, 0, 0, OFF(seed), NULL,
     "seed of the initial weights, the batches and sampling; the same seed gives the same run",
     "1"},

    {"dtype", K_ENUM, FOR_ALL, "Compute", "TYPE", 0, 0, 0, OFF(dtype), dtype_names,
     "f32, or bf16 (cuda only: bf16 weights and activations, f32 master weights and sums)", "f32"},
    {"device", K_ENUM, FOR_ALL, "Compute", "DEV", 0, 0, 0, OFF(device), device_names,
     "cpu or cuda", "cpu"},
    {"deterministic", K_FLAG, FOR_TRAIN, "Compute", NULL, 0, 0, 0, OFF(deterministic), NULL,
     "the same bits on every run, so that --resume on a GPU equals an uninterrupted run: "
     "the scan uses its fixed-order algorithms (striped for many channels, else the tree) "
     "instead of the chunked look-back, whose summation order depends on timing "
     "(the CPU is deterministic anyway)",
     "off"},
    {"threads", K_I64, FOR_ALL, "Compute", "N", 0, 4096, 0, OFF(threads), NULL,
     "CPU worker threads (0: all cores)", "0"},
    {"dist", K_FLAG, FOR_TRAIN, "Compute", NULL, 0, 0, 0, OFF(dist), NULL,
     "data parallel over the processes of an MPI job (mpirun -np N prnn train --dist ...; "
     "one process per GPU, each takes the GPU of its rank on the node): each trains on its "
     "share of the rows of every batch, so N processes at --batch B train as one does",
     "off"},
    {"zero1", K_FLAG, FOR_TRAIN, "Compute", NULL, 0, 0, 0, OFF(zero1), NULL,
     "with --dist: shard the optimizer over the processes (ZeRO-1). Each keeps the AdamW "
     "moments of its 1/N of the parameters and updates only those (after a reduce-scatter of "
     "the gradients); the updated weights are then gathered. The same training up to "
     "summation order; checkpoints hold the whole state, so a run resumes with or without "
     "--zero1 and on any number of processes",
     "off"},
    {"no-overlap", K_FLAG, FOR_TRAIN, "Compute", NULL, 0, 0, 0, OFF(no_overlap), NULL,
     "with --dist: average the gradients in one pass after the backward instead of layer by "
     "layer while it runs (for comparison; the same result)",
     "off"},
    {"seq-parallel", K_FLAG, FOR_TRAIN, "Compute", NULL, 0, 0, 0, OFF(seq_parallel), NULL,
     "with --dist: sequence parallel instead of data parallel. Every process takes all rows "
     "of each batch but only its own contiguous slice of the time axis (--seq-len split "
     "evenly, the first processes taking one step more when it does not divide); the scans "
     "run across the processes, so N processes train as one does on the whole sequence while "
     "each holds only 1/N of its activations: sequences longer than one device holds",
     "off"},

    {"eval-interval", K_I64, FOR_TRAIN, "Evaluation and output", "N", 0, TRILLION, 0,
     OFF(eval_interval), NULL,
     "measure the validation loss every N steps (0: only at the end)", "100"},
    {"eval-batches", K_I64, FOR_TRAIN, "Evaluation and output", "N", 0, 1e9, 0,
     OFF(eval_batches), NULL,
     "validation batches per measurement (0: all of the validation text)", "16"},
    {"ckpt-interval", K_I64, FOR_TRAIN, "Evaluation and output", "N", 0, TRILLION, 0,
     OFF(ckpt_interval), NULL,
     "save a checkpoint every N steps (0: only at the end; one is always saved at the end)",
     "500"},
    {"out", K_PATH, FOR_TRAIN, "Evaluation and output", "DIR", 0, 0, 0, OFF(out_dir), NULL,
     "directory for model.safetensors (weights), model.state (optimizer and data position) and "
     "log.tsv; created when missing",
     "out"},
    {"phase-times", K_FLAG, FOR_TRAIN, "Evaluation and output", NULL, 0, 0, 0,
     OFF(phase_times), NULL,
     "wait for the device after each phase (batch upload, forward, backward, optimizer) and "
     "print the average time of each at the end; costs a little speed",
     "off"},
    {"stop-after", K_I64, FOR_TRAIN, "Evaluation and output", "N", 0, TRILLION, 0,
     OFF(stop_after), NULL,
     "end this invocation after N steps with a checkpoint, as an interruption would (the "
     "schedule still runs to --steps); --resume continues. For time-sliced jobs",
     "0 (off)"},
    {"resume", K_FLAG, FOR_TRAIN, "Evaluation and output", NULL, 0, 0, 0, OFF(resume), NULL,
     "continue the run saved in --out exactly where it stopped; give the same options", "off"},
    {"log", K_PATH, FOR_TRAIN, "Evaluation and output", "FILE", 0, 0, 0, OFF(log_path), NULL,
     "the tab-separated log, one row per step and per evaluation; scripts/plot_loss.py draws "
     "it",
     "OUT/log.tsv"},

    {"checkpoint", K_PATH, FOR_SAMPLE | FOR_EVAL, "Checkpoint", "FILE", 0, 0, 0, OFF(model_path),
     NULL, "the weights to load (written by prnn train)", "out/model.safetensors"},

    {"prompt", K_STR, FOR_SAMPLE, "Sampling", "TEXT", 0, 0, 0, OFF(prompt), NULL,
     "text the model reads before it writes", "a newline"},
    {"length", K_I64, FOR_SAMPLE, "Sampling", "N", 1, 1e9, 0, OFF(length), NULL,
     "bytes to generate", "400"},
    {"temperature", K_F64, FOR_SAMPLE, "Sampling", "X", 0, 100, 0, OFF(temperature), NULL,
     "divides the logits: below 1 safer, above 1 wilder; 0 always takes the likeliest byte",
     "0.8"},
    {"top-k", K_I64, FOR_SAMPLE, "Sampling", "K", 0, 256, 0, OFF(top_k), NULL,
     "sample only among the K likeliest bytes (0: all 256)", "0"},
};

#define N_SPECS ((int)(sizeof specs / sizeof specs[0]))
/* train_options.given has a bit per entry */
_Static_assert(sizeof specs / sizeof specs[0] <= 64, "too many options for the given mask");

/* The option called name[0..len) for cmd; when no command has it, NULL;
 * when only other commands have it, one of theirs (for the message). Some
 * names have one entry per command, with help written for each. */
static const opt_spec *find_spec(const char *name, size_t len, train_command cmd, int *index)
{
    const opt_spec *other = NULL;
    for (int i = 0; i < N_SPECS; i++) {
        if (strlen(specs[i].name) == len && !strncmp(specs[i].name, name, len)) {
            if (specs[i].cmds >> cmd & 1) {
                *index = i;
                return &specs[i];
            }
            if (!other) *index = i, other = &specs[i];
        }
    }
    return other;
}

int train_options_given(const train_options *o, const char *name)
{
    for (int i = 0; i < N_SPECS; i++) {
        if (!strcmp(specs[i].name, name) && (o->given >> i & 1)) return 1;
    }
    return 0;
}

/* ------------------------------------------------------------------------ */
/* Defaults                                                                 */

void train_options_default(train_options *o, train_command cmd)
{
    memset(o, 0, sizeof *o);
    o->command = cmd;
    o->task = TRAIN_TASK_BUILTIN;
    o->val_frac = 0.05;
    o->order = TRAIN_ORDER_RANDOM;
    o->cell = PRNN_CELL_MINGRU;
    o->layers = 2;
    o->hidden = 128;
    o->norm = PRNN_NORM_RMS;
    o->dropout = 0.0;
    o->seq_len = cmd == TRAIN_CMD_EVAL ? 0 : 128;
    o->batch = 16;
    o->steps = 1000;
    o->lr = 3e-3;
    o->min_lr = 3e-4;
    o->warmup = 50;
    o->weight_decay = 0.01;
    o->grad_clip = 1.0;
    o->dtype = PRNN_DTYPE_F32;
    o->device = PRNN_DEVICE_CPU;
    o->threads = 0;
    o->seed = 1;
    o->eval_interval = 100;
    o->eval_batches = cmd == TRAIN_CMD_EVAL ? 0 : 16;
    o->ckpt_interval = 500;
    snprintf(o->out_dir, sizeof o->out_dir, "out");
    o->prompt = "\n";
    o->length = 400;
    o->temperature = 0.8;
    o->top_k = 0;
}

void train_options_free(train_options *o)
{
    free(o->owned);
    o->owned = NULL;
}

/* ------------------------------------------------------------------------ */
/* Parsing                                                                  */

static int errf(char *err, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int errf(char *err, size_t errlen, const char *fmt, ...)
{
    if (err && errlen) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, errlen, fmt, ap);
        va_end(ap);
    }
    return TRAIN_OPTS_ERROR;
}

/* Edit distance, for "did you mean"; names are short. */
static int edit_distance(const char *a, size_t la, const char *b)
{
    size_t lb = strlen(b);
    if (la > 40 || lb > 40) return 99;
    int row[41];
    for (size_t j = 0; j <= lb; j++) row[j] = (int)j;
    for (size_t i = 1; i <= la; i++) {
        int diag = row[0];
        row[0] = (int)i;
        for (size_t j = 1; j <= lb; j++) {
            int up = row[j];
            int best = diag + (a[i - 1] != b[j - 1]);
            if (up + 1 < best) best = up + 1;
            if (row[j - 1] + 1 < best) best = row[j - 1] + 1;
            row[j] = best;
            diag = up;
        }
    }
    return row[lb];
}

static int parse_i64(const char *s, int64_t *out)
{
    if (!s || !*s || !(*s == '-' || (*s >= '0' && *s <= '9'))) return -1;
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno || *end) return -1;
    *out = v;
    return 0;
}

static int parse_u64(const char *s, uint64_t *out)
{
    if (!s || !*s || !(*s >= '0' && *s <= '9')) return -1;
    /* decimal, or hexadecimal after 0x; never octal, which would make a
     * seed of 010 mean 8 */
    int hex = s[0] == '0' && (s[1] == 'x' || s[1] == 'X');
    if (hex && !s[2]) return -1;
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, hex ? 16 : 10);
    if (errno || *end) return -1;
    *out = v;
    return 0;
}

static int parse_f64(const char *s, double *out)
{
    if (!s || !*s || !(*s == '-' || *s == '+' || *s == '.' || (*s >= '0' && *s <= '9'))) return -1;
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (*end || !isfinite(v)) return -1;
    *out = v;
    return 0;
}

static const char *range_text(const opt_spec *sp, char *buf, size_t n)
{
    if (sp->kind == K_I64) {
        snprintf(buf, n, "an integer from %.0f to %.0f", sp->lo, sp->hi);
    } else {
        snprintf(buf, n, "a number %s %g and at most %g", sp->lo_open ? "above" : "from", sp->lo,
                 sp->hi);
    }
    return buf;
}

/* Parses and stores one option's value (not flags). */
static int set_value(train_options *o, const opt_spec *sp, const char *val, const char *cmd,
                     char *err, size_t errlen)
{
    void *field = (char *)o + sp->offset;
    char range[96];
    switch (sp->kind) {
    case K_I64: {
        int64_t v;
        if (parse_i64(val, &v) || (double)v < sp->lo || (double)v > sp->hi) {
            return errf(err, errlen, "prnn %s: --%s wants %s, got '%s'", cmd, sp->name,
                        range_text(sp, range, sizeof range), val);
        }
        *(int64_t *)field = v;
        return 0;
    }
    case K_F64: {
        double v;
        if (parse_f64(val, &v) || v < sp->lo || v > sp->hi || (sp->lo_open && v == sp->lo)) {
            return errf(err, errlen, "prnn %s: --%s wants %s, got '%s'", cmd, sp->name,
                        range_text(sp, range, sizeof range), val);
        }
        *(double *)field = v;
        return 0;
    }
    case K_U64: {
        uint64_t v;
        if (parse_u64(val, &v)) {
            return errf(err, errlen,
                        "prnn %s: --%s wants an integer from 0 to 18446744073709551615, got '%s'",
                        cmd, sp->name, val);
        }
        *(uint64_t *)field = v;
        return 0;
    }
    case K_STR: *(const char **)field = val; return 0;
    case K_PATH:
        if (!*val) return errf(err, errlen, "prnn %s: --%s wants a path, got ''", cmd, sp->name);
        if (strlen(val) >= TRAIN_PATH_MAX - 32) {
            return errf(err, errlen, "prnn %s: --%s: the path is longer than %d bytes", cmd,
                        sp->name, TRAIN_PATH_MAX - 32);
        }
        snprintf((char *)field, TRAIN_PATH_MAX, "%s", val);
        return 0;
    case K_DATA:
        if (!*val) return errf(err, errlen, "prnn %s: --data wants a path, got ''", cmd);
        if (o->n_data >= TRAIN_MAX_PATHS) {
            return errf(err, errlen,
                        "prnn %s: more than %d --data paths (name a directory instead)", cmd,
                        TRAIN_MAX_PATHS);
        }
        o->data[o->n_data++] = val;
        return 0;
    case K_ENUM: {
        int v;
        if (lookup(sp->names, val, &v)) {
            char names[200];
            return errf(err, errlen, "prnn %s: --%s wants %s, got '%s'", cmd, sp->name,
                        list_names(sp->names, names, sizeof names), val);
        }
        /* every enum field of train_options is an enum type of int size */
        memcpy(field, &v, sizeof v);
        return 0;
    }
    default: return errf(err, errlen, "prnn %s: --%s: internal option error", cmd, sp->name);
    }
}

/* dir + "/" + name into out (TRAIN_PATH_MAX). */
static void join_path(char *out, const char *dir, const char *name)
{
    size_t len = strlen(dir), nl = strlen(name);
    int slash = !(len && dir[len - 1] == '/');
    /* --out is at most TRAIN_PATH_MAX - 32 bytes and names are short */
    if (len + (size_t)slash + nl >= TRAIN_PATH_MAX) {
        out[0] = 0;
        return;
    }
    memmove(out, dir, len);
    if (slash) out[len++] = '/';
    memcpy(out + len, name, nl + 1);
}

/* The state file beside a weights file: x.safetensors -> x.state. */
static void state_path_for(char *out, const char *model)
{
    static const char ext[] = ".safetensors";
    size_t len = strlen(model), el = sizeof ext - 1;
    if (len > el && !strcmp(model + len - el, ext)) len -= el;
    snprintf(out, TRAIN_PATH_MAX, "%.*s.state", (int)len, model);
}

static int check_options(train_options *o, const char *cmd, char *err, size_t errlen)
{
    int task_given = train_options_given(o, "task");
    if (o->command == TRAIN_CMD_TRAIN) {
        if (o->n_data && !task_given) o->task = TRAIN_TASK_TEXT;
        if (o->n_data && o->task != TRAIN_TASK_TEXT) {
            return errf(err, errlen, "prnn %s: --data goes with --task text, not --task %s", cmd,
                        train_task_name(o->task));
        }
        if (o->task == TRAIN_TASK_TEXT && !o->n_data) {
            return errf(err, errlen, "prnn %s: --task text needs at least one --data PATH", cmd);
        }
        if (o->bidirectional && o->hidden % 2) {
            return errf(err, errlen,
                        "prnn %s: --bidirectional needs an even --hidden (each direction gets "
                        "half), got %lld",
                        cmd, (long long)o->hidden);
        }
        if (o->min_lr > o->lr) {
            return errf(err, errlen, "prnn %s: --min-lr %g is above --lr %g", cmd, o->min_lr,
                        o->lr);
        }
        if (o->warmup > o->steps) {
            return errf(err, errlen, "prnn %s: --warmup %lld is longer than --steps %lld", cmd,
                        (long long)o->warmup, (long long)o->steps);
        }
        if ((o->zero1 || o->no_overlap) && !o->dist) {
            return errf(err, errlen,
                        "prnn %s: --%s needs --dist (it is about the processes of an MPI job: "
                        "mpirun -np N prnn train --dist --%s ...)",
                        cmd, o->zero1 ? "zero1" : "no-overlap", o->zero1 ? "zero1" : "no-overlap");
        }
        if (o->seq_parallel && !o->dist) {
            return errf(err, errlen,
                        "prnn %s: --seq-parallel needs --dist (mpirun -np N prnn train --dist "
                        "--seq-parallel ...)",
                        cmd);
        }
        if (o->seq_parallel && (o->zero1 || o->no_overlap)) {
            /* every rank holds the same rows: the gradients are summed over
             * the ranks' time slices, not averaged over data shards */
            return errf(err, errlen,
                        "prnn %s: --%s is for data parallelism; --seq-parallel sums the "
                        "gradients of the ranks' time slices instead",
                        cmd, o->zero1 ? "zero1" : "no-overlap");
        }
        if (train_task_is_synthetic(o->task) && o->seq_len < 4) {
            return errf(err, errlen, "prnn %s: --task %s needs --seq-len of at least 4, got %lld",
                        cmd, train_task_name(o->task), (long long)o->seq_len);
        }
    } else if (o->command == TRAIN_CMD_EVAL && o->n_data) {
        o->task = TRAIN_TASK_TEXT;
        o->val_frac = 1.0; /* every byte of the given files is scored */
    }
    if (o->dtype == PRNN_DTYPE_BF16 && o->device != PRNN_DEVICE_CUDA) {
        return errf(err, errlen,
                    "prnn %s: --dtype bf16 needs --device cuda (the CPU computes in f32)", cmd);
    }
    if (o->seq_len > 0 && o->batch > ((int64_t)1 << 34) / o->seq_len) {
        return errf(err, errlen,
                    "prnn %s: --batch %lld x --seq-len %lld is more than 2^34 tokens per batch",
                    cmd, (long long)o->batch, (long long)o->seq_len);
    }
    if (o->command == TRAIN_CMD_TRAIN) {
        join_path(o->model_path, o->out_dir, "model.safetensors");
        if (!train_options_given(o, "log")) join_path(o->log_path, o->out_dir, "log.tsv");
    } else if (!train_options_given(o, "checkpoint")) {
        snprintf(o->model_path, sizeof o->model_path, "out/model.safetensors");
    }
    state_path_for(o->state_path, o->model_path);
    return TRAIN_OPTS_OK;
}

int train_options_parse(train_options *o, train_command cmd, int argc, char *const *argv,
                        char *err, size_t errlen)
{
    if (err && errlen) err[0] = 0;
    if ((int)cmd < 0 || cmd >= TRAIN_CMD_COUNT_) {
        train_options_default(o, TRAIN_CMD_TRAIN);
        return errf(err, errlen, "prnn: unknown subcommand");
    }
    train_options_default(o, cmd);
    const char *cn = command_names[cmd];
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        if (!a) return errf(err, errlen, "prnn %s: a NULL argument", cn);
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) return TRAIN_OPTS_HELP;
        if (strncmp(a, "--", 2) != 0 || !a[2]) {
            return errf(
                err, errlen,
                "prnn %s: unexpected argument '%s' (options start with --; see prnn %s --help)", cn,
                a, cn);
        }
        const char *name = a + 2;
        const char *eq = strchr(name, '=');
        size_t len = eq ? (size_t)(eq - name) : strlen(name);
        int idx;
        const opt_spec *sp = find_spec(name, len, cmd, &idx);
        if (!sp) {
            const char *best = NULL;
            int best_d = 3;
            for (int k = 0; k < N_SPECS; k++) {
                int d = edit_distance(name, len, specs[k].name);
                if ((specs[k].cmds >> cmd & 1) && d < best_d) best_d = d, best = specs[k].name;
            }
            return errf(err, errlen, "prnn %s: unknown option '--%.*s'%s%s%s (see prnn %s --help)",
                        cn, (int)(len > 64 ? 64 : len), name, best ? "; did you mean --" : "",
                        best ? best : "", best ? "?" : "", cn);
        }
        if (!(sp->cmds >> cmd & 1)) {
            const char *owner = "another command";
            for (int c = 0; c < TRAIN_CMD_COUNT_; c++) {
                if (sp->cmds >> c & 1) {
                    owner = command_names[c];
                    break;
                }
            }
            return errf(err, errlen, "prnn %s: --%s is an option of prnn %s, not of prnn %s", cn,
                        sp->name, owner, cn);
        }
        if (sp->kind == K_FLAG) {
            if (eq) return errf(err, errlen, "prnn %s: --%s takes no value", cn, sp->name);
            *(int *)((char *)o + sp->offset) = 1;
        } else {
            const char *val;
            if (eq) {
                val = eq + 1;
            } else if (i + 1 < argc && argv[i + 1] &&
                       (sp->kind == K_STR || strncmp(argv[i + 1], "--", 2) != 0)) {
                val = argv[++i];
            } else {
                return errf(err, errlen, "prnn %s: --%s needs a value (--%s %s)", cn, sp->name,
                            sp->name, sp->metavar);
            }
            int rc = set_value(o, sp, val, cn, err, errlen);
            if (rc) return rc;
        }
        o->given |= (uint64_t)1 << idx;
    }
    return check_options(o, cn, err, errlen);
}

/* ------------------------------------------------------------------------ */
/* Help                                                                     */

/* Stands for a space the wrapping must not break at. */
#define NBSP '\x01'

/* Prints text wrapped at 79 columns, continuation lines indented by indent,
 * the first line starting at column col. */
static void wrap(FILE *f, const char *text, int col, int indent)
{
    const int width = 79;
    const char *p = text;
    while (*p) {
        const char *w = p;
        while (*w && *w != ' ') w++;
        int wl = (int)(w - p);
        if (col > indent && col + 1 + wl > width) {
            fprintf(f, "\n%*s", indent, "");
            col = indent;
        } else if (col > indent) {
            fputc(' ', f);
            col++;
        }
        for (int k = 0; k < wl; k++) fputc(p[k] == NBSP ? ' ' : p[k], f);
        col += wl;
        p = *w ? w + 1 : w;
    }
    fputc('\n', f);
}

static const char *const intro[TRAIN_CMD_COUNT_] = {
    "Trains a byte-level recurrent language model (vocabulary 256) whose recurrence runs as a "
    "parallel scan. With no options it learns the builtin English-like corpus on the CPU in a "
    "few minutes: watch the loss fall, then try prnn sample. Every --eval-interval steps it "
    "prints the validation loss in nats and bits per byte; every --ckpt-interval steps and at "
    "the end it saves OUT/model.safetensors and OUT/model.state (--resume continues from them).",
    "Generates text from a trained model: reads --prompt, then writes --length bytes, each "
    "drawn from the model's next-byte distribution (sharpened by --temperature and --top-k). "
    "The model's configuration comes from the checkpoint.",
    "Measures a trained model's loss: on the given --data files (every byte scored), or on the "
    "validation part of the data it was trained on. Prints nats and bits per byte. The model's "
    "configuration comes from the checkpoint.",
};

static const char *const examples[TRAIN_CMD_COUNT_] = {
    ("  prnn train                        # builtin corpus, small minGRU, CPU\n"
     "  prnn train --data notes.txt --steps 5000 --out runs/notes\n"
     "  prnn train --data src/ --hidden 256 --layers 3 --seq-len 256\n"
     "  prnn train --task selective-copy --seq-len 4096 --device cuda --dtype bf16\n"
     "  prnn train --resume               # continue the run saved in out/\n"
     "  python3 scripts/plot_loss.py out/log.tsv    # draw it into out/log.png\n"),
    ("  prnn sample\n"
     "  prnn sample --prompt \"Where is the fox?\" --length 200 --temperature 0.5\n"
     "  prnn sample --checkpoint runs/notes/model.safetensors --top-k 10 --seed 7\n"),
    ("  prnn eval\n"
     "  prnn eval --checkpoint runs/notes/model.safetensors --data held_out.txt\n"),
};

void train_options_usage(FILE *f, train_command cmd)
{
    if ((int)cmd < 0 || cmd >= TRAIN_CMD_COUNT_) return;
    fprintf(f, "usage: prnn %s [options]\n\n", command_names[cmd]);
    wrap(f, intro[cmd], 0, 0);
    const char *group = NULL;
    for (int i = 0; i < N_SPECS; i++) {
        const opt_spec *sp = &specs[i];
        if (!(sp->cmds >> cmd & 1)) continue;
        if (!group || strcmp(group, sp->group)) {
            group = sp->group;
            fprintf(f, "\n%s:\n", group);
        }
        char head[64];
        int n = snprintf(head, sizeof head, "  --%s%s%s", sp->name, sp->metavar ? " " : "",
                         sp->metavar ? sp->metavar : "");
        fputs(head, f);
        const int indent = 26;
        int col = n;
        if (col >= indent - 1) {
            fprintf(f, "\n%*s", indent, "");
        } else {
            fprintf(f, "%*s", indent - col, "");
        }
        char text[600];
        if (sp->dflt) snprintf(text, sizeof text, "%s (default:%c%s)", sp->help, NBSP, sp->dflt);
        else snprintf(text, sizeof text, "%s", sp->help);
        wrap(f, text, indent, indent);
    }
    fprintf(f, "\n  --help, -h              this text\n\nexamples:\n%s", examples[cmd]);
}

/* ------------------------------------------------------------------------ */
/* Schedule, data, hash                                                     */

double train_lr_at(const train_options *o, int64_t step)
{
    if (step < 0) step = 0;
    if (step < o->warmup) return o->lr * (double)(step + 1) / (double)o->warmup;
    int64_t span = o->steps - 1 - o->warmup;
    if (span <= 0) return o->lr;
    double progress = (double)(step - o->warmup) / (double)span;
    if (progress > 1.0) progress = 1.0;
    return o->min_lr + 0.5 * (o->lr - o->min_lr) * (1.0 + cos(3.14159265358979323846 * progress));
}

train_data_config train_options_data_config(const train_options *o)
{
    train_data_config c;
    memset(&c, 0, sizeof c);
    c.task = o->task;
    c.paths = o->data;
    c.n_paths = o->n_data;
    c.val_frac = o->val_frac;
    c.T = o->seq_len;
    c.B = o->batch;
    c.order = o->order;
    c.seed = o->seed;
    return c;
}

uint64_t train_options_model_hash(const train_options *o)
{
    char s[256];
    int n =
        snprintf(s, sizeof s,
                 "prnn-model-v1;cell=%s;layers=%lld;hidden=%lld;bidirectional=%d;norm=%s;vocab=%d",
                 name_of(cell_names, (int)o->cell), (long long)o->layers, (long long)o->hidden,
                 o->bidirectional ? 1 : 0, name_of(norm_names, (int)o->norm), TRAIN_VOCAB);
    return train_fnv1a64(TRAIN_FNV1A64_INIT, s, n);
}

/* ------------------------------------------------------------------------ */
/* Metadata                                                                 */

static char *dup_str(const char *s)
{
    size_t n = strlen(s) + 1;
    char *p = malloc(n);
    if (p) memcpy(p, s, n);
    return p;
}

int train_meta_set(train_meta *m, const char *key, const char *value)
{
    char *v = dup_str(value);
    if (!v) return -1;
    for (int64_t i = 0; i < m->n; i++) {
        if (!strcmp(m->kv[i].key, key)) {
            free((char *)m->kv[i].value);
            m->kv[i].value = v;
            return 0;
        }
    }
    if (m->n == m->cap) {
        int64_t cap = m->cap ? 2 * m->cap : 16;
        train_kv *q = realloc(m->kv, (size_t)cap * sizeof *q);
        if (!q) {
            free(v);
            return -1;
        }
        m->kv = q;
        m->cap = cap;
    }
    char *k = dup_str(key);
    if (!k) {
        free(v);
        return -1;
    }
    m->kv[m->n].key = k;
    m->kv[m->n].value = v;
    m->n++;
    return 0;
}

void train_meta_free(train_meta *m)
{
    for (int64_t i = 0; i < m->n; i++) {
        free((char *)m->kv[i].key);
        free((char *)m->kv[i].value);
    }
    free(m->kv);
    memset(m, 0, sizeof *m);
}

int train_options_metadata(const train_options *o, train_meta *m)
{
    char b[64];
    int rc = 0;
#define SET(k, v) rc |= train_meta_set(m, (k), (v))
#define SETF(k, ...) (snprintf(b, sizeof b, __VA_ARGS__), SET(k, b))
    SET("format", "prnn");
    SET("format_version", "1");
    SET("cell", name_of(cell_names, (int)o->cell));
    SETF("layers", "%lld", (long long)o->layers);
    SETF("hidden", "%lld", (long long)o->hidden);
    SETF("bidirectional", "%d", o->bidirectional ? 1 : 0);
    SET("norm", name_of(norm_names, (int)o->norm));
    SETF("dropout", "%.17g", o->dropout);
    SETF("vocab", "%d", TRAIN_VOCAB);
    SET("dtype", name_of(dtype_names, (int)o->dtype));
    SET("task", train_task_name(o->task) ? train_task_name(o->task) : "?");
    size_t total = 1;
    for (int i = 0; i < o->n_data; i++) total += strlen(o->data[i]) + 1;
    char *joined = malloc(total);
    if (!joined) return -1;
    joined[0] = 0;
    for (int i = 0, k = 0; i < o->n_data; i++) {
        k += snprintf(joined + k, total - (size_t)k, "%s%s", i ? "\n" : "", o->data[i]);
    }
    SET("data", joined);
    free(joined);
    SETF("val_frac", "%.17g", o->val_frac);
    SET("data_order", train_order_name(o->order) ? train_order_name(o->order) : "?");
    SETF("seq_len", "%lld", (long long)o->seq_len);
    SETF("seed", "%llu", (unsigned long long)o->seed);
#undef SET
#undef SETF
    return rc ? -1 : 0;
}

/* Reads metadata key as an integer within the option's range. */
static int meta_i64(const train_st_file *f, const char *label, const char *key, int64_t lo,
                    int64_t hi, int64_t *out, train_err *e)
{
    const char *v = train_st_meta(f, key);
    int64_t x;
    if (!v)
        return train_err_set(e, TRAIN_IO_ERR_CONFIG, "%s: metadata '%s' is missing", label, key);
    if (parse_i64(v, &x) || x < lo || x > hi) {
        return train_err_set(e, TRAIN_IO_ERR_VALUE,
                             "%s: metadata '%s' = '%.40s' is not an integer from %lld to %lld",
                             label, key, v, (long long)lo, (long long)hi);
    }
    *out = x;
    return 0;
}

static int meta_enum(const train_st_file *f, const char *label, const char *key, const named *t,
                     int *out, train_err *e)
{
    const char *v = train_st_meta(f, key);
    if (!v)
        return train_err_set(e, TRAIN_IO_ERR_CONFIG, "%s: metadata '%s' is missing", label, key);
    if (lookup(t, v, out)) {
        char names[200];
        return train_err_set(e, TRAIN_IO_ERR_VALUE, "%s: metadata '%s' = '%.40s' is not %s", label,
                             key, v, list_names(t, names, sizeof names));
    }
    return 0;
}

int train_options_from_checkpoint(train_options *o, const train_st_file *f, train_err *e)
{
    const char *label = f->path ? f->path : "checkpoint";
    const char *fmt = train_st_meta(f, "format");
    if (!fmt || strcmp(fmt, "prnn")) {
        return train_err_set(e, TRAIN_IO_ERR_CONFIG,
                             "%s: not a prnn checkpoint (its metadata has no format = \"prnn\")",
                             label);
    }
    const char *ver = train_st_meta(f, "format_version");
    if (!ver || strcmp(ver, "1")) {
        return train_err_set(e, TRAIN_IO_ERR_VERSION,
                             "%s: checkpoint format version '%.20s', this program reads 1", label,
                             ver ? ver : "(missing)");
    }
    int64_t layers, hidden, bidir, vocab, seq_len;
    int cell, task, order, norm;
    int rc;
    if ((rc = meta_enum(f, label, "cell", cell_names, &cell, e)) ||
        (rc = meta_i64(f, label, "layers", 1, 64, &layers, e)) ||
        (rc = meta_i64(f, label, "hidden", 1, 65536, &hidden, e)) ||
        (rc = meta_i64(f, label, "bidirectional", 0, 1, &bidir, e)) ||
        (rc = meta_enum(f, label, "norm", norm_names, &norm, e)) ||
        (rc = meta_i64(f, label, "vocab", TRAIN_VOCAB, TRAIN_VOCAB, &vocab, e)) ||
        (rc = meta_enum(f, label, "task", task_names, &task, e)) ||
        (rc = meta_enum(f, label, "data_order", order_names, &order, e)) ||
        (rc = meta_i64(f, label, "seq_len", 1, 1073741824, &seq_len, e))) {
        return rc;
    }
    const char *vf = train_st_meta(f, "val_frac"), *seed = train_st_meta(f, "seed");
    const char *dp = train_st_meta(f, "dropout");
    double dropout;
    if (!dp || parse_f64(dp, &dropout) || !(dropout >= 0 && dropout <= 0.95)) {
        return train_err_set(e, TRAIN_IO_ERR_VALUE,
                             "%s: metadata 'dropout' is missing or not in [0, 0.95]", label);
    }
    const char *data = train_st_meta(f, "data");
    double val_frac;
    uint64_t seed_v;
    if (!vf || parse_f64(vf, &val_frac) || !(val_frac > 0 && val_frac <= 1)) {
        return train_err_set(e, TRAIN_IO_ERR_VALUE,
                             "%s: metadata 'val_frac' is missing or not in (0, 1]", label);
    }
    if (!seed || parse_u64(seed, &seed_v)) {
        return train_err_set(e, TRAIN_IO_ERR_VALUE,
                             "%s: metadata 'seed' is missing or not an integer", label);
    }
    if (!data)
        return train_err_set(e, TRAIN_IO_ERR_CONFIG, "%s: metadata 'data' is missing", label);
    if (task == TRAIN_TASK_TEXT && !*data) {
        return train_err_set(e, TRAIN_IO_ERR_VALUE, "%s: a text task without 'data' paths", label);
    }

    o->cell = (prnn_cell_type)cell;
    o->layers = layers;
    o->hidden = hidden;
    o->bidirectional = (int)bidir;
    o->norm = (prnn_norm_type)norm;
    o->dropout = dropout;
    if (!train_options_given(o, "seq-len")) o->seq_len = seq_len;
    if (!train_options_given(o, "seed")) o->seed = seed_v;
    if (o->n_data == 0) { /* evaluate on the data the model trained on */
        o->task = (train_task)task;
        o->order = (train_order)order;
        o->val_frac = val_frac;
        free(o->owned);
        o->owned = dup_str(data);
        if (!o->owned) return train_err_set(e, TRAIN_IO_ERR_NOMEM, "%s: out of memory", label);
        o->n_data = 0;
        if (task == TRAIN_TASK_TEXT) {
            for (char *p = o->owned; p;) {
                if (o->n_data == TRAIN_MAX_PATHS) {
                    return train_err_set(e, TRAIN_IO_ERR_VALUE, "%s: more than %d data paths",
                                         label, TRAIN_MAX_PATHS);
                }
                o->data[o->n_data++] = p;
                p = strchr(p, '\n');
                if (p) *p++ = 0;
            }
        }
    }
    if (train_task_is_synthetic(o->task) && o->seq_len < 4) {
        return train_err_set(e, TRAIN_IO_ERR_VALUE, "%s: task %s with seq_len %lld (at least 4)",
                             label, train_task_name(o->task), (long long)o->seq_len);
    }
    if (o->batch > ((int64_t)1 << 34) / o->seq_len) {
        return train_err_set(e, TRAIN_IO_ERR_VALUE, "%s: batch %lld x seq_len %lld is too large",
                             label, (long long)o->batch, (long long)o->seq_len);
    }
    return TRAIN_IO_OK;
}
