/*
 * prnn_cell.h - recurrent layers whose recurrence is linear in the state once
 * the gates are computed from the input, so it runs on the parallel scan:
 * minGRU, minLSTM, QRNN, SRU and GILR-LSTM.
 *
 * A layer maps x (B, T, D) to y (B, T, Hout) with Hout = H, or 2H when
 * bidirectional (the forward direction's output in columns [0, H), the
 * reverse direction's in [H, 2H)). Each direction computes
 *
 *   P = X W (+ bias)      one GEMM over all B*T tokens, G gate groups of H
 *                         columns each: group k is columns [k*H, (k+1)*H)
 *   a, b = gates(P)       elementwise
 *   c_t = a_t * c_{t-1} + b_t      the scan (reverse direction: c_{t+1})
 *   y = out(c, P, x)      elementwise
 *
 * with sigma the logistic function, g(v) = v + 1/2 for v >= 0 and sigma(v)
 * for v < 0 (minGRU/minLSTM's positive activation), and these cells:
 *
 * MINGRU (Feng et al. 2024, "Were RNNs All We Needed?"), G = 2: [k, n]
 *     z = sigma(k), a = 1 - z, b = z * g(n), y = c
 * MINLSTM (same paper), G = 3: [f, i, n]
 *     f' = sigma(f) / (sigma(f) + sigma(i)), i' = sigma(i) / (sigma(f) + sigma(i))
 *     a = f', b = i' * g(n), y = c
 * QRNN (Bradbury et al. 2016, "Quasi-Recurrent Neural Networks"):
 *     window 1: P = x_t W; window 2: P = x_t W_0 + x_{t-1} W_1, where W is
 *     (2D, G*H), rows [0, D) = W_0 and [D, 2D) = W_1, and x_{t-1} is the
 *     previous step in the scan's direction (the state's x_prev before the
 *     first step of a row).
 *     f-pooling,   G = 2: [z, f]        a = sigma(f), b = (1 - a) tanh(z), y = c
 *     fo-pooling,  G = 3: [z, f, o]     as f-pooling, y = sigma(o) * c
 *     ifo-pooling, G = 4: [z, f, o, i]  a = sigma(f), b = sigma(i) tanh(z),
 *                                       y = sigma(o) * c
 * SRU (Lei et al. 2017, "Training RNNs as Fast as CNNs"), G = 3: [u, f, r],
 *     or G = 4: [u, f, r, p] when D != H (p projects x for the highway)
 *     a = sigma(f), b = (1 - a) * u,
 *     y = sigma(r) * tanh(c) + (1 - sigma(r)) * x_t   (p_t in place of x_t
 *                                                      when D != H)
 * GILR_LSTM (Martin & Cundy 2018, "Parallelizing Linear Recurrent Neural
 *     Nets Over Sequence Length"): an LSTM whose h_{t-1} in the gates is
 *     replaced by a linear surrogate s, itself a GILR layer. Two scans.
 *     W is (D, 6H): [g, j, f, i, o, z]; U is (H, 4H) for [f, i, o, z].
 *     s_t = sigma(g) * s_{t-1} + (1 - sigma(g)) * tanh(j)       (scan 1)
 *     [f, i, o, z] += s_{t-1} U                                   (GEMM)
 *     c_t = sigma(f) * c_{t-1} + sigma(i) * tanh(z)               (scan 2)
 *     y = sigma(o) * c
 *
 * Parameters, one flat buffer per layer (dtype of the descriptor), per
 * direction: W (Din, G*H) row-major, then U (H, 4H) for GILR_LSTM only,
 * then bias (G*H) when desc.bias; the reverse direction's block follows the
 * forward's. Din = D, or 2D for QRNN window 2.
 *
 * States, per direction, S floats per batch row (the accumulation type:
 * double for F64, float otherwise): [c] (H) for MINGRU, MINLSTM, SRU;
 * [c, x_prev] (H + D) for QRNN window 2 and [c] for window 1; [s, c] (2H)
 * for GILR_LSTM. A bidirectional layer's state rows are [forward, reverse],
 * 2S floats. h0 = NULL means zeros.
 *
 * Log space (MINGRU and MINLSTM, desc.log_space = 1): the scan runs on
 * l = log c, l_t = logaddexp(log a_t + l_{t-1}, log b_t), with log a and
 * log b computed directly from the pre-activations (log sigma(v) =
 * -softplus(-v), log g(v)), for gates whose products underflow in linear
 * space. c (and so h0) must be positive there; y = exp(l). The states given
 * and returned are c (not log c).
 *
 * Variable lengths: lengths (host memory, B entries in [0, T]) as for the
 * scan; y is zero past a row's length, hT holds the state after its last
 * valid step, and dx is zero past the length.
 *
 * Memory option (desc.recompute = k > 1): the forward saves only the state
 * entering every k-th step, O(B*T*H/k), and the backward recomputes the
 * GEMM and the scan inside each chunk of k steps from those states. k = 0 or
 * 1 saves everything the backward reads.
 *
 * Precision: CPU F32 and F64 (the precision of gradient checks); CUDA F32
 * and BF16 (mixed precision: bf16 x, y, params and saved activations, fp32
 * carries, gate math and GEMM accumulation). Parameter gradients are always
 * in the accumulation type (fp32 master gradients for bf16 layers).
 *
 * Size letters: B batch rows, T time steps, D input features, H hidden
 * units per direction, G gate groups, S state floats per direction.
 */
#ifndef PRNN_CELL_H
#define PRNN_CELL_H

