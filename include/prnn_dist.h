/*
 * prnn_dist.h - prnn beyond one device: a distributed context over the
 * processes of an MPI job, the sequence-parallel scan, and the gradient
 * average of data-parallel training.
 *
 * One process per device. On a CPU context the processes talk through MPI;
 * on a CUDA context through NCCL (set up over MPI), on the context's stream,
 * so collectives queue behind the work that produced their inputs like any
 * other op. The header needs no MPI or NCCL header: a communicator is passed
 * by address (a `const MPI_Comm *` as `const void *`).
 *
 * Sequence parallelism. The time axis of a (B, T, H) scan is cut into
 * contiguous segments, one per rank in rank order: rank r holds steps
 * [off_r, off_r + T_r), T_r >= 1, segments of any lengths. Every rank scans
 * its own segment; the segments' summaries (A = product of a, S = the
 * segment's scan from zero), a few (B, H) tensors per rank, are all-gathered
 * and merged with the scan's associative rule
 *
 *     (A1, S1) then (A2, S2) = (A2 * A1, A2 * S1 + S2)
 *
 * into each segment's true start state, from which it is scanned once more,
 * exactly. Communication is O(ranks * B * H) per call whatever T is, so one
 * sequence can be longer than any one device holds.
 *
 * Data parallelism. prnn_dist_allreduce_mean averages a gradient buffer over
 * the ranks; every rank receives the same bits. prnn_dist_grad does the same
 * bucket by bucket while the backward still runs (slices of the buffer start
 * averaging as they become final), and can leave each rank only the mean of
 * its own shard of the buffer (ZeRO-1: the optimizer step sharded over the
 * ranks, then prnn_dist_allgather_shards).
 *
 * Every function is collective: all ranks of the context call it, in the
 * same order, with matching arguments. Available when the library was built
 * with MPI (the build defines PRNN_HAVE_DIST); CUDA contexts also need NCCL.
 *
 * Size letters: B batch rows, T_r the calling rank's time steps, H channels,
 * n elements of a flat buffer.
 */
#ifndef PRNN_DIST_H
#define PRNN_DIST_H

#include "prnn.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------------------ */
/* The process and the job                                                  */

typedef struct prnn_dist_info {
    int rank, size;             /* in MPI_COMM_WORLD */
    int local_rank, local_size; /* among the processes of this node: the
                                   CUDA device a process takes is usually
                                   local_rank */
} prnn_dist_info;

/*
 * Starts MPI (MPI_Init_thread, funneled) unless the program already has, and
 * describes the calling process. Call it before creating the context, to
 * pick the CUDA device from local_rank. Outside mpirun a process is a job of
 * one. info may be NULL. Pair each successful call with prnn_dist_mpi_stop.
 */
prnn_status prnn_dist_mpi_start(prnn_dist_info *info);

/* Matches one prnn_dist_mpi_start; the last one finalizes MPI if
 * prnn_dist_mpi_start started it (a program that called MPI_Init itself
 * keeps MPI running). Free every prnn_dist first. */
prnn_status prnn_dist_mpi_stop(void);

/* ------------------------------------------------------------------------ */
/* The distributed context                                                  */

typedef struct prnn_dist prnn_dist;

/*
 * Creates a distributed context over the processes of an MPI communicator
 * (mpi_comm points to an MPI_Comm; NULL means MPI_COMM_WORLD), which it
 * duplicates, for computations on ctx. ctx must outlive the distributed
 * context. A CUDA context gets an NCCL communicator on ctx's device (one
 * device per rank): PRNN_ERR_UNSUPPORTED when the build has no NCCL. MPI must
 * be started (prnn_dist_mpi_start or the program's own MPI_Init).
 */
prnn_status prnn_dist_init(prnn_dist **dist, prnn_ctx *ctx, const void *mpi_comm);

/* Frees a distributed context (collective). NULL is a no-op. */
void prnn_dist_free(prnn_dist *dist);

int prnn_dist_rank(const prnn_dist *dist);
int prnn_dist_size(const prnn_dist *dist);
prnn_ctx *prnn_dist_ctx(const prnn_dist *dist);

/* "mpi" or "nccl": what carries the tensors. */
const char *prnn_dist_backend(const prnn_dist *dist);

/* ------------------------------------------------------------------------ */
/* Data parallel                                                            */

/*
 * buf (n) fp32 on the context's device, in place: the element-wise mean over
 * the ranks. Each element is summed once and the sum sent to every rank, so
 * every rank receives identical bits; the sum is divided by the rank count
 * (not multiplied by its inverse), so a mean that is representable comes out
 * exact when the sum is.
 *
 * Summation order. CPU (MPI): each element is summed in rank order, rank 0's
 * value first, whatever the buffer's length or the split into buckets, so
 * prnn_dist_allreduce_mean and prnn_dist_grad give the same bits. CUDA
 * (NCCL): NCCL's ring or tree order, which may depend on the element's place
 * in the call; with two ranks the sum a + b is the same bits in any order,
 * with more the results of different splits agree to fp32 rounding.
 */
