/*
 * scan_cuda.cuh - device helpers of the CUDA scan backend (scan_cuda.cu):
 * storage types, 16-byte vector I/O, the logical-step -> physical-row map
 * and the per-step loaders/storers that every algorithm (serial, tree,
 * chunked, striped) shares, so they differ only in how they order the work.
 *
 * Size letters: B batch rows, T time steps, H channels. Tensors (B, T, H),
 * H contiguous; states (B, H) in float.
 *
 * Logical time. Every kernel runs the scan as a forward recurrence over a
 * logical index u = 0 .. L-1 of row b (L = lengths[b] or T):
 *
 *   forward : state_u = x_u * state_{u-1} + y_u,  state_{-1} = h0
 *             x_u = a[t(u)], y_u = b[t(u)],  t(u) = reverse ? L-1-u : u
 *   backward: g_u = x_u * g_{u-1} + y_u,  g_{-1} = dhT  (u counts from the
 *             last valid step s = L-1 down to s = 0, i.e. s = L-1-u)
 *             x_u = (u == 0) ? 1 : a[t(u-1)],  y_u = dh[t(u)],
 *             t(u) = reverse ? u : L-1-u
 *
 * Logical steps u >= L are padding: they map to physical t = u, act as the
 * identity (x = 1, y = 0) and write zeros. So u -> t is a bijection of
 * [0, T) for every row, whatever reverse and L are.
 */
#ifndef PRNN_SCAN_CUDA_CUH
#define PRNN_SCAN_CUDA_CUH

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <stdint.h>

/* Every launch of the scan's and the cells' kernels goes through these
 * macros, so that the lab's host simulator (dev/cuda/sim) can run the same
 * kernels on a machine without a GPU. */
#ifndef PRNN_LAUNCH
#define PRNN_LAUNCH(kernel, grid, block, stream, ...)                          \
    prnn_cuda::launch(kernel, dim3(grid), dim3(block), 0, (stream), __VA_ARGS__)
#define PRNN_LAUNCH_SMEM(kernel, grid, block, smem, stream, ...)              \
    prnn_cuda::launch(kernel, dim3(grid), dim3(block), (smem), (stream), __VA_ARGS__)
#endif

namespace prnn_cuda {

constexpr int kThreads = 256; /* every kernel's block size */

/* ------------------------------------------------------------------------ */
/* Problem description handed to every kernel                               */

struct scan_params {
    const void *a;      // (B, T, H)  fwd + bwd
    const void *b;      // (B, T, H)  fwd
    const void *h_in;   // (B, T, H)  bwd: the forward's output
    const void *dh;     // (B, T, H)  bwd, NULL = zeros
    void *h_out;        // (B, T, H)  fwd
    void *da;           // (B, T, H)  bwd
    void *db;           // (B, T, H)  bwd
    const float *h0;    // (B, H)     NULL = zeros
    const float *dhT;   // (B, H)     bwd, NULL = zeros
    float *hT;          // (B, H)     fwd, NULL = not wanted
    float *dh0;         // (B, H)     bwd, NULL = not wanted
    const int64_t *lengths; // (B) device copy, NULL = all T
    int64_t B, T, H;
    int reverse;
};

/* ------------------------------------------------------------------------ */
/* Storage types: raw bits in memory, float in registers                    */

template <typename T> struct storage;

template <> struct storage<float> {
    using raw = float;
    static __device__ __forceinline__ float to_f(raw x) { return x; }
    static __device__ __forceinline__ raw from_f(float x) { return x; }
};

template <> struct storage<__nv_bfloat16> {
    using raw = unsigned short;
    static __device__ __forceinline__ float to_f(raw x)
    {
        return __uint_as_float((unsigned)x << 16);
    }
    static __device__ __forceinline__ raw from_f(float x)
    {
        return __bfloat16_as_ushort(__float2bfloat16_rn(x));
    }
};

template <> struct storage<__half> {
    using raw = unsigned short;
    static __device__ __forceinline__ float to_f(raw x)
    {
        return __half2float(__ushort_as_half(x));
    }
    static __device__ __forceinline__ raw from_f(float x)
    {
        return __half_as_ushort(__float2half_rn(x));
    }
};

/* Two floats rounded to the 16-bit type and packed, lo in the low half.
 * On the GPU one conversion instruction (sm_80 and later) instead of two
 * and a merge; the host simulator takes the two-conversion form. */
template <typename T> __device__ __forceinline__ unsigned pack2(float lo, float hi)
{
    return (unsigned)storage<T>::from_f(lo) | ((unsigned)storage<T>::from_f(hi) << 16);
}
#ifndef PRNN_CUDA_SIM
template <> __device__ __forceinline__ unsigned pack2<__nv_bfloat16>(float lo, float hi)
{
    unsigned w;
    asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(w) : "f"(hi), "f"(lo));
    return w;
}
template <> __device__ __forceinline__ unsigned pack2<__half>(float lo, float hi)
{
    unsigned w;
    asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(w) : "f"(hi), "f"(lo));
    return w;
}
#endif

