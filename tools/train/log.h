/*
 * log.h - the training log and the progress line.
 *
 * The log is a tab-separated table, one row per training step and one per
 * evaluation, that scripts/plot_loss.py draws and any spreadsheet opens:
 *
 *   # prnn train log: <what the run was>           (comment lines start with #)
 *   step  kind   loss    bits_per_byte  grad_norm  lr        ms_per_step  tokens_per_s
 *   1     train  5.5452  8.0000         2.3101     6.00e-05  48.10        42577
 *   100   val    2.1035  3.0347         -          -         -            -
 *
 * Losses are nats per scored token (per byte on text); bits_per_byte is
 * loss / ln 2. Fields that do not apply are "-". Every row is flushed as it
 * is written, so `tail -f` follows a run and a crash loses nothing. A resumed
 * run appends; rows of steps past the resume point from the interrupted run
 * stay, and the plot keeps the last row of each step.
 */
#ifndef PRNN_TRAIN_LOG_H
#define PRNN_TRAIN_LOG_H

#include <stdint.h>
#include <stdio.h>

#include "fileio.h"

typedef struct train_log {
    FILE *f;
    char *path;
} train_log;

/* Opens path for appending (append = 1) or truncates it; writes the comment
 * line (when describe is not NULL) and the column header when the file is new
 * or empty. */
int train_log_open(train_log *l, const char *path, int append, const char *describe, train_err *e);

int train_log_step(train_log *l, int64_t step, double loss, double grad_norm, double lr,
                   double ms_per_step, double tokens_per_s, train_err *e);
int train_log_eval(train_log *l, int64_t step, double val_loss, train_err *e);

/* Closes the file; an error closing it (a full disk) is reported. */
int train_log_close(train_log *l, train_err *e);

/* ------------------------------------------------------------------------ */
/* Progress line                                                            */

typedef struct train_progress {
    int64_t step, steps;  /* step just taken (1-based) of steps */
    double loss, grad_norm, lr;
    double ms_per_step;   /* of this step */
    double tokens_per_s;
    double elapsed_s;     /* since the run (or resume) began, for the ETA */
    int64_t steps_done;   /* steps taken in elapsed_s */
} train_progress;

/* "step  120/1000 | loss 2.3456 | gnorm 0.812 | lr 2.94e-03 | 51.2 ms | 40.0k tok/s | eta 45s"
 * into buf (always NUL-terminated). Returns buf. */
const char *train_fmt_progress(char *buf, size_t n, const train_progress *p);

/* "val   1000 | loss 1.2345 | 1.781 bits/byte" */
const char *train_fmt_eval(char *buf, size_t n, int64_t step, double val_loss);

/* Seconds as "45s", "3m05s", "2h07m", "3d04h"; "?" for negative or non-finite. */
const char *train_fmt_duration(char *buf, size_t n, double seconds);

/* Seconds on a monotonic clock (for ms/step and the ETA). */
double train_clock_seconds(void);

/* A count with an SI suffix: 950 -> "950", 40012 -> "40.0k", 1.5e6 -> "1.50M". */
const char *train_fmt_si(char *buf, size_t n, double x);

#endif /* PRNN_TRAIN_LOG_H */
