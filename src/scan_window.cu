/*
 * scan_window.cu - WINDOW: the scan of few long chains on sm_90 (H100,
 * H200). AUTO takes it for the backward where it applies (window_applies;
 * scan_cuda.cu's run_typed), and for the forward from 2^16 to 3 x 2^17
 * steps, or from 2^15 on for chains of 32 columns (window_forward_wins:
 * elsewhere the chunked scan's forward is faster);
 * FIXED for both directions outside graph capture: a tile's result does
 * not depend on which block takes it or when. Everything else, and every
 * other card, goes to the chunked scan.
 *
 * Size letters: B batch rows, T time steps, H channels; tensors (B, T, H),
 * H contiguous; states (B, H). A chain is W = 64 channels of one row, or
 * 32 for fp32 where B H / 64 <= 4 in the forward, <= 2 in the backward,
 * and for the 16-bit forward where B H / 64 <= 2 from 2^18 steps on a card
 * of under 30 GB/s an SM (window_width; R = B H / W chains, at most 4 of
 * 64 or 8 of 32); a tile
 * is L = TY S time steps of one chain, the backward walking time from the
 * end: chunk c of a chain covers the steps T - (c + 1) L .. T - c L - 1
 * (the last chunk shorter).
 *
 * The forward walks time from the start, tiles of a and b, writing h (and
 * hT); what follows describes the backward, the forward differing only in
 * those places.
 *
 * A persistent grid of G blocks (one an SM, G a multiple of R) takes the
 * tiles in ticket order (n = chunk * R + chain) from the context's ticket
 * counter. Tickets are cut into windows of Gc = G / R chunks, and each
 * window into groups of g = ceil(sqrt(Gc)) positions. A block has:
 *
 *  - a producer thread: whenever one of its NS shared-memory stages is
 *    free, it takes a ticket and copies that tile's a and dh into the stage
 *    by two tensor-map copies (cp.async.bulk.tensor, counted on the
 *    stage's mbarrier), marking the stage with the tile;
 *  - 256 tile threads (column threads of one 16-byte vector, 4 fp32 or 8
 *    16-bit channels, x time threads of S steps: 16 x 16 for fp32, 8 x 32
 *    for 16-bit storage, 8 x 32 for fp32 at W = 32): they reduce tile k to
 *    its aggregate (A, B) a column,
 *    publish it as tagged words and hand it to the exchange; then finish
 *    tile k - LAG from its carry: re-run its steps from the stage, writing
 *    db = g and da = g h_{t-1} once, and free its stage (window_bulk: the
 *    forward's h written over its b there instead, copied out by the
 *    producer before the stage is refilled);
 *  - XT exchange teams of W threads (one a column; team e takes the
 *    block's tiles k = e mod XT): a tile's carry is the state after the
 *    previous window (published by that window's last position), composed
 *    with the aggregates of the groups before the tile's group (published
 *    by each group's last member) and of its group's members before it.
 *
 * Every wait is on a tile of a smaller ticket, taken by a block already
 * running, so no wait can close a cycle and the grid needs no co-residency.
 * The carry goes through shared memory and mbarriers: full (copy landed),
 * empty (tile finished), agg (aggregate handed over), carry (carry ready).
 *
 * Measured on an H200 against the chunked scan: see window_cfg, and
 * dev/cuda/README.md and docs/benchmarks/scan_h200.md (runs r28-r59).
 */
#include "cuda_common.cuh"
#include "scan_cuda.cuh"

#include <cuda.h>
#include <cudaTypedefs.h>
#include <type_traits>

