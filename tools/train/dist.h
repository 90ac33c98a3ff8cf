/*
 * dist.h - `prnn train --dist`: data-parallel training over the processes
 * of an MPI job, one per device (mpirun -np N prnn train --dist ...).
 *
 * Every process draws the same global batch of B rows (the sampler state is
 * the same everywhere) and trains on its own contiguous rows, B/N of them
 * give or take one. Its loss is the mean over its scored tokens; the
 * backward scales it by N times the rank's share of the batch's scored
 * tokens, so that the gradient average over the ranks is exactly the
 * gradient of the global batch's mean loss: N processes at --batch B train
 * as one process at --batch B does, up to the summation order of the
 * average (and, with --dropout, the masks drawn: train_dist_seed). Every
 * rank then takes the same optimizer step on identical gradients; rank 0
 * alone prints, logs and writes checkpoints, and every rank evaluates the
 * same held-out batches.
 *
 * The gradient average overlaps the backward: each layer's gradients start
 * averaging (prnn_dist_grad, in buckets of about 4 MiB) as soon as the
 * model's backward has finished them, while the earlier layers' backward
 * runs; --no-overlap averages the whole buffer after the backward instead,
 * with the same result (the same bits on the CPU, prnn_dist.h).
 *
 * --zero1 shards the optimizer (ZeRO-1): a reduce-scatter leaves each rank
 * the averaged gradients of its shard of the parameters (prnn_dist_shard),
 * it clips them by the global norm (the shards' sums of squares summed over
 * the ranks), takes the AdamW step on its shard with its shard of the
 * moments, and an all-gather gives every rank the updated weights. Each
 * rank keeps 1/N of the moments; checkpoints hold all of them (gathered on
 * rank 0), so runs resume with or without --zero1 on any number of ranks.
 *
 * Without --dist the trainer passes NULL, and every function below is the
 * one-process answer (rows 0..B-1, share 1, no communication).
 */
#ifndef PRNN_TRAIN_DIST_H
#define PRNN_TRAIN_DIST_H

#include <stdint.h>

#include "data.h"
#include "prnn.h"
#include "prnn_model.h"

typedef struct train_dist train_dist;

/* Starts MPI and learns this process's rank; ranks other than 0 print
 * nothing on stdout from here to train_dist_close. On a CPU, unless
 * OMP_NUM_THREADS says otherwise, the node's cores are divided among its
 * processes. Returns 0, or 1 after a message (no MPI in this build). */
int train_dist_open(train_dist **td);

/* The CUDA device this process takes: its rank on the node (0 without
 * --dist). */
int train_dist_device(const train_dist *td);

/* Creates the distributed context on ctx for a global batch of `batch`
 * rows (at least one per rank) and prints the job's line. Returns 0 or 1
 * after a message. */
int train_dist_attach(train_dist *td, prnn_ctx *ctx, int64_t batch);

/* 1 on the process that prints, logs and saves (rank 0, or no --dist). */
int train_dist_lead(const train_dist *td);

/* This rank's rows of a global batch of B rows: [*first, *first + rows). */
int64_t train_dist_rows(const train_dist *td, int64_t B, int64_t *first);

/* The rank's share of the global batch's scored tokens, for rows
 * [first, first + rows) of hb (1 without --dist). */
double train_dist_share(const train_dist *td, const train_batch *hb, int64_t first,
                        int64_t rows);

/* The factor of the local mean loss in the backward: size * share. */
double train_dist_loss_scale(const train_dist *td, double share);

/* The dropout seed of this rank's rows: seed itself on rank 0 (and without
 * --dist), a different one on each other rank. A mask depends on the
 * element's position in the rows a process holds, so without this every
 * rank would drop the same units of its first row. (With dropout, N
 * processes therefore draw other masks than one process would: the
 * same distribution, not the same bits.) */
uint64_t train_dist_seed(const train_dist *td, uint64_t seed);

/* Sets up the gradient average of the model's gradient buffer (P): with
 * overlap, driven by the model's gradient hook during the backward; with
 * zero1, each rank is left its shard only. Returns 0 or 1 after a
 * message. */
int train_dist_grads(train_dist *td, prnn_model *m, int overlap, int zero1);

/* This rank's shard [*lo, *hi) of the optimizer over P parameters: all of
 * them unless --zero1. */
void train_dist_shard(const train_dist *td, int64_t P, int64_t *lo, int64_t *hi);

/* 1 with --zero1 (the optimizer sharded). */
int train_dist_sharded(const train_dist *td);

/* Call before the backward (starts the overlapped average) and after it
 * (finishes it, or averages the whole buffer now): then this rank's shard
 * of the gradients holds their average over the ranks. */
prnn_status train_dist_backward_begin(train_dist *td);
prnn_status train_dist_average(train_dist *td);

/* v (n) on the host <- its sum over the ranks (nothing without --dist). */
prnn_status train_dist_sum(train_dist *td, double *v, int64_t n);

/* --zero1: every rank's shard of its params (P), on the device, to every
 * rank; host (P) on the host: every rank's shard to rank 0. No-ops
 * otherwise. */
prnn_status train_dist_gather_params(train_dist *td, float *params, int64_t P);
prnn_status train_dist_gather_host(train_dist *td, float *host, int64_t P);

/* End of a step: *loss becomes the global batch's mean loss (the sum of
 * the ranks' loss x share), and *stop is set on every rank if any rank
 * wants to stop (Ctrl-C reaches the processes one by one). */
prnn_status train_dist_step_end(train_dist *td, float *loss, double share, int *stop);

/* Frees the distributed context and stops MPI (if this process started
 * it). With rc != 0 in a job of several processes it aborts the job
 * instead, since the others would wait for this one for ever. Restores
 * stdout. Call before freeing the context. NULL is a no-op. */
void train_dist_close(train_dist *td, int rc);

#endif /* PRNN_TRAIN_DIST_H */
