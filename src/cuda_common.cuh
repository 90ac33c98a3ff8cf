/*
 * cuda_common.cuh - what the CUDA translation units share: mapping CUDA
 * errors to prnn_status, the early-return check macros, the guard that
 * makes the context's device current for a scope, dependent launches, and
 * the device's answers that never change (SM count, a kernel's occupancy)
 * kept after their first query, and the upload of per-row lengths.
 */
#ifndef PRNN_CUDA_COMMON_CUH
#define PRNN_CUDA_COMMON_CUH

#include <cuda_runtime.h>

#include <atomic>
#include <mutex>
#include <utility>

#include "prnn_internal.h"

namespace prnn_cuda {

inline prnn_status map_cuda_error(cudaError_t e)
{
    switch (e) {
    case cudaSuccess: return PRNN_OK;
    case cudaErrorMemoryAllocation: return PRNN_ERR_OUT_OF_MEMORY;
    case cudaErrorNoDevice:
    case cudaErrorInsufficientDriver: return PRNN_ERR_NO_DEVICE;
    default: return PRNN_ERR_CUDA;
    }
}

/* Makes the context's device current for a scope and restores the caller's
 * device afterwards, so the library never changes the caller's state. */
struct device_guard {
    int prev = -1;
    int dev;
    cudaError_t err;
    explicit device_guard(int d) : dev(d)
    {
        err = cudaGetDevice(&prev);
        if (err == cudaSuccess && prev != dev) err = cudaSetDevice(dev);
    }
    ~device_guard()
    {
        if (prev >= 0 && prev != dev) (void)cudaSetDevice(prev);
    }
    device_guard(const device_guard &) = delete;
    device_guard &operator=(const device_guard &) = delete;
};

/*
 * Programmatic dependent launch (sm_90 and later). Every kernel of the
 * scan, the cell layers, the blocks and the dtype conversions begins with
 * grid_dep_begin() (the distributed scan's few kernels launch plainly): it
 * waits until the grids it depends on (the stream's earlier kernels) have
 * completed and their writes are visible, then lets the stream's next
 * kernel be scheduled at once. launch() marks each launch as allowed to start that
 * early, so the next kernel's blocks take the SM slots this grid frees and
 * wait in their own grid_dep_begin: a chain of dependent kernels (a cell
 * layer's passes) does not pay a launch gap between each pair. A kernel
 * launched this way must call grid_dep_begin first, in every block, before
 * it reads or writes global memory. Below sm_90 the instructions are
 * absent and launch() launches plainly. PRNN_PDL=0 turns it off.
 */
#ifndef PRNN_PDL
#define PRNN_PDL 1
#endif

/* kTrigger = false: the next kernel is scheduled only once this grid has
 * completed (for a kernel that holds most of an SM's shared memory, whose
 * carveout the next kernel's early blocks would otherwise inherit). */
template <bool kTrigger = true> __device__ __forceinline__ void grid_dep_begin()
{
#if PRNN_PDL && defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;" ::: "memory");
    if (kTrigger) asm volatile("griddepcontrol.launch_dependents;" :::);
#endif
}

#ifndef PRNN_CUDA_SIM
/* Whether the current device runs dependent launches (compute 9.0+),
 * looked up once per device. */
inline bool pdl_device()
{
    static std::atomic<int> known[64]; /* 0 not yet, 1 yes, 2 no */
    int d = 0;
    if (cudaGetDevice(&d) != cudaSuccess || d < 0 || d >= 64) {
        (void)cudaGetLastError();
        return false;
    }
    int k = known[d].load(std::memory_order_relaxed);
    if (k == 0) {
        int major = 0;
        if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, d) != cudaSuccess)
            (void)cudaGetLastError();
        k = major >= 9 ? 1 : 2;
        known[d].store(k, std::memory_order_relaxed);
    }
    return k == 1;
}

/* kernel<<<grid, block, smem, stream>>>(args...), as a dependent launch
 * where the device has them. Errors surface through cudaGetLastError(). */
