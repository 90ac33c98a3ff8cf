/*
 * warp_walk.cu - the 16-bit forward scan with a column lane's time lanes in
 * one warp: each warp owns CLW x 8 channels of one row (CLW column lanes of
 * 16 bytes, TW = 32 / CLW time lanes of S steps each) and walks the row
 * alone. A tile's scan across time lanes is a warp's shuffles, so warps need
 * no barrier and no shared memory, and a block can be any number of warps.
 *
 * Against STRIPED, whose 16 time lanes span a block's 8 warps and meet in
 * shared memory behind two barriers a tile. bf16 storage, fp32 carry, h0 = 0,
 * forward only; every shape is checked against a serial fp32 scan on the
 * host before it is timed.
 *
 *   nvcc -O3 -arch=sm_90 -Xcompiler -fopenmp -o warp_walk warp_walk.cu
 *   ./warp_walk B T H [B T H ...]    (H a multiple of 32)
 *
 * Prints, per shape and configuration, ms (median of 15), GB/s at 6 bytes an
 * element (a and b read, h written) and the fraction of the copy roofline
 * (cudaMemcpyAsync device to device of 1 GiB, read + written, median of 15).
 */
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <algorithm>
#include <vector>

#define CK(x)                                                                          \
    do {                                                                               \
        cudaError_t e_ = (x);                                                          \
        if (e_ != cudaSuccess) {                                                       \
            fprintf(stderr, "%s:%d %s\n", __FILE__, __LINE__, cudaGetErrorString(e_)); \
            exit(1);                                                                   \
        }                                                                              \
    } while (0)

struct walk {
    const __nv_bfloat16 *a, *b;
    __nv_bfloat16 *h;
    long long B, T, H;
};

__device__ __forceinline__ uint4 ld_nc(const void *p)
{
    uint4 v;
    asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                 : "l"(p));
    return v;
}

__device__ __forceinline__ void unpack(uint4 v, float (&f)[8])
{
    const uint32_t u[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
    for (int j = 0; j < 4; j++) {
        f[2 * j] = __uint_as_float(u[j] << 16);
        f[2 * j + 1] = __uint_as_float(u[j] & 0xffff0000u);
    }
}

template <int CLW, int S, int NW> __global__ void __launch_bounds__(32 * NW) k_warp(walk w)
{
    constexpr int TW = 32 / CLW, STEPS = TW * S;
    const int lane = threadIdx.x & 31, cl = lane % CLW, tw = lane / CLW;
    const long long groups = w.H / (CLW * 8);
    const long long wid = (long long)blockIdx.x * NW + threadIdx.x / 32;
    if (wid >= w.B * groups) return;
    const long long bb = wid / groups, col = (wid % groups) * (CLW * 8) + cl * 8;
    const size_t base = (size_t)(bb * w.T * w.H + col);
    const uint4 one = make_uint4(0x3f803f80u, 0x3f803f80u, 0x3f803f80u, 0x3f803f80u);
    const uint4 zero = make_uint4(0, 0, 0, 0);
    auto load = [&](uint4 (&X)[S], uint4 (&Y)[S], long long t0) {
#pragma unroll
        for (int k = 0; k < S; k++) {
            const long long t = t0 + tw * S + k;
            const bool ok = t < w.T;
            const size_t off = base + (size_t)(ok ? t : 0) * w.H;
            X[k] = ok ? ld_nc(w.a + off) : one;
            Y[k] = ok ? ld_nc(w.b + off) : zero;
        }
    };
    float c[8] = {};
    uint4 x[S], y[S];
    load(x, y, 0);
    for (long long t0 = 0; t0 < w.T; t0 += STEPS) {
        uint4 xn[S], yn[S];
        load(xn, yn, t0 + STEPS);
        /* this lane's summary of its S steps */
        float A[8], Bs[8];
#pragma unroll
        for (int v = 0; v < 8; v++) A[v] = 1.f, Bs[v] = 0.f;
#pragma unroll
        for (int k = 0; k < S; k++) {
            float fa[8], fb[8];
            unpack(x[k], fa);
            unpack(y[k], fb);
#pragma unroll
            for (int v = 0; v < 8; v++) {
                Bs[v] = fmaf(fa[v], Bs[v], fb[v]);
                A[v] *= fa[v];
            }
        }
        /* inclusive scan over the warp's time lanes */
#pragma unroll
        for (int d = 1; d < TW; d <<= 1) {
#pragma unroll
            for (int v = 0; v < 8; v++) {
                const float pA = __shfl_up_sync(0xffffffffu, A[v], d * CLW);
                const float pB = __shfl_up_sync(0xffffffffu, Bs[v], d * CLW);
                if (tw >= d) {
                    Bs[v] = fmaf(A[v], pB, Bs[v]);
                    A[v] *= pA;
                }
            }
        }
        /* the state entering this lane's steps, and the carry leaving the tile */
        float h[8];
#pragma unroll
        for (int v = 0; v < 8; v++) {
            const float eA = __shfl_up_sync(0xffffffffu, A[v], CLW);
            const float eB = __shfl_up_sync(0xffffffffu, Bs[v], CLW);
            h[v] = tw > 0 ? fmaf(eA, c[v], eB) : c[v];
            const float out = fmaf(A[v], c[v], Bs[v]);
            c[v] = __shfl_sync(0xffffffffu, out, (TW - 1) * CLW + cl);
        }
#pragma unroll
        for (int k = 0; k < S; k++) {
            float fa[8], fb[8];
            unpack(x[k], fa);
            unpack(y[k], fb);
            uint32_t o[4];
#pragma unroll
            for (int j = 0; j < 4; j++) {
                h[2 * j] = fmaf(fa[2 * j], h[2 * j], fb[2 * j]);
                h[2 * j + 1] = fmaf(fa[2 * j + 1], h[2 * j + 1], fb[2 * j + 1]);
                __nv_bfloat162 p = __floats2bfloat162_rn(h[2 * j], h[2 * j + 1]);
                memcpy(&o[j], &p, 4);
            }
            const long long t = t0 + tw * S + k;
            if (t < w.T) {
                __nv_bfloat16 *dst = w.h + base + (size_t)t * w.H;
                asm volatile("st.global.cs.v4.u32 [%0], {%1, %2, %3, %4};" ::"l"(dst), "r"(o[0]),
                             "r"(o[1]), "r"(o[2]), "r"(o[3])
                             : "memory");
            }
        }
#pragma unroll
        for (int k = 0; k < S; k++) x[k] = xn[k], y[k] = yn[k];
    }
}

__global__ void fill(__nv_bfloat16 *p, long long n, uint32_t seed, float lo, float hi)
{
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n;
         i += (long long)gridDim.x * blockDim.x) {
        uint32_t x = (uint32_t)i * 2654435761u ^ seed ^ (uint32_t)(i >> 32) * 40503u;
        x ^= x >> 16, x *= 0x7feb352du, x ^= x >> 15, x *= 0x846ca68bu, x ^= x >> 16;
        p[i] = __float2bfloat16(lo + (hi - lo) * (x >> 8) * (1.f / 16777216.f));
    }
}

