/*
 * blocks_internal.h - what blocks.c (validation, dispatch, the CPU backend)
 * and blocks_cuda.cu (the CUDA backend) share:
 *
 *   - the functions whose results must agree to the bit on both devices: the
 *     dropout hash, the AdamW element update, bf16 rounding. They are
 *     compiled by both compilers from this one text (host and device code);
 *   - the CUDA backend's entry points. blocks.c calls them only for CUDA
 *     contexts and only with validated arguments: sizes >= 1, no overflow,
 *     a dtype the device supports, required pointers present, no aliasing.
 *
 * Size letters as in prnn_blocks.h: N rows, D features, O outputs,
 * V vocabulary, n elements.
 */
#ifndef PRNN_BLOCKS_INTERNAL_H
#define PRNN_BLOCKS_INTERNAL_H

#include <math.h>
#include <stdint.h>
#include <string.h>

#include "prnn_blocks.h"
#include "prnn_internal.h"

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__CUDACC__)
#define BLOCKS_HD static __host__ __device__ __forceinline__
#else
#define BLOCKS_HD static inline
#endif

/* ------------------------------------------------------------------------ */
/* Dropout's counter-based hash                                             */

/* splitmix64's finalizer: a bijection of 64-bit words whose every output bit
 * depends on every input bit. */
