/*
 * sm_rate.cu - how many bytes a second one block an SM moves walking a
 * 256-byte 16-bit stripe, by three ways of loading: cp.async into each
 * thread's own shared-memory slots (the library's staged STRIPED forward),
 * tensor-map copies (cp.async.bulk.tensor) into shared stages, and plain
 * 16-byte loads into registers with the next tile in flight.
 *
 * The walk is the staged STRIPED forward's without its scan across lanes:
 * each of 256 threads (16 column lanes of 8 channels x 16 time lanes) takes
 * S steps of a and b a tile, runs h = a h + b over them from its own carry,
 * and stores h (evict-first). So the arithmetic and the stores are about the
 * kernel's, the barriers fewer; what is measured is the memory path.
 *
 *   nvcc -O3 -arch=sm_90 -o sm_rate sm_rate.cu -lcuda
 *   ./sm_rate B T H     (bf16 tensors (B, T, H); blocks = B H / 128)
 */
#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#define CK(x)                                                                          \
    do {                                                                               \
        cudaError_t e_ = (x);                                                          \
        if (e_ != cudaSuccess) {                                                       \
            fprintf(stderr, "%s:%d %s\n", __FILE__, __LINE__, cudaGetErrorString(e_)); \
            exit(1);                                                                   \
        }                                                                              \
    } while (0)

constexpr int kThreads = 256, CL = 16, TL = 16;

struct walk {
    const __nv_bfloat16 *a, *b;
    __nv_bfloat16 *h;
    long long B, T, H;
};

__device__ __forceinline__ uint32_t saddr(const void *p)
{
    return (uint32_t)__cvta_generic_to_shared(p);
}

/* h = a h + b over 8 channels, carry c, stored evict-first */
__device__ __forceinline__ void step(uint4 x, uint4 y, float (&c)[8], __nv_bfloat16 *dst)
{
    const __nv_bfloat162 *xa = reinterpret_cast<const __nv_bfloat162 *>(&x);
    const __nv_bfloat162 *ya = reinterpret_cast<const __nv_bfloat162 *>(&y);
    uint4 o;
    __nv_bfloat162 *oa = reinterpret_cast<__nv_bfloat162 *>(&o);
#pragma unroll
    for (int j = 0; j < 4; j++) {
        const float2 fa = __bfloat1622float2(xa[j]), fb = __bfloat1622float2(ya[j]);
        c[2 * j] = fmaf(fa.x, c[2 * j], fb.x);
        c[2 * j + 1] = fmaf(fa.y, c[2 * j + 1], fb.y);
        oa[j] = __floats2bfloat162_rn(c[2 * j], c[2 * j + 1]);
    }
    asm volatile("st.global.cs.v4.u32 [%0], {%1, %2, %3, %4};" ::"l"(dst), "r"(o.x), "r"(o.y),
                 "r"(o.z), "r"(o.w)
                 : "memory");
}

