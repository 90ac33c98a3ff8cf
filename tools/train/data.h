/*
 * data.h - what the trainer learns from: byte-level text (files, directory
 * trees, or the built-in corpus) and synthetic long-range tasks, served as
 * batches of input tokens, target tokens and a loss mask.
 *
 * Every task is next-token prediction over a vocabulary of 256 (bytes), so
 * one model interface serves them all: the model reads x[b][0..t] and is
 * scored on predicting y[b][t] wherever mask[b][t] is 1; elsewhere y is -1,
 * the target prnn_model_forward ignores, so y goes to the model as it is.
 * For text, a batch row is a window of T+1 consecutive bytes w:
 * x = w[0..T), y = w[1..T+1), and the mask is all ones. For the synthetic
 * tasks the row is one example and the mask selects the answers only.
 *
 * Text sources. One file, several files, or directory trees, concatenated in
 * the order given (a directory's entries in byte order of their names,
 * recursively). Explicitly named files are taken whatever they hold. Inside
 * directories, hidden entries (names starting with '.') and symbolic links
 * are skipped, as are files that look binary (a NUL byte in their first
 * 8 KiB, the test git uses), so pointing the trainer at a source tree reads
 * its text and not its object files. The last val_frac of the concatenation
 * is held out for validation.
 *
 * Synthetic tasks (sequence length T, any T from 4 up to millions):
 *
 *   selective-copy  K = min(16, T/4) data tokens 'a'..'p' scattered at random
 *                   positions in a field of noise '.', then '|', then the K
 *                   tokens again in order. Scored: the K answers. Without
 *                   memory the best loss is ln 16 = 2.773 nats per answer.
 *   adding          T-2 digits; two are marked (written 'A'..'J' instead of
 *                   '0'..'9'), one in each half; then '=' and their sum as two
 *                   digits. Scored: the two sum digits. Without memory the best
 *                   loss is H(sum of two uniform digits)/2 = 1.397 nats.
 *   delayed-recall  K = min(10, T/4) tokens 'a'..'h' at the start, a delay of
 *                   '.', then '|' and the K tokens again. Scored: the K
 *                   answers. Without memory: ln 8 = 2.079 nats per answer.
 *
 * Randomness comes from a train_sampler whose whole state (xoshiro256** words,
 * batches drawn, stream position) is saved in the training state file, so a
 * resumed run sees exactly the batches an uninterrupted one would have.
 * Evaluation batches depend only on the data and their index: the same
 * validation set at every evaluation and in every run.
 *
 * Size letters: B batch rows, T time steps (tokens per row).
 */
#ifndef PRNN_TRAIN_DATA_H
#define PRNN_TRAIN_DATA_H

#include <stdint.h>

#include "fileio.h"
#include "rng.h"

#define TRAIN_VOCAB 256

typedef enum train_task {
    TRAIN_TASK_BUILTIN = 0,     /* the generated corpus compiled into prnn */
    TRAIN_TASK_TEXT,            /* files and directories */
    TRAIN_TASK_SELECTIVE_COPY,
    TRAIN_TASK_ADDING,
    TRAIN_TASK_DELAYED_RECALL,
    TRAIN_TASK_COUNT_
} train_task;

/* "builtin", "text", "selective-copy", "adding", "delayed-recall". */
const char *train_task_name(train_task task);
/* Parses those names; -1 for anything else. */
int train_task_parse(const char *name, train_task *task);
/* 1 for the synthetic tasks. */
int train_task_is_synthetic(train_task task);

/* How training windows are drawn from text (synthetic tasks ignore it). */
typedef enum train_order {
    TRAIN_ORDER_RANDOM = 0, /* each row a window at a uniformly random offset */
    TRAIN_ORDER_SEQUENTIAL, /* row b reads its own contiguous stretch of the
                               training text, T bytes further each batch, so a
                               model may carry its state from batch to batch */
    TRAIN_ORDER_COUNT_
} train_order;

const char *train_order_name(train_order order);
int train_order_parse(const char *name, train_order *order);

