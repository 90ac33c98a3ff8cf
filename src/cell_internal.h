/*
 * cell_internal.h - the elementwise primitives the cell layers are built
 * from, implemented once per backend (cell_cpu.c, cell_cuda.cu) with the
 * same signatures and the same semantics. cell.c validates the public
 * arguments, orchestrates GEMMs (prnn_gemm), scans (the scan backends) and
 * these primitives, and dispatches each primitive on the context's device.
 *
 * All (B, T, *) tensors have rows of T steps; a row's valid steps are
 * t < len(b) (len = T without lengths). "First step" and "previous step"
 * follow the scan's direction: for reverse = 1 the first valid step of row b
 * is t = len(b) - 1 and the previous step of t is t + 1.
 *
 * Storage: tensors marked "dtype" are in e->dtype (F32/F64 on the CPU,
 * F32/BF16 on CUDA); tensors marked "acc" are in the accumulation type
 * (double for F64, float otherwise). All math runs in the accumulation type.
 *
 * Size letters: B batch rows, T steps, H hidden units of one direction,
 * D input features, G gate groups (group k = columns [k*H, (k+1)*H) of P).
 */
#ifndef PRNN_CELL_INTERNAL_H
#define PRNN_CELL_INTERNAL_H

#include "prnn_cell.h"
#include "prnn_internal.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Which elementwise map a primitive applies. */
typedef enum cell_stage {
    CELL_STAGE_MAIN = 0,  /* the cell's own gates / output (scan 2 of GILR) */
    CELL_STAGE_SURROGATE  /* GILR_LSTM's surrogate: groups g, j of P */
} cell_stage;

/* One direction of one layer, as the primitives see it. */
typedef struct cell_ew {
    prnn_cell_type type;
    prnn_qrnn_pooling pooling;
    int log_space;
    cell_stage stage;
    prnn_dtype dtype;
    int64_t B, T, H, D;
    int64_t G;               /* gate groups of P (its row stride is G*H) */
    int reverse;
    const int64_t *lengths;  /* (B) on the context's device (host memory on
                                the CPU), or NULL */
} cell_ew;

/*
 * Gates forward: a, b (B, T, H) dtype from P (B, T, G*H) dtype and bias
 * (G*H) dtype or NULL (added to P before any activation). In log space a and
 * b hold log a and log b. Values past a row's length are unspecified. b may
 * be NULL: then only a is computed, reading only the groups a depends on
 * (the backward's recompute, where the scan's backward needs a alone).
 */
prnn_status cell_gates_fwd(prnn_ctx *ctx, const cell_ew *e, void *a, void *b,
                           const void *P, const void *bias);

/*
 * What the main stage's output map takes from P, as the layer and the
 * benchmark see it (the kernels' own map of it: map_of in cell_cuda.cu):
 *   y_is_c  y = c: minGRU and minLSTM in linear space, QRNN f-pooling (no
 *           pass needed where y has c's layout; dL/dc is dy itself)
 *   first, count  the adjacent groups of P the map reads, whose dP
 *           cell_out_bwd writes: o (QRNN fo and ifo, GILR-LSTM), r (SRU)
 *           and p (SRU with D != H); none for the others, log space
 *           included (y = exp(l))
 * sru_x: SRU's highway is x itself (D == H).
 */
typedef struct cell_out_use {
    int y_is_c;
    int64_t first, count;
} cell_out_use;

static inline cell_out_use cell_out_use_of(prnn_cell_type type, prnn_qrnn_pooling pooling,
                                           int log_space, int sru_x)
{
    cell_out_use u = {0, 0, 0};
    if (log_space) return u;
    switch (type) {
    case PRNN_CELL_MINGRU:
    case PRNN_CELL_MINLSTM: u.y_is_c = 1; break;
    case PRNN_CELL_QRNN:
        if (pooling == PRNN_QRNN_F) u.y_is_c = 1;
        else u.first = 2, u.count = 1; /* o */
        break;
    case PRNN_CELL_SRU: u.first = 2, u.count = sru_x ? 1 : 2; break; /* r (, p) */
    case PRNN_CELL_GILR_LSTM: u.first = 4, u.count = 1; break;     /* o */
    default: break;
    }
    return u;
}

/*
 * Output forward: y (B, T, *) dtype with row stride ldy (the caller offsets y
 * to the direction's first column) from c (B, T, H) dtype (log c in log
 * space), P, bias and x (B, T, D) dtype (SRU's highway when D == H). Zero
 * past a row's length.
 */
prnn_status cell_out_fwd(prnn_ctx *ctx, const cell_ew *e, void *y, int64_t ldy,
                         const void *c, const void *P, const void *bias, const void *x);