static float median(std::vector<float> v)
{
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
}

/* Median ms of 15 calls of `launch` after 2 of warm-up, timed by events. */
template <typename F> static float time_ms(F launch)
{
    cudaEvent_t e0, e1;
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));
    std::vector<float> ms;
    for (int r = 0; r < 17; r++) {
        CK(cudaEventRecord(e0));
        launch();
        CK(cudaEventRecord(e1));
        CK(cudaEventSynchronize(e1));
        float t;
        CK(cudaEventElapsedTime(&t, e0, e1));
        if (r >= 2) ms.push_back(t);
    }
    CK(cudaEventDestroy(e0));
    CK(cudaEventDestroy(e1));
    return median(ms);
}

static double copy_roofline()
{
    const size_t n = 1ull << 30;
    void *s, *d;
    CK(cudaMalloc(&s, n));
    CK(cudaMalloc(&d, n));
    CK(cudaMemset(s, 1, n));
    const float ms = time_ms([&] { CK(cudaMemcpyAsync(d, s, n, cudaMemcpyDeviceToDevice)); });
    CK(cudaFree(s));
    CK(cudaFree(d));
    return 2.0 * n / (ms * 1e-3) / 1e9;
}

static float bf(uint16_t u)
{
    uint32_t x = (uint32_t)u << 16;
    float f;
    memcpy(&f, &x, 4);
    return f;
}

typedef void (*kern)(walk);
struct config {
    const char *name;
    kern k;
    int clw, nw;
};

