/*
 * dist.c - `prnn train --dist` (dist.h): the trainer's side of data
 * parallelism, on the library's distributed context (prnn_dist.h). Built
 * with every trainer; without MPI in the build, --dist reports that and
 * the rest is the one-process answer.
 *
 * Size letters: B global batch rows, T steps per row, P parameters.
 */
#define _POSIX_C_SOURCE 200809L /* dup, dup2, fileno */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include <omp.h>

#include "dist.h"

#ifdef PRNN_HAVE_DIST
#include <mpi.h>

#include "prnn_dist.h"
#endif

struct train_dist {
    int rank, size, local_rank;
    int saved_stdout; /* ranks > 0: the real stdout while it points to /dev/null */
    int overlap, zero1;
    float *grads;     /* the model's gradient buffer (P) */
    int64_t P;
#ifdef PRNN_HAVE_DIST
    prnn_dist *dist;
    prnn_dist_grad *avg; /* the bucketed average (overlap or zero1) */
#endif
};

/* ------------------------------------------------------------------------ */
/* Start and end                                                            */

int train_dist_open(train_dist **out)
{
    *out = NULL;
#ifndef PRNN_HAVE_DIST
    fprintf(stderr, "prnn train: --dist needs a build with MPI (Debian: apt-get install "
                    "libopenmpi-dev openmpi-bin, then build again)\n");
    return 1;
#else
    prnn_dist_info info;
    prnn_status s = prnn_dist_mpi_start(&info);
    if (s != PRNN_OK) {
        fprintf(stderr, "prnn train: cannot start MPI: %s\n", prnn_strerror(s));
        return 1;
    }
    train_dist *td = calloc(1, sizeof *td);
    if (!td) {
        fprintf(stderr, "prnn train: out of memory\n");
        return 1;
    }
    td->rank = info.rank;
    td->size = info.size;
    td->local_rank = info.local_rank;
    td->saved_stdout = -1;
    if (td->rank != 0) {
        fflush(stdout);
        const int null = open("/dev/null", O_WRONLY);
        td->saved_stdout = null >= 0 ? dup(fileno(stdout)) : -1;
        if (td->saved_stdout >= 0) dup2(null, fileno(stdout));
        if (null >= 0) close(null);
    }
    /* Processes of one node share its cores, unless the user said. */
    if (info.local_size > 1 && !getenv("OMP_NUM_THREADS")) {
        const int each = omp_get_num_procs() / info.local_size;
        omp_set_num_threads(each > 0 ? each : 1);
    }
    *out = td;
    return 0;
#endif
}

int train_dist_device(const train_dist *td) { return td ? td->local_rank : 0; }

int train_dist_attach(train_dist *td, prnn_ctx *ctx, int64_t batch)
{
    if (!td) return 0;
#ifdef PRNN_HAVE_DIST
    if (batch < td->size) {
        fprintf(stderr, "prnn train: --batch %lld is smaller than the %d processes of the job "
                        "(each needs a row)\n", (long long)batch, td->size);
        return 1;
    }
    prnn_status s = prnn_dist_init(&td->dist, ctx, NULL);
    if (s != PRNN_OK) {
        fprintf(stderr, "prnn train: cannot set up the %d processes: %s\n", td->size,
                prnn_strerror(s));
        return 1;
    }
    int64_t first = 0;
    const int64_t rows = train_dist_rows(td, batch, &first);
    printf("prnn train: data parallel over %d processes (%s), %lld%s of the %lld rows of "
           "each batch per process\n",
           td->size, prnn_dist_backend(td->dist), (long long)rows,
           batch % td->size ? " or so" : "", (long long)batch);
    return 0;
#else
    (void)ctx, (void)batch;
    return 1;
#endif
}

void train_dist_close(train_dist *td, int rc)
{
    if (!td) return;
#ifdef PRNN_HAVE_DIST
    if (rc != 0 && td->size > 1) {
        fprintf(stderr, "prnn train: process %d failed; stopping the job\n", td->rank);
        fflush(stderr);
        MPI_Abort(MPI_COMM_WORLD, rc);
    }
    prnn_dist_grad_free(td->avg);
    prnn_dist_free(td->dist);
    (void)prnn_dist_mpi_stop();
#else
    (void)rc;
#endif
    if (td->saved_stdout >= 0) {
        fflush(stdout);
        dup2(td->saved_stdout, fileno(stdout));
        close(td->saved_stdout);
    }
    free(td);
}

/* ------------------------------------------------------------------------ */
/* Batches, gradients, losses                                               */

int train_dist_lead(const train_dist *td) { return !td || td->rank == 0; }

int64_t train_dist_rows(const train_dist *td, int64_t B, int64_t *first)
{
    if (!td) {
        *first = 0;
        return B;
    }
    *first = B * td->rank / td->size;
    return B * (td->rank + 1) / td->size - *first;
}