/*
 * Output backward, from dy (B, T, *) dtype with row stride ldy:
 *   dc (B, T, H) dtype   dL/dc through y alone (dL/dl in log space)
 *   dP (B, T, G*H) dtype the groups the output reads (QRNN o, SRU r and p)
 *                        are written; other groups are left untouched
 *   dx (B, T, D) dtype   SRU with D == H only: dx += (1 - sigma(r)) * dy
 *                        (accumulates); NULL otherwise
 * Zero past a row's length (dc and the written dP groups).
 */
prnn_status cell_out_bwd(prnn_ctx *ctx, const cell_ew *e, void *dc, void *dP, void *dx,
                         const void *dy, int64_t ldy, const void *c, const void *P,
                         const void *bias, const void *x);

/*
 * Gates backward: the gate groups of dP (those gates_fwd reads) from da, db
 * (B, T, H) dtype, the gradients with respect to a and b (log a and log b in
 * log space). Zero past a row's length. dbias (G*H) acc, or NULL: the bias
 * gradients of those groups, dbias[group] += the sum of the group's dP over
 * all B*T rows (in the same pass; CUDA sums the values before their rounding
 * to a 16-bit dtype). Columns of other groups are untouched.
 */
prnn_status cell_gates_bwd(prnn_ctx *ctx, const cell_ew *e, void *dP, const void *da,
                           const void *db, const void *P, const void *bias, void *dbias);

/*
 * Log-space scan forward: l_t = logaddexp(la_t + l_{t-1}, lb_t), l (B, T, H)
 * dtype, lT (B, H) acc optional (the state after the last valid step, as
 * log), la/lb (B, T, H) dtype, l0 (B, H) acc: the initial LOG state, or NULL
 * for log 0 = -inf. Zero past a row's length in l.
 */
prnn_status cell_logscan_fwd(prnn_ctx *ctx, const cell_ew *e, void *l, void *lT,
                             const void *la, const void *lb, const void *l0);

/*
 * The log-space scan's local derivative w_t = d l_t / d l_{t-1} =
 * exp(la_t + l_{t-1} - l_t), w (B, T, H) dtype (zero past the length). Then
 * g = the linear scan backward with a := w, and dla = g w, dlb = g (1 - w).
 */
prnn_status cell_logscan_w(prnn_ctx *ctx, const cell_ew *e, void *w, const void *la,
                           const void *l, const void *l0);

/*
 * Shift by one step in the scan's direction:
 *   dst[b, t, 0:n] = src[b, prev(t), 0:n]   for valid t after the first,
 *   dst[b, first, 0:n] = init[b, 0:n]       (zeros when init is NULL),
 *   zero past the row's length.
 * dst, src dtype with row strides ld_dst, ld_src (elements, per step);
 * init acc with row stride ld_init (per batch row).
 */
prnn_status cell_shift(prnn_ctx *ctx, const cell_ew *e, int64_t n, void *dst, int64_t ld_dst,
                       const void *src, int64_t ld_src, const void *init, int64_t ld_init);

/*
 * The adjoint of cell_shift: dst[b, prev(t), :] += src[b, t, :] for valid t
 * after the first; dinit[b, :] = src[b, first, :] (zeros for an empty row)
 * when dinit is not NULL. dst, src dtype; dinit acc.
 */
prnn_status cell_unshift_add(prnn_ctx *ctx, const cell_ew *e, int64_t n, void *dst,
                             int64_t ld_dst, const void *src, int64_t ld_src, void *dinit,
                             int64_t ld_dinit);

/* dst (n) acc += sum over rows of src (rows, n) dtype with row stride ld. */
prnn_status cell_colsum_add(prnn_ctx *ctx, prnn_dtype dtype, int64_t rows, int64_t n,
                            void *dst, const void *src, int64_t ld);

/* 2-D strided copy of `rows` rows of `width` bytes (host or device memory
 * by the context's device). */
prnn_status cell_copy2d(prnn_ctx *ctx, void *dst, int64_t dpitch, const void *src,
                        int64_t spitch, int64_t width, int64_t rows);

/* Converts n values between a dtype tensor and an acc tensor (e.g. the
 * x_prev part of a state). dir 0: dst acc <- src dtype; 1: dst dtype <- acc. */
prnn_status cell_convert(prnn_ctx *ctx, prnn_dtype dtype, int dir, int64_t rows, int64_t n,
                         void *dst, int64_t ld_dst, const void *src, int64_t ld_src);

/*
 * Elementwise maps over n contiguous acc values (dst may equal src), for the
 * states at a sequence's ends in log space:
 *   CELL_MAP_LOG      dst = log(src)          c -> log c (log 0 = -inf)
 *   CELL_MAP_EXP      dst = exp(src)          log c -> c
 *   CELL_MAP_MUL_EXP  dst = src * exp(aux)    dL/dc_T -> dL/dl_T (aux = l_T)
 *   CELL_MAP_ADD      dst = src + aux         sums two state gradients
 * aux is unused (may be NULL) for LOG and EXP.
 */
