/*
 * dist_cuda.cu - the CUDA side of the distributed context (dist.c): the
 * NCCL communicator and collectives, and the kernels of the
 * sequence-parallel scan (segment summaries and the merge of the gathered
 * records, layout in dist_internal.h). Everything runs on the context's
 * device and stream. Built when CMake finds NCCL (cmake/dist.cmake).
 *
 * Summaries. A segment's summary is a reduction over its time steps, so it
 * is split along time as well as channels: each thread reduces one channel
 * over one chunk of steps (neighbouring threads read neighbouring channels,
 * so a warp's loads coalesce), and a second kernel merges the chunks in
 * scan order. Storage may be fp32, bf16 or fp16; arithmetic is fp32.
 *
 * Size letters: B batch rows, T the local time steps, H channels, C chunks
 * of the time axis, N ranks, BH = B*H.
 */
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <nccl.h>

#include <string.h>

#include "cuda_common.cuh"
#include "dist_internal.h"

#define PRNN_DIST_HD __host__ __device__
#define REAL float
#define FN(name) name##_dev
#include "dist_combine.h"
#undef REAL
#undef FN
#undef PRNN_DIST_HD

static_assert(sizeof(ncclUniqueId) == PRNN_DIST_NCCL_ID_BYTES, "NCCL id size");

namespace {

constexpr int kThreads = 128;        /* channels per block */
constexpr int kThreadsPerSM = 2048;  /* resident threads per SM (sm_80, sm_90) */
constexpr int64_t kMaxChunks = 4096;
constexpr int64_t kMinChunkSteps = 64;

cudaStream_t stream_of(prnn_ctx *ctx) { return static_cast<cudaStream_t>(prnn_cuda_stream(ctx)); }

prnn_status map_nccl(ncclResult_t r) { return r == ncclSuccess ? PRNN_OK : PRNN_ERR_COMM; }

__device__ __forceinline__ float ld(const float *p) { return *p; }
__device__ __forceinline__ float ld(const __nv_bfloat16 *p) { return __bfloat162float(*p); }
__device__ __forceinline__ float ld(const __half *p) { return __half2float(*p); }

/* ------------------------------------------------------------------------ */
/* Summaries                                                                */

/* Chunk c of row r, channel j: positions [p0, p1) in scan order, position p
 * at time step reverse ? L-1-p : p. part (B, C, H) x 2: the chunk's product
 * of a, then (BWD false) S, its scan of v = b from zero, or (BWD true) G, its
 * gradient map x -> a_p (x + dh_p) applied from its last position to its
 * first, with v = dh (a null dh reads as zeros). */
template <typename T, bool BWD>
__global__ void part_kernel(const T *__restrict__ a, const T *__restrict__ v,
                            const int64_t *__restrict__ len, int64_t B, int64_t Tn, int64_t H,
                            int reverse, int64_t C, int64_t steps, float *__restrict__ part)
{
    const int64_t j = (int64_t)blockIdx.x * kThreads + threadIdx.x;
    if (j >= H) return;
    for (int64_t rc = blockIdx.y; rc < B * C; rc += gridDim.y) {
        const int64_t r = rc / C, c = rc % C;
        const int64_t L = len ? len[r] : Tn;
        const int64_t p0 = c * steps, p1 = p0 + steps < L ? p0 + steps : L;
        auto at = [&](int64_t p) { return (r * Tn + (reverse ? L - 1 - p : p)) * H + j; };
        float A = 1.f, S = 0.f;
        if constexpr (BWD) {
#pragma unroll 4
            for (int64_t p = p1 - 1; p >= p0; p--) {
                const int64_t i = at(p);
                const float x = ld(a + i);
                S = x * (S + (v ? ld(v + i) : 0.f));
                A *= x;
            }
        } else {
#pragma unroll 4
            for (int64_t p = p0; p < p1; p++) {
                const int64_t i = at(p);
                const float x = ld(a + i);
                S = fmaf(x, S, ld(v + i));
                A *= x;
            }
        }
        part[rc * H + j] = A;
        part[(B * C + rc) * H + j] = S;
    }
}

/* Chunks in scan order: (A1, S1) then (A2, S2) = (A2 A1, A2 S1 + S2). */
__global__ void fwd_merge_kernel(const float *__restrict__ part, int64_t B, int64_t C, int64_t H,
                                 float *__restrict__ rec)
{
    const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    const int64_t BH = B * H;
    if (i >= BH) return;
    const int64_t r = i / H, j = i % H;
    float A = 1.f, S = 0.f;
    for (int64_t c = 0; c < C; c++) {
        const float Ac = part[(r * C + c) * H + j], Sc = part[(B * C + r * C + c) * H + j];
        S = fmaf(Ac, S, Sc);
        A *= Ac;
    }
    rec[DF_A * BH + i] = A;
    rec[DF_S * BH + i] = S;
}

/* Chunks against scan order (the gradient flows from the last chunk), and
 * the segment's forward view: its last valid h, or pass-through. */
template <typename T>
__global__ void bwd_merge_kernel(const float *__restrict__ part, const T *__restrict__ h,
                                 const int64_t *__restrict__ len, int64_t B, int64_t Tn,
                                 int64_t C, int64_t H, int reverse, float *__restrict__ rec)
{
    const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    const int64_t BH = B * H;
    if (i >= BH) return;
    const int64_t r = i / H, j = i % H;
    float A = 1.f, G = 0.f;
    for (int64_t c = C - 1; c >= 0; c--) {
        const float Ac = part[(r * C + c) * H + j], Gc = part[(B * C + r * C + c) * H + j];
        G = fmaf(Ac, G, Gc);
        A *= Ac;
    }
    const int64_t L = len ? len[r] : Tn;
    rec[DB_A * BH + i] = A;
    rec[DB_G * BH + i] = G;
    rec[DB_AF * BH + i] = L > 0 ? 0.f : 1.f;
    rec[DB_SF * BH + i] = L > 0 ? ld(h + (r * Tn + (reverse ? 0 : L - 1)) * H + j) : 0.f;
}

/* ------------------------------------------------------------------------ */
/* Merging the gathered records, and the mean                               */

__global__ void fwd_combine_kernel(const float *__restrict__ rec, int64_t BH, int N, int reverse,
                                   int p, float *__restrict__ carry, float *__restrict__ hT)
{
    const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= BH) return;
    float c = 0.f, f = 0.f;
    dist_fwd_combine_at_dev(rec, BH, N, reverse, p, i, &c, &f);
    carry[i] = c;
    if (hT) hT[i] = f;
}

