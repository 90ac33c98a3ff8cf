/*
 * scan_cuda.cu - the CUDA backend of prnn: context resources (device,
 * stream, workspace) and the linear scan h_t = a_t * h_{t-1} + b_t, forward
 * and backward, in four algorithms:
 *
 *   CHUNKED  single pass with decoupled look-back: each thread
 *            block owns (row b, a tile of columns, a chunk of time), keeps its
 *            a and b in registers, learns its carry-in from the blocks before
 *            it in time and writes h once. Reads a, b and writes h exactly once
 *            (12 bytes/element in fp32), so it runs at copy bandwidth, and it
 *            splits T over blocks so that small B*H still fills the GPU.
 *   TREE     the source design: serial local states inside chunks of 32 steps,
 *            merged level by level up a tree, carries pushed down the tree,
 *            and the local kernel again with each chunk's carry-in.
 *   STRIPED  for many channels: one block carries a stripe of channels
 *            through the whole row, tile after tile; no look-back, no
 *            workspace. With too few stripes to fill the card, rows are cut
 *            into segments whose carries come from a look-back over the
 *            segments' aggregates (each segment read twice, the second
 *            time mostly from L2).
 *   SERIAL   one thread per channel looping over t: the O(T) baseline.
 *
 * AUTO (the default) is STRIPED where its stripes fill the card walking
 * whole rows, and CHUNKED otherwise; FIXED (summation order never depends
 * on timing) is STRIPED where its stripes fill the card, TREE otherwise.
 *
 * All arithmetic and every carry is fp32; a, b, h, dh, da, db are stored as
 * fp32, bf16 or fp16; states h0, hT, dhT, dh0 are fp32. The per-step access
 * rules (reverse, lengths, the backward's shifted coefficient) live in
 * scan_cuda.cuh and are shared by all four.
 *
 * Size letters: B batch rows, T time steps, H channels. Tensors (B, T, H)
 * with H contiguous; states (B, H).
 *
 * Manners: no printing (except the DEBUG_MERGE build), no exit, every CUDA
 * error mapped to a prnn_status, all work on the context's stream, and the
 * workspace grown on demand and kept.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_common.cuh"
#include "prnn_internal.h"
#include "scan_cuda.cuh"

#ifdef DEBUG_MERGE
#include <math.h>
#include <stdio.h>

#include <type_traits>
#endif

using namespace prnn_cuda;

/* ======================================================================== */
/* Context state                                                            */

struct prnn_cuda_state {
    int device;
    cudaStream_t stream;
    int owns_stream;
    int sm_count;
    int l2_bytes;
    int smem_optin; /* shared memory a block may opt in to, bytes */
    int cc_major;   /* compute capability */
    int mem_gbps;   /* peak device-memory bandwidth from clock and bus width, GB/s (0: unknown) */

    /* Workspace, one allocation grown on demand and kept:
     *   [0, 8)                 the chunked scan's ticket counter (u64)
     *   [kWordsOffset, ...)    word_cap tagged 64-bit look-back words of the
     *                          chunked and segmented scans
     *   [data_offset, ...)     data_cap bytes: tree levels
     * The counter and words are zeroed once when allocated; afterwards each
     * look-back launch tags its words with a fresh epoch and offsets its
     * tickets by ticket_base, so no per-call memset is needed. */
    unsigned char *ws;
    size_t word_cap;
    size_t data_offset;
    size_t data_cap;
    unsigned long long ticket_base;
    unsigned epoch;

    void *d_lengths;    /* (lengths_cap) device copy of desc->lengths */
    int64_t lengths_cap;

    /* The kernel the last scan chose (prnn_scan_last_kernel), put in words
     * only when asked: its engine (NULL: none yet) and configuration. */
    struct {
        int engine; /* kernel_engine */
        int columns, steps, per_sm, staged;
        int64_t tile_steps, parts;
        bool late; /* striped: tiles finished a tile late */
    } last;
    char last_text[200];
};

namespace {

/* The engines prnn_scan_last_kernel names. */
enum kernel_engine { kNoEngine, kSerial, kTree, kChunked, kStriped, kWindow };

constexpr size_t kWordsOffset = 256;
constexpr unsigned kEpochLimit = 1u << 30; /* tag = epoch << 2 | status */

size_t align_up(size_t x, size_t a) { return (x + a - 1) / a * a; }

/* A kernel's static shared memory in bytes (SIZE_MAX where the runtime
 * cannot say). Its __shared__ arrays set it, so callers query it once. */
template <typename K> size_t static_smem(K *kernel)
{
    cudaFuncAttributes fa;
    if (cudaFuncGetAttributes(&fa, kernel) != cudaSuccess) {
        (void)cudaGetLastError();
        return SIZE_MAX;
    }
    return fa.sharedSizeBytes;
}

/* Whether static plus `dyn` bytes of dynamic shared memory fit in one block
 * on this device (H100/H200: 227 KiB, A100: 163 KiB, sm_86/sm_89: 99 KiB).
 * The staged configurations check it and fall back to ones that keep their
 * steps in registers. */
bool smem_fits(const prnn_cuda_state *st, size_t stat, size_t dyn)
{
    return stat != SIZE_MAX && stat + dyn <= (size_t)st->smem_optin;
}

int64_t ceil_div(int64_t x, int64_t y) { return (x + y - 1) / y; }

int ceil_log2(int64_t x)
{
    int l = 0;
    while (((int64_t)1 << l) < x) l++;
    return l;
}

/* Ensures room for nwords look-back words and data_bytes of data. Growing
 * waits for the stream (an older, smaller workspace may still be in use),
 * then frees it and allocates the new one. */
prnn_status ws_reserve(prnn_cuda_state *st, size_t nwords, size_t data_bytes)
{
    if (st->ws && nwords <= st->word_cap && data_bytes <= st->data_cap) return PRNN_OK;
    size_t word_cap = nwords > st->word_cap ? nwords : st->word_cap;
    size_t data_cap = data_bytes > st->data_cap ? data_bytes : st->data_cap;
    word_cap = align_up(word_cap ? word_cap : 1, 512);
    data_cap = align_up(data_cap ? data_cap : 1, (size_t)1 << 20);
    const size_t data_offset =
        align_up(kWordsOffset + word_cap * sizeof(unsigned long long), 256);

    if (st->ws) {
        PRNN_CU(cudaStreamSynchronize(st->stream));
        PRNN_CU(cudaFree(st->ws));
        st->ws = nullptr;
        st->word_cap = st->data_cap = 0;
    }
    void *ws = nullptr;
    cudaError_t e = cudaMalloc(&ws, data_offset + data_cap);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        return map_cuda_error(e);
    }
    st->ws = static_cast<unsigned char *>(ws);
    st->word_cap = word_cap;
    st->data_cap = data_cap;
    st->data_offset = data_offset;
    st->ticket_base = 0;
    st->epoch = 0;
    PRNN_CU(cudaMemsetAsync(st->ws, 0, data_offset, st->stream));
    return PRNN_OK;
}

float *ws_data(prnn_cuda_state *st) { return reinterpret_cast<float *>(st->ws + st->data_offset); }

/* Room for nwords tagged words, and a fresh epoch for them. */
prnn_status words_reserve(prnn_cuda_state *st, size_t nwords)
{
    /* in the zeroed area nothing else writes */
    prnn_status s = ws_reserve(st, nwords, 0);
    if (s != PRNN_OK) return s;
    if (++st->epoch >= kEpochLimit) { /* 2^30 launches: start the tags over */
        PRNN_CU(cudaMemsetAsync(st->ws + kWordsOffset, 0,
                                st->word_cap * sizeof(unsigned long long), st->stream));
        st->epoch = 1;
    }
    return PRNN_OK;
}

/* Room for the look-back of `tiles` tiles of W columns (3 W words a tile). */
prnn_status lookback_reserve(prnn_cuda_state *st, int64_t tiles, int64_t W)
{
    return words_reserve(st, (size_t)tiles * 3 * (size_t)W);
}

/* 16-byte vectors along H are usable when every vector is aligned: H a
 * multiple of the vector width and all (B, T, H) base pointers aligned. */
bool vectors_ok(const scan_params &p, bool bwd, int vec)
{
    if (p.H % vec) return false;
    const void *ptrs[5] = {p.a, bwd ? p.h_in : p.b, bwd ? p.dh : p.h_out, bwd ? p.da : nullptr,
                           bwd ? p.db : nullptr};
    for (const void *q : ptrs)
        if (reinterpret_cast<uintptr_t>(q) % 16) return false;
    return true;
}

} // namespace

/* ======================================================================== */
/* SERIAL: one thread per channel (b, j), looping over logical steps        */

namespace {

template <typename T, bool BWD>
__global__ void __launch_bounds__(kThreads) serial_scan_kernel(const scan_params p)
{
    grid_dep_begin();
    constexpr int U = 8; /* steps loaded ahead: independent loads in flight */
    const int64_t idx = (int64_t)blockIdx.x * kThreads + threadIdx.x;
    if (idx >= p.B * p.H) return;
    const int64_t b = idx / p.H, col = idx - b * p.H;
    const int64_t row = b * p.T, L = row_length(p, b);

    float st[1] = {state_in<BWD>(p, b, col)};
    for (int64_t u0 = 0; u0 < p.T; u0 += U) {
        freg<1> x[U], y[U];
        float hp[BWD ? U : 1][1];
#pragma unroll
        for (int k = 0; k < U; k++) {
            load_step<T, 1, BWD>(p, row, u0 + k, L, col, true, x[k], y[k]);
            if constexpr (BWD) load_hprev<T, 1>(p, b, u0 + k, L, col, true, hp[k]);
        }
#pragma unroll
        for (int k = 0; k < U; k++) {
            if (u0 + k >= p.T) break;
            st[0] = x[k].v[0] * st[0] + y[k].v[0];
            store_step<T, 1, BWD>(p, row, u0 + k, L, col, st, hp[BWD ? k : 0]);
        }
    }
    state_out<T, BWD>(p, b, col, L, st[0]);
}

template <typename T, bool BWD>
prnn_status serial_run(prnn_cuda_state *st, const scan_params &p)
{
    const int64_t blocks = ceil_div(p.B * p.H, kThreads);
    if (blocks > INT32_MAX) return PRNN_ERR_UNSUPPORTED;
    auto *kernel = serial_scan_kernel<T, BWD>;
    st->last = {kSerial, 0, 0, 0, 0, 0, 0, false};
    PRNN_LAUNCH(kernel, (unsigned)blocks, kThreads, st->stream, p);
    PRNN_CU_LAUNCHED();
    return PRNN_OK;
}

} // namespace

/* ======================================================================== */
/* CHUNKED: single pass, decoupled look-back over time chunks               */
/*
 * Block = 256 threads = TX column threads x TY time threads (TX a power of
 * two <= 32, chosen so a row's columns are covered with little waste). A
 * thread owns VEC columns (one 16-byte vector, or 1 on the scalar path) and
 * S consecutive logical steps, held in registers:
 *
 *             fp32: VEC 4, S 8   bf16/fp16: VEC 8, S 8   scalar: VEC 1, S 16
 *
 * (16-bit vectors stay packed in registers until used), so the block's tile
 * is W = TX*VEC columns by C = TY*S steps: fp32 with H >= 128 is 128 columns
 * x 64 steps, bf16 with H >= 256 is 256 x 64; 96 KiB of traffic forward.
 *
 *  1. ticket: blocks take their tile from an atomic counter in launch order,
 *     so every block waits only on blocks that already run or ran: no
 *     deadlock whatever order the hardware dispatches blockIdx in. Tiles are
 *     numbered chunk-major (lin = chunk * R + r, r = b * ntiles + tile), so a
 *     tile's predecessor in time was dispatched R tiles earlier.
 *  2. load S steps of (x, y) with 16-byte loads; reduce them serially to the
 *     thread's summary (A = prod x, B = scan of y from zero).
 *  3. inclusive Hillis-Steele scan of the summaries over the TY time threads
 *     in shared memory; the last row is the block's aggregate. Few-chain
 *     tiles first reduce the summaries to the aggregate (shuffles within
 *     each warp, then the 8 warp aggregates in order) and publish it, so
 *     the look-backs of later tiles do not wait for this scan.
 *  4. publish the aggregate, look back over the predecessors for the
 *     nearest inclusive prefix P, composing the aggregates in between,
 *     publish the inclusive prefix (lookback_carry). Chunk 0 knows its
 *     carry (h0) and publishes P at once.
 *  5. each thread applies carry-in to its exclusive prefix, re-runs its S
 *     steps from registers and writes the outputs once.
 *
 * Merge rule: (A1, B1) then (A2, B2) = (A2*A1, A2*B1 + B2).
 *
 * Memory ordering of the look-back. Every published value is a tagged
 * 64-bit word (value and epoch << 2 | status in one single-copy-atomic
 * access, st/ld.relaxed.gpu), so a reader sees a whole word or an older
 * one, and checks its tag: no fences, flags or barriers order anything.
 * Tags carry the launch's epoch so words of earlier launches never match;
 * a launch's tiles are numbered from a ticket counter that is never reset
 * (the host keeps its base).
 */

