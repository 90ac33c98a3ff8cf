/*
 * test_dist_cmd.h - the distributed trainer against itself in one process,
 * for the CPU distributed suites (test_dist.c, test_dist_seq.c): the same
 * `prnn train` run once in one process on rank 0 and once on every rank,
 * then rank 0 compares their losses and final weights (tc_compare_runs).
 */
#ifndef PRNN_TEST_DIST_CMD_H
#define PRNN_TEST_DIST_CMD_H

#include "test_cmd.h"
#include "test_dist_util.h"
#include "train/train.h"

/* The options every compared run shares: 5 steps of a small model on one
 * thread, no evaluation or checkpoints, a fresh seed. */
static inline void dist_train_common(char *buf, size_t n, const char *args)
{
    snprintf(buf, n,
             "%s --steps 5 --warmup 1 --lr 0.003 --hidden 16 --layers 2 --threads 1 "
             "--eval-interval 0 --eval-batches 1 --ckpt-interval 0 --seed %llu",
             args, (unsigned long long)(tu_next() % 1000000));
}

/* Runs prnn train with args on every rank (dist = 1) or on rank 0 alone,
 * its output in dir/<tag>.rank<r>.txt; returns the exit status (rank 0's,
 * shared). */
static inline int dist_train_run(const char *dir, const char *args, const char *tag, int dist)
{
    char out[512];
    snprintf(out, sizeof out, "%s/%s.rank%d.txt", dir, tag, g_rank);
    int rc = 0;
    if (dist || g_rank == 0) {
        rc = tc_run(train_cmd_train, args, out);
        if (rc != 0 && rc != 2) tc_show(out);
    }
    MPI_Bcast(&rc, 1, MPI_INT, 0, MPI_COMM_WORLD);
    return rc;
}

/* Rank 0: how runs dir/a and dir/b differ (tc_compare_runs, weights
 * against DIST_TRAIN_WEIGHT_TOL); zeros elsewhere. */
static inline tc_runs_diff dist_compare_runs(const char *dir, const char *a, const char *b)
{
    tc_runs_diff d = {0, 0, 0, 0, 0};
    if (g_rank != 0) return d;
    char pa[512], pb[512];
    snprintf(pa, sizeof pa, "%s/%s", dir, a);
    snprintf(pb, sizeof pb, "%s/%s", dir, b);
    return tc_compare_runs(pa, pb, DIST_TRAIN_WEIGHT_TOL);
}

/* Rank 0: runs of `steps` AdamW steps that differ only in rounding agree:
 * the losses to 1e-4 relative, the weights as test_dist_util.h says
 * (DIST_TRAIN_WEIGHT_TOL, a few outliers within lr per step). Other ranks:
 * 1. */
static inline int dist_runs_agree(const tc_runs_diff *d, int steps)
{
    if (g_rank != 0) return 1;
    return d->nl == steps && d->err_loss <= 1e-4 && d->nw > 0 &&
           d->nw_over <= DIST_TRAIN_WEIGHT_OUTLIERS(d->nw) && d->err_w <= steps * DIST_TRAIN_LR;
}

/* The words of dist_runs_agree's verdict, for a check's line. */
static inline void dist_runs_words(char *buf, size_t n, const tc_runs_diff *d)
{
    snprintf(buf, n,
             "losses (rel err %.1e, tol 1e-4), weights (abs err; %lld of %lld past %.0e, "
             "at most %lld may be)",
             d->err_loss, (long long)d->nw_over, (long long)d->nw, DIST_TRAIN_WEIGHT_TOL,
             (long long)DIST_TRAIN_WEIGHT_OUTLIERS(d->nw));
}

typedef struct {
    int rc_one, rc_dist; /* exit codes (rc_one: rank 0's, on every rank) */
    tc_runs_diff d;      /* rank 0: how the two runs differ */
} dist_vs_one;

/* Case k of a suite: `common` in one process (dir/one<k>) and with `flags`
 * on every rank (dir/<tag><k>). */
static inline void dist_run_vs_one(const char *dir, size_t k, const char *common, const char *flags,
                                   const char *tag, dist_vs_one *r)
{
    char args[1400], one[32], other[64], out[512];
    snprintf(one, sizeof one, "one%zu", k);
    snprintf(other, sizeof other, "%s%zu", tag, k);
    snprintf(args, sizeof args, "%s --out %s/%s", common, dir, one);
    r->rc_one = dist_train_run(dir, args, one, 0);
    snprintf(args, sizeof args, "%s %s --out %s/%s", common, flags, dir, other);
    snprintf(out, sizeof out, "%s/%s.rank%d.txt", dir, other, g_rank);
    r->rc_dist = tc_run(train_cmd_train, args, out); /* this rank's own status */
    if (r->rc_dist != 0) tc_show(out);
    r->d = dist_compare_runs(dir, one, other);
}

/* Both exited 0, and (rank 0) their 5 steps agree (dist_runs_agree). */
static inline void dist_check_vs_one(const char *what, const dist_vs_one *r)
{
    char words[256];
    dist_runs_words(words, sizeof words, &r->d);
    const int ok = r->rc_one == 0 && r->rc_dist == 0 && dist_runs_agree(&r->d, 5);
    dcheck(ok, r->d.err_w, "%s: exit %d and %d, 5 steps: %s", what, r->rc_one, r->rc_dist, words);
}

#endif