/* 1. cp.async into the thread's own slots, D tiles ahead */
template <int S, int D> __global__ void __launch_bounds__(kThreads, 1) k_cpasync(walk w)
{
    extern __shared__ uint4 sm[];
    const int cl = threadIdx.x % CL, tl = threadIdx.x / CL;
    const long long nst = w.H / 128, r = blockIdx.x, bb = r / nst, col = (r % nst) * 128 + cl * 8;
    const long long base = bb * w.T * w.H + col;
    constexpr int STEPS = TL * S;
    float c[8] = {};
    auto slot = [&](int d, int k, int arr) { return sm + ((d * S + k) * 2 + arr) * kThreads + threadIdx.x; };
    auto issue = [&](int d, long long t0) {
#pragma unroll
        for (int k = 0; k < S; k++) {
            long long t = t0 + tl * S + k;
            if (t >= w.T) t = w.T - 1;
            const size_t off = (size_t)(base + t * w.H);
            asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(saddr(slot(d, k, 0))),
                         "l"(w.a + off) : "memory");
            asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(saddr(slot(d, k, 1))),
                         "l"(w.b + off) : "memory");
        }
        asm volatile("cp.async.commit_group;" ::: "memory");
    };
    for (int d = 0; d < D; d++) issue(d, (long long)d * STEPS);
    for (long long t0 = 0, ti = 0; t0 < w.T; t0 += STEPS, ti++) {
        const int d = (int)(ti % D);
        asm volatile("cp.async.wait_group %0;" ::"n"(D - 1) : "memory");
        uint4 x[S], y[S];
#pragma unroll
        for (int k = 0; k < S; k++) { x[k] = *slot(d, k, 0); y[k] = *slot(d, k, 1); }
        issue(d, t0 + (long long)D * STEPS);
        __syncthreads(); /* the library's tile has two */
#pragma unroll
        for (int k = 0; k < S; k++) {
            const long long t = t0 + tl * S + k;
            if (t < w.T) step(x[k], y[k], c, w.h + base + t * w.H);
        }
    }
}

/* 2. tensor-map copies: one thread copies the next tiles' a and b boxes
 * (128 channels x STEPS steps) into D stages */
__device__ __forceinline__ void mbar_wait(uint64_t *m, unsigned parity)
{
    asm volatile("{\n.reg .pred p;\nW_%=:\n"
                 "mbarrier.try_wait.parity.shared.b64 p, [%0], %1;\n@!p bra W_%=;\n}" ::"r"(saddr(m)),
                 "r"(parity) : "memory");
}
template <int S, int D>
__global__ void __launch_bounds__(kThreads, 1)
    k_tma(walk w, const __grid_constant__ CUtensorMap ma, const __grid_constant__ CUtensorMap mb)
{
    extern __shared__ __align__(128) uint4 sm_raw[];
    __shared__ __align__(8) uint64_t full[D];
    uint4 *sm = reinterpret_cast<uint4 *>((reinterpret_cast<uintptr_t>(sm_raw) + 127) & ~(uintptr_t)127);
    constexpr int STEPS = TL * S, BOX = STEPS * 256 / 16; /* uint4 per box */
    const int cl = threadIdx.x % CL, tl = threadIdx.x / CL;
    const long long nst = w.H / 128, r = blockIdx.x, bb = r / nst, c0 = (r % nst) * 128;
    const long long base = bb * w.T * w.H + c0 + cl * 8;
    if (threadIdx.x == 0) {
        for (int d = 0; d < D; d++)
            asm volatile("mbarrier.init.shared.b64 [%0], 1;" ::"r"(saddr(&full[d])) : "memory");
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    }
    __syncthreads();
    auto issue = [&](int d, long long t0) {
        if (threadIdx.x != 0 || t0 >= w.T) return;
        asm volatile("mbarrier.arrive.expect_tx.shared.b64 _, [%0], %1;" ::"r"(saddr(&full[d])),
                     "r"(2 * BOX * 16) : "memory");
        asm volatile("cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::complete_tx::bytes "
                     "[%0], [%1, {%2, %3, %4}], [%5];" ::"r"(saddr(sm + 2 * d * BOX)),
                     "l"(&ma), "r"((int)c0), "r"((int)t0), "r"((int)bb), "r"(saddr(&full[d])) : "memory");
        asm volatile("cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::complete_tx::bytes "
                     "[%0], [%1, {%2, %3, %4}], [%5];" ::"r"(saddr(sm + (2 * d + 1) * BOX)),
                     "l"(&mb), "r"((int)c0), "r"((int)t0), "r"((int)bb), "r"(saddr(&full[d])) : "memory");
    };
    for (int d = 0; d < D; d++) issue(d, (long long)d * STEPS);
    float c[8] = {};
    for (long long t0 = 0, ti = 0; t0 < w.T; t0 += STEPS, ti++) {
        const int d = (int)(ti % D);
        mbar_wait(&full[d], (unsigned)((ti / D) & 1));
        uint4 x[S], y[S];
#pragma unroll
        for (int k = 0; k < S; k++) {
            x[k] = sm[2 * d * BOX + (tl * S + k) * 16 + cl];
            y[k] = sm[(2 * d + 1) * BOX + (tl * S + k) * 16 + cl];
        }
        __syncthreads(); /* stage d read by all */
        issue(d, t0 + (long long)D * STEPS);
#pragma unroll
        for (int k = 0; k < S; k++) {
            const long long t = t0 + tl * S + k;
            if (t < w.T) step(x[k], y[k], c, w.h + base + t * w.H);
        }
    }
}