namespace {

constexpr unsigned kStatusA = 1; /* aggregate published */
constexpr unsigned kStatusP = 2; /* inclusive prefix published */

/* Steps per thread: 16 scalars, or 8 vectors (fp32 float4, or 8 x 16-bit
 * kept packed): 32 registers per tensor either way. */
/*
 * Tile shape: SB steps per thread (twice that on the scalar path) and the
 * blocks per SM the register budget is cut for. Two settings, measured on an
 * H200 (dev/cuda/README.md): many chains (B * column tiles >= 16) run best
 * with 8 steps and 2 blocks per SM; few long chains need larger tiles, so
 * fewer of them queue in each chain's look-back: 16 steps, 1 block per SM.
 * PRNN_CHUNK_STEPS / PRNN_CHUNK_MIN_BLOCKS force one setting (lab sweeps).
 */
template <int VEC, int SB> constexpr int chunk_steps() { return VEC == 1 ? 2 * SB : SB; }
/* Whether the backward stages h_{s-1} in shared memory (the vector path at
 * 1 block per SM; see chunked_scan_kernel), S 16-byte slots a thread. */
template <bool BWD, int VEC, int MB> constexpr bool chunk_stages_hprev()
{
    return BWD && VEC > 1 && MB == 1;
}
constexpr int64_t kFewChains = 16;

/* kernel_triggers_early: the staged kernels that hold most of an SM's
 * shared memory (the few-chain forward at 2 blocks per SM, the striped
 * 16-bit forward's staged tiles) let the stream's next kernel start only
 * once they have completed. With the early start, the next kernel's blocks
 * took the SMs in this kernel's carveout (about 28 KiB of L1) and kept it:
 * on an H200 the backward after them ran 10-15 points slower (bf16 16 x
 * 64K x 768 fwd+bwd 72-73% against 84.4-84.5% without the early start;
 * dev/cuda/README.md). */

/* The look-back state of one launch: R chains of nchunks tiles each. */
struct lookback_params {
    unsigned long long *words; // (R, nchunks, 3, W) tagged A, B and inclusive words
    unsigned long long *counter;
    unsigned long long ticket_base;
    unsigned epoch;
    int64_t nchunks;       // tiles per chain
};

struct chunked_params {
    scan_params s;
    lookback_params lb;
    int lg_tx;             // TX = 1 << lg_tx column threads per block
    int64_t ntiles;        // column tiles per row
    int64_t R;             // B * ntiles
};

/* The look-back of a launch of nchunks tiles per chain, after
 * lookback_reserve; the caller adds the launch's tile count to
 * st->ticket_base once it is launched. */
lookback_params lookback_open(prnn_cuda_state *st, int64_t nchunks)
{
    lookback_params lp;
    lp.words = reinterpret_cast<unsigned long long *>(st->ws + kWordsOffset);
    lp.counter = reinterpret_cast<unsigned long long *>(st->ws);
    lp.ticket_base = st->ticket_base;
    lp.epoch = st->epoch;
    lp.nchunks = nchunks;
    return lp;
}

/* Shared memory of the look-back. */
struct lookback_smem {
    float carry[kThreads];                  /* (W) the block's carry-in */
    float partA[kThreads], partB[kThreads]; /* (G, W) each thread's run */
    float partP[kThreads];                  /* the prefix its run ends on */
    int pstat[kThreads];                    /* how its run ended */
    long long base[kThreads];               /* (W) next predecessor to examine, -1 done */
    long long lin;
};

/* Step 1: the block's tile, from the launch's ticket counter (block-wide). */
__device__ int64_t take_ticket(const lookback_params &lp, lookback_smem &sm)
{
    if (threadIdx.x == 0) sm.lin = (long long)(atomicAdd(lp.counter, 1ull) - lp.ticket_base);
    __syncthreads();
    return sm.lin;
}

/* How a thread's run of predecessors ended. */
constexpr int kRunAgg = 0;     /* all aggregates: the run composes to (A, B) */
constexpr int kRunPrefix = 1;  /* reached an inclusive prefix P */
constexpr int kRunBlocked = 2; /* reached a tile with nothing out yet */

/* Step 4 for tile `chunk` of chain r (block-wide; thread c < W holds
 * column c's aggregate aggA, aggB, and in chunk 0 its carry-in carry0):
 * publishes the aggregate, finds the carry-in by looking back, publishes
 * the inclusive prefix. Returns the carry-in to threads c < W and leaves it
 * in sm.carry. Chunk 0 publishes its inclusive prefix at once.
 *
 * Every value goes out as a tagged word (ld_word/st_word): per tile and
 * column an A word and a B word (tag epoch << 2 | kStatusA), later a P word
 * (kStatusP). A word carries its own readiness, so publishing needs no
 * fence, no barrier and no flag, and each column looks back on its own.
 *
 * A round: the G = 256/W threads of column c take the next G*K
 * predecessors, thread (g, c) a contiguous run of up to K, all its
 * words loaded at once. A run composes its aggregates from the nearest
 * outward and stops at the first P (kRunPrefix) or at a tile with nothing
 * out (kRunBlocked). The g = 0 thread then composes the runs in order into
 * acc (everything folded so far, the newer predecessors): a prefix ends the
 * column's look-back; a blocked run makes the next round start at it. */
/* Publishes a tile's aggregate (thread c < W: column c) as its A and B
 * words; chunk 0 publishes only its inclusive prefix, in lookback_carry. */
__device__ __forceinline__ void publish_aggregate(const lookback_params &lp, int64_t r,
                                                  int64_t chunk, int W, float aggA, float aggB)
{
    const int tid = threadIdx.x;
    if (chunk == 0 || tid >= W) return;
    unsigned long long *const my = lp.words + (r * lp.nchunks + chunk) * (3 * (int64_t)W);
    const unsigned tagA = (lp.epoch << 2) | kStatusA;
    st_word(my + tid, make_word(aggA, tagA));
    st_word(my + W + tid, make_word(aggB, tagA));
}

template <int K = 4, bool PUBLISHED = false> /* predecessors a thread examines per round;
                                                 whether the aggregate is already out */
__device__ float lookback_carry(const lookback_params &lp, int64_t r, int64_t chunk, int W,
                                float aggA, float aggB, float carry0, lookback_smem &sm)
{
    const int tid = threadIdx.x;
    const int64_t ts = 3 * (int64_t)W; /* words per tile */
    const unsigned long long *const row = lp.words + r * lp.nchunks * ts;
    unsigned long long *const my = lp.words + (r * lp.nchunks + chunk) * ts;
    const unsigned tagA = (lp.epoch << 2) | kStatusA, tagP = (lp.epoch << 2) | kStatusP;
    float carry = carry0;
    if (chunk > 0) {
        if (!PUBLISHED) publish_aggregate(lp, r, chunk, W, aggA, aggB);
        if (tid < W) sm.base[tid] = chunk - 1;
        const int G = kThreads / W, c = tid & (W - 1), g = tid / W;
        float accA = 1.0f, accB = 0.0f;
        __syncthreads(); /* sm.base */
        for (;;) {
            const int64_t base = sm.base[c];
            int stat = kRunAgg, nfold = 0;
            float pA = 1.0f, pB = 0.0f, pP = 0.0f;
            const int64_t lo = base - (int64_t)g * K; /* the run's nearest */
            if (base >= 0 && lo >= 0) {
                unsigned long long wa[K], wb[K], wp[K];
#pragma unroll
                for (int k = 0; k < K; k++) {
                    wa[k] = wb[k] = wp[k] = 0ull;
                    if (lo - k >= 0) {
                        const unsigned long long *q = row + (lo - k) * ts + c;
                        wp[k] = ld_word(q + 2 * W);
                        wa[k] = ld_word(q);
                        wb[k] = ld_word(q + W);
                    }
                }
                /* chunk 0 publishes only P, so a run never composes past it */
#pragma unroll
                for (int k = 0; k < K; k++) {
                    if (stat != kRunAgg || lo - k < 0) continue;
                    if (word_tag(wp[k]) == tagP) {
                        stat = kRunPrefix;
                        pP = word_value(wp[k]);
                    } else if (word_tag(wa[k]) == tagA && word_tag(wb[k]) == tagA) {
                        pB = pA * word_value(wb[k]) + pB;
                        pA = pA * word_value(wa[k]);
                        nfold++;
                    } else {
                        stat = kRunBlocked;
                    }
                }
            }
            sm.partA[tid] = pA; /* tid == g * W + c */
            sm.partB[tid] = pB;
            sm.partP[tid] = pP;
            sm.pstat[tid] = stat | nfold << 2;
            __syncthreads();
            int open = 0;
            if (g == 0 && base >= 0) {
                int64_t next = base - (int64_t)G * K;
                for (int k = 0; k < G; k++) {
                    const int sk = sm.pstat[k * W + c];
                    accB = accA * sm.partB[k * W + c] + accB;
                    accA = accA * sm.partA[k * W + c];
                    if ((sk & 3) == kRunPrefix) {
                        carry = accA * sm.partP[k * W + c] + accB;
                        next = -1;
                        break;
                    }
                    if ((sk & 3) == kRunBlocked) { /* start again at the stop */
                        next = base - (int64_t)k * K - (sk >> 2);
                        break;
                    }
                }
                sm.base[c] = next;
                open = next >= 0;
            }
            if (!__syncthreads_or(open)) break;
        }
    }
    if (tid < W) {
        st_word(my + 2 * W + tid, make_word(aggA * carry + aggB, tagP));
        sm.carry[tid] = carry;
    }
    __syncthreads();
    return carry;
}

#ifndef PRNN_EARLY_AGG
#define PRNN_EARLY_AGG 1
#endif
constexpr bool kEarlyAgg = PRNN_EARLY_AGG != 0;

template <typename T, int VEC, bool BWD, int SB, int MB, int SX>
__global__ void __launch_bounds__(kThreads, MB) chunked_scan_kernel(const chunked_params cp)
{
    grid_dep_begin<!(SX > 0 && MB > 1)>(); /* see kernel_triggers_early */
    constexpr int S = chunk_steps<VEC, SB>();
    static_assert(SX == 0 || (!BWD && VEC > 1), "staged steps: the forward's vector path");
    __shared__ __align__(16) float sA[kThreads * VEC]; /* (TY, W) running summaries */
    __shared__ __align__(16) float sB[kThreads * VEC];
    __shared__ lookback_smem lsm;

    const scan_params &p = cp.s;
    const int tid = threadIdx.x;

    /* 1. ticket */
    const int64_t lin = take_ticket(cp.lb, lsm);
    const int64_t chunk = lin / cp.R, r = lin - chunk * cp.R;
    const int64_t b = r / cp.ntiles, tile = r - b * cp.ntiles;

    const int TX = 1 << cp.lg_tx, TY = kThreads >> cp.lg_tx, W = TX * VEC;
    const int tx = tid & (TX - 1), ty = tid >> cp.lg_tx;
    const int64_t C = (int64_t)TY * (S + SX);
    const int64_t L = row_length(p, b);
    const int64_t s_first = chunk * C;
    const int64_t u0 = s_first + (int64_t)ty * (S + SX);
    const int64_t col = tile * W + (int64_t)tx * VEC;
    const bool col_ok = col < p.H;
    const int64_t row = b * p.T;

    if (s_first >= L) {
        /* Only padding: zeros, no look-back (later chunks are padding too, so
         * nobody waits on this tile). A row of length 0 still has a state. */
        if (col_ok) {
#pragma unroll
            for (int k = 0; k < S + SX; k++)
                if (u0 + k < p.T) store_zero<T, VEC, BWD>(p, row, u0 + k, col);
        }
        if (chunk == 0 && tid < W && tile * W + tid < p.H)
            state_out<T, BWD>(p, b, tile * W + tid, L, state_in<BWD>(p, b, tile * W + tid));
        return;
    }

    /* 2. load and reduce */
    typename reg_of<T, VEC>::type x[S], y[S];
#pragma unroll
    for (int k = 0; k < S; k++) load_step<T, VEC, BWD>(p, row, u0 + k, L, col, col_ok, x[k], y[k]);
    /* The backward's h_{s-1} on the vector path with few chains: copied
     * into shared memory now, so it arrives during the look-back (S 16-byte
     * slots a thread). At 2 blocks per SM it measured 2 points slower
     * (f32 16 x 64K x 256), so there it is loaded after the look-back. */
    constexpr bool kStageH = chunk_stages_hprev<BWD, VEC, MB>();
    PRNN_DYN_SHARED(uint4, hstage); /* (S, kThreads), or the staged steps' (2, SX, kThreads) */
    if constexpr (kStageH) {
#pragma unroll
        for (int k = 0; k < S; k++)
            hprev_stage<T>(p, b, u0 + k, L, col, col_ok, hstage + k * kThreads + tid);
    }
    /* The forward's staged steps: a thread's next SX steps after its S in
     * registers go to shared memory as asynchronous copies (a in the first
     * SX rows of slots, b in the next), read back step by step; the tile is
     * (S + SX) / S times longer for the same registers. */
    uint4 *const xstage = hstage, *const ystage = hstage + SX * kThreads;
    if constexpr (SX > 0) {
#pragma unroll 4
        for (int k = 0; k < SX; k++)
            step_stage<T, VEC>(p, row, u0 + S + k, L, col, col_ok, xstage + k * kThreads + tid,
                               ystage + k * kThreads + tid);
    }

    float A[VEC], Bs[VEC];
    summarize<T, VEC, S>(x, y, A, Bs);
    if constexpr (SX > 0) {
        cp_async_wait_all(); /* this thread's own slots */
#pragma unroll 4
        for (int k = 0; k < SX; k++) {
            typename reg_of<T, VEC>::type xs, ys;
            step_unstage<T, VEC>(xstage + k * kThreads + tid, xs);
            step_unstage<T, VEC>(ystage + k * kThreads + tid, ys);
            fold_step<T, VEC>(xs, ys, A, Bs);
        }
    }

    /* 3a. The tile's aggregate first, published before the scan below, so
     * the look-backs of the tiles after it find it that much sooner: a
     * shuffle reduction over each warp's 32/TX time rows (each row composed
     * with the later one), then thread c < W composes the 8 warp
     * aggregates in order. The few-chain tiles only: with many chains a
     * tile's predecessor in time is R tickets older and long out.
     * PRNN_EARLY_AGG=0 (lab): the aggregate is the scan's last row,
     * published in the look-back. */
    constexpr bool kEarly = kEarlyAgg && (MB == 1 || SX > 0); /* the few-chain tiles */
    float aggA = 1.0f, aggB = 0.0f;
    if constexpr (kEarly) {
        const int lane = tid & 31, rw = lane >> cp.lg_tx, RW = 32 >> cp.lg_tx;
        float rA[VEC], rB[VEC];
#pragma unroll
        for (int v = 0; v < VEC; v++) { rA[v] = A[v]; rB[v] = Bs[v]; }
        for (int d = 1; d < RW; d <<= 1) {
#pragma unroll
            for (int v = 0; v < VEC; v++) {
                const float qA = __shfl_down_sync(0xffffffffu, rA[v], (unsigned)(d * TX));
                const float qB = __shfl_down_sync(0xffffffffu, rB[v], (unsigned)(d * TX));
                if (rw + d < RW) {
                    rB[v] = qA * rB[v] + qB;
                    rA[v] = qA * rA[v];
                }
            }
        }
        if (rw == 0) {
            smem_put<VEC>(sA + (tid >> 5) * W + tx * VEC, rA);
            smem_put<VEC>(sB + (tid >> 5) * W + tx * VEC, rB);
        }
        __syncthreads();
        if (tid < W) {
            for (int k = 0; k < kThreads / 32; k++) {
                const float qA = sA[k * W + tid], qB = sB[k * W + tid];
                aggB = qA * aggB + qB;
                aggA = qA * aggA;
            }
        }
        publish_aggregate(cp.lb, r, chunk, W, aggA, aggB);
        __syncthreads(); /* the warp aggregates read before the scan writes */
    }

    /* 3. inclusive scan over the TY time threads; thread tid's slot is
     * tid*VEC (= ty*W + tx*VEC), its predecessor d rows up (tid - d*TX)*VEC */
    for (int d = 1; d < TY; d <<= 1) {
        smem_put<VEC>(sA + tid * VEC, A);
        smem_put<VEC>(sB + tid * VEC, Bs);
        __syncthreads();
        if (ty >= d) {
            float pA[VEC], pB[VEC];
            smem_get<VEC>(sA + (tid - d * TX) * VEC, pA);
            smem_get<VEC>(sB + (tid - d * TX) * VEC, pB);
#pragma unroll
            for (int v = 0; v < VEC; v++) {
                Bs[v] = A[v] * pB[v] + Bs[v];
                A[v] = A[v] * pA[v];
            }
        }
        __syncthreads();
    }
    smem_put<VEC>(sA + tid * VEC, A);
    smem_put<VEC>(sB + tid * VEC, Bs);
    __syncthreads();

    /* 4. publish and look back; thread c < W owns column c of the tile */
    float carry = 0.0f;
    if (tid < W) {
        if constexpr (!kEarly) {
            aggA = sA[(TY - 1) * W + tid];
            aggB = sB[(TY - 1) * W + tid];
        }
        if (chunk == 0 && tile * W + tid < p.H) carry = state_in<BWD>(p, b, tile * W + tid);
    }
    /* 2 blocks per SM: 2 predecessors a round, or the fold's registers spill */
    carry = lookback_carry<MB == 1 ? 4 : 2, kEarly>(cp.lb, r, chunk, W, aggA, aggB, carry, lsm);
    if (tid < W && tile * W + tid < p.H && s_first <= L - 1 && L - 1 < s_first + C)
        state_out<T, BWD>(p, b, tile * W + tid, L, aggA * carry + aggB);

    /* 5. apply the carry to the exclusive prefix, re-run, write once */
    float st[VEC];
    {
        float eA[VEC], eB[VEC];
        if (ty > 0) {
            smem_get<VEC>(sA + (tid - TX) * VEC, eA);
            smem_get<VEC>(sB + (tid - TX) * VEC, eB);
        } else {
#pragma unroll
            for (int v = 0; v < VEC; v++) { eA[v] = 1.0f; eB[v] = 0.0f; }
        }
#pragma unroll
        for (int v = 0; v < VEC; v++) st[v] = eA[v] * lsm.carry[tx * VEC + v] + eB[v];
    }
    if (!col_ok) return;
    if constexpr (kStageH) {
        cp_async_wait_all();
#pragma unroll
        for (int k = 0; k < S; k++) {
            typename reg_of<T, VEC>::type hq;
            float hp[VEC];
            hprev_unstage<T, VEC>(u0 + k, L, true, hstage + k * kThreads + tid, hq);
            hprev_get<T, VEC>(p, b, u0 + k, L, col, hq, hp);
            advance<T, VEC>(x[k], y[k], st);
            if (u0 + k < p.T) store_step<T, VEC, BWD>(p, row, u0 + k, L, col, st, hp);
        }
        return;
    }
    /* Unstaged (the forward; the backward on the scalar path or at 2 blocks
     * per SM): h_{s-1} is loaded only now, and for packed 16-bit vectors half
     * the steps at a time (as floats they would double the registers of x
     * and y); issued before the look-back they would spill. */
    constexpr int HB = BWD ? (sizeof(T) == 2 && VEC > 1 ? S / 2 : S) : S;
#pragma unroll
    for (int k0 = 0; k0 < S; k0 += HB) {
        float hp[BWD ? HB : 1][VEC];
        if constexpr (BWD) {
#pragma unroll
            for (int k = 0; k < HB; k++) load_hprev<T, VEC>(p, b, u0 + k0 + k, L, col, true, hp[k]);
        }
#pragma unroll
        for (int k = 0; k < HB; k++) {
            advance<T, VEC>(x[k0 + k], y[k0 + k], st);
            if (u0 + k0 + k < p.T)
                store_step<T, VEC, BWD>(p, row, u0 + k0 + k, L, col, st, hp[BWD ? k : 0]);
        }
    }
    if constexpr (SX > 0) {
        const float none[VEC] = {};
#pragma unroll 4
        for (int k = 0; k < SX; k++) {
            typename reg_of<T, VEC>::type xs, ys;
            step_unstage<T, VEC>(xstage + k * kThreads + tid, xs);
            step_unstage<T, VEC>(ystage + k * kThreads + tid, ys);
            advance<T, VEC>(xs, ys, st);
            if (u0 + S + k < p.T) store_step<T, VEC, BWD>(p, row, u0 + S + k, L, col, st, none);
        }
    }
}

/* Column threads per block (log2): enough to cover the row's vectors, at
 * most 32 and at most max_cols columns. */
template <int VEC> int chunked_lg_tx(int64_t H, int64_t max_cols)
{
    const int64_t ncv = ceil_div(H, VEC); /* vectors per row */
    int64_t cap = max_cols / VEC < 32 ? max_cols / VEC : 32;
    if (cap < 1) cap = 1;
    return ceil_log2(ncv < cap ? ncv : cap);
}

/* Dynamic shared memory of a CHUNKED launch: the staged h_{s-1} or steps. */
template <bool BWD, int VEC, int SB, int MB, int SX> constexpr size_t chunked_smem()
{
    return chunk_stages_hprev<BWD, VEC, MB>() ? (size_t)chunk_steps<VEC, SB>() * kThreads * sizeof(uint4)
           : SX > 0                           ? (size_t)2 * SX * kThreads * sizeof(uint4)
                                              : 0;
}

/* Whether a CHUNKED configuration's shared memory fits a block here. */
template <typename T, int VEC, bool BWD, int SB, int MB, int SX = 0>
bool chunked_fits(const prnn_cuda_state *st)
{
    static const size_t stat = static_smem(chunked_scan_kernel<T, VEC, BWD, SB, MB, SX>);
    return smem_fits(st, stat, chunked_smem<BWD, VEC, SB, MB, SX>());
}

template <typename T, int VEC, bool BWD, int SB, int MB, int SX = 0>
prnn_status chunked_launch(prnn_cuda_state *st, const scan_params &p, int64_t max_cols)
{
    constexpr int S = chunk_steps<VEC, SB>();
    const int lg_tx = chunked_lg_tx<VEC>(p.H, max_cols);
    const int64_t TX = (int64_t)1 << lg_tx, TY = kThreads / TX, W = TX * VEC;
    const int64_t ntiles = ceil_div(p.H, W), R = p.B * ntiles;
    const int64_t nchunks = ceil_div(p.T, TY * (S + SX));
    if (nchunks > INT32_MAX / R) return PRNN_ERR_UNSUPPORTED;
    const int64_t nblocks = nchunks * R;

    prnn_status s = lookback_reserve(st, nblocks, W);
    if (s != PRNN_OK) return s;
    chunked_params cp;
    cp.s = p;
    cp.lb = lookback_open(st, nchunks);
    cp.lg_tx = lg_tx;
    cp.ntiles = ntiles;
    cp.R = R;
    auto *kernel = chunked_scan_kernel<T, VEC, BWD, SB, MB, SX>;
    st->last = {kChunked, (int)W, S + SX, MB, SX, TY * (S + SX), nchunks, false};
    /* the staged h_{s-1} or steps; with the static
     * shared memory it is over the 48 KiB a block gets without opting in */
    const size_t smem = chunked_smem<BWD, VEC, SB, MB, SX>();
    if (smem > 0)
        PRNN_CU(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                     (int)smem));
    /* staged steps at MB blocks per SM need MB blocks' shared memory there:
     * the largest carveout */
    if constexpr (SX > 0 && MB > 1)
        PRNN_CU(cudaFuncSetAttribute(kernel, cudaFuncAttributePreferredSharedMemoryCarveout,
                                     (int)cudaSharedmemCarveoutMaxShared));
    PRNN_LAUNCH_SMEM(kernel, (unsigned)nblocks, kThreads, smem, st->stream, cp);
    PRNN_CU_LAUNCHED();
    st->ticket_base += (unsigned long long)nblocks;
    return PRNN_OK;
}