/* Elements per 16-byte vector. */
template <typename T> constexpr int vec16() { return (int)(16 / sizeof(T)); }

/* A 16-byte vector as loaded (4 floats or 8 16-bit values) to floats. */
template <typename T>
__device__ __forceinline__ void unpack16(uint4 q, float (&v)[vec16<T>()])
{
    using S = storage<T>;
    const unsigned w[4] = {q.x, q.y, q.z, q.w};
    if constexpr (sizeof(T) == 4) {
#pragma unroll
        for (int k = 0; k < 4; k++) v[k] = __uint_as_float(w[k]);
    } else {
#pragma unroll
        for (int k = 0; k < 4; k++) {
            v[2 * k] = S::to_f((typename S::raw)(w[k] & 0xffffu));
            v[2 * k + 1] = S::to_f((typename S::raw)(w[k] >> 16));
        }
    }
}

/* ------------------------------------------------------------------------ */
/* Vector I/O: VEC consecutive elements along H. VEC is 1 (scalar path, any
 * alignment) or 16 bytes' worth (the caller checked H % VEC == 0 and 16-byte
 * aligned base pointers, so every vector is aligned).                      */

/* Streaming tensors are touched once: with PRNN_CACHE_HINTS their loads and
 * stores are marked evict-first (ld/st .cs). Off: on an H200 it cost the
 * large shapes (16x64Kx1024 fp32 forward 85% -> 77% of the copy roofline)
 * and gained ~1 point on small ones (dev/cuda/README.md). */
#ifndef PRNN_CACHE_HINTS
#define PRNN_CACHE_HINTS 0
#endif
template <typename V> __device__ __forceinline__ V ld_stream(const V *p)
{
#if PRNN_CACHE_HINTS
    return __ldcs(p);
#else
    return __ldg(p);
#endif
}
template <typename V> __device__ __forceinline__ void st_stream(V *p, V v)
{
#if PRNN_CACHE_HINTS
    __stcs(p, v);
#else
    *p = v;
#endif
}

template <typename T, int VEC>
__device__ __forceinline__ void load_vec(const void *base, int64_t i, float (&v)[VEC])
{
    using S = storage<T>;
    if constexpr (VEC == 1) {
        v[0] = S::to_f(__ldg(static_cast<const typename S::raw *>(base) + i));
    } else {
        static_assert(VEC * sizeof(T) == 16, "vector loads are 16 bytes");
        unpack16<T>(ld_stream(reinterpret_cast<const uint4 *>(static_cast<const T *>(base) + i)), v);
    }
}

/* CS: an evict-first store (st.global.cs) of the vector path, for outputs
 * nothing reads back soon (STRIPED's). */
template <typename T, int VEC, bool CS = false>
__device__ __forceinline__ void store_vec(void *base, int64_t i, const float (&v)[VEC])
{
    using S = storage<T>;
    if constexpr (VEC == 1) {
        static_cast<typename S::raw *>(base)[i] = S::from_f(v[0]);
    } else {
        static_assert(VEC * sizeof(T) == 16, "vector stores are 16 bytes");
        unsigned w[4];
        if constexpr (sizeof(T) == 4) {
#pragma unroll
            for (int k = 0; k < 4; k++) w[k] = __float_as_uint(v[k]);
        } else {
#pragma unroll
            for (int k = 0; k < 4; k++) w[k] = pack2<T>(v[2 * k], v[2 * k + 1]);
        }
        uint4 *dst = reinterpret_cast<uint4 *>(static_cast<T *>(base) + i);
        const uint4 q = make_uint4(w[0], w[1], w[2], w[3]);
        if constexpr (CS) __stcs(dst, q);
        else st_stream(dst, q);
    }
}