BLOCKS_HD uint64_t blocks_mix64(uint64_t z)
{
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

#define BLOCKS_GOLDEN 0x9E3779B97F4A7C15ull

/* The stream key of a seed: mixing the seed first keeps nearby seeds
 * (layer 0, 1, 2...) from giving overlapping streams. */
BLOCKS_HD uint64_t blocks_dropout_key(uint64_t seed) { return blocks_mix64(seed + BLOCKS_GOLDEN); }

/* Element i is dropped when the top 32 bits of its hash fall below the
 * threshold round-down(p * 2^32): integer work only, identical everywhere. */
BLOCKS_HD uint32_t blocks_dropout_threshold(double p)
{
    if (!(p > 0)) return 0;
    const double t = p * 4294967296.0;
    return t >= 4294967295.0 ? 0xFFFFFFFFu : (uint32_t)t;
}

BLOCKS_HD int blocks_dropout_keep(uint64_t key, uint64_t i, uint32_t threshold)
{
    return (uint32_t)(blocks_mix64(key + (i + 1) * BLOCKS_GOLDEN) >> 32) >= threshold;
}

/* ------------------------------------------------------------------------ */
/* bf16 rounding (round to nearest even; NaN stays NaN)                     */

BLOCKS_HD uint16_t blocks_f32_to_bf16_bits(float f)
{
    uint32_t x;
    memcpy(&x, &f, 4);
    if ((x & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((x >> 16) | 0x40u);
    x += 0x7fffu + ((x >> 16) & 1u);
    return (uint16_t)(x >> 16);
}

/* ------------------------------------------------------------------------ */
/* AdamW, one element                                                       */

/* The step's constants, rounded to fp32 once on the host. */
typedef struct blocks_adamw {
    float lr, beta1, beta2;
    float one_minus_beta1, one_minus_beta2;
    float bc1, bc2; /* 1 - beta^step, computed in double */
    float eps, weight_decay;
} blocks_adamw;

/* Each operation rounds once, in this order, on both devices: the device
 * code names its roundings (__fmul_rn and friends, which nvcc never
 * contracts); the C side is compiled as ISO C, where GCC does not contract
 * either (-ffp-contract=off), and fmaf is the correctly rounded fused op. */
#if defined(__CUDA_ARCH__)
#define BLK_MUL(a, b) __fmul_rn(a, b)
#define BLK_ADD(a, b) __fadd_rn(a, b)
#define BLK_DIV(a, b) __fdiv_rn(a, b)
#define BLK_SQRT(a) __fsqrt_rn(a)
#define BLK_FMA(a, b, c) __fmaf_rn(a, b, c)
#else
#define BLK_MUL(a, b) ((a) * (b))
#define BLK_ADD(a, b) ((a) + (b))
#define BLK_DIV(a, b) ((a) / (b))
#define BLK_SQRT(a) sqrtf(a)
#define BLK_FMA(a, b, c) fmaf(a, b, c)
#endif

/* Updates *m and *v and returns the new parameter. */
BLOCKS_HD float blocks_adamw_update(const blocks_adamw *c, float p, float g, float *m, float *v)
{
    const float mi = BLK_FMA(c->beta1, *m, BLK_MUL(c->one_minus_beta1, g));
    const float vi = BLK_FMA(c->beta2, *v, BLK_MUL(BLK_MUL(c->one_minus_beta2, g), g));
    *m = mi;
    *v = vi;
    const float mhat = BLK_DIV(mi, c->bc1);
    const float vhat = BLK_DIV(vi, c->bc2);
    const float step = BLK_DIV(mhat, BLK_ADD(BLK_SQRT(vhat), c->eps));
    return BLK_FMA(-c->lr, BLK_FMA(c->weight_decay, p, step), p);
}

/* The clipping factor, min(1, max_norm / (sqrt(sumsq) + 1e-6)); 1 means
 * "leave the buffer alone". */
BLOCKS_HD float blocks_clip_factor(float sumsq, float max_norm)
{
    const float f = BLK_DIV(max_norm, BLK_ADD(BLK_SQRT(sumsq), 1e-6f));
    return f < 1.0f ? f : 1.0f;
}

/* ------------------------------------------------------------------------ */
/* CUDA backend (blocks_cuda.cu). dt is F32 or BF16; "acc" tensors are fp32. */

prnn_status prnn_cuda_blocks_embedding_fwd(prnn_ctx *ctx, prnn_dtype dt, void *y, int32_t *bad,
                                           const int32_t *ids, const void *table, int64_t N,
                                           int64_t V, int64_t D);
prnn_status prnn_cuda_blocks_embedding_bwd(prnn_ctx *ctx, prnn_dtype dt, float *dtable,
                                           const int32_t *ids, const void *dy, int64_t N,
                                           int64_t V, int64_t D);

/* y (N, O) dtype: every row = bias (O) dtype. */
prnn_status prnn_cuda_blocks_rows_fill(prnn_ctx *ctx, prnn_dtype dt, void *y, const void *bias,
                                       int64_t N, int64_t O);
/* dst (O) fp32 += column sums of src (N, O) dtype, in a fixed order. */
prnn_status prnn_cuda_blocks_colsum_add(prnn_ctx *ctx, prnn_dtype dt, float *dst,
                                        const void *src, int64_t N, int64_t O);

prnn_status prnn_cuda_blocks_rmsnorm_fwd(prnn_ctx *ctx, prnn_dtype dt, void *y, float *rstd,
                                         const void *x, const void *gain, int64_t N,
                                         int64_t D, float eps);
prnn_status prnn_cuda_blocks_rmsnorm_bwd(prnn_ctx *ctx, prnn_dtype dt, void *dx, float *dgain,
                                         const void *dy, const void *x, const void *gain,
                                         const float *rstd, int64_t N, int64_t D);
prnn_status prnn_cuda_blocks_layernorm_fwd(prnn_ctx *ctx, prnn_dtype dt, void *y, float *mean,
                                           float *rstd, const void *x, const void *gain,
                                           const void *bias, int64_t N, int64_t D, float eps);
prnn_status prnn_cuda_blocks_layernorm_bwd(prnn_ctx *ctx, prnn_dtype dt, void *dx,
                                           float *dgain, float *dbias, const void *dy,
                                           const void *x, const void *gain, const float *mean,
                                           const float *rstd, int64_t N, int64_t D);

prnn_status prnn_cuda_blocks_xent_fwd(prnn_ctx *ctx, prnn_dtype dt, float *loss,
                                      float *row_loss, float *lse, int32_t *bad,
                                      const void *logits, const int32_t *targets, int64_t N,
                                      int64_t V);
prnn_status prnn_cuda_blocks_xent_bwd(prnn_ctx *ctx, prnn_dtype dt, void *dlogits,
                                      const void *logits, const int32_t *targets,
                                      const float *lse, int64_t N, int64_t V, float dloss);

/* prnn_dropout_forward (and backward: the same map) over elements
 * [first, first + n) of a larger tensor's mask: y[i] = x[i] * keep(seed,
 * first + i, p) / (1 - p). A slice of a tensor draws the bits the whole
 * tensor would (the sequence-parallel model's time segments). */
prnn_status blocks_dropout_at(prnn_ctx *ctx, void *y, const void *x, int64_t n, double p,
                              uint64_t seed, int64_t first, prnn_dtype dtype);

/* y[i] = x[i] * keep(key, first + i, threshold) * scale. */
prnn_status prnn_cuda_blocks_dropout(prnn_ctx *ctx, prnn_dtype dt, void *y, const void *x,
                                     int64_t n, uint64_t first, uint64_t key,
                                     uint32_t threshold, float scale);
/* y = alpha a + beta b (b may be NULL); y may equal a or b. */
prnn_status prnn_cuda_blocks_axpby(prnn_ctx *ctx, prnn_dtype dt, void *y, const void *a,
                                   const void *b, int64_t n, float alpha, float beta);

prnn_status prnn_cuda_blocks_adamw(prnn_ctx *ctx, float *params, float *m, float *v,
                                   void *params_bf16, const float *grad, int64_t n,
                                   const blocks_adamw *c);
prnn_status prnn_cuda_blocks_sumsq(prnn_ctx *ctx, float *sumsq, double *host_sumsq,
                                   const float *g, int64_t n);
prnn_status prnn_cuda_blocks_clip(prnn_ctx *ctx, float *g, const float *sumsq, int64_t n,
                                  float max_norm);

#ifdef __cplusplus
}
#endif

#endif /* PRNN_BLOCKS_INTERNAL_H */