namespace prnn_cuda {

namespace {

constexpr int kW = 64;        /* columns a chain (W); 32 for few chains (window_width) */
constexpr int kSlots = 6;     /* aggregate and carry slots */
constexpr int kMaxWords = 11; /* the most members or groups a fold: Gc <= 144 */

/* The tile threads, XT exchange teams of W threads (one a column), the producer's warp. */
constexpr int window_threads(int W, int XT)
{
    return kThreads + XT * W + 32;
}

/* ------------------------------------------------------------------------ */
/* Configuration: S steps a time thread (L = TY S a tile: 16 S fp32, 32 S   */
/* 16-bit), NS stages, tile k - LAG finished in iteration k, XT exchange     */
/* teams                                                                     */

/* fp32 and 16-bit 6:4 (L = 96 and 192 steps), lag 2, 3 teams: the
 * longest tiles that fit four stages (192 KiB). On an H200 at T = 2^20,
 * forward+backward % of the copy roofline with this backward (run r30, two
 * passes; the forward is the chunked scan's):
 *
 *   S:NS lag teams   fp32 H=64   fp32 H=256   bf16 H=64   bf16 H=256
 *   5:5 / 10:5 2 3   81.0-81.2   87.1-87.2    68.3-68.5   74.7-74.9
 *   4:6 / 8:6  2 3   77.8-78.2   84.0         65.7-66.2   70.2-70.4
 *   6:4 / 12:4 2 3   83.4-83.7   89.4-89.6    70.0-70.3   75.9-76.1
 *   5:5 / 10:5 3 3   81.9-82.0   87.1-87.2    68.7-68.9   74.8-75.0
 *   5:5 / 10:5 2 4   71.6-72.2   81.8-81.9    65.2-65.7   67.5-67.8
 *   5:5 / 10:5 3 4   78.2-78.5   83.6-83.7    66.8-66.9   72.2-72.4
 *
 * against 76.1, 81.5, 65.0 and 74.0 with the chunked scan's backward
 * (run r29). Four teams make 544 threads a block, whose registers spill. The
 * lag of two tiles and the third team cut the tile threads' wait for a
 * carry (lab runs r27-r28: 2.3 -> 0.7 us a tile at H = 64), and the
 * ticket order keeps the blocks from drifting apart. The 16-bit columns of
 * that table had tile threads of 4 channels (S twice as large for the same
 * L). With 8 (one 16-byte vector, half the loads, stores and address
 * arithmetic an element), run r42 measured, 16-bit 6:4 against the old 12:4:
 *
 *   bf16 H=64 69.4 -> 71.5, bf16 H=256 75.9 -> 77.0, fp16 H=64 68.8 -> 70.0
 *
 * (5:5 69.2 / 75.5, 4:6 66.0 / 72.1, 5:5 lag 3 69.7 / 75.3).
 *
 * Full tiles (L steps, away from both ends of the row) run their step
 * loops with no guard: the backward's reduce and finish, the forward's
 * finish. Run r53, two passes, guarded -> unguarded: AUTO fwd+bwd bf16
 * H=64 71.4 -> 74.0-74.5, H=128 73.3-73.6 -> 77.1-77.2, H=256 77.7-77.9 ->
 * 82.2-82.3, B=4 H=64 78.7-79.3 -> 82.8-83.5, fp32 H=256 89.4-89.6 -> 90.8;
 * FIXED forward bf16 H=256 68.2 -> 72.4, H=128 65.5 -> 70.7-71.0. Left
 * guarded where unguarded measured slower: the forward's reduce (bf16
 * H=256 forward 72.4 -> 68.6-68.8), and then the fp32 backward's finish at
 * one chain (H=64 fwd+bwd 82.7-83.1 -> 81.0-81.2), which fp32 no longer has
 * (window_width: two chains at least, of 32 columns to two rows of 64).
 * PRNN_WINDOW_CFG32 / PRNN_WINDOW_CFG16 ("S, NS, LAG, XT"): lab sweeps. */
#ifndef PRNN_WINDOW_CFG32
#define PRNN_WINDOW_CFG32 6, 4, 2, 3
#endif
#ifndef PRNN_WINDOW_CFG16
#define PRNN_WINDOW_CFG16 6, 4, 2, 3
#endif
/* A tile thread's channels (one 16-byte vector) and the tile's time threads. */
template <typename T> constexpr int window_vec() { return vec16<T>(); }
template <typename T, int W> constexpr int window_ty() { return kThreads * window_vec<T>() / W; }

template <typename T, int S_, int NS_, int LAG_, int XT_> struct window_cfg_of {
    static constexpr int S = S_, NS = NS_, LAG = LAG_, XT = XT_;
    static constexpr int L = window_ty<T, kW>() * S;
    /* the tile's steps at W columns a chain: the same bytes as L at kW */
    static constexpr int len(int W) { return kThreads * window_vec<T>() / W * S; }
    static_assert(NS >= LAG + 2 && kSlots >= LAG + 2 && kSlots >= XT, "too few stages or slots");
};
template <typename T>
using window_cfg = typename std::conditional<sizeof(T) == 4, window_cfg_of<T, PRNN_WINDOW_CFG32>,
                                             window_cfg_of<T, PRNN_WINDOW_CFG16>>::type;
/* The stages' shared memory. */
template <typename T> constexpr size_t window_smem()
{
    return (size_t)window_cfg<T>::NS * 2 * window_cfg<T>::L * kW * sizeof(T);
}

struct window_params {
    const void *a;    // (B, T, H)  a_t (backward: the stage holds a_{t+1}; a_0 for dh0)
    void *h;          // (B, T, H)  forward: h_t written
    const void *hin;  // (B, T, H)  backward: the forward's h, h_{t-1} of step t
    void *da, *db;    // (B, T, H)  backward
    const float *h0;  // (B, H)     h_{-1}, NULL = zeros
    const float *dhT; // (B, H)     backward, NULL = zeros
    float *hT;        // (B, H)     forward, NULL = not wanted
    float *dh0;       // (B, H)     backward, NULL = not wanted
    int64_t T;
    int H, Rh, R, G, g, ng; /* chains a row, chains; blocks; positions a group, groups a window */
    unsigned long long *words;          // (chunks * R, 2, W) per tile its A and B words
    unsigned long long *gwords;         // (windows * ng * R, 2, W) group aggregates
    unsigned long long *pwords;         // (windows * R, W) the state after a window
    unsigned long long *counter, tbase; /* tickets: this launch's are tbase on */
    unsigned tag;
};

/* The window's geometry for R chains of T steps on sm_count SMs. */
struct window_geometry {
    int R, G, Gc, g, ng;
    int64_t NC, NT, windows;
    size_t nwords; /* words, gwords and pwords */
};

window_geometry window_geometry_of(int64_t T, int64_t R, int W, int L, int sm_count)
{
    window_geometry w;
    w.R = (int)R;
    w.Gc = sm_count / w.R;
    /* groups of g <= kMaxWords + 1 positions: folds of at most kMaxWords */
    if (w.Gc > (kMaxWords + 1) * (kMaxWords + 1))
        w.Gc = (kMaxWords + 1) * (kMaxWords + 1);
    w.G = w.Gc * w.R;
    w.g = 1;
    while (w.g * w.g < w.Gc)
        w.g++;
    w.ng = (w.Gc + w.g - 1) / w.g;
    w.NC = (T + L - 1) / L;
    w.NT = w.NC * w.R;
    w.windows = (w.NC + w.Gc - 1) / w.Gc;
    w.nwords = (size_t)w.NT * 2 * W + (size_t)(w.windows * w.ng * w.R) * 2 * W +
               (size_t)(w.windows * w.R) * W;
    return w;
}

/* ------------------------------------------------------------------------ */
/* Device side (sm_90 instructions: the kernel is empty on older targets;   */
/* the host simulator, dev/cuda/sim, brings its own)                        */

#if (defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900) || defined(PRNN_CUDA_SIM)
#define PRNN_WINDOW_DEVICE 1
#endif

#if defined(PRNN_WINDOW_DEVICE) && defined(PRNN_CUDA_SIM)
inline void mbar_init(uint64_t *m, unsigned n) { prnn_sim::mbar_init(m, n); }
inline void mbar_init_fence() {}
inline void mbar_arrive(uint64_t *m) { prnn_sim::mbar_arrive(m); }
inline void mbar_expect(uint64_t *m, unsigned bytes) { prnn_sim::mbar_expect(m, bytes); }
inline void mbar_wait(uint64_t *m, unsigned parity) { prnn_sim::mbar_wait(m, parity); }
inline void tma_3d(void *dst, const CUtensorMap *map, int x, int y, int b, uint64_t *m)
{
    prnn_sim::tma_3d(dst, map, x, y, b, m);
}
inline void tma_store_3d(const CUtensorMap *map, const void *src, int x, int y, int b)
{
    prnn_sim::tma_store_3d(map, src, x, y, b);
}
inline void bulk_commit() {}
inline void bulk_wait_read() {}
inline void bulk_wait_all() {}
inline void fence_async_smem() {}
inline void tile_threads_sync() { prnn_sim::named_sync(1, kThreads); }
#elif defined(PRNN_WINDOW_DEVICE)

__device__ __forceinline__ uint32_t saddr(const void *p)
{
    return (uint32_t)__cvta_generic_to_shared(p);
}

__device__ __forceinline__ void mbar_init(uint64_t *m, unsigned n)
{
    asm volatile("mbarrier.init.shared.b64 [%0], %1;" ::"r"(saddr(m)), "r"(n) : "memory");
}
__device__ __forceinline__ void mbar_init_fence()
{
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
}
__device__ __forceinline__ void mbar_arrive(uint64_t *m)
{
    asm volatile("mbarrier.arrive.shared.b64 _, [%0];" ::"r"(saddr(m)) : "memory");
}
__device__ __forceinline__ void mbar_expect(uint64_t *m, unsigned bytes)
{
    asm volatile("mbarrier.arrive.expect_tx.shared.b64 _, [%0], %1;" ::"r"(saddr(m)), "r"(bytes)
                 : "memory");
}
__device__ __forceinline__ void mbar_wait(uint64_t *m, unsigned parity)
{
    asm volatile("{\n"
                 ".reg .pred p;\n"
                 "WAIT_%=:\n"
                 "mbarrier.try_wait.parity.shared.b64 p, [%0], %1;\n"
                 "@!p bra WAIT_%=;\n"
                 "}" ::"r"(saddr(m)),
                 "r"(parity)
                 : "memory");
}
/* The box at channel x, time y of row b, counted on m. */
__device__ __forceinline__ void tma_3d(void *dst, const CUtensorMap *map, int x, int y, int b,
                                       uint64_t *m)
{
    asm volatile("cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::complete_tx::bytes "
                 "[%0], [%1, {%2, %3, %4}], [%5];" ::"r"(saddr(dst)),
                 "l"(map), "r"(x), "r"(y), "r"(b), "r"(saddr(m))
                 : "memory");
}
/* The box at channel x, time y of row b from src, in a bulk group of the
 * calling thread; rows past the tensor are not written. */
__device__ __forceinline__ void tma_store_3d(const CUtensorMap *map, const void *src, int x, int y,
                                             int b)
{
    asm volatile("cp.async.bulk.tensor.3d.global.shared::cta.bulk_group [%0, {%2, %3, %4}], [%1];" ::
                     "l"(map), "r"(saddr(src)), "r"(x), "r"(y), "r"(b)
                 : "memory");
}
__device__ __forceinline__ void bulk_commit()
{
    asm volatile("cp.async.bulk.commit_group;" ::: "memory");
}
/* The calling thread's bulk groups done reading shared memory. */
__device__ __forceinline__ void bulk_wait_read()
{
    asm volatile("cp.async.bulk.wait_group.read 0;" ::: "memory");
}
/* The calling thread's bulk groups complete. */
__device__ __forceinline__ void bulk_wait_all()
{
    asm volatile("cp.async.bulk.wait_group 0;" ::: "memory");
}
/* This thread's shared-memory stores ordered before later tensor-map copies. */
__device__ __forceinline__ void fence_async_smem()
{
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
}
/* The tile threads' own barrier (the exchange and the producer run on). */
__device__ __forceinline__ void tile_threads_sync()
{
    asm volatile("bar.sync 1, %0;" ::"n"(kThreads) : "memory");
}
#endif

/* Chunk c's rows [t0, t0 + n): the forward's from the start, the
 * backward's from the end (the short chunk last either way). */
template <int L, bool BWD>
__device__ __forceinline__ void chunk_rows(int64_t T, int64_t c, int64_t &t0, int &n)
{
    if constexpr (BWD) {
        const int64_t hi = T - c * L;
        t0 = hi - L > 0 ? hi - L : 0;
        n = (int)(hi - t0);
    } else {
        t0 = c * L;
        n = (int)(T - t0 < L ? T - t0 : L);
    }
}

/* A 16-byte vector of tile columns in shared memory, as floats. */
template <typename T>
__device__ __forceinline__ void smem_vec(const T *q, float (&v)[vec16<T>()])
{
    unpack16<T>(*reinterpret_cast<const uint4 *>(q), v);
}

/* The pairs (A, B) at q(e), e < n <= kMaxWords, polled until both words of
 * each carry tag (a word found missing is loaded again and tested in the
 * next round, so a round waits one round trip), then composed in order. */
template <int W, typename Q>
__device__ __forceinline__ void fold_pairs(Q q, int n, unsigned tag, float &fA, float &fB)
{
    unsigned long long va[kMaxWords], vb[kMaxWords];
#pragma unroll
    for (int e = 0; e < kMaxWords; e++) {
        va[e] = vb[e] = 0ull;
        if (e < n) {
            va[e] = ld_word(q(e));
            vb[e] = ld_word(q(e) + W);
        }
    }
    for (;;) {
        bool all = true;
#pragma unroll
        for (int e = 0; e < kMaxWords; e++) {
            if (e >= n)
                continue;
            if (word_tag(va[e]) != tag) {
                va[e] = ld_word(q(e));
                all = false;
            }
            if (word_tag(vb[e]) != tag) {
                vb[e] = ld_word(q(e) + W);
                all = false;
            }
        }
        if (all)
            break;
    }
    fA = 1.0f;
    fB = 0.0f;
#pragma unroll
    for (int e = 0; e < kMaxWords; e++) {
        if (e >= n)
            continue;
        const float qA = word_value(va[e]), qB = word_value(vb[e]);
        fB = qA * fB + qB;
        fA = qA * fA;
    }
}

/* f(std::true_type) where full, else f(std::false_type): a loop over a
 * tile's steps instantiated without and with its step guards. */
template <typename F> __device__ __forceinline__ void with_full(bool full, F &&f)
{
    if (full)
        f(std::true_type{});
    else
        f(std::false_type{});
}

/* The rows of a tensor-map box for tiles of L steps: at most 256 (the
 * map's limit), so a tile comes in L / window_box(L) boxes. */
constexpr int window_box(int L)
{
    return L > 256 ? L / 2 : L;
}

/* Tile n's chunk, chain, window, position, group and place in the group. */
struct tile_at {
    int64_t c, w;
    int r, pos, grp, m;
    __device__ tile_at(const window_params &p, int64_t n, int Gc)
    {
        c = n / p.R;
        r = (int)(n % p.R);
        w = c / Gc;
        pos = (int)(c % Gc);
        grp = pos / p.g;
        m = pos - grp * p.g;
    }
};

/* tb maps the forward's b or the backward's dh, th the forward's h. BULK
 * (the forward only): a full tile's finish writes h over its b in the
 * stage, and the producer copies it out by tensor-map stores before it
 * refills the stage (window_bulk). */
template <typename T, bool BWD, int W, bool BULK, int S, int NS, int LAG, int XT>
__global__ void __launch_bounds__(window_threads(W, XT), 1)
    window_kernel(const __grid_constant__ window_params p, const __grid_constant__ CUtensorMap ta,
                  const __grid_constant__ CUtensorMap tb, const __grid_constant__ CUtensorMap th)
{
#ifdef PRNN_WINDOW_DEVICE
    constexpr int V = window_vec<T>(), TX = W / V, L = window_ty<T, W>() * S;
    static_assert(!BULK || !BWD, "the forward's h only");
    static_assert(window_box(L) <= 256 && L % window_box(L) == 0, "a tile in whole boxes");
#ifdef PRNN_CUDA_SIM
    static __align__(128) unsigned char ring_raw[228u << 10];
#else
    extern __shared__ __align__(128) unsigned char ring_raw[]; /* (NS, 2, L, W) of T */
#endif
    __shared__ uint64_t full[NS], empty[NS], aggbar[kSlots], carrybar[kSlots];
    __shared__ int64_t stile[NS], atile[kSlots]; /* a stage's tile, an aggregate's (-1: none) */
    __shared__ __align__(16) float wgA[2][8][W], wgB[2][8][W]; /* the warps' sums, by column */
    __shared__ float aggA[kSlots][W], aggB[kSlots][W], carry[kSlots][W];
    T *const ring = reinterpret_cast<T *>(ring_raw);
    auto stage = [&](int64_t k) { return ring + (size_t)(k % NS) * 2 * L * W; };
    const int tid = threadIdx.x, R = p.R, Gc = p.G / p.R;
    const int64_t NC = (p.T + L - 1) / L, NT = NC * R;
    grid_dep_begin<false>(); /* holds most of the SM's shared memory: kernel_triggers_early */
    if (tid == 0) {
        for (int s = 0; s < NS; s++) {
            mbar_init(&full[s], 1);
            mbar_init(&empty[s], kThreads / 32);
        }
        for (int q = 0; q < kSlots; q++) {
            mbar_init(&aggbar[q], W);
            mbar_init(&carrybar[q], W);
        }
        mbar_init_fence();
    }
    __syncthreads();

    if (tid >= kThreads + XT * W) { /* the producer */
        if (tid != kThreads + XT * W)
            return;
        /* the stage of iteration j free again: its tile finished, and a full
         * tile's h (BULK) copied out of it */
        auto drain = [&](int64_t j) {
            mbar_wait(&empty[j % NS], (unsigned)((j / NS) & 1));
            if constexpr (BULK) {
                const int64_t n = stile[j % NS];
                int64_t t0;
                int nr;
                chunk_rows<L, BWD>(p.T, n / R, t0, nr);
                if (nr == L) {
                    const int r = (int)(n % R), x = r % p.Rh * W, b = r / p.Rh;
                    const T *sb = stage(j) + L * W;
#pragma unroll
                    for (int i = 0; i < L; i += window_box(L))
                        tma_store_3d(&th, sb + i * W, x, (int)(t0 + i), b);
                    bulk_commit();
                    bulk_wait_read();
                }
            }
        };
        for (int64_t k = 0;; k++) {
            if (k >= NS)
                drain(k - NS);
            const unsigned long long u = atomicAdd(p.counter, 1ull);
            const int64_t n = u >= p.tbase ? (int64_t)(u - p.tbase) : NT;
            if (n >= NT) { /* the end: a stage with no tile; the stages still out */
                stile[k % NS] = -1;
                mbar_arrive(&full[k % NS]);
                if (BULK) {
                    for (int64_t j = k >= NS - 1 ? k - NS + 1 : 0; j < k; j++)
                        drain(j);
                    bulk_wait_all();
                }
                return;
            }
            stile[k % NS] = n;
            int64_t t0;
            int nr;
            chunk_rows<L, BWD>(p.T, n / R, t0, nr);
            T *st = stage(k);
            const int r = (int)(n % R), x = r % p.Rh * W, b = r / p.Rh;
            /* forward: a and b at t0; backward: a at t0 + 1 (a step's
             * coefficient; row T comes as zeros), dh at t0 */
            mbar_expect(&full[k % NS], 2u * L * W * sizeof(T));
#pragma unroll
            for (int j = 0; j < L; j += window_box(L)) {
                tma_3d(st + j * W, &ta, x, (int)(t0 + j + (BWD ? 1 : 0)), b, &full[k % NS]);
                tma_3d(st + (L + j) * W, &tb, x, (int)(t0 + j), b, &full[k % NS]);
            }
        }
    }

    if (tid >= kThreads) { /* the exchange: column col of every tile's carry */
        const int col = (tid - kThreads) % W, team = (tid - kThreads) / W;
        for (int64_t k = team;; k += XT) {
            mbar_wait(&aggbar[k % kSlots], (unsigned)((k / kSlots) & 1));
            const int64_t n = atile[k % kSlots];
            if (n < 0)
                break;
            const tile_at t(p, n, Gc);
            int64_t gsz = p.g < Gc - t.grp * p.g ? p.g : Gc - t.grp * p.g;
            const int64_t first = t.w * Gc + t.grp * p.g;
            if (NC - first < gsz)
                gsz = NC - first;
            float mA, mB, gA, gB; /* the members before, the groups before */
            fold_pairs<W>(
                [&](int e) { return p.words + ((first + e) * R + t.r) * 2 * W + col; }, t.m, p.tag,
                mA, mB);
            const float myA = aggA[k % kSlots][col], myB = aggB[k % kSlots][col];
            if (t.m == gsz - 1) { /* the group's aggregate: its members before, then this tile */
                unsigned long long *gw = p.gwords + ((t.w * p.ng + t.grp) * R + t.r) * 2 * W;
                st_word(gw + col, make_word(myA * mA, p.tag));
                st_word(gw + W + col, make_word(myA * mB + myB, p.tag));
            }
            fold_pairs<W>(
                [&](int e) { return p.gwords + ((t.w * p.ng + e) * R + t.r) * 2 * W + col; },
                t.grp, p.tag, gA, gB);
            float P; /* the state after window w - 1: published, or h0 / dhT before window 0 */
            if (t.w > 0) {
                const unsigned long long *pw = p.pwords + ((t.w - 1) * R + t.r) * W + col;
                unsigned long long u = ld_word(pw);
                while (word_tag(u) != p.tag)
                    u = ld_word(pw);
                P = word_value(u);
            } else {
                const float *s0 = BWD ? p.dhT : p.h0;
                P = s0 ? s0[t.r * W + col] : 0.0f;
            }
            const float cin = mA * (gA * P + gB) + mB;
            carry[k % kSlots][col] = cin;
            mbar_arrive(&carrybar[k % kSlots]);
            if (t.pos == Gc - 1)
                st_word(p.pwords + (t.w * R + t.r) * W + col, make_word(myA * cin + myB, p.tag));
        }
        return;
    }

    /* the tile threads: (ty, tx) holds V columns of S steps; a warp holds RW time rows */
    const int tx = tid % TX, ty = tid / TX, warp = tid / 32, lane = tid % 32;
    float eA[LAG + 1][V], eB[LAG + 1][V]; /* the prefixes of tiles k, k - 1, ..., k - LAG */
    int64_t en[LAG + 1];                  /* and their tiles */
#pragma unroll
    for (int i = 0; i <= LAG; i++) {
        en[i] = -1;
#pragma unroll
        for (int v = 0; v < V; v++) {
            eA[i][v] = 1.0f;
            eB[i][v] = 0.0f;
        }
    }
    int64_t kend = -1; /* the iteration that found no tile */
    for (int64_t k = 0; kend < 0 || k < kend + LAG; k++) {
        float pA[V], pB[V];
#pragma unroll
        for (int v = 0; v < V; v++) {
            pA[v] = 1.0f;
            pB[v] = 0.0f;
        }
        int64_t n = -1;
        if (kend < 0) {
            mbar_wait(&full[k % NS], (unsigned)((k / NS) & 1));
            n = stile[k % NS];
            if (n < 0)
                kend = k;
        }
        if (n >= 0) { /* reduce tile k: a scan of the thread sums over the TY time threads */
            int64_t t0;
            int nr;
            chunk_rows<L, BWD>(p.T, n / R, t0, nr);
            T *const sa = stage(k), *const sb = stage(k) + L * W;
            if (BWD && n < R && ty == 0) { /* step T - 1 (this thread's first): g_T = dhT enters at 1 */
                const unsigned one =
                    sizeof(T) == 4 ? __float_as_uint(1.0f) : pack2<T>(1.0f, 1.0f);
                *reinterpret_cast<uint4 *>(sa + (nr - 1) * W + tx * V) =
                    make_uint4(one, one, one, one);
            }
            float A[V], Bs[V];
#pragma unroll
            for (int v = 0; v < V; v++) {
                A[v] = 1.0f;
                Bs[v] = 0.0f;
            }
            /* unguarded where the tile is full; not the forward's, measured
             * slower so (window_cfg) */
            with_full(BWD && nr == L, [&](auto full) {
                constexpr bool F = decltype(full)::value;
#pragma unroll
                for (int s = 0; s < S; s++) {
                    const int i = ty * S + s, row = BWD ? nr - 1 - i : i;
                    if (F || i < nr) {
                        float av[V], bv[V];
                        smem_vec<T>(sa + row * W + tx * V, av);
                        smem_vec<T>(sb + row * W + tx * V, bv);
#pragma unroll
                        for (int v = 0; v < V; v++) {
                            Bs[v] = av[v] * Bs[v] + bv[v];
                            A[v] = av[v] * A[v];
                        }
                    }
                }
            });
            /* the warp's RW time rows, an inclusive scan by shuffles; xA, xB
             * this thread's exclusive prefix in the warp */
#pragma unroll
            for (int d = TX; d < 32; d *= 2) {
#pragma unroll
                for (int v = 0; v < V; v++) {
                    const float qA = __shfl_up_sync(0xffffffffu, A[v], d),
                                qB = __shfl_up_sync(0xffffffffu, Bs[v], d);
                    if (lane >= d) {
                        Bs[v] = A[v] * qB + Bs[v];
                        A[v] = A[v] * qA;
                    }
                }
            }
            float xA[V], xB[V];
#pragma unroll
            for (int v = 0; v < V; v++) {
                const float qA = __shfl_up_sync(0xffffffffu, A[v], TX),
                            qB = __shfl_up_sync(0xffffffffu, Bs[v], TX);
                xA[v] = lane >= TX ? qA : 1.0f;
                xB[v] = lane >= TX ? qB : 0.0f;
            }
            if (lane >= 32 - TX) { /* the warp's last row: the warp's sum */
                smem_put<V>(&wgA[k & 1][warp][tx * V], A);
                smem_put<V>(&wgB[k & 1][warp][tx * V], Bs);
            }
            tile_threads_sync();
            float wA[V], wB[V]; /* the warps before this one */
#pragma unroll
            for (int v = 0; v < V; v++) {
                wA[v] = 1.0f;
                wB[v] = 0.0f;
            }
            for (int w = 0; w < warp; w++) {
                float qA[V], qB[V];
                smem_get<V>(&wgA[k & 1][w][tx * V], qA);
                smem_get<V>(&wgB[k & 1][w][tx * V], qB);
#pragma unroll
                for (int v = 0; v < V; v++) {
                    wB[v] = qA[v] * wB[v] + qB[v];
                    wA[v] = qA[v] * wA[v];
                }
            }
#pragma unroll
            for (int v = 0; v < V; v++) { /* this thread's exclusive prefix in the tile */
                pB[v] = xA[v] * wB[v] + xB[v];
                pA[v] = xA[v] * wA[v];
            }
            if (tid < W) { /* column tid's aggregate: published and handed to the exchange */
                float nA = 1.0f, nB = 0.0f;
                for (int w = 0; w < 8; w++) {
                    const float qA = wgA[k & 1][w][tid], qB = wgB[k & 1][w][tid];
                    nB = qA * nB + qB;
                    nA = qA * nA;
                }
                st_word(p.words + n * 2 * W + tid, make_word(nA, p.tag));
                st_word(p.words + n * 2 * W + W + tid, make_word(nB, p.tag));
                aggA[k % kSlots][tid] = nA;
                aggB[k % kSlots][tid] = nB;
                if (tid == 0)
                    atile[k % kSlots] = n;
                mbar_arrive(&aggbar[k % kSlots]);
            }
        }
#pragma unroll
        for (int j = LAG; j > 0; j--) {
            en[j] = en[j - 1];
#pragma unroll
            for (int v = 0; v < V; v++) {
                eA[j][v] = eA[j - 1][v];
                eB[j][v] = eB[j - 1][v];
            }
        }
        en[0] = n;
#pragma unroll
        for (int v = 0; v < V; v++) {
            eA[0][v] = pA[v];
            eB[0][v] = pB[v];
        }
        const int64_t kf = k - LAG, nf = en[LAG]; /* the tile finished in this iteration */
        if (kf < 0 || nf < 0)
            continue;
        int64_t t0;
        int nr;
        chunk_rows<L, BWD>(p.T, nf / R, t0, nr);
        /* the chain's row b and channels: states at scol (b H + channel), tensors at tcol */
        const int rf = (int)(nf % R);
        const int64_t scol = (int64_t)rf * W + tx * V,
                      tcol = rf / p.Rh * p.T * p.H + rf % p.Rh * W + tx * V;
        const T *const sa = stage(kf), *const sb = stage(kf) + L * W;
        auto carry_in = [&](float(&x)[V]) { /* the state entering the tile, once its carry is in */
            mbar_wait(&carrybar[kf % kSlots], (unsigned)((kf / kSlots) & 1));
#pragma unroll
            for (int v = 0; v < V; v++)
                x[v] = eA[LAG][v] * carry[kf % kSlots][tx * V + v] + eB[LAG][v];
        };
        /* A tile of L steps away from both ends of the row finishes with no
         * step guard and no t = 0 or t = T - 1 case. */
        const bool inner = nr == L && t0 > 0 && t0 + L < p.T;
        const bool bulk = BULK && nr == L; /* the producer copies h out (drain) */
        if constexpr (BWD) {
            with_full(inner, [&](auto full) {
                constexpr bool F = decltype(full)::value;
                uint4 hq[S]; /* h_{t-1} of this thread's steps, as stored, loaded before the wait */
#pragma unroll
                for (int s = 0; s < S; s++) {
                    const int i = ty * S + s;
                    const int64_t t = t0 + nr - 1 - i;
                    hq[s] = F || (i < nr && t >= 1)
                                ? __ldcs(reinterpret_cast<const uint4 *>(
                                      static_cast<const T *>(p.hin) + tcol + (t - 1) * p.H))
                                : make_uint4(0u, 0u, 0u, 0u);
                }
                float g[V];
                carry_in(g);
#pragma unroll
                for (int s = 0; s < S; s++) {
                    const int i = ty * S + s, row = nr - 1 - i;
                    if (F || i < nr) {
                        float av[V], bv[V], h[V], dav[V];
                        smem_vec<T>(sa + row * W + tx * V, av);
                        smem_vec<T>(sb + row * W + tx * V, bv);
#pragma unroll
                        for (int v = 0; v < V; v++)
                            g[v] = av[v] * g[v] + bv[v];
                        const int64_t t = t0 + row;
                        unpack16<T>(hq[s], h);
                        if (!F && t == 0) { /* h_{-1} = h0; dh0 = a_0 g_0 */
                            if (p.h0) {
                                load_f<V>(p.h0 + scol, h);
                            } else {
#pragma unroll
                                for (int v = 0; v < V; v++)
                                    h[v] = 0.0f;
                            }
                            if (p.dh0) {
                                float a0[V], d0[V];
                                load_vec<T, V>(p.a, tcol, a0);
#pragma unroll
                                for (int v = 0; v < V; v++)
                                    d0[v] = a0[v] * g[v];
                                store_f<V>(p.dh0 + scol, d0);
                            }
                        }
#pragma unroll
                        for (int v = 0; v < V; v++)
                            dav[v] = g[v] * h[v];
                        const int64_t o = tcol + t * p.H;
                        store_vec<T, V, true>(p.db, o, g);
                        store_vec<T, V, true>(p.da, o, dav);
                    }
                }
            });
        } else {
            with_full(inner, [&](auto full) {
                constexpr bool F = decltype(full)::value;
                float h[V];
                carry_in(h);
#pragma unroll
                for (int s = 0; s < S; s++) {
                    const int i = ty * S + s;
                    if (F || i < nr) {
                        float av[V], bv[V];
                        smem_vec<T>(sa + i * W + tx * V, av);
                        smem_vec<T>(sb + i * W + tx * V, bv);
#pragma unroll
                        for (int v = 0; v < V; v++)
                            h[v] = av[v] * h[v] + bv[v];
                        const int64_t t = t0 + i;
                        if (bulk) /* over this thread's b in the stage */
                            store_vec<T, V>(const_cast<T *>(sb), i * W + tx * V, h);
                        else
                            store_vec<T, V, true>(p.h, tcol + t * p.H, h);
                        if (!F && t == p.T - 1 && p.hT)
                            store_f<V>(p.hT + scol, h);
                    }
                }
            });
        }
        if (bulk)
            fence_async_smem();
        __syncwarp();
        if (lane == 0)
            mbar_arrive(&empty[kf % NS]);
    }
    /* every carry taken, so every aggregate slot read: one end mark a team */
    tile_threads_sync();
    if (tid < W)
        for (int j = 0; j < XT; j++) {
            if (tid == 0)
                atile[(kend + j) % kSlots] = -1;
            mbar_arrive(&aggbar[(kend + j) % kSlots]);
        }
#endif
}

/* ------------------------------------------------------------------------ */
/* Host side                                                                 */

/* cuTensorMapEncodeTiled from the driver, looked up once (nullptr: none). */
PFN_cuTensorMapEncodeTiled_v12000 encode_fn()
{
    static const PFN_cuTensorMapEncodeTiled_v12000 fn = [] {
        void *f = nullptr;
        cudaDriverEntryPointQueryResult q;
        if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &f, 12000, cudaEnableDefault,
                                             &q) != cudaSuccess ||
            q != cudaDriverEntryPointSuccess) {
            (void)cudaGetLastError();
            f = nullptr;
        }
        return reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(f);
    }();
    return fn;
}

