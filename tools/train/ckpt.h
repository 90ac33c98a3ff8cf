/*
 * ckpt.h - checkpoints: the weights in safetensors format and the training
 * state (optimizer moments, step, data position, random generators) in a
 * small binary file of prnn's own.
 *
 * Weights: a .safetensors file any safetensors reader can open:
 *   8 bytes    header length N, little-endian u64
 *   N bytes    JSON: {"__metadata__": {"key": "value", ...},
 *                     "name": {"dtype": "F32", "shape": [..], "data_offsets": [begin, end]},
 *                     ...}, padded with spaces to a multiple of 8
 *   the rest   tensor bytes, little-endian, row-major; offsets count from here
 * The metadata carries the model configuration as strings (see options.h),
 * so `prnn sample` and `prnn eval` rebuild the model from the file alone.
 *
 * Training state (little-endian, offsets in bytes):
 *   0    "PRNNSTAT"            magic
 *   8    u32 version (1)       12  u32 header bytes (136)
 *   16   u64 config hash       of the model configuration the moments belong to
 *   24   i64 step              32  i64 tokens trained on
 *   40   i64 batches drawn     48  i64 sequential data position
 *   56   32 bytes              data sampler's xoshiro256** state
 *   88   32 bytes              the trainer's other generator
 *   120  f64 best validation loss
 *   128  i64 P                 parameters
 *   136  f32 m[P], f32 v[P]    AdamW first and second moments
 *   end  u64 FNV-1a 64 of every byte before it
 *
 * Both are written with train_atomic_write(): a crash leaves the previous
 * checkpoint whole. The readers check everything before trusting it (file
 * kind, every size against the file's length with overflow checks, JSON
 * syntax and shape, offsets, checksum) and fail with a message that names
 * the file and the fault, and a code (fileio.h) that says its class.
 */
#ifndef PRNN_TRAIN_CKPT_H
#define PRNN_TRAIN_CKPT_H

#include <stdint.h>

#include "data.h"
#include "fileio.h"
#include "json.h"
#include "rng.h"

/* ------------------------------------------------------------------------ */
/* safetensors                                                              */

typedef enum train_st_dtype {
    TRAIN_ST_F64 = 0,
    TRAIN_ST_F32,
    TRAIN_ST_F16,
    TRAIN_ST_BF16,
    TRAIN_ST_I64,
    TRAIN_ST_I32,
    TRAIN_ST_I16,
    TRAIN_ST_I8,
    TRAIN_ST_U8,
    TRAIN_ST_BOOL,
    TRAIN_ST_DTYPE_COUNT_
} train_st_dtype;

/* The safetensors spelling ("F32", "BF16", ...), NULL for bad values. */
const char *train_st_dtype_name(train_st_dtype dtype);
int64_t train_st_dtype_size(train_st_dtype dtype);
int train_st_dtype_parse(const char *name, train_st_dtype *dtype);

#define TRAIN_ST_MAX_DIMS 8
/* The reference implementation's limit on the JSON header. */
#define TRAIN_ST_MAX_HEADER ((int64_t)100 << 20)
/* The largest checkpoint file read (whole, into memory). */
#define TRAIN_ST_MAX_FILE ((int64_t)1 << 40)

typedef struct train_kv {
    const char *key, *value;
} train_kv;

typedef struct train_st_tensor {
    const char *name;
    train_st_dtype dtype;
    int ndim;
    int64_t shape[TRAIN_ST_MAX_DIMS];
    const void *data; /* writing: host memory; read: inside the file buffer,
                         possibly unaligned (copy it out with memcpy) */
    int64_t nbytes;   /* read: bytes of data (the writer computes it) */
} train_st_tensor;

typedef struct train_st_file {
    char *path;               /* for messages */
    uint8_t *buf;             /* the file's bytes when read from disk */
    train_json_doc doc;
    train_st_tensor *tensors; /* in data-offset order */
    int64_t n_tensors;
    train_kv *meta;
    int64_t n_meta;
} train_st_file;

/* Writes tensors (in the given order) and metadata pairs to path, crash-safely.
 * Names must be unique, non-empty, valid UTF-8 and not "__metadata__". */
int train_st_write(const char *path, const train_st_tensor *tensors, int64_t n_tensors,
                   const train_kv *meta, int64_t n_meta, train_err *e);

/* Reads and validates a file. On failure f is empty and train_st_free() safe. */
int train_st_read(train_st_file *f, const char *path, train_err *e);

/* The same checks on bytes in memory (buf must outlive f); label names the
 * bytes in messages. */
int train_st_parse(train_st_file *f, const uint8_t *buf, int64_t n, const char *label,
                   train_err *e);

void train_st_free(train_st_file *f);

const train_st_tensor *train_st_find(const train_st_file *f, const char *name);
/* The metadata value of key, or NULL. */
const char *train_st_meta(const train_st_file *f, const char *key);

/* What the model expects of one tensor, and where to copy it. */
typedef struct train_st_slot {
    const char *name;
    train_st_dtype dtype;
    int ndim;
    int64_t shape[TRAIN_ST_MAX_DIMS];
    void *dst; /* host memory of the tensor's size, or NULL to only check */
} train_st_slot;

/*
 * Checks that the file holds exactly the slots' tensors, each with the
 * slot's dtype and shape (TRAIN_IO_ERR_TENSOR for a missing or an extra
 * tensor, _DTYPE, _SHAPE with both shapes in the message), then copies each
 * into its dst. Nothing is copied unless everything matches.
 */
int train_st_load(const train_st_file *f, const train_st_slot *slots, int64_t n_slots,
                  train_err *e);

/* ------------------------------------------------------------------------ */
/* Training state                                                           */

#define TRAIN_STATE_VERSION 1
#define TRAIN_STATE_HEADER 136
/* 2^40 parameters: far beyond any model this trainer runs, and keeps every
 * byte count of the file far from overflow. */
#define TRAIN_STATE_MAX_PARAMS ((int64_t)1 << 40)

typedef struct train_state {
    uint64_t config_hash;
    int64_t step;           /* optimizer steps taken */
    int64_t tokens;         /* tokens trained on */
    train_sampler sampler;  /* data generator and position */
    train_rng rng;          /* the trainer's other randomness */
    double best_val_loss;
    int64_t n_params;
    float *m, *v;           /* (n_params) AdamW moments, host memory */
} train_state;

int train_state_write(const char *path, const train_state *s, train_err *e);

/* Reads and validates; m and v are new memory (train_state_free). */
int train_state_read(train_state *s, const char *path, train_err *e);
int train_state_parse(train_state *s, const uint8_t *buf, int64_t n, const char *label,
                      train_err *e);

/* TRAIN_IO_ERR_CONFIG unless the state belongs to this model: the same
 * configuration hash and parameter count. */
int train_state_check(const train_state *s, const char *label, uint64_t config_hash,
                      int64_t n_params, train_err *e);

/* Frees m and v (only when the state came from a reader). */
void train_state_free(train_state *s);

#endif /* PRNN_TRAIN_CKPT_H */
