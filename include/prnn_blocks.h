/*
 * prnn_blocks.h - the blocks a deep recurrent model needs around its cell
 * layers (embedding, linear, RMSNorm, LayerNorm, softmax cross-entropy,
 * dropout, residual arithmetic) and the optimizer's ops over one flat fp32
 * parameter buffer (AdamW, gradient norm, clipping).
 *
 * Every op is a forward/backward pair with one argument order:
 *
 *     prnn_<op>_<forward|backward>(ctx, outputs..., inputs..., sizes..., options..., dtype)
 *
 * Tensors are row-major, on the context's device (host memory for CPU
 * contexts, device memory for CUDA contexts); a scalar marked "host" is in
 * host memory on both.
 *
 * Storage. Tensors marked "dtype" are in the op's dtype: F32 or F64 on the
 * CPU, F32 or BF16 on CUDA (PRNN_ERR_UNSUPPORTED otherwise). Tensors marked
 * "acc" are in the accumulation type: double for F64, float otherwise. Saved
 * statistics, parameter gradients and losses are acc, so a BF16 model keeps
 * fp32 master gradients. All arithmetic runs in at least the acc type.
 *
 * Gradients of parameters are ADDED to their buffers (so several uses and
 * several micro-batches accumulate: zero the buffer first); gradients of
 * activations (dx) are written.
 *
 * Determinism. Reductions over rows (parameter gradients, losses, norms) run
 * in a fixed order on both devices, so repeated calls give identical bits.
 * The one exception is the CUDA embedding backward with a table so large
 * that its partial sums would pass 256 MiB (see prnn_embedding_backward).
 *
 * Aliasing. Outputs may not overlap inputs or each other
 * (PRNN_ERR_ALIASING), except where an op says so (the elementwise ops work
 * in place).
 *
 * Size letters: N tokens (B*T rows), D features, O output features,
 * V vocabulary (classes), n elements of a flat buffer.
 */
#ifndef PRNN_BLOCKS_H
#define PRNN_BLOCKS_H

#include <stdint.h>

#include "prnn.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------------------ */
/* Embedding: y[n] = table[ids[n]]                                          */

/*
 * Out-of-range ids (outside [0, V)). The CPU checks every id before writing
 * anything and returns PRNN_ERR_INVALID_ARGUMENT. CUDA does not stop the
 * stream to look: it writes a zero row for such a token (and its backward
 * skips it) and sets the optional flag `bad` to 1. The flag is never
 * cleared by the library: zero it once (prnn_mem_zero) and read it when
 * convenient, e.g. with the loss. The CPU sets it too before failing.
 *
 *   y     (N, D) dtype  out
 *   bad   (1)    int32  out, optional (NULL): set to 1 on an out-of-range id
 *   ids   (N)    int32  in
 *   table (V, D) dtype  in
 */
prnn_status prnn_embedding_forward(prnn_ctx *ctx, void *y, int32_t *bad,
                                   const int32_t *ids, const void *table,
                                   int64_t N, int64_t V, int64_t D, prnn_dtype dtype);

/*
 * dtable[ids[n]] += dy[n] for every token. CPU: in token order, the same
 * bits on every thread count. CUDA: groups of tokens sum their rows per id
 * into partials, which are then added in group order: the same bits on
 * every run. When those partials (groups x V x D floats) would pass
 * 256 MiB it adds with fp32 atomics instead, and an id that repeats sums its
 * rows in a varying order (run-to-run differences of a few ulp).
 *
 *   dtable (V, D) acc    in/out, accumulated
 *   ids    (N)    int32  in
 *   dy     (N, D) dtype  in
 */
prnn_status prnn_embedding_backward(prnn_ctx *ctx, void *dtable, const int32_t *ids,
                                    const void *dy, int64_t N, int64_t V, int64_t D,
                                    prnn_dtype dtype);

/* ------------------------------------------------------------------------ */
/* Linear: y = x W + bias, through prnn's GEMM (OpenBLAS / cuBLAS)          */

/*
 *   y    (N, O) dtype  out
 *   x    (N, D) dtype  in
 *   W    (D, O) dtype  in
 *   bias (O)    dtype  in, optional (NULL: no bias)
 */
prnn_status prnn_linear_forward(prnn_ctx *ctx, void *y, const void *x, const void *W,
                                const void *bias, int64_t N, int64_t D, int64_t O,
                                prnn_dtype dtype);

/*
 * dx = dy W^T (written); dW += x^T dy and dbias += column sums of dy
 * (accumulated, in fixed order).
 *
 *   dx    (N, D) dtype  out, optional (NULL: not needed, e.g. a model input)
 *   dW    (D, O) acc    in/out, accumulated
 *   dbias (O)    acc    in/out, accumulated; optional (NULL: no bias)
 *   dy    (N, O) dtype  in
 *   x     (N, D) dtype  in
 *   W     (D, O) dtype  in
 */
