/*
 * seq_internal.h - the sequence-parallel hook: how a model whose time axis
 * is cut into segments, one per process, reaches the other segments.
 *
 * The core library (cell.c, model.c) knows nothing of MPI. A model in
 * sequence-parallel mode holds a prnn_seq, a table of functions that
 * dist_model.c fills in over a prnn_dist (prnn_model_set_seq_dist in
 * prnn_dist.h); cells and the model call them where the one-device code
 * would see the whole sequence:
 *
 *   - every linear scan of a cell runs across the segments
 *     (prnn_dist_scan_forward / backward), so its states are those of the
 *     whole sequence;
 *   - a value that crosses a segment boundary by one step (QRNN window 2's
 *     x_{t-1}, GILR-LSTM's s_{t-1}, recompute's chunk start states, and the
 *     gradients flowing back over those) comes from the neighbouring
 *     segment (pass);
 *   - the model learns where its segment lies (begin: dropout masks are
 *     drawn by global position) and turns its local mean loss into the
 *     global one (loss).
 *
 * Every function is collective over the segments' processes. Segments are
 * contiguous and in rank order; the hook sees only the calling rank's.
 *
 * Size letters: B batch rows, T this segment's steps, H channels, n
 * elements.
 */
#ifndef PRNN_SEQ_INTERNAL_H
#define PRNN_SEQ_INTERNAL_H

#include "prnn.h"
#include "prnn_cell.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct prnn_seq {
    void *self;

    /* This call's segment: *offset = its first step in the whole sequence,
     * *total = the whole sequence's steps. Every rank passes the same B. */
    prnn_status (*begin)(void *self, int64_t B, int64_t T, int64_t *offset, int64_t *total);

    /* prnn_scan_forward / prnn_scan_backward across the segments (the
     * arguments of prnn_dist_scan_forward / backward). */
    prnn_status (*scan_forward)(void *self, const prnn_scan_desc *desc, void *h, void *hT,
                                const void *a, const void *b, const void *h0);
    prnn_status (*scan_backward)(void *self, const prnn_scan_desc *desc, void *da, void *db,
                                 void *dh0, const void *a, const void *h, const void *h0,
                                 const void *dh, const void *dhT);

    /* dst (n) <- the src (n) of the segment before this one in direction
     * `reverse` (0: the previous rank, 1: the next); zeros on the first
     * segment in that direction. acc: F32 or F64. */
    prnn_status (*pass)(void *self, int reverse, int64_t n, prnn_dtype acc, void *dst,
                        const void *src);

    /* loss (1) acc on the device holds this segment's mean cross-entropy
     * over its scored targets (N) int32; it becomes the mean over every
     * segment's scored targets, and *weight = this segment's share of
     * them (its local mean's factor in the global one). */
    prnn_status (*loss)(void *self, void *loss, prnn_dtype acc, const int32_t *targets,
                        int64_t N, int64_t V, double *weight);

    /* Frees self (the model owns the hook). */
    void (*release)(void *self);
} prnn_seq;

/*
 * prnn_cell_forward / prnn_cell_backward over this rank's segment (B, T) of
 * a sequence cut by seq (NULL: the plain layer). Without lengths, initial
 * or final states (h0, hT, dh0, dhT NULL: the whole sequence starts from
 * zeros); log_space is PRNN_ERR_UNSUPPORTED.
 */
prnn_status prnn_cell_forward_seq(prnn_ctx *ctx, const prnn_cell_desc *desc,
                                  const prnn_seq *seq, int64_t B, int64_t T, void *y, void *act,
                                  const void *x, const void *params);
prnn_status prnn_cell_backward_seq(prnn_ctx *ctx, const prnn_cell_desc *desc,
                                   const prnn_seq *seq, int64_t B, int64_t T, void *dx,
                                   void *dparams, const void *dy, const void *x,
                                   const void *params, const void *act);

/* The model's hook: installs seq (taking ownership; NULL turns the mode
 * off), releasing the one before. */
struct prnn_model;
prnn_status prnn_model_set_seq_(struct prnn_model *model, prnn_seq *seq);
const prnn_seq *prnn_model_seq_(const struct prnn_model *model);

#ifdef __cplusplus
}
#endif

#endif /* PRNN_SEQ_INTERNAL_H */