prnn_status prnn_dist_allreduce_mean(prnn_dist *dist, float *buf, int64_t n);

/*
 * Shards, for ZeRO-1. A buffer of n elements is cut into one contiguous
 * shard per rank in rank order, [lo, hi) with lo = r * ceil(n / N) clamped
 * to n: all shards but the last ones have the same length; with n < N some
 * are empty. rank < 0 means the calling rank.
 */
void prnn_dist_shard(const prnn_dist *dist, int64_t n, int rank, int64_t *lo, int64_t *hi);

/* buf (n) fp32 on the context's device, in place: every rank's shard of its
 * own buf is copied into the same place of every rank's buf (after a
 * sharded optimizer step: the updated weights everywhere). */
prnn_status prnn_dist_allgather_shards(prnn_dist *dist, float *buf, int64_t n);

/* buf (n) fp32 in HOST memory on every context: every rank's shard of its
 * buf lands in root's buf (the other ranks' buf are only read). For
 * checkpoints of sharded optimizer state. */
prnn_status prnn_dist_gather_shards_host(prnn_dist *dist, float *buf, int64_t n, int root);

/*
 * The gradient average of data-parallel training, overlapped with the
 * backward. A prnn_dist_grad is bound to one buffer buf (n) fp32 on the
 * context's device. Each step:
 *
 *   prnn_dist_grad_begin(g);
 *   ... the backward; each time a slice of buf is final:
 *       prnn_dist_grad_ready(g, offset, count);
 *   prnn_dist_grad_finish(g);
 *
 * Ready slices gather into buckets of contiguous elements; a bucket starts
 * averaging as soon as it holds bucket_elems elements or the next slice does
 * not continue it (so tiny slices merge, and a bucket never waits for a
 * slice that lies elsewhere), and finish starts the last one. Between begin
 * and finish every element of buf must be made ready exactly once, on every
 * rank in the same order, and a ready slice must not be written again
 * before finish.
 *
 * Modes:
 *   PRNN_DIST_GRAD_MEAN     every rank ends with the whole mean, with the
 *                           bits of prnn_dist_allreduce_mean (CPU; on CUDA
 *                           see its note on summation order);
 *   PRNN_DIST_GRAD_SCATTER  each rank ends with the mean of its own shard
 *                           (prnn_dist_shard); the rest of its buf holds
 *                           unspecified values. Each element is reduced once,
 *                           to its owner: half the traffic of a mean.
 *
 * CUDA: the collectives run on a second stream of the distributed context;
 * each bucket waits on an event recorded on the context's stream when its
 * last slice was made ready (so call ready after queuing the work that
 * writes the slice), and finish makes the context's stream wait for them.
 * Nothing waits on the host. CPU: buckets start as non-blocking MPI
 * collectives, which move forward on every later ready call (MPI progresses
 * when called) and are waited for at finish.
 *
 * bucket_elems <= 0 takes the default, 1M elements (4 MiB); a bucket holds at
 * most 16M. prnn_dist_grad_hook has the type of prnn_model_grad_hook
 * (prnn_model.h), so a model can drive a prnn_dist_grad directly:
 *
 *   prnn_model_set_grad_hook(model, prnn_dist_grad_hook, g);
 */
typedef enum prnn_dist_grad_mode {
    PRNN_DIST_GRAD_MEAN = 0,
    PRNN_DIST_GRAD_SCATTER
} prnn_dist_grad_mode;

typedef struct prnn_dist_grad prnn_dist_grad;

/* Collective. dist must outlive the prnn_dist_grad. */
prnn_status prnn_dist_grad_init(prnn_dist_grad **g, prnn_dist *dist, float *buf, int64_t n,
                                prnn_dist_grad_mode mode, int64_t bucket_elems);
/* Collective (after a finish, or before any begin). NULL is a no-op. */
void prnn_dist_grad_free(prnn_dist_grad *g);

prnn_status prnn_dist_grad_begin(prnn_dist_grad *g);
prnn_status prnn_dist_grad_ready(prnn_dist_grad *g, int64_t offset, int64_t count);
prnn_status prnn_dist_grad_finish(prnn_dist_grad *g);

/* prnn_dist_grad_ready with the prnn_dist_grad as void *. */
prnn_status prnn_dist_grad_hook(void *g, int64_t offset, int64_t count);

/* Buckets the last step started (after a finish). */
int prnn_dist_grad_buckets(const prnn_dist_grad *g);

/* buf (n) double in HOST memory on every context: the element-wise sum over
 * the ranks (losses, token counts, flags). */