__global__ void bwd_combine_kernel(const float *__restrict__ rec, int64_t BH, int N, int reverse,
                                   int p, float *__restrict__ h0l, float *__restrict__ dhTl,
                                   float *__restrict__ dh0)
{
    const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= BH) return;
    float c = 0.f, g = 0.f, g0 = 0.f;
    dist_bwd_combine_at_dev(rec, BH, N, reverse, p, i, &c, &g, &g0);
    h0l[i] = c;
    dhTl[i] = g;
    if (dh0) dh0[i] = g0;
}

/* Division, not a multiplication by 1/N: a representable mean of an exact
 * sum comes out exact. */
__global__ void divide_kernel(float *__restrict__ x, int64_t n, float N)
{
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x)
        x[i] = x[i] / N;
}

unsigned grid_1d(int64_t n, int threads)
{
    const int64_t g = (n + threads - 1) / threads;
    return (unsigned)(g < 65535 ? g : 65535);
}

dim3 grid_summary(int64_t B, int64_t C, int64_t H)
{
    const int64_t y = B * C < 65535 ? B * C : 65535;
    return dim3((unsigned)((H + kThreads - 1) / kThreads), (unsigned)y);
}

template <typename T>
prnn_status fwd_summary(prnn_ctx *ctx, const prnn_scan_desc *d, const int64_t *len, float *rec,
                        const void *a, const void *b, float *part, int64_t C)
{
    cudaStream_t s = stream_of(ctx);
    const int64_t steps = (d->T + C - 1) / C;
    part_kernel<T, false><<<grid_summary(d->B, C, d->H), kThreads, 0, s>>>(
        static_cast<const T *>(a), static_cast<const T *>(b), len, d->B, d->T, d->H, d->reverse, C,
        steps, part);
    PRNN_CU_LAUNCHED();
    fwd_merge_kernel<<<grid_1d(d->B * d->H, 256), 256, 0, s>>>(part, d->B, C, d->H, rec);
    PRNN_CU_LAUNCHED();
    return PRNN_OK;
}

