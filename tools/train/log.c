/*
 * log.c - the tab-separated training log and the progress line (log.h).
 */
#define _POSIX_C_SOURCE 200809L /* clock_gettime */

#include "log.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static const char header[] =
    "step\tkind\tloss\tbits_per_byte\tgrad_norm\tlr\tms_per_step\ttokens_per_s\n";

int train_log_open(train_log *l, const char *path, int append, const char *describe, train_err *e)
{
    memset(l, 0, sizeof *l);
    if (!path || !*path) return train_err_set(e, TRAIN_IO_ERR_ARG, "log: no path");
    FILE *f = fopen(path, append ? "a" : "w");
    if (!f) {
        return train_err_set(e, TRAIN_IO_ERR_OPEN, "%s: cannot open the log for writing: %s", path,
                             strerror(errno));
    }
    size_t len = strlen(path);
    l->path = malloc(len + 1);
    if (!l->path) {
        fclose(f);
        return train_err_set(e, TRAIN_IO_ERR_NOMEM, "%s: out of memory", path);
    }
    memcpy(l->path, path, len + 1);
    l->f = f;
    /* In append mode the position is the end: zero means a new file. */
    if (fseek(f, 0, SEEK_END) == 0 && ftell(f) == 0) {
        if (describe) fprintf(f, "# prnn train log: %s\n", describe);
        fputs(header, f);
    } else if (describe) {
        fprintf(f, "# resumed: %s\n", describe);
    }
    if (fflush(f) != 0 || ferror(f)) {
        int rc = train_err_set(e, TRAIN_IO_ERR_WRITE, "%s: cannot write the log: %s", path,
                               strerror(errno));
        fclose(f);
        free(l->path);
        memset(l, 0, sizeof *l);
        return rc;
    }
    return TRAIN_IO_OK;
}

static int finish_row(train_log *l, train_err *e)
{
    if (fflush(l->f) != 0 || ferror(l->f)) {
        return train_err_set(e, TRAIN_IO_ERR_WRITE, "%s: cannot write the log: %s", l->path,
                             strerror(errno));
    }
    return TRAIN_IO_OK;
}

int train_log_step(train_log *l, int64_t step, double loss, double grad_norm, double lr,
                   double ms_per_step, double tokens_per_s, train_err *e)
{
    if (!l || !l->f) return train_err_set(e, TRAIN_IO_ERR_ARG, "log: not open");
    fprintf(l->f, "%lld\ttrain\t%.6f\t%.6f\t%.6g\t%.6g\t%.3f\t%.1f\n", (long long)step, loss,
            loss / log(2.0), grad_norm, lr, ms_per_step, tokens_per_s);
    return finish_row(l, e);
}

int train_log_eval(train_log *l, int64_t step, double val_loss, train_err *e)
{
    if (!l || !l->f) return train_err_set(e, TRAIN_IO_ERR_ARG, "log: not open");
    fprintf(l->f, "%lld\tval\t%.6f\t%.6f\t-\t-\t-\t-\n", (long long)step, val_loss,
            val_loss / log(2.0));
    return finish_row(l, e);
}

int train_log_close(train_log *l, train_err *e)
{
    int rc = TRAIN_IO_OK;
    if (l->f && fclose(l->f) != 0) {
        rc = train_err_set(e, TRAIN_IO_ERR_WRITE, "%s: closing the log failed: %s",
                           l->path ? l->path : "log", strerror(errno));
    }
    free(l->path);
    memset(l, 0, sizeof *l);
    return rc;
}

/* ------------------------------------------------------------------------ */

const char *train_fmt_duration(char *buf, size_t n, double s)
{
    if (!(s >= 0) || !isfinite(s)) {
        snprintf(buf, n, "?");
        return buf;
    }
    if (s > 1e9) s = 1e9; /* keeps the conversion below in range */
    long long t = (long long)(s + 0.5);
    if (t < 60) snprintf(buf, n, "%llds", t);
    else if (t < 3600) snprintf(buf, n, "%lldm%02llds", t / 60, t % 60);
    else if (t < 86400) snprintf(buf, n, "%lldh%02lldm", t / 3600, t % 3600 / 60);
    else snprintf(buf, n, "%lldd%02lldh", t / 86400, t % 86400 / 3600);
    return buf;
}

const char *train_fmt_si(char *buf, size_t n, double x)
{
    static const char suffix[] = " kMGTPE";
    if (!isfinite(x)) {
        snprintf(buf, n, "%g", x);
        return buf;
    }
    double a = fabs(x);
    int k = 0;
    while (a >= 999.5 && k < 6) a /= 1000.0, x /= 1000.0, k++;
    if (k == 0) snprintf(buf, n, "%.0f", x);
    else snprintf(buf, n, a < 9.995 ? "%.2f%c" : a < 99.95 ? "%.1f%c" : "%.0f%c", x, suffix[k]);
    return buf;
}

const char *train_fmt_progress(char *buf, size_t n, const train_progress *p)
{
    char tok[32], eta[32];
    double per_step = p->steps_done > 0 ? p->elapsed_s / (double)p->steps_done : -1.0;
    double left = per_step >= 0 ? per_step * (double)(p->steps - p->step) : -1.0;
    int width = 1;
    for (int64_t s = p->steps; s >= 10; s /= 10) width++;
    snprintf(buf, n,
             "step %*lld/%lld | loss %.4f | gnorm %.3f | lr %.2e | %.1f ms | %s tok/s | eta %s",
             width, (long long)p->step, (long long)p->steps, p->loss, p->grad_norm, p->lr,
             p->ms_per_step, train_fmt_si(tok, sizeof tok, p->tokens_per_s),
             train_fmt_duration(eta, sizeof eta, left));
    return buf;
}

const char *train_fmt_eval(char *buf, size_t n, int64_t step, double val_loss)
{
    snprintf(buf, n, "val  %lld | loss %.4f | %.3f bits/byte", (long long)step, val_loss,
             val_loss / log(2.0));
    return buf;
}

double train_clock_seconds(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}