/* A map of boxes W x L x 1 over the (B, T, H) tensor at base: a box never
 * crosses into the next row (steps past T come as zeros). */
template <typename T>
bool tile_map(CUtensorMap *m, const void *base, int64_t B, int64_t T_, int64_t H, int W, int L)
{
    const cuuint64_t dims[3] = {(cuuint64_t)H, (cuuint64_t)T_, (cuuint64_t)B},
                     strides[2] = {(cuuint64_t)H * sizeof(T), (cuuint64_t)(T_ * H) * sizeof(T)};
    const cuuint32_t box[3] = {(cuuint32_t)W, (cuuint32_t)window_box(L), 1}, es[3] = {1, 1, 1};
    return encode_fn()(
               m, sizeof(T) == 4 ? CU_TENSOR_MAP_DATA_TYPE_FLOAT32 : CU_TENSOR_MAP_DATA_TYPE_UINT16,
               3, const_cast<void *>(base), dims, strides, box, es, CU_TENSOR_MAP_INTERLEAVE_NONE,
               CU_TENSOR_MAP_SWIZZLE_NONE, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
               CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS;
}

/* Chains of 32 columns (fp32 storage: 128-byte rows) where the 64-column
 * chains number at most PRNN_WINDOW_NARROW (B H / 64 of them): twice the
 * chains, each with half the tiles of twice the steps. On an H200 (two
 * passes, fwd / fwd+bwd % of the copy roofline, WINDOW both ways, 64 -> 32
 * columns), run r65: fp32 1x1Mx64 67.9-68.0 / 79.1-79.4 -> 79.7-79.8 /
 * 86.0-86.2, 1x1Mx128 76.3-76.5 / 84.4-84.6 -> 87.4-87.7 / 90.5-90.6,
 * 2x1Mx64 77.1-77.2 / 84.3-84.4 -> 87.8-88.1 / 89.6, 1x256Kx64 61.7-62.5 /
 * 73.9-74.3 -> 70.8-71.6 / 80.2-80.7, 1x16Kx64 21.5-21.8 / 32.5-32.8 ->
 * 23.4-24.2 / 34.9-35.1; run r68: 1x1Mx256 84.0-84.2 / 88.8 -> 91.9-92.0
 * / 91.7, 4x1Mx64 83.6 / 87.9-88.0 -> 91.5-91.6 / 89.7-89.8, 1x256Kx256
 * 81.6-81.8 / 87.7-88.0 -> 89.4 / 90.9-91.1, 1x64Kx256 73.6-73.9 /
 * 82.4-82.7 -> 80.4-80.6 / 85.9-86.1, but 1x1Mx192 (six chains) 81.1 /
 * 87.9 -> 90.7 / 88.7-88.8 against AUTO's 85.5-86.3 / 89.8-90.1 then
 * (CHUNKED's forward). 16-bit rows of 64 bytes lost (bf16 1x1Mx64 fwd+bwd
 * 74.9-75.4 -> 69.2-69.5, r65), so 16-bit keeps 64 columns. The backward
 * cuts rows into 32-column chains only where B H / 64 <= PRNN_WINDOW_NARROW_BWD:
 * at three rows its 64-column chains measured faster (run r72, AUTO, 1x1Mx192
 * fwd+bwd 89.0 -> 91.9-92.0), at four rows as fast or faster (r68, the
 * backward alone from FIXED's figures: 4x1Mx64 90.9 at 64 columns against
 * 88.7 at 32, 1x1Mx256 91.9 against 91.5). Chains of 16 fp32 columns
 * (64-byte rows, run r72) lost 12-15 points forward: 1x1Mx64 81.6-82.1 ->
 * 66.5-67.1, 1x1Mx128 87.7-87.8 -> 74.9-75.0, 4x1Mx64 91.7-91.8 -> 79.7-79.8. */
#ifndef PRNN_WINDOW_NARROW
#define PRNN_WINDOW_NARROW 4
#endif
#ifndef PRNN_WINDOW_NARROW_BWD
#define PRNN_WINDOW_NARROW_BWD 2
#endif
/* The 16-bit forward, whose 64-byte rows at 32 columns lost on an H200
 * (above), cuts one or two rows of 64 into chains of 32 from 2^18 steps
 * on a card whose SMs get under 30 GB/s each of the peak memory bandwidth
 * (an H100: 25): there the 64-column window and the chunked scan stop
 * short of the bandwidth on the exchange's round trips, which half as
 * many bytes a tile and twice the chains shorten. On an H100 (run r83 of
 * dev/cuda/README.md, two passes, AUTO bf16 fwd / fwd+bwd %, 64 -> 32
 * columns; at 2^18 and over AUTO's forward was CHUNKED or WINDOW at 64):
 * 1x1Mx64 79.8-80.3 / 85.7-85.8 -> 80.9-81.0 / 88.0-88.2, 2x1Mx64
 * 86.8-86.9 / 89.6-89.7 -> 87.4-87.5 / 91.4-91.5, 1x512Kx64 70.7-70.9 /
 * 81.9-82.1 -> 76.1-76.4 / 85.5-86.1, 1x256Kx64 66.5-67.6 / 79.1-79.4 ->
 * 68.5-68.7 / 80.6-80.7; shorter rows gained nothing forward (1x128Kx64
 * 55.7-56.3 -> 56.0-56.2, 1x64Kx64 45.8-45.9 -> 43.0-43.8), and four rows
 * of 64 lost before (r73: 1x1Mx256 94.0-94.3 -> 90.5-90.6). The backward
 * keeps 64 columns (r73: 3-6 points slower at 32). */
#ifndef PRNN_WINDOW_NARROW16_ROWS /* lab settings: rows of 64 at most, */
#define PRNN_WINDOW_NARROW16_ROWS 2
#endif
#ifndef PRNN_WINDOW_NARROW16_GBPS /* GB/s an SM below which, */
#define PRNN_WINDOW_NARROW16_GBPS 30
#endif
#ifndef PRNN_WINDOW_NARROW16_T /* steps from which */
#define PRNN_WINDOW_NARROW16_T 262144
#endif
template <typename T, bool BWD> int window_width(const scan_params &p, const window_card &c)
{
    const int64_t rows = p.B * (p.H / kW);
    if constexpr (sizeof(T) == 2) {
        const bool lean = c.gbps_sm > 0 && c.gbps_sm < PRNN_WINDOW_NARROW16_GBPS;
        return !BWD && lean && rows <= PRNN_WINDOW_NARROW16_ROWS && p.T >= PRNN_WINDOW_NARROW16_T
                   ? kW / 2
                   : kW;
    }
    return rows <= (BWD ? PRNN_WINDOW_NARROW_BWD : PRNN_WINDOW_NARROW) ? kW / 2 : kW;
}

/* The forward's h by tensor-map stores from the stages (window_kernel's
 * BULK), for the two 32-column chains of one 64-column row of fp32 from
 * PRNN_WINDOW_BULK_T steps. On an H200 (run r66, two passes, AUTO fwd %,
 * 32-column chains, own stores -> copies): 1x1Mx64 79.7-79.8 -> 81.5-81.6,
 * 1x256Kx64 70.6-70.9 -> 72.2; but 1x64Kx64 50.2-50.8 -> 48.8-49.0,
 * 1x16Kx64 23.1-23.5 -> 21.7-22.7, and at four chains 2x1Mx64 88.2-88.4 ->
 * 87.3-87.6, 1x1Mx128 87.7-87.8 -> 87.3. */
#ifndef PRNN_WINDOW_BULK_T
#define PRNN_WINDOW_BULK_T 262144
#endif
bool window_bulk(const scan_params &p)
{
    return p.B * p.H <= kW && p.T >= PRNN_WINDOW_BULK_T;
}

} // namespace