/* 3. plain loads into registers, the next tile in flight */
template <int S> __global__ void __launch_bounds__(kThreads, 1) k_ld(walk w)
{
    const int cl = threadIdx.x % CL, tl = threadIdx.x / CL;
    const long long nst = w.H / 128, r = blockIdx.x, bb = r / nst, col = (r % nst) * 128 + cl * 8;
    const long long base = bb * w.T * w.H + col;
    constexpr int STEPS = TL * S;
    float c[8] = {};
    uint4 x[S], y[S];
    auto load = [&](uint4 (&X)[S], uint4 (&Y)[S], long long t0) {
#pragma unroll
        for (int k = 0; k < S; k++) {
            long long t = t0 + tl * S + k;
            if (t >= w.T) t = w.T - 1;
            X[k] = __ldg(reinterpret_cast<const uint4 *>(w.a + base + t * w.H));
            Y[k] = __ldg(reinterpret_cast<const uint4 *>(w.b + base + t * w.H));
        }
    };
    load(x, y, 0);
    for (long long t0 = 0; t0 < w.T; t0 += STEPS) {
        uint4 xn[S], yn[S];
        load(xn, yn, t0 + STEPS);
        __syncthreads();
#pragma unroll
        for (int k = 0; k < S; k++) {
            const long long t = t0 + tl * S + k;
            if (t < w.T) step(x[k], y[k], c, w.h + base + t * w.H);
        }
#pragma unroll
        for (int k = 0; k < S; k++) { x[k] = xn[k]; y[k] = yn[k]; }
    }
}

static PFN_cuTensorMapEncodeTiled_v12000 encode()
{
    void *f = nullptr;
    cudaDriverEntryPointQueryResult q;
    CK(cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &f, 12000, cudaEnableDefault, &q));
    return reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(f);
}

static CUtensorMap map_of(const void *p, long long B, long long T, long long H, int steps)
{
    CUtensorMap m;
    const cuuint64_t dims[3] = {(cuuint64_t)H, (cuuint64_t)T, (cuuint64_t)B},
                     strides[2] = {(cuuint64_t)H * 2, (cuuint64_t)(T * H) * 2};
    const cuuint32_t box[3] = {128, (cuuint32_t)steps, 1}, es[3] = {1, 1, 1};
    if (encode()(&m, CU_TENSOR_MAP_DATA_TYPE_UINT16, 3, const_cast<void *>(p), dims, strides, box, es,
                 CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_NONE,
                 CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) != CUDA_SUCCESS) {
        fprintf(stderr, "tensor map failed\n");
        exit(1);
    }
    return m;
}

template <typename F> static float time_ms(F launch, char *flush, size_t flush_bytes)
{
    cudaEvent_t e0, e1;
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));
    float best[9];
    for (int i = 0; i < 9; i++) {
        CK(cudaMemsetAsync(flush, i, flush_bytes)); /* L2 cold */
        CK(cudaEventRecord(e0));
        launch();
        CK(cudaEventRecord(e1));
        CK(cudaEventSynchronize(e1));
        CK(cudaGetLastError());
        CK(cudaEventElapsedTime(&best[i], e0, e1));
    }
    for (int i = 1; i < 9; i++) /* median */
        for (int j = i; j > 0 && best[j] < best[j - 1]; j--) {
            float t = best[j]; best[j] = best[j - 1]; best[j - 1] = t;
        }
    return best[4];
}

