/*
 * prnn_sim_device.h (host simulator) - CUDA C++ device syntax and intrinsics
 * for host compilation of src/scan_cuda.cu and src/scan_window.cu: every thread of a block is a
 * fiber (dev/cuda/sim/sim.cpp); __shared__ variables become statics, which is
 * right because the simulator runs one block at a time; __syncthreads and
 * __ballot_sync and the warp shuffles are fiber barriers; ld_word may return an older value of
 * a look-back word (on purpose: it exercises the look-back's fold of aggregates and retries).
 */
#ifndef PRNN_SIM_DEVICE_H
#define PRNN_SIM_DEVICE_H

#include <stdint.h>
#include <string.h>

#include <functional>

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __grid_constant__
#define __shared__ static
#define __align__(n) __attribute__((aligned(n)))

struct uint3 {
    unsigned x, y, z;
};
struct dim3 {
    unsigned x, y, z;
    constexpr dim3(unsigned x_ = 1, unsigned y_ = 1, unsigned z_ = 1) : x(x_), y(y_), z(z_) {}
};
struct uint4 {
    unsigned x, y, z, w;
};
struct float4 {
    float x, y, z, w;
};
struct uint2 {
    unsigned x, y;
};
inline uint2 make_uint2(unsigned x, unsigned y) { return uint2{x, y}; }
inline uint4 make_uint4(unsigned x, unsigned y, unsigned z, unsigned w) { return uint4{x, y, z, w}; }
inline float4 make_float4(float x, float y, float z, float w) { return float4{x, y, z, w}; }

namespace prnn_sim {
uint3 thread_idx();
uint3 block_idx();
dim3 grid_dim();
dim3 block_dim();
void syncthreads();
unsigned ballot(unsigned mask, int pred);
float shfl(unsigned mask, float v, int src);
void launch(dim3 grid, dim3 block, const std::function<void()> &body);
unsigned long long ld_word(const unsigned long long *p);
void st_word(unsigned long long *p, unsigned long long v);
int syncthreads_or(int pred);
/* WINDOW's sm_90 instructions (src/scan_window.cu): mbarriers with
 * transaction counts, 3-D tensor-map copies (done at once; a load's bytes
 * counted on the mbarrier), a named barrier of count threads. */
void mbar_init(uint64_t *m, unsigned count);
void mbar_arrive(uint64_t *m);
void mbar_expect(uint64_t *m, unsigned bytes);
void mbar_wait(uint64_t *m, unsigned parity);
void tma_3d(void *dst, const void *map, int x, int y, int b, uint64_t *m);
/* The other way: the box at (x, y, b) from src, packed, done at once;
 * elements outside the tensor are not written. */
void tma_store_3d(const void *map, const void *src, int x, int y, int b);
void named_sync(int id, int count);
void syncwarp();
} // namespace prnn_sim

#define threadIdx (prnn_sim::thread_idx())
#define blockIdx (prnn_sim::block_idx())
#define gridDim (prnn_sim::grid_dim())
#define blockDim (prnn_sim::block_dim())

#define PRNN_CUDA_SIM 1
#define PRNN_LAUNCH(kernel, grid, block, stream, ...)                          \
    ((void)(stream), prnn_sim::launch(dim3(grid), dim3(block), [=]() { kernel(__VA_ARGS__); }))

#define PRNN_LAUNCH_SMEM(kernel, grid, block, smem, stream, ...)              \
    ((void)(smem), PRNN_LAUNCH(kernel, grid, block, stream, __VA_ARGS__))
/* Dynamic shared memory: a static area as large as a block may ask for. */
#define PRNN_DYN_SHARED(type, name) static type name[(228u << 10) / sizeof(type)]