/* The few-chain forward's staged steps (chunked_scan_kernel's SX): a thread
 * keeps reg steps in registers and copies `staged` more into shared memory,
 * at `blocks` blocks per SM, where the longer tiles still number at least
 * kStageWaves per SM. Measured on an H200 (dev/cuda/README.md), fwd /
 * fwd+bwd % of the copy roofline against 16 + 16 at 1 block per SM: fp32
 * 8 + 10 at 2 per SM (so one block's look-back overlaps the other's loads)
 * 1x1Mx256 83.1-84.8 / 80.8-81.8 against 78.8-80.2 / 79.2-79.8, 1x1Mx64
 * 71.2-71.6 / 72.8-73.3 against 69.6-70.3 / 71.3-71.6; bf16 lost 1-5 points
 * that way and keeps 16 + 16 at 1. PRNN_CHUNK_SX, PRNN_STAGE_REG_STEPS and
 * PRNN_STAGE_BLOCKS (all three) and PRNN_STAGE_WAVES: lab sweeps. */
template <typename T> struct stage_cfg {
#if defined(PRNN_CHUNK_SX) && defined(PRNN_STAGE_REG_STEPS) && defined(PRNN_STAGE_BLOCKS)
    static constexpr int reg = PRNN_STAGE_REG_STEPS, staged = PRNN_CHUNK_SX,
                         blocks = PRNN_STAGE_BLOCKS;
#else
    static constexpr int reg = sizeof(T) == 4 ? 8 : 16, staged = sizeof(T) == 4 ? 10 : 16,
                         blocks = sizeof(T) == 4 ? 2 : 1;
#endif
};
#ifdef PRNN_STAGE_WAVES
constexpr int64_t kStageWaves = PRNN_STAGE_WAVES;
#else
constexpr int64_t kStageWaves = 4;
#endif
/* Few chains: tiles of at most few_vecs vectors of a row, so more chains
 * share the card (chunked_run). The 16-bit forward takes 8 (64 columns),
 * the rest 16 (fp32: 64 columns, 16-bit: 128). Measured on an H200 (runs
 * r07, r08; dev/cuda/README.md), forward % of the copy roofline, 16 -> 8
 * vectors: bf16 1x1Mx256 72.8-73.1 -> 80.6-81.1, fp16 70.9-72.3 ->
 * 79.1-79.2, bf16 1x64Kx256 50.5-50.8 -> 52.5-52.7; at 8 the 16-bit
 * backward ran 1-3% slower and the fp32 scan lost 2-8 points.
 * PRNN_FEW_VECS sets every case (lab sweeps). */
template <typename T, bool BWD> constexpr int few_vecs()
{
#ifdef PRNN_FEW_VECS
    return PRNN_FEW_VECS;
#else
    return sizeof(T) == 2 && !BWD ? 8 : 16;
#endif
}

template <typename T, int VEC>
bool chunked_stage_steps(const prnn_cuda_state *st, const scan_params &p, int64_t max_cols)
{
    using C = stage_cfg<T>;
    const int lg_tx = chunked_lg_tx<VEC>(p.H, max_cols);
    const int64_t TX = (int64_t)1 << lg_tx, TY = kThreads / TX, W = TX * VEC;
    const int64_t steps = TY * (chunk_steps<VEC, C::reg>() + C::staged);
    const int64_t tiles = p.B * ceil_div(p.H, W) * ceil_div(p.T, steps);
    return C::staged > 0 && tiles >= kStageWaves * st->sm_count;
}

template <typename T, int VEC, bool BWD>
prnn_status chunked_run(prnn_cuda_state *st, const scan_params &p)
{
#if defined(PRNN_CHUNK_STEPS) && defined(PRNN_CHUNK_MIN_BLOCKS)
    return chunked_launch<T, VEC, BWD, PRNN_CHUNK_STEPS, PRNN_CHUNK_MIN_BLOCKS>(st, p, 32 * VEC);
#else
    /* Chains = B * column tiles of the widest tile (32 vectors). Few chains
     * get narrower tiles (few_vecs: 16 vectors, 8 in the 16-bit forward),
     * so more chains share the card. Measured on an H200 (fwd / fwd+bwd %
     * of the copy roofline), 16 vectors against 32: bf16 1x1Mx256 49% ->
     * 61% forward; fp32 1x1Mx256 62.5 / 70.8 -> 69.9 / 76.8, 4x64Kx256
     * 69.1 / 75.3 -> 73.7 / 77.3 and 1x64Kx256 53.9 / 63.6 -> 56.8 / 66.1.
     * Many chains keep the widest tiles, which measured 2 points better
     * there. The scalar path keeps 32 columns. */
    const int64_t W = ((int64_t)1 << chunked_lg_tx<VEC>(p.H, 32 * VEC)) * VEC;
    const int64_t chains = p.B * ceil_div(p.H, W);
    if (chains < kFewChains) {
        const int64_t cols = VEC == 1 ? 32 : few_vecs<T, BWD>() * VEC;
        if constexpr (!BWD && VEC > 1) {
            using C = stage_cfg<T>;
            if (chunked_stage_steps<T, VEC>(st, p, cols) &&
                chunked_fits<T, VEC, BWD, C::reg, C::blocks, C::staged>(st))
                return chunked_launch<T, VEC, BWD, C::reg, C::blocks, C::staged>(st, p, cols);
        }
        /* the backward's staged h_{s-1} (64 KiB) where it fits, else the
         * tile of 8 steps at 2 blocks per SM, which loads it after the
         * look-back */
        if (!chunked_fits<T, VEC, BWD, 16, 1>(st))
            return chunked_launch<T, VEC, BWD, 8, 2>(st, p, cols);
        return chunked_launch<T, VEC, BWD, 16, 1>(st, p, cols);
    }
    return chunked_launch<T, VEC, BWD, 8, 2>(st, p, 32 * VEC);
#endif
}

} // namespace

/* ======================================================================== */
/* STRIPED: one block carries a stripe of channels through the whole row    */
/*
 * With many channels the look-back is work for nothing: there are enough
 * independent channel stripes to fill the card without cutting T. A block
 * owns CW consecutive channels of one row, a stripe whose time rows are SB
 * bytes: 128 (fp32 vectors: 32 channels; 16-bit vectors: 64; scalar paths:
 * 32), or on the vector paths 256 where those stripes fill the card
 * (striped_bytes), so every warp instruction reads whole lines, and walks
 * the row tile by tile. A warp is CL column lanes x TW time lanes; the
 * block's 8 warps stack TL = 8 x TW time lanes, each with S steps:
 *
 *  1. each lane holds its S steps in registers (loaded while the previous
 *     tile was scanned) and reduces them to its summary (A, B), after
 *     issuing the loads of its next tile's steps;
 *  2. a shuffle scan over the warp's TW time lanes; each warp leaves its
 *     aggregate in shared memory;
 *  3. the carry entering the tile goes through the warps' aggregates, giving
 *     the state entering each warp; each lane applies its in-warp prefix,
 *     re-runs its S steps and writes the outputs once;
 *  4. the carry leaving the tile stays in registers for the next one.
 *
 * Step 3 two ways. With 4 floats a lane (fp32 vectors, scalars) every lane
 * composes the 8 aggregates itself and keeps the carry (one barrier a tile,
 * the aggregates double-buffered by tile parity). With 8 floats a lane
 * (16-bit vectors) that redundant work costs more than a second barrier:
 * warp 0 carries each column through the aggregates and leaves the state
 * entering every warp in shared memory (dev/cuda/README.md has both
 * measured).
 *
 * Staged tiles (D > 0, the 16-bit scan in 256-byte stripes that number
 * fewer than the SMs: stage16_pick): the next D tiles' steps (forward: a
 * and b; backward: the coefficient, dh and h_{s-1}) go into each
 * thread's own shared-memory slots as asynchronous copies, a commit group a
 * tile; a tile is taken from its slots, which are refilled with tile + D
 * once the summary has consumed them. A block then keeps D tiles in flight
 * instead of the one its registers hold.
 *
 * Walking whole rows needs no flags, tickets or workspace, and each element
 * is read and written once; the outputs are stored evict-first (st.cs),
 * since nothing reads them back before the tensor is done.
 *
 * Segments (SEG). With too few stripes to fill the card (B*H = 64: two fp32
 * stripes), rows are cut into segments of a few tiles, taken from the ticket
 * counter segment-major (stripe fastest), so a segment waits only on
 * segments already taken. A segment after the first reads itself once to
 * get its aggregate (each time lane reduces a contiguous run of steps, no
 * barrier per tile; the lanes composed in order), publishes it and looks
 * back over the earlier segments of its stripe (lookback_carry, as the
 * chunked scan), its first tile's loads in flight meanwhile; then it walks
 * the segment as above from that carry. The first segment walks at once and
 * publishes its final state. Segments are short enough that the a and b of
 * the segments resident at once fit in 40% of L2, so the second read mostly
 * hits L2 (ncu on an H200: 538 MB read from DRAM for 512 MB of inputs).
 */