template <typename T>
prnn_status bwd_summary(prnn_ctx *ctx, const prnn_scan_desc *d, const int64_t *len, float *rec,
                        const void *a, const void *h, const void *dh, float *part, int64_t C)
{
    cudaStream_t s = stream_of(ctx);
    const int64_t steps = (d->T + C - 1) / C;
    part_kernel<T, true><<<grid_summary(d->B, C, d->H), kThreads, 0, s>>>(
        static_cast<const T *>(a), static_cast<const T *>(dh), len, d->B, d->T, d->H, d->reverse,
        C, steps, part);
    PRNN_CU_LAUNCHED();
    bwd_merge_kernel<T><<<grid_1d(d->B * d->H, 256), 256, 0, s>>>(
        part, static_cast<const T *>(h), len, d->B, d->T, C, d->H, d->reverse, rec);
    PRNN_CU_LAUNCHED();
    return PRNN_OK;
}

} // namespace

/* ------------------------------------------------------------------------ */
/* Entry points (dist_internal.h)                                           */

int64_t prnn_dist_cuda_chunks(prnn_ctx *ctx, int64_t B, int64_t T, int64_t H)
{
    /* One full wave of threads: B*H channels x C chunks = SMs x 2048 (the
     * summary kernels are light enough to be resident at full occupancy),
     * so no SM idles through a partial second wave. */
    int sms = 0;
    if (cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, prnn_cuda_device_of(ctx)) !=
            cudaSuccess || sms < 1)
        sms = 132;
    const int64_t target = (int64_t)sms * kThreadsPerSM;
    int64_t C = target / (B * H);
    if (C > kMaxChunks) C = kMaxChunks;
    const int64_t most = (T + kMinChunkSteps - 1) / kMinChunkSteps;
    if (C > most) C = most;
    return C < 1 ? 1 : C;
}

prnn_status prnn_dist_cuda_fwd_summary(prnn_ctx *ctx, const prnn_scan_desc *d,
                                       const int64_t *lengths, float *rec, const void *a,
                                       const void *b, float *part, int64_t chunks)
{
    prnn_cuda::device_guard g(prnn_cuda_device_of(ctx));
    PRNN_CU(g.err);
    switch (d->dtype) {
    case PRNN_DTYPE_F32: return fwd_summary<float>(ctx, d, lengths, rec, a, b, part, chunks);
    case PRNN_DTYPE_BF16:
        return fwd_summary<__nv_bfloat16>(ctx, d, lengths, rec, a, b, part, chunks);
    case PRNN_DTYPE_F16: return fwd_summary<__half>(ctx, d, lengths, rec, a, b, part, chunks);
    default: return PRNN_ERR_UNSUPPORTED;
    }
}

prnn_status prnn_dist_cuda_bwd_summary(prnn_ctx *ctx, const prnn_scan_desc *d,
                                       const int64_t *lengths, float *rec, const void *a,
                                       const void *h, const void *dh, float *part,
                                       int64_t chunks)
{
    prnn_cuda::device_guard g(prnn_cuda_device_of(ctx));
    PRNN_CU(g.err);
    switch (d->dtype) {
    case PRNN_DTYPE_F32: return bwd_summary<float>(ctx, d, lengths, rec, a, h, dh, part, chunks);
    case PRNN_DTYPE_BF16:
        return bwd_summary<__nv_bfloat16>(ctx, d, lengths, rec, a, h, dh, part, chunks);
    case PRNN_DTYPE_F16: return bwd_summary<__half>(ctx, d, lengths, rec, a, h, dh, part, chunks);
    default: return PRNN_ERR_UNSUPPORTED;
    }
}

prnn_status prnn_dist_cuda_fwd_combine(prnn_ctx *ctx, const float *rec, int64_t BH, int N,
                                       int reverse, int me, float *carry, float *hT)
{
    prnn_cuda::device_guard g(prnn_cuda_device_of(ctx));
    PRNN_CU(g.err);
    fwd_combine_kernel<<<grid_1d(BH, 256), 256, 0, stream_of(ctx)>>>(rec, BH, N, reverse, me,
                                                                      carry, hT);
    PRNN_CU_LAUNCHED();
    return PRNN_OK;
}