inline void __syncthreads() { prnn_sim::syncthreads(); }
inline int __syncthreads_or(int pred) { return prnn_sim::syncthreads_or(pred); }
inline unsigned __ballot_sync(unsigned mask, int pred) { return prnn_sim::ballot(mask, pred); }
inline float __shfl_sync(unsigned mask, float v, int src) { return prnn_sim::shfl(mask, v, src); }
inline float __shfl_up_sync(unsigned mask, float v, unsigned d)
{
    const int lane = (int)(threadIdx.x % 32); /* blocks are 1-D here */
    return prnn_sim::shfl(mask, v, lane >= (int)d ? lane - (int)d : lane);
}
inline float __shfl_down_sync(unsigned mask, float v, unsigned d)
{
    const int lane = (int)(threadIdx.x % 32);
    return prnn_sim::shfl(mask, v, lane + (int)d < 32 ? lane + (int)d : lane);
}
inline int __ffs(unsigned x) { return __builtin_ffs((int)x); }
inline void __syncwarp() { prnn_sim::syncwarp(); }
inline void __threadfence() { __atomic_thread_fence(__ATOMIC_SEQ_CST); }
inline unsigned long long atomicAdd(unsigned long long *p, unsigned long long v)
{
    const unsigned long long old = *p;
    *p = old + v;
    return old;
}
template <typename T> inline T __ldg(const T *p) { return *p; }
/* Asynchronous copies complete at once here. */
inline void cp_async16(void *smem, const void *gmem) { memcpy(smem, gmem, 16); }
inline void cp_async_wait_all() {}
inline void cp_async_commit() {}
template <int N> inline void cp_async_wait_group() {}
enum cudaFuncAttribute {
    cudaFuncAttributeMaxDynamicSharedMemorySize = 8,
    cudaFuncAttributePreferredSharedMemoryCarveout = 9
};
enum cudaSharedCarveout { cudaSharedmemCarveoutMaxShared = 100 };
template <typename K> inline cudaError_t cudaFuncSetAttribute(K, cudaFuncAttribute, int)
{
    return cudaSuccess;
}
/* A kernel's static shared memory: the simulator's __shared__ arrays are
 * statics, so 0 (the library's fit checks then see the dynamic part). */
struct cudaFuncAttributes {
    size_t sharedSizeBytes;
};
template <typename K> inline cudaError_t cudaFuncGetAttributes(cudaFuncAttributes *a, K)
{
    a->sharedSizeBytes = 0;
    return cudaSuccess;
}
/* Blocks resident per SM: a fixed 3 here (the kernels use it only to size
 * grids, and a grid of a few waves exercises their strides). */
template <typename K>
inline cudaError_t cudaOccupancyMaxActiveBlocksPerMultiprocessor(int *n, K, int, size_t)
{
    *n = 3;
    return cudaSuccess;
}
template <typename T> inline void __stcs(T *p, T v) { *p = v; }
template <typename T> inline T __ldcs(const T *p) { return *p; }
inline float __ldcg(const float *p) { return *p; }
inline float __uint_as_float(unsigned u)
{
    float f;
    memcpy(&f, &u, 4);
    return f;
}
inline unsigned __float_as_uint(float f)
{
    unsigned u;
    memcpy(&u, &f, 4);
    return u;
}
inline unsigned long long ld_word(const unsigned long long *p) { return prnn_sim::ld_word(p); }
inline void st_word(unsigned long long *p, unsigned long long v) { prnn_sim::st_word(p, v); }

/* bf16 and fp16: bits in a struct, round-to-nearest-even conversions */
struct __nv_bfloat16 {
    unsigned short x;
};
struct __half {
    unsigned short x;
};
inline unsigned short __bfloat16_as_ushort(__nv_bfloat16 h) { return h.x; }
inline __nv_bfloat16 __float2bfloat16_rn(float f)
{
    unsigned x = __float_as_uint(f);
    if ((x & 0x7fffffffu) > 0x7f800000u) return __nv_bfloat16{(unsigned short)((x >> 16) | 0x40u)};
    x += 0x7fffu + ((x >> 16) & 1u);
    return __nv_bfloat16{(unsigned short)(x >> 16)};
}
inline unsigned short __half_as_ushort(__half h) { return h.x; }
inline __half __ushort_as_half(unsigned short x) { return __half{x}; }
inline float __half2float(__half h)
{
    const unsigned sign = (unsigned)(h.x & 0x8000u) << 16, e = (h.x >> 10) & 0x1fu, m = h.x & 0x3ffu;
    if (e == 0x1f) return __uint_as_float(sign | 0x7f800000u | (m << 13));
    if (e == 0) {
        const float v = (float)m * (1.0f / 16777216.0f);
        return sign ? -v : v;
    }
    return __uint_as_float(sign | ((e + 112u) << 23) | (m << 13));
}
inline __half __float2half_rn(float f)
{
    const unsigned x = __float_as_uint(f), ax = x & 0x7fffffffu;
    const unsigned short sign = (unsigned short)((x >> 16) & 0x8000u);
    if (ax > 0x7f800000u) return __half{(unsigned short)(sign | 0x7e00u)};
    if (ax >= 0x477ff000u) return __half{(unsigned short)(sign | 0x7c00u)};
    if (ax < 0x38800000u) {
        const float q = __uint_as_float(ax) * 16777216.0f;
        return __half{(unsigned short)(sign | (unsigned short)__builtin_nearbyintf(q))};
    }
    const unsigned m = ax & 0x7fffffu;
    unsigned h = (((ax >> 23) - 112u) << 10) | (m >> 13);
    const unsigned rem = m & 0x1fffu;
    if (rem > 0x1000u || (rem == 0x1000u && (h & 1u))) h++;
    return __half{(unsigned short)(sign | h)};
}

#endif /* PRNN_SIM_DEVICE_H */