namespace {

constexpr int kStripeWarps = kThreads / 32;
/* A logical step past every row's end: load_step gives the identity. */
constexpr int64_t kPastEnd = INT64_MAX / 4;
/* Column lanes per warp: SB bytes of a time row (vector paths). */
template <typename T, int VEC, int SB = 128> constexpr int stripe_cl()
{
    return VEC == 1 ? 32 : SB / (VEC * (int)sizeof(T));
}

/* Inclusive scan of the summaries (A, B) over a warp's TW time lanes (lane
 * tw - d is d*CL lanes down). */
template <int CL, int TW, int VEC>
__device__ __forceinline__ void warp_time_scan(float (&A)[VEC], float (&Bs)[VEC], int tw)
{
#pragma unroll
    for (int d = 1; d < TW; d <<= 1) {
#pragma unroll
        for (int v = 0; v < VEC; v++) {
            const float pA = __shfl_up_sync(0xffffffffu, A[v], (unsigned)(d * CL));
            const float pB = __shfl_up_sync(0xffffffffu, Bs[v], (unsigned)(d * CL));
            if (tw >= d) {
                Bs[v] = A[v] * pB + Bs[v];
                A[v] = A[v] * pA;
            }
        }
    }
}

/* A warp's share of a tile: scans the lanes' summaries (A, Bs) over time
 * (warp_time_scan), gives each time lane the exclusive prefix entering it
 * (eA, eB; the identity at tw = 0), and the last time lane writes the warp's
 * aggregate for its VEC columns to aggA, aggB. */
template <int CL, int TW, int VEC>
__device__ __forceinline__ void warp_tile_prefix(float (&A)[VEC], float (&Bs)[VEC], int tw,
                                                 float (&eA)[VEC], float (&eB)[VEC], float *aggA,
                                                 float *aggB)
{
    warp_time_scan<CL, TW, VEC>(A, Bs, tw);
#pragma unroll
    for (int v = 0; v < VEC; v++) {
        eA[v] = TW > 1 ? __shfl_up_sync(0xffffffffu, A[v], (unsigned)CL) : 1.0f;
        eB[v] = TW > 1 ? __shfl_up_sync(0xffffffffu, Bs[v], (unsigned)CL) : 0.0f;
        if (tw == 0) { eA[v] = 1.0f; eB[v] = 0.0f; }
    }
    if (tw == TW - 1) {
#pragma unroll
        for (int v = 0; v < VEC; v++) {
            aggA[v] = A[v];
            aggB[v] = Bs[v];
        }
    }
}

/* Staged tiles of the striped walk (D > 0): tile slot d of this thread, S
 * steps of NS arrays (forward: a and b; backward: the coefficient, dh and
 * h_{s-1}), (S, NS, kThreads) 16-byte slots; D of them a block. */
template <bool BWD> constexpr int stage_arrays() { return BWD ? 3 : 2; }
template <int S, bool BWD> __device__ __forceinline__ uint4 *stripe_slots(int d)
{
    PRNN_DYN_SHARED(uint4, stripe_stage);
    return stripe_stage + (size_t)d * S * stage_arrays<BWD>() * kThreads + threadIdx.x;
}

/* Issues the copies of S steps of row b from logical step u0 into a
 * thread's slots (the identity where there is no step). */
template <typename T, int VEC, bool BWD, int S>
__device__ __forceinline__ void stage_tile(const scan_params &p, int64_t b, int64_t u0, int64_t L,
                                           int64_t col, bool col_ok, uint4 *slots)
{
    constexpr int NS = stage_arrays<BWD>();
#pragma unroll
    for (int k = 0; k < S; k++) {
        uint4 *s = slots + (NS * k) * kThreads;
        if constexpr (BWD)
            step_stage_bwd<T, VEC>(p, b, u0 + k, L, col, col_ok, s, s + kThreads, s + 2 * kThreads);
        else
            step_stage<T, VEC>(p, b * p.T, u0 + k, L, col, col_ok, s, s + kThreads);
    }
}

struct striped_params {
    scan_params s;
    lookback_params lb; /* segments' look-back (nseg > 1) */
    int64_t nstripes;   /* stripes per row */
    int64_t seg_len;    /* steps per segment, a multiple of the tile's */
};

template <typename T, int VEC, bool BWD, int S, int MB, bool SEG, int SB, int D = 0>
__global__ void __launch_bounds__(kThreads, MB) striped_scan_kernel(const striped_params sp)
{
    grid_dep_begin<D == 0>(); /* see kernel_triggers_early */
    static_assert(D == 0 || (!SEG && VEC > 1), "staged tiles: whole-row walks, vector path");
    constexpr int CL = stripe_cl<T, VEC, SB>(), TW = 32 / CL, TL = kStripeWarps * TW;
    constexpr int CW = CL * VEC;
    constexpr int64_t STEPS = (int64_t)TL * S; /* time steps of a tile */
    constexpr bool kWarp0 = VEC > 4;              /* step 3 by warp 0 */
    constexpr int NC = kWarp0 ? (CW + 31) / 32 : VEC; /* carries a lane keeps */
    using R = typename reg_of<T, VEC>::type;
    __shared__ __align__(16) float sA[2][kStripeWarps][CW]; /* warp aggregates, by tile parity */
    __shared__ __align__(16) float sB[2][kStripeWarps][CW];
    __shared__ __align__(16) float sS[kWarp0 ? kStripeWarps : 1][kWarp0 ? CW : 1]; /* state entering each warp */
    __shared__ lookback_smem lsm;

    const scan_params &p = sp.s;
    const int lane = (int)(threadIdx.x & 31), w = (int)(threadIdx.x >> 5);
    const int cl = lane % CL, tw = lane / CL, tl = w * TW + tw;
    int64_t r = blockIdx.x, seg = 0;
    if constexpr (SEG) {
        const int64_t lin = take_ticket(sp.lb, lsm);
        const int64_t nr = p.B * sp.nstripes;
        seg = lin / nr;
        r = lin - seg * nr;
    }
    const int64_t b = r / sp.nstripes, stripe = r - b * sp.nstripes;
    const int64_t col = stripe * CW + (int64_t)cl * VEC;
    const bool col_ok = col < p.H;
    const int64_t row = b * p.T, L = row_length(p, b);
    const int64_t u_begin = seg * sp.seg_len;
    const int64_t u_end = u_begin + sp.seg_len < p.T ? u_begin + sp.seg_len : p.T;
    const bool live = u_begin < L; /* the segment holds valid steps */

    /* carry[j]: the state of stripe column cc(j), kept by every lane of
     * that column (kWarp0: by lane j of warp 0 only) */
    auto cc = [&](int j) -> int { return kWarp0 ? lane + 32 * j : cl * VEC + j; };
    const bool keeps = kWarp0 ? w == 0 : true;
    float carry[NC];
#pragma unroll
    for (int j = 0; j < NC; j++)
        carry[j] = seg == 0 && keeps && cc(j) < CW && stripe * CW + cc(j) < p.H
                       ? state_in<BWD>(p, b, stripe * CW + cc(j)) : 0.0f;

    R x[S], y[S];
    if (SEG && seg > 0 && live) {
        /* Sweep 1: the segment's aggregate. Time lane tl reduces the
         * contiguous steps [v0, v0 + q), S at a time with the next S in
         * flight; the lanes are then composed in order. */
        const int64_t q = sp.seg_len / TL, v0 = u_begin + (int64_t)tl * q;
        float gA[VEC], gB[VEC];
#pragma unroll
        for (int v = 0; v < VEC; v++) { gA[v] = 1.0f; gB[v] = 0.0f; }
#pragma unroll
        for (int k = 0; k < S; k++) load_step<T, VEC, BWD>(p, row, v0 + k, L, col, col_ok, x[k], y[k]);
        for (int64_t i = 0; i < q; i += S) {
            R xn[S], yn[S];
            const int64_t un = i + S < q ? v0 + i + S : kPastEnd; /* past the end: identity */
#pragma unroll
            for (int k = 0; k < S; k++) load_step<T, VEC, BWD>(p, row, un + k, L, col, col_ok, xn[k], yn[k]);
            float A[VEC], Bs[VEC];
            summarize<T, VEC, S>(x, y, A, Bs);
#pragma unroll
            for (int v = 0; v < VEC; v++) {
                gB[v] = A[v] * gB[v] + Bs[v];
                gA[v] = A[v] * gA[v];
            }
#pragma unroll
            for (int k = 0; k < S; k++) { x[k] = xn[k]; y[k] = yn[k]; }
        }
        warp_time_scan<CL, TW, VEC>(gA, gB, tw);
        if (tw == TW - 1) {
#pragma unroll
            for (int v = 0; v < VEC; v++) {
                sA[1][w][cl * VEC + v] = gA[v];
                sB[1][w][cl * VEC + v] = gB[v];
            }
        }
        __syncthreads();
        float aggA = 1.0f, aggB = 0.0f;
        if (threadIdx.x < CW) {
            for (int k = 0; k < kStripeWarps; k++) {
                aggB = sA[1][k][threadIdx.x] * aggB + sB[1][k][threadIdx.x];
                aggA = sA[1][k][threadIdx.x] * aggA;
            }
        }
        /* the walk's first tile is on its way during the look-back (its
         * barriers also order the reads of sA[1] above before the walk's
         * first writes there, at tile parity 1) */
#pragma unroll
        for (int k = 0; k < S; k++)
            load_step<T, VEC, BWD>(p, row, u_begin + (int64_t)tl * S + k, L, col, col_ok, x[k], y[k]);
        (void)lookback_carry<MB == 1 ? 4 : 2>(sp.lb, r, seg, CW, aggA, aggB, 0.0f, lsm);
#pragma unroll
        for (int j = 0; j < NC; j++)
            if (keeps && cc(j) < CW) carry[j] = lsm.carry[cc(j)];
    } else if constexpr (D > 0) {
        /* staged tiles: the first D tiles' copies, a group each */
        for (int d = 0; d < D; d++) {
            stage_tile<T, VEC, BWD, S>(p, b, u_begin + d * STEPS + (int64_t)tl * S, L, col, col_ok,
                                       stripe_slots<S, BWD>(d));
            cp_async_commit();
        }
    } else {
#pragma unroll
        for (int k = 0; k < S; k++)
            load_step<T, VEC, BWD>(p, row, u_begin + (int64_t)tl * S + k, L, col, col_ok, x[k], y[k]);
    }

    /* Sweep 2 (the only one without segments): the walk */
    int par = 0;
    for (int64_t tile = u_begin, ti = 0; tile < u_end; tile += STEPS, par ^= 1, ti++) {
        const int64_t u0 = tile + (int64_t)tl * S;
        R xn[D > 0 ? 1 : S], yn[D > 0 ? 1 : S];
        /* backward: h_{s-1} of this tile's steps, kept as loaded (16-bit
         * packed) until the end */
        R hq[BWD ? S : 1];
        float A[VEC], Bs[VEC];
        if constexpr (D > 0) {
            /* this tile from its slots, which then take tile ti + D (the
             * registers read from them hold what the tile still needs) */
            constexpr int NS = stage_arrays<BWD>();
            uint4 *slots = stripe_slots<S, BWD>((int)(ti % D));
            cp_async_wait_group<D - 1>();
#pragma unroll
            for (int k = 0; k < S; k++) {
                step_unstage<T, VEC>(slots + (NS * k) * kThreads, x[k]);
                step_unstage<T, VEC>(slots + (NS * k + 1) * kThreads, y[k]);
                if constexpr (BWD) step_unstage<T, VEC>(slots + (NS * k + 2) * kThreads, hq[k]);
            }
            summarize<T, VEC, S>(x, y, A, Bs);
            stage_tile<T, VEC, BWD, S>(p, b, u0 + D * STEPS, L, col, col_ok, slots);
            cp_async_commit();
        } else {
            const int64_t un = !SEG || tile + STEPS < u_end ? u0 + STEPS : kPastEnd;
#pragma unroll
            for (int k = 0; k < S; k++) load_step<T, VEC, BWD>(p, row, un + k, L, col, col_ok, xn[k], yn[k]);
            if constexpr (BWD) {
#pragma unroll
                for (int k = 0; k < S; k++) load_hprev_reg<T, VEC>(p, b, u0 + k, L, col, col_ok, hq[k]);
            }
        }

        if constexpr (D == 0) summarize<T, VEC, S>(x, y, A, Bs);
        /* the exclusive prefix within the warp, and the warp's aggregate */
        float eA[VEC], eB[VEC];
        warp_tile_prefix<CL, TW, VEC>(A, Bs, tw, eA, eB, &sA[par][w][cl * VEC],
                                      &sB[par][w][cl * VEC]);
        __syncthreads();

        /* step 3: the state entering this lane's first step, st */
        float st[VEC] = {};
        if constexpr (kWarp0) {
            if (w == 0) {
#pragma unroll
                for (int j = 0; j < NC; j++) {
                    if (cc(j) >= CW) continue;
                    float sc = carry[j];
#pragma unroll
                    for (int k = 0; k < kStripeWarps; k++) {
                        sS[k][cc(j)] = sc;
                        sc = sA[par][k][cc(j)] * sc + sB[par][k][cc(j)];
                    }
                    carry[j] = sc;
                }
            }
            __syncthreads();
#pragma unroll
            for (int v = 0; v < VEC; v++) st[v] = eA[v] * sS[w][cl * VEC + v] + eB[v];
        } else {
#pragma unroll
            for (int v = 0; v < VEC; v++) {
                float pA = 1.0f, pB = 0.0f;
                for (int k = 0; k < kStripeWarps; k++) {
                    if (k == w) st[v] = eA[v] * (pA * carry[v] + pB) + eB[v];
                    const float qA = sA[par][k][cl * VEC + v], qB = sB[par][k][cl * VEC + v];
                    pB = qA * pB + qB;
                    pA = qA * pA;
                }
                carry[v] = pA * carry[v] + pB;
            }
        }

        if (col_ok) {
#pragma unroll
            for (int k = 0; k < S; k++) {
                advance<T, VEC>(x[k], y[k], st);
                float hp[VEC] = {};
                if constexpr (BWD) hprev_get<T, VEC>(p, b, u0 + k, L, col, hq[k], hp);
                if (u0 + k < p.T) store_step<T, VEC, BWD, true>(p, row, u0 + k, L, col, st, hp);
            }
        }
        if constexpr (D == 0) {
#pragma unroll
            for (int k = 0; k < S; k++) { x[k] = xn[k]; y[k] = yn[k]; }
        }
    }
    /* padding steps are the identity: the carry is the state after the
     * segment's last valid step */
    const bool lead = kWarp0 ? w == 0 : tl == 0;
    if (SEG && seg == 0 && live) {
        /* segment 0 publishes its final state as its inclusive prefix,
         * handed from the lanes that keep it to thread c through
         * lsm.carry (each thread reads its slot before lookback_carry
         * writes it) */
        if (lead) {
#pragma unroll
            for (int j = 0; j < NC; j++)
                if (cc(j) < CW) lsm.carry[cc(j)] = carry[j];
        }
        __syncthreads();
        (void)lookback_carry<MB == 1 ? 4 : 2>(sp.lb, r, 0, CW, 1.0f, 0.0f,
                             threadIdx.x < CW ? lsm.carry[threadIdx.x] : 0.0f, lsm);
    }
    if (lead && (L == 0 ? seg == 0 : u_begin <= L - 1 && L - 1 < u_end)) {
#pragma unroll
        for (int j = 0; j < NC; j++) {
            const int64_t c = stripe * CW + cc(j);
            if (cc(j) < CW && c < p.H) state_out<T, BWD>(p, b, c, L, carry[j]);
        }
    }
}

/* The staged 16-bit forward with each tile finished one tile late. The
 * staged walk above runs two block barriers a tile: warp 0 carries each
 * column through the 8 warp aggregates between them while the other warps
 * wait. Here iteration ti summarizes tile ti, then, behind a single
 * barrier, every warp carries 16 of the stripe's columns through tile ti's
 * aggregates (a chain of 8 folds a lane) while it finishes tile ti - 1,
 * whose entering states that chain left in shared memory an iteration
 * earlier. The two are independent, so the chain's shared-memory round
 * trips overlap the finish instead of idling the SM. A tile stays in its
 * slots until its finish: D slots hold tiles ti - 1 to ti + D - 2, and the
 * finish takes its steps from them again. Forward, vector path of 8
 * channels a lane, whole rows, 1 block per SM. */
template <typename T, int VEC, int S, int D, bool KEEP>
__global__ void __launch_bounds__(kThreads, 1) striped_late_kernel(const striped_params sp)
{
    grid_dep_begin<false>(); /* see kernel_triggers_early */
    constexpr int CL = stripe_cl<T, VEC, 256>(), TW = 32 / CL, TL = kStripeWarps * TW;
    constexpr int CW = CL * VEC, CPW = CW / kStripeWarps; /* columns a warp carries */
    constexpr int64_t STEPS = (int64_t)TL * S;
    static_assert(VEC > 4 && D >= (KEEP ? 2 : 3) && CPW <= 32 && CW % kStripeWarps == 0,
                  "late finish: 16-bit stripes");
    using R = typename reg_of<T, VEC>::type;
    __shared__ __align__(16) float sA[2][kStripeWarps][CW]; /* warp aggregates, by tile parity */
    __shared__ __align__(16) float sB[2][kStripeWarps][CW];
    __shared__ __align__(16) float sS[2][kStripeWarps][CW]; /* state entering each warp */

    const scan_params &p = sp.s;
    const int lane = (int)(threadIdx.x & 31), w = (int)(threadIdx.x >> 5);
    const int cl = lane % CL, tw = lane / CL, tl = w * TW + tw;
    const int64_t r = blockIdx.x, b = r / sp.nstripes, stripe = r - b * sp.nstripes;
    const int64_t col = stripe * CW + (int64_t)cl * VEC;
    const bool col_ok = col < p.H;
    const int64_t row = b * p.T, L = row_length(p, b);
    const int64_t ntiles = (p.T + STEPS - 1) / STEPS;

    /* the column this lane carries (lanes from CPW on carry none) */
    const int cc = w * CPW + lane;
    const bool keeps = lane < CPW && stripe * CW + cc < p.H;
    float carry = keeps ? state_in<false>(p, b, stripe * CW + cc) : 0.0f;

    for (int d = 0; d < D; d++) {
        stage_tile<T, VEC, false, S>(p, b, d * STEPS + (int64_t)tl * S, L, col, col_ok,
                                     stripe_slots<S, false>(d));
        cp_async_commit();
    }

    R x[S], y[S];
    R xp[KEEP ? S : 1], yp[KEEP ? S : 1]; /* KEEP: tile ti - 1 kept in registers */
    float pA[VEC], pB[VEC]; /* the prefix within the warp of tile ti - 1 */
    for (int64_t ti = 0; ti <= ntiles; ti++) {
        const int par = (int)(ti & 1);
        float eA[VEC], eB[VEC];
#pragma unroll
        for (int v = 0; v < VEC; v++) { eA[v] = 1.0f; eB[v] = 0.0f; }
        if (ti < ntiles) {
            /* tile ti from its slots (the group count runs one ahead at
             * the start: iteration 0 commits an empty group) */
            cp_async_wait_group<KEEP ? D - 1 : D - 2>();
            uint4 *slots = stripe_slots<S, false>((int)(ti % D));
#pragma unroll
            for (int k = 0; k < S; k++) {
                step_unstage<T, VEC>(slots + (2 * k) * kThreads, x[k]);
                step_unstage<T, VEC>(slots + (2 * k + 1) * kThreads, y[k]);
            }
            if constexpr (KEEP) {
                if (ti + D < ntiles)
                    stage_tile<T, VEC, false, S>(p, b, (ti + D) * STEPS + (int64_t)tl * S, L, col,
                                                 col_ok, slots);
                cp_async_commit();
            }
            float A[VEC], Bs[VEC];
            summarize<T, VEC, S>(x, y, A, Bs);
            warp_tile_prefix<CL, TW, VEC>(A, Bs, tw, eA, eB, &sA[par][w][cl * VEC],
                                          &sB[par][w][cl * VEC]);
        }
        __syncthreads();

        /* tile ti's entering states, column cc through the warps */
        if (ti < ntiles && lane < CPW) {
            float sc = carry;
#pragma unroll
            for (int k = 0; k < kStripeWarps; k++) {
                sS[par][k][cc] = sc;
                sc = sA[par][k][cc] * sc + sB[par][k][cc];
            }
            carry = sc;
        }
        /* tile ti - 1 finished from its slots, which then take tile
         * ti - 1 + D */
        if (ti > 0) {
            uint4 *slots = stripe_slots<S, false>((int)((ti - 1) % D));
            const int64_t u0 = (ti - 1) * STEPS + (int64_t)tl * S;
            if (col_ok) {
                float st[VEC];
#pragma unroll
                for (int v = 0; v < VEC; v++) st[v] = pA[v] * sS[par ^ 1][w][cl * VEC + v] + pB[v];
#pragma unroll
                for (int k = 0; k < S; k++) {
                    if constexpr (KEEP) {
                        advance<T, VEC>(xp[k], yp[k], st);
                    } else {
                        step_unstage<T, VEC>(slots + (2 * k) * kThreads, x[k]);
                        step_unstage<T, VEC>(slots + (2 * k + 1) * kThreads, y[k]);
                        advance<T, VEC>(x[k], y[k], st);
                    }
                    if (u0 + k < p.T) store_step<T, VEC, false, true>(p, row, u0 + k, L, col, st, st);
                }
            }
            if (!KEEP && ti - 1 + D < ntiles)
                stage_tile<T, VEC, false, S>(p, b, u0 + D * STEPS, L, col, col_ok, slots);
        }
        if constexpr (!KEEP) cp_async_commit();
#pragma unroll
        for (int v = 0; v < VEC; v++) { pA[v] = eA[v]; pB[v] = eB[v]; }
        if constexpr (KEEP) {
#pragma unroll
            for (int k = 0; k < S; k++) { xp[k] = x[k]; yp[k] = y[k]; }
        }
    }
    /* padding steps are the identity: the carry is the state after the
     * row's last valid step */
    if (keeps) state_out<T, false>(p, b, stripe * CW + cc, L, carry);
}

#ifndef PRNN_LATE16_KEEP
#define PRNN_LATE16_KEEP 0
#endif
constexpr bool kLate16Keep = PRNN_LATE16_KEEP != 0;

/* Blocks (row x stripe) of a STRIPED launch without segments. */
template <typename T, int VEC, int SB = 128> int64_t striped_blocks(const scan_params &p)
{
    return p.B * ceil_div(p.H, (int64_t)stripe_cl<T, VEC, SB>() * VEC);
}

/* Fraction of the slots of the last wave that `blocks` blocks fill, at
 * `per_sm` resident blocks per SM. */
double wave_fill(int64_t blocks, int64_t per_sm, int sm_count)
{
    const int64_t slots = per_sm * sm_count, waves = ceil_div(blocks, slots);
    return (double)blocks / (double)(waves * slots);
}

/* Whether `blocks` stripes keep the card busy walking whole rows: they give
 * every SM one and fill at least 70% of the slots of their waves. A row
 * walked by one block cannot be split, so a part-empty last wave costs its
 * share of the time; at 72.7% (bf16, 16 x 768 channels: 192 blocks on 264
 * slots) STRIPED still measured 80% of the roofline against CHUNKED's 74%. */
bool stripes_fill(int64_t blocks, int per_sm, int sm_count)
{
    return blocks >= sm_count && wave_fill(blocks, per_sm, sm_count) >= 0.7;
}

/* Steps per segment. Stripes that fill the card walk whole rows. Otherwise
 * rows are cut into segments, about 4 per slot, each at least a tile, and
 * short enough that the a and b of the segments resident at once (read
 * twice) take at most 40% of L2. */
int64_t striped_seg_len(const prnn_cuda_state *st, const scan_params &p, int64_t stripes,
                        int64_t steps, int per_sm)
{
    if (stripes_fill(stripes, per_sm, st->sm_count)) return p.T;
    const int64_t slots = (int64_t)st->sm_count * per_sm;
#ifdef PRNN_STRIPE_SEG_TILES /* lab sweeps: tiles per segment */
    int64_t len = (int64_t)PRNN_STRIPE_SEG_TILES * steps;
    (void)slots;
#else
    int64_t len = ceil_div(p.T * stripes, 4 * slots);
    const int64_t l2_len = (int64_t)(0.4 * (double)st->l2_bytes) / (slots * 2 * 128);
    if (len > l2_len) len = l2_len;
#endif
    len = len / steps * steps;
    if (len < steps) len = steps;
    return len < p.T ? len : p.T;
}

/* The 16-bit backward's steps per lane and blocks per SM. */
constexpr int kBwd16Steps = 2, kBwd16Blocks = 2;

/* Time steps of a STRIPED tile at S steps per lane. */
template <typename T, int VEC, int S, int SB = 128> constexpr int64_t striped_steps()
{
    return (int64_t)kStripeWarps * (32 / stripe_cl<T, VEC, SB>()) * S;
}

/* Dynamic shared memory of a STRIPED launch: D staged tiles. */
template <bool BWD, int S, int D> constexpr size_t striped_smem()
{
    return (size_t)D * S * stage_arrays<BWD>() * kThreads * sizeof(uint4);
}

/* A STRIPED launch. D > 0: walking whole rows with D tiles staged ahead in
 * shared memory. */
template <typename T, int VEC, bool BWD, int S, int MB, int SB = 128, int D = 0, bool LATE = false>
prnn_status striped_launch(prnn_cuda_state *st, const scan_params &p, bool whole_rows = false)
{
    constexpr int CL = stripe_cl<T, VEC, SB>();
    constexpr int64_t STEPS = striped_steps<T, VEC, S, SB>();
    const int64_t nstripes = ceil_div(p.H, (int64_t)CL * VEC);
    if (p.B * nstripes > INT32_MAX) return PRNN_ERR_UNSUPPORTED;
    striped_params sp;
    memset(&sp, 0, sizeof sp);
    sp.s = p;
    sp.nstripes = nstripes;
    const int64_t stripes = p.B * nstripes;
    sp.seg_len = D > 0 || whole_rows ? p.T : striped_seg_len(st, p, stripes, STEPS, MB);
    const int64_t nseg = ceil_div(p.T, sp.seg_len); /* segments per row */
    if (nseg > INT32_MAX / stripes) return PRNN_ERR_UNSUPPORTED;
    const int64_t blocks = stripes * nseg;
    if (nseg > 1) {
        prnn_status s = lookback_reserve(st, blocks, (int64_t)CL * VEC);
        if (s != PRNN_OK) return s;
        sp.lb = lookback_open(st, nseg);
    }
    st->last = {kStriped, (int)(CL * VEC * sizeof(T)), S, MB, D, STEPS, nseg, LATE};
    if constexpr (LATE) {
        static_assert(!BWD && MB == 1 && SB == 256, "late finish: the staged 16-bit forward");
        auto *kernel = striped_late_kernel<T, VEC, S, D, kLate16Keep>;
        const size_t smem = striped_smem<BWD, S, D>();
        PRNN_CU(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
        PRNN_LAUNCH_SMEM(kernel, (unsigned)blocks, kThreads, smem, st->stream, sp);
    } else if constexpr (D > 0) {
        auto *kernel = striped_scan_kernel<T, VEC, BWD, S, MB, false, SB, D>;
        const size_t smem = striped_smem<BWD, S, D>();
        PRNN_CU(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
        PRNN_LAUNCH_SMEM(kernel, (unsigned)blocks, kThreads, smem, st->stream, sp);
    } else {
        auto *kernel = nseg > 1 ? striped_scan_kernel<T, VEC, BWD, S, MB, true, SB>
                                : striped_scan_kernel<T, VEC, BWD, S, MB, false, SB>;
        PRNN_LAUNCH(kernel, (unsigned)blocks, kThreads, st->stream, sp);
    }
    PRNN_CU_LAUNCHED();
    if (nseg > 1) st->ticket_base += (unsigned long long)blocks;
    return PRNN_OK;
}

/* The 16-bit forward in 256-byte stripes where those number at least 0.7
 * x the SMs but fewer than the SMs (bf16 16 x 768: 96, 16 x 1024: 128):
 * walking whole rows at 1 block per SM, each block needs more bytes in
 * flight than its registers hold, so it stages tiles ahead in shared
 * memory (striped_scan_kernel's D). Measured on an H200 (dev/cuda/README.md), bf16 fwd /
 * fwd+bwd % of the copy roofline against the 128-byte stripes before:
 * 16x64Kx768 92.1-92.8 / 84.4-84.5 against 85.1-85.7 / 82.8-83.2 (2 tiles
 * of 12 steps a lane), 16x4Kx768 80.2-80.6 / 80.3-80.6 against 78.0-78.6 /
 * 80.2-80.3 (1 tile of 8), 16x64Kx1024 95.4-95.7 / 90.3-90.4 against
 * 94.5-94.9 / 89.2; at 16x4Kx1024 2 tiles of 12 lost 3 points and 1 of 8
 * ran as before. So rows of at least kStage16LongT steps take 2 of 12,
 * shorter ones 1 of 8; long rows go unstaged instead where wide16_pays. */
#ifdef PRNN_STAGE16_LONG_T /* the simulator's small shapes */
constexpr int64_t kStage16LongT = PRNN_STAGE16_LONG_T;
#else
constexpr int64_t kStage16LongT = 16384;
#endif
/* The backward where the forward stages: 1 tile of 8 steps a lane, its
 * coefficient, dh and h_{s-1} staged (96 KiB). Measured on an H200
 * (dev/cuda/README.md), bf16 fwd+bwd % of the copy roofline against the
 * 128-byte stripes at 2 steps and 2 blocks per SM before: 16x64Kx768
 * 89.9-90.1 against 84.0-84.3, 16x4Kx768 84.3 against 80.4-80.5,
 * 16x64Kx1024 93.3-94.1 against 89.1-89.9, 16x4Kx1024 89.4-89.6 against
 * 88.2-88.7; 2 tiles of 8 ran within a point of 1 (192 KiB), 2 of 6 1-3
 * points lower, 1 of 12 at 66-73%. */
#ifndef PRNN_STAGE16_BWD_D /* lab settings: tiles (0 = none), steps a lane */
#define PRNN_STAGE16_BWD_D 1
#endif
#ifndef PRNN_STAGE16_BWD_S
#define PRNN_STAGE16_BWD_S 8
#endif
constexpr int kStage16BwdD = PRNN_STAGE16_BWD_D, kStage16BwdS = PRNN_STAGE16_BWD_S;
/* The forward's long-row configuration: D tiles of S steps (lab settings;
 * D = 0: the forward does not stage). */
#ifndef PRNN_STAGE16_FWD_D
#define PRNN_STAGE16_FWD_D 2
#endif
#ifndef PRNN_STAGE16_FWD_S
#define PRNN_STAGE16_FWD_S 12
#endif
constexpr int kStage16FwdD = PRNN_STAGE16_FWD_D, kStage16FwdS = PRNN_STAGE16_FWD_S;
/* Whether a staged STRIPED configuration's shared memory fits a block. */
template <typename T, int VEC, bool BWD, int S, int D> bool striped_fits(const prnn_cuda_state *st)
{
    static const size_t stat = static_smem(striped_scan_kernel<T, VEC, BWD, S, 1, false, 256, D>);
    return smem_fits(st, stat, striped_smem<BWD, S, D>());
}

template <typename T, int VEC, int S, int D> bool striped_fits_late(const prnn_cuda_state *st)
{
    static const size_t stat = static_smem(striped_late_kernel<T, VEC, S, D, kLate16Keep>);
    return smem_fits(st, stat, striped_smem<false, S, D>());
}

/* Whether the staged 16-bit backward pays for a launch of `blocks`
 * 256-byte stripes (the forward's long rows: wide16_pays). It runs
 * one block on each of only 0.7-1 x the SMs, each block limited by its
 * own walk; the unstaged one (128-byte stripes, 2 blocks per SM) fills
 * every SM. Where each SM's share of the peak memory bandwidth is at least
 * kStage16MinGbps, a block's walk keeps up and staging pays at every such
 * count; below it, only where the stripes number at least
 * kStage16MinTenths tenths of the SMs. Measured (dev/cuda/README.md, bf16
 * AUTO % of the copy roofline, fwd / fwd+bwd): on an H200 (4.9 TB/s peak,
 * 37 GB/s an SM) 16x64Kx768 (96 stripes) the staged forward 92.1-92.8
 * against 85.1-85.7, the staged backward 89.9-90.1 against 84.0-84.3
 * fwd+bwd (the comments above); on an H100
 * (3.35 TB/s, 25 GB/s an SM, run r79) 96 stripes 16x64Kx768 staged
 * 82.3-82.4 / 81.6-81.9 against unstaged 90.5 / 89.2, 8x64Kx1536
 * 82.7-82.8 / 81.9-82.1 against 90.1 / 89.8, but 112 stripes 16x64Kx896
 * 90.1-90.8 / 89.6-89.9 against 87.9 / 87.2, 14x64Kx1024 89.6-92.3 /
 * 89.3-89.7 against 88.3 / 87.1, and 128 stripes 16x64Kx1024 95.3-95.8 /
 * 94.9 against the forward unstaged 91.8-91.9 / 92.8-93.0 (run r78).
 * Where the bandwidth is unknown the walks stage. The forward's short-row
 * configuration (1 tile of 8) stages on every card: on the H100 at 96
 * stripes 8x4Kx1536 93.1-94.4 against 92.0-92.4 unstaged, 16x4Kx768
 * 90.7-91.5 against 90.1-90.8. */
#ifndef PRNN_STAGE16_MIN_GBPS /* lab setting: GB/s an SM */
#define PRNN_STAGE16_MIN_GBPS 30
#endif
#ifndef PRNN_STAGE16_MIN_TENTHS /* lab setting: stripes per SM, in tenths */
#define PRNN_STAGE16_MIN_TENTHS 8
#endif
constexpr int kStage16MinGbps = PRNN_STAGE16_MIN_GBPS, kStage16MinTenths = PRNN_STAGE16_MIN_TENTHS;
bool stage16_pays(const prnn_cuda_state *st, int64_t blocks)
{
    if (st->mem_gbps <= 0 || st->mem_gbps >= (int64_t)kStage16MinGbps * st->sm_count) return true;
    return 10 * blocks >= (int64_t)kStage16MinTenths * st->sm_count;
}

/* The 16-bit forward's long rows in those stripes: unstaged at 1 block per
 * SM, kWide16S steps a lane with the next tile's loads in registers, where
 * each block's share of the peak memory bandwidth is under
 * kWide16MaxGbps; above it (fewer blocks on a faster memory) a block's
 * walk cannot keep up unstaged, and 2 tiles of 12 steps are staged in
 * shared memory. Measured (dev/cuda/README.md, runs r83-r84, bf16 AUTO
 * fwd %, two passes, unstaged at 6 steps against the library before): on
 * an H200 (4814 GB/s peak) 112 stripes (43 GB/s a block) 16x64Kx896
 * 93.0 against 88.3 staged, 14x64Kx1024 93.1-93.3 against 88.9-89.2; 128
 * (38) 16x64Kx1024 98.4-98.5 against 94.3-95.2; but 96 (50) 16x64Kx768
 * 80.4 against 91.2-92.2, 4x64Kx3072 80.3 against 96.0, 16x16Kx768 79.2
 * against 87.0. On an H100 (3352 GB/s) 96 stripes (35) 16x64Kx768
 * 98.1-98.2 against 92.4-92.7 (128-byte stripes at 2 blocks per SM, which
 * the H100 took there), 8x64Kx1536 98.7 against 93.0-93.1; 128 (26)
 * 16x64Kx1024 96.9-97.3 against 97.1-97.7 staged. At 4, 5, 7 and 8
 * steps: H200 16x64Kx1024 87.4, 95.3, 95.4, (8 not run); 16x64Kx896
 * 78.1, 86.5, 97.3; 16x64Kx768 67.0, 74.5, 85.8; H100 16x64Kx768 at 8
 * steps 91.5-91.7. Short rows keep the staged tile of 8 steps (H200
 * 16x4Kx896 unstaged 86.2 against 91.6). Where the bandwidth is unknown
 * the walk stages. */
#ifndef PRNN_WIDE16_MAX_GBPS /* lab settings: GB/s of peak bandwidth a block, steps a lane */
#define PRNN_WIDE16_MAX_GBPS 45
#endif
#ifndef PRNN_WIDE16_S
#define PRNN_WIDE16_S 6
#endif
constexpr int kWide16MaxGbps = PRNN_WIDE16_MAX_GBPS, kWide16S = PRNN_WIDE16_S;
bool wide16_pays(const prnn_cuda_state *st, int64_t blocks)
{
    return st->mem_gbps > 0 && st->mem_gbps < (int64_t)kWide16MaxGbps * blocks;
}

/* The configuration a 16-bit STRIPED launch takes where its 256-byte
 * stripes number 0.7-1 x the SMs: 0 none (128-byte stripes), 1 one staged
 * tile of 8 steps (the backward: kStage16BwdD of kStage16BwdS), 2 two of
 * 12, 3 (the forward's long rows, wide16_pays) the 256-byte stripes
 * unstaged. Where a staged choice does not fit a block's shared memory
 * (A100: 163 KiB; 2 of 12 need 212) or does not pay on the card
 * (stage16_pays), the next one. */
constexpr int kWide16 = 3;
template <typename T, int VEC, bool BWD> int stage16_pick(const prnn_cuda_state *st, const scan_params &p)
{
    if constexpr (VEC > 1 && sizeof(T) == 2) {
        const int64_t blocks = striped_blocks<T, VEC, 256>(p);
        if (10 * blocks < 7 * (int64_t)st->sm_count || blocks >= st->sm_count) return 0;
        if constexpr (BWD) {
            if constexpr (kStage16BwdD > 0)
                return stage16_pays(st, blocks) &&
                       striped_fits<T, VEC, BWD, kStage16BwdS, kStage16BwdD>(st) ? 1 : 0;
            return 0;
        } else {
            if (p.T >= kStage16LongT && wide16_pays(st, blocks)) return kWide16;
            if constexpr (kStage16FwdD == 0) return 0;
            if (p.T >= kStage16LongT && striped_fits<T, VEC, BWD, kStage16FwdS, kStage16FwdD>(st))
                return 2;
            return striped_fits<T, VEC, BWD, 8, 1>(st) ? 1 : 0;
        }
    }
    (void)st, (void)p;
    return 0;
}

/* Blocks per SM of a STRIPED launch of `blocks` stripes: 2 for scalars
 * and the 16-bit backward; for the 16-bit forward 2 when at 1 per SM the
 * last wave would be under 3/4 full (192 stripes: a last wave of 60 on 132
 * SMs), else 1, and for the fp32 backward the same where 2 per SM make a
 * single wave of at least one block per SM (else 1: segments, or waves
 * that 2 per SM would fill worse); for the fp32 forward 2 when that is
 * a single wave or fills the waves about as well as 1 per SM, else 1.
 * Measured on an H200 (dev/cuda/README.md), % of the copy roofline: bf16
 * 16 x 768 forward 3 steps at 2 per SM 82.0 against 78.7, while at 16 x
 * 1024 the 1-per-SM tile was 2-4 points faster; fp32 256-byte stripes
 * forward 3 steps at 2 per SM against 4 at 1: 16 x 64K x 768 96.1 against
 * 90.8 (192 stripes), 16 x 64K x 1024 98.8 against 96.1 (256); fp32
 * backward 2 steps at 2 per SM against 4 at 1, fwd+bwd: 16 x 64K x 768
 * 93.1 against 90.2, 16 x 64K x 1024 97.7 against 99.1. */
template <typename T, int VEC, bool BWD> int striped_per_sm(int64_t blocks, int sm_count)
{
    if (VEC == 1) return 2;
    if (BWD && sizeof(T) == 2) return kBwd16Blocks;
    const int64_t sm = sm_count, last = blocks - (ceil_div(blocks, sm) - 1) * sm;
    const bool thin = 4 * last < 3 * sm;
    if (sizeof(T) == 2) return thin ? 2 : 1;
    if (BWD) return blocks >= sm && blocks <= 2 * sm && thin ? 2 : 1;
    const bool fills2 = wave_fill(blocks, 2, sm_count) >= wave_fill(blocks, 1, sm_count) - 0.05;
    return blocks <= 2 * sm || fills2 ? 2 : 1;
}

/* Whether stripes of SB bytes walk whole rows: stripes_fill at their
 * blocks per SM. */
template <typename T, int VEC, bool BWD, int SB>
bool striped_fill_at(const prnn_cuda_state *st, const scan_params &p)
{
    const int64_t blocks = striped_blocks<T, VEC, SB>(p);
    return stripes_fill(blocks, striped_per_sm<T, VEC, BWD>(blocks, st->sm_count), st->sm_count);
}

/* Stripe bytes: 256 on the vector path where those stripes fill the card
 * walking whole rows, else 128. Measured on an H200 (dev/cuda/README.md),
 * fwd / fwd+bwd % of the copy roofline, 256 against 128: fp32 16x64Kx1024
 * 98.8 / 99.1 against 90.3 / 91.9 (and 95.0 / 97.3 with 1 block per SM),
 * 16x64Kx768 96.1 / 93.1 against 90.8 / 92.2, 4x64Kx4096 98.7 / 98.6
 * against 89.0 / 89.3; bf16 32x64Kx1024 97.3 / 96.3 against 94.4 / 89.4.
 * With fewer 256-byte stripes than SMs walking whole rows (bf16 16 x 768:
 * 96) the forward fell to 58%, so those take 128-byte stripes. */
template <typename T, int VEC, bool BWD>
int striped_bytes(const prnn_cuda_state *st, const scan_params &p)
{
    if constexpr (VEC == 1) {
        return 128;
    } else {
        if (!striped_fill_at<T, VEC, BWD, 256>(st, p)) return 128;
        /* 16-bit: only where the forward then runs 1 block per SM; as a
         * single wave at 2 per SM it measured 86% (bf16 32x64Kx768), no
         * better than 128-byte stripes in that configuration */
        if (sizeof(T) == 2 &&
            striped_per_sm<T, VEC, false>(striped_blocks<T, VEC, 256>(p), st->sm_count) != 1)
            return 128;
        return 256;
    }
}

/* Steps per lane at those blocks per SM, measured on an H200
 * (dev/cuda/README.md): fp32 vectors forward 3 at 2 per SM (128 registers)
 * or 4 at 1, backward 2 at 2 per SM or 4 at 1; 16-bit vectors forward 8 at
 * 1 per SM or 3 at 2, backward 2 (its h_{s-1} kept packed: 4 at 1 per SM
 * ran at 55-57% of the copy roofline, 2 at 2 per SM at 92% with the
 * forward at 16 x 64K x 1024 bf16); scalars 8. */
template <typename T, int VEC, bool BWD, int SB>
prnn_status striped_run_at(prnn_cuda_state *st, const scan_params &p)
{
    const int per_sm = striped_per_sm<T, VEC, BWD>(striped_blocks<T, VEC, SB>(p), st->sm_count);
    if constexpr (VEC == 1) {
        return striped_launch<T, 1, BWD, 8, 2>(st, p);
    } else if constexpr (BWD && sizeof(T) == 2) {
        return striped_launch<T, VEC, BWD, kBwd16Steps, kBwd16Blocks, SB>(st, p);
    } else if constexpr (BWD) {
        if (per_sm == 2) return striped_launch<T, VEC, BWD, 2, 2, SB>(st, p);
        return striped_launch<T, VEC, BWD, 4, 1, SB>(st, p);
    } else {
        if (per_sm == 2) return striped_launch<T, VEC, BWD, 3, 2, SB>(st, p);
        return striped_launch<T, VEC, BWD, sizeof(T) == 2 ? 8 : 4, 1, SB>(st, p);
    }
}

/* Lab settings: PRNN_LATE16 1 takes striped_late_kernel (PRNN_LATE16_S
 * steps a lane, PRNN_LATE16_D tiles) for the staged 16-bit forward, 2 also
 * for the unstaged long rows (wide16_pays). */
#ifndef PRNN_LATE16
#define PRNN_LATE16 0
#endif
#ifndef PRNN_LATE16_S
#define PRNN_LATE16_S 8
#endif
#ifndef PRNN_LATE16_D
#define PRNN_LATE16_D 3
#endif
template <typename T, int VEC, bool BWD>
prnn_status striped_run(prnn_cuda_state *st, const scan_params &p)
{
    if constexpr (VEC > 1 && sizeof(T) == 2) {
        const int staged = stage16_pick<T, VEC, BWD>(st, p);
        if constexpr (!BWD && PRNN_LATE16 > 0) {
            if ((staged > 0 && staged != kWide16) || (staged == kWide16 && PRNN_LATE16 > 1))
                if (striped_fits_late<T, VEC, PRNN_LATE16_S, PRNN_LATE16_D>(st))
                    return striped_launch<T, VEC, BWD, PRNN_LATE16_S, 1, 256, PRNN_LATE16_D, true>(st, p);
        }
        if constexpr (!BWD)
            if (staged == kWide16)
                return striped_launch<T, VEC, BWD, kWide16S, 1, 256>(st, p, true);
        if (staged > 0) {
            if constexpr (BWD && kStage16BwdD > 0) {
                return striped_launch<T, VEC, BWD, kStage16BwdS, 1, 256, kStage16BwdD>(st, p);
            } else if constexpr (!BWD) {
                if constexpr (kStage16FwdD > 0) {
                    if (staged == 2)
                        return striped_launch<T, VEC, BWD, kStage16FwdS, 1, 256, kStage16FwdD>(st, p);
                }
                return striped_launch<T, VEC, BWD, 8, 1, 256, 1>(st, p);
            }
        }
    }
    if constexpr (VEC > 1) {
        if (striped_bytes<T, VEC, BWD>(st, p) == 256)
            return striped_run_at<T, VEC, BWD, 256>(st, p);
    }
    return striped_run_at<T, VEC, BWD, 128>(st, p);
}

/* Whether a STRIPED launch walks whole rows: no segments, no look-back. */
template <typename T, int VEC, bool BWD>
bool striped_fills(const prnn_cuda_state *st, const scan_params &p)
{
    if (stage16_pick<T, VEC, BWD>(st, p) > 0) return true;
    if (striped_bytes<T, VEC, BWD>(st, p) == 256) return true;
    return striped_fill_at<T, VEC, BWD, 128>(st, p);
}

/* AUTO between the striped and the chunked scan: striped on the vector path
 * where its stripes fill the card walking whole rows, the chunked scan
 * otherwise. Until the chunked backward staged h_{s-1} in shared memory,
 * the 16-bit backward took striped segments of at least 3 tiles; measured
 * on an H200 since (dev/cuda/README.md), bf16 fwd+bwd % of the copy
 * roofline, segments / chunked: 1x1Mx64 59.4 / 63.0, 1x1Mx256 65.1 / 68.1,
 * 1x64Kx256 49.1 / 53.1, 4x64Kx256 63.5 / 65.8, 16x64Kx256 65.6 / 68.1. */
template <typename T, int VEC, bool BWD>
bool auto_striped(const prnn_cuda_state *st, const scan_params &p)
{
    if (VEC == 1) return false;
    return striped_fills<T, VEC, BWD>(st, p);
}

} // namespace

/* ======================================================================== */
/* TREE: local states, merge up the tree level by level, carries down       */
/*
 * Level 0 holds one summary (A, B) per chunk of K logical steps (K =
 * desc->chunk, default 32: the source design's divide-and-conquer
 * threshold); level l+1 merges pairs of level l, the first merge launch
 * having gridDim.x = ceil(T / (2K)) blocks per (row, column tile), up to a
 * single root. The down-sweep gives every node its carry-in (left child:
 * the parent's; right child: the left sibling applied to it), and the local
 * kernel runs again from each chunk's carry-in, writing the outputs.
 *
 * Workspace: SA, SB, C, each (levels) x (B, n_l, H) floats, H contiguous.
 */

namespace {

struct tree_params {
    scan_params s;
    float *SA;          // (B, n0, H) level-0 summaries
    float *SB;
    const float *C0;    // (B, n0, H) level-0 carries, NULL: the single chunk starts at h0/dhT
    int64_t K;          // steps per chunk
    int64_t n0;         // chunks per row
    int64_t ntiles;     // column tiles per row
    int64_t groups;     // blocks per (row, tile) along chunks
    int lg_tx;
};

/* The local-state kernel: TX column threads x TY chunks per block, each
 * thread serial over its chunk. Without APPLY it writes the chunk's summary;
 * with APPLY it starts from the chunk's carry and writes the outputs. */
template <typename T, int VEC, bool BWD, bool APPLY>
__global__ void __launch_bounds__(kThreads) tree_local_kernel(const tree_params tp)
{
    grid_dep_begin();
    const scan_params &p = tp.s;
    const int TX = 1 << tp.lg_tx, TY = kThreads >> tp.lg_tx;
    const int tx = threadIdx.x & (TX - 1), ty = threadIdx.x >> tp.lg_tx;
    const int64_t r = blockIdx.x / tp.groups, g = blockIdx.x - r * tp.groups;
    const int64_t b = r / tp.ntiles, tile = r - b * tp.ntiles;
    const int64_t j = g * TY + ty;
    const int64_t col = tile * TX * VEC + (int64_t)tx * VEC;
    if (j >= tp.n0 || col >= p.H) return;

    const int64_t row = b * p.T, L = row_length(p, b);
    const int64_t u_begin = j * tp.K;
    const int64_t u_end = u_begin + tp.K < p.T ? u_begin + tp.K : p.T;
    const int64_t at = (b * tp.n0 + j) * p.H + col;

    if constexpr (!APPLY) {
        float A[VEC], Bs[VEC];
#pragma unroll
        for (int v = 0; v < VEC; v++) { A[v] = 1.0f; Bs[v] = 0.0f; }
#pragma unroll 4
        for (int64_t u = u_begin; u < u_end; u++) {
            freg<VEC> x, y;
            load_step<T, VEC, BWD>(p, row, u, L, col, true, x, y);
#pragma unroll
            for (int v = 0; v < VEC; v++) {
                Bs[v] = x.v[v] * Bs[v] + y.v[v];
                A[v] = x.v[v] * A[v];
            }
        }
        store_f<VEC>(tp.SA + at, A);
        store_f<VEC>(tp.SB + at, Bs);
    } else {
        float st[VEC];
        if (tp.C0) {
            load_f<VEC>(tp.C0 + at, st);
        } else {
#pragma unroll
            for (int v = 0; v < VEC; v++) st[v] = state_in<BWD>(p, b, col + v);
        }
#pragma unroll 4
        for (int64_t u = u_begin; u < u_end; u++) {
            freg<VEC> x, y;
            float hp[VEC];
            load_step<T, VEC, BWD>(p, row, u, L, col, true, x, y);
            if constexpr (BWD) load_hprev<T, VEC>(p, b, u, L, col, true, hp);
#pragma unroll
            for (int v = 0; v < VEC; v++) st[v] = x.v[v] * st[v] + y.v[v];
            store_step<T, VEC, BWD>(p, row, u, L, col, st, hp);
        }
        if (j == (L > 0 ? (L - 1) / tp.K : 0)) {
#pragma unroll
            for (int v = 0; v < VEC; v++) state_out<T, BWD>(p, b, col + v, L, st[v]);
        }
    }
}

/* The merge kernel: one block per pair of adjacent intervals (blockIdx.x)
 * and column tile of 256*VEC columns (blockIdx.y, looping when B * tiles
 * exceeds the grid limit). As in the source design the block stages the
 * left and right intervals' states in shared memory (rows padded by 4
 * floats so that the four rows of one column fall in different banks), then
 * merges: (AL, BL) then (AR, BR) = (AR*AL, AR*BL + BR). An odd last node has
 * no right sibling and is carried up unchanged. */
template <int VEC>
__global__ void __launch_bounds__(kThreads)
    tree_merge_kernel(const float *__restrict__ SA, const float *__restrict__ SB,
                      float *__restrict__ SA_up, float *__restrict__ SB_up,
                      int64_t n, int64_t n_up, int64_t B, int64_t H, int64_t ntiles)
{
    grid_dep_begin();
    constexpr int HT = kThreads * VEC, PAD = 4;
    __shared__ __align__(16) float s[4][HT + PAD]; /* left A, left B, right A, right B */
    const int tid = threadIdx.x;
    const int64_t i = blockIdx.x;
    for (int64_t r = blockIdx.y; r < B * ntiles; r += gridDim.y) {
        const int64_t b = r / ntiles, tile = r - b * ntiles;
        const int64_t col = tile * HT + (int64_t)tid * VEC;
        const bool ok = col < H;
        float v4[4][VEC];
#pragma unroll
        for (int v = 0; v < VEC; v++) { v4[0][v] = v4[2][v] = 1.0f; v4[1][v] = v4[3][v] = 0.0f; }
        if (ok) {
            const int64_t left = (b * n + 2 * i) * H + col;
            load_f<VEC>(SA + left, v4[0]);
            load_f<VEC>(SB + left, v4[1]);
            if (2 * i + 1 < n) {
                load_f<VEC>(SA + left + H, v4[2]);
                load_f<VEC>(SB + left + H, v4[3]);
            }
        }
#pragma unroll
        for (int k = 0; k < 4; k++) smem_put<VEC>(&s[k][tid * VEC], v4[k]);
        __syncthreads();
        if (ok) {
            float lA[VEC], lB[VEC], rA[VEC], rB[VEC], mA[VEC], mB[VEC];
            smem_get<VEC>(&s[0][tid * VEC], lA);
            smem_get<VEC>(&s[1][tid * VEC], lB);
            smem_get<VEC>(&s[2][tid * VEC], rA);
            smem_get<VEC>(&s[3][tid * VEC], rB);
#pragma unroll
            for (int v = 0; v < VEC; v++) {
                mA[v] = rA[v] * lA[v];
                mB[v] = rA[v] * lB[v] + rB[v];
            }
            const int64_t up = (b * n_up + i) * H + col;
            store_f<VEC>(SA_up + up, mA);
            store_f<VEC>(SB_up + up, mB);
        }
        __syncthreads(); /* s is refilled by the next tile */
    }
}

/* The down-sweep: the carry-in of node i of a level from its parent's
 * (C_up, or the scan's initial state s0 = h0/dhT at the root). */
template <int VEC>
__global__ void __launch_bounds__(kThreads)
    tree_down_kernel(const float *__restrict__ SA, const float *__restrict__ SB,
                     float *__restrict__ Cl, const float *__restrict__ C_up,
                     const float *__restrict__ s0, int64_t n, int64_t n_up, int64_t B,
                     int64_t H, int64_t ntiles)
{
    grid_dep_begin();
    constexpr int HT = kThreads * VEC;
    const int64_t i = blockIdx.x;
    for (int64_t r = blockIdx.y; r < B * ntiles; r += gridDim.y) {
        const int64_t b = r / ntiles, tile = r - b * ntiles;
        const int64_t col = tile * HT + (int64_t)threadIdx.x * VEC;
        if (col >= H) continue;
        float c[VEC];
        if (C_up) {
            load_f<VEC>(C_up + (b * n_up + i / 2) * H + col, c);
        } else {
#pragma unroll
            for (int v = 0; v < VEC; v++) c[v] = s0 ? __ldg(s0 + b * H + col + v) : 0.0f;
        }
        if (i & 1) {
            float lA[VEC], lB[VEC];
            load_f<VEC>(SA + (b * n + i - 1) * H + col, lA);
            load_f<VEC>(SB + (b * n + i - 1) * H + col, lB);
#pragma unroll
            for (int v = 0; v < VEC; v++) c[v] = lA[v] * c[v] + lB[v];
        }
        store_f<VEC>(Cl + (b * n + i) * H + col, c);
    }
}

#ifdef DEBUG_MERGE
/* ------------------------------------------------------------------------ */
/* DEBUG_MERGE: after each merge level, compare the merged summaries with a
 * serial host evaluation of the same intervals and print the difference.  */

float debug_to_float(const unsigned char *base, int64_t i, prnn_dtype dt)
{
    float f;
    if (dt == PRNN_DTYPE_F32) {
        memcpy(&f, base + 4 * i, 4);
        return f;
    }
    uint16_t h;
    memcpy(&h, base + 2 * i, 2);
    uint32_t bits;
    if (dt == PRNN_DTYPE_BF16) {
        bits = (uint32_t)h << 16;
    } else { /* IEEE half */
        const uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
        uint32_t e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
        if (e == 0x1f) {
            bits = sign | 0x7f800000u | (m << 13);
        } else if (e == 0) {
            if (m == 0) {
                bits = sign;
            } else { /* subnormal: normalise */
                int sh = 0;
                while (!(m & 0x400u)) { m <<= 1; sh++; }
                m &= 0x3ffu;
                bits = sign | ((uint32_t)(127 - 15 + 1 - sh) << 23) | (m << 13);
            }
        } else {
            bits = sign | ((e + 127 - 15) << 23) | (m << 13);
        }
    }
    memcpy(&f, &bits, 4);
    return f;
}

struct debug_host {
    unsigned char *a, *y; /* host copies of a and b (forward) or dh (backward) */
    prnn_dtype dt;
    const int64_t *lengths;
};

int64_t debug_phys(int64_t u, int64_t L, bool flip) { return u < L ? (flip ? L - 1 - u : u) : u; }

/* Host mirror of load_step (scalar). */
void debug_step(const debug_host &dh, const scan_params &p, bool bwd, int64_t b, int64_t u,
                int64_t col, float *x, float *y)
{
    const int64_t L = dh.lengths ? dh.lengths[b] : p.T;
    *x = 1.0f;
    *y = 0.0f;
    if (u >= L) return;
    const bool flip = bwd ? !p.reverse : p.reverse != 0;
    const int64_t t = debug_phys(u, L, flip);
    if (!bwd) {
        *x = debug_to_float(dh.a, (b * p.T + t) * p.H + col, dh.dt);
        *y = debug_to_float(dh.y, (b * p.T + t) * p.H + col, dh.dt);
    } else {
        if (u > 0) *x = debug_to_float(dh.a, (b * p.T + debug_phys(u - 1, L, flip)) * p.H + col, dh.dt);
        if (dh.y) *y = debug_to_float(dh.y, (b * p.T + t) * p.H + col, dh.dt);
    }
}

/* Level `lev` (>= 1) node i covers chunks [i << lev, (i + 1) << lev). */
prnn_status debug_merge_level(prnn_cuda_state *st, const debug_host &dh, const scan_params &p,
                              bool bwd, int64_t K, int lev, const float *SA, const float *SB,
                              int64_t n)
{
    const size_t count = (size_t)(p.B * n * p.H);
    float *hA = (float *)malloc(count * sizeof(float)), *hB = (float *)malloc(count * sizeof(float));
    if (!hA || !hB) {
        free(hA);
        free(hB);
        return PRNN_ERR_OUT_OF_MEMORY;
    }
    cudaError_t e = cudaMemcpyAsync(hA, SA, count * sizeof(float), cudaMemcpyDeviceToHost, st->stream);
    if (e == cudaSuccess)
        e = cudaMemcpyAsync(hB, SB, count * sizeof(float), cudaMemcpyDeviceToHost, st->stream);
    if (e == cudaSuccess) e = cudaStreamSynchronize(st->stream);
    if (e != cudaSuccess) {
        free(hA);
        free(hB);
        return map_cuda_error(e);
    }
    const int64_t span = K << lev;
    double maxA = 0.0, maxB = 0.0;
    for (int64_t b = 0; b < p.B; b++)
        for (int64_t i = 0; i < n; i++)
            for (int64_t col = 0; col < p.H; col++) {
                float A = 1.0f, Bv = 0.0f;
                const int64_t u_end = (i + 1) * span < p.T ? (i + 1) * span : p.T;
                for (int64_t u = i * span; u < u_end; u++) {
                    float x, y;
                    debug_step(dh, p, bwd, b, u, col, &x, &y);
                    Bv = x * Bv + y;
                    A = x * A;
                }
                const size_t at = (size_t)((b * n + i) * p.H + col);
                const double dA = fabs((double)hA[at] - A), dB = fabs((double)hB[at] - Bv);
                if (!(dA <= maxA)) maxA = dA;
                if (!(dB <= maxB)) maxB = dB;
            }
    fprintf(stderr,
            "prnn DEBUG_MERGE %s level %d: %lld intervals of %lld steps per channel, "
            "max |merged - serial| A %.3e B %.3e\n",
            bwd ? "backward" : "forward", lev, (long long)n, (long long)span, maxA, maxB);
    free(hA);
    free(hB);
    return PRNN_OK;
}

prnn_status debug_copy_in(prnn_cuda_state *st, const scan_params &p, bool bwd, prnn_dtype dt,
                          const int64_t *lengths, debug_host *dh)
{
    const size_t bytes = (size_t)(p.B * p.T * p.H) * prnn_dtype_size(dt);
    const void *ysrc = bwd ? p.dh : p.b;
    dh->dt = dt;
    dh->lengths = lengths;
    dh->a = (unsigned char *)malloc(bytes);
    dh->y = ysrc ? (unsigned char *)malloc(bytes) : nullptr;
    if (!dh->a || (ysrc && !dh->y)) return PRNN_ERR_OUT_OF_MEMORY;
    PRNN_CU(cudaMemcpyAsync(dh->a, p.a, bytes, cudaMemcpyDeviceToHost, st->stream));
    if (ysrc) PRNN_CU(cudaMemcpyAsync(dh->y, ysrc, bytes, cudaMemcpyDeviceToHost, st->stream));
    PRNN_CU(cudaStreamSynchronize(st->stream));
    return PRNN_OK;
}
#endif /* DEBUG_MERGE */

template <typename T, int VEC, bool BWD>
prnn_status tree_run(prnn_cuda_state *st, const scan_params &p, const prnn_scan_desc *d)
{
    const int64_t K = d->chunk > 0 ? d->chunk : 32;
    const int64_t n0 = ceil_div(p.T, K);

    /* level sizes and offsets (in nodes per channel) */
    int64_t n[64], off[64];
    int top = 0;
    n[0] = n0;
    off[0] = 0;
    while (n[top] > 1) {
        n[top + 1] = (n[top] + 1) / 2;
        off[top + 1] = off[top] + n[top];
        top++;
    }
    const int64_t total = off[top] + n[top];
    const int64_t per = p.B * p.H; /* floats per node across channels */
    if (total > INT64_MAX / 3 / per / (int64_t)sizeof(float)) return PRNN_ERR_SIZE_OVERFLOW;
    prnn_status s = ws_reserve(st, 0, (size_t)(3 * total * per) * sizeof(float));
    if (s != PRNN_OK) return s;
    float *const SA = ws_data(st), *const SB = SA + total * per, *const C = SB + total * per;
    st->last = {kTree, 0, 0, 0, 0, K, n0, false};

    /* local-state kernel: summaries of level 0 */
    const int64_t ncv = ceil_div(p.H, VEC);
    const int lg_tx = ceil_log2(ncv < 32 ? ncv : 32);
    const int64_t TX = (int64_t)1 << lg_tx, TY = kThreads / TX;
    tree_params tp;
    tp.s = p;
    tp.SA = SA;
    tp.SB = SB;
    tp.C0 = top > 0 ? C : nullptr;
    tp.K = K;
    tp.n0 = n0;
    tp.ntiles = ceil_div(p.H, TX * VEC);
    tp.groups = ceil_div(n0, TY);
    tp.lg_tx = lg_tx;
    const int64_t local_blocks = p.B * tp.ntiles * tp.groups;
    if (local_blocks > INT32_MAX || n0 > INT32_MAX) return PRNN_ERR_UNSUPPORTED;
    auto *summarise = tree_local_kernel<T, VEC, BWD, false>;
    auto *apply = tree_local_kernel<T, VEC, BWD, true>;
    if (top > 0) {
        PRNN_LAUNCH(summarise, (unsigned)local_blocks, kThreads, st->stream, tp);
        PRNN_CU_LAUNCHED();
    }

#ifdef DEBUG_MERGE
    debug_host dh = {nullptr, nullptr, PRNN_DTYPE_F32, nullptr};
    struct freer {
        debug_host *h;
        ~freer() { free(h->a); free(h->y); }
    } free_dh{&dh};
    if (top > 0) {
        const prnn_dtype dt = std::is_same<T, float>::value    ? PRNN_DTYPE_F32
                              : std::is_same<T, __half>::value ? PRNN_DTYPE_F16
                                                               : PRNN_DTYPE_BF16;
        s = debug_copy_in(st, p, BWD, dt, d->lengths, &dh);
        if (s != PRNN_OK) return s;
    }
#endif

    /* merge kernel, level by level up to the root */
    const bool vec4 = p.H % 4 == 0;
    const int64_t mtiles = ceil_div(p.H, kThreads * (vec4 ? 4 : 1));
    const unsigned gy = (unsigned)(p.B * mtiles < 65535 ? p.B * mtiles : 65535);
    auto *merge = vec4 ? tree_merge_kernel<4> : tree_merge_kernel<1>;
    auto *down = vec4 ? tree_down_kernel<4> : tree_down_kernel<1>;
    for (int l = 0; l < top; l++) {
        const dim3 grid((unsigned)n[l + 1], gy);
        const float *a_l = SA + off[l] * per, *b_l = SB + off[l] * per;
        float *a_u = SA + off[l + 1] * per, *b_u = SB + off[l + 1] * per;
        PRNN_LAUNCH(merge, grid, kThreads, st->stream, a_l, b_l, a_u, b_u, n[l], n[l + 1], p.B,
                    p.H, mtiles);
        PRNN_CU_LAUNCHED();
#ifdef DEBUG_MERGE
        s = debug_merge_level(st, dh, p, BWD, K, l + 1, a_u, b_u, n[l + 1]);
        if (s != PRNN_OK) return s;
#endif
    }

    /* down-sweep: carries from the root (h0/dhT) to level 0 */
    const float *s0 = BWD ? p.dhT : p.h0;
    for (int l = top - 1; l >= 0; l--) {
        const dim3 grid((unsigned)n[l], gy);
        const float *c_up = l + 1 == top ? nullptr : C + off[l + 1] * per;
        PRNN_LAUNCH(down, grid, kThreads, st->stream, SA + off[l] * per, SB + off[l] * per,
                    C + off[l] * per, c_up, s0, n[l], n[l + 1], p.B, p.H, mtiles);
        PRNN_CU_LAUNCHED();
    }

    /* the local-state kernel again, from each chunk's carry-in */
    PRNN_LAUNCH(apply, (unsigned)local_blocks, kThreads, st->stream, tp);
    PRNN_CU_LAUNCHED();
    return PRNN_OK;
}

} // namespace

/* ======================================================================== */
/* Dispatch: runtime choices -> template instances, in one place            */

namespace {

/* Whether work queued on stream s now goes into a CUDA graph (or whether
 * that cannot be told: then as if it did). */
bool stream_capturing(cudaStream_t s)
{
    cudaStreamCaptureStatus c = cudaStreamCaptureStatusNone;
    if (cudaStreamIsCapturing(s, &c) != cudaSuccess) {
        (void)cudaGetLastError();
        return true;
    }
    return c != cudaStreamCaptureStatusNone;
}

window_card window_card_of(const prnn_cuda_state *st)
{
    return {st->cc_major, st->sm_count, st->smem_optin,
            st->sm_count > 0 ? st->mem_gbps / st->sm_count : 0};
}

/* WINDOW (scan_window.cu) for a scan on the vector path it applies to:
 * true, with its status in *s; false where it does not apply, or for
 * no_capture (FIXED: a captured call must take no tickets) while the stream
 * is being captured. */
template <typename T, bool BWD>
bool window_try(prnn_cuda_state *st, const scan_params &p, bool no_capture, prnn_status *s)
{
    const window_card card = window_card_of(st);
    if (!window_applies<T, BWD>(p, card)) return false;
    if (no_capture && stream_capturing(st->stream)) return false;
    *s = words_reserve(st, window_words<T, BWD>(p, card));
    if (*s != PRNN_OK) return true;
    window_launch w;
    w.words = reinterpret_cast<unsigned long long *>(st->ws + kWordsOffset);
    w.counter = reinterpret_cast<unsigned long long *>(st->ws);
    w.ticket_base = st->ticket_base;
    w.tag = st->epoch << 2 | 3; /* status 3: no chunked or striped word carries it */
    w.stream = st->stream;
    w.card = card;
    st->last = {kWindow, window_chain_width<T, BWD>(p, card), 0, 0, 0, 0, 0, false};
    unsigned long long tickets = 0;
    const cudaError_t e = window_scan<T, BWD>(p, w, &tickets);
    st->ticket_base += tickets;
    *s = map_cuda_error(e);
    return true;
}

/* Whether AUTO's forward takes WINDOW where it applies: from 2^16 steps
 * (2^17 for one chain) to under 3 x 2^17 (384K). Measured on an H200
 * (run r55, fwd % of the copy roofline, WINDOW against CHUNKED): fp32
 * 1x64Kx256 73.3
 * against 63.8, 4x64Kx64 72.3 / 63.9, 2x64Kx64 59.7 / 56.5, 1x256Kx256 82.2
 * / 79.7, 1x256Kx64 61.5 / 61.0; bf16 1x64Kx256 58.8 / 53.3, 1x256Kx64 54.3
 * / 49.4; but 1x64Kx64 44.8 / 45.2 (bf16 33.4 / 35.6), every shape at 16K
 * (fp32 1x16Kx256 50.6 / 54.3) and at 1M (fp32 1x1Mx64 68.3 / 75.5).
 * Run r61 between: at 384K as often ahead as behind (fp32 1x384Kx64 64.6
 * / 65.6, 2x384Kx64 75.0 / 74.2, 4x384Kx64 82.2 / 84.0; bf16 1x384Kx64
 * 58.1 / 53.1, 4x384Kx64 72.8 / 76.1), at 512K mostly behind (fp32
 * 1x512Kx256 83.7 / 85.0, 4x512Kx64 82.9 / 85.3). With the rule's upper
 * bound at 2^19 (run r56, T = 2^15 .. 2^20, B x H = 1x64, 1x256, 2x64,
 * 4x64), AUTO's forward against CHUNKED's: at most 0.3 below (fp32
 * 1x128Kx64 53.8 / 54.1), up to 9.5 above (fp32 4x64Kx64 72.7 / 63.2).
 * Where WINDOW cuts the rows into chains of 32 columns (window_chain_width: fp32,
 * B H <= 256; 16-bit from 2^18 steps, B H <= 128, on a card of under 30
 * GB/s an SM), its forward beats CHUNKED's from 32K steps on (fwd %,
 * WINDOW against CHUNKED; run r65: fp32 1x32Kx64 36.7 / 36.3, 1x64Kx64
 * 50.4 / 45.9, 1x512Kx64 77.1 / 69.0, 1x1Mx64 79.5 / 75.4; runs r69-r70:
 * 1x32Kx128 53.2 / 52.1, 2x32Kx64 52.1 / 48.4, 1x32Kx256 71.8 / 61.2,
 * 1x64Kx128 67.9 / 58.6; run r68 at 1M, against AUTO's forward then, the
 * chunked scan's: 1x1Mx256 91.9 / 87.8-87.9, 4x1Mx64 91.6-91.7 /
 * 87.6-88.1). At 16K it lost at B H = 128 (1x16Kx128 37.2-38.6 /
 * 43.0-43.1, 2x16Kx64 37.2 / 38.6) while winning at 64 and 256 (1x16Kx256
 * 56.1 / 53.9); shorter rows were not measured. */
#ifndef PRNN_WINDOW_FWD_T /* lab sweeps: "from (several chains), from (one), below, from (narrow)" */
#define PRNN_WINDOW_FWD_T 65536, 131072, 393216, 32768
#endif
template <typename T> bool window_forward_wins(const prnn_cuda_state *st, const scan_params &p)
{
    constexpr int64_t t[4] = {PRNN_WINDOW_FWD_T};
    if (window_chain_width<T, false>(p, window_card_of(st)) == 32) return p.T >= t[3];
    const bool one_chain = p.B * p.H <= 64;
    return p.T >= t[one_chain ? 1 : 0] && p.T < t[2];
}

template <typename T, bool BWD>
prnn_status run_typed(prnn_cuda_state *st, const prnn_scan_desc *d, const scan_params &p)
{
    constexpr int V = vec16<T>();
    const bool vec = vectors_ok(p, BWD, V);
    prnn_status window_status = PRNN_OK;
    switch (d->algo) {
    case PRNN_SCAN_SERIAL:
        return serial_run<T, BWD>(st, p);
    case PRNN_SCAN_TREE:
        return vec ? tree_run<T, V, BWD>(st, p, d) : tree_run<T, 1, BWD>(st, p, d);
    case PRNN_SCAN_STRIPED:
        return vec ? striped_run<T, V, BWD>(st, p) : striped_run<T, 1, BWD>(st, p);
    case PRNN_SCAN_AUTO:
        /* WINDOW: the backward, and the forward where it beats CHUNKED's */
        if (vec && (BWD || window_forward_wins<T>(st, p)) &&
            window_try<T, BWD>(st, p, false, &window_status))
            return window_status;
        if (vec ? auto_striped<T, V, BWD>(st, p) : auto_striped<T, 1, BWD>(st, p))
            return vec ? striped_run<T, V, BWD>(st, p) : striped_run<T, 1, BWD>(st, p);
        return vec ? chunked_run<T, V, BWD>(st, p) : chunked_run<T, 1, BWD>(st, p);
    case PRNN_SCAN_CHUNKED:
        return vec ? chunked_run<T, V, BWD>(st, p) : chunked_run<T, 1, BWD>(st, p);
    case PRNN_SCAN_FIXED:
        /* STRIPED or the tree (no look-back, no tickets), or outside graph
         * capture WINDOW, forward and backward, whose tiles' folds run in
         * an order fixed by the shape and the SM count (a captured call
         * must take no tickets) */
        if (vec && striped_fills<T, V, BWD>(st, p)) return striped_run<T, V, BWD>(st, p);
        if (vec && window_try<T, BWD>(st, p, true, &window_status)) return window_status;
        return vec ? tree_run<T, V, BWD>(st, p, d) : tree_run<T, 1, BWD>(st, p, d);
    default:
        return PRNN_ERR_INVALID_ARGUMENT;
    }
}

template <bool BWD>
prnn_status run_scan(prnn_ctx *ctx, const prnn_scan_desc *d, scan_params p)
{
    prnn_cuda_state *st = ctx ? ctx->cuda : nullptr;
    if (!st) return PRNN_ERR_INVALID_ARGUMENT;
    if (d->dtype == PRNN_DTYPE_F64) return PRNN_ERR_UNSUPPORTED;
    if (d->dtype != PRNN_DTYPE_F32 && d->dtype != PRNN_DTYPE_BF16 && d->dtype != PRNN_DTYPE_F16)
        return PRNN_ERR_INVALID_ARGUMENT;
    device_guard guard(st->device);
    if (guard.err != cudaSuccess) return map_cuda_error(guard.err);

    p.B = d->B;
    p.T = d->T;
    p.H = d->H;
    p.reverse = d->reverse ? 1 : 0;
    prnn_status s = upload_lengths(&st->d_lengths, &st->lengths_cap, st->stream, d->lengths, d->B,
                                   &p.lengths);
    if (s != PRNN_OK) return s;
    switch (d->dtype) {
    case PRNN_DTYPE_F32: return run_typed<float, BWD>(st, d, p);
    case PRNN_DTYPE_BF16: return run_typed<__nv_bfloat16, BWD>(st, d, p);
    default: return run_typed<__half, BWD>(st, d, p);
    }
}

} // namespace

/* ======================================================================== */
/* Entry points (prnn_internal.h)                                           */

extern "C" int prnn_cuda_device_count(void)
{
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
        (void)cudaGetLastError(); /* no driver or no device: not an error here */
        return 0;
    }
    return n;
}

extern "C" prnn_status prnn_cuda_ctx_init(prnn_ctx *ctx, const prnn_ctx_config *cfg)
{
    if (!ctx) return PRNN_ERR_NULL_POINTER;
    ctx->cuda = nullptr;
    const int n = prnn_cuda_device_count();
    if (n <= 0) return PRNN_ERR_NO_DEVICE;
    const int dev = cfg ? cfg->cuda_device : 0;
    if (dev < 0 || dev >= n) return PRNN_ERR_INVALID_ARGUMENT;

    prnn_cuda_state *st = static_cast<prnn_cuda_state *>(calloc(1, sizeof(prnn_cuda_state)));
    if (!st) return PRNN_ERR_OUT_OF_MEMORY;
    st->device = dev;
    device_guard guard(dev);
    cudaError_t e = guard.err;
    if (e == cudaSuccess) e = cudaDeviceGetAttribute(&st->sm_count, cudaDevAttrMultiProcessorCount, dev);
    if (e == cudaSuccess) e = cudaDeviceGetAttribute(&st->l2_bytes, cudaDevAttrL2CacheSize, dev);
    if (e == cudaSuccess)
        e = cudaDeviceGetAttribute(&st->smem_optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev);
    if (e == cudaSuccess)
        e = cudaDeviceGetAttribute(&st->cc_major, cudaDevAttrComputeCapabilityMajor, dev);
    if (e == cudaSuccess) {
        /* a datasheet figure, not a measurement: double data rate over the bus */
        int khz = 0, bits = 0;
        if (cudaDeviceGetAttribute(&khz, cudaDevAttrMemoryClockRate, dev) == cudaSuccess &&
            cudaDeviceGetAttribute(&bits, cudaDevAttrGlobalMemoryBusWidth, dev) == cudaSuccess)
            st->mem_gbps = (int)(2.0 * khz * 1e3 * (bits / 8) / 1e9);
        else
            (void)cudaGetLastError();
    }
#ifdef PRNN_SMEM_OPTIN_CAP /* lab: a smaller card's limit (A100 166912, sm_86/89 101376) */
    if (st->smem_optin > PRNN_SMEM_OPTIN_CAP) st->smem_optin = PRNN_SMEM_OPTIN_CAP;
#endif
    if (e == cudaSuccess) {
        if (cfg && cfg->cuda_stream) {
            st->stream = static_cast<cudaStream_t>(cfg->cuda_stream);
            st->owns_stream = 0;
        } else {
            e = cudaStreamCreateWithFlags(&st->stream, cudaStreamNonBlocking);
            st->owns_stream = e == cudaSuccess;
        }
    }
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        free(st);
        return map_cuda_error(e);
    }
    ctx->cuda = st;
    return PRNN_OK;
}