prnn_status prnn_dist_allreduce_sum_host(prnn_dist *dist, double *buf, int64_t n);

/* ------------------------------------------------------------------------ */
/* Sequence parallel scan                                                   */

/*
 * The scan of prnn_scan_forward over a time axis cut into segments, one per
 * rank. desc is the calling rank's segment: desc->T = T_r; B, H, dtype,
 * reverse and the presence of lengths must match on every rank (checked:
 * every rank returns PRNN_ERR_INVALID_ARGUMENT otherwise). desc->lengths,
 * when given, are the rows' GLOBAL valid lengths in [0, sum of T_r] (the
 * same array on every rank). algo and chunk apply to the local scans.
 * dtype as prnn_scan_forward: F32, F64 on the CPU; F32, BF16, F16 on CUDA.
 *
 * Direction. A forward scan runs from rank 0's first step to the last rank's
 * last; a reverse scan (desc->reverse = 1) from the last rank's last step
 * back to rank 0's first.
 *
 *   h   (B, T_r, H) out  this segment's states, exactly as the one-device
 *                        scan of the whole sequence would give them
 *   hT  (B, H)      out  the global final state, on every rank that passes
 *                        it (identical bits on all); optional
 *   a   (B, T_r, H) in
 *   b   (B, T_r, H) in
 *   h0  (B, H)      in   the global initial state: read on rank 0 only (in
 *                        either direction), ignored elsewhere; optional
 *
 * Cost: one pass reading a and b (the summary), the exchange, and the local
 * scan from the true start state. A job of one rank is the local scan.
 */
prnn_status prnn_dist_scan_forward(prnn_dist *dist, const prnn_scan_desc *desc,
                                   void *h, void *hT,
                                   const void *a, const void *b, const void *h0);

/*
 * The backward of prnn_dist_scan_forward, as prnn_scan_backward for the
 * calling rank's segment: the gradient entering from later segments (in the
 * scan's direction) is merged from the ranks' summaries of a and dh, and the
 * state entering the segment from its predecessor's last valid h.
 *
 *   da  (B, T_r, H) out
 *   db  (B, T_r, H) out
 *   dh0 (B, H)      out  rank 0: dL/dh0 of the global initial state; other
 *                        ranks: zeros; optional
 *   a   (B, T_r, H) in   as given to the forward
 *   h   (B, T_r, H) in   the forward's output
 *   h0  (B, H)      in   as given to the forward (read on rank 0 only)
 *   dh  (B, T_r, H) in   dL/dh, optional
 *   dhT (B, H)      in   this rank's share of dL/dhT: hT is given to every
 *                        rank, so the gradient used is the SUM over the ranks
 *                        of what they pass (pass it on one rank to give it
 *                        once); optional
 */
prnn_status prnn_dist_scan_backward(prnn_dist *dist, const prnn_scan_desc *desc,
                                    void *da, void *db, void *dh0,
                                    const void *a, const void *h, const void *h0,
                                    const void *dh, const void *dhT);

/* ------------------------------------------------------------------------ */
/* Sequence parallel model                                                  */

struct prnn_model;

/*
 * Runs a model (prnn_model.h, on dist's context) with its time axis cut
 * over the ranks: each rank passes its own segment (B, T_r) of the same B
 * rows to prnn_model_forward, segments contiguous in rank order, of any
 * lengths T_r >= 1. Embedding, norms, dropout, the head and the
 * cross-entropy work token by token on the segment; every cell's scans,
 * both directions of bidirectional layers, run across the ranks
 * (prnn_dist_scan_forward / backward), and the values a cell carries one
 * step across a boundary (QRNN window 2's x_{t-1}, GILR-LSTM's s_{t-1},
 * --recompute's chunk start states) come from the neighbouring rank, so
 * every state is the one-device model's over the whole sequence from zero.
 * Dropout masks are drawn by global position: pass the same seed on every
 * rank. The loss the forward returns is the mean over every rank's scored
 * tokens (the same on all ranks), and the backward gives this rank's
 * contribution to that loss's gradient: prnn_model_seq_reduce_grads then
 * sums them. Forward and backward become collective.
 *
 * dist NULL turns the mode off. PRNN_ERR_UNSUPPORTED for log-space cells.
 * dist must outlive the mode (free the model or turn it off first).
 */
prnn_status prnn_model_set_seq_dist(struct prnn_model *model, prnn_dist *dist);

/* Sums the model's gradient buffer over the ranks (collective), after the
 * step's backward(s): every rank then holds the gradient of the one-device
 * model over the whole sequence, in identical bits (F64: the exact sum;
 * fp32: the all-reduce mean times the rank count). */
prnn_status prnn_model_seq_reduce_grads(struct prnn_model *model);

#ifdef __cplusplus
}
#endif

#endif /* PRNN_DIST_H */
