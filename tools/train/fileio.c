/*
 * fileio.c - error records, FNV-1a, whole-file reads and crash-safe writes
 * for the trainer's checkpoint, state and data files (see fileio.h).
 */
#define _POSIX_C_SOURCE 200809L /* mkstemp, fsync, fdopen, O_DIRECTORY */

#include "fileio.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static const char *const code_names[TRAIN_IO_CODE_COUNT_] = {
    "ok",        "bad argument", "out of memory", "cannot open", "read error",
    "write error", "empty",      "truncated",     "wrong magic", "unknown version",
    "bad JSON",  "bad size",     "bad offsets",   "dtype mismatch", "shape mismatch",
    "tensor missing or extra",   "checksum mismatch", "config mismatch", "unusable data",
    "bad value",
};

const char *train_io_code_name(train_io_code code)
{
    if ((int)code < 0 || code >= TRAIN_IO_CODE_COUNT_) return "unknown error";
    return code_names[code];
}

int train_err_set(train_err *e, train_io_code code, const char *fmt, ...)
{
    if (e) {
        e->code = code;
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(e->msg, sizeof e->msg, fmt, ap);
        va_end(ap);
    }
    return (int)code;
}

uint64_t train_fnv1a64(uint64_t h, const void *data, int64_t n)
{
    const uint8_t *p = data;
    for (int64_t i = 0; i < n; i++) {
        h ^= p[i];
        h *= 0x100000001b3ull;
    }
    return h;
}

int train_host_is_little_endian(void)
{
    const uint16_t one = 1;
    uint8_t first;
    memcpy(&first, &one, 1);
    return first == 1;
}

/* ------------------------------------------------------------------------ */

int train_read_file(const char *path, int64_t max_bytes, uint8_t **buf, int64_t *n, train_err *e)
{
    *buf = NULL;
    *n = 0;
    int fd = open(path, O_RDONLY);
    if (fd < 0) {
        return train_err_set(e, TRAIN_IO_ERR_OPEN, "%s: cannot open: %s", path, strerror(errno));
    }
    struct stat st;
    if (fstat(fd, &st) != 0) {
        int err = errno;
        close(fd);
        return train_err_set(e, TRAIN_IO_ERR_OPEN, "%s: cannot stat: %s", path, strerror(err));
    }
    if (!S_ISREG(st.st_mode)) {
        close(fd);
        return train_err_set(e, TRAIN_IO_ERR_OPEN, "%s: not a regular file%s", path,
                             S_ISDIR(st.st_mode) ? " (it is a directory)" : "");
    }
    if ((int64_t)st.st_size > max_bytes) {
        close(fd);
        return train_err_set(e, TRAIN_IO_ERR_SIZE,
                             "%s: %lld bytes, more than the %lld this reader accepts", path,
                             (long long)st.st_size, (long long)max_bytes);
    }
    int64_t size = (int64_t)st.st_size;
    uint8_t *p = malloc((size_t)size + 1);
    if (!p) {
        close(fd);
        return train_err_set(e, TRAIN_IO_ERR_NOMEM, "%s: out of memory reading %lld bytes", path,
                             (long long)size);
    }
    int64_t got = 0;
    while (got < size) {
        size_t want = (size_t)(size - got) > ((size_t)1 << 30) ? ((size_t)1 << 30)
                                                                : (size_t)(size - got);
        ssize_t r = read(fd, p + got, want);
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) {
            int err = errno;
            free(p);
            close(fd);
            return train_err_set(e, TRAIN_IO_ERR_READ, "%s: read failed: %s", path, strerror(err));
        }
        if (r == 0) break; /* shrank while reading: keep what is there */
        got += r;
    }
    close(fd);
    p[got] = 0;
    *buf = p;
    *n = got;
    return TRAIN_IO_OK;
}

int train_fwrite(FILE *f, const void *data, size_t n, const char *path, train_err *e)
{
    errno = 0;
    if (n && fwrite(data, 1, n, f) != n) {
        return train_err_set(e, TRAIN_IO_ERR_WRITE, "%s: write failed: %s", path,
                             strerror(errno ? errno : EIO));
    }
    return TRAIN_IO_OK;
}

/* fsync of the directory that holds path, so that the rename itself is on
 * disk. File systems that cannot sync a directory (EINVAL) are accepted. */
static int sync_parent_dir(const char *path, train_err *e)
{
    size_t len = strlen(path);
    char *dir = malloc(len + 2);
    if (!dir) return train_err_set(e, TRAIN_IO_ERR_NOMEM, "%s: out of memory", path);
    memcpy(dir, path, len + 1);
    char *slash = strrchr(dir, '/');
    if (!slash) strcpy(dir, ".");
    else if (slash == dir) dir[1] = 0; /* "/file" lives in "/" */
    else *slash = 0;
    int fd = open(dir, O_RDONLY | O_DIRECTORY);
    int rc = TRAIN_IO_OK;
    if (fd < 0) {
        rc = train_err_set(e, TRAIN_IO_ERR_WRITE, "%s: cannot open directory %s to sync it: %s",
                           path, dir, strerror(errno));
    } else {
        if (fsync(fd) != 0 && errno != EINVAL) {
            rc = train_err_set(e, TRAIN_IO_ERR_WRITE, "%s: fsync of directory %s failed: %s",
                               path, dir, strerror(errno));
        }
        close(fd);
    }
    free(dir);
    return rc;
}