/* Float arrays of the workspace (tree summaries): VEC floats, aligned. */
template <int VEC>
__device__ __forceinline__ void load_f(const float *p, float (&v)[VEC])
{
    if constexpr (VEC % 4 == 0) {
#pragma unroll
        for (int k = 0; k < VEC; k += 4) {
            const float4 q = __ldg(reinterpret_cast<const float4 *>(p + k));
            v[k] = q.x; v[k + 1] = q.y; v[k + 2] = q.z; v[k + 3] = q.w;
        }
    } else {
#pragma unroll
        for (int k = 0; k < VEC; k++) v[k] = __ldg(p + k);
    }
}

template <int VEC>
__device__ __forceinline__ void store_f(float *p, const float (&v)[VEC])
{
    if constexpr (VEC % 4 == 0) {
#pragma unroll
        for (int k = 0; k < VEC; k += 4)
            *reinterpret_cast<float4 *>(p + k) = make_float4(v[k], v[k + 1], v[k + 2], v[k + 3]);
    } else {
#pragma unroll
        for (int k = 0; k < VEC; k++) p[k] = v[k];
    }
}

/* Shared-memory slots of VEC floats (16-byte aligned when VEC % 4 == 0). */
template <int VEC>
__device__ __forceinline__ void smem_put(float *s, const float (&v)[VEC])
{
    if constexpr (VEC % 4 == 0) {
#pragma unroll
        for (int k = 0; k < VEC; k += 4)
            *reinterpret_cast<float4 *>(s + k) = make_float4(v[k], v[k + 1], v[k + 2], v[k + 3]);
    } else {
#pragma unroll
        for (int k = 0; k < VEC; k++) s[k] = v[k];
    }
}

template <int VEC>
__device__ __forceinline__ void smem_get(const float *s, float (&v)[VEC])
{
    if constexpr (VEC % 4 == 0) {
#pragma unroll
        for (int k = 0; k < VEC; k += 4) {
            const float4 q = *reinterpret_cast<const float4 *>(s + k);
            v[k] = q.x; v[k + 1] = q.y; v[k + 2] = q.z; v[k + 3] = q.w;
        }
    } else {
#pragma unroll
        for (int k = 0; k < VEC; k++) v[k] = s[k];
    }
}

/* ------------------------------------------------------------------------ */
/* Tagged words of the look-backs (CHUNKED, segmented STRIPED, WINDOW)      */

#ifndef PRNN_CUDA_SIM /* the host simulator brings its own, with stale reads */
/* A look-back word: a float value in the low half, its tag in the high
 * half, stored and loaded as one 64-bit access (single-copy atomic), so a
 * reader sees either the whole new word or an older one. */
