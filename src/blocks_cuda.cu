/*
 * blocks_cuda.cu - the CUDA backend of prnn_blocks.h: embedding, linear's
 * bias and column sums, RMSNorm, LayerNorm, softmax cross-entropy, dropout,
 * elementwise arithmetic and the optimizer ops. blocks.c validates the
 * arguments and calls these entry points (blocks_internal.h) for CUDA
 * contexts; the CPU code in blocks.c is the oracle they are tested against.
 *
 * Storage: T is float or __nv_bfloat16; every sum, statistic and parameter
 * gradient is fp32 (the acc type), and each stored value rounds once.
 *
 * Kernel shapes:
 *   elementwise       grid-stride loops over the flat index
 *   row statistics    one warp per row (norms), one block per row (softmax,
 *                     whose rows are a vocabulary long)
 *   sums over rows    two passes in a fixed order, no atomics: partial sums
 *                     over groups of rows, then the groups added in order,
 *                     with a split that depends only on the sizes. So
 *                     parameter gradients, the loss and the gradient norm
 *                     are the same bits on every run and every device.
 *   embedding grads   in a fixed order too: each group of tokens sums its
 *                     rows per id into (groups, V, D) partials, then the
 *                     groups are added in order. Only when those partials
 *                     would pass 256 MiB (huge V * D) does it fall back to
 *                     fp32 atomics, whose order of repeated ids varies.
 *
 * Manners: all work on the context's stream under the device guard, a
 * launch check after every launch, scratch from prnn_scratch (no
 * allocation per call), no printing.
 *
 * Size letters: N rows, D features, O outputs, V vocabulary, n elements;
 * G groups of R rows in the two-pass sums.
 */
#include <cuda_bf16.h>
#include <math.h>
#include <stdint.h>

#include "blocks_internal.h"
#include "cuda_common.cuh"

/* Launches go through this macro so that the lab's host simulator
 * (dev/cuda/sim) can run these kernels too. */
#ifndef PRNN_LAUNCH
#define PRNN_LAUNCH(kernel, grid, block, stream, ...)                          \
    prnn_cuda::launch(kernel, dim3(grid), dim3(block), 0, (stream), __VA_ARGS__)
#endif

using namespace prnn_cuda;