extern "C" void prnn_cuda_ctx_free(prnn_ctx *ctx)
{
    if (!ctx || !ctx->cuda) return;
    prnn_cuda_release(ctx);
    prnn_cuda_state *st = ctx->cuda;
    {
        device_guard guard(st->device);
        (void)cudaStreamSynchronize(st->stream);
        if (st->ws) (void)cudaFree(st->ws);
        if (st->d_lengths) (void)cudaFree(st->d_lengths);
        if (st->owns_stream) (void)cudaStreamDestroy(st->stream);
        (void)cudaGetLastError();
    }
    free(st);
    ctx->cuda = nullptr;
}

extern "C" prnn_status prnn_cuda_synchronize(prnn_ctx *ctx)
{
    if (!ctx || !ctx->cuda) return PRNN_ERR_INVALID_ARGUMENT;
    device_guard guard(ctx->cuda->device);
    if (guard.err != cudaSuccess) return map_cuda_error(guard.err);
    PRNN_CU(cudaStreamSynchronize(ctx->cuda->stream));
    return PRNN_OK;
}

extern "C" void *prnn_cuda_stream(const prnn_ctx *ctx)
{
    return ctx && ctx->cuda ? static_cast<void *>(ctx->cuda->stream) : nullptr;
}

extern "C" int prnn_cuda_device_of(const prnn_ctx *ctx)
{
    return ctx && ctx->cuda ? ctx->cuda->device : -1;
}