__device__ __forceinline__ unsigned long long ld_word(const unsigned long long *p)
{
    unsigned long long v;
    asm volatile("ld.relaxed.gpu.global.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
    return v;
}

__device__ __forceinline__ void st_word(unsigned long long *p, unsigned long long v)
{
    asm volatile("st.relaxed.gpu.global.u64 [%0], %1;" ::"l"(p), "l"(v) : "memory");
}
#endif

__device__ __forceinline__ unsigned long long make_word(float v, unsigned tag)
{
    return ((unsigned long long)tag << 32) | __float_as_uint(v);
}
__device__ __forceinline__ unsigned word_tag(unsigned long long w) { return (unsigned)(w >> 32); }
__device__ __forceinline__ float word_value(unsigned long long w)
{
    return __uint_as_float((unsigned)w);
}

/* ------------------------------------------------------------------------ */
/* Registers holding one step's VEC elements as loaded: floats, or for
 * 16-bit vectors the raw 16 bytes (half the registers, converted on use),
 * so a thread can keep twice as many bf16/fp16 steps in flight.            */

template <int VEC> struct freg {
    float v[VEC];
};
struct hreg {
    uint4 raw;
};

template <typename T, int VEC> struct reg_of {
    using type = freg<VEC>;
};
template <> struct reg_of<__nv_bfloat16, 8> {
    using type = hreg;
};
template <> struct reg_of<__half, 8> {
    using type = hreg;
};

template <typename T, int VEC>
__device__ __forceinline__ void reg_fill(freg<VEC> &r, float x)
{
#pragma unroll
    for (int v = 0; v < VEC; v++) r.v[v] = x;
}
template <typename T, int VEC>
__device__ __forceinline__ void reg_fill(hreg &r, float x)
{
    const unsigned h = storage<T>::from_f(x), w = h | (h << 16);
    r.raw = make_uint4(w, w, w, w);
}

template <typename T, int VEC>
__device__ __forceinline__ void reg_load(freg<VEC> &r, const void *base, int64_t i)
{
    load_vec<T, VEC>(base, i, r.v);
}
template <typename T, int VEC>
__device__ __forceinline__ void reg_load(hreg &r, const void *base, int64_t i)
{
    r.raw = ld_stream(reinterpret_cast<const uint4 *>(static_cast<const T *>(base) + i));
}

template <typename T, int VEC>
__device__ __forceinline__ void reg_get(const freg<VEC> &r, float (&o)[VEC])
{
#pragma unroll
    for (int v = 0; v < VEC; v++) o[v] = r.v[v];
}
template <typename T, int VEC>
__device__ __forceinline__ void reg_get(const hreg &r, float (&o)[VEC])
{
    unpack16<T>(r.raw, o);
}

/* One step on a state: st = x * st + y. */
template <typename T, int VEC, typename R>
__device__ __forceinline__ void advance(const R &x, const R &y, float (&st)[VEC])
{
    float xs[VEC], ys[VEC];
    reg_get<T, VEC>(x, xs);
    reg_get<T, VEC>(y, ys);
#pragma unroll
    for (int v = 0; v < VEC; v++) st[v] = xs[v] * st[v] + ys[v];
}

/* Composes one more step h -> x h + y after the summary (A, B). */
template <typename T, int VEC, typename R>
__device__ __forceinline__ void fold_step(const R &x, const R &y, float (&A)[VEC], float (&B)[VEC])
{
    float xs[VEC];
    reg_get<T, VEC>(x, xs);
    advance<T, VEC>(x, y, B);
#pragma unroll
    for (int v = 0; v < VEC; v++) A[v] = xs[v] * A[v];
}

/* The summary (A, B) of S steps in registers: h -> A h + B is the
 * composition of h -> x_k h + y_k for k = 0 .. S-1. */
template <typename T, int VEC, int S, typename R>
__device__ __forceinline__ void summarize(const R (&x)[S], const R (&y)[S], float (&A)[VEC],
                                          float (&B)[VEC])
{
#pragma unroll
    for (int v = 0; v < VEC; v++) { A[v] = 1.0f; B[v] = 0.0f; }
#pragma unroll
    for (int k = 0; k < S; k++) fold_step<T, VEC>(x[k], y[k], A, B);
}

/* ------------------------------------------------------------------------ */
/* Logical step -> physical row                                             */

/* Valid steps (u < L) run forward or backward over [0, L); padding steps
 * stay where they are. flip = reverse (forward) or !reverse (backward). */
__device__ __forceinline__ int64_t phys_t(int64_t u, int64_t L, bool flip)
{
    return u < L ? (flip ? L - 1 - u : u) : u;
}

template <bool BWD>
__device__ __forceinline__ bool flip_of(const scan_params &p)
{
    return BWD ? !p.reverse : p.reverse != 0;
}

__device__ __forceinline__ int64_t row_length(const scan_params &p, int64_t b)
{
    return p.lengths ? p.lengths[b] : p.T;
}

/* ------------------------------------------------------------------------ */
/* Per-step access shared by all algorithms                                 */

/* Coefficient x and input y of logical step u at columns col..col+VEC of
 * row b (row = b*T), into registers R (freg or hreg). Identity outside the
 * valid steps or columns. */
template <typename T, int VEC, bool BWD, typename R>
__device__ __forceinline__ void load_step(const scan_params &p, int64_t row, int64_t u,
                                          int64_t L, int64_t col, bool col_ok, R &x, R &y)
{
    reg_fill<T, VEC>(x, 1.0f);
    reg_fill<T, VEC>(y, 0.0f);
    if (!col_ok || u >= L) return;
    const bool flip = flip_of<BWD>(p);
    const int64_t t = phys_t(u, L, flip);
    if constexpr (!BWD) {
        reg_load<T, VEC>(x, p.a, (row + t) * p.H + col);
        reg_load<T, VEC>(y, p.b, (row + t) * p.H + col);
    } else {
        /* g_s = dh_s + a_{s+1} g_{s+1}: the coefficient of step u is the a
         * of the step before it in u order; the first one multiplies dhT. */
        if (u > 0) reg_load<T, VEC>(x, p.a, (row + phys_t(u - 1, L, flip)) * p.H + col);
        if (p.dh) reg_load<T, VEC>(y, p.dh, (row + t) * p.H + col);
    }
}

/* Whether h_{s-1} of logical step u is read from h_in (h at u+1), and
 * where: elsewhere it is h0 (u = L-1) or zeros (padding, columns past H). */
__device__ __forceinline__ bool hprev_in(int64_t u, int64_t L, bool col_ok)
{
    return col_ok && u + 1 < L;
}
__device__ __forceinline__ int64_t hprev_at(const scan_params &p, int64_t b, int64_t u,
                                            int64_t L, int64_t col)
{
    return (b * p.T + phys_t(u + 1, L, !p.reverse)) * p.H + col;
}

/* Backward only: h_{s-1} of logical step u (s = L-1-u), i.e. the forward
 * state one step earlier in forward order: h at u+1, or h0 for u = L-1. */
template <typename T, int VEC>
__device__ __forceinline__ void load_hprev(const scan_params &p, int64_t b, int64_t u,
                                           int64_t L, int64_t col, bool col_ok,
                                           float (&hp)[VEC])
{
#pragma unroll
    for (int v = 0; v < VEC; v++) hp[v] = 0.0f;
    if (!col_ok || u >= L) return;
    if (u + 1 < L) {
        load_vec<T, VEC>(p.h_in, hprev_at(p, b, u, L, col), hp);
    } else if (p.h0) {
#pragma unroll
        for (int v = 0; v < VEC; v++) hp[v] = __ldg(p.h0 + b * p.H + col + v);
    }
}

/* load_hprev in two halves, for holding h_{s-1} as loaded (16-bit vectors
 * packed) until it is used: the load of h at u+1 (zeros where there is
 * none), then the values, with h0 (fp32, never rounded to the storage
 * type) at u = L-1. */
template <typename T, int VEC, typename R>
__device__ __forceinline__ void load_hprev_reg(const scan_params &p, int64_t b, int64_t u,
                                               int64_t L, int64_t col, bool col_ok, R &hq)
{
    reg_fill<T, VEC>(hq, 0.0f);
    if (hprev_in(u, L, col_ok)) reg_load<T, VEC>(hq, p.h_in, hprev_at(p, b, u, L, col));
}
/* Asynchronous 16-byte copies global -> shared memory (sm_80 and later). */
#ifndef PRNN_CUDA_SIM /* the host simulator copies at once */
__device__ __forceinline__ void cp_async16(void *smem, const void *gmem)
{
    const unsigned s = (unsigned)__cvta_generic_to_shared(smem);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(s), "l"(gmem) : "memory");
}
/* Waits for this thread's copies; their data is then visible to it. */
__device__ __forceinline__ void cp_async_wait_all()
{
    asm volatile("cp.async.wait_all;" ::: "memory");
}
/* Closes this thread's group of copies issued since the last one. */
__device__ __forceinline__ void cp_async_commit()
{
    asm volatile("cp.async.commit_group;" ::: "memory");
}
/* Waits until at most N of this thread's groups are pending. */
template <int N> __device__ __forceinline__ void cp_async_wait_group()
{
    asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory");
}
#endif