/* ------------------------------------------------------------------------ */
/* Entry points (scan_cuda.cuh)                                             */

#ifndef PRNN_WINDOW_MIN_T
#define PRNN_WINDOW_MIN_T 2048
#endif

template <typename T, bool BWD> bool window_applies(const scan_params &p, const window_card &c)
{
    if (c.cc_major < 9 || p.H % kW || p.lengths || p.reverse || (BWD ? !p.dh : !p.b))
        return false;
    if (p.T < PRNN_WINDOW_MIN_T || p.T >= ((int64_t)1 << 31))
        return false;
    /* chains: 1 to 4 of 64 columns, or (window_width) 2 to 8 of 32 (backward: 2 to 4) */
    const int64_t R = p.B * (p.H / window_width<T, BWD>(p, c));
    if (p.B * (p.H / kW) > 4 || R > c.sm_count / 8)
        return false;
    if (p.h0 && reinterpret_cast<uintptr_t>(p.h0) % 16)
        return false;
    if (BWD && p.dh0 && reinterpret_cast<uintptr_t>(p.dh0) % 16)
        return false;
    if (!BWD && p.hT && reinterpret_cast<uintptr_t>(p.hT) % 16)
        return false;
    const size_t stat = 4096 * 4; /* the kernel's static shared memory, with room */
    return window_smem<T>() + stat <= (size_t)c.smem_optin && encode_fn() != nullptr;
}