typedef enum cell_state_op {
    CELL_MAP_LOG = 0,
    CELL_MAP_EXP,
    CELL_MAP_MUL_EXP,
    CELL_MAP_ADD
} cell_state_op;

prnn_status cell_state_map(prnn_ctx *ctx, prnn_dtype dtype, cell_state_op op, int64_t n,
                           void *dst, const void *src, const void *aux);

/*
 * The log-space scan's backward, after g = the linear scan backward's db run
 * with a := w (cell_logscan_w):
 *   dla = g w, dlb = g (1 - w)    (B, T, H) dtype, zero past the length
 *   dc0 (B, H) acc, optional: dL/dc0 = g_first * exp(la_first - l_first),
 *       finite at c0 = 0; for an empty row dcT[b] (zeros when dcT is NULL)
 * from g, w, la, l (B, T, H) dtype and dcT (B, H) acc, dL/dc_T, or NULL.
 * Outputs overlap no input.
 */
prnn_status cell_logscan_bwd(prnn_ctx *ctx, const cell_ew *e, void *dla, void *dlb, void *dc0,
                             const void *g, const void *w, const void *la, const void *l,
                             const void *dcT);

/*
 * A row's last valid step in the scan's direction (pass e with reverse
 * flipped for its first step), for QRNN window 2's x_prev state:
 *   dir 0: dst[b, 0:n] acc = src[b, last, 0:n] dtype, or init[b, 0:n] acc
 *          for an empty row (zeros when init is NULL)
 *   dir 1: dst[b, last, 0:n] dtype += src[b, 0:n] acc; empty rows untouched
 *          (init unused)
 * Row strides: per step for (B, T, *) tensors, per batch row for (B, *).
 */
prnn_status cell_last(prnn_ctx *ctx, const cell_ew *e, int dir, int64_t n, void *dst,
                      int64_t ld_dst, const void *src, int64_t ld_src, const void *init,
                      int64_t ld_init);

/* ------------------------------------------------------------------------ */
/* Backends: the functions above dispatch to these by ctx->device.          */

#define CELL_BACKEND_DECLS(P)                                                          \
    prnn_status P##gates_fwd(prnn_ctx *, const cell_ew *, void *, void *, const void *, \
                             const void *);                                            \
    prnn_status P##out_fwd(prnn_ctx *, const cell_ew *, void *, int64_t, const void *,  \
                           const void *, const void *, const void *);                  \
    prnn_status P##out_bwd(prnn_ctx *, const cell_ew *, void *, void *, void *,         \
                           const void *, int64_t, const void *, const void *,          \
                           const void *, const void *);                                 \
    prnn_status P##gates_bwd(prnn_ctx *, const cell_ew *, void *, const void *,         \
                             const void *, const void *, const void *, void *);        \
    prnn_status P##logscan_fwd(prnn_ctx *, const cell_ew *, void *, void *,             \
                               const void *, const void *, const void *);              \
    prnn_status P##logscan_w(prnn_ctx *, const cell_ew *, void *, const void *,         \
                             const void *, const void *);                              \
    prnn_status P##shift(prnn_ctx *, const cell_ew *, int64_t, void *, int64_t,         \
                         const void *, int64_t, const void *, int64_t);                \
    prnn_status P##unshift_add(prnn_ctx *, const cell_ew *, int64_t, void *, int64_t,   \
                               const void *, int64_t, void *, int64_t);                \
    prnn_status P##colsum_add(prnn_ctx *, prnn_dtype, int64_t, int64_t, void *,         \
                              const void *, int64_t);                                  \
    prnn_status P##copy2d(prnn_ctx *, void *, int64_t, const void *, int64_t, int64_t,  \
                          int64_t);                                                    \
    prnn_status P##convert(prnn_ctx *, prnn_dtype, int, int64_t, int64_t, void *,       \
                           int64_t, const void *, int64_t);                            \
    prnn_status P##state_map(prnn_ctx *, prnn_dtype, cell_state_op, int64_t, void *,    \
                             const void *, const void *);                              \
    prnn_status P##logscan_bwd(prnn_ctx *, const cell_ew *, void *, void *, void *,     \
                               const void *, const void *, const void *, const void *, \
                               const void *);                                          \
    prnn_status P##last(prnn_ctx *, const cell_ew *, int, int64_t, void *, int64_t,     \
                        const void *, int64_t, const void *, int64_t);

CELL_BACKEND_DECLS(prnn_cpu_cell_)
CELL_BACKEND_DECLS(prnn_cuda_cell_)

/* The device copy of host lengths for the primitives (the CPU returns the
 * host pointer). CUDA: uploaded into the context's own buffer on its
 * stream; valid until the next call. */
prnn_status prnn_cuda_cell_lengths(prnn_ctx *ctx, const int64_t *lengths, int64_t B,
                                   const int64_t **dev);

#ifdef __cplusplus
}
#endif

#endif /* PRNN_CELL_INTERNAL_H */
