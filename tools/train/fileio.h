/*
 * fileio.h - what the trainer's file readers and writers share: an error
 * record (a code a program can test plus a message a person can read), the
 * FNV-1a checksum, little-endian field access, reading a whole file with a
 * size cap, the crash-safe write every checkpoint goes through, and a growing
 * text buffer for the text those writers build.
 *
 * Crash safety: train_atomic_write() writes into a temporary file in the
 * destination's directory, flushes and fsyncs it, renames it over the
 * destination and fsyncs the directory. A reader therefore sees either the
 * old file or the complete new one, never a mixture, even across a power cut.
 */
#ifndef PRNN_TRAIN_FILEIO_H
#define PRNN_TRAIN_FILEIO_H

#include <stdint.h>
#include <stdio.h>

/* What went wrong, one code per class of fault so that tests and callers can
 * tell them apart; the message in train_err says where and why. */
typedef enum train_io_code {
    TRAIN_IO_OK = 0,
    TRAIN_IO_ERR_ARG,       /* the caller passed something unusable */
    TRAIN_IO_ERR_NOMEM,     /* an allocation failed */
    TRAIN_IO_ERR_OPEN,      /* missing, unreadable or not a regular file */
    TRAIN_IO_ERR_READ,      /* the operating system failed a read */
    TRAIN_IO_ERR_WRITE,     /* creating, writing, syncing or renaming failed */
    TRAIN_IO_ERR_EMPTY,     /* the file has no bytes */
    TRAIN_IO_ERR_TRUNCATED, /* the file ends before its own sizes say */
    TRAIN_IO_ERR_MAGIC,     /* not a file of the expected kind */
    TRAIN_IO_ERR_VERSION,   /* a format version this program does not know */
    TRAIN_IO_ERR_JSON,      /* the JSON header is malformed or of the wrong shape */
    TRAIN_IO_ERR_SIZE,      /* a size is absurd, overflows, or trailing bytes */
    TRAIN_IO_ERR_OFFSETS,   /* tensor data offsets out of range, overlapping or gapped */
    TRAIN_IO_ERR_DTYPE,     /* unknown dtype, or not the dtype the model expects */
    TRAIN_IO_ERR_SHAPE,     /* not the shape the model expects */
    TRAIN_IO_ERR_TENSOR,    /* a tensor the model needs is missing, or one is extra */
    TRAIN_IO_ERR_CHECKSUM,  /* the stored checksum does not match the contents */
    TRAIN_IO_ERR_CONFIG,    /* the file belongs to a different model configuration */
    TRAIN_IO_ERR_DATA,      /* training data unusable: no files, too small */
    TRAIN_IO_ERR_VALUE,     /* a field holds a value it can never have */
    TRAIN_IO_CODE_COUNT_
} train_io_code;

typedef struct train_err {
    train_io_code code;
    char msg[1024];
} train_err;

/* A short name of a code ("truncated", "checksum", ...). Never NULL. */
const char *train_io_code_name(train_io_code code);

/* Records an error (when e is not NULL) and returns code, so that a failing
 * path reads `return train_err_set(e, TRAIN_IO_ERR_..., "%s: ...", path);`. */
int train_err_set(train_err *e, train_io_code code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* ------------------------------------------------------------------------ */
/* Checksums and little-endian fields                                       */

#define TRAIN_FNV1A64_INIT 0xcbf29ce484222325ull

/* FNV-1a 64 of n bytes continuing from h (start with TRAIN_FNV1A64_INIT). */
uint64_t train_fnv1a64(uint64_t h, const void *data, int64_t n);

static inline void train_put_u32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i));
}
static inline void train_put_u64(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++) p[i] = (uint8_t)(v >> (8 * i));
}
static inline uint32_t train_get_u32(const uint8_t *p)
{
    uint32_t v = 0;
    for (int i = 3; i >= 0; i--) v = (v << 8) | p[i];
    return v;
}
static inline uint64_t train_get_u64(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--) v = (v << 8) | p[i];
    return v;
}

/* 1 on a little-endian host. Tensor data is stored little-endian and copied
 * as raw bytes, so the writers and readers refuse to run elsewhere. */
int train_host_is_little_endian(void);

/* ------------------------------------------------------------------------ */
/* Whole files                                                              */

/*
 * Reads the regular file at path into a new buffer (*buf, freed with free();
 * one spare NUL byte follows the data). Files larger than max_bytes fail with
 * TRAIN_IO_ERR_SIZE before anything is allocated. An empty file succeeds with
 * *n = 0: whether that is an error is the caller's decision.
 */
int train_read_file(const char *path, int64_t max_bytes, uint8_t **buf, int64_t *n, train_err *e);

/* Writes a file's contents to f. Returns 0, or an error code with e set. */
typedef int (*train_write_fn)(FILE *f, void *ctx, train_err *e);

/*
 * Replaces path with what fn writes, crash-safely (see the top of this file).
 * On any failure the old file at path is left as it was, the temporary file
 * is removed, and e says which step failed.
 */
int train_atomic_write(const char *path, train_write_fn fn, void *ctx, train_err *e);

/* Creates directory path and its missing parents (mkdir -p); an existing
 * directory is fine, an existing file in the way is an error. */
int train_make_dirs(const char *path, train_err *e);

/* fwrite that reports a short write as TRAIN_IO_ERR_WRITE naming path. */
int train_fwrite(FILE *f, const void *data, size_t n, const char *path, train_err *e);

/* A growing NUL-terminated text, empty when zero-initialized; the owner
 * frees p. A failed allocation or format sets failed, and every later write
 * is then a no-op, so a builder checks failed once when it is done. */
typedef struct train_text {
    char *p;
    size_t n, cap;
    int failed;
} train_text;

void train_text_put(train_text *t, const char *s, size_t len);
void train_text_puts(train_text *t, const char *s);
void train_text_printf(train_text *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#endif /* PRNN_TRAIN_FILEIO_H */
