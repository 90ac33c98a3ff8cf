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
 * alone prints, logs and writes checkpoints. The gradient average runs
 * after the backward (not overlapped with it), and every rank evaluates the
 * same held-out batches.
 *
 * Without --dist the trainer passes NULL, and every function below is the
 * one-process answer (rows 0..B-1, share 1, no communication).
 */
#ifndef PRNN_TRAIN_DIST_H
#define PRNN_TRAIN_DIST_H

#include <stdint.h>

#include "data.h"
#include "prnn.h"

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

/* Averages the gradient buffer (P) fp32 on the context's device. */
prnn_status train_dist_average(train_dist *td, float *grads, int64_t P);

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