#include "prnn.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum prnn_cell_type {
    PRNN_CELL_MINGRU = 0,
    PRNN_CELL_MINLSTM,
    PRNN_CELL_QRNN,
    PRNN_CELL_SRU,
    PRNN_CELL_GILR_LSTM,
    PRNN_CELL_TYPE_COUNT_
} prnn_cell_type;

typedef enum prnn_qrnn_pooling {
    PRNN_QRNN_F = 0,
    PRNN_QRNN_FO,
    PRNN_QRNN_IFO,
    PRNN_QRNN_POOLING_COUNT_
} prnn_qrnn_pooling;

/* "mingru", "minlstm", "qrnn", "sru", "gilr-lstm"; NULL for bad values. */
const char *prnn_cell_type_name(prnn_cell_type type);
/* Parses those names; PRNN_ERR_INVALID_ARGUMENT for unknown ones. */
prnn_status prnn_cell_type_parse(const char *name, prnn_cell_type *type);

typedef struct prnn_cell_desc {
    prnn_cell_type type;
    int64_t D;                  /* input features */
    int64_t H;                  /* hidden units per direction */
    prnn_dtype dtype;           /* x, y, params, saved activations */
    int bidirectional;          /* 0 or 1 */
    int bias;                   /* 0 or 1: a bias per gate column */
    int log_space;              /* MINGRU, MINLSTM: scan in log space */
    prnn_qrnn_pooling pooling;  /* QRNN */
    int window;                 /* QRNN: 1 or 2 */
    int64_t recompute;          /* memory option: 0/1 off, k > 1 chunk steps */
    prnn_scan_algo algo;        /* the scan's algorithm (AUTO) */
} prnn_cell_desc;

/* F32, unidirectional, with bias, linear space, QRNN fo-pooling window 1. */
prnn_cell_desc prnn_cell_desc_make(prnn_cell_type type, int64_t D, int64_t H);

/* Checks a descriptor: sizes >= 1, options in range and meaningful for the
 * cell (log_space only for MINGRU/MINLSTM, window only for QRNN). */
prnn_status prnn_cell_check(const prnn_cell_desc *desc);

/* Output columns Hout (H or 2H). */
int64_t prnn_cell_out_size(const prnn_cell_desc *desc);
/* Gate groups G per direction. */
int64_t prnn_cell_gates(const prnn_cell_desc *desc);
/* Parameters (elements) of the whole layer, both directions. */
prnn_status prnn_cell_param_count(const prnn_cell_desc *desc, int64_t *count);
/* State floats per batch row of the whole layer (S, or 2S bidirectional). */
prnn_status prnn_cell_state_size(const prnn_cell_desc *desc, int64_t *floats);
/* Bytes of saved activations a forward with (B, T) writes for the backward. */
prnn_status prnn_cell_act_bytes(const prnn_cell_desc *desc, int64_t B, int64_t T,
                                size_t *bytes);

/*
 * Fills params (host memory, desc->dtype F32 or F64) with the layer's
 * initial values from seed: W and U uniform in +-1/sqrt(fan_in), biases
 * zero except forget-type gates (minLSTM f, QRNN f, SRU f, GILR g and f),
 * which start at +1 so that memory is long at the start of training.
 */
prnn_status prnn_cell_init_params(const prnn_cell_desc *desc, void *params, uint64_t seed);

/*
 * Forward over a whole sequence.
 *
 *   y       (B, T, Hout)  out
 *   hT      (B, S2)       out  final states, optional (NULL)
 *   act     act_bytes     out  saved for the backward; NULL in inference
 *   x       (B, T, D)     in
 *   params  (P)           in
 *   h0      (B, S2)       in   initial states, optional (NULL = zeros)
 *   lengths (B)           in   host memory, optional (NULL = all T)
 *
 * S2 = prnn_cell_state_size(). Tensors are on the context's device.
 */
prnn_status prnn_cell_forward(prnn_ctx *ctx, const prnn_cell_desc *desc,
                              int64_t B, int64_t T, const int64_t *lengths,
                              void *y, void *hT, void *act,
                              const void *x, const void *params, const void *h0);

/*
 * Backward: given dL/dy (and dL/dhT), writes dL/dx and dL/dh0 and ADDS the
 * parameter gradients to dparams (so gradients of several uses accumulate;
 * zero it first). dparams has the parameters' layout in the accumulation
 * type. act is what the forward wrote with the same arguments.
 *
 *   dx      (B, T, D)  out
 *   dparams (P)        in/out  accumulated
 *   dh0     (B, S2)    out     optional (NULL)
 *   dy      (B, T, Hout) in
 *   dhT     (B, S2)    in      optional (NULL = zeros)
 */
prnn_status prnn_cell_backward(prnn_ctx *ctx, const prnn_cell_desc *desc,
                               int64_t B, int64_t T, const int64_t *lengths,
                               void *dx, void *dparams, void *dh0,
                               const void *dy, const void *dhT,
                               const void *x, const void *params, const void *h0,
                               const void *act);

/*
 * One step of the recurrence, O(1) work per token: the form generation
 * uses. state (B, S) holds the layer's state and is updated in place.
 * Unidirectional layers only.
 *
 *   y      (B, H)  out
 *   state  (B, S)  in/out
 *   x      (B, D)  in
 */
prnn_status prnn_cell_step(prnn_ctx *ctx, const prnn_cell_desc *desc, int64_t B,
                           void *y, void *state, const void *x, const void *params);

#ifdef __cplusplus
}
#endif

#endif /* PRNN_CELL_H */
