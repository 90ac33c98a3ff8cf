/*
 * options.h - the command lines of `prnn train`, `prnn sample` and
 * `prnn eval` parsed into one configuration, with defaults, range checks,
 * per-subcommand --help, the learning-rate schedule, and the model
 * configuration as checkpoint metadata and back.
 *
 * The defaults train a 2-layer minGRU of 128 units on the builtin corpus
 * (data.h) for 1000 steps of 16 x 128 bytes: a byte model on text learns
 * from the first steps (the loss falls from ln 256 = 5.55 nats through the
 * unigram entropy within a few dozen steps, then keeps falling as words and
 * grammar are learnt, and samples turn readable), so progress is visible in
 * a few minutes on two CPU cores. The synthetic tasks, by contrast, sit at
 * their chance loss until memory forms and then drop, which makes them the
 * better test of long-range memory but a poor first run.
 */
#ifndef PRNN_TRAIN_OPTIONS_H
#define PRNN_TRAIN_OPTIONS_H

#include <stdint.h>
#include <stdio.h>

#include "ckpt.h"
#include "data.h"
#include "prnn.h"
#include "prnn_cell.h"
#include "prnn_model.h"

typedef enum train_command {
    TRAIN_CMD_TRAIN = 0,
    TRAIN_CMD_SAMPLE,
    TRAIN_CMD_EVAL,
    TRAIN_CMD_COUNT_
} train_command;

/* "train", "sample", "eval". */
const char *train_command_name(train_command cmd);

#define TRAIN_MAX_PATHS 64
#define TRAIN_PATH_MAX 4096

typedef struct train_options {
    train_command command;

    /* data */
    train_task task;
    const char *data[TRAIN_MAX_PATHS]; /* --data, in order (into argv or owned) */
    int n_data;
    double val_frac;
    train_order order;

    /* model */
    prnn_cell_type cell;
    int64_t layers;
    int64_t hidden;      /* the model's width (prnn_model_config.dim): embedding,
                            residual stream and each layer's output; a
                            bidirectional layer gives each direction half */
    int bidirectional;
    prnn_norm_type norm;
    double dropout;      /* on each cell's output, in [0, 1) */

    /* training */
    int64_t seq_len; /* eval: 0 until set from the checkpoint */
    int64_t batch;
    int64_t steps;
    double lr, min_lr;
    int64_t warmup;
    double weight_decay;
    double grad_clip; /* 0 = no clipping */
    prnn_dtype dtype;
    prnn_device device;
    int64_t threads;  /* 0 = all cores */
    int dist;         /* data parallel over an MPI job's processes (dist.h) */
    int zero1;        /* with dist: the optimizer state and step sharded (ZeRO-1) */
    int no_overlap;   /* with dist: average the gradients after the backward */
    int seq_parallel; /* with dist: the time axis split instead (seqpar.h) */
    uint64_t seed;
    int64_t eval_interval; /* 0 = evaluate only at the end */
    int64_t eval_batches;  /* eval: 0 = the whole validation text */
    int64_t ckpt_interval; /* 0 = save only at the end */
    int resume;
    int64_t stop_after;    /* end this invocation after N steps (0 = off) */
    int phase_times;       /* time each phase of a step (synchronizing) */
    int deterministic;     /* fixed-order algorithms only (PRNN_SCAN_FIXED) */
    int64_t recompute;     /* cell memory option: keep every K-th state (0 = all) */

    /* files */
    char out_dir[TRAIN_PATH_MAX];    /* the trainer creates it (train_make_dirs) */
    char
        model_path[TRAIN_PATH_MAX]; /* train: <out>/model.safetensors; sample, eval: --checkpoint */
    char state_path[TRAIN_PATH_MAX]; /* the state file next to model_path */
    char log_path[TRAIN_PATH_MAX];   /* --log, or <out>/log.tsv */

    /* sample */
    const char *prompt;
    int64_t length;
    double temperature; /* 0 = always the likeliest byte */
    int64_t top_k;      /* 0 = all 256 */

    /* which options the command line gave, by name, so that values from a
     * checkpoint fill in only the rest */
    uint64_t given;
    char *owned; /* strings taken from a checkpoint (train_options_free) */
} train_options;

/* train_options_parse results */
#define TRAIN_OPTS_OK 0
#define TRAIN_OPTS_HELP 1  /* --help was asked for: print train_options_usage, exit 0 */
#define TRAIN_OPTS_ERROR 2 /* err holds the message: print it, exit 2 */

/* The defaults of a subcommand. */
void train_options_default(train_options *o, train_command cmd);

/*
 * Parses the arguments after the subcommand (argv[0] is the first option).
 * Strings point into argv, which must outlive o. Options are "--name value"
 * or "--name=value"; flags take no value. Unknown options, missing values,
 * malformed or out-of-range numbers and contradictory choices give
 * TRAIN_OPTS_ERROR and a message naming the option, e.g.
 * "prnn train: --hidden wants an integer from 1 to 65536, got '0'".
 */
int train_options_parse(train_options *o, train_command cmd, int argc, char *const *argv,
                        char *err, size_t errlen);

/* The --help text of a subcommand. */
void train_options_usage(FILE *f, train_command cmd);

/* 1 when the command line gave the option (its name without dashes). */
int train_options_given(const train_options *o, const char *name);

void train_options_free(train_options *o);

/* Learning rate for optimizer step `step` (0-based): linear warmup over
 * `warmup` steps to lr, then a cosine from lr down to min_lr at the last step. */
double train_lr_at(const train_options *o, int64_t step);

/* The data set configuration these options describe (paths point into o). */
train_data_config train_options_data_config(const train_options *o);

/* A hash of what fixes the parameters' shapes and meaning (cell, layers,
 * hidden, bidirectional, vocabulary): the training state records it so that
 * resuming with a different model is refused. */
uint64_t train_options_model_hash(const train_options *o);

/* ------------------------------------------------------------------------ */
/* Configuration as checkpoint metadata                                     */

/* A list of key/value strings that owns its memory. */
typedef struct train_meta {
    train_kv *kv;
    int64_t n, cap;
} train_meta;

/* Adds (or replaces) key = value; -1 when out of memory. */
int train_meta_set(train_meta *m, const char *key, const char *value);
void train_meta_free(train_meta *m);

/*
 * The metadata a checkpoint of these options carries: format "prnn",
 * format_version, cell, layers, hidden, bidirectional, norm, dropout, vocab,
 * dtype, task,
 * data (paths separated by newlines), val_frac, data_order, seq_len, seed.
 * The trainer adds its own keys (step, ...) with train_meta_set.
 */
int train_options_metadata(const train_options *o, train_meta *m);

/*
 * Sets the model configuration (cell, layers, hidden, bidirectional, norm,
 * dropout) and,
 * unless the command line gave them, the data options (task, data, val_frac,
 * data_order, seq_len, seed, dtype) from a checkpoint's metadata: what
 * `prnn sample` and `prnn eval` do after reading the file. Every value is
 * checked with the same limits as the command line; a file without
 * format = "prnn" metadata is TRAIN_IO_ERR_CONFIG.
 */
int train_options_from_checkpoint(train_options *o, const train_st_file *f, train_err *e);

#endif /* PRNN_TRAIN_OPTIONS_H */