prnn_status prnn_linear_backward(prnn_ctx *ctx, void *dx, void *dW, void *dbias,
                                 const void *dy, const void *x, const void *W,
                                 int64_t N, int64_t D, int64_t O, prnn_dtype dtype);

/* ------------------------------------------------------------------------ */
/* Normalization over the D features of each row                            */

/*
 * RMSNorm: y = x * rstd * gain, rstd = 1 / sqrt(mean(x^2) + eps), eps >= 0.
 *
 *   y    (N, D) dtype  out
 *   rstd (N)    acc    out, saved for the backward; optional (NULL) in inference
 *   x    (N, D) dtype  in
 *   gain (D)    dtype  in
 */
prnn_status prnn_rmsnorm_forward(prnn_ctx *ctx, void *y, void *rstd, const void *x,
                                 const void *gain, int64_t N, int64_t D, double eps,
                                 prnn_dtype dtype);

/*
 *   dx    (N, D) dtype  out
 *   dgain (D)    acc    in/out, accumulated
 *   dy    (N, D) dtype  in
 *   x     (N, D) dtype  in
 *   gain  (D)    dtype  in
 *   rstd  (N)    acc    in, as the forward saved it
 */
prnn_status prnn_rmsnorm_backward(prnn_ctx *ctx, void *dx, void *dgain, const void *dy,
                                  const void *x, const void *gain, const void *rstd,
                                  int64_t N, int64_t D, prnn_dtype dtype);

/*
 * LayerNorm: y = (x - mean) * rstd * gain + bias, rstd = 1 / sqrt(var + eps)
 * with the biased variance (over D), eps >= 0.
 *
 *   y    (N, D) dtype  out
 *   mean (N)    acc    out, saved for the backward; optional (NULL)
 *   rstd (N)    acc    out, saved for the backward; optional (NULL)
 *   x    (N, D) dtype  in
 *   gain (D)    dtype  in
 *   bias (D)    dtype  in, optional (NULL: no bias)
 */
prnn_status prnn_layernorm_forward(prnn_ctx *ctx, void *y, void *mean, void *rstd,
                                   const void *x, const void *gain, const void *bias,
                                   int64_t N, int64_t D, double eps, prnn_dtype dtype);

/*
 *   dx    (N, D) dtype  out
 *   dgain (D)    acc    in/out, accumulated
 *   dbias (D)    acc    in/out, accumulated; optional (NULL: no bias)
 *   dy    (N, D) dtype  in
 *   x     (N, D) dtype  in
 *   gain  (D)    dtype  in
 *   mean  (N)    acc    in, as the forward saved it
 *   rstd  (N)    acc    in, as the forward saved it
 */
prnn_status prnn_layernorm_backward(prnn_ctx *ctx, void *dx, void *dgain, void *dbias,
                                    const void *dy, const void *x, const void *gain,
                                    const void *mean, const void *rstd,
                                    int64_t N, int64_t D, prnn_dtype dtype);

/* ------------------------------------------------------------------------ */
/* Softmax cross-entropy                                                    */

/*
 * loss = mean over counted rows of (logsumexp(logits[n]) - logits[n][t_n]),
 * max-subtracted. A target of -1 marks an ignored row (padding); the count
 * is the number of rows with a target in [0, V), and loss = 0 when it is 0.
 * Other targets are out of range: the CPU returns PRNN_ERR_INVALID_ARGUMENT
 * before writing; CUDA ignores the row and sets `bad` (as for embedding).
 *
 *   loss     (1)    acc    out, on the context's device
 *   row_loss (N)    acc    out, optional: each row's loss (0 when ignored)
 *   lse      (N)    acc    out, optional: each row's logsumexp, saved for
 *                          the backward (NULL in evaluation)
 *   bad      (1)    int32  out, optional: set to 1 on an out-of-range target
 *   logits   (N, V) dtype  in
 *   targets  (N)    int32  in
 */
prnn_status prnn_xent_forward(prnn_ctx *ctx, void *loss, void *row_loss, void *lse,
                              int32_t *bad, const void *logits, const int32_t *targets,
                              int64_t N, int64_t V, prnn_dtype dtype);

/*
 * dlogits = (softmax(logits) - onehot(target)) * dloss / count, zero rows
 * for ignored targets. dloss (host) is dL/dloss, e.g. 1, or 1/k when k
 * micro-batches' losses are averaged.
 *
 *   dlogits (N, V) dtype  out
 *   logits  (N, V) dtype  in
 *   targets (N)    int32  in
 *   lse     (N)    acc    in, as the forward saved it
 */
prnn_status prnn_xent_backward(prnn_ctx *ctx, void *dlogits, const void *logits,
                               const int32_t *targets, const void *lse, int64_t N,
                               int64_t V, double dloss, prnn_dtype dtype);

/* ------------------------------------------------------------------------ */
/* Dropout                                                                  */

/*
 * y = x * keep / (1 - p), p in [0, 1). Element i (flat index) is kept when
 * prnn_dropout_keep(seed, i, p) is 1: a counter-based hash of (seed, i), so
 * the CPU and CUDA draw the same mask bit for bit, nothing is stored between
 * forward and backward, and any element can be recomputed alone. Use a fresh
 * seed per layer and step. p = 0 is the identity. y may equal x (in place).
 *
 *   y (n) dtype  out
 *   x (n) dtype  in
 */