template <typename T, bool BWD> int window_chain_width(const scan_params &p, const window_card &c)
{
    return window_width<T, BWD>(p, c);
}

template <typename T, bool BWD> size_t window_words(const scan_params &p, const window_card &c)
{
    const int W = window_width<T, BWD>(p, c);
    return window_geometry_of(p.T, p.B * p.H / W, W, window_cfg<T>::len(W), c.sm_count).nwords;
}

template <typename T, bool BWD, int W, bool BULK>
cudaError_t window_scan_w(const scan_params &p, const window_launch &wl,
                          unsigned long long *tickets)
{
    using C = window_cfg<T>;
    constexpr int L = C::len(W);
    const window_geometry w = window_geometry_of(p.T, p.B * p.H / W, W, L, wl.card.sm_count);
    auto kernel = window_kernel<T, BWD, W, BULK, C::S, C::NS, C::LAG, C::XT>;
    cudaError_t e =
        cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)window_smem<T>());
    if (e != cudaSuccess)
        return e;
    CUtensorMap ta, tb, th;
    if (!tile_map<T>(&ta, p.a, p.B, p.T, p.H, W, L) ||
        !tile_map<T>(&tb, BWD ? p.dh : p.b, p.B, p.T, p.H, W, L) ||
        (BULK && !tile_map<T>(&th, p.h_out, p.B, p.T, p.H, W, L)))
        return cudaErrorInvalidValue;
    if (!BULK)
        th = tb; /* not read */
    window_params wp;
    wp.a = p.a;
    wp.h = p.h_out;
    wp.hin = p.h_in;
    wp.da = p.da;
    wp.db = p.db;
    wp.h0 = p.h0;
    wp.dhT = p.dhT;
    wp.hT = p.hT;
    wp.dh0 = p.dh0;
    wp.T = p.T;
    wp.H = (int)p.H;
    wp.Rh = (int)(p.H / W);
    wp.R = w.R;
    wp.G = w.G;
    wp.g = w.g;
    wp.ng = w.ng;
    wp.words = wl.words;
    wp.gwords = wl.words + (size_t)w.NT * 2 * W;
    wp.pwords = wp.gwords + (size_t)(w.windows * w.ng * w.R) * 2 * W;
    wp.counter = wl.counter;
    wp.tbase = wl.ticket_base;
    wp.tag = wl.tag;
    PRNN_LAUNCH_SMEM(kernel, w.G, window_threads(W, C::XT), window_smem<T>(), wl.stream, wp, ta,
                     tb, th);
    e = cudaGetLastError();
    if (e == cudaSuccess) /* every tile's, and one past the end a block */
        *tickets = (unsigned long long)w.NT + (unsigned long long)w.G;
    return e;
}

