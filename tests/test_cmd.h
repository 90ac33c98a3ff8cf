/*
 * test_cmd.h - running the program's commands (train_cmd_train and friends)
 * inside a test: the command's stdout and stderr go to a file, so a suite
 * prints one line per check, and files are read back whole.
 *
 * The including file defines _POSIX_C_SOURCE (dup, dup2) before any header.
 */
#ifndef PRNN_TEST_CMD_H
#define PRNN_TEST_CMD_H

#include <fcntl.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Runs fn on the space-separated args with stdout and stderr sent to the
 * file out; returns its exit code. */
static inline int tc_run(int (*fn)(int, char **), const char *args, const char *out)
{
    char buf[2048];
    snprintf(buf, sizeof buf, "%s", args);
    char *argv[64];
    int argc = 0;
    for (char *tok = strtok(buf, " "); tok && argc < 63; tok = strtok(NULL, " ")) argv[argc++] = tok;
    argv[argc] = NULL;
    fflush(stdout);
    fflush(stderr);
    const int so = dup(1), se = dup(2);
    const int fd = open(out, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    dup2(fd, 1);
    dup2(fd, 2);
    close(fd);
    const int rc = fn(argc, argv);
    fflush(stdout);
    fflush(stderr);
    dup2(so, 1);
    dup2(se, 2);
    close(so);
    close(se);
    return rc;
}

/* A whole file, NUL-terminated, in new memory (NULL if unreadable). */
static inline char *tc_slurp(const char *path, long *n)
{
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    *n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *b = malloc((size_t)*n + 1);
    if (b && fread(b, 1, (size_t)*n, f) != (size_t)*n) {
        free(b);
        b = NULL;
    }
    if (b) b[*n] = 0;
    fclose(f);
    return b;
}

/* The train rows' losses of a log.tsv (step, kind, loss, ...), up to max. */
static inline int tc_log_losses(const char *path, double *loss, int max)
{
    long n = 0;
    char *s = tc_slurp(path, &n);
    int k = 0;
    for (char *line = s ? strtok(s, "\n") : NULL; line && k < max; line = strtok(NULL, "\n")) {
        int step;
        char kind[16];
        double l;
        if (sscanf(line, "%d %15s %lf", &step, kind, &l) == 3 && !strcmp(kind, "train")) loss[k++] = l;
    }
    free(s);
    return k;
}

/* The float weights of a safetensors file (after its 8-byte header length
 * and JSON header), in new memory; NULL if unreadable. */
static inline float *tc_weights(const char *path, int64_t *count)
{
    long n = 0;
    char *s = tc_slurp(path, &n);
    *count = 0;
    if (!s || n < 8) {
        free(s);
        return NULL;
    }
    uint64_t hl = 0;
    memcpy(&hl, s, 8); /* little-endian on every machine this runs on */
    const int64_t bytes = n - 8 - (int64_t)hl;
    float *w = bytes > 0 ? malloc((size_t)bytes) : NULL;
    if (w) memcpy(w, s + 8 + hl, (size_t)bytes);
    if (w) *count = bytes / 4;
    free(s);
    return w;
}

/* A command's captured output on stderr, for a failed check. */
static inline void tc_show(const char *path)
{
    long n = 0;
    char *s = tc_slurp(path, &n);
    if (s) fprintf(stderr, "---- %s ----\n%s------------------------\n", path, s);
    free(s);
}

/* Whether a file holds text. */
static inline int tc_file_has(const char *path, const char *text)
{
    long n = 0;
    char *s = tc_slurp(path, &n);
    const int r = s && strstr(s, text) != NULL;
    free(s);
    return r;
}

/* How two training runs' output directories differ: the losses of log.tsv
 * (relative) and the final weights of model.safetensors (absolute). */
typedef struct {
    int nl;          /* losses compared: both logs' count when equal, else -1 */
    double err_loss; /* largest relative difference of the losses */
    int64_t nw;      /* weights compared; 0 when a checkpoint is missing or the sizes differ */
    double err_w;    /* largest absolute difference of the weights (INFINITY when nw is 0) */
    int64_t nw_over; /* weights that differ by more than the tolerance given */
} tc_runs_diff;

static inline tc_runs_diff tc_compare_runs(const char *a, const char *b, double wtol)
{
    tc_runs_diff d = {0, 0, 0, 0, 0};
    char pa[1024], pb[1024];
    double l1[64], l2[64];
    snprintf(pa, sizeof pa, "%s/log.tsv", a);
    snprintf(pb, sizeof pb, "%s/log.tsv", b);
    const int n1 = tc_log_losses(pa, l1, 64), n2 = tc_log_losses(pb, l2, 64);
    d.nl = n1 == n2 ? n1 : -1;
    for (int i = 0; i < n1 && i < n2; i++) {
        const double e = fabs(l1[i] - l2[i]) / fabs(l1[i]);
        if (!(e <= d.err_loss)) d.err_loss = e;
    }
    snprintf(pa, sizeof pa, "%s/model.safetensors", a);
    snprintf(pb, sizeof pb, "%s/model.safetensors", b);
    int64_t c1 = 0, c2 = 0;
    float *w1 = tc_weights(pa, &c1), *w2 = tc_weights(pb, &c2);
    if (w1 && w2 && c1 == c2 && c1 > 0) {
        d.nw = c1;
        for (int64_t i = 0; i < c1; i++) {
            const double e = fabs((double)w1[i] - (double)w2[i]);
            if (!(e <= d.err_w)) d.err_w = e;
            if (!(e <= wtol)) d.nw_over++;
        }
    } else {
        d.err_w = INFINITY;
    }
    free(w1), free(w2);
    return d;
}

#endif /* PRNN_TEST_CMD_H */