prnn_status prnn_dist_cuda_bwd_combine(prnn_ctx *ctx, const float *rec, int64_t BH, int N,
                                       int reverse, int me, float *h0l, float *dhTl, float *dh0)
{
    prnn_cuda::device_guard g(prnn_cuda_device_of(ctx));
    PRNN_CU(g.err);
    bwd_combine_kernel<<<grid_1d(BH, 256), 256, 0, stream_of(ctx)>>>(rec, BH, N, reverse, me,
                                                                      h0l, dhTl, dh0);
    PRNN_CU_LAUNCHED();
    return PRNN_OK;
}

prnn_status prnn_dist_nccl_unique_id(prnn_ctx *ctx, void *id)
{
    prnn_cuda::device_guard g(prnn_cuda_device_of(ctx));
    PRNN_CU(g.err);
    ncclUniqueId u;
    prnn_status s = map_nccl(ncclGetUniqueId(&u));
    if (s == PRNN_OK) memcpy(id, &u, sizeof u);
    return s;
}

prnn_status prnn_dist_nccl_init(prnn_ctx *ctx, void **comm, const void *id, int rank, int size)
{
    prnn_cuda::device_guard g(prnn_cuda_device_of(ctx));
    PRNN_CU(g.err);
    ncclUniqueId u;
    memcpy(&u, id, sizeof u);
    ncclComm_t c = nullptr;
    prnn_status s = map_nccl(ncclCommInitRank(&c, size, u, rank));
    *comm = s == PRNN_OK ? c : nullptr;
    return s;
}

void prnn_dist_nccl_free(prnn_ctx *ctx, void *comm)
{
    prnn_cuda::device_guard g(prnn_cuda_device_of(ctx));
    if (g.err != cudaSuccess) return;
    (void)cudaStreamSynchronize(stream_of(ctx));
    (void)ncclCommDestroy(static_cast<ncclComm_t>(comm));
}

prnn_status prnn_dist_nccl_allgather(prnn_ctx *ctx, void *comm, const float *send, float *recv,
                                     int64_t count)
{
    prnn_cuda::device_guard g(prnn_cuda_device_of(ctx));
    PRNN_CU(g.err);
    return map_nccl(ncclAllGather(send, recv, (size_t)count, ncclFloat,
                                  static_cast<ncclComm_t>(comm), stream_of(ctx)));
}

prnn_status prnn_dist_nccl_allreduce_mean(prnn_ctx *ctx, void *comm, float *buf, int64_t n,
                                          int size, void *stream)
{
    prnn_cuda::device_guard g(prnn_cuda_device_of(ctx));
    PRNN_CU(g.err);
    cudaStream_t s = stream ? static_cast<cudaStream_t>(stream) : stream_of(ctx);
    /* A ring or tree all-reduce sums each element once and sends the result
     * to every rank: identical bits everywhere. */
    prnn_status st = map_nccl(ncclAllReduce(buf, buf, (size_t)n, ncclFloat, ncclSum,
                                            static_cast<ncclComm_t>(comm), s));
    if (st != PRNN_OK) return st;
    divide_kernel<<<grid_1d(n, 256) < 4096 ? grid_1d(n, 256) : 4096, 256, 0, s>>>(buf, n,
                                                                                 (float)size);
    PRNN_CU_LAUNCHED();
    return PRNN_OK;
}

/* ------------------------------------------------------------------------ */
/* Owners' parts (ZeRO-1) and the side stream                               */

prnn_status prnn_dist_nccl_reduce_owners(prnn_ctx *ctx, void *comm, float *buf,
                                         const int64_t *lo, const int64_t *hi, int N, int me,
                                         void *stream)
{
    prnn_cuda::device_guard g(prnn_cuda_device_of(ctx));
    PRNN_CU(g.err);
    cudaStream_t s = stream ? static_cast<cudaStream_t>(stream) : stream_of(ctx);
    ncclComm_t c = static_cast<ncclComm_t>(comm);
    /* One reduce per owner, in place at the root; the group lets NCCL run
     * them as one operation. The group is closed even after a failure. */
    ncclResult_t r = ncclGroupStart();
    for (int k = 0; k < N && r == ncclSuccess; k++)
        if (hi[k] > lo[k])
            r = ncclReduce(buf + lo[k], buf + lo[k], (size_t)(hi[k] - lo[k]), ncclFloat, ncclSum,
                           k, c, s);
    const ncclResult_t e = ncclGroupEnd();
    prnn_status st = map_nccl(r == ncclSuccess ? e : r);
    if (st != PRNN_OK) return st;
    const int64_t n = hi[me] - lo[me];
    if (n <= 0) return PRNN_OK;
    divide_kernel<<<grid_1d(n, 256) < 4096 ? grid_1d(n, 256) : 4096, 256, 0, s>>>(
        buf + lo[me], n, (float)N);
    PRNN_CU_LAUNCHED();
    return PRNN_OK;
}