template <typename T, bool BWD>
cudaError_t window_scan(const scan_params &p, const window_launch &wl, unsigned long long *tickets)
{
    /* 32 columns (window_width): fp32 both ways, 16-bit forward only */
    if constexpr (sizeof(T) == 4 || !BWD) {
        if (window_width<T, BWD>(p, wl.card) != kW) {
            if constexpr (sizeof(T) == 4 && !BWD)
                if (window_bulk(p))
                    return window_scan_w<T, BWD, kW / 2, true>(p, wl, tickets);
            return window_scan_w<T, BWD, kW / 2, false>(p, wl, tickets);
        }
    }
    return window_scan_w<T, BWD, kW, false>(p, wl, tickets);
}

#define PRNN_WINDOW_INSTANCES(T)                                                                   \
    template bool window_applies<T, false>(const scan_params &, const window_card &);              \
    template bool window_applies<T, true>(const scan_params &, const window_card &);               \
    template int window_chain_width<T, false>(const scan_params &, const window_card &);           \
    template int window_chain_width<T, true>(const scan_params &, const window_card &);            \
    template size_t window_words<T, false>(const scan_params &, const window_card &);              \
    template size_t window_words<T, true>(const scan_params &, const window_card &);               \
    template cudaError_t window_scan<T, false>(const scan_params &, const window_launch &,         \
                                               unsigned long long *);                              \
    template cudaError_t window_scan<T, true>(const scan_params &, const window_launch &,          \
                                              unsigned long long *);
PRNN_WINDOW_INSTANCES(float)
PRNN_WINDOW_INSTANCES(__nv_bfloat16)
PRNN_WINDOW_INSTANCES(__half)

} // namespace prnn_cuda