/* A block's shared area sized at launch (dynamic shared memory). */
#ifndef PRNN_DYN_SHARED
#define PRNN_DYN_SHARED(type, name) extern __shared__ __align__(16) type name[]
#endif

/* load_hprev_reg through shared memory, on the vector path: the load of h
 * at u+1 issued as an asynchronous copy into this thread's slot, and after
 * cp_async_wait_all the register taken from it (zeros where there is none). */
template <typename T>
__device__ __forceinline__ void hprev_stage(const scan_params &p, int64_t b, int64_t u, int64_t L,
                                            int64_t col, bool col_ok, uint4 *slot)
{
    if (hprev_in(u, L, col_ok))
        cp_async16(slot, static_cast<const T *>(p.h_in) + hprev_at(p, b, u, L, col));
}

/* A staged 16-byte slot into a register (vector path). */
template <typename T, int VEC>
__device__ __forceinline__ void step_unstage(const uint4 *s, freg<VEC> &r)
{
    static_assert(VEC * sizeof(T) == 16, "staged vectors are 16 bytes");
    const uint4 q = *s;
    const unsigned w[4] = {q.x, q.y, q.z, q.w};
#pragma unroll
    for (int k = 0; k < 4; k++) r.v[k] = __uint_as_float(w[k]);
}
template <typename T, int VEC> __device__ __forceinline__ void step_unstage(const uint4 *s, hreg &r)
{
    r.raw = *s;
}