/* ------------------------------------------------------------------------ */
/* Batches                                                                  */

typedef struct train_batch {
    int64_t B, T;
    int32_t *x;        /* (B, T) input tokens in [0, 256) */
    int32_t *y;        /* (B, T) targets: y[b][t] is the token that follows
                          x[b][0..t], or -1 where it is not scored (the
                          cross-entropy's ignore value) */
    uint8_t *mask;     /* (B, T) 1 where y is scored, else 0 (y != -1) */
    int64_t n_counted; /* number of ones in mask */
    int continues;     /* 1 when every row continues the previous batch's
                          row (sequential order, no wrap): a stateful model may
                          start from the states it ended with */
} train_batch;

/* Allocates a (B, T) batch; -1 on bad sizes or out of memory. */
int train_batch_init(train_batch *batch, int64_t B, int64_t T);
void train_batch_free(train_batch *batch);

/* ------------------------------------------------------------------------ */
/* Data sets                                                                */

typedef struct train_data_config {
    train_task task;
    const char *const *paths; /* TEXT: files and directories */
    int n_paths;
    double val_frac;          /* text: fraction held out, in (0, 1]; 1 makes
                                 everything validation (evaluating a file) */
    int64_t T;                /* sequence length the batches will have */
    int64_t B;                /* batch rows (sequential order splits by it) */
    train_order order;
    uint64_t seed;            /* synthetic validation examples derive from it */
} train_data_config;

typedef struct train_data {
    train_data_config cfg;    /* paths not kept: they may be freed after open */
    /* text tasks */
    uint8_t *text;            /* (n_text) the whole concatenation */
    int64_t n_text;
    int64_t n_train;          /* [0, n_train) trains, [n_train, n_text) validates */
    int64_t n_files;          /* files read */
    int64_t n_skipped;        /* files inside directories skipped as binary */
    /* synthetic tasks */
    int64_t k;                /* tokens to remember (selective-copy, delayed-recall) */
    /* every task */
    double chance_loss;       /* nats per counted token of a predictor without
                                 memory (text: the unigram entropy of the
                                 training text) */
    char describe[256];       /* one line for the log: what the data is */
} train_data;

/*
 * Loads or sets up a data set for batches of (B, T). Fails with a message
 * naming the file or the number at fault: no readable file, a text too short
 * for one training window (n_train < T+1 in training, validation < 2 bytes),
 * T below a synthetic task's minimum of 4.
 */
int train_data_open(train_data *d, const train_data_config *cfg, train_err *e);
void train_data_free(train_data *d);

/* The generated English-like corpus of the builtin task (about 64 KiB), new
 * memory the caller frees. The same bytes on every machine and every run. */
uint8_t *train_corpus_builtin(int64_t *n);

/* ------------------------------------------------------------------------ */
/* Sampling                                                                 */

typedef struct train_sampler {
    train_rng rng;
    int64_t batches; /* training batches drawn so far */
    int64_t pos;     /* sequential order: offset of the next window in each
                        row's stretch of the training text */
} train_sampler;

void train_sampler_init(train_sampler *s, uint64_t seed);

/* The next training batch (batch->B, batch->T must match the config). */
int train_data_next(const train_data *d, train_sampler *s, train_batch *batch);

/*
 * Validation batch number index (0, 1, ...), the same on every call. Text:
 * consecutive windows of the held-out bytes, stride T, so every validation
 * byte after the first is a target exactly once over
 * train_data_eval_batches() batches; rows and positions past the end carry a
 * zero mask. Synthetic: B fresh examples from the (seed, index) stream.
 */
int train_data_eval(const train_data *d, int64_t index, train_batch *batch);

/* Batches that cover the validation text once (text tasks), or -1 for the
 * synthetic tasks, whose supply is endless. */
int64_t train_data_eval_batches(const train_data *d);

/* Bits per byte of a loss in nats per byte. */
double train_bits_per_byte(double nats);

#endif /* PRNN_TRAIN_DATA_H */