template <typename... P, typename... A>
inline void launch(void (*kernel)(P...), dim3 grid, dim3 block, size_t smem, cudaStream_t stream,
                   A &&...args)
{
#if PRNN_PDL
    if (pdl_device()) {
        cudaLaunchConfig_t cfg = {};
        cfg.gridDim = grid;
        cfg.blockDim = block;
        cfg.dynamicSmemBytes = smem;
        cfg.stream = stream;
        cudaLaunchAttribute attr[1];
        attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
        attr[0].val.programmaticStreamSerializationAllowed = 1;
        cfg.attrs = attr;
        cfg.numAttrs = 1;
        (void)cudaLaunchKernelEx(&cfg, kernel, std::forward<A>(args)...);
        return;
    }
#endif
    kernel<<<grid, block, smem, stream>>>(std::forward<A>(args)...);
}
#endif

/*
 * What a launch path asks of the runtime and gets the same answer to every
 * time: kept after the first query, so that a small model's launches (many
 * a step) do not each pay runtime calls for them.
 */

/* SMs of device dev (16 when the runtime cannot say). */
inline int sm_count_of(int dev)
{
    static std::atomic<int> known[64]; /* 0: not asked yet */
    if (dev < 0 || dev >= 64) return 16;
    int n = known[dev].load(std::memory_order_relaxed);
    if (n > 0) return n;
    if (cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess || n <= 0) {
        (void)cudaGetLastError();
        return 16; /* not kept: asked again next time */
    }
    known[dev].store(n, std::memory_order_relaxed);
    return n;
}

/* Blocks of kernel k resident at once on one SM of device dev (which must
 * be current) at `threads` a block and `smem` bytes of dynamic shared
 * memory: the occupancy calculator, asked once per (device, kernel,
 * threads, smem). 0 when it fails (not kept). */
template <typename K> inline int resident_blocks(int dev, K *k, int threads, size_t smem)
{
    struct entry {
        const void *k;
        int dev, threads;
        size_t smem;
        int n;
    };
    enum { kEntries = 256 }; /* kernels a process launches this way: a few dozen */
    static std::mutex mu;
    static entry table[kEntries];
    static int used = 0;
    const void *key = reinterpret_cast<const void *>(k);
    {
        std::lock_guard<std::mutex> lock(mu);
        for (int i = 0; i < used; i++) {
            const entry &e = table[i];
            if (e.k == key && e.dev == dev && e.threads == threads && e.smem == smem) return e.n;
        }
    }
    int n = 0;
    if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, k, threads, smem) != cudaSuccess) {
        (void)cudaGetLastError();
        return 0;
    }
    std::lock_guard<std::mutex> lock(mu);
    if (used < kEntries) table[used++] = entry{key, dev, threads, smem, n};
    return n;
}

} // namespace prnn_cuda

#define PRNN_CU(call)                                                          \
    do {                                                                       \
        cudaError_t e_ = (call);                                               \
        if (e_ != cudaSuccess) return prnn_cuda::map_cuda_error(e_);           \
    } while (0)

/* After a launch: launch-configuration errors and earlier async faults. */
#define PRNN_CU_LAUNCHED() PRNN_CU(cudaGetLastError())

namespace prnn_cuda {

/* Copies B host lengths into *buf, a device buffer of *cap entries that
 * grows to fit (256 at least), on stream s; *dev is null where lengths is.
 * A buffer too small is freed only once the stream's queued kernels, which
 * may still read it, are done. Pageable source: the call returns once the
 * bytes are staged, so the caller may reuse its array at once, and the copy
 * stays ordered after the kernels that read the previous contents. */
inline prnn_status upload_lengths(void **buf, int64_t *cap, cudaStream_t s,
                                  const int64_t *lengths, int64_t B, const int64_t **dev)
{
    *dev = nullptr;
    if (!lengths) return PRNN_OK;
    if (B > *cap) {
        if (*buf) {
            PRNN_CU(cudaStreamSynchronize(s));
            PRNN_CU(cudaFree(*buf));
            *buf = nullptr;
            *cap = 0;
        }
        const int64_t want = B < 256 ? 256 : B;
        void *p = nullptr;
        const cudaError_t e = cudaMalloc(&p, (size_t)want * sizeof(int64_t));
        if (e != cudaSuccess) {
            (void)cudaGetLastError();
            return map_cuda_error(e);
        }
        *buf = p;
        *cap = want;
    }
    PRNN_CU(cudaMemcpyAsync(*buf, lengths, (size_t)B * sizeof(int64_t), cudaMemcpyHostToDevice,
                            s));
    *dev = static_cast<const int64_t *>(*buf);
    return PRNN_OK;
}

} // namespace prnn_cuda

#endif /* PRNN_CUDA_COMMON_CUH */
