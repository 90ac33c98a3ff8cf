/*
 * seqpar.c - `prnn train --dist --seq-parallel` (seqpar.h): the trainer's
 * side of sequence parallelism, on the library's sequence-parallel model
 * (prnn_dist.h). Built with every trainer; without MPI in the build,
 * --dist has already refused (dist.c).
 *
 * Size letters: B batch rows, T steps per row, Tr this process's steps.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "seqpar.h"

#ifdef PRNN_HAVE_DIST
#include "prnn_dist.h"
#endif

struct train_seq {
    prnn_model *model;
    int rank, size;
    int64_t T, Tr, off; /* the rows' steps; this process's slice [off, off + Tr) */
    int32_t *x, *y;     /* (B, Tr) the last slice */
    int64_t cap;
#ifdef PRNN_HAVE_DIST
    prnn_dist *dist;
#endif
};

int train_seq_attach(train_seq **out, prnn_ctx *ctx, prnn_model *model, int64_t B, int64_t T)
{
    *out = NULL;
#ifndef PRNN_HAVE_DIST
    (void)ctx, (void)model, (void)B, (void)T;
    fprintf(stderr, "prnn train: --seq-parallel needs a build with MPI\n");
    return 1;
#else
    train_seq *ts = calloc(1, sizeof *ts);
    if (!ts) {
        fprintf(stderr, "prnn train: out of memory\n");
        return 1;
    }
    *out = ts;
    ts->model = model;
    prnn_status s = prnn_dist_init(&ts->dist, ctx, NULL);
    if (s != PRNN_OK) {
        fprintf(stderr, "prnn train: cannot set up the processes: %s\n", prnn_strerror(s));
        return 1;
    }
    ts->rank = prnn_dist_rank(ts->dist);
    ts->size = prnn_dist_size(ts->dist);
    const int64_t N = ts->size, r = ts->rank;
    if (T < N) {
        fprintf(stderr, "prnn train: --seq-len %lld has fewer steps than the %d processes "
                        "(each needs one)\n", (long long)T, ts->size);
        return 1;
    }
    ts->T = T;
    ts->Tr = T / N + (r < T % N);
    ts->off = r * (T / N) + (r < T % N ? r : T % N);
    s = prnn_model_set_seq_dist(model, ts->dist);
    if (s != PRNN_OK) {
        fprintf(stderr, "prnn train: --seq-parallel cannot run this model: %s%s\n",
                prnn_strerror(s),
                s == PRNN_ERR_UNSUPPORTED ? " (log-space cells have no sequence-parallel scan)"
                                          : "");
        return 1;
    }
    ts->cap = B * ts->Tr;
    ts->x = malloc((size_t)ts->cap * sizeof(int32_t));
    ts->y = malloc((size_t)ts->cap * sizeof(int32_t));
    if (!ts->x || !ts->y) {
        fprintf(stderr, "prnn train: out of memory\n");
        return 1;
    }
    printf("prnn train: sequence parallel over %d processes (%s), %lld%s of the %lld steps of "
           "each row per process, all %lld rows\n",
           ts->size, prnn_dist_backend(ts->dist), (long long)ts->Tr,
           T % N ? " or so" : "", (long long)T, (long long)B);
    return 0;
#endif
}

int64_t train_seq_steps(const train_seq *ts, int64_t T) { return ts ? ts->Tr : T; }

int64_t train_seq_slice(train_seq *ts, const train_batch *hb, const int32_t **x,
                        const int32_t **y)
{
    if (!ts) return hb->T;
    const int64_t Tr = ts->Tr;
    for (int64_t b = 0; b < hb->B && (b + 1) * Tr <= ts->cap; b++) {
        memcpy(ts->x + b * Tr, hb->x + b * hb->T + ts->off, (size_t)Tr * sizeof(int32_t));
        memcpy(ts->y + b * Tr, hb->y + b * hb->T + ts->off, (size_t)Tr * sizeof(int32_t));
    }
    *x = ts->x;
    *y = ts->y;
    return Tr;
}

prnn_status train_seq_reduce(train_seq *ts)
{
#ifdef PRNN_HAVE_DIST
    if (ts) return prnn_model_seq_reduce_grads(ts->model);
#else
    (void)ts;
#endif
    return PRNN_OK;
}

prnn_status train_seq_step_end(train_seq *ts, int *stop)
{
#ifdef PRNN_HAVE_DIST
    if (!ts) return PRNN_OK;
    double v = *stop ? 1.0 : 0.0;
    prnn_status s = prnn_dist_allreduce_sum_host(ts->dist, &v, 1);
    if (s != PRNN_OK) return s;
    *stop = v > 0;
#else
    (void)ts, (void)stop;
#endif
    return PRNN_OK;
}

void train_seq_close(train_seq *ts, int rc)
{
    if (!ts) return;
#ifdef PRNN_HAVE_DIST
    if (rc == 0) {
        prnn_model_set_seq_dist(ts->model, NULL);
        prnn_dist_free(ts->dist);
    }
#else
    (void)rc;
#endif
    free(ts->x);
    free(ts->y);
    free(ts);
}