/* max |gpu - ref| / (|ref| + 1) over batch rows `rows`, ref a serial fp32 scan */
static double check_rows(const walk &w, const std::vector<long long> &rows)
{
    const size_t n = (size_t)(w.T * w.H);
    double worst = 0;
    for (long long bb : rows) {
        std::vector<uint16_t> a(n), b(n), h(n);
        const size_t off = (size_t)bb * n;
        CK(cudaMemcpy(a.data(), w.a + off, n * 2, cudaMemcpyDeviceToHost));
        CK(cudaMemcpy(b.data(), w.b + off, n * 2, cudaMemcpyDeviceToHost));
        CK(cudaMemcpy(h.data(), w.h + off, n * 2, cudaMemcpyDeviceToHost));
        const long long H = w.H, T = w.T;
        const int nt = 16;
#pragma omp parallel for reduction(max : worst)
        for (int part = 0; part < nt; part++) {
            const long long j0 = H * part / nt, j1 = H * (part + 1) / nt;
            std::vector<float> c(H, 0.f);
            for (long long t = 0; t < T; t++) {
                const size_t row = (size_t)(t * H);
                for (long long j = j0; j < j1; j++) {
                    c[j] = fmaf(bf(a[row + j]), c[j], bf(b[row + j]));
                    const double e = fabs((double)bf(h[row + j]) - c[j]) / (fabs(c[j]) + 1.0);
                    if (e > worst) worst = e;
                }
            }
        }
    }
    return worst;
}

/* every batch row of small tensors; the first and the last of large ones */
static double check(const walk &w)
{
    std::vector<long long> rows;
    if (w.B * w.T * w.H <= (1ll << 27))
        for (long long bb = 0; bb < w.B; bb++) rows.push_back(bb);
    else
        rows = {0, w.B - 1};
    return check_rows(w, rows);
}

int main(int argc, char **argv)
{
    if (argc < 4 || (argc - 1) % 3) {
        fprintf(stderr, "usage: %s B T H [B T H ...]\n", argv[0]);
        return 2;
    }
    cudaDeviceProp prop;
    CK(cudaGetDeviceProperties(&prop, 0));
    const double roof = copy_roofline();
    printf("%s, %d SMs; copy roofline %.1f GB/s\n", prop.name, prop.multiProcessorCount, roof);
    const config cfgs[] = {
        {"w2s8n1", k_warp<2, 8, 1>, 2, 1},   {"w2s8n2", k_warp<2, 8, 2>, 2, 2},
        {"w2s8n4", k_warp<2, 8, 4>, 2, 4},   {"w2s4n2", k_warp<2, 4, 2>, 2, 2},
        {"w2s12n2", k_warp<2, 12, 2>, 2, 2}, {"w4s8n1", k_warp<4, 8, 1>, 4, 1},
        {"w4s8n2", k_warp<4, 8, 2>, 4, 2},   {"w4s12n1", k_warp<4, 12, 1>, 4, 1},
    };
    /* tolerance: one bf16 rounding of h (2^-9 relative) and an fp32
     * reassociation of the scan; 2^-7 leaves room for a rounding that the
     * reassociation tips across a tie, no more */
    const double tol = 1.0 / 128;
    int bad = 0;
    for (int s = 1; s + 2 < argc; s += 3) {
        walk w;
        w.B = atoll(argv[s]), w.T = atoll(argv[s + 1]), w.H = atoll(argv[s + 2]);
        if (w.B < 1 || w.T < 1 || w.H < 32 || w.H % 32) {
            fprintf(stderr, "bad shape %s x %s x %s\n", argv[s], argv[s + 1], argv[s + 2]);
            return 2;
        }
        const size_t n = (size_t)(w.B * w.T * w.H);
        __nv_bfloat16 *a, *b, *h;
        CK(cudaMalloc(&a, n * 2));
        CK(cudaMalloc(&b, n * 2));
        CK(cudaMalloc(&h, n * 2));
        fill<<<1024, 256>>>(a, (long long)n, 0x1234u + s, 0.5f, 0.99f);
        fill<<<1024, 256>>>(b, (long long)n, 0xabcdu + s, -1.f, 1.f);
        CK(cudaGetLastError());
        w.a = a, w.b = b, w.h = h;
        for (const config &c : cfgs) {
            const long long warps = w.B * (w.H / (c.clw * 8));
            const unsigned blocks = (unsigned)((warps + c.nw - 1) / c.nw);
            CK(cudaMemset(h, 0xff, n * 2));
            c.k<<<blocks, 32 * c.nw>>>(w);
            CK(cudaGetLastError());
            CK(cudaDeviceSynchronize());
            const double err = check(w);
            const float m = time_ms([&] { c.k<<<blocks, 32 * c.nw>>>(w); });
            const double gbs = 6.0 * n / (m * 1e-3) / 1e9;
            const bool ok = err <= tol;
            bad += !ok;
            printf("%lldx%lldx%lld %-8s %8.3f ms %7.1f GB/s %5.1f%%  err %.2e %s\n", w.B, w.T, w.H, c.name,
                   m, gbs, 100 * gbs / roof, err, ok ? "ok" : "FAIL");
            fflush(stdout);
        }
        CK(cudaFree(a));
        CK(cudaFree(b));
        CK(cudaFree(h));
    }
    printf("%d failed\n", bad);
    return bad ? 1 : 0;
}