int train_atomic_write(const char *path, train_write_fn fn, void *ctx, train_err *e)
{
    if (!path || !*path || !fn) return train_err_set(e, TRAIN_IO_ERR_ARG, "atomic write: no path");
    size_t len = strlen(path);
    static const char suffix[] = ".tmp.XXXXXX";
    char *tmp = malloc(len + sizeof suffix);
    if (!tmp) return train_err_set(e, TRAIN_IO_ERR_NOMEM, "%s: out of memory", path);
    memcpy(tmp, path, len);
    memcpy(tmp + len, suffix, sizeof suffix);

    int fd = mkstemp(tmp);
    if (fd < 0) {
        int rc = train_err_set(e, TRAIN_IO_ERR_WRITE, "%s: cannot create temporary file %s: %s",
                               path, tmp, strerror(errno));
        free(tmp);
        return rc;
    }
    /* mkstemp makes the file private (0600); a checkpoint is an ordinary
     * output file, readable like any other the program writes. */
    (void)fchmod(fd, 0644);
    FILE *f = fdopen(fd, "wb");
    if (!f) {
        int rc =
            train_err_set(e, TRAIN_IO_ERR_WRITE, "%s: fdopen failed: %s", path, strerror(errno));
        close(fd);
        unlink(tmp);
        free(tmp);
        return rc;
    }
    int rc = fn(f, ctx, e);
    if (rc == TRAIN_IO_OK && fflush(f) != 0) {
        rc = train_err_set(e, TRAIN_IO_ERR_WRITE, "%s: write failed: %s", path, strerror(errno));
    }
    if (rc == TRAIN_IO_OK && fsync(fileno(f)) != 0) {
        rc = train_err_set(e, TRAIN_IO_ERR_WRITE, "%s: fsync failed: %s", path, strerror(errno));
    }
    if (fclose(f) != 0 && rc == TRAIN_IO_OK) {
        rc = train_err_set(e, TRAIN_IO_ERR_WRITE, "%s: close failed: %s", path, strerror(errno));
    }
    if (rc == TRAIN_IO_OK && rename(tmp, path) != 0) {
        rc = train_err_set(e, TRAIN_IO_ERR_WRITE, "%s: cannot rename %s over it: %s", path, tmp,
                           strerror(errno));
    }
    if (rc != TRAIN_IO_OK) {
        unlink(tmp);
        free(tmp);
        return rc;
    }
    free(tmp);
    return sync_parent_dir(path, e);
}

int train_make_dirs(const char *path, train_err *e)
{
    if (!path || !*path) return train_err_set(e, TRAIN_IO_ERR_ARG, "mkdir: no path");
    size_t len = strlen(path);
    char *p = malloc(len + 1);
    if (!p) return train_err_set(e, TRAIN_IO_ERR_NOMEM, "%s: out of memory", path);
    memcpy(p, path, len + 1);
    int rc = TRAIN_IO_OK;
    /* each prefix ending before a '/', then the whole path */
    for (size_t i = 1; i <= len && rc == TRAIN_IO_OK; i++) {
        if (i < len && p[i] != '/') continue;
        char saved = p[i];
        p[i] = 0;
        struct stat st;
        if (mkdir(p, 0777) != 0 && errno != EEXIST) {
            rc = train_err_set(e, TRAIN_IO_ERR_WRITE, "%s: cannot create directory %s: %s", path, p,
                               strerror(errno));
        } else if (stat(p, &st) != 0 || !S_ISDIR(st.st_mode)) {
            rc = train_err_set(e, TRAIN_IO_ERR_WRITE, "%s: %s exists and is not a directory", path,
                               p);
        }
        p[i] = saved;
    }
    free(p);
    return rc;
}

/* Room for len more bytes and the NUL; false (and failed set) if none. */
static int text_reserve(train_text *t, size_t len)
{
    if (t->failed) return 0;
    if (len > SIZE_MAX / 2 - t->n - 1) {
        t->failed = 1;
        return 0;
    }
    if (t->n + len + 1 <= t->cap) return 1;
    size_t cap = t->cap ? t->cap : 1024;
    while (cap < t->n + len + 1) cap *= 2;
    char *q = realloc(t->p, cap);
    if (!q) {
        t->failed = 1;
        return 0;
    }
    t->p = q;
    t->cap = cap;
    return 1;
}

void train_text_put(train_text *t, const char *s, size_t len)
{
    if (!text_reserve(t, len)) return;
    memcpy(t->p + t->n, s, len);
    t->n += len;
    t->p[t->n] = 0;
}

void train_text_puts(train_text *t, const char *s) { train_text_put(t, s, strlen(s)); }

void train_text_printf(train_text *t, const char *fmt, ...)
{
    va_list ap, again;
    va_start(ap, fmt);
    va_copy(again, ap);
    const int k = vsnprintf(NULL, 0, fmt, ap);
    if (k < 0) t->failed = 1;
    else if (text_reserve(t, (size_t)k)) {
        vsnprintf(t->p + t->n, (size_t)k + 1, fmt, again);
        t->n += (size_t)k;
    }
    va_end(again);
    va_end(ap);
}
