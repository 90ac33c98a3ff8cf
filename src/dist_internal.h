/*
 * dist_internal.h - what dist.c (MPI, the CPU path, the sequence-parallel
 * logic) and dist_cuda.cu (NCCL and the GPU kernels) share: the layout of
 * the records the ranks exchange (merged element by element in
 * dist_combine.h) and the CUDA side's entry points.
 *
 * Records. Each rank contributes K slots of (B, H) values in the
 * accumulation type; the all-gather lays them out rank after rank:
 * rec[(r * K + k) * BH + i]. Forward (K = 3): the segment's A = product of
 * a over its valid steps, S = its scan from zero, and rank 0's h0 (zeros on
 * the others). Backward (K = 6): A; G = the segment's gradient summary (the
 * dh0 its local backward gives with dhT = 0); Af, Sf = the segment's map of
 * the incoming state to the outgoing one as seen from the forward's output
 * (a segment with valid steps sends its last valid h whatever came in:
 * Af = 0, Sf = h_last; one without passes it through: Af = 1, Sf = 0);
 * rank 0's h0; and the rank's share of dhT.
 *
 * Scan positions. Ranks are visited in scan order q = 0 .. N-1: rank q for a
 * forward scan, rank N-1-q for a reverse one.
 *
 * Size letters: B batch rows, T the local time steps, H channels, N ranks,
 * BH = B*H.
 */
#ifndef PRNN_DIST_INTERNAL_H
#define PRNN_DIST_INTERNAL_H

#include "prnn_dist.h"
#include "prnn_internal.h"

#ifdef __cplusplus
extern "C" {
#endif

enum { PRNN_DIST_KF = 3, PRNN_DIST_KB = 6 };
enum { DF_A = 0, DF_S = 1, DF_H0 = 2 };
enum { DB_A = 0, DB_G = 1, DB_AF = 2, DB_SF = 3, DB_H0 = 4, DB_DT = 5 };

/* ------------------------------------------------------------------------ */
/* CUDA side (dist_cuda.cu), on the context's device and stream             */

#define PRNN_DIST_NCCL_ID_BYTES 128

prnn_status prnn_dist_nccl_unique_id(prnn_ctx *ctx, void *id /* PRNN_DIST_NCCL_ID_BYTES */);
prnn_status prnn_dist_nccl_init(prnn_ctx *ctx, void **comm, const void *id, int rank, int size);
void prnn_dist_nccl_free(prnn_ctx *ctx, void *comm);

/* recv (size * count) <- every rank's send (count), fp32. */
prnn_status prnn_dist_nccl_allgather(prnn_ctx *ctx, void *comm, const float *send, float *recv,
                                     int64_t count);
/* buf (n) <- sum over ranks / size, fp32, in place, on `stream` (a
 * cudaStream_t; NULL: the context's). */
prnn_status prnn_dist_nccl_allreduce_mean(prnn_ctx *ctx, void *comm, float *buf, int64_t n,
                                          int size, void *stream);

/* Owner r's part of buf, [lo[r], hi[r]) (N ranks), <- its sum over the
 * ranks, each part reduced to its owner only (one group of ncclReduce); the
 * calling rank `me` then divides its own part by N. Other parts keep their
 * values. On `stream` (NULL: the context's). */
prnn_status prnn_dist_nccl_reduce_owners(prnn_ctx *ctx, void *comm, float *buf,
                                         const int64_t *lo, const int64_t *hi, int N, int me,
                                         void *stream);

/* Owner r's part of its buf, [lo[r], hi[r]), into every rank's buf (one
 * group of ncclBroadcast), on the context's stream. */
prnn_status prnn_dist_nccl_broadcast_owners(prnn_ctx *ctx, void *comm, float *buf,
                                            const int64_t *lo, const int64_t *hi, int N);

/* The side stream of bucketed collectives and its two events (stream
 * order between it and the context's stream). */
prnn_status prnn_dist_cuda_side_init(prnn_ctx *ctx, void **stream, void **ev_main,
                                     void **ev_side);
void prnn_dist_cuda_side_free(prnn_ctx *ctx, void *stream, void *ev_main, void *ev_side);
/* The side stream waits for the work queued so far on the context's stream
 * (through ev_main), or the other way round (through ev_side). */
prnn_status prnn_dist_cuda_side_waits(prnn_ctx *ctx, void *stream, void *ev_main);
prnn_status prnn_dist_cuda_main_waits(prnn_ctx *ctx, void *stream, void *ev_side);

/* Chunks of the time axis the summary kernels split each row into, and the
 * fp32 scratch they need: 2 * B * chunks * H. */
int64_t prnn_dist_cuda_chunks(prnn_ctx *ctx, int64_t B, int64_t T, int64_t H);

/*
 * Forward summary of the local segment into rec's slots A and S (K = 3):
 * d is the local descriptor, lengths (B) device copy of the local lengths or
 * NULL. part: the scratch above.
 */
prnn_status prnn_dist_cuda_fwd_summary(prnn_ctx *ctx, const prnn_scan_desc *d,
                                       const int64_t *lengths, float *rec, const void *a,
                                       const void *b, float *part, int64_t chunks);

/* Backward summary into rec's slots A, G, Af and Sf (K = 6). dh may be NULL. */
prnn_status prnn_dist_cuda_bwd_summary(prnn_ctx *ctx, const prnn_scan_desc *d,
                                       const int64_t *lengths, float *rec, const void *a,
                                       const void *h, const void *dh, float *part,
                                       int64_t chunks);

/* Merges the gathered records (N ranks) for rank `me`: forward: carry (BH)
 * the state entering the segment and, when not NULL, hT (BH) the global
 * final state. */
prnn_status prnn_dist_cuda_fwd_combine(prnn_ctx *ctx, const float *rec, int64_t BH, int N,
                                       int reverse, int me, float *carry, float *hT);

/* Backward: h0l the forward state entering the segment, dhTl the gradient
 * entering it from later segments, and when not NULL dh0 (BH) the gradient
 * of the global initial state. */
prnn_status prnn_dist_cuda_bwd_combine(prnn_ctx *ctx, const float *rec, int64_t BH, int N,
                                       int reverse, int me, float *h0l, float *dhTl, float *dh0);

#ifdef __cplusplus
}
#endif

#endif /* PRNN_DIST_INTERNAL_H */