extern "C" prnn_status prnn_cuda_scan_forward(prnn_ctx *ctx, const prnn_scan_desc *d, void *h,
                                              void *hT, const void *a, const void *b,
                                              const void *h0)
{
    scan_params p;
    memset(&p, 0, sizeof p);
    p.a = a;
    p.b = b;
    p.h_out = h;
    p.hT = static_cast<float *>(hT);
    p.h0 = static_cast<const float *>(h0);
    return run_scan<false>(ctx, d, p);
}

extern "C" const char *prnn_cuda_scan_last_kernel(const prnn_ctx *ctx)
{
    prnn_cuda_state *st = ctx ? ctx->cuda : nullptr;
    if (!st || st->last.engine == kNoEngine) return "";
    const auto &k = st->last;
    char *t = st->last_text;
    const size_t n = sizeof st->last_text;
    if (k.engine == kSerial) {
        snprintf(t, n, "serial: one thread a channel");
    } else if (k.engine == kTree) {
        snprintf(t, n, "tree: chunks of %lld steps, %lld a row", (long long)k.tile_steps,
                 (long long)k.parts);
    } else if (k.engine == kWindow) {
        snprintf(t, n, "window: chains of %d channels", k.columns);
    } else if (k.engine == kChunked) {
        snprintf(t, n, "chunked: tiles of %d channels x %lld steps (%d a thread, %d of them staged), "
                 "%d block%s an SM, %lld tiles a row, look-back",
                 k.columns, (long long)k.tile_steps, k.steps, k.staged, k.per_sm,
                 k.per_sm == 1 ? "" : "s", (long long)k.parts);
    } else {
        char staged[40], rows[48];
        if (k.staged > 0) snprintf(staged, sizeof staged, "%d tile%s staged", k.staged, k.staged == 1 ? "" : "s");
        else snprintf(staged, sizeof staged, "unstaged");
        if (k.parts > 1) snprintf(rows, sizeof rows, "%lld segments a row, look-back", (long long)k.parts);
        else snprintf(rows, sizeof rows, "whole rows");
        snprintf(t, n, "striped: %d-byte stripes, %d steps a lane, %d block%s an SM, %s%s, %s",
                 k.columns, k.steps, k.per_sm, k.per_sm == 1 ? "" : "s", staged,
                 k.late ? ", each finished a tile late" : "", rows);
    }
    return t;
}

extern "C" prnn_status prnn_cuda_scan_backward(prnn_ctx *ctx, const prnn_scan_desc *d, void *da,
                                               void *db, void *dh0, const void *a, const void *h,
                                               const void *h0, const void *dh, const void *dhT)
{
    scan_params p;
    memset(&p, 0, sizeof p);
    p.a = a;
    p.h_in = h;
    p.dh = dh;
    p.da = da;
    p.db = db;
    p.h0 = static_cast<const float *>(h0);
    p.dhT = static_cast<const float *>(dhT);
    p.dh0 = static_cast<float *>(dh0);
    return run_scan<true>(ctx, d, p);
}