prnn_status prnn_dropout_forward(prnn_ctx *ctx, void *y, const void *x, int64_t n,
                                 double p, uint64_t seed, prnn_dtype dtype);

/* dx = dy * keep / (1 - p) with the forward's mask (same seed and p). dx may
 * equal dy.
 *
 *   dx (n) dtype  out
 *   dy (n) dtype  in
 */
prnn_status prnn_dropout_backward(prnn_ctx *ctx, void *dx, const void *dy, int64_t n,
                                  double p, uint64_t seed, prnn_dtype dtype);

/* The mask bit of element i: 1 = kept. The kept fraction is 1 - p to within
 * 2^-32; the same function the ops use. */
int prnn_dropout_keep(uint64_t seed, int64_t i, double p);

/* ------------------------------------------------------------------------ */
/* Elementwise arithmetic for residual stacks                               */

/*
 * y = alpha * a + beta * b; b may be NULL (y = alpha * a: scaling). y may
 * equal a or b exactly (in place), but not overlap them partially. These
 * maps are their own backward: for y = a + b, da = db = dy, and gradients
 * arriving from two paths add with prnn_add. alpha and beta are rounded to
 * the acc type.
 *
 *   y (n) dtype  out
 *   a (n) dtype  in
 *   b (n) dtype  in, optional
 */
prnn_status prnn_axpby(prnn_ctx *ctx, void *y, const void *a, const void *b, int64_t n,
                       double alpha, double beta, prnn_dtype dtype);

/* y = a + b (the residual connection); prnn_axpby with alpha = beta = 1. */
prnn_status prnn_add(prnn_ctx *ctx, void *y, const void *a, const void *b, int64_t n,
                     prnn_dtype dtype);

/* ------------------------------------------------------------------------ */
/* Optimizer ops over one flat fp32 buffer (F32 on both devices)            */

typedef struct prnn_adamw_config {
    double lr;           /* learning rate, >= 0 */
    double beta1, beta2; /* moment decays, in [0, 1) */
    double eps;          /* > 0, added to sqrt(v_hat) */
    double weight_decay; /* decoupled decay, >= 0: p -= lr * weight_decay * p */
} prnn_adamw_config;

/* lr 1e-3, beta1 0.9, beta2 0.999, eps 1e-8, weight_decay 0. */
prnn_adamw_config prnn_adamw_config_default(void);

/*
 * One AdamW step (Loshchilov & Hutter) over n elements, in one pass:
 *
 *   m = beta1 m + (1 - beta1) g          v = beta2 v + (1 - beta2) g^2
 *   m_hat = m / (1 - beta1^step)         v_hat = v / (1 - beta2^step)
 *   p = p - lr * (m_hat / (sqrt(v_hat) + eps) + weight_decay * p)
 *
 * in fp32 with the same operation order (and the same fused multiply-adds)
 * on both devices, so CPU and CUDA agree to the bit in an ISO C build. step
 * counts from 1. Parameters that take no decay (gains, biases) are a
 * separate call over their part of the buffer with weight_decay = 0.
 *
 *   params      (n) f32   in/out  fp32 master weights
 *   m, v        (n) f32   in/out  moments (zero before step 1)
 *   params_bf16 (n) bf16  out, optional: round-to-nearest-even copy of the
 *                         new weights for a BF16 model (either device)
 *   grad        (n) f32   in
 */
prnn_status prnn_adamw_step(prnn_ctx *ctx, float *params, float *m, float *v,
                            void *params_bf16, const float *grad, int64_t n, int64_t step,
                            const prnn_adamw_config *cfg);

/*
 * Sum of squares of a gradient buffer (square it for the global norm:
 * sqrt of the sum over all buffers). Fixed reduction order on both devices
 * (blocks of elements summed, then the block sums in order), so the result
 * does not depend on the thread count or on timing.
 *
 *   sumsq      (1) f32     out, on the context's device, optional
 *   host_sumsq (1) double  out, host, optional (waits for the result)
 *   g          (n) f32     in
 *
 * At least one of sumsq and host_sumsq must be given.
 */
prnn_status prnn_grad_sumsq(prnn_ctx *ctx, float *sumsq, double *host_sumsq, const float *g,
                            int64_t n);

/*
 * Gradient clipping by the global norm, without a trip to the host:
 * g *= max_norm / (sqrt(*sumsq) + 1e-6) when that factor is below 1.
 *
 *   g     (n) f32  in/out
 *   sumsq (1) f32  in, on the context's device (prnn_grad_sumsq's output,
 *                  or a sum of several)
 */
prnn_status prnn_grad_clip(prnn_ctx *ctx, float *g, const float *sumsq, int64_t n,
                           double max_norm);

#ifdef __cplusplus
}
#endif

#endif /* PRNN_BLOCKS_H */