template <typename T, int VEC, typename R>
__device__ __forceinline__ void hprev_unstage(int64_t u, int64_t L, bool col_ok, const uint4 *slot,
                                              R &hq)
{
    reg_fill<T, VEC>(hq, 0.0f);
    if (hprev_in(u, L, col_ok)) step_unstage<T, VEC>(slot, hq);
}

/* load_step's forward through shared memory (vector path): a and b of
 * logical step u issued as asynchronous copies into this thread's slots sa
 * and sb, or the identity stored there where there is no step; after
 * cp_async_wait_all, step_unstage takes a slot into a register. */
template <typename T, int VEC>
__device__ __forceinline__ uint4 reg_raw(const freg<VEC> &r)
{
    static_assert(VEC * sizeof(T) == 16, "staged vectors are 16 bytes");
    return make_uint4(__float_as_uint(r.v[0]), __float_as_uint(r.v[1]), __float_as_uint(r.v[2]),
                      __float_as_uint(r.v[3]));
}
template <typename T, int VEC> __device__ __forceinline__ uint4 reg_raw(const hreg &r)
{
    return r.raw;
}
template <typename T, int VEC>
__device__ __forceinline__ void step_stage(const scan_params &p, int64_t row, int64_t u, int64_t L,
                                           int64_t col, bool col_ok, uint4 *sa, uint4 *sb)
{
    if (col_ok && u < L) {
        const int64_t i = (row + phys_t(u, L, flip_of<false>(p))) * p.H + col;
        cp_async16(sa, static_cast<const T *>(p.a) + i);
        cp_async16(sb, static_cast<const T *>(p.b) + i);
    } else {
        typename reg_of<T, VEC>::type one, zero;
        reg_fill<T, VEC>(one, 1.0f);
        reg_fill<T, VEC>(zero, 0.0f);
        *sa = reg_raw<T, VEC>(one);
        *sb = reg_raw<T, VEC>(zero);
    }
}

/* load_step's backward and load_hprev_reg through shared memory (vector
 * path): the coefficient, dh and h_{s-1} of logical step u of row b into
 * slots sx, sy and sh, or the values those functions give where there is
 * nothing to copy. */
template <typename T, int VEC>
__device__ __forceinline__ void step_stage_bwd(const scan_params &p, int64_t b, int64_t u,
                                               int64_t L, int64_t col, bool col_ok, uint4 *sx,
                                               uint4 *sy, uint4 *sh)
{
    typename reg_of<T, VEC>::type one, zero;
    reg_fill<T, VEC>(one, 1.0f);
    reg_fill<T, VEC>(zero, 0.0f);
    const bool ok = col_ok && u < L, flip = flip_of<true>(p);
    const int64_t row = b * p.T;
    if (ok && u > 0)
        cp_async16(sx, static_cast<const T *>(p.a) + (row + phys_t(u - 1, L, flip)) * p.H + col);
    else
        *sx = reg_raw<T, VEC>(one);
    if (ok && p.dh)
        cp_async16(sy, static_cast<const T *>(p.dh) + (row + phys_t(u, L, flip)) * p.H + col);
    else
        *sy = reg_raw<T, VEC>(zero);
    if (hprev_in(u, L, col_ok))
        cp_async16(sh, static_cast<const T *>(p.h_in) + hprev_at(p, b, u, L, col));
    else
        *sh = reg_raw<T, VEC>(zero);
}

template <typename T, int VEC, typename R>
__device__ __forceinline__ void hprev_get(const scan_params &p, int64_t b, int64_t u, int64_t L,
                                          int64_t col, const R &hq, float (&hp)[VEC])
{
    reg_get<T, VEC>(hq, hp);
    if (u == L - 1 && p.h0) {
#pragma unroll
        for (int v = 0; v < VEC; v++) hp[v] = __ldg(p.h0 + b * p.H + col + v);
    }
}

/* Writes the outputs of logical step u: forward h = state; backward
 * db = g, da = g * h_{s-1}. Padding steps write zeros. CS: evict-first. */