int main(int argc, char **argv)
{
    const long long B = argc > 3 ? atoll(argv[1]) : 16, T = argc > 3 ? atoll(argv[2]) : 65536,
                    H = argc > 3 ? atoll(argv[3]) : 768;
    if (H % 128) { fprintf(stderr, "H must be a multiple of 128\n"); return 1; }
    const size_t n = (size_t)(B * T * H);
    walk w{nullptr, nullptr, nullptr, B, T, H};
    __nv_bfloat16 *a, *b, *h;
    CK(cudaMalloc(&a, n * 2));
    CK(cudaMalloc(&b, n * 2));
    CK(cudaMalloc(&h, n * 2));
    CK(cudaMemset(a, 0x3f, n * 2)); /* a about 0.75, b about 0.75 */
    CK(cudaMemset(b, 0x3f, n * 2));
    w.a = a, w.b = b, w.h = h;
    char *flush;
    const size_t fb = 256u << 20;
    CK(cudaMalloc(&flush, fb));
    const unsigned blocks = (unsigned)(B * H / 128);
    const double bytes = 6.0 * (double)n;

    /* copy roofline: 1 GiB device to device */
    char *c0, *c1;
    CK(cudaMalloc(&c0, 1u << 30));
    CK(cudaMalloc(&c1, 1u << 30));
    const float tc = time_ms([&] { CK(cudaMemcpyAsync(c1, c0, 1u << 30, cudaMemcpyDeviceToDevice)); }, flush, fb);
    const double roof = 2.0 * (1u << 30) / (tc * 1e6);
    CK(cudaFree(c0));
    CK(cudaFree(c1));
    printf("shape %lldx%lldx%lld bf16, %u blocks, copy roofline %.0f GB/s\n", B, T, H, blocks, roof);

    auto report = [&](const char *name, float ms) {
        const double gbs = bytes / (ms * 1e6);
        printf("| %-14s | %u | %.3f | %.0f | %.1f%% | %.1f |\n", name, blocks, ms, gbs, 100 * gbs / roof,
               gbs / blocks);
    };
    printf("| way | blocks | ms | GB/s | roofline | GB/s a block |\n");
#define CPA(S, D)                                                                                   \
    {                                                                                               \
        const int sm = D * S * 2 * kThreads * 16;                                                   \
        auto kf = k_cpasync<S, D>;                                                                  \
        CK(cudaFuncSetAttribute(kf, cudaFuncAttributeMaxDynamicSharedMemorySize, sm));              \
        report("cpasync " #S "x" #D, time_ms([&] { k_cpasync<S, D><<<blocks, kThreads, sm>>>(w); }, flush, fb)); \
    }
#define TMA(S, D)                                                                                   \
    {                                                                                               \
        const int sm = D * 2 * TL * S * 256 + 128;                                                  \
        const CUtensorMap ma = map_of(a, B, T, H, TL * S), mb = map_of(b, B, T, H, TL * S);         \
        auto kf = k_tma<S, D>;                                                                      \
        CK(cudaFuncSetAttribute(kf, cudaFuncAttributeMaxDynamicSharedMemorySize, sm));              \
        report("tma " #S "x" #D, time_ms([&] { k_tma<S, D><<<blocks, kThreads, sm>>>(w, ma, mb); }, flush, fb)); \
    }
    CPA(12, 2) CPA(8, 1) CPA(8, 3)
    TMA(12, 2) TMA(8, 3) TMA(8, 2) TMA(4, 6)
    report("ld 8", time_ms([&] { k_ld<8><<<blocks, kThreads>>>(w); }, flush, fb));
    report("ld 12", time_ms([&] { k_ld<12><<<blocks, kThreads>>>(w); }, flush, fb));
    return 0;
}