prnn_status prnn_dist_nccl_broadcast_owners(prnn_ctx *ctx, void *comm, float *buf,
                                            const int64_t *lo, const int64_t *hi, int N)
{
    prnn_cuda::device_guard g(prnn_cuda_device_of(ctx));
    PRNN_CU(g.err);
    ncclComm_t c = static_cast<ncclComm_t>(comm);
    ncclResult_t r = ncclGroupStart();
    for (int k = 0; k < N && r == ncclSuccess; k++)
        if (hi[k] > lo[k])
            r = ncclBroadcast(buf + lo[k], buf + lo[k], (size_t)(hi[k] - lo[k]), ncclFloat, k, c,
                              stream_of(ctx));
    const ncclResult_t e = ncclGroupEnd();
    return map_nccl(r == ncclSuccess ? e : r);
}

prnn_status prnn_dist_cuda_side_init(prnn_ctx *ctx, void **stream, void **ev_main,
                                     void **ev_side)
{
    *stream = *ev_main = *ev_side = nullptr;
    prnn_cuda::device_guard g(prnn_cuda_device_of(ctx));
    PRNN_CU(g.err);
    cudaStream_t s = nullptr;
    cudaEvent_t a = nullptr, b = nullptr;
    /* Non-blocking: no implicit order with the legacy default stream. */
    cudaError_t e = cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
    if (e == cudaSuccess) e = cudaEventCreateWithFlags(&a, cudaEventDisableTiming);
    if (e == cudaSuccess) e = cudaEventCreateWithFlags(&b, cudaEventDisableTiming);
    if (e != cudaSuccess) {
        if (b) (void)cudaEventDestroy(b);
        if (a) (void)cudaEventDestroy(a);
        if (s) (void)cudaStreamDestroy(s);
        return prnn_cuda::map_cuda_error(e);
    }
    *stream = s, *ev_main = a, *ev_side = b;
    return PRNN_OK;
}

void prnn_dist_cuda_side_free(prnn_ctx *ctx, void *stream, void *ev_main, void *ev_side)
{
    prnn_cuda::device_guard g(prnn_cuda_device_of(ctx));
    if (g.err != cudaSuccess) return;
    if (stream) {
        (void)cudaStreamSynchronize(static_cast<cudaStream_t>(stream));
        (void)cudaStreamDestroy(static_cast<cudaStream_t>(stream));
    }
    if (ev_main) (void)cudaEventDestroy(static_cast<cudaEvent_t>(ev_main));
    if (ev_side) (void)cudaEventDestroy(static_cast<cudaEvent_t>(ev_side));
}

/* A wait enqueued on a stream holds on to the event's latest record at the
 * time of the call, so one event serves every bucket in turn. */
prnn_status prnn_dist_cuda_side_waits(prnn_ctx *ctx, void *stream, void *ev_main)
{
    prnn_cuda::device_guard g(prnn_cuda_device_of(ctx));
    PRNN_CU(g.err);
    cudaEvent_t ev = static_cast<cudaEvent_t>(ev_main);
    PRNN_CU(cudaEventRecord(ev, stream_of(ctx)));
    PRNN_CU(cudaStreamWaitEvent(static_cast<cudaStream_t>(stream), ev, 0));
    return PRNN_OK;
}

prnn_status prnn_dist_cuda_main_waits(prnn_ctx *ctx, void *stream, void *ev_side)
{
    prnn_cuda::device_guard g(prnn_cuda_device_of(ctx));
    PRNN_CU(g.err);
    cudaEvent_t ev = static_cast<cudaEvent_t>(ev_side);
    PRNN_CU(cudaEventRecord(ev, static_cast<cudaStream_t>(stream)));
    PRNN_CU(cudaStreamWaitEvent(stream_of(ctx), ev, 0));
    return PRNN_OK;
}
