/*
 * seqpar.h - `prnn train --dist --seq-parallel`: sequence-parallel training
 * over the processes of an MPI job, one per device.
 *
 * Every process draws the same batch of B rows (the sampler state is the
 * same everywhere) and keeps all B rows but only its own contiguous slice of
 * the time axis: T split evenly in rank order, the first T mod N processes
 * taking one step more. The model runs in the library's sequence-parallel
 * mode (prnn_model_set_seq_dist): its scans run across the processes, its
 * loss is the mean over every process's scored tokens, and after the
 * backward the gradients are summed over the processes, so N processes
 * train as one process does on the whole sequence (up to rounding),
 * dropout masks included, while each holds about 1/N of the activations.
 * Every rank then takes the same optimizer step on identical gradients;
 * rank 0 alone prints, logs and saves (dist.h, which also starts MPI).
 *
 * Without --seq-parallel the trainer holds NULL and every function below is
 * the one-process answer.
 *
 * Size letters: B batch rows, T steps per row, Tr a process's steps.
 */
#ifndef PRNN_TRAIN_SEQPAR_H
#define PRNN_TRAIN_SEQPAR_H

#include <stdint.h>

#include "data.h"
#include "prnn.h"
#include "prnn_model.h"

typedef struct train_seq train_seq;

/* Creates the distributed context on ctx (MPI started by train_dist_open),
 * puts the model in sequence-parallel mode for rows of T steps, and prints
 * the job's line. Returns 0, or 1 after a message (T shorter than the
 * process count, a cell the mode refuses, no MPI in this build). */
int train_seq_attach(train_seq **ts, prnn_ctx *ctx, prnn_model *model, int64_t B, int64_t T);

/* This process's steps of rows of T steps (T without --seq-parallel). */
int64_t train_seq_steps(const train_seq *ts, int64_t T);

/* This process's slice (B, Tr) of a batch's x and y: *x and *y point to it
 * (a buffer of ts, valid until the next call); unchanged without
 * --seq-parallel. Returns Tr. */
int64_t train_seq_slice(train_seq *ts, const train_batch *hb, const int32_t **x,
                        const int32_t **y);

/* Sums the gradients over the processes (after the backward). */
prnn_status train_seq_reduce(train_seq *ts);

/* End of a step: *stop is set on every rank if any rank wants to stop. The
 * loss needs nothing: the model's is already the global one. */
prnn_status train_seq_step_end(train_seq *ts, int *stop);

/* Turns the mode off and frees the distributed context (collective), or
 * with rc != 0 only this process's memory (dist.h then aborts the job).
 * Call before train_dist_close. NULL is a no-op. */
void train_seq_close(train_seq *ts, int rc);

#endif /* PRNN_TRAIN_SEQPAR_H */