template <typename T, int VEC, bool BWD, bool CS = false>
__device__ __forceinline__ void store_step(const scan_params &p, int64_t row, int64_t u,
                                           int64_t L, int64_t col, const float (&state)[VEC],
                                           const float (&hp)[VEC])
{
    const bool valid = u < L;
    const int64_t i = (row + phys_t(u, L, flip_of<BWD>(p))) * p.H + col;
    float o[VEC];
    if constexpr (!BWD) {
#pragma unroll
        for (int v = 0; v < VEC; v++) o[v] = valid ? state[v] : 0.0f;
        store_vec<T, VEC, CS>(p.h_out, i, o);
    } else {
#pragma unroll
        for (int v = 0; v < VEC; v++) o[v] = valid ? state[v] : 0.0f;
        store_vec<T, VEC, CS>(p.db, i, o);
#pragma unroll
        for (int v = 0; v < VEC; v++) o[v] = valid ? state[v] * hp[v] : 0.0f;
        store_vec<T, VEC, CS>(p.da, i, o);
    }
}

/* Zeros of a padding step u >= L (t = u). */
template <typename T, int VEC, bool BWD>
__device__ __forceinline__ void store_zero(const scan_params &p, int64_t row, int64_t u,
                                           int64_t col)
{
    float z[VEC];
#pragma unroll
    for (int v = 0; v < VEC; v++) z[v] = 0.0f;
    const int64_t i = (row + u) * p.H + col;
    if constexpr (!BWD) {
        store_vec<T, VEC>(p.h_out, i, z);
    } else {
        store_vec<T, VEC>(p.db, i, z);
        store_vec<T, VEC>(p.da, i, z);
    }
}

/* The state the scan starts from at column col of row b: h0 or dhT. */
template <bool BWD>
__device__ __forceinline__ float state_in(const scan_params &p, int64_t b, int64_t col)
{
    const float *s = BWD ? p.dhT : p.h0;
    return s ? __ldg(s + b * p.H + col) : 0.0f;
}

/* The state after the last valid step, `state`, becomes hT (forward) or
 * dh0 = a_{s=0} * g_{s=0} (backward; dhT itself when L = 0). */
template <typename T, bool BWD>
__device__ __forceinline__ void state_out(const scan_params &p, int64_t b, int64_t col,
                                          int64_t L, float state)
{
    if constexpr (!BWD) {
        if (p.hT) p.hT[b * p.H + col] = state;
    } else {
        if (!p.dh0) return;
        float a0 = 1.0f;
        if (L > 0) {
            float x[1];
            load_vec<T, 1>(p.a, (b * p.T + phys_t(L - 1, L, !p.reverse)) * p.H + col, x);
            a0 = x[0];
        }
        p.dh0[b * p.H + col] = a0 * state;
    }
}

/* ------------------------------------------------------------------------ */
/* WINDOW (scan_window.cu): the scan of few long chains on sm_90           */

/* What WINDOW's choices depend on in the card: compute capability, SMs,
 * shared memory a block (opt-in bytes), and each SM's share of the peak
 * memory bandwidth (GB/s; 0: unknown). */
struct window_card {
    int cc_major, sm_count, smem_optin, gbps_sm;
};

/* A launch's share of the context: its words (window_words of them, in the
 * zeroed look-back area), the ticket counter and this launch's first
 * ticket, a tag no earlier launch used; the card. */
struct window_launch {
    unsigned long long *words;
    unsigned long long *counter;
    unsigned long long ticket_base;
    unsigned tag;
    cudaStream_t stream;
    window_card card;
};

/* Whether WINDOW can take the scan p (the backward with BWD, else the
 * forward) on the card. The caller has checked the tensors' 16-byte
 * vectors (vectors_ok). */
template <typename T, bool BWD> bool window_applies(const scan_params &p, const window_card &c);
/* The channels of a chain WINDOW would cut p's rows into: 64, or 32 (few
 * fp32 chains; the forward of few 16-bit chains of long rows on a card with
 * a small memory share an SM), where its forward beats the chunked scan's
 * from 32K steps. */
template <typename T, bool BWD> int window_chain_width(const scan_params &p, const window_card &c);
/* The tagged words a launch uses. */
template <typename T, bool BWD> size_t window_words(const scan_params &p, const window_card &c);
/* Launches the scan; *tickets: the tickets it takes from the counter. */
template <typename T, bool BWD>
cudaError_t window_scan(const scan_params &p, const window_launch &w, unsigned long long *tickets);

} // namespace prnn_cuda

#endif /* PRNN_SCAN_CUDA_CUH */