double train_dist_share(const train_dist *td, const train_batch *hb, int64_t first, int64_t rows)
{
    if (!td) return 1.0;
    /* Every rank holds the whole global batch, so both counts are local. */
    int64_t mine = 0;
    for (int64_t i = first * hb->T; i < (first + rows) * hb->T; i++)
        mine += hb->y[i] != -1;
    return hb->n_counted > 0 ? (double)mine / (double)hb->n_counted : 1.0 / td->size;
}

double train_dist_loss_scale(const train_dist *td, double share)
{
    return td ? share * td->size : 1.0;
}

uint64_t train_dist_seed(const train_dist *td, uint64_t seed)
{
    if (!td || td->rank == 0) return seed;
    uint64_t z = seed + (uint64_t)td->rank * 0xD1B54A32D192ED03ull; /* splitmix64 */
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

int train_dist_grads(train_dist *td, prnn_model *m, int overlap, int zero1)
{
    if (!td) return 0;
    td->grads = prnn_model_grads(m);
    td->P = prnn_model_param_count(m);
    td->overlap = overlap;
    td->zero1 = zero1;
#ifdef PRNN_HAVE_DIST
    if (!td->dist) {
        /* Not data parallel (train_dist_attach not called): nothing to average. */
        td->overlap = td->zero1 = 0;
        if (!zero1) return 0;
        fprintf(stderr, "prnn train: --zero1 goes with data-parallel training only\n");
        return 1;
    }
    if (!overlap && !zero1) return 0; /* prnn_dist_allreduce_mean after the backward */
    prnn_status s = prnn_dist_grad_init(&td->avg, td->dist, td->grads, td->P,
                                        zero1 ? PRNN_DIST_GRAD_SCATTER : PRNN_DIST_GRAD_MEAN, 0);
    if (s == PRNN_OK && overlap) s = prnn_model_set_grad_hook(m, prnn_dist_grad_hook, td->avg);
    if (s != PRNN_OK) {
        fprintf(stderr, "prnn train: cannot set up the gradient average: %s\n", prnn_strerror(s));
        return 1;
    }
    return 0;
#else
    (void)m;
    return 1;
#endif
}

void train_dist_shard(const train_dist *td, int64_t P, int64_t *lo, int64_t *hi)
{
    *lo = 0;
    *hi = P;
#ifdef PRNN_HAVE_DIST
    if (td && td->zero1) prnn_dist_shard(td->dist, P, -1, lo, hi);
#else
    (void)td;
#endif
}

int train_dist_sharded(const train_dist *td) { return td && td->zero1; }

prnn_status train_dist_backward_begin(train_dist *td)
{
#ifdef PRNN_HAVE_DIST
    if (td && td->overlap) return prnn_dist_grad_begin(td->avg);
#else
    (void)td;
#endif
    return PRNN_OK;
}

prnn_status train_dist_average(train_dist *td)
{
#ifdef PRNN_HAVE_DIST
    if (!td) return PRNN_OK;
    if (td->overlap) return prnn_dist_grad_finish(td->avg);
    if (!td->zero1) return prnn_dist_allreduce_mean(td->dist, td->grads, td->P);
    prnn_status s = prnn_dist_grad_begin(td->avg);
    if (s == PRNN_OK) s = prnn_dist_grad_ready(td->avg, 0, td->P);
    const prnn_status f = prnn_dist_grad_finish(td->avg);
    return s != PRNN_OK ? s : f;
#else
    (void)td;
    return PRNN_OK;
#endif
}

prnn_status train_dist_sum(train_dist *td, double *v, int64_t n)
{
#ifdef PRNN_HAVE_DIST
    if (td) return prnn_dist_allreduce_sum_host(td->dist, v, n);
#else
    (void)td, (void)v, (void)n;
#endif
    return PRNN_OK;
}

prnn_status train_dist_gather_params(train_dist *td, float *params, int64_t P)
{
#ifdef PRNN_HAVE_DIST
    if (td && td->zero1) return prnn_dist_allgather_shards(td->dist, params, P);
#else
    (void)td, (void)params, (void)P;
#endif
    return PRNN_OK;
}

prnn_status train_dist_gather_host(train_dist *td, float *host, int64_t P)
{
#ifdef PRNN_HAVE_DIST
    if (td && td->zero1) return prnn_dist_gather_shards_host(td->dist, host, P, 0);
#else
    (void)td, (void)host, (void)P;
#endif
    return PRNN_OK;
}

prnn_status train_dist_step_end(train_dist *td, float *loss, double share, int *stop)
{
    if (!td) return PRNN_OK;
#ifdef PRNN_HAVE_DIST
    double v[2] = {(double)*loss * share, *stop ? 1.0 : 0.0};
    prnn_status s = prnn_dist_allreduce_sum_host(td->dist, v, 2);
    if (s != PRNN_OK) return s;
    *loss = (float)v[0];
    *stop = v[1] > 0;
#else
    (void)loss, (void)share, (void)stop;
#endif
    return PRNN_OK;
}