namespace {

constexpr int kThreads = 256;      /* every kernel but the one-block reductions */
constexpr int kReduceThreads = 1024;
constexpr int64_t kMaxBlocks = 8192; /* grid-stride loops cover the rest */

/* The two-pass column sums aim for about this many (group, column) threads
 * in the first pass, with at least kMinGroupRows rows per group. */
constexpr int64_t kColsumThreads = (int64_t)1 << 17;
constexpr int64_t kMinGroupRows = 32;
constexpr int64_t kMaxGroups = 4096;

/* Elements a thread squares in fp32 before its sum joins the fp64 ones. */
constexpr int64_t kSumsqPerThread = 256;

cudaStream_t stream_of(prnn_ctx *ctx) { return static_cast<cudaStream_t>(prnn_cuda_stream(ctx)); }

int64_t ceil_div(int64_t x, int64_t y) { return (x + y - 1) / y; }

unsigned grid_for(int64_t work, int64_t per_block)
{
    const int64_t b = ceil_div(work, per_block);
    return (unsigned)(b < 1 ? 1 : b > kMaxBlocks ? kMaxBlocks : b);
}

#define GUARD()                                                                \
    device_guard guard_(prnn_cuda_device_of(ctx));                             \
    if (guard_.err != cudaSuccess) return map_cuda_error(guard_.err)

/* Runs fn with a value of the storage type: fn(float{}) or fn(bf16{}). */
template <typename Fn> prnn_status by_dtype(prnn_dtype dt, Fn fn)
{
    if (dt == PRNN_DTYPE_BF16) return fn(__nv_bfloat16{});
    return fn(float{});
}

/* ------------------------------------------------------------------------ */
/* Device helpers                                                           */

__device__ __forceinline__ float ldf(const float *p, int64_t i) { return p[i]; }
__device__ __forceinline__ float ldf(const __nv_bfloat16 *p, int64_t i)
{
    return __bfloat162float(p[i]);
}
__device__ __forceinline__ void stf(float *p, int64_t i, float v) { p[i] = v; }
__device__ __forceinline__ void stf(__nv_bfloat16 *p, int64_t i, float v)
{
    p[i] = __float2bfloat16_rn(v);
}

__device__ __forceinline__ int64_t global_tid()
{
    return (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
}
__device__ __forceinline__ int64_t grid_threads() { return (int64_t)gridDim.x * blockDim.x; }

template <typename F> __device__ __forceinline__ F warp_sum(F v)
{
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

/* The sum over the block, returned to every thread. Every warp folds the
 * per-warp sums in the same order, so all threads hold the same bits.
 * sh: 32 entries of shared memory, free again when this returns. */
template <typename F> __device__ F block_sum(F v, F *sh)
{
    const int lane = threadIdx.x & 31, w = threadIdx.x >> 5, nw = blockDim.x >> 5;
    v = warp_sum(v);
    if (lane == 0) sh[w] = v;
    __syncthreads();
    v = lane < nw ? sh[lane] : F(0);
    v = warp_sum(v);
    __syncthreads();
    return v;
}

/* Merges two (max, sum of exp(x - max)) pairs of an online softmax. */
__device__ __forceinline__ void lse_merge(float &m, float &s, float m2, float s2)
{
    const float M = fmaxf(m, m2);
    if (M == -INFINITY) { /* both empty */
        s = 0.f;
    } else {
        s = (m == -INFINITY ? 0.f : s * expf(m - M)) + (m2 == -INFINITY ? 0.f : s2 * expf(m2 - M));
    }
    m = M;
}

/* ------------------------------------------------------------------------ */
/* Embedding                                                                */

template <typename T>
__global__ void embedding_fwd_kernel(T *__restrict__ y, int32_t *bad,
                                     const int32_t *__restrict__ ids,
                                     const T *__restrict__ table, int64_t N, int64_t V, int64_t D)
{
    grid_dep_begin();
    for (int64_t i = global_tid(); i < N * D; i += grid_threads()) {
        const int64_t n = i / D, d = i - n * D;
        const int32_t id = ids[n];
        if (id >= 0 && id < V) {
            y[i] = table[(int64_t)id * D + d];
        } else {
            stf(y, i, 0.f);
            if (d == 0 && bad) atomicOr(bad, 1);
        }
    }
}

template <typename T>
__global__ void embedding_bwd_kernel(float *dtable, const int32_t *__restrict__ ids,
                                     const T *__restrict__ dy, int64_t N, int64_t V, int64_t D)
{
    grid_dep_begin();
    for (int64_t i = global_tid(); i < N * D; i += grid_threads()) {
        const int64_t n = i / D, d = i - n * D;
        const int32_t id = ids[n];
        if (id >= 0 && id < V) atomicAdd(&dtable[(int64_t)id * D + d], ldf(dy, i));
    }
}

/* Fixed-order embedding backward, pass 1: token group c = blockIdx.x, column
 * d: part[c][v][d] = sum of dy[n][d] over the group's tokens n with id v, in
 * token order (each thread owns one column, so no two threads share a sum). */
template <typename T>
__global__ void embedding_bwd_part_kernel(float *__restrict__ part, const int32_t *__restrict__ ids,
                                          const T *__restrict__ dy, int64_t N, int64_t V,
                                          int64_t D, int64_t R)
{
    grid_dep_begin();
    const int64_t c = blockIdx.x, d = (int64_t)blockIdx.y * blockDim.x + threadIdx.x;
    if (d >= D) return;
    float *pc = part + c * V * D;
    for (int64_t v = 0; v < V; v++) pc[v * D + d] = 0.0f;
    const int64_t end = (c + 1) * R < N ? (c + 1) * R : N;
    for (int64_t n = c * R; n < end; n++) {
        const int32_t id = ids[n];
        if (id >= 0 && id < V) pc[(int64_t)id * D + d] += ldf(dy, n * D + d);
    }
}

/* Pass 2: dtable[v][d] += sum over groups c of part[c][v][d], c in order. */
__global__ void embedding_bwd_finish_kernel(float *dtable, const float *__restrict__ part,
                                            int64_t C, int64_t VD)
{
    grid_dep_begin();
    for (int64_t i = global_tid(); i < VD; i += grid_threads()) {
        float s = 0.0f;
        for (int64_t c = 0; c < C; c++) s += part[c * VD + i];
        dtable[i] += s;
    }
}

/* ------------------------------------------------------------------------ */
/* Row broadcast and the two-pass column sums                               */

template <typename T>
__global__ void rows_fill_kernel(T *__restrict__ y, const T *__restrict__ row, int64_t N,
                                 int64_t O)
{
    grid_dep_begin();
    for (int64_t i = global_tid(); i < N * O; i += grid_threads()) y[i] = row[i % O];
}

enum col_mode { COL_PLAIN = 0, COL_RMS = 1, COL_LN = 2 };

/* Pass 1: group g = blockIdx.y sums its R rows of column d, in row order.
 *   COL_PLAIN  p0 = sum dy
 *   COL_RMS    p0 = sum dy * x * rstd
 *   COL_LN     p0 = sum dy * (x - mean) * rstd,  p1 = sum dy
 *
 *   p0, p1     (G, D) fp32
 *   dy, x      (N, D) T
 *   mean, rstd (N)    fp32 */
template <typename T, int MODE>
__global__ void colsum_partial_kernel(float *__restrict__ p0, float *__restrict__ p1,
                                      const T *__restrict__ dy, const T *__restrict__ x,
                                      const float *__restrict__ mean,
                                      const float *__restrict__ rstd, int64_t N, int64_t D,
                                      int64_t R)
{
    grid_dep_begin();
    const int64_t d = global_tid();
    if (d >= D) return;
    const int64_t g = blockIdx.y, n0 = g * R, n1 = n0 + R < N ? n0 + R : N;
    float s0 = 0.f, s1 = 0.f;
    for (int64_t n = n0; n < n1; n++) {
        const float v = ldf(dy, n * D + d);
        if (MODE == COL_PLAIN) {
            s0 += v;
        } else {
            const float mu = MODE == COL_LN ? mean[n] : 0.f;
            s0 += v * ((ldf(x, n * D + d) - mu) * rstd[n]);
            s1 += v;
        }
    }
    p0[g * D + d] = s0;
    if (MODE == COL_LN) p1[g * D + d] = s1;
}

/* Pass 2: dst += the G group sums, in group order. dst1/p1 optional. */
__global__ void colsum_final_kernel(float *__restrict__ dst0, float *__restrict__ dst1,
                                    const float *__restrict__ p0, const float *__restrict__ p1,
                                    int64_t G, int64_t D)
{
    grid_dep_begin();
    const int64_t d = global_tid();
    if (d >= D) return;
    float s0 = 0.f, s1 = 0.f;
    for (int64_t g = 0; g < G; g++) {
        s0 += p0[g * D + d];
        if (dst1) s1 += p1[g * D + d];
    }
    dst0[d] += s0;
    if (dst1) dst1[d] += s1;
}

/* dst0 (D) += and dst1 (D) += (optional) the column sums of MODE; the
 * split into groups depends on (N, D) only. */
template <typename T, int MODE>
prnn_status colsum_run(prnn_ctx *ctx, float *dst0, float *dst1, const T *dy, const T *x,
                       const float *mean, const float *rstd, int64_t N, int64_t D)
{
    int64_t G = ceil_div(kColsumThreads, D);
    const int64_t gmax = ceil_div(N, kMinGroupRows);
    if (G > gmax) G = gmax;
    if (G > kMaxGroups) G = kMaxGroups;
    const int64_t R = ceil_div(N, G);
    G = ceil_div(N, R);
    const int64_t cols = ceil_div(D, kThreads);
    if (cols > INT32_MAX) return PRNN_ERR_UNSUPPORTED;

    const int nacc = MODE == COL_LN ? 2 : 1;
    float *p0 = static_cast<float *>(prnn_scratch(ctx, (size_t)(nacc * G * D) * sizeof(float)));
    if (!p0) return PRNN_ERR_OUT_OF_MEMORY;
    float *p1 = MODE == COL_LN ? p0 + G * D : nullptr;
    cudaStream_t s = stream_of(ctx);

    auto *partial = colsum_partial_kernel<T, MODE>;
    PRNN_LAUNCH(partial, dim3((unsigned)cols, (unsigned)G), kThreads, s, p0, p1, dy, x, mean,
                rstd, N, D, R);
    PRNN_CU_LAUNCHED();
    auto *final_ = colsum_final_kernel;
    PRNN_LAUNCH(final_, (unsigned)cols, kThreads, s, dst0, MODE == COL_LN ? dst1 : nullptr, p0,
                p1, G, D);
    PRNN_CU_LAUNCHED();
    return PRNN_OK;
}

/* ------------------------------------------------------------------------ */
/* RMSNorm and LayerNorm: one warp per row                                  */

#define ROWS_PER_WARP_LOOP(n)                                                  \
    for (int64_t n = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) >> 5; n < N; \
         n += grid_threads() >> 5)

template <typename T>
__global__ void rmsnorm_fwd_kernel(T *__restrict__ y, float *__restrict__ rstd,
                                   const T *__restrict__ x, const T *__restrict__ gain,
                                   int64_t N, int64_t D, float eps)
{
    grid_dep_begin();
    const int lane = threadIdx.x & 31;
    ROWS_PER_WARP_LOOP(n)
    {
        const T *xr = x + n * D;
        T *yr = y + n * D;
        float ss = 0.f;
        for (int64_t d = lane; d < D; d += 32) {
            const float v = ldf(xr, d);
            ss += v * v;
        }
        ss = warp_sum(ss);
        const float r = 1.0f / sqrtf(ss / (float)D + eps);
        if (lane == 0 && rstd) rstd[n] = r;
        for (int64_t d = lane; d < D; d += 32) stf(yr, d, ldf(xr, d) * r * ldf(gain, d));
    }
}

/* dx = r dxhat - x r^3 sum(dxhat x) / D, dxhat = dy * gain */
template <typename T>
__global__ void rmsnorm_bwd_kernel(T *__restrict__ dx, const T *__restrict__ dy,
                                   const T *__restrict__ x, const T *__restrict__ gain,
                                   const float *__restrict__ rstd, int64_t N, int64_t D)
{
    grid_dep_begin();
    const int lane = threadIdx.x & 31;
    ROWS_PER_WARP_LOOP(n)
    {
        const T *xr = x + n * D, *dyr = dy + n * D;
        const float r = rstd[n];
        float S = 0.f;
        for (int64_t d = lane; d < D; d += 32) S += ldf(dyr, d) * ldf(gain, d) * ldf(xr, d);
        S = warp_sum(S);
        const float c = r * r * r * S / (float)D;
        for (int64_t d = lane; d < D; d += 32)
            stf(dx + n * D, d, r * ldf(dyr, d) * ldf(gain, d) - ldf(xr, d) * c);
    }
}

template <typename T>
__global__ void layernorm_fwd_kernel(T *__restrict__ y, float *__restrict__ mean,
                                     float *__restrict__ rstd, const T *__restrict__ x,
                                     const T *__restrict__ gain, const T *__restrict__ bias,
                                     int64_t N, int64_t D, float eps)
{
    grid_dep_begin();
    const int lane = threadIdx.x & 31;
    ROWS_PER_WARP_LOOP(n)
    {
        const T *xr = x + n * D;
        T *yr = y + n * D;
        /* Two passes over the row (the second from cache): no cancellation
         * when the mean is large against the spread. */
        float mu = 0.f;
        for (int64_t d = lane; d < D; d += 32) mu += ldf(xr, d);
        mu = warp_sum(mu) / (float)D;
        float var = 0.f;
        for (int64_t d = lane; d < D; d += 32) {
            const float c = ldf(xr, d) - mu;
            var += c * c;
        }
        var = warp_sum(var);
        const float r = 1.0f / sqrtf(var / (float)D + eps);
        if (lane == 0) {
            if (mean) mean[n] = mu;
            if (rstd) rstd[n] = r;
        }
        for (int64_t d = lane; d < D; d += 32)
            stf(yr, d, (ldf(xr, d) - mu) * r * ldf(gain, d) + (bias ? ldf(bias, d) : 0.f));
    }
}

/* dx = r (dxhat - mean(dxhat) - xhat mean(dxhat xhat)) */
template <typename T>
__global__ void layernorm_bwd_kernel(T *__restrict__ dx, const T *__restrict__ dy,
                                     const T *__restrict__ x, const T *__restrict__ gain,
                                     const float *__restrict__ mean,
                                     const float *__restrict__ rstd, int64_t N, int64_t D)
{
    grid_dep_begin();
    const int lane = threadIdx.x & 31;
    ROWS_PER_WARP_LOOP(n)
    {
        const T *xr = x + n * D, *dyr = dy + n * D;
        const float mu = mean[n], r = rstd[n];
        float a = 0.f, b = 0.f;
        for (int64_t d = lane; d < D; d += 32) {
            const float g = ldf(dyr, d) * ldf(gain, d);
            a += g;
            b += g * ((ldf(xr, d) - mu) * r);
        }
        a = warp_sum(a) / (float)D;
        b = warp_sum(b) / (float)D;
        for (int64_t d = lane; d < D; d += 32) {
            const float g = ldf(dyr, d) * ldf(gain, d);
            const float xhat = (ldf(xr, d) - mu) * r;
            stf(dx + n * D, d, r * (g - a - xhat * b));
        }
    }
}

/* ------------------------------------------------------------------------ */
/* Softmax cross-entropy                                                    */

__device__ __forceinline__ bool target_counted(int32_t t, int64_t V) { return t >= 0 && t < V; }

/* One block per row: an online (max, sum exp) pass over the row, merged
 * across the block; thread 0 writes the row's logsumexp and loss.
 *
 *   row_loss (N) fp32, lse (N) fp32 optional, logits (N, V) T */
template <typename T>
__global__ void xent_fwd_kernel(float *__restrict__ row_loss, float *__restrict__ lse,
                                int32_t *bad, const T *__restrict__ logits,
                                const int32_t *__restrict__ targets, int64_t N, int64_t V)
{
    grid_dep_begin();
    __shared__ float sh_m[32], sh_s[32];
    const int lane = threadIdx.x & 31, w = threadIdx.x >> 5, nw = blockDim.x >> 5;
    for (int64_t n = blockIdx.x; n < N; n += gridDim.x) {
        const T *z = logits + n * V;
        float m = -INFINITY, s = 0.f;
        for (int64_t v = threadIdx.x; v < V; v += blockDim.x) {
            const float x = ldf(z, v);
            if (x > m) {
                s = s * expf(m - x) + 1.f; /* expf(-inf) = 0 on the first */
                m = x;
            } else if (x != -INFINITY) {
                s += expf(x - m);
            }
        }
        for (int o = 16; o > 0; o >>= 1) {
            const float m2 = __shfl_xor_sync(0xffffffffu, m, o);
            const float s2 = __shfl_xor_sync(0xffffffffu, s, o);
            lse_merge(m, s, m2, s2);
        }
        if (lane == 0) sh_m[w] = m, sh_s[w] = s;
        __syncthreads();
        if (w == 0) {
            m = lane < nw ? sh_m[lane] : -INFINITY;
            s = lane < nw ? sh_s[lane] : 0.f;
            for (int o = 16; o > 0; o >>= 1) {
                const float m2 = __shfl_xor_sync(0xffffffffu, m, o);
                const float s2 = __shfl_xor_sync(0xffffffffu, s, o);
                lse_merge(m, s, m2, s2);
            }
            if (lane == 0) {
                const float l = m + logf(s);
                const int32_t t = targets[n];
                const bool counted = target_counted(t, V);
                if (!counted && t != -1 && bad) atomicOr(bad, 1);
                row_loss[n] = counted ? l - ldf(z, t) : 0.f;
                if (lse) lse[n] = l;
            }
        }
        __syncthreads(); /* sh_m, sh_s are reused by the next row */
    }
}

/* One block: the mean over counted rows, summed in a fixed order (fp64). */
__global__ void xent_loss_kernel(float *__restrict__ loss, const float *__restrict__ row_loss,
                                 const int32_t *__restrict__ targets, int64_t N, int64_t V)
{
    grid_dep_begin();
    __shared__ double sh[32];
    double s = 0.0, c = 0.0;
    for (int64_t n = threadIdx.x; n < N; n += blockDim.x)
        if (target_counted(targets[n], V)) {
            s += (double)row_loss[n];
            c += 1.0;
        }
    s = block_sum(s, sh);
    c = block_sum(c, sh);
    if (threadIdx.x == 0) loss[0] = c > 0 ? (float)(s / c) : 0.f;
}

/* One block: scale = dloss / count (0 without counted rows). */
__global__ void xent_scale_kernel(float *__restrict__ scale, const int32_t *__restrict__ targets,
                                  int64_t N, int64_t V, float dloss)
{
    grid_dep_begin();
    __shared__ double sh[32];
    double c = 0.0;
    for (int64_t n = threadIdx.x; n < N; n += blockDim.x) c += target_counted(targets[n], V);
    c = block_sum(c, sh);
    if (threadIdx.x == 0) scale[0] = c > 0 ? dloss / (float)c : 0.f;
}

template <typename T>
__global__ void xent_bwd_kernel(T *__restrict__ dlogits, const T *__restrict__ logits,
                                const int32_t *__restrict__ targets, const float *__restrict__ lse,
                                const float *__restrict__ scale, int64_t N, int64_t V)
{
    grid_dep_begin();
    const float sc = *scale;
    for (int64_t i = global_tid(); i < N * V; i += grid_threads()) {
        const int64_t n = i / V, v = i - n * V;
        const int32_t t = targets[n];
        float g = 0.f;
        if (target_counted(t, V)) g = (expf(ldf(logits, i) - lse[n]) - (v == t ? 1.f : 0.f)) * sc;
        stf(dlogits, i, g);
    }
}

/* ------------------------------------------------------------------------ */
/* Dropout and elementwise arithmetic                                       */

template <typename T>
__global__ void dropout_kernel(T *y, const T *x, int64_t n, uint64_t first, uint64_t key,
                               uint32_t threshold, float scale)
{
    grid_dep_begin();
    for (int64_t i = global_tid(); i < n; i += grid_threads())
        stf(y, i,
            blocks_dropout_keep(key, first + (uint64_t)i, threshold) ? ldf(x, i) * scale : 0.f);
}

/* y may equal a or b: each element is read before it is written. */
template <typename T>
__global__ void axpby_kernel(T *y, const T *a, const T *b, int64_t n, float alpha, float beta)
{
    grid_dep_begin();
    for (int64_t i = global_tid(); i < n; i += grid_threads())
        stf(y, i, alpha * ldf(a, i) + (b ? beta * ldf(b, i) : 0.f));
}

/* ------------------------------------------------------------------------ */
/* Optimizer                                                                */

__global__ void adamw_kernel(float *__restrict__ params, float *__restrict__ m,
                             float *__restrict__ v, uint16_t *__restrict__ params_bf16,
                             const float *__restrict__ grad, int64_t n, blocks_adamw c)
{
    grid_dep_begin();
    for (int64_t i = global_tid(); i < n; i += grid_threads()) {
        float mi = m[i], vi = v[i];
        const float p = blocks_adamw_update(&c, params[i], grad[i], &mi, &vi);
        params[i] = p;
        m[i] = mi;
        v[i] = vi;
        if (params_bf16) params_bf16[i] = blocks_f32_to_bf16_bits(p);
    }
}

/* Pass 1: block b's sum of squares into part[b]. A thread squares and adds
 * its strided elements in fp32 (at most about kSumsqPerThread of them), the
 * block adds the threads' sums in fp64. */
__global__ void sumsq_partial_kernel(double *__restrict__ part, const float *__restrict__ g,
                                     int64_t n)
{
    grid_dep_begin();
    __shared__ double sh[32];
    float acc = 0.f;
    for (int64_t i = global_tid(); i < n; i += grid_threads()) acc += g[i] * g[i];
    const double s = block_sum((double)acc, sh);
    if (threadIdx.x == 0) part[blockIdx.x] = s;
}

/* Pass 2 (one block): the block sums in a fixed order. */
__global__ void sumsq_final_kernel(float *__restrict__ out, double *__restrict__ out_d,
                                   const double *__restrict__ part, int64_t nb)
{
    grid_dep_begin();
    __shared__ double sh[32];
    double s = 0.0;
    for (int64_t b = threadIdx.x; b < nb; b += blockDim.x) s += part[b];
    s = block_sum(s, sh);
    if (threadIdx.x == 0) {
        if (out) out[0] = (float)s;
        out_d[0] = s;
    }
}

__global__ void clip_kernel(float *__restrict__ g, const float *__restrict__ sumsq, int64_t n,
                            float max_norm)
{
    grid_dep_begin();
    const float f = blocks_clip_factor(*sumsq, max_norm);
    if (!(f < 1.0f)) return;
    for (int64_t i = global_tid(); i < n; i += grid_threads()) g[i] = __fmul_rn(g[i], f);
}

} // namespace

/* ======================================================================== */
/* Entry points                                                             */

extern "C" prnn_status prnn_cuda_blocks_embedding_fwd(prnn_ctx *ctx, prnn_dtype dt, void *y,
                                                      int32_t *bad, const int32_t *ids,
                                                      const void *table, int64_t N, int64_t V,
                                                      int64_t D)
{
    GUARD();
    return by_dtype(dt, [&](auto tag) {
        using T = decltype(tag);
        auto *k = embedding_fwd_kernel<T>;
        PRNN_LAUNCH(k, grid_for(N * D, kThreads), kThreads, stream_of(ctx), static_cast<T *>(y),
                    bad, ids, static_cast<const T *>(table), N, V, D);
        PRNN_CU_LAUNCHED();
        return PRNN_OK;
    });
}

extern "C" prnn_status prnn_cuda_blocks_embedding_bwd(prnn_ctx *ctx, prnn_dtype dt,
                                                      float *dtable, const int32_t *ids,
                                                      const void *dy, int64_t N, int64_t V,
                                                      int64_t D)
{
    GUARD();
    /* Token groups: enough (group, column block) pairs to fill the GPU,
     * partials within 256 MiB. The split depends only on the sizes. */
    const int64_t col_blocks = (D + kThreads - 1) / kThreads;
    const int64_t vd = V * D, cap = ((int64_t)256 << 20) / (int64_t)sizeof(float);
    int64_t C = (4 * 132 + col_blocks - 1) / col_blocks;
    if (C > N) C = N;
    if (vd > 0 && C > cap / vd) C = cap / vd;
    float *part = nullptr;
    if (C >= 1 && C <= INT32_MAX && col_blocks <= 65535)
        part = static_cast<float *>(prnn_cuda_aux(ctx, PRNN_AUX_EMBEDDING, (size_t)(C * vd) * sizeof(float)));
    return by_dtype(dt, [&](auto tag) {
        using T = decltype(tag);
        if (!part) { /* partials too large (or no memory for them): atomics */
            auto *k = embedding_bwd_kernel<T>;
            PRNN_LAUNCH(k, grid_for(N * D, kThreads), kThreads, stream_of(ctx), dtable, ids,
                        static_cast<const T *>(dy), N, V, D);
            PRNN_CU_LAUNCHED();
            return PRNN_OK;
        }
        const int64_t R = (N + C - 1) / C;
        auto *k = embedding_bwd_part_kernel<T>;
        PRNN_LAUNCH(k, dim3((unsigned)C, (unsigned)col_blocks), kThreads, stream_of(ctx), part,
                    ids, static_cast<const T *>(dy), N, V, D, R);
        PRNN_CU_LAUNCHED();
        PRNN_LAUNCH(embedding_bwd_finish_kernel, grid_for(vd, kThreads), kThreads,
                    stream_of(ctx), dtable, part, C, vd);
        PRNN_CU_LAUNCHED();
        return PRNN_OK;
    });
}

extern "C" prnn_status prnn_cuda_blocks_rows_fill(prnn_ctx *ctx, prnn_dtype dt, void *y,
                                                  const void *bias, int64_t N, int64_t O)
{
    GUARD();
    return by_dtype(dt, [&](auto tag) {
        using T = decltype(tag);
        auto *k = rows_fill_kernel<T>;
        PRNN_LAUNCH(k, grid_for(N * O, kThreads), kThreads, stream_of(ctx), static_cast<T *>(y),
                    static_cast<const T *>(bias), N, O);
        PRNN_CU_LAUNCHED();
        return PRNN_OK;
    });
}

extern "C" prnn_status prnn_cuda_blocks_colsum_add(prnn_ctx *ctx, prnn_dtype dt, float *dst,
                                                   const void *src, int64_t N, int64_t O)
{
    GUARD();
    return by_dtype(dt, [&](auto tag) {
        using T = decltype(tag);
        return colsum_run<T, COL_PLAIN>(ctx, dst, nullptr, static_cast<const T *>(src), nullptr,
                                        nullptr, nullptr, N, O);
    });
}

extern "C" prnn_status prnn_cuda_blocks_rmsnorm_fwd(prnn_ctx *ctx, prnn_dtype dt, void *y,
                                                    float *rstd, const void *x, const void *gain,
                                                    int64_t N, int64_t D, float eps)
{
    GUARD();
    return by_dtype(dt, [&](auto tag) {
        using T = decltype(tag);
        auto *k = rmsnorm_fwd_kernel<T>;
        PRNN_LAUNCH(k, grid_for(N * 32, kThreads), kThreads, stream_of(ctx), static_cast<T *>(y),
                    rstd, static_cast<const T *>(x), static_cast<const T *>(gain), N, D, eps);
        PRNN_CU_LAUNCHED();
        return PRNN_OK;
    });
}

extern "C" prnn_status prnn_cuda_blocks_rmsnorm_bwd(prnn_ctx *ctx, prnn_dtype dt, void *dx,
                                                    float *dgain, const void *dy, const void *x,
                                                    const void *gain, const float *rstd,
                                                    int64_t N, int64_t D)
{
    GUARD();
    return by_dtype(dt, [&](auto tag) {
        using T = decltype(tag);
        auto *k = rmsnorm_bwd_kernel<T>;
        PRNN_LAUNCH(k, grid_for(N * 32, kThreads), kThreads, stream_of(ctx),
                    static_cast<T *>(dx), static_cast<const T *>(dy), static_cast<const T *>(x),
                    static_cast<const T *>(gain), rstd, N, D);
        PRNN_CU_LAUNCHED();
        return colsum_run<T, COL_RMS>(ctx, dgain, nullptr, static_cast<const T *>(dy),
                                      static_cast<const T *>(x), nullptr, rstd, N, D);
    });
}

extern "C" prnn_status prnn_cuda_blocks_layernorm_fwd(prnn_ctx *ctx, prnn_dtype dt, void *y,
                                                      float *mean, float *rstd, const void *x,
                                                      const void *gain, const void *bias,
                                                      int64_t N, int64_t D, float eps)
{
    GUARD();
    return by_dtype(dt, [&](auto tag) {
        using T = decltype(tag);
        auto *k = layernorm_fwd_kernel<T>;
        PRNN_LAUNCH(k, grid_for(N * 32, kThreads), kThreads, stream_of(ctx), static_cast<T *>(y),
                    mean, rstd, static_cast<const T *>(x), static_cast<const T *>(gain),
                    static_cast<const T *>(bias), N, D, eps);
        PRNN_CU_LAUNCHED();
        return PRNN_OK;
    });
}

extern "C" prnn_status prnn_cuda_blocks_layernorm_bwd(prnn_ctx *ctx, prnn_dtype dt, void *dx,
                                                      float *dgain, float *dbias, const void *dy,
                                                      const void *x, const void *gain,
                                                      const float *mean, const float *rstd,
                                                      int64_t N, int64_t D)
{
    GUARD();
    return by_dtype(dt, [&](auto tag) {
        using T = decltype(tag);
        auto *k = layernorm_bwd_kernel<T>;
        PRNN_LAUNCH(k, grid_for(N * 32, kThreads), kThreads, stream_of(ctx),
                    static_cast<T *>(dx), static_cast<const T *>(dy), static_cast<const T *>(x),
                    static_cast<const T *>(gain), mean, rstd, N, D);
        PRNN_CU_LAUNCHED();
        return colsum_run<T, COL_LN>(ctx, dgain, dbias, static_cast<const T *>(dy),
                                     static_cast<const T *>(x), mean, rstd, N, D);
    });
}

extern "C" prnn_status prnn_cuda_blocks_xent_fwd(prnn_ctx *ctx, prnn_dtype dt, float *loss,
                                                 float *row_loss, float *lse, int32_t *bad,
                                                 const void *logits, const int32_t *targets,
                                                 int64_t N, int64_t V)
{
    GUARD();
    float *rl = row_loss;
    if (!rl) { /* the loss needs the rows' losses somewhere */
        rl = static_cast<float *>(prnn_scratch(ctx, (size_t)N * sizeof(float)));
        if (!rl) return PRNN_ERR_OUT_OF_MEMORY;
    }
    cudaStream_t s = stream_of(ctx);
    prnn_status st = by_dtype(dt, [&](auto tag) {
        using T = decltype(tag);
        auto *k = xent_fwd_kernel<T>;
        PRNN_LAUNCH(k, (unsigned)(N < kMaxBlocks ? N : kMaxBlocks), kThreads, s, rl, lse, bad,
                    static_cast<const T *>(logits), targets, N, V);
        PRNN_CU_LAUNCHED();
        return PRNN_OK;
    });
    if (st != PRNN_OK) return st;
    auto *k = xent_loss_kernel;
    PRNN_LAUNCH(k, 1, kReduceThreads, s, loss, rl, targets, N, V);
    PRNN_CU_LAUNCHED();
    return PRNN_OK;
}

extern "C" prnn_status prnn_cuda_blocks_xent_bwd(prnn_ctx *ctx, prnn_dtype dt, void *dlogits,
                                                 const void *logits, const int32_t *targets,
                                                 const float *lse, int64_t N, int64_t V,
                                                 float dloss)
{
    GUARD();
    float *scale = static_cast<float *>(prnn_scratch(ctx, sizeof(float)));
    if (!scale) return PRNN_ERR_OUT_OF_MEMORY;
    cudaStream_t s = stream_of(ctx);
    auto *ks = xent_scale_kernel;
    PRNN_LAUNCH(ks, 1, kReduceThreads, s, scale, targets, N, V, dloss);
    PRNN_CU_LAUNCHED();
    return by_dtype(dt, [&](auto tag) {
        using T = decltype(tag);
        auto *k = xent_bwd_kernel<T>;
        PRNN_LAUNCH(k, grid_for(N * V, kThreads), kThreads, s, static_cast<T *>(dlogits),
                    static_cast<const T *>(logits), targets, lse, scale, N, V);
        PRNN_CU_LAUNCHED();
        return PRNN_OK;
    });
}

extern "C" prnn_status prnn_cuda_blocks_dropout(prnn_ctx *ctx, prnn_dtype dt, void *y,
                                                const void *x, int64_t n, uint64_t first,
                                                uint64_t key, uint32_t threshold, float scale)
{
    GUARD();
    return by_dtype(dt, [&](auto tag) {
        using T = decltype(tag);
        auto *k = dropout_kernel<T>;
        PRNN_LAUNCH(k, grid_for(n, kThreads), kThreads, stream_of(ctx), static_cast<T *>(y),
                    static_cast<const T *>(x), n, first, key, threshold, scale);
        PRNN_CU_LAUNCHED();
        return PRNN_OK;
    });
}

extern "C" prnn_status prnn_cuda_blocks_axpby(prnn_ctx *ctx, prnn_dtype dt, void *y,
                                              const void *a, const void *b, int64_t n,
                                              float alpha, float beta)
{
    GUARD();
    return by_dtype(dt, [&](auto tag) {
        using T = decltype(tag);
        auto *k = axpby_kernel<T>;
        PRNN_LAUNCH(k, grid_for(n, kThreads), kThreads, stream_of(ctx), static_cast<T *>(y),
                    static_cast<const T *>(a), static_cast<const T *>(b), n, alpha, beta);
        PRNN_CU_LAUNCHED();
        return PRNN_OK;
    });
}

extern "C" prnn_status prnn_cuda_blocks_adamw(prnn_ctx *ctx, float *params, float *m, float *v,
                                              void *params_bf16, const float *grad, int64_t n,
                                              const blocks_adamw *c)
{
    GUARD();
    auto *k = adamw_kernel;
    PRNN_LAUNCH(k, grid_for(n, kThreads), kThreads, stream_of(ctx), params, m, v,
                static_cast<uint16_t *>(params_bf16), grad, n, *c);
    PRNN_CU_LAUNCHED();
    return PRNN_OK;
}

extern "C" prnn_status prnn_cuda_blocks_sumsq(prnn_ctx *ctx, float *sumsq, double *host_sumsq,
                                              const float *g, int64_t n)
{
    GUARD();
    /* The block count depends on n only, so the order of the sum does too. */
    int64_t nb = ceil_div(n, kThreads * kSumsqPerThread);
    if (nb > INT32_MAX) nb = INT32_MAX;
    /* scratch: [0, 8) the fp64 total, [256, ...) the block sums */
    unsigned char *ws = static_cast<unsigned char *>(prnn_scratch(ctx, 256 + (size_t)nb * 8));
    if (!ws) return PRNN_ERR_OUT_OF_MEMORY;
    double *total = reinterpret_cast<double *>(ws), *part = reinterpret_cast<double *>(ws + 256);
    cudaStream_t s = stream_of(ctx);
    auto *k1 = sumsq_partial_kernel;
    PRNN_LAUNCH(k1, (unsigned)nb, kThreads, s, part, g, n);
    PRNN_CU_LAUNCHED();
    auto *k2 = sumsq_final_kernel;
    PRNN_LAUNCH(k2, 1, kReduceThreads, s, sumsq, total, part, nb);
    PRNN_CU_LAUNCHED();
    if (host_sumsq) {
        PRNN_CU(cudaMemcpyAsync(host_sumsq, total, sizeof(double), cudaMemcpyDeviceToHost, s));
        PRNN_CU(cudaStreamSynchronize(s));
    }
    return PRNN_OK;
}

extern "C" prnn_status prnn_cuda_blocks_clip(prnn_ctx *ctx, float *g, const float *sumsq,
                                             int64_t n, float max_norm)
{
    GUARD();
    auto *k = clip_kernel;
    PRNN_LAUNCH(k, grid_for(n, kThreads), kThreads, stream_of(ctx), g, sumsq, n, max_norm);
    PRNN_CU_LAUNCHED();
    return PRNN_OK;
}
