/*
 * window.cu - a few-chain scan that holds a window of tiles on chip and
 * resolves each tile's carry in the worker itself: a bound and a design
 * test for B*H = 64 and 256 at long T (B = 1, H a multiple of 64), forward
 * and backward, fp32 (and bf16 storage in some configurations).
 *
 * A persistent grid, one block per SM (a cooperative launch). Worker j owns
 * chain r = j % R (R = H / 64: 64-column tiles) and the chunks c0 = j / R,
 * c0 + Gc, c0 + 2 Gc, ... of it (Gc = G / R, G the grid rounded down to a
 * multiple of R): the G tiles of one iteration are a window. A tile's a
 * and b arrive by two 2-D tensor-map copies (cp.async.bulk.tensor, counted
 * on an mbarrier) into a ring of NS shared-memory stages. In its iteration
 * k a worker reduces tile k from shared memory, scans it over its 16 time
 * threads and publishes its aggregate as tagged words; finishes an earlier
 * tile from its carry (re-running the steps from shared memory, writing h
 * once); and gives the freed stage to the next tile. The backward walks
 * time from the end: g_t = a_{t+1} g_{t+1} + dh_t, db = g, da = g h_{t-1}.
 *
 * How the carry is found (window_kernel's MODE, and a kernel of its
 * own):
 *  0  bound: the worker's own state (its chain through its own tiles):
 *     wrong results, the loop without any exchange between blocks;
 *  2  groups: windows cut into groups of g = ceil(sqrt(Gc)) positions; one
 *     member of each group (rotating) folds and publishes the group's
 *     aggregates; a carry is the state after the previous window (from
 *     the worker at its last position), the groups before its own and its
 *     group's members before it;
 *  3  the groups taking each word as first loaded, without waiting for
 *     its tag: wrong results when a word is late, the exchange's traffic
 *     without its coupling;
 *  4  lwindow_kernel: MODE 2 with tile k - 2 finished in iteration k, so
 *     that every word a fold needs was published an iteration earlier;
 *     the words are loaded at the iteration's start and composed after
 *     the tile's reduce;
 *  6  pwindow_kernel: pipelined, every fold's words loaded at an
 *     iteration's start and completed at its end, each worker keeping the
 *     state after the previous window itself (see the kernel's comment);
 *  8  cwindow_kernel: thread-block clusters, the blocks of a cluster
 *     exchanging their aggregates through distributed shared memory and
 *     only the clusters' totals going through L2, at a lag of two tiles;
 * 10  swindow_kernel: MODE 2's exchange in warps of its own (teams of 64
 *     threads, one a column), the copies issued by a producer thread, the
 *     256 tile threads finishing tile k - LAG in iteration k; tiles by
 *     worker as the others or by ticket (see the kernel's comment). Its
 *     ticketed backward is the library's WINDOW (src/scan_window.cu).
 *     With p.scan (SCANK > 0, tiles by ticket, one chain) block 0 takes
 *     no tiles and scans the aggregates into the state after every tile
 *     (scanner_loop), and a tile's exchange polls one state word;
 * 11  rwindow_kernel: MODE 10's forward with the tile dropped from shared
 *     memory once reduced and copied again for its finish, LAG tiles
 *     later, from L2 if its lines are still there;
 * 12  gwindow_kernel: MODE 10's forward with one more tile of lag in the
 *     tile threads' registers (setmaxnreg: the sm_90a build below; 136 registers for the tile
 *     threads, 120 for the rest, where the fewest spills were).
 * Modes 2, 4, 6, 8, 10, 11 and 12 are checked against a serial double-precision
 * reference. (Two more, measured in runs r13 and r15 and then removed,
 * are in the history at 6ac3da8: the worker folding all Gc - 1 aggregates
 * itself, and MODE 2's exchange by 64 threads of their own.)
 *
 * Switches of wparams, set per configuration: tstore (full tiles' results
 * written into their stage and stored by TMA instead of by the threads),
 * and for the pipelined kernel early (a freed stage's copy issued before
 * the folds complete), nofold (no words loaded: wrong results, the
 * kernel's structure alone), fast (the slices' addresses in full windows
 * computed once) and prof (thread 0's clocks per phase).
 *
 * Build (from the repository root):
 *   nvcc -std=c++17 -O3 -arch=sm_90 -Itools -Iinclude dev/cuda/window/window.cu
 *        tools/bench_flush.cu -o window
 * (--reg's kernel needs sm_90a: -gencode=arch=compute_90a,code=sm_90a
 * -DWINDOW_SM90A in place of -arch=sm_90.)
 * Run:   ./window [T [OPTION]], OPTION one of --lag, --nowait, --tma,
 *        --prof, --probe, --cluster, --ws, --reload, --scan (T default
 *        2^20). Prints a table against the copy roofline, queued timing as
 *        prnn_bench_cuda's.
 *        Without an option: the pipelined kernel beside
 *        the bound and the groups; --lag: lag one and two; --nowait: modes
 *        0, 2 and 3, forward; --tma: TMA stores; --prof: the pipelined
 *        kernel's phases, the no-fold control and the fast slices;
 *        --probe: an L2 hit's and a DRAM load's round trips, idle and
 *        under the bound's copies; --cluster: the cluster exchange;
 *        --ws: warp specialization; --reload: MODE 11; --reg: MODE 12; --scan: the
 *        scanner, alone (over aggregates published beforehand) and in
 *        MODE 10, one chain.
 */
#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <type_traits>

#include "check.h"

#include "bench_cuda.h" /* after check.h */

constexpr int kThreads = 256, TX = 16, TY = 16, W = 64; /* float4 column threads, time threads */
/* Counters a block, p.prof: the pipelined kernel's 9 phases' clocks (two
 * spare), a word's round trip, re-polling threads, iterations; --probe's
 * and --ws's use the first 4 and 9 (see their kernels) */
constexpr int kProf = 13;

struct wparams {
    const float *a, *b; /* backward: a and dh */
    float *h;           /* backward: db */
    const float *hf;    /* backward: the forward's h (h_{t-1} of step t) */
    float *hd;          /* backward: da */
    int64_t T;
    int H, R, G;
    unsigned long long *words;  /* (chunks * R, 2, W): per tile its A and B words */
    unsigned long long *gwords; /* MODE 2: (windows * ng * R, 2, W) group aggregates */
    unsigned long long *pwords; /* MODE 2: (windows * R, W) state after a window's last tile */
    int g, ng;                  /* MODE 2: positions a group, groups a window */
    unsigned tag;               /* this launch's tag, never 0 */
    int early;  /* pipelined: a freed stage's copy issued before the folds complete */
    int tstore; /* full tiles' results written into their stage and stored by TMA */
    int nofold; /* pipelined: no words loaded, the carry the worker's own state (wrong) */
    int fast;   /* pipelined: the full windows' slices' addresses computed once */
    unsigned long long *prof;    /* pipelined: per block kProf clock sums (null: none) */
    unsigned long long *counter; /* warp-specialized by ticket: the tickets' counter */
    unsigned long long tbase;    /* and this launch's first ticket */
    int hint; /* reload: the first copies evict-last in L2, the reloads evict-first */
    int scan; /* warp-specialized by ticket: block 0 scans the aggregates into states */
    int wide; /* forward, H = 64: the maps view [T, 64] as [T / 2, 128] (rows of 2 steps) */
};

__device__ __forceinline__ uint32_t saddr(const void *p)
{
    return (uint32_t)__cvta_generic_to_shared(p);
}

__device__ __forceinline__ void mbar_init(uint64_t *m, unsigned n)
{
    asm volatile("mbarrier.init.shared.b64 [%0], %1;" ::"r"(saddr(m)), "r"(n) : "memory");
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

/* The tagged words: strong (relaxed, .gpu scope) loads and stores, or with
 * WINDOW_WEAK weak ones cached in L2 only (.cg), each re-issued by the
 * polls (asm volatile). */
#ifndef WINDOW_WEAK
#define WINDOW_WEAK 0
#endif

__device__ __forceinline__ unsigned long long ld_word(const unsigned long long *p)
{
    unsigned long long v;
    if (WINDOW_WEAK)
        asm volatile("ld.global.cg.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
    else
        asm volatile("ld.relaxed.gpu.global.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
    return v;
}

__device__ __forceinline__ void st_word(unsigned long long *p, unsigned long long v)
{
    if (WINDOW_WEAK)
        asm volatile("st.global.cg.u64 [%0], %1;" ::"l"(p), "l"(v) : "memory");
    else
        asm volatile("st.relaxed.gpu.global.u64 [%0], %1;" ::"l"(p), "l"(v) : "memory");
}

__device__ __forceinline__ unsigned long long make_word(float v, unsigned tag)
{
    return ((unsigned long long)tag << 32) | __float_as_uint(v);
}

/* Chunk c's rows: [t0, t0 + n). The backward walks time from the end. */
template <int L, bool BWD>
__device__ __forceinline__ void chunk_rows(const wparams &p, int64_t c, int64_t &t0, int &n)
{
    const int64_t hi = BWD ? p.T - c * L : (c + 1) * L < p.T ? (c + 1) * L : p.T;
    t0 = BWD ? (hi - L > 0 ? hi - L : 0) : c * L;
    n = (int)(hi - t0);
}

__device__ __forceinline__ void tma_2d(void *dst, const CUtensorMap *map, int x, int y, uint64_t *m)
{
    asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes "
                 "[%0], [%1, {%2, %3}], [%4];" ::"r"(saddr(dst)),
                 "l"(map), "r"(x), "r"(y), "r"(saddr(m))
                 : "memory");
}

/* One thread copies chunk c of chain r into stage st: a's box of L rows,
 * then b's, stage row i holding time t0 + i (the backward's a: time
 * t0 + i + 1, the coefficient of its step t0 + i; rows past T - 1 come as
 * zeros). Tensor maps of boxes W x L over [T, H]. */
template <int L, bool BWD, typename Tst>
__device__ void issue_tile(const wparams &p, const CUtensorMap *ta, const CUtensorMap *tb, int r,
                           int64_t c, Tst *st, uint64_t *m)
{
    int64_t t0;
    int nb;
    chunk_rows<L, BWD>(p, c, t0, nb);
    mbar_expect(m, 2u * L * W * sizeof(Tst));
    if (!BWD && p.wide) { /* the same bytes in boxes of L / 2 rows of two steps */
        tma_2d(st, ta, 0, (int)(t0 / 2), m);
        tma_2d(st + L * W, tb, 0, (int)(t0 / 2), m);
        return;
    }
    tma_2d(st, ta, r * W, (int)(BWD ? t0 + 1 : t0), m);
    tma_2d(st + L * W, tb, r * W, (int)t0, m);
}

/* Four consecutive elements as floats, and back. A raw load (ldraw: as
 * stored, streaming) is converted by to4 where it is used, so that its
 * wait falls there and not at the load. */
__device__ __forceinline__ float4 to4(float4 v)
{
    return v;
}
__device__ __forceinline__ float4 to4(uint2 u)
{
    const float2 lo = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162 *>(&u.x));
    const float2 hi = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162 *>(&u.y));
    return make_float4(lo.x, lo.y, hi.x, hi.y);
}
__device__ __forceinline__ uint2 pack4(float4 v)
{
    const __nv_bfloat162 lo = __floats2bfloat162_rn(v.x, v.y), hi = __floats2bfloat162_rn(v.z, v.w);
    uint2 u;
    u.x = *reinterpret_cast<const unsigned *>(&lo);
    u.y = *reinterpret_cast<const unsigned *>(&hi);
    return u;
}
template <typename Tst> struct raw4 {
    using type = float4;
};
template <> struct raw4<__nv_bfloat16> {
    using type = uint2;
};
__device__ __forceinline__ float4 load4(const float *q)
{
    return *reinterpret_cast<const float4 *>(q);
}
__device__ __forceinline__ float4 load4(const __nv_bfloat16 *q)
{
    return to4(*reinterpret_cast<const uint2 *>(q));
}
__device__ __forceinline__ float4 ldraw(const float *q)
{
    return __ldcs(reinterpret_cast<const float4 *>(q));
}
__device__ __forceinline__ uint2 ldraw(const __nv_bfloat16 *q)
{
    return __ldcs(reinterpret_cast<const uint2 *>(q));
}
__device__ __forceinline__ void stcs4(float *q, float4 v)
{
    __stcs(reinterpret_cast<float4 *>(q), v);
}
__device__ __forceinline__ void stcs4(__nv_bfloat16 *q, float4 v)
{
    __stcs(reinterpret_cast<uint2 *>(q), pack4(v));
}
__device__ __forceinline__ void put4(float *q, float4 v)
{
    *reinterpret_cast<float4 *>(q) = v;
}
__device__ __forceinline__ void put4(__nv_bfloat16 *q, float4 v)
{
    *reinterpret_cast<uint2 *>(q) = pack4(v);
}

/* The composition, in order, of the elements e0 <= e < e1 of a sequence of
 * published aggregates, column col: at(e, &single) gives element e's A word
 * (its B word W further on), or with single set a state word (A = 0, B =
 * the state). Loads NB elements at once and polls those not out yet. */
template <int NB, typename At, bool WAIT = true>
__device__ __forceinline__ void fold_words(At at, int e0, int e1, unsigned tag, float &fA,
                                           float &fB)
{
    fA = 1.0f;
    fB = 0.0f;
    for (int ib = e0; ib < e1; ib += NB) {
        unsigned long long va[NB], vb[NB];
        bool one[NB];
#pragma unroll
        for (int e = 0; e < NB; e++) {
            va[e] = vb[e] = 0ull;
            one[e] = false;
        }
        for (int round = 0;; round++) {
            /* a word found missing is loaded again and checked in the next
             * round, so that a round waits for one round trip, not one a word */
            bool all = true;
#pragma unroll
            for (int e = 0; e < NB; e++) {
                if (ib + e >= e1)
                    continue;
                bool single;
                const unsigned long long *q = at(ib + e, &single);
                one[e] = single;
                if ((unsigned)(va[e] >> 32) != tag) {
                    va[e] = ld_word(q);
                    all = false;
                }
                if (!single && (unsigned)(vb[e] >> 32) != tag) {
                    vb[e] = ld_word(q + W);
                    all = false;
                }
            }
            if (all || !WAIT)
                break;
        }
#pragma unroll
        for (int e = 0; e < NB; e++) {
            if (ib + e >= e1)
                continue;
            const float qA = one[e] ? 0.0f : __uint_as_float((unsigned)va[e]);
            const float qB =
                one[e] ? __uint_as_float((unsigned)va[e]) : __uint_as_float((unsigned)vb[e]);
            fB = qA * fB + qB;
            fA = qA * fA;
        }
    }
}

/* ------------------------------------------------------------------------ */
/* The tile's work, shared by the kernels                                    */

/* Thread (ty, tx)'s summary (A, Bs) of its S steps of the tile in stage
 * (sa, sb) with nr valid steps (step i at stage row srow). */
template <typename Tst, int S, bool BWD>
__device__ __forceinline__ void tile_summary(const Tst *sa, const Tst *sb, int nr, int ty, int tx,
                                             float (&A)[4], float (&Bs)[4])
{
#pragma unroll
    for (int v = 0; v < 4; v++) {
        A[v] = 1.0f;
        Bs[v] = 0.0f;
    }
#pragma unroll
    for (int s = 0; s < S; s++) {
        const int i = ty * S + s, row = BWD ? nr - 1 - i : i;
        if (i < nr) {
            const float4 av = load4(sa + row * W + tx * 4), bv = load4(sb + row * W + tx * 4);
            const float a4[4] = {av.x, av.y, av.z, av.w}, b4[4] = {bv.x, bv.y, bv.z, bv.w};
#pragma unroll
            for (int v = 0; v < 4; v++) {
                Bs[v] = a4[v] * Bs[v] + b4[v];
                A[v] = a4[v] * A[v];
            }
        }
    }
}

/* The warp's two time rows (lanes 16..31 compose lanes 0..15): this
 * thread's exclusive prefix within the warp (xA, xB), and the warp's
 * inclusive aggregate into wg (read after a barrier by warp_prefix). */
__device__ __forceinline__ void warp_rows(const float (&A)[4], const float (&Bs)[4], int lane,
                                          int warp, int tx, float4 (*wgA)[TX], float4 (*wgB)[TX],
                                          float (&xA)[4], float (&xB)[4])
{
    float iA[4], iB[4];
#pragma unroll
    for (int v = 0; v < 4; v++) {
        const float qA = __shfl_up_sync(0xffffffffu, A[v], 16),
                    qB = __shfl_up_sync(0xffffffffu, Bs[v], 16);
        xA[v] = lane >= 16 ? qA : 1.0f;
        xB[v] = lane >= 16 ? qB : 0.0f;
        iB[v] = A[v] * xB[v] + Bs[v];
        iA[v] = A[v] * xA[v];
    }
    if (lane >= 16) {
        wgA[warp][tx] = make_float4(iA[0], iA[1], iA[2], iA[3]);
        wgB[warp][tx] = make_float4(iB[0], iB[1], iB[2], iB[3]);
    }
}

/* After the barrier: this thread's exclusive prefix in the tile (pA, pB)
 * and (threads < W, column tid) the tile's aggregate (nA, nB). */
__device__ __forceinline__ void tile_prefix(int tid, int warp, int tx, const float4 (*wgA)[TX],
                                            const float4 (*wgB)[TX], const float (&xA)[4],
                                            const float (&xB)[4], float (&pA)[4], float (&pB)[4],
                                            float &nA, float &nB)
{
    float wA[4] = {1.0f, 1.0f, 1.0f, 1.0f}, wB[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    for (int w = 0; w < warp; w++) {
        const float4 qa = wgA[w][tx], qb = wgB[w][tx];
        const float qA[4] = {qa.x, qa.y, qa.z, qa.w}, qB[4] = {qb.x, qb.y, qb.z, qb.w};
#pragma unroll
        for (int v = 0; v < 4; v++) {
            wB[v] = qA[v] * wB[v] + qB[v];
            wA[v] = qA[v] * wA[v];
        }
    }
#pragma unroll
    for (int v = 0; v < 4; v++) {
        pB[v] = xA[v] * wB[v] + xB[v];
        pA[v] = xA[v] * wA[v];
    }
    nA = 1.0f;
    nB = 0.0f;
    if (tid < W)
        for (int w = 0; w < 8; w++) {
            const float qA = reinterpret_cast<const float *>(&wgA[w][tid / 4])[tid % 4];
            const float qB = reinterpret_cast<const float *>(&wgB[w][tid / 4])[tid % 4];
            nB = qA * nB + qB;
            nA = qA * nA;
        }
}

/* The newest tile's prefixes (pA, pB) pushed onto the list eA, eB of the
 * tiles held (index 0 the newest), the oldest dropped. */
template <int N>
__device__ __forceinline__ void push_prefix(float (&eA)[N][4], float (&eB)[N][4],
                                            const float (&pA)[4], const float (&pB)[4])
{
#pragma unroll
    for (int j = N - 1; j > 0; j--)
#pragma unroll
        for (int v = 0; v < 4; v++) {
            eA[j][v] = eA[j - 1][v];
            eB[j][v] = eB[j - 1][v];
        }
#pragma unroll
    for (int v = 0; v < 4; v++) {
        eA[0][v] = pA[v];
        eB[0][v] = pB[v];
    }
}

/* The backward's h_{t-1} for thread (ty, tx)'s steps of chunk c, loaded
 * raw ahead of the tile's finish. */
template <typename Tst, int S, int L>
__device__ __forceinline__ void hprev_load(const wparams &p, const Tst *hf, int64_t c, int r,
                                           int ty, int tx, typename raw4<Tst>::type (&hq)[S])
{
    int64_t t0;
    int nr;
    chunk_rows<L, true>(p, c, t0, nr);
#pragma unroll
    for (int s = 0; s < S; s++) {
        const int i = ty * S + s;
        const int64_t t = t0 + nr - 1 - i;
        hq[s] = i < nr && t >= 1 ? ldraw(hf + (t - 1) * p.H + r * W + tx * 4)
                                 : typename raw4<Tst>::type{};
    }
}

/* Thread (ty, tx)'s steps of chunk c, from the state st entering them:
 * re-run from the stage, h written (the backward: db, and da = db h_{t-1}):
 * to global memory by the threads, or with STAGE into the stage itself, h
 * over b's rows (db over dh's, da over a's; row i of both boxes is time
 * t0 + i), for a TMA store. */
template <typename Tst, int S, int L, bool BWD, bool STAGE = false>
__device__ __forceinline__ void
tile_finish(const wparams &p, Tst *sa, Tst *sb, int64_t c, int r, int ty, int tx, float (&st)[4],
            const typename raw4<Tst>::type *hq, Tst *hout, Tst *dout)
{
    int64_t t0;
    int nr;
    chunk_rows<L, BWD>(p, c, t0, nr);
    const int64_t colo = r * W + tx * 4;
#pragma unroll
    for (int s = 0; s < S; s++) {
        const int i = ty * S + s, row = BWD ? nr - 1 - i : i;
        if (i < nr) {
            const float4 av = load4(sa + row * W + tx * 4), bv = load4(sb + row * W + tx * 4);
            st[0] = av.x * st[0] + bv.x;
            st[1] = av.y * st[1] + bv.y;
            st[2] = av.z * st[2] + bv.z;
            st[3] = av.w * st[3] + bv.w;
            const float4 h = make_float4(st[0], st[1], st[2], st[3]);
            float4 d = h;
            if (BWD) {
                const float4 q = to4(hq[s]);
                d = make_float4(st[0] * q.x, st[1] * q.y, st[2] * q.z, st[3] * q.w);
            }
            const int64_t o = (t0 + row) * p.H + colo;
            if (STAGE) {
                put4(sb + row * W + tx * 4, h);
                if (BWD)
                    put4(sa + row * W + tx * 4, d);
            } else {
                stcs4(hout + o, h);
                if (BWD)
                    stcs4(dout + o, d);
            }
        }
    }
}

/* TMA stores of a stage's box, their group committed, and the waits: until
 * the stores have read shared memory, or until they are done. */
__device__ __forceinline__ void tma_store_2d(const CUtensorMap *map, int x, int y, const void *src)
{
    asm volatile(
        "cp.async.bulk.tensor.2d.global.shared::cta.bulk_group [%0, {%1, %2}], [%3];" ::"l"(map),
        "r"(x), "r"(y), "r"(saddr(src))
        : "memory");
}
__device__ __forceinline__ void bulk_commit()
{
    asm volatile("cp.async.bulk.commit_group;" ::: "memory");
}
__device__ __forceinline__ void bulk_wait_read()
{
    asm volatile("cp.async.bulk.wait_group.read 0;" ::: "memory");
}
__device__ __forceinline__ void bulk_wait_all()
{
    asm volatile("cp.async.bulk.wait_group 0;" ::: "memory");
}

/* Chunk c finished from the stage (sa, sb): a full tile with p.tstore in the
 * stage and stored by TMA (a block barrier inside; thread 0 commits the
 * stores), any other by the threads' own stores. */
template <typename Tst, int S, int L, bool BWD>
__device__ __forceinline__ void
finish_chunk(const wparams &p, const CUtensorMap *th, const CUtensorMap *td, Tst *sa, Tst *sb,
             int64_t c, int r, int ty, int tx, int tid, float (&st)[4],
             const typename raw4<Tst>::type *hq, Tst *hout, Tst *dout)
{
    int64_t t0;
    int nr;
    chunk_rows<L, BWD>(p, c, t0, nr);
    if (!p.tstore || nr != L) {
        tile_finish<Tst, S, L, BWD>(p, sa, sb, c, r, ty, tx, st, hq, hout, dout);
        return;
    }
    tile_finish<Tst, S, L, BWD, true>(p, sa, sb, c, r, ty, tx, st, hq, hout, dout);
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
    __syncthreads();
    if (tid == 0) {
        tma_store_2d(th, r * W, (int)t0, sb);
        if (BWD)
            tma_store_2d(td, r * W, (int)t0, sa);
        bulk_commit();
    }
}

/* The carry's words of tile chunk w * Gc + pos (window w, group grp),
 * column col: the state after window w - 1 (a state word, w > 0), the
 * aggregates of the groups before grp, those of grp's members before pos.
 * at(e, &single) is element e's word; m the elements. */
struct carry_words {
    const wparams *p;
    int64_t w;
    int R, r, Gc, pos, grp, col, hasP;
    __device__ int count() const { return hasP + grp + (pos - grp * p->g); }
    __device__ const unsigned long long *operator()(int e, bool *single) const
    {
        *single = hasP && e == 0;
        if (*single)
            return p->pwords + ((w - 1) * R + r) * W + col;
        const int e2 = e - hasP;
        if (e2 < grp)
            return p->gwords + ((w * p->ng + e2) * R + r) * 2 * W + col;
        return p->words + ((w * Gc + grp * p->g + (e2 - grp)) * R + r) * 2 * W + col;
    }
};

/* The aggregates of group grp's members in window w: size and words. */
struct group_words {
    const wparams *p;
    int64_t first;
    int R, r, col;
    __device__ const unsigned long long *operator()(int e, bool *single) const
    {
        *single = false;
        return p->words + ((first + e) * R + r) * 2 * W + col;
    }
};

__device__ __forceinline__ int group_size(const wparams &p, int64_t w, int Gc, int grp, int64_t NC)
{
    const int64_t first = w * Gc + grp * p.g;
    int gsz = p.g < Gc - grp * p.g ? p.g : Gc - grp * p.g;
    if (NC - first < gsz)
        gsz = (int)(NC - first);
    return gsz;
}

/* wparams' float pointers as the storage type they carry. */
template <typename Tst, typename P> __device__ __forceinline__ Tst *as_storage(P *q)
{
    using V = typename std::conditional<std::is_const<Tst>::value, const void, void>::type;
    return static_cast<Tst *>(static_cast<V *>(q));
}

/* A worker's place: its threads' roles, its chain and its chunks. */
struct worker {
    int tid, tx, ty, warp, lane; /* thread (ty, tx): 4 columns of 16 time rows' steps */
    int R, Gc, r, pos, grp;      /* chain r, position pos (group grp) in every window */
    int part, col;               /* a fold's part and column */
    int64_t c0, NC, nk;          /* first chunk, chunks a chain, tiles of this worker */
};

template <int L> __device__ __forceinline__ worker worker_at(const wparams &p)
{
    worker w;
    w.tid = threadIdx.x;
    w.tx = w.tid % TX;
    w.ty = w.tid / TX;
    w.warp = w.tid / 32;
    w.lane = w.tid % 32;
    w.R = p.R;
    w.Gc = p.G / p.R;
    w.r = (int)blockIdx.x % p.R;
    w.pos = (int)blockIdx.x / p.R;
    w.grp = w.pos / p.g;
    w.part = w.tid / W;
    w.col = w.tid % W;
    w.c0 = w.pos;
    w.NC = (p.T + L - 1) / L;
    w.nk = w.c0 < w.NC ? (w.NC - 1 - w.c0) / w.Gc + 1 : 0;
    return w;
}

/* The stages' mbarriers set up and the first NS tiles' copies issued;
 * block-wide. */
template <int L, int NS, bool BWD, typename Tst>
__device__ __forceinline__ void ring_start(const wparams &p, const CUtensorMap *ta,
                                           const CUtensorMap *tb, const worker &w, Tst *ring,
                                           uint64_t *full)
{
    if (w.tid == 0) {
        for (int s = 0; s < NS; s++)
            mbar_init(&full[s], 1);
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
        for (int64_t k = 0; k < NS && k < w.nk; k++)
            issue_tile<L, BWD>(p, ta, tb, w.r, w.c0 + k * w.Gc, ring + (size_t)k * 2 * L * W,
                               &full[k]);
    }
    __syncthreads();
}

/* Column c's (A, B) as tagged words at dst + c and dst + W + c. */
__device__ __forceinline__ void publish_pair(unsigned long long *dst, int c, float a, float b,
                                             unsigned tag)
{
    st_word(dst + c, make_word(a, tag));
    st_word(dst + W + c, make_word(b, tag));
}

/* The four parts of column c's fold composed in order onto (a, b). */
__device__ __forceinline__ void compose_parts(const float (*pa)[W], const float (*pb)[W], int c,
                                              float &a, float &b)
{
    for (int q = 0; q < 4; q++) {
        b = pa[q][c] * b + pb[q][c];
        a = pa[q][c] * a;
    }
}

/* ------------------------------------------------------------------------ */
/* Lag 1: tile k - 1 finished in iteration k (MODE 0 bound, 2 groups, 3 the */
/* groups taking the words as first loaded, without waiting for their tags: */
/* wrong results, the exchange's traffic without its coupling)              */

/* --probe: the clocks from a load's issue until its value is used (stored
 * to sink), of a tagged word (ld_word) or of an element bypassing L1. */
__device__ __forceinline__ unsigned long long time_word(const unsigned long long *q,
                                                        volatile unsigned long long &sink)
{
    const unsigned long long t0 = clock64();
    sink = ld_word(q);
    return clock64() - t0;
}

__device__ __forceinline__ unsigned long long time_element(const float *q,
                                                           volatile unsigned long long &sink)
{
    float v;
    const unsigned long long t0 = clock64();
    asm volatile("ld.global.cg.f32 %0, [%1];" : "=f"(v) : "l"(q) : "memory");
    sink = __float_as_uint(v);
    return clock64() - t0;
}

template <typename Tst, int S, int NS, int MODE, bool BWD>
__global__ void __launch_bounds__(kThreads, 1)
    window_kernel(const __grid_constant__ wparams p, const __grid_constant__ CUtensorMap ta,
                  const __grid_constant__ CUtensorMap tb, const __grid_constant__ CUtensorMap th,
                  const __grid_constant__ CUtensorMap td)
{
    constexpr int L = TY * S;
    extern __shared__ __align__(128) unsigned char ring_raw[]; /* (NS, 2, L, W) of Tst */
    __shared__ uint64_t full[NS];
    __shared__ float4 wgA[8][TX], wgB[8][TX];
    __shared__ float partA[4][W], partB[4][W], gpA[4][W], gpB[4][W], carry[W];
    Tst *const ring = reinterpret_cast<Tst *>(ring_raw);
    const Tst *const hf = as_storage<const Tst>(p.hf);
    Tst *const hout = as_storage<Tst>(p.h), *const dout = as_storage<Tst>(p.hd);
    const worker wk = worker_at<L>(p);
    const int tid = wk.tid, tx = wk.tx, ty = wk.ty, warp = wk.warp, lane = wk.lane;
    const int R = wk.R, Gc = wk.Gc, r = wk.r, pos = wk.pos, grp = wk.grp, part = wk.part,
              col = wk.col;
    const int64_t c0 = wk.c0, NC = wk.NC, nk = wk.nk;
    auto stage = [&](int64_t k) { return ring + (size_t)(k % NS) * 2 * L * W; };
    ring_start<L, NS, BWD>(p, &ta, &tb, wk, ring, full);

    float eA[4] = {1.0f, 1.0f, 1.0f, 1.0f},
          eB[4] = {0.0f, 0.0f, 0.0f, 0.0f}; /* tile k - 1's prefixes */
    float aggA = 1.0f, aggB = 0.0f;         /* tile k - 1's aggregate (threads < W) */
    float X = 0.0f; /* MODE 0: the state after this worker's last finished tile */
    /* p.prof (MODE 0): thread 0 times, each iteration, a load of a word it
     * stored (an L2 hit) and of an input element no copy has asked for yet
     * (from DRAM), each until its value is used */
    __shared__ volatile unsigned long long sink;
    unsigned long long probe[4] = {0, 0, 0, 0}; /* L2 clocks, loads, DRAM clocks, loads */
    unsigned long long *const pword = p.words + (size_t)blockIdx.x * 2 * W;
    if (p.prof && tid == 0)
        st_word(pword, make_word(1.0f, p.tag));
    for (int64_t k = 0; k <= nk; k++) {
        const int64_t w = k - 1,
                      cf = c0 + w * Gc; /* the window and chunk finished in this iteration */
        if (p.prof && tid == 0 && k >= 2) {
            probe[0] += time_word(pword, sink);
            probe[1]++;
            const int64_t cp = c0 + (k + NS + 1) * Gc; /* a chunk not yet copied */
            if (cp < NC) {
                const int64_t row = cp * L + L / 2 < p.T ? cp * L + L / 2 : p.T - 1;
                probe[2] += time_element(p.a + row * p.H + r * W, sink);
                probe[3]++;
            }
        }
        typename raw4<Tst>::type hq[BWD ? S : 1];
        if constexpr (BWD)
            if (k >= 1)
                hprev_load<Tst, S, L>(p, hf, cf, r, ty, tx, hq);
        if (MODE >= 2 && k >= 1) {
            /* this iteration's leader folds its group's aggregates of window w */
            const int gsz = group_size(p, w, Gc, grp, NC);
            if (pos - grp * p.g == (int)(k % gsz)) {
                const group_words at{&p, w * Gc + grp * p.g, R, r, col};
                float fA, fB;
                fold_words<4, group_words, MODE == 2>(at, part * gsz / 4, (part + 1) * gsz / 4,
                                                      p.tag, fA, fB);
                gpA[part][col] = fA;
                gpB[part][col] = fB;
                __syncthreads();
                if (tid < W) {
                    float a = 1.0f, b = 0.0f;
                    compose_parts(gpA, gpB, tid, a, b);
                    publish_pair(p.gwords + ((w * p.ng + grp) * R + r) * 2 * W, tid, a, b, p.tag);
                }
            }
        }
        float pA[4] = {1.0f, 1.0f, 1.0f, 1.0f}, pB[4] = {0.0f, 0.0f, 0.0f, 0.0f}, nA = 1.0f,
              nB = 0.0f;
        if (k < nk) {
            int64_t t0;
            int nr;
            chunk_rows<L, BWD>(p, c0 + k * Gc, t0, nr);
            mbar_wait(&full[k % NS], (unsigned)((k / NS) & 1));
            float A[4], Bs[4], xA[4], xB[4];
            tile_summary<Tst, S, BWD>(stage(k), stage(k) + L * W, nr, ty, tx, A, Bs);
            warp_rows(A, Bs, lane, warp, tx, wgA, wgB, xA, xB);
            __syncthreads();
            tile_prefix(tid, warp, tx, wgA, wgB, xA, xB, pA, pB, nA, nB);
            if (MODE >= 2 && tid < W)
                publish_pair(p.words + ((c0 + k * Gc) * R + r) * 2 * W, tid, nA, nB, p.tag);
        }
        if (MODE >= 2 && k >= 1) {
            /* tile k - 1's carry: its words folded in four parts */
            const carry_words at{&p, w, R, r, Gc, pos, grp, col, w > 0};
            const int m = at.count();
            float fA, fB;
            fold_words<8, carry_words, MODE == 2>(at, part * m / 4, (part + 1) * m / 4, p.tag, fA,
                                                  fB);
            partA[part][col] = fA;
            partB[part][col] = fB;
        }
        __syncthreads(); /* the warp aggregates read; the carry's parts */
        if (k >= 1) {
            if (tid < W) {
                float x = MODE >= 2 ? 0.0f : X,
                      unused = 1.0f; /* MODE 2: h0, the state after window w - 1 leads */
                if (MODE >= 2)
                    compose_parts(partA, partB, tid, unused, x);
                carry[tid] = x;
                X = aggA * x + aggB;
                if (MODE >= 2 && pos == Gc - 1)
                    st_word(p.pwords + (w * R + r) * W + tid, make_word(X, p.tag));
            }
            __syncthreads();
            float st[4];
#pragma unroll
            for (int v = 0; v < 4; v++)
                st[v] = eA[v] * carry[tx * 4 + v] + eB[v];
            finish_chunk<Tst, S, L, BWD>(p, &th, &td, stage(k - 1), stage(k - 1) + L * W, cf, r, ty,
                                         tx, tid, st, hq, hout, dout);
        }
        __syncthreads(); /* stage k - 1 and the carry read */
        if (k >= 1 && tid == 0 && k - 1 + NS < nk) {
            bulk_wait_read();
            asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
            issue_tile<L, BWD>(p, &ta, &tb, r, c0 + (k - 1 + NS) * Gc, stage(k - 1 + NS),
                               &full[(k - 1 + NS) % NS]);
        }
#pragma unroll
        for (int v = 0; v < 4; v++) {
            eA[v] = pA[v];
            eB[v] = pB[v];
        }
        aggA = nA;
        aggB = nB;
    }
    if (tid == 0)
        bulk_wait_all();
    if (p.prof && tid == 0)
        for (int i = 0; i < 4; i++)
            p.prof[blockIdx.x * kProf + i] = probe[i];
}

/* ------------------------------------------------------------------------ */
/* Lag 2: tile k - 2 finished in iteration k, the groups' words loaded early */
/*
 * As MODE 2, but every word an iteration folds was published in an earlier
 * iteration: the leaders fold window k - 1's aggregates, the carries need
 * window k - 2's words and the groups' of window k - 2, folded an
 * iteration ago. No block waits on another's current iteration. The words
 * are loaded at the iteration's start and composed after the tile's
 * summary, so their L2 round trip overlaps it; the parts meet in the tile
 * scan's barrier. NS >= 4: tiles k - 2, k - 1 and k held, NS - 3 in flight.
 */
template <int NB> struct words_in_flight {
    unsigned long long va[NB], vb[NB];
};

template <int NB, typename At>
__device__ __forceinline__ void fold_issue(const At &at, int e0, int e1, words_in_flight<NB> &f)
{
#pragma unroll
    for (int e = 0; e < NB; e++) {
        f.va[e] = f.vb[e] = 0ull;
        if (e0 + e < e1) {
            bool single;
            const unsigned long long *q = at(e0 + e, &single);
            f.va[e] = ld_word(q);
            if (!single)
                f.vb[e] = ld_word(q + W);
        }
    }
}

template <int NB, typename At>
__device__ __forceinline__ void fold_complete(const At &at, int e0, int e1, unsigned tag,
                                              words_in_flight<NB> &f, float &fA, float &fB)
{
    for (;;) { /* a missing word loaded again is checked in the next round */
        bool all = true;
#pragma unroll
        for (int e = 0; e < NB; e++) {
            if (e0 + e >= e1)
                continue;
            bool single;
            const unsigned long long *q = at(e0 + e, &single);
            if ((unsigned)(f.va[e] >> 32) != tag) {
                f.va[e] = ld_word(q);
                all = false;
            }
            if (!single && (unsigned)(f.vb[e] >> 32) != tag) {
                f.vb[e] = ld_word(q + W);
                all = false;
            }
        }
        if (all)
            break;
    }
    fA = 1.0f;
    fB = 0.0f;
#pragma unroll
    for (int e = 0; e < NB; e++) {
        if (e0 + e >= e1)
            continue;
        bool single;
        at(e0 + e, &single);
        const float qA = single ? 0.0f : __uint_as_float((unsigned)f.va[e]);
        const float qB =
            single ? __uint_as_float((unsigned)f.va[e]) : __uint_as_float((unsigned)f.vb[e]);
        fB = qA * fB + qB;
        fA = qA * fA;
    }
    if (e1 - e0 > NB) { /* more than one batch: the rest now */
        float rA, rB;
        fold_words<NB>(at, e0 + NB, e1, tag, rA, rB);
        fB = rA * fB + rB;
        fA = rA * fA;
    }
}

template <typename Tst, int S, int NS, bool BWD>
__global__ void __launch_bounds__(kThreads, 1)
    lwindow_kernel(const __grid_constant__ wparams p, const __grid_constant__ CUtensorMap ta,
                   const __grid_constant__ CUtensorMap tb, const __grid_constant__ CUtensorMap th,
                   const __grid_constant__ CUtensorMap td)
{
    constexpr int L = TY * S;
    static_assert(NS >= 4, "tiles k - 2, k - 1, k and one in flight");
    extern __shared__ __align__(128) unsigned char ring_raw[]; /* (NS, 2, L, W) of Tst */
    __shared__ uint64_t full[NS];
    __shared__ float4 wgA[8][TX], wgB[8][TX];
    __shared__ float partA[4][W], partB[4][W], gpA[4][W], gpB[4][W], carry[W];
    Tst *const ring = reinterpret_cast<Tst *>(ring_raw);
    const Tst *const hf = as_storage<const Tst>(p.hf);
    Tst *const hout = as_storage<Tst>(p.h), *const dout = as_storage<Tst>(p.hd);
    const worker wk = worker_at<L>(p);
    const int tid = wk.tid, tx = wk.tx, ty = wk.ty, warp = wk.warp, lane = wk.lane;
    const int R = wk.R, Gc = wk.Gc, r = wk.r, pos = wk.pos, grp = wk.grp, part = wk.part,
              col = wk.col;
    const int64_t c0 = wk.c0, NC = wk.NC, nk = wk.nk;
    auto stage = [&](int64_t k) { return ring + (size_t)(k % NS) * 2 * L * W; };
    ring_start<L, NS, BWD>(p, &ta, &tb, wk, ring, full);

    float eA[2][4], eB[2][4]; /* exclusive prefixes: [0] tile k - 1, [1] tile k - 2 */
    float aggA[2] = {1.0f, 1.0f},
          aggB[2] = {0.0f, 0.0f}; /* the same tiles' aggregates (threads < W) */
#pragma unroll
    for (int l = 0; l < 2; l++)
#pragma unroll
        for (int v = 0; v < 4; v++) {
            eA[l][v] = 1.0f;
            eB[l][v] = 0.0f;
        }

    for (int64_t k = 0; k <= nk + 1; k++) {
        const int64_t wl = k - 1, wf = k - 2; /* the leaders' window; the finished tile's */
        const int64_t cf = c0 + wf * Gc;
        /* this iteration's words, loaded now */
        const int gsz =
            k >= 1 && k - 1 < nk ? group_size(p, wl, Gc, grp, NC) : 0; /* >= 1: its tile exists */
        const bool lead = gsz > 0 && pos - grp * p.g == (int)(k % gsz);
        const group_words atL{&p, wl * Gc + grp * p.g, R, r, col};
        const carry_words atC{&p, wf, R, r, Gc, pos, grp, col, wf > 0};
        const int m = atC.count();
        words_in_flight<4> lf;
        words_in_flight<8> cw;
        if (lead)
            fold_issue<4>(atL, part * gsz / 4, (part + 1) * gsz / 4, lf);
        if (k >= 2)
            fold_issue<8>(atC, part * m / 4, (part + 1) * m / 4, cw);
        typename raw4<Tst>::type hq[BWD ? S : 1];
        if constexpr (BWD)
            if (k >= 2)
                hprev_load<Tst, S, L>(p, hf, cf, r, ty, tx, hq);

        float A[4], Bs[4], xA[4], xB[4];
        if (k < nk) {
            int64_t t0;
            int nr;
            chunk_rows<L, BWD>(p, c0 + k * Gc, t0, nr);
            mbar_wait(&full[k % NS], (unsigned)((k / NS) & 1));
            tile_summary<Tst, S, BWD>(stage(k), stage(k) + L * W, nr, ty, tx, A, Bs);
        }
        if (lead) {
            float fA, fB;
            fold_complete<4>(atL, part * gsz / 4, (part + 1) * gsz / 4, p.tag, lf, fA, fB);
            gpA[part][col] = fA;
            gpB[part][col] = fB;
        }
        if (k >= 2) {
            float fA, fB;
            fold_complete<8>(atC, part * m / 4, (part + 1) * m / 4, p.tag, cw, fA, fB);
            partA[part][col] = fA;
            partB[part][col] = fB;
        }
        if (k < nk)
            warp_rows(A, Bs, lane, warp, tx, wgA, wgB, xA, xB);
        __syncthreads(); /* (1) the warp aggregates, the folds' parts */
        float pA[4] = {1.0f, 1.0f, 1.0f, 1.0f}, pB[4] = {0.0f, 0.0f, 0.0f, 0.0f}, nA = 1.0f,
              nB = 0.0f;
        if (k < nk) {
            tile_prefix(tid, warp, tx, wgA, wgB, xA, xB, pA, pB, nA, nB);
            if (tid < W)
                publish_pair(p.words + ((c0 + k * Gc) * R + r) * 2 * W, tid, nA, nB, p.tag);
        }
        if (tid < W) {
            if (lead) {
                float a = 1.0f, b = 0.0f;
                compose_parts(gpA, gpB, tid, a, b);
                publish_pair(p.gwords + ((wl * p.ng + grp) * R + r) * 2 * W, tid, a, b, p.tag);
            }
            if (k >= 2) {
                float x = 0.0f, unused = 1.0f; /* h0; the state after window wf - 1 leads */
                compose_parts(partA, partB, tid, unused, x);
                carry[tid] = x;
                if (pos == Gc - 1)
                    st_word(p.pwords + (wf * R + r) * W + tid,
                            make_word(aggA[1] * x + aggB[1], p.tag));
            }
        }
        __syncthreads(); /* (2) the carry */
        if (k >= 2) {
            float st[4];
#pragma unroll
            for (int v = 0; v < 4; v++)
                st[v] = eA[1][v] * carry[tx * 4 + v] + eB[1][v];
            tile_finish<Tst, S, L, BWD>(p, stage(k - 2), stage(k - 2) + L * W, cf, r, ty, tx, st,
                                        hq, hout, dout);
        }
        __syncthreads(); /* (3) stage k - 2, the warp aggregates, the parts and the carry read */
        if (k >= 2 && tid == 0 && k - 2 + NS < nk) {
            asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
            issue_tile<L, BWD>(p, &ta, &tb, r, c0 + (k - 2 + NS) * Gc, stage(k - 2 + NS),
                               &full[(k - 2 + NS) % NS]);
        }
        push_prefix(eA, eB, pA, pB);
        aggA[1] = aggA[0];
        aggB[1] = aggB[0];
        aggA[0] = nA;
        aggB[0] = nB;
    }
}

/* ------------------------------------------------------------------------ */
/* Pipelined: every fold's words loaded an iteration before they are used   */
/*
 * Each word a fold needs was published at least an iteration before the
 * fold's loads are issued, and the loads are issued at an iteration's start
 * and completed at its end, after the tile's summary and an earlier tile's
 * finish: their L2 round trip overlaps a whole iteration of work. In
 * iteration k of a worker:
 *  - tile k is reduced and its aggregate published (as before);
 *  - the leader of its group for window k - 1 folds the members' aggregates
 *    of that window (published in iteration k - 1) and publishes the
 *    group's aggregate at the iteration's end;
 *  - every worker folds the words of window wc = k - 1 - E (groups'
 *    aggregates published in iteration wc + 1 <= k - E): the groups before
 *    its own, its group's members before it, and the groups from its own on.
 *    Each worker keeps the state after the previous window itself (X), so
 *    no worker waits on a chain through one other: the carry of its tile is
 *    X, then the groups before, then the members before; X moves on by all
 *    of the window's groups;
 *  - tile k - D (D = E + 2) is finished from the carry composed at the end
 *    of iteration k - 1.
 * Tiles k - D .. k are held, NS - D - 1 are in flight: NS >= D + 2.
 */

/* A fold's slices: quarter q of the threads (64 columns each) takes elements
 * [q n / 4, (q + 1) n / 4) of a list cut into up to three segments, and
 * folds each segment's elements apart. NB words loaded at once. */
template <int NB> struct slice_words {
    unsigned long long va[NB], vb[NB];
};

/* The carry list of window wc for a worker at (pos, grp): segment 0 the
 * groups before grp, 1 the members of grp before pos, 2 the groups from grp
 * on (those with a tile); a leader's list: its group's members, segment 1. */
struct pipe_list {
    const wparams *p;
    int64_t w;
    int R, r, Gc, col, grp, n0, n1, n2;
    int64_t first; /* segment 1's first chunk */
    __device__ int count() const { return n0 + n1 + n2; }
    __device__ int seg(int e) const { return e < n0 ? 0 : e < n0 + n1 ? 1 : 2; }
    __device__ const unsigned long long *at(int e) const
    {
        if (e < n0)
            return p->gwords + ((w * p->ng + e) * R + r) * 2 * W + col;
        if (e < n0 + n1)
            return p->words + ((first + (e - n0)) * R + r) * 2 * W + col;
        return p->gwords + ((w * p->ng + grp + (e - n0 - n1)) * R + r) * 2 * W + col;
    }
};

/* The (A, B) word pairs at q(e), e < n <= NB, loaded into v (the rest zero). */
template <int NB, typename Q>
__device__ __forceinline__ void load_pairs(Q q, int n, slice_words<NB> &v)
{
#pragma unroll
    for (int e = 0; e < NB; e++) {
        v.va[e] = v.vb[e] = 0ull;
        if (e < n) {
            const unsigned long long *x = q(e);
            v.va[e] = ld_word(x);
            v.vb[e] = ld_word(x + W);
        }
    }
}

/* The pairs at q(e), e < n, polled until both words carry tag (each poll
 * that finds one missing counted in polls), then folded in order, element
 * e onto segment seg(e) of (sA, sB). */
template <int NB, typename Q, typename G>
__device__ __forceinline__ void poll_fold(Q q, G seg, int n, unsigned tag, slice_words<NB> &v,
                                          float (&sA)[3], float (&sB)[3], int &polls)
{
    for (;;) { /* a missing word loaded again is checked in the next round */
        bool all = true;
#pragma unroll
        for (int e = 0; e < NB; e++) {
            if (e >= n)
                continue;
            if ((unsigned)(v.va[e] >> 32) != tag) {
                v.va[e] = ld_word(q(e));
                all = false;
            }
            if ((unsigned)(v.vb[e] >> 32) != tag) {
                v.vb[e] = ld_word(q(e) + W);
                all = false;
            }
        }
        if (all)
            break;
        polls++;
    }
#pragma unroll
    for (int e = 0; e < NB; e++) {
        if (e >= n)
            continue;
        const unsigned s = (unsigned)seg(e);
        const float qA = __uint_as_float((unsigned)v.va[e]),
                    qB = __uint_as_float((unsigned)v.vb[e]);
#pragma unroll
        for (int u = 0; u < 3; u++) { /* segment s's fold continued by the element */
            const bool take = s == (unsigned)u;
            sB[u] = take ? qA * sB[u] + qB : sB[u];
            sA[u] = take ? qA * sA[u] : sA[u];
        }
    }
}

__device__ __forceinline__ void identity3(float (&sA)[3], float (&sB)[3])
{
#pragma unroll
    for (int s = 0; s < 3; s++) {
        sA[s] = 1.0f;
        sB[s] = 0.0f;
    }
}

template <int NB>
__device__ __forceinline__ void slice_issue(const pipe_list &l, int e0, int e1, slice_words<NB> &f)
{
    load_pairs<NB>([&](int e) { return l.at(e0 + e); }, e1 - e0 < NB ? e1 - e0 : NB, f);
}

/* The slice's folds per segment (sA[s], sB[s]), the first NB words from f. */
template <int NB>
__device__ __forceinline__ void slice_complete(const pipe_list &l, int e0, int e1, unsigned tag,
                                               slice_words<NB> &f, float (&sA)[3], float (&sB)[3],
                                               int &polls)
{
    identity3(sA, sB);
    for (int ib = e0; ib < e1; ib += NB) {
        if (ib > e0)
            slice_issue<NB>(l, ib, e1, f);
        poll_fold<NB>([&](int e) { return l.at(ib + e); }, [&](int e) { return l.seg(ib + e); },
                      e1 - ib < NB ? e1 - ib : NB, tag, f, sA, sB, polls);
    }
}

/* A fold slice in the windows with every tile: the same list in each, its
 * words ng (groups') or Gc (members') tiles' words further on a window.
 * q0 the slice's addresses in window 0, 2 bits an element its segment. */
template <int NB> struct fast_slice {
    const unsigned long long *q0[NB];
    unsigned segbits;
    int cnt;
};

template <int NB>
__device__ __forceinline__ fast_slice<NB> fast_slice_of(const pipe_list &l, int e0, int e1)
{
    fast_slice<NB> f;
    f.cnt = e1 - e0;
    f.segbits = 0;
#pragma unroll
    for (int e = 0; e < NB; e++) {
        f.q0[e] = l.p->words;
        if (e0 + e < e1) {
            f.q0[e] = l.at(e0 + e);
            f.segbits |= (unsigned)l.seg(e0 + e) << (2 * e);
        }
    }
    return f;
}

/* Window w's words of the slice loaded; q their addresses, for the polls. */
template <int NB>
__device__ __forceinline__ void fast_issue(const fast_slice<NB> &f, int64_t w, int64_t gstride,
                                           int64_t mstride, slice_words<NB> &v,
                                           const unsigned long long *(&q)[NB])
{
#pragma unroll
    for (int e = 0; e < NB; e++)
        q[e] = f.q0[e] +
               (e < f.cnt ? w * (((f.segbits >> (2 * e)) & 3u) == 1u ? mstride : gstride) : 0);
    load_pairs<NB>([&](int e) { return q[e]; }, f.cnt, v);
}

template <int NB>
__device__ __forceinline__ void
fast_complete(const fast_slice<NB> &f, const unsigned long long *const (&q)[NB], unsigned tag,
              slice_words<NB> &v, float (&sA)[3], float (&sB)[3], int &polls)
{
    identity3(sA, sB);
    poll_fold<NB>([&](int e) { return q[e]; }, [&](int e) { return (f.segbits >> (2 * e)) & 3u; },
                  f.cnt, tag, v, sA, sB, polls);
}

template <typename Tst, int S, int NS, int E, bool BWD, bool PROF = true>
__global__ void __launch_bounds__(kThreads, 1)
    pwindow_kernel(const __grid_constant__ wparams p, const __grid_constant__ CUtensorMap ta,
                   const __grid_constant__ CUtensorMap tb, const __grid_constant__ CUtensorMap th,
                   const __grid_constant__ CUtensorMap td)
{
    constexpr int L = TY * S, D = E + 2, NB = 6;
    static_assert(E >= 1 && NS >= D + 2, "tiles k - D .. k held and one in flight");
    extern __shared__ __align__(128) unsigned char ring_raw[]; /* (NS, 2, L, W) of Tst */
    __shared__ uint64_t full[NS];
    __shared__ float4 wgA[8][TX], wgB[8][TX];
    __shared__ float segA[3][4][W], segB[3][4][W], gpA[4][W], gpB[4][W], carry[W];
    __shared__ unsigned repolls;
    Tst *const ring = reinterpret_cast<Tst *>(ring_raw);
    const Tst *const hf = as_storage<const Tst>(p.hf);
    Tst *const hout = as_storage<Tst>(p.h), *const dout = as_storage<Tst>(p.hd);
    const worker wk = worker_at<L>(p);
    const int tid = wk.tid, tx = wk.tx, ty = wk.ty, warp = wk.warp, lane = wk.lane;
    const int R = wk.R, Gc = wk.Gc, r = wk.r, pos = wk.pos, grp = wk.grp, part = wk.part,
              col = wk.col;
    const int64_t c0 = wk.c0, NC = wk.NC, nk = wk.nk;
    const int mem = pos - grp * p.g; /* this worker's place in its group */
    auto stage = [&](int64_t k) { return ring + (size_t)(k % NS) * 2 * L * W; };
    ring_start<L, NS, BWD>(p, &ta, &tb, wk, ring, full);

    float eA[D][4], eB[D][4]; /* exclusive prefixes of tiles k - 1 .. k - D */
#pragma unroll
    for (int j = 0; j < D; j++)
#pragma unroll
        for (int v = 0; v < 4; v++) {
            eA[j][v] = 1.0f;
            eB[j][v] = 0.0f;
        }
    float X = 0.0f; /* threads < W: the state after window wc - 1 (h0 = 0) */
    const bool prof = PROF && p.prof != nullptr && tid == 0; /* PROF: the counters compiled in */
    unsigned long long pc[PROF ? kProf : 1] = {}, tp = PROF ? clock64() : 0;
    auto mark = [&](int i) {
        if (PROF && prof) {
            const unsigned long long t = clock64();
            pc[i] += t - tp;
            tp = t;
        }
    };
    if (tid == 0)
        repolls = 0;
    /* the slices of the windows with every tile, when they fit */
    const int gszf = p.g < Gc - grp * p.g ? p.g : Gc - grp * p.g, ncf = mem + p.ng;
    const fast_slice<4> fl =
        fast_slice_of<4>(pipe_list{&p, 0, R, r, Gc, col, grp, 0, gszf, 0, (int64_t)grp * p.g},
                         part * gszf / 4, (part + 1) * gszf / 4);
    const fast_slice<NB> fc = fast_slice_of<NB>(
        pipe_list{&p, 0, R, r, Gc, col, grp, grp, mem, p.ng - grp, (int64_t)grp * p.g},
        part * ncf / 4, (part + 1) * ncf / 4);
    const bool fok = p.fast && !p.nofold && fl.cnt <= 4 && fc.cnt <= NB;
    const int64_t gstride = (int64_t)p.ng * R * 2 * W, mstride = (int64_t)Gc * R * 2 * W;

    for (int64_t k = 0; k < nk + D; k++) {
        const int64_t wl = k - 1, wc = k - 1 - E,
                      kf = k - D; /* leader's window, carry's, finished tile */
        /* the leader's list and the carry's, their first words loaded now */
        const bool fold = wc >= 0 && wc < nk;
        const bool fastL = fok && wl >= 0 && wl < nk && (wl + 1) * Gc <= NC;
        const bool fastC = fok && fold && (wc + 1) * Gc <= NC;
        const int gsz = fastL ? gszf : wl >= 0 && wl < nk ? group_size(p, wl, Gc, grp, NC) : 0;
        const bool lead = gsz > 0 && mem == (int)wl % gsz;
        const pipe_list ll{
            &p, wl, R, r, Gc, col, grp, 0, lead && !fastL ? gsz : 0, 0, wl * Gc + grp * p.g};
        int ngw = 0;
        if (fold && !fastC) {
            const int64_t left = NC - wc * Gc; /* tiles in window wc */
            const int nt = left < Gc ? (int)left : Gc;
            ngw = (nt + p.g - 1) / p.g;
        }
        const bool slow = fold && !fastC;
        const pipe_list lc{&p,
                           wc,
                           R,
                           r,
                           Gc,
                           col,
                           grp,
                           slow ? grp : 0,
                           slow ? mem : 0,
                           slow ? ngw - grp : 0,
                           wc * Gc + grp * p.g};
        const int nl = p.nofold ? 0 : ll.count(), nc = p.nofold ? 0 : lc.count();
        slice_words<4> lw;
        slice_words<NB> cw;
        mark(0);
        const unsigned long long *qL[4], *qC[NB];
        if (fastL && lead)
            fast_issue<4>(fl, wl, gstride, mstride, lw, qL);
        else
            slice_issue<4>(ll, part * nl / 4, (part + 1) * nl / 4, lw);
        if (fastC)
            fast_issue<NB>(fc, wc, gstride, mstride, cw, qC);
        else
            slice_issue<NB>(lc, part * nc / 4, (part + 1) * nc / 4, cw);
        typename raw4<Tst>::type hq[BWD ? S : 1];
        if constexpr (BWD)
            if (kf >= 0)
                hprev_load<Tst, S, L>(p, hf, c0 + kf * Gc, r, ty, tx, hq);
        mark(1);

        float pA[4] = {1.0f, 1.0f, 1.0f, 1.0f}, pB[4] = {0.0f, 0.0f, 0.0f, 0.0f};
        if (k < nk) {
            int64_t t0;
            int nr;
            chunk_rows<L, BWD>(p, c0 + k * Gc, t0, nr);
            mbar_wait(&full[k % NS], (unsigned)((k / NS) & 1));
            mark(2);
            float A[4], Bs[4], xA[4], xB[4], nA, nB;
            tile_summary<Tst, S, BWD>(stage(k), stage(k) + L * W, nr, ty, tx, A, Bs);
            warp_rows(A, Bs, lane, warp, tx, wgA, wgB, xA, xB);
            __syncthreads(); /* (1) the warp aggregates */
            tile_prefix(tid, warp, tx, wgA, wgB, xA, xB, pA, pB, nA, nB);
            if (tid < W)
                publish_pair(p.words + ((c0 + k * Gc) * R + r) * 2 * W, tid, nA, nB, p.tag);
        } else {
            __syncthreads(); /* (1) */
        }
        mark(3);
        if (kf >= 0) {
            float st[4];
#pragma unroll
            for (int v = 0; v < 4; v++)
                st[v] = eA[D - 1][v] * carry[tx * 4 + v] + eB[D - 1][v];
            finish_chunk<Tst, S, L, BWD>(p, &th, &td, stage(kf), stage(kf) + L * W, c0 + kf * Gc, r,
                                         ty, tx, tid, st, hq, hout, dout);
        }
        mark(4);
        if (p.early) {
            __syncthreads(); /* stage kf read */
            if (kf >= 0 && tid == 0 && kf + NS < nk) {
                bulk_wait_read();
                asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
                issue_tile<L, BWD>(p, &ta, &tb, r, c0 + (kf + NS) * Gc, stage(kf + NS),
                                   &full[(kf + NS) % NS]);
            }
        }
        mark(5);
        {
            float sA[3], sB[3];
            int polls = 0;
            if (fastL && lead)
                fast_complete<4>(fl, qL, p.tag, lw, sA, sB, polls);
            else
                slice_complete<4>(ll, part * nl / 4, (part + 1) * nl / 4, p.tag, lw, sA, sB, polls);
            gpA[part][col] = sA[1];
            gpB[part][col] = sB[1];
            if (fastC)
                fast_complete<NB>(fc, qC, p.tag, cw, sA, sB, polls);
            else
                slice_complete<NB>(lc, part * nc / 4, (part + 1) * nc / 4, p.tag, cw, sA, sB,
                                   polls);
            if (PROF && p.prof && polls)
                atomicAdd(&repolls, 1u);
#pragma unroll
            for (int s = 0; s < 3; s++) {
                segA[s][part][col] = sA[s];
                segB[s][part][col] = sB[s];
            }
        }
        mark(6);
        __syncthreads(); /* (2) the folds' quarters; carry and stage kf read */
        mark(7);
        if (tid < W) {
            if (lead) {
                float a = 1.0f, b = 0.0f;
                compose_parts(gpA, gpB, tid, a, b);
                publish_pair(p.gwords + ((wl * p.ng + grp) * R + r) * 2 * W, tid, a, b, p.tag);
            }
            if (fold) {
                float f[3][2];
#pragma unroll
                for (int s = 0; s < 3; s++) {
                    f[s][0] = 1.0f;
                    f[s][1] = 0.0f;
                    compose_parts(segA[s], segB[s], tid, f[s][0], f[s][1]);
                }
                const float x0 = f[0][0] * X + f[0][1];
                carry[tid] = f[1][0] * x0 + f[1][1];
                X = f[2][0] * x0 + f[2][1];
            }
        }
        __syncthreads(); /* (3) the carry written */
        if (!p.early && kf >= 0 && tid == 0 && kf + NS < nk) {
            bulk_wait_read();
            asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
            issue_tile<L, BWD>(p, &ta, &tb, r, c0 + (kf + NS) * Gc, stage(kf + NS),
                               &full[(kf + NS) % NS]);
        }
        mark(8);
        push_prefix(eA, eB, pA, pB);
    }
    if (tid == 0)
        bulk_wait_all();
    if (PROF && p.prof) {
        __syncthreads();
        if (tid == 0) {
            for (int i = 0; i < kProf - 2; i++)
                p.prof[blockIdx.x * kProf + i] = pc[PROF ? i : 0];
            p.prof[blockIdx.x * kProf + kProf - 2] = repolls;
            p.prof[blockIdx.x * kProf + kProf - 1] = (unsigned long long)(nk + D);
        }
    }
}

/* ------------------------------------------------------------------------ */
/* Clusters: one tree stage in distributed shared memory, one through L2     */
/*
 * Thread-block clusters of CS blocks; cluster cl serves chain r = cl % R at
 * positions (cl / R) CS + rank of every window (Gc = (G / CS / R) CS
 * positions). In iteration k a block reduces tile k and writes its
 * aggregate (the identity when it has no tile k) into its own shared
 * memory; after the cluster barrier its threads < W read the CS blocks'
 * aggregates through distributed shared memory: the ranks below its own
 * compose its prefix in the cluster (kept three iterations), all CS the
 * cluster's total, which rank 0 publishes as tagged words. The totals of
 * window w are loaded at the start of iteration w + 1 and composed in
 * iteration w + 2 (more than an iteration later), each worker folding all
 * of its chain's totals into its own state after the window (X), the
 * clusters before its own into its tile's carry, and tile w finished
 * then: a lag of two tiles, NS >= 4. Every block runs the same number of
 * iterations, so that the cluster barriers match.
 */
__device__ __forceinline__ void cluster_sync_all()
{
    asm volatile("barrier.cluster.arrive.release.aligned;\n"
                 "barrier.cluster.wait.acquire.aligned;" ::
                     : "memory");
}

/* Block q's copy of the shared-memory word at p, read through the cluster. */
__device__ __forceinline__ float ld_cluster(const float *p, unsigned q)
{
    unsigned remote;
    float v;
    asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(remote) : "r"(saddr(p)), "r"(q));
    asm volatile("ld.shared::cluster.f32 %0, [%1];" : "=f"(v) : "r"(remote) : "memory");
    return v;
}

constexpr int kClusterEl = 4; /* cluster totals a thread loads (4 parts: 16 clusters a chain) */

template <typename Tst, int S, int NS, int CS, bool BWD>
__global__ void __launch_bounds__(kThreads, 1)
    cwindow_kernel(const __grid_constant__ wparams p, const __grid_constant__ CUtensorMap ta,
                   const __grid_constant__ CUtensorMap tb, const __grid_constant__ CUtensorMap th,
                   const __grid_constant__ CUtensorMap td)
{
    constexpr int L = TY * S;
    static_assert(NS >= 4, "tiles k - 2, k - 1, k held and one in flight");
    extern __shared__ __align__(128) unsigned char ring_raw[]; /* (NS, 2, L, W) of Tst */
    __shared__ uint64_t full[NS];
    __shared__ float4 wgA[8][TX], wgB[8][TX];
    __shared__ float aggS[2][2][W]; /* this block's tile aggregate, by iteration parity */
    __shared__ float pqS[3][2][W];  /* the prefix in the cluster, by iteration mod 3 */
    __shared__ float segA[2][4][W], segB[2][4][W], carry[W];
    Tst *const ring = reinterpret_cast<Tst *>(ring_raw);
    const Tst *const hf = as_storage<const Tst>(p.hf);
    Tst *const hout = as_storage<Tst>(p.h), *const dout = as_storage<Tst>(p.hd);
    const int tid = threadIdx.x, tx = tid % TX, ty = tid / TX, warp = tid / 32, lane = tid % 32;
    const int part = tid / W, col = tid % W;
    const int R = p.R, cl = (int)blockIdx.x / CS, rank = (int)blockIdx.x % CS;
    const int ncl = (int)gridDim.x / CS / R; /* clusters a chain */
    const int r = cl % R, cc = cl / R, pos = cc * CS + rank, Gc = ncl * CS;
    const int64_t NC = (p.T + L - 1) / L, NW = (NC + Gc - 1) / Gc;
    const int64_t c0 = pos, nk = c0 < NC ? (NC - 1 - c0) / Gc + 1 : 0;
    auto stage = [&](int64_t k) { return ring + (size_t)(k % NS) * 2 * L * W; };
    worker wk = {};
    wk.tid = tid;
    wk.r = r;
    wk.Gc = Gc;
    wk.c0 = c0;
    wk.nk = nk;
    ring_start<L, NS, BWD>(p, &ta, &tb, wk, ring, full);

    /* this thread's cluster totals: clusters e0 .. e1 - 1 of its chain */
    const int e0 = part * ncl / 4, e1 = (part + 1) * ncl / 4;
    const int64_t wstride = (int64_t)ncl * R * 2 * W;                     /* a window's totals */
    unsigned long long *const tot0 = p.gwords + (int64_t)r * 2 * W + col; /* window 0, cluster 0 */

    float eA[2][4], eB[2][4]; /* exclusive prefixes: [0] tile k - 1, [1] tile k - 2 */
#pragma unroll
    for (int j = 0; j < 2; j++)
#pragma unroll
        for (int v = 0; v < 4; v++) {
            eA[j][v] = 1.0f;
            eB[j][v] = 0.0f;
        }
    float X = 0.0f; /* threads < W: the state after the windows composed so far (h0 = 0) */
    slice_words<kClusterEl> wv[2]; /* the totals in flight, by window parity */
    const int ne = e1 - e0 < kClusterEl ? e1 - e0 : kClusterEl;
    auto total_at = [&](int64_t w, int e) {
        return tot0 + w * wstride + (int64_t)(e0 + e) * R * 2 * W;
    };

    /* window w's totals of this thread's clusters loaded into wv[w & 1] */
    auto issue = [&](int64_t w, slice_words<kClusterEl> &v) {
        load_pairs<kClusterEl>([&](int e) { return total_at(w, e); }, ne, v);
    };
    /* ... and folded: the clusters before this one (segA[0]), all of them (segA[1]) */
    auto complete = [&](int64_t w, slice_words<kClusterEl> &v) {
        float sA[3], sB[3];
        int polls = 0;
        identity3(sA, sB);
        poll_fold<kClusterEl>([&](int e) { return total_at(w, e); },
                              [&](int e) { return e0 + e < cc ? 0 : 2; }, ne, p.tag, v, sA, sB,
                              polls);
        segA[0][part][col] = sA[0];
        segB[0][part][col] = sB[0];
        segA[1][part][col] = sA[2] * sA[0];
        segB[1][part][col] = sA[2] * sB[0] + sB[2];
    };

    auto body = [&](int64_t k, slice_words<kClusterEl> &vnew, slice_words<kClusterEl> &vold) {
        const int64_t kf = k - 2; /* the tile finished */
        if (k >= 1 && k - 1 < NW)
            issue(k - 1, vnew);
        typename raw4<Tst>::type hq[BWD ? S : 1];
        if constexpr (BWD)
            if (kf >= 0 && kf < nk)
                hprev_load<Tst, S, L>(p, hf, c0 + kf * Gc, r, ty, tx, hq);
        float pA[4] = {1.0f, 1.0f, 1.0f, 1.0f}, pB[4] = {0.0f, 0.0f, 0.0f, 0.0f}, nA = 1.0f,
              nB = 0.0f;
        if (k < nk) {
            int64_t t0;
            int nr;
            chunk_rows<L, BWD>(p, c0 + k * Gc, t0, nr);
            mbar_wait(&full[k % NS], (unsigned)((k / NS) & 1));
            float A[4], Bs[4], xA[4], xB[4];
            tile_summary<Tst, S, BWD>(stage(k), stage(k) + L * W, nr, ty, tx, A, Bs);
            warp_rows(A, Bs, lane, warp, tx, wgA, wgB, xA, xB);
            __syncthreads(); /* (1) the warp aggregates */
            tile_prefix(tid, warp, tx, wgA, wgB, xA, xB, pA, pB, nA, nB);
        }
        if (tid < W) {
            aggS[k & 1][0][tid] = nA;
            aggS[k & 1][1][tid] = nB;
        }
        if (kf >= 0 && kf < nk)
            complete(kf, vold);
        cluster_sync_all(); /* (2) the cluster's aggregates, the folds' parts */
        if (tid < W) {
            if (k < NW) { /* this cluster's prefix and total in window k */
                float fa[CS], fb[CS];
#pragma unroll
                for (int q = 0; q < CS; q++) {
                    fa[q] = ld_cluster(&aggS[k & 1][0][tid], (unsigned)q);
                    fb[q] = ld_cluster(&aggS[k & 1][1][tid], (unsigned)q);
                }
                float a = 1.0f, b = 0.0f;
#pragma unroll
                for (int q = 0; q < CS; q++) {
                    if (q == rank) {
                        pqS[k % 3][0][tid] = a;
                        pqS[k % 3][1][tid] = b;
                    }
                    b = fa[q] * b + fb[q];
                    a = fa[q] * a;
                }
                if (rank == 0)
                    publish_pair(tot0 - col + k * wstride + (int64_t)cc * R * 2 * W, tid, a, b,
                                 p.tag);
            }
            if (kf >= 0 && kf < nk) { /* tile kf's carry; the state after its window */
                float a0 = 1.0f, x0 = X, x1 = X, a1 = 1.0f;
                compose_parts(segA[0], segB[0], tid, a0, x0);
                compose_parts(segA[1], segB[1], tid, a1, x1);
                carry[tid] = pqS[kf % 3][0][tid] * x0 + pqS[kf % 3][1][tid];
                X = x1;
            }
        }
        __syncthreads(); /* (3) the carry */
        if (kf >= 0 && kf < nk) {
            float st[4];
#pragma unroll
            for (int v = 0; v < 4; v++)
                st[v] = eA[1][v] * carry[tx * 4 + v] + eB[1][v];
            finish_chunk<Tst, S, L, BWD>(p, &th, &td, stage(kf), stage(kf) + L * W, c0 + kf * Gc, r,
                                         ty, tx, tid, st, hq, hout, dout);
        }
        __syncthreads(); /* (4) stage kf and the carry read */
        if (kf >= 0 && tid == 0 && kf + NS < nk) {
            bulk_wait_read();
            asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
            issue_tile<L, BWD>(p, &ta, &tb, r, c0 + (kf + NS) * Gc, stage(kf + NS),
                               &full[(kf + NS) % NS]);
        }
        push_prefix(eA, eB, pA, pB);
    };
    for (int64_t k = 0; k < NW + 2;
         k += 2) { /* two iterations a turn: the totals' buffers by parity */
        body(k, wv[1], wv[0]);
        if (k + 1 < NW + 2)
            body(k + 1, wv[0], wv[1]);
    }
    if (tid == 0)
        bulk_wait_all();
    cluster_sync_all(); /* no block leaves while another may read its shared memory */
}

/* ------------------------------------------------------------------------ */
/* Warp specialization (MODE 10): the tile's work, the exchange and the     */
/* copies in warps of their own                                             */

/*
 * swindow_kernel: the groups' exchange (MODE 2) taken off the tile's
 * threads. A block of ws_threads(XT) threads: 256 workers (the 16 x 16
 * tile threads of the other kernels), XT teams of 64 exchange threads
 * (one a column; team e takes the block's tiles k = e mod XT) and one
 * producer thread. The producer fills a stage with the block's next tile
 * (TICKET: the tile of a ticket taken from a global counter when the
 * stage is free; else worker j's tiles as in the other kernels) and
 * marks the stage with it, or with -1 at the end. The workers reduce
 * tile k, publish its aggregate (tagged words, and a copy in shared
 * memory for the exchange) and go on; they finish tile k - LAG from its
 * carry once the exchange has it. The exchange, tile after tile, in two
 * batches of words: the aggregates of the group's members before the tile
 * (after which a group's last member publishes the group's aggregate),
 * then the groups' before the tile's own; the state after the previous
 * window, published by that window's last position, closes the carry.
 * Every wait is on a tile before the tile waiting, in the tiles' order
 * (ticket order), so the kernel cannot deadlock while every block is
 * resident (a cooperative launch). Handshakes by mbarriers: full (copy
 * landed), empty (tile finished), agg (aggregate in shared memory), carry
 * (carry in shared memory); the workers' block scan by a named barrier of
 * their own. NS >= LAG + 2. With p.prof, thread 0 and the first exchange
 * thread count clocks per tile (the host prints them).
 */
constexpr int kXThreads = W, kSlots = 4,
              kXWords = 11; /* the most words a batch: 132 positions in groups of 12 */

__device__ __forceinline__ void mbar_arrive(uint64_t *m)
{
    asm volatile("mbarrier.arrive.shared.b64 _, [%0];" ::"r"(saddr(m)) : "memory");
}

__device__ __forceinline__ void workers_sync()
{
    asm volatile("bar.sync 1, %0;" ::"n"(kThreads) : "memory");
}

constexpr int ws_threads(int XT)
{
    return kThreads + XT * kXThreads + 32;
}

/* Chunk index, chain, window, position and group of tile n (n = chunk R +
 * chain: the tiles in ticket order). */
struct tile_at {
    int64_t c, w;
    int r, pos, grp, m;
    __device__ tile_at(const wparams &p, int64_t n, int Gc)
    {
        c = n / p.R;
        r = (int)(n % p.R);
        w = c / Gc;
        pos = (int)(c % Gc);
        grp = pos / p.g;
        m = pos - grp * p.g;
    }
};

/* The exchange teams' loop (thread tid of a warp-specialized block, NSL
 * aggregate and carry slots): column col of every tile's carry. With
 * p.nofold the carry is 0 at once (wrong: the loop without the exchange). */
template <int NSL, int XT>
__device__ __forceinline__ void exchange_loop(const wparams &p, int tid, int Gc, int64_t NC,
                                              uint64_t *aggbar, uint64_t *carrybar,
                                              const int64_t *atile, const float (*aggA)[W],
                                              const float (*aggB)[W], float (*carry)[W])
{
    const int R = p.R;
    const int col = (tid - kThreads) % kXThreads, team = (tid - kThreads) / kXThreads;
    const bool prof = p.prof && col == 0 && team == 0;
    unsigned long long ck[5] = {0, 0, 0, 0, 0}; /* clocks: agg, members, groups, state; tiles */
    int polls = 0;
    for (int64_t k = team;; k += XT) {
        unsigned long long c0k = prof ? clock64() : 0;
        auto lap = [&](int i) { /* the clocks since the last lap into ck[i] */
                                if (prof) {
                                    const unsigned long long c1k = clock64();
                                    ck[i] += c1k - c0k;
                                    c0k = c1k;
                                }
        };
        mbar_wait(&aggbar[k % NSL], (unsigned)((k / NSL) & 1));
        const int64_t n = atile[k % NSL];
        if (n < 0)
            break;
        if (p.nofold) {
            carry[k % NSL][col] = 0.0f;
            mbar_arrive(&carrybar[k % NSL]);
            continue;
        }
        if (p.scan) { /* the state after the chain's previous tile, from the scanner */
            float cin = 0.0f;
            if (n >= R) {
                const unsigned long long *pw = p.pwords + (n - R) * W + col;
                unsigned long long u = ld_word(pw);
                lap(0);
                while ((unsigned)(u >> 32) != p.tag) {
                    u = ld_word(pw);
                    polls++;
                }
                cin = __uint_as_float((unsigned)u);
            }
            lap(3);
            carry[k % NSL][col] = cin;
            mbar_arrive(&carrybar[k % NSL]);
            if (prof)
                ck[4]++;
            continue;
        }
        const tile_at t(p, n, Gc);
        const int gsz = group_size(p, t.w, Gc, t.grp, NC);
        const int64_t first = t.w * Gc + t.grp * p.g;
        auto qm = [&](int e) { return p.words + ((first + e) * R + t.r) * 2 * W + col; };
        auto qg = [&](int e) { return p.gwords + ((t.w * p.ng + e) * R + t.r) * 2 * W + col; };
        float sA[3], sB[3]; /* the groups before, the members before */
        identity3(sA, sB);
        slice_words<kXWords> v;
        load_pairs<kXWords>(qm, t.m, v);
        lap(0);
        poll_fold<kXWords>(
            qm, [](int) { return 1; }, t.m, p.tag, v, sA, sB, polls);
        const float myA = aggA[k % NSL][col], myB = aggB[k % NSL][col];
        if (t.m == gsz - 1) /* the group's aggregate: its members before, then this tile */
            publish_pair(p.gwords + ((t.w * p.ng + t.grp) * R + t.r) * 2 * W, col, myA * sA[1],
                         myA * sB[1] + myB, p.tag);
        lap(1);
        load_pairs<kXWords>(qg, t.grp, v);
        poll_fold<kXWords>(
            qg, [](int) { return 0; }, t.grp, p.tag, v, sA, sB, polls);
        lap(2);
        float P = 0.0f; /* the state after window w - 1 (h0 = 0 before window 0) */
        if (t.w > 0) {  /* published by that window's last position */
            const unsigned long long *pw = p.pwords + ((t.w - 1) * R + t.r) * W + col;
            unsigned long long u = ld_word(pw);
            while ((unsigned)(u >> 32) != p.tag)
                u = ld_word(pw);
            P = __uint_as_float((unsigned)u);
        }
        const float x = sA[0] * P + sB[0]; /* the state before this tile's group */
        const float cin = sA[1] * x + sB[1];
        carry[k % NSL][col] = cin;
        mbar_arrive(&carrybar[k % NSL]);
        if (t.pos == Gc - 1)
            st_word(p.pwords + (t.w * R + t.r) * W + col, make_word(myA * cin + myB, p.tag));
        lap(3);
        if (prof)
            ck[4]++;
    }
    if (prof) {
        for (int i = 0; i < 5; i++)
            p.prof[blockIdx.x * kProf + i] = ck[i];
        p.prof[blockIdx.x * kProf + 5] = (unsigned long long)polls;
    }
}

/* The scanner (p.scan, one chain: block 0's threads, the block taking no
 * tiles): the tile aggregates composed in order into the states after each
 * tile (h0 = 0), published as state words (p.pwords, one a tile and
 * column) as soon as the aggregates before them are out. Lanes over
 * columns (a warp's loads coalesced: one tile's 32 columns), two halves of
 * 32 columns, each with nseg (up to kSeg) warps over consecutive ranges of
 * K tiles: a round loads the nseg K tiles from i on, each warp finds how many of its
 * tiles are out in every column (from its first on) and their composite,
 * the half's warps meet at a named barrier, a warp whose ranges before it
 * are all out publishes its ready tiles' states, and i moves past the
 * ready tiles. (Run r36 measured a lane-a-tile version: 32 lines a load
 * instruction, 7 tiles/us.) */
constexpr int kSeg = 7;

template <int K>
__device__ __forceinline__ void scanner_loop(const wparams &p, int tid, int64_t NC)
{
    __shared__ float cA[2][kSeg][32], cB[2][kSeg][32];
    __shared__ int rd[2][kSeg];
    const int nseg = (int)(blockDim.x / 64) < kSeg ? (int)(blockDim.x / 64) : kSeg;
    const int warp = tid / 32, lane = tid % 32, half = warp / nseg, sg = warp % nseg;
    if (half >= 2) /* whole warps */
        return;
    const int col = half * 32 + lane;
    const bool sprof = p.prof && tid == 0;
    unsigned long long rounds = 0, c0s = clock64();
    float state = 0.0f;
    for (int64_t i = 0; i < NC;) {
        rounds++;
        const int64_t t0 = i + (int64_t)sg * K; /* this warp's range */
        unsigned long long va[K], vb[K];
#pragma unroll
        for (int k = 0; k < K; k++) {
            va[k] = vb[k] = 0ull;
            if (t0 + k < NC) {
                const unsigned long long *q = p.words + (t0 + k) * 2 * W + col;
                va[k] = ld_word(q);
                vb[k] = ld_word(q + W);
            }
        }
        int r = 0;
        bool go = true;
#pragma unroll
        for (int k = 0; k < K; k++) {
            go = go && t0 + k < NC && (unsigned)(va[k] >> 32) == p.tag &&
                 (unsigned)(vb[k] >> 32) == p.tag;
            if (go)
                r = k + 1;
        }
        const int rw = __reduce_min_sync(0xffffffffu, r); /* out in every column */
        float A = 1.0f, B = 0.0f;
#pragma unroll
        for (int k = 0; k < K; k++)
            if (k < rw) {
                const float a = __uint_as_float((unsigned)va[k]),
                            b = __uint_as_float((unsigned)vb[k]);
                B = a * B + b;
                A = a * A;
            }
        cA[half][sg][lane] = A;
        cB[half][sg][lane] = B;
        if (lane == 0)
            rd[half][sg] = rw;
        asm volatile("bar.sync %0, %1;" ::"r"(2 + half), "r"(nseg * 32) : "memory");
        /* the ranges before this warp's, all out: their composite; the ready
         * tiles of the round (up to the first range not all out) */
        bool active = true, full = true;
        float xA = 1.0f, xB = 0.0f, nA = 1.0f, nB = 0.0f;
        int m = 0;
        for (int u = 0; u < nseg; u++) {
            const int ru = rd[half][u];
            const float qa = cA[half][u][lane], qb = cB[half][u][lane];
            if (u < sg) {
                if (ru < K)
                    active = false;
                xB = qa * xB + qb;
                xA = qa * xA;
            }
            if (full) {
                m += ru;
                nB = qa * nB + qb;
                nA = qa * nA;
                if (ru < K)
                    full = false;
            }
        }
        if (active && rw > 0) {
            float x = xA * state + xB;
#pragma unroll
            for (int k = 0; k < K; k++)
                if (k < rw) {
                    x = __uint_as_float((unsigned)va[k]) * x + __uint_as_float((unsigned)vb[k]);
                    st_word(p.pwords + (t0 + k) * W + col, make_word(x, p.tag));
                }
        }
        state = nA * state + nB;
        i += m;
        asm volatile("bar.sync %0, %1;" ::"r"(2 + half), "r"(nseg * 32) : "memory");
    }
    if (sprof) { /* rounds, tiles, clocks */
        p.prof[10] = rounds;
        p.prof[11] = (unsigned long long)NC;
        p.prof[12] = clock64() - c0s;
    }
}

/* The scanner alone: one block of n threads over aggregates published
 * beforehand (publish_all_kernel), so its own rate. */
__global__ void publish_all_kernel(wparams p, int64_t NC)
{
    const int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (e >= NC * W)
        return;
    const int64_t t = e / W;
    const int c = (int)(e % W);
    publish_pair(p.words + t * 2 * W, c, 0.999f, 0.001f * (float)(c + 1), p.tag);
}

template <int CW> __global__ void scanner_alone_kernel(wparams p, int64_t NC)
{
    scanner_loop<CW>(p, threadIdx.x, NC);
}

template <typename Tst, int S, int NS, int LAG, int XT, bool TICKET, bool BWD,
          int SCANK = 0>
__global__ void __launch_bounds__(ws_threads(XT), 1)
    swindow_kernel(const __grid_constant__ wparams p, const __grid_constant__ CUtensorMap ta,
                   const __grid_constant__ CUtensorMap tb, const __grid_constant__ CUtensorMap th,
                   const __grid_constant__ CUtensorMap td)
{
    static_assert(NS >= LAG + 2 && kSlots >= LAG + 2 && kSlots >= XT, "too few stages or slots");
    constexpr int L = TY * S;
    extern __shared__ __align__(128) unsigned char ring_raw[]; /* (NS, 2, L, W) of Tst */
    __shared__ uint64_t full[NS], empty[NS], aggbar[kSlots], carrybar[kSlots];
    __shared__ int64_t stile[NS], atile[kSlots]; /* a stage's tile, an aggregate's (-1: none) */
    __shared__ float4 wgA[2][8][TX], wgB[2][8][TX];
    __shared__ float aggA[kSlots][W], aggB[kSlots][W], carry[kSlots][W];
    Tst *const ring = reinterpret_cast<Tst *>(ring_raw);
    auto stage = [&](int64_t k) { return ring + (size_t)(k % NS) * 2 * L * W; };
    const worker wk = worker_at<L>(p);
    const int tid = wk.tid, R = wk.R, Gc = wk.Gc;
    const int64_t NC = wk.NC, NT = NC * R;
    if (tid == 0) {
        for (int s = 0; s < NS; s++) {
            mbar_init(&full[s], 1);
            mbar_init(&empty[s], kThreads / 32);
        }
        for (int q = 0; q < kSlots; q++) {
            mbar_init(&aggbar[q], W);
            mbar_init(&carrybar[q], kXThreads);
        }
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    }
    __syncthreads();
    if constexpr (SCANK > 0)
        if (p.scan && blockIdx.x == 0) { /* the scanner; no tiles */
            scanner_loop<SCANK>(p, tid, NC);
            return;
        }

    if (tid >= kThreads + XT * kXThreads) { /* the producer: tiles by ticket or this worker's */
        if (tid != kThreads + XT * kXThreads)
            return;
        for (int64_t k = 0;; k++) {
            if (k >= NS)
                mbar_wait(&empty[k % NS], (unsigned)((k / NS - 1) & 1));
            int64_t n;
            if (TICKET) { /* a ticket below the launch's base (the host's error): no tile */
                const unsigned long long u = atomicAdd(p.counter, 1ull);
                n = u >= p.tbase ? (int64_t)(u - p.tbase) : NT;
            } else {
                n = k < wk.nk ? (wk.c0 + k * Gc) * R + wk.r : NT;
            }
            if (n >= NT) { /* the end: a stage with no tile */
                stile[k % NS] = -1;
                mbar_arrive(&full[k % NS]);
                return;
            }
            stile[k % NS] = n;
            issue_tile<L, BWD>(p, &ta, &tb, (int)(n % R), n / R, stage(k), &full[k % NS]);
        }
    }

    if (tid >= kThreads) { /* the exchange: column col of every tile's carry */
        exchange_loop<kSlots, XT>(p, tid, Gc, NC, aggbar, carrybar, atile, aggA, aggB, carry);
        return;
    }

    /* the workers */
    const Tst *const hf = as_storage<const Tst>(p.hf);
    Tst *const hout = as_storage<Tst>(p.h), *const dout = as_storage<Tst>(p.hd);
    const int tx = wk.tx, ty = wk.ty, warp = wk.warp, lane = wk.lane;
    const bool wprof = p.prof && tid == 0;
    unsigned long long wck[3] = {0, 0, 0}; /* clocks waiting for a copy, for a carry; tiles */
    float eA[LAG + 1][4], eB[LAG + 1][4];  /* the prefixes of tiles k, k - 1, ..., k - LAG */
    int64_t en[LAG + 1];                   /* and their tiles */
#pragma unroll
    for (int i = 0; i <= LAG; i++) {
        en[i] = -1;
#pragma unroll
        for (int v = 0; v < 4; v++) {
            eA[i][v] = 1.0f;
            eB[i][v] = 0.0f;
        }
    }
    int64_t kend = -1; /* the iteration that found no tile */
    for (int64_t k = 0; kend < 0 || k < kend + LAG; k++) {
        float pA[4] = {1.0f, 1.0f, 1.0f, 1.0f}, pB[4] = {0.0f, 0.0f, 0.0f, 0.0f};
        int64_t n = -1;
        if (kend < 0) {
            const unsigned long long cf0 = wprof ? clock64() : 0;
            mbar_wait(&full[k % NS], (unsigned)((k / NS) & 1));
            if (wprof)
                wck[0] += clock64() - cf0;
            n = stile[k % NS];
            if (n < 0)
                kend = k;
        }
        if (n >= 0) {
            int64_t t0;
            int nr;
            chunk_rows<L, BWD>(p, n / R, t0, nr);
            float A[4], Bs[4], xA[4], xB[4], nA, nB;
            tile_summary<Tst, S, BWD>(stage(k), stage(k) + L * W, nr, ty, tx, A, Bs);
            warp_rows(A, Bs, lane, warp, tx, wgA[k & 1], wgB[k & 1], xA, xB);
            workers_sync();
            tile_prefix(tid, warp, tx, wgA[k & 1], wgB[k & 1], xA, xB, pA, pB, nA, nB);
            if (tid < W) {
                publish_pair(p.words + n * 2 * W, tid, nA, nB, p.tag);
                aggA[k % kSlots][tid] = nA;
                aggB[k % kSlots][tid] = nB;
                if (tid == 0)
                    atile[k % kSlots] = n;
                mbar_arrive(&aggbar[k % kSlots]);
            }
        }
        push_prefix(eA, eB, pA, pB);
#pragma unroll
        for (int i = LAG; i >= 1; i--)
            en[i] = en[i - 1];
        en[0] = n;
        const int64_t kf = k - LAG, nf = en[LAG]; /* the tile finished in this iteration */
        if (kf < 0 || nf < 0)
            continue;
        const int64_t cf = nf / R;
        const int rf = (int)(nf % R);
        typename raw4<Tst>::type hq[BWD ? S : 1];
        if constexpr (BWD)
            hprev_load<Tst, S, L>(p, hf, cf, rf, ty, tx, hq);
        const unsigned long long cc0 = wprof ? clock64() : 0;
        mbar_wait(&carrybar[kf % kSlots], (unsigned)((kf / kSlots) & 1));
        if (wprof) {
            wck[1] += clock64() - cc0;
            wck[2]++;
        }
        float st[4];
#pragma unroll
        for (int v = 0; v < 4; v++)
            st[v] = eA[LAG][v] * carry[kf % kSlots][tx * 4 + v] + eB[LAG][v];
        tile_finish<Tst, S, L, BWD>(p, stage(kf), stage(kf) + L * W, cf, rf, ty, tx, st, hq, hout,
                                    dout);
        __syncwarp();
        if (lane == 0)
            mbar_arrive(&empty[kf % NS]);
    }
    /* every carry taken, so every aggregate slot read: one end mark a team */
    workers_sync();
    if (tid < W)
        for (int j = 0; j < XT; j++) {
            if (tid == 0)
                atile[(kend + j) % kSlots] = -1;
            mbar_arrive(&aggbar[(kend + j) % kSlots]);
        }
    if (wprof)
        for (int i = 0; i < 3; i++)
            p.prof[blockIdx.x * kProf + 6 + i] = wck[i];
}

/* ------------------------------------------------------------------------ */
/* The forward's lag held in L2 (MODE 11)                                    */

/*
 * rwindow_kernel: swindow_kernel's forward with the tile dropped from
 * shared memory once reduced and copied again (from L2, where its first
 * copy passed a few microseconds earlier) for its finish, LAG tiles
 * later. Two rings: NA stages for the first copies (the tile reduced, and
 * the copies in flight), NB for the reloads of the tiles to finish, so
 * that the lag is bounded by L2 rather than by shared memory. The
 * producer issues, in its iteration j, the first copy of tile j (after
 * the workers reduced tile j - NA) and the reload of tile j - NA - LAG +
 * NB (after they finished tile j - NA - LAG). With p.hint the first
 * copies ask L2 to keep their lines (evict_last) and the reloads to drop
 * them (evict_first). The exchange is swindow_kernel's; p.nofold takes
 * it out (wrong results: the loop and its reloads alone).
 */
constexpr int kRSlots = 8;

__device__ __forceinline__ void tma_2d_hint(void *dst, const CUtensorMap *map, int x, int y,
                                            uint64_t *m, uint64_t pol)
{
    asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes"
                 ".L2::cache_hint [%0], [%1, {%2, %3}], [%4], %5;" ::"r"(saddr(dst)),
                 "l"(map), "r"(x), "r"(y), "r"(saddr(m)), "l"(pol)
                 : "memory");
}

template <int L, typename Tst>
__device__ void issue_tile_hint(const wparams &p, const CUtensorMap *ta, const CUtensorMap *tb,
                                int r, int64_t c, Tst *st, uint64_t *m, bool hint, uint64_t pol)
{
    if (!hint) {
        issue_tile<L, false>(p, ta, tb, r, c, st, m);
        return;
    }
    int64_t t0;
    int nb;
    chunk_rows<L, false>(p, c, t0, nb);
    mbar_expect(m, 2u * L * W * sizeof(Tst));
    tma_2d_hint(st, ta, r * W, (int)t0, m, pol);
    tma_2d_hint(st + L * W, tb, r * W, (int)t0, m, pol);
}

template <typename Tst, int S, int NA, int NB, int LAG, int XT, bool TICKET>
__global__ void __launch_bounds__(ws_threads(XT), 1)
    rwindow_kernel(const __grid_constant__ wparams p, const __grid_constant__ CUtensorMap ta,
                   const __grid_constant__ CUtensorMap tb, const __grid_constant__ CUtensorMap th,
                   const __grid_constant__ CUtensorMap td)
{
    static_assert(NA >= 2 && NB >= 1 && LAG >= NB && kRSlots >= LAG + 2 && kRSlots >= XT,
                  "too few stages or slots");
    constexpr int L = TY * S, QN = 16;
    static_assert(QN > NA + LAG, "too few remembered tiles");
    extern __shared__ __align__(128) unsigned char ring_raw[]; /* (NA + NB, 2, L, W) of Tst */
    __shared__ uint64_t fullA[NA], emptyA[NA], fullB[NB], emptyB[NB], aggbar[kRSlots],
        carrybar[kRSlots];
    __shared__ int64_t stile[NA], atile[kRSlots], nq[QN]; /* nq: the last QN first copies' tiles */
    __shared__ float4 wgA[2][8][TX], wgB[2][8][TX];
    __shared__ float aggA[kRSlots][W], aggB[kRSlots][W], carry[kRSlots][W];
    Tst *const ring = reinterpret_cast<Tst *>(ring_raw);
    auto stageA = [&](int64_t k) { return ring + (size_t)(k % NA) * 2 * L * W; };
    auto stageB = [&](int64_t k) { return ring + (size_t)(NA + k % NB) * 2 * L * W; };
    const worker wk = worker_at<L>(p);
    const int tid = wk.tid, R = wk.R, Gc = wk.Gc;
    const int64_t NC = wk.NC, NT = NC * R;
    if (tid == 0) {
        for (int s = 0; s < NA; s++) {
            mbar_init(&fullA[s], 1);
            mbar_init(&emptyA[s], kThreads / 32);
        }
        for (int s = 0; s < NB; s++) {
            mbar_init(&fullB[s], 1);
            mbar_init(&emptyB[s], kThreads / 32);
        }
        for (int q = 0; q < kRSlots; q++) {
            mbar_init(&aggbar[q], W);
            mbar_init(&carrybar[q], kXThreads);
        }
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    }
    __syncthreads();

    if (tid >= kThreads + XT * kXThreads) { /* the producer */
        if (tid != kThreads + XT * kXThreads)
            return;
        uint64_t keep = 0, drop = 0;
        asm volatile("createpolicy.fractional.L2::evict_last.b64 %0, 1.0;" : "=l"(keep));
        asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(drop));
        int64_t kend = -1;
        for (int64_t j = 0;; j++) {
            if (kend < 0) {
                if (j >= NA)
                    mbar_wait(&emptyA[j % NA], (unsigned)((j / NA - 1) & 1));
                int64_t n;
                if (TICKET) {
                    const unsigned long long u = atomicAdd(p.counter, 1ull);
                    n = u >= p.tbase ? (int64_t)(u - p.tbase) : NT;
                } else {
                    n = j < wk.nk ? (wk.c0 + j * Gc) * R + wk.r : NT;
                }
                if (n >= NT) {
                    stile[j % NA] = -1;
                    mbar_arrive(&fullA[j % NA]);
                    kend = j;
                } else {
                    stile[j % NA] = n;
                    nq[j % QN] = n;
                    issue_tile_hint<L>(p, &ta, &tb, (int)(n % R), n / R, stageA(j), &fullA[j % NA],
                                       p.hint != 0, keep);
                }
            }
            const int64_t f = j - NA - LAG + NB; /* the reload of this iteration */
            if (kend >= 0 && f >= kend)
                return;
            if (f < 0)
                continue;
            if (f >= NB)
                mbar_wait(&emptyB[f % NB], (unsigned)((f / NB - 1) & 1));
            const int64_t n = nq[f % QN];
            issue_tile_hint<L>(p, &ta, &tb, (int)(n % R), n / R, stageB(f), &fullB[f % NB],
                               p.hint != 0, drop);
        }
    }

    if (tid >= kThreads) {
        exchange_loop<kRSlots, XT>(p, tid, Gc, NC, aggbar, carrybar, atile, aggA, aggB, carry);
        return;
    }

    /* the workers */
    Tst *const hout = as_storage<Tst>(p.h);
    const int tx = wk.tx, ty = wk.ty, warp = wk.warp, lane = wk.lane;
    const bool wprof = p.prof && tid == 0;
    unsigned long long wck[4] = {0, 0, 0, 0}; /* clocks: copy, carry, tiles, reload */
    float eA[LAG + 1][4], eB[LAG + 1][4];
    int64_t en[LAG + 1];
#pragma unroll
    for (int i = 0; i <= LAG; i++) {
        en[i] = -1;
#pragma unroll
        for (int v = 0; v < 4; v++) {
            eA[i][v] = 1.0f;
            eB[i][v] = 0.0f;
        }
    }
    int64_t kend = -1;
    for (int64_t k = 0; kend < 0 || k < kend + LAG; k++) {
        float pA[4] = {1.0f, 1.0f, 1.0f, 1.0f}, pB[4] = {0.0f, 0.0f, 0.0f, 0.0f};
        int64_t n = -1;
        if (kend < 0) {
            const unsigned long long cf0 = wprof ? clock64() : 0;
            mbar_wait(&fullA[k % NA], (unsigned)((k / NA) & 1));
            if (wprof)
                wck[0] += clock64() - cf0;
            n = stile[k % NA];
            if (n < 0)
                kend = k;
        }
        if (n >= 0) {
            int64_t t0;
            int nr;
            chunk_rows<L, false>(p, n / R, t0, nr);
            float A[4], Bs[4], xA[4], xB[4], nA, nB;
            tile_summary<Tst, S, false>(stageA(k), stageA(k) + L * W, nr, ty, tx, A, Bs);
            __syncwarp();
            if (lane == 0)
                mbar_arrive(&emptyA[k % NA]);
            warp_rows(A, Bs, lane, warp, tx, wgA[k & 1], wgB[k & 1], xA, xB);
            workers_sync();
            tile_prefix(tid, warp, tx, wgA[k & 1], wgB[k & 1], xA, xB, pA, pB, nA, nB);
            if (tid < W) {
                publish_pair(p.words + n * 2 * W, tid, nA, nB, p.tag);
                aggA[k % kRSlots][tid] = nA;
                aggB[k % kRSlots][tid] = nB;
                if (tid == 0)
                    atile[k % kRSlots] = n;
                mbar_arrive(&aggbar[k % kRSlots]);
            }
        }
        push_prefix(eA, eB, pA, pB);
#pragma unroll
        for (int i = LAG; i >= 1; i--)
            en[i] = en[i - 1];
        en[0] = n;
        const int64_t kf = k - LAG, nf = en[LAG];
        if (kf < 0 || nf < 0)
            continue;
        const unsigned long long cc0 = wprof ? clock64() : 0;
        mbar_wait(&carrybar[kf % kRSlots], (unsigned)((kf / kRSlots) & 1));
        const unsigned long long cc1 = wprof ? clock64() : 0;
        mbar_wait(&fullB[kf % NB], (unsigned)((kf / NB) & 1));
        if (wprof) {
            wck[1] += cc1 - cc0;
            wck[3] += clock64() - cc1;
            wck[2]++;
        }
        float st[4];
#pragma unroll
        for (int v = 0; v < 4; v++)
            st[v] = eA[LAG][v] * carry[kf % kRSlots][tx * 4 + v] + eB[LAG][v];
        tile_finish<Tst, S, L, false>(p, stageB(kf), stageB(kf) + L * W, nf / R, (int)(nf % R), ty,
                                      tx, st, nullptr, hout, nullptr);
        __syncwarp();
        if (lane == 0)
            mbar_arrive(&emptyB[kf % NB]);
    }
    workers_sync();
    if (tid < W)
        for (int j = 0; j < XT; j++) {
            if (tid == 0)
                atile[(kend + j) % kRSlots] = -1;
            mbar_arrive(&aggbar[(kend + j) % kRSlots]);
        }
    if (wprof) {
        for (int i = 0; i < 3; i++)
            p.prof[blockIdx.x * kProf + 6 + i] = wck[i];
        p.prof[blockIdx.x * kProf + 9] = wck[3];
    }
}

/* ------------------------------------------------------------------------ */
/* The forward's lag held in the tile threads' registers (MODE 12)          */

/*
 * gwindow_kernel: swindow_kernel's forward (tiles by worker or by ticket,
 * the groups' exchange in XT teams) with one more tile of lag held in the
 * 256 tile threads' registers: in iteration k the workers reduce tile k
 * from its stage, finish tile k - LAG - 1 from their registers, then load
 * their part of tile k - LAG (S steps of 4 columns of a and b: 8 S floats)
 * from its stage into those registers and free the stage. So NS stages
 * give a lag of LAG + 1 tiles with as many copies in flight as
 * swindow_kernel's lag LAG. The block is four warpgroups (512 threads:
 * 256 tile threads, the XT <= 3 teams, the producer, an idle warp) and
 * moves registers from the exchange and the producer to the tile threads
 * with setmaxnreg (sm_90a: -gencode=arch=compute_90a,code=sm_90a; in a
 * plain sm_90 build the kernel is empty and the host skips it).
 */
constexpr int kGSlots = 6, kGThreads = 512, kGRegsTile = 136, kGRegsRest = 120;
static_assert(2 * 128 * kGRegsTile + 2 * 128 * kGRegsRest <= 65536, "register file");
static_assert(kGSlots >= 4 && kGThreads == 4 * 128, "slots, warpgroups");

/* A stage's four elements as stored (raw4), for registers. */
__device__ __forceinline__ float4 sraw(const float *q)
{
    return *reinterpret_cast<const float4 *>(q);
}
__device__ __forceinline__ uint2 sraw(const __nv_bfloat16 *q)
{
    return *reinterpret_cast<const uint2 *>(q);
}

/* Thread (ty, tx)'s steps of chunk c from the state st entering them, its
 * a and b held raw in registers (ra, rb), h written. */
template <typename Tst, int S, int L>
__device__ __forceinline__ void
tile_finish_regs(const wparams &p, const typename raw4<Tst>::type (&ra)[S],
                 const typename raw4<Tst>::type (&rb)[S], int64_t c, int r, int ty, int tx,
                 float (&st)[4], Tst *hout)
{
    int64_t t0;
    int nr;
    chunk_rows<L, false>(p, c, t0, nr);
    const int64_t colo = r * W + tx * 4;
#pragma unroll
    for (int s = 0; s < S; s++) {
        const int i = ty * S + s;
        if (i < nr) {
            const float4 av = to4(ra[s]), bv = to4(rb[s]);
            st[0] = av.x * st[0] + bv.x;
            st[1] = av.y * st[1] + bv.y;
            st[2] = av.z * st[2] + bv.z;
            st[3] = av.w * st[3] + bv.w;
            stcs4(hout + (t0 + i) * p.H + colo, make_float4(st[0], st[1], st[2], st[3]));
        }
    }
}

/* gwindow_kernel's producer: tiles by ticket or the worker's, each copied
 * into the next free stage. */
template <int L, int NS, bool TICKET, typename Tst>
__device__ __forceinline__ void gwindow_producer(const wparams &p, const CUtensorMap &ta,
                                              const CUtensorMap &tb, const worker &wk,
                                              uint64_t *full, uint64_t *empty, int64_t *stile,
                                              Tst *ring)
{
    const int R = wk.R, Gc = wk.Gc;
    const int64_t NT = wk.NC * R;
    auto stage = [&](int64_t k) { return ring + (size_t)(k % NS) * 2 * L * W; };
    for (int64_t k = 0;; k++) {
        if (k >= NS)
            mbar_wait(&empty[k % NS], (unsigned)((k / NS - 1) & 1));
        int64_t n;
        if (TICKET) {
            const unsigned long long u = atomicAdd(p.counter, 1ull);
            n = u >= p.tbase ? (int64_t)(u - p.tbase) : NT;
        } else {
            n = k < wk.nk ? (wk.c0 + k * Gc) * R + wk.r : NT;
        }
        if (n >= NT) {
            stile[k % NS] = -1;
            mbar_arrive(&full[k % NS]);
            return;
        }
        stile[k % NS] = n;
        issue_tile<L, false>(p, &ta, &tb, (int)(n % R), n / R, stage(k), &full[k % NS]);
    }
}

template <typename Tst, int S, int NS, int LAG, int XT, bool TICKET>
__global__ void __launch_bounds__(kGThreads, 1)
    gwindow_kernel(const __grid_constant__ wparams p, const __grid_constant__ CUtensorMap ta,
                   const __grid_constant__ CUtensorMap tb, const __grid_constant__ CUtensorMap th,
                   const __grid_constant__ CUtensorMap td)
{
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    static_assert(NS >= LAG + 2 && kGSlots >= LAG + 3 && kGSlots >= XT && XT <= 3,
                  "too few stages or slots, or too many teams");
    constexpr int L = TY * S, LT = LAG + 1; /* the lag in all */
    extern __shared__ __align__(128) unsigned char ring_raw[]; /* (NS, 2, L, W) of Tst */
    __shared__ uint64_t full[NS], empty[NS], aggbar[kGSlots], carrybar[kGSlots];
    __shared__ int64_t stile[NS], atile[kGSlots];
    __shared__ float4 wgA[2][8][TX], wgB[2][8][TX];
    __shared__ float aggA[kGSlots][W], aggB[kGSlots][W], carry[kGSlots][W];
    Tst *const ring = reinterpret_cast<Tst *>(ring_raw);
    auto stage = [&](int64_t k) { return ring + (size_t)(k % NS) * 2 * L * W; };
    const worker wk = worker_at<L>(p);
    const int tid = wk.tid, R = wk.R, Gc = wk.Gc;
    const int64_t NC = wk.NC;
    if (tid == 0) {
        for (int s = 0; s < NS; s++) {
            mbar_init(&full[s], 1);
            mbar_init(&empty[s], kThreads / 32);
        }
        for (int q = 0; q < kGSlots; q++) {
            mbar_init(&aggbar[q], W);
            mbar_init(&carrybar[q], kXThreads);
        }
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    }
    __syncthreads();
    /* warpgroups 0, 1: the tile threads; 2, 3: the teams, the producer, idle
     * (the warpgroup as a warp-uniform value, so that each role's code lies
     * under its own setmaxnreg) */
    const int wgrp = __shfl_sync(0xffffffffu, (int)(threadIdx.x / 128), 0);
    const int prod = kThreads + XT * kXThreads;
    if (wgrp >= 2) {
        asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;" ::"n"(kGRegsRest));
        if (tid >= prod) { /* the producer (one thread); the rest idle */
            if (tid == prod)
                gwindow_producer<L, NS, TICKET, Tst>(p, ta, tb, wk, full, empty, stile, ring);
            return;
        }
        exchange_loop<kGSlots, XT>(p, tid, Gc, NC, aggbar, carrybar, atile, aggA, aggB, carry);
        return;
    }
    asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;" ::"n"(kGRegsTile));

    /* the workers */
    Tst *const hout = as_storage<Tst>(p.h);
    const int tx = wk.tx, ty = wk.ty, warp = wk.warp, lane = wk.lane;
    const bool wprof = p.prof && tid == 0;
    unsigned long long wck[3] = {0, 0, 0};
    float eA[LT + 1][4], eB[LT + 1][4]; /* the prefixes of tiles k, k - 1, ..., k - LT */
    int64_t en[LT + 1];
    typename raw4<Tst>::type ra[S], rb[S]; /* this thread's part of the tile, raw */
#pragma unroll
    for (int i = 0; i <= LT; i++) {
        en[i] = -1;
#pragma unroll
        for (int v = 0; v < 4; v++) {
            eA[i][v] = 1.0f;
            eB[i][v] = 0.0f;
        }
    }
    int64_t kend = -1;
    for (int64_t k = 0; kend < 0 || k < kend + LT; k++) {
        float pA[4] = {1.0f, 1.0f, 1.0f, 1.0f}, pB[4] = {0.0f, 0.0f, 0.0f, 0.0f};
        int64_t n = -1;
        if (kend < 0) {
            const unsigned long long cf0 = wprof ? clock64() : 0;
            mbar_wait(&full[k % NS], (unsigned)((k / NS) & 1));
            if (wprof)
                wck[0] += clock64() - cf0;
            n = stile[k % NS];
            if (n < 0)
                kend = k;
        }
        if (n >= 0) {
            int64_t t0;
            int nr;
            chunk_rows<L, false>(p, n / R, t0, nr);
            float A[4], Bs[4], xA[4], xB[4], nA, nB;
            tile_summary<Tst, S, false>(stage(k), stage(k) + L * W, nr, ty, tx, A, Bs);
            warp_rows(A, Bs, lane, warp, tx, wgA[k & 1], wgB[k & 1], xA, xB);
            workers_sync();
            tile_prefix(tid, warp, tx, wgA[k & 1], wgB[k & 1], xA, xB, pA, pB, nA, nB);
            if (tid < W) {
                publish_pair(p.words + n * 2 * W, tid, nA, nB, p.tag);
                aggA[k % kGSlots][tid] = nA;
                aggB[k % kGSlots][tid] = nB;
                if (tid == 0)
                    atile[k % kGSlots] = n;
                mbar_arrive(&aggbar[k % kGSlots]);
            }
        }
        push_prefix(eA, eB, pA, pB);
#pragma unroll
        for (int i = LT; i >= 1; i--)
            en[i] = en[i - 1];
        en[0] = n;
        /* tile k - LT from the registers */
        const int64_t kf = k - LT, nf = en[LT];
        if (kf >= 0 && nf >= 0) {
            const unsigned long long cc0 = wprof ? clock64() : 0;
            mbar_wait(&carrybar[kf % kGSlots], (unsigned)((kf / kGSlots) & 1));
            if (wprof) {
                wck[1] += clock64() - cc0;
                wck[2]++;
            }
            float st[4];
#pragma unroll
            for (int v = 0; v < 4; v++)
                st[v] = eA[LT][v] * carry[kf % kGSlots][tx * 4 + v] + eB[LT][v];
            tile_finish_regs<Tst, S, L>(p, ra, rb, nf / R, (int)(nf % R), ty, tx, st, hout);
        }
        /* tile k - LAG into the registers, its stage freed */
        const int64_t kr = k - LAG, nrr = en[LAG];
        if (kr >= 0 && nrr >= 0) {
            const Tst *sa = stage(kr), *sb = stage(kr) + L * W;
#pragma unroll
            for (int s = 0; s < S; s++) {
                ra[s] = sraw(sa + (ty * S + s) * W + tx * 4);
                rb[s] = sraw(sb + (ty * S + s) * W + tx * 4);
            }
            __syncwarp();
            if (lane == 0)
                mbar_arrive(&empty[kr % NS]);
        }
    }
    workers_sync();
    if (tid < W)
        for (int j = 0; j < XT; j++) {
            if (tid == 0)
                atile[(kend + j) % kGSlots] = -1;
            mbar_arrive(&aggbar[(kend + j) % kGSlots]);
        }
    if (wprof)
        for (int i = 0; i < 3; i++)
            p.prof[blockIdx.x * kProf + 6 + i] = wck[i];
#endif
}

/* ------------------------------------------------------------------------ */
/* --probe's baseline: the window kernel's two round trips on an idle device */

/* Thread 0 of each block, n times: a load of a word it stored (an L2 hit)
 * and of a scattered element of a (after a flush: from DRAM), each timed
 * until its value is used; clock sums into out[2 block], out[2 block + 1]. */
__global__ void probe_idle_kernel(unsigned long long *words, const float *a, int64_t nelem, int n,
                                  unsigned long long *out)
{
    __shared__ volatile unsigned long long sink;
    if (threadIdx.x != 0)
        return;
    unsigned long long *const w = words + (size_t)blockIdx.x * 2 * W;
    st_word(w, 1ull);
    unsigned long long l2 = 0, dram = 0;
    for (int i = 0; i < n; i++) {
        l2 += time_word(w, sink);
        dram += time_element(a + ((int64_t)blockIdx.x * n + i) * 7919 * 64 % nelem, sink);
    }
    out[2 * blockIdx.x] = l2;
    out[2 * blockIdx.x + 1] = dram;
}

static uint64_t rng = 88172645463325252ull;
static double urand(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (double)(rng >> 11) * (1.0 / 9007199254740992.0);
}

struct config {
    const char *name;
    void (*kernel)(wparams, CUtensorMap, CUtensorMap, CUtensorMap, CUtensorMap);
    int S, NS, mode;
    bool bwd;
    int es = 4;       /* bytes an element: 4 fp32, 2 bf16 */
    int early = 0;    /* pipelined: wparams.early */
    int tstore = 0;   /* wparams.tstore */
    int nofold = 0;   /* wparams.nofold */
    int fast = 0;     /* wparams.fast */
    int counters = 1; /* pipelined: built with the phase counters */
    int cs = 0;       /* clusters: blocks a cluster */
    int xt = 1;       /* warp specialization: exchange teams */
    int tk = 0;       /* warp specialization: tiles by ticket */
    int hint = 0;     /* reload: wparams.hint */
    int scan = 0;     /* warp specialization: wparams.scan */
    int wide = 0;     /* wparams.wide */
};

/* clang-format off */
#define CFG(S, NS, M, B) {#S ":" #NS, window_kernel<float, S, NS, M, B>, S, NS, M, B}
#define LCFG(S, NS, B) {#S ":" #NS, lwindow_kernel<float, S, NS, B>, S, NS, 4, B, 4}
#define LCFG16(S, NS, B) {#S ":" #NS, lwindow_kernel<__nv_bfloat16, S, NS, B>, S, NS, 4, B, 2}
#define PCFG(S, NS, E, B) {#S ":" #NS " E" #E, pwindow_kernel<float, S, NS, E, B>, S, NS, 6, B, 4}
#define PCFG16(S, NS, E, B) {#S ":" #NS " E" #E, pwindow_kernel<__nv_bfloat16, S, NS, E, B>, S, NS, 6, B, 2}
#define CFGT(S, NS, M, B) {#S ":" #NS " tma", window_kernel<float, S, NS, M, B>, S, NS, M, B, 4, 0, 1}
#define CFGT16(S, NS, M, B) {#S ":" #NS " tma", window_kernel<__nv_bfloat16, S, NS, M, B>, S, NS, M, B, 2, 0, 1}
#define PCFGT(S, NS, E, B, EA) {#S ":" #NS " E" #E " tma" #EA, pwindow_kernel<float, S, NS, E, B>, S, NS, 6, B, 4, EA, 1}
#define PCFGT16(S, NS, E, B, EA) {#S ":" #NS " E" #E " tma" #EA, pwindow_kernel<__nv_bfloat16, S, NS, E, B>, S, NS, 6, B, 2, EA, 1}
#define PCFGN(S, NS, E, B) {#S ":" #NS " E" #E " nofold", pwindow_kernel<float, S, NS, E, B>, S, NS, 6, B, 4, 0, 0, 1}
#define PCFGF(S, NS, E, B) {#S ":" #NS " E" #E " fast", pwindow_kernel<float, S, NS, E, B>, S, NS, 6, B, 4, 0, 0, 0, 1}
#define PCFGF16(S, NS, E, B) {#S ":" #NS " E" #E " fast", pwindow_kernel<__nv_bfloat16, S, NS, E, B>, S, NS, 6, B, 2, 0, 0, 0, 1}
#define PCFGF0(S, NS, E, B) {#S ":" #NS " E" #E " fast, no counters", pwindow_kernel<float, S, NS, E, B, false>, S, NS, 6, B, 4, 0, 0, 0, 1, 0}
#define CCFG(S, NS, CS, B) {#S ":" #NS " cl" #CS, cwindow_kernel<float, S, NS, CS, B>, S, NS, 8, B, 4, 0, 0, 0, 0, 1, CS}
#define CCFG16(S, NS, CS, B) {#S ":" #NS " cl" #CS, cwindow_kernel<__nv_bfloat16, S, NS, CS, B>, S, NS, 8, B, 2, 0, 0, 0, 0, 1, CS}
#define SCFG(S, NS, LAG, XT, TK, B) {#S ":" #NS " lag" #LAG " x" #XT " t" #TK, swindow_kernel<float, S, NS, LAG, XT, TK, B>, S, NS, 10, B, 4, 0, 0, 0, 0, 1, 0, XT, TK}
#define SCFG16(S, NS, LAG, XT, TK, B) {#S ":" #NS " lag" #LAG " x" #XT " t" #TK, swindow_kernel<__nv_bfloat16, S, NS, LAG, XT, TK, B>, S, NS, 10, B, 2, 0, 0, 0, 0, 1, 0, XT, TK}
#define RCFG(S, NA, NB, LAG, XT, TK, HI) {#S ":" #NA "+" #NB " lag" #LAG " x" #XT " t" #TK " h" #HI, rwindow_kernel<float, S, NA, NB, LAG, XT, TK>, S, NA + NB, 11, false, 4, 0, 0, 0, 0, 1, 0, XT, TK, HI}
#define RCFGN(S, NA, NB, LAG, XT, TK, HI) {#S ":" #NA "+" #NB " lag" #LAG " x" #XT " t" #TK " h" #HI " no exchange", rwindow_kernel<float, S, NA, NB, LAG, XT, TK>, S, NA + NB, 11, false, 4, 0, 0, 1, 0, 1, 0, XT, TK, HI}
#define RCFG16(S, NA, NB, LAG, XT, TK, HI) {#S ":" #NA "+" #NB " lag" #LAG " x" #XT " t" #TK " h" #HI, rwindow_kernel<__nv_bfloat16, S, NA, NB, LAG, XT, TK>, S, NA + NB, 11, false, 2, 0, 0, 0, 0, 1, 0, XT, TK, HI}
#define RCFGN16(S, NA, NB, LAG, XT, TK, HI) {#S ":" #NA "+" #NB " lag" #LAG " x" #XT " t" #TK " h" #HI " no exchange", rwindow_kernel<__nv_bfloat16, S, NA, NB, LAG, XT, TK>, S, NA + NB, 11, false, 2, 0, 0, 1, 0, 1, 0, XT, TK, HI}
#define XCFG(S, NS, LAG, XT, B, K) {#S ":" #NS " lag" #LAG " x" #XT " t1 scan" #K, swindow_kernel<float, S, NS, LAG, XT, true, B, K>, S, NS, 10, B, 4, 0, 0, 0, 0, 1, 0, XT, 1, 0, 1}
#define XCFG16(S, NS, LAG, XT, B, K) {#S ":" #NS " lag" #LAG " x" #XT " t1 scan" #K, swindow_kernel<__nv_bfloat16, S, NS, LAG, XT, true, B, K>, S, NS, 10, B, 2, 0, 0, 0, 0, 1, 0, XT, 1, 0, 1}
#define GCFG(S, NS, LAG, XT, TK) {#S ":" #NS " lag" #LAG "+1 x" #XT " t" #TK, gwindow_kernel<float, S, NS, LAG, XT, TK>, S, NS, 12, false, 4, 0, 0, 0, 0, 1, 0, XT, TK}
#define GCFG16(S, NS, LAG, XT, TK) {#S ":" #NS " lag" #LAG "+1 x" #XT " t" #TK, gwindow_kernel<__nv_bfloat16, S, NS, LAG, XT, TK>, S, NS, 12, false, 2, 0, 0, 0, 0, 1, 0, XT, TK}
#define SCFG16W(S, NS, LAG, XT, TK) {#S ":" #NS " lag" #LAG " x" #XT " t" #TK " wide", swindow_kernel<__nv_bfloat16, S, NS, LAG, XT, TK, false>, S, NS, 10, false, 2, 0, 0, 0, 0, 1, 0, XT, TK, 0, 0, 1}
#define GCFG16W(S, NS, LAG, XT, TK) {#S ":" #NS " lag" #LAG "+1 x" #XT " t" #TK " wide", gwindow_kernel<__nv_bfloat16, S, NS, LAG, XT, TK>, S, NS, 12, false, 2, 0, 0, 0, 0, 1, 0, XT, TK, 0, 0, 1}
#define PCFGE(S, NS, E, B) {#S ":" #NS " E" #E " early", pwindow_kernel<float, S, NS, E, B>, S, NS, 6, B, 4, 1}
#define PCFGE16(S, NS, E, B) {#S ":" #NS " E" #E " early", pwindow_kernel<__nv_bfloat16, S, NS, E, B>, S, NS, 6, B, 2, 1}
/* clang-format on */

static PFN_cuTensorMapEncodeTiled_v12000 encode_tiled;

/* A tensor map of boxes W x L over the [T, H] fp32 array at base. */
static CUtensorMap tile_map(const void *base, int64_t T, int H, int L, int esize)
{
    CUtensorMap m;
    const cuuint64_t dims[2] = {(cuuint64_t)H, (cuuint64_t)T}, strides[1] = {(cuuint64_t)H * esize};
    const cuuint32_t box[2] = {(cuuint32_t)W, (cuuint32_t)L}, es[2] = {1, 1};
    const CUresult e = encode_tiled(
        &m, esize == 4 ? CU_TENSOR_MAP_DATA_TYPE_FLOAT32 : CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2,
        (void *)base, dims, strides, box, es, CU_TENSOR_MAP_INTERLEAVE_NONE,
        CU_TENSOR_MAP_SWIZZLE_NONE, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
        CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
    if (e != CUDA_SUCCESS) {
        fprintf(stderr, "cuTensorMapEncodeTiled: %d\n", (int)e);
        exit(1);
    }
    return m;
}

/* H = 64 only: [T, 64] viewed as [T / 2, 128], boxes of L / 2 rows of two
 * steps (256-byte rows for 16-bit storage). */
static CUtensorMap wide_map(const void *base, int64_t T, int L, int esize)
{
    CUtensorMap m;
    const cuuint64_t dims[2] = {(cuuint64_t)2 * W, (cuuint64_t)(T / 2)},
                     strides[1] = {(cuuint64_t)2 * W * esize};
    const cuuint32_t box[2] = {(cuuint32_t)2 * W, (cuuint32_t)(L / 2)}, es[2] = {1, 1};
    const CUresult e = encode_tiled(
        &m, esize == 4 ? CU_TENSOR_MAP_DATA_TYPE_FLOAT32 : CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2,
        (void *)base, dims, strides, box, es, CU_TENSOR_MAP_INTERLEAVE_NONE,
        CU_TENSOR_MAP_SWIZZLE_NONE, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
        CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
    if (e != CUDA_SUCCESS) {
        fprintf(stderr, "cuTensorMapEncodeTiled (wide): %d\n", (int)e);
        exit(1);
    }
    return m;
}

static double max_rel_err(const float *x, const double *ref, size_t n)
{
    double err = 0.0;
    for (size_t i = 0; i < n; i++) {
        const double e = fabs((double)x[i] - ref[i]) / (fabs(ref[i]) + 1e-2);
        if (!(e <= err))
            err = e; /* NaN included */
    }
    return err;
}

int main(int argc, char **argv)
{
    const int64_t T = argc > 1 ? atoll(argv[1]) : (1 << 20);
    cudaStream_t s;
    CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    if (bench_flush_init() != 0)
        return 1;
    cudaDriverEntryPointQueryResult q;
    CUDA_CHECK(cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", (void **)&encode_tiled,
                                                12000, cudaEnableDefault, &q));
    if (q != cudaDriverEntryPointSuccess)
        return 1;
    const double roof = bench_copy_bandwidth(s, 1);
    int sms, optin;
    CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
    CUDA_CHECK(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, 0));
    int l2;
    CUDA_CHECK(cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, 0));
    printf("L2 %d KiB\n", l2 >> 10);
    printf(
        "copy roofline %.1f GB/s, %d SMs, T = %lld, queued timing, median of 20; bytes per element "
        "12 forward (a, b read, h written), 20 backward (a, dh, h read, da, db written)\n",
        roof * 1e-9, sms, (long long)T);

    /* default: the pipelined kernel against the bound and the groups at lag one;
     * --lag: the kernels at lag one and two; --nowait: the bound, the groups
     * and the groups without waiting, forward */
    const config pipe_cfgs[] = {
        CFG(9, 3, 0, false),    CFG(4, 6, 0, false),    CFG(9, 3, 2, false),
        PCFG(4, 6, 1, false),   PCFG(5, 5, 1, false),   PCFG(4, 6, 2, false),
        PCFG(3, 7, 2, false),   PCFG16(8, 6, 1, false), PCFG16(10, 5, 1, false),
        PCFG16(8, 6, 2, false), CFG(9, 3, 0, true),     CFG(9, 3, 2, true),
        PCFG(4, 6, 1, true),    PCFG(5, 5, 1, true),    PCFG(4, 6, 2, true),
        PCFG16(8, 6, 1, true),  PCFG16(8, 6, 2, true)};
    const config lag_cfgs[] = {CFG(9, 3, 2, false), CFG(6, 4, 0, false),  LCFG(6, 4, false),
                               LCFG(5, 5, false),   LCFG16(12, 4, false), LCFG16(10, 5, false),
                               CFG(9, 3, 2, true),  LCFG(6, 4, true),     LCFG(5, 5, true),
                               LCFG16(12, 4, true), LCFG16(10, 5, true)};
    const config nowait_cfgs[] = {CFG(9, 3, 0, false), CFG(9, 3, 2, false), CFG(9, 3, 3, false)};
    /* --prof: the pipelined kernel's phases, its copies issued late or early */
    const config prof_cfgs[] = {
        CFG(4, 6, 0, false),     PCFGN(5, 5, 1, false),  PCFG(5, 5, 1, false),
        PCFGF(5, 5, 1, false),   PCFGF0(5, 5, 1, false), PCFGF(4, 6, 1, false),
        PCFGF(4, 6, 2, false),   PCFGF0(4, 6, 2, false), PCFGF16(10, 5, 1, false),
        PCFGF16(8, 6, 2, false), PCFGF(5, 5, 1, true),   PCFGF(4, 6, 2, true),
        PCFGF0(5, 5, 1, true),   PCFGF16(10, 5, 1, true)};
    /* --tma: full tiles' results stored from their stage by TMA */
    const config tma_cfgs[] = {
        CFGT(9, 3, 0, false),     CFGT(4, 6, 0, false),        CFGT(9, 3, 2, false),
        CFGT(9, 3, 3, false),     PCFGT(4, 6, 1, false, 0),    PCFGT(5, 5, 1, false, 0),
        PCFGT(5, 5, 1, false, 1), PCFGT(4, 6, 2, false, 0),    CFGT16(16, 3, 0, false),
        CFGT16(16, 3, 2, false),  PCFGT16(10, 5, 1, false, 0), PCFGT16(8, 6, 2, false, 0),
        CFGT(9, 3, 0, true),      CFGT(9, 3, 2, true),         PCFGT(5, 5, 1, true, 0),
        PCFGT(4, 6, 2, true, 0),  CFGT16(16, 3, 2, true)};
    /* --probe: the round trips of an L2 hit and a DRAM load under the bound's copies */
    const config probe_cfgs[] = {CFG(9, 3, 0, false), CFG(6, 4, 0, false), CFG(4, 6, 0, false),
                                 CFG(3, 7, 0, false), CFG(9, 3, 0, true),  CFG(4, 6, 0, true)};
    /* --cluster: the exchange in clusters, lag 2 */
    const config cluster_cfgs[] = {
        CFG(6, 4, 0, false),     CFG(9, 3, 2, false),   CCFG(6, 4, 8, false),
        CCFG(5, 5, 8, false),    CCFG(6, 4, 16, false), CCFG16(12, 4, 8, false),
        CCFG16(10, 5, 8, false), CFG(9, 3, 2, true),    CCFG(6, 4, 8, true),
        CCFG(6, 4, 16, true),    CCFG16(12, 4, 8, true)};
    /* --ws: warp specialization. The forward by worker (t0) at the lag and
     * teams that made the backward (lag 2, 3 teams; run r28 measured the
     * forward by worker only at lag 1 x 2, by ticket at lag 2 x 3), beside
     * its best so far (8:3 lag 1 x 2 t0); the backward as the library's
     * WINDOW runs it (6:4 / 12:4 lag 2 x 3 t1) */
    const config ws_cfgs[] = {
        CFG(4, 6, 0, false),           CFG(9, 3, 2, false),           SCFG(8, 3, 1, 2, 0, false),
        SCFG(6, 4, 2, 3, 0, false),    SCFG(5, 5, 2, 3, 0, false),    SCFG(6, 4, 2, 2, 0, false),
        SCFG16(12, 4, 2, 3, 0, false), SCFG16(10, 5, 2, 3, 0, false), CFG(4, 6, 0, true),
        SCFG(6, 4, 2, 3, 1, true),     SCFG16(12, 4, 2, 3, 1, true)};
    /* --reload: the forward's lag held in L2 (rwindow_kernel), beside the
     * bound and swindow_kernel's best forward */
    const config reload_cfgs[] = {
        CFG(4, 6, 0, false),           SCFG(6, 4, 2, 3, 0, false),    RCFGN(6, 3, 1, 4, 3, 0, 1),
        RCFG(6, 3, 1, 3, 3, 0, 1),     RCFG(6, 3, 1, 4, 3, 0, 1),     RCFG(6, 3, 1, 4, 3, 0, 0),
        RCFG(6, 3, 1, 5, 3, 0, 1),     RCFG(6, 2, 2, 4, 3, 0, 1),     RCFG(6, 3, 1, 4, 3, 1, 1),
        RCFG(5, 4, 1, 4, 3, 0, 1),     RCFG(4, 4, 2, 5, 3, 0, 1),     RCFGN16(12, 3, 1, 4, 3, 0, 1),
        RCFG16(12, 3, 1, 3, 3, 0, 1),  RCFG16(12, 3, 1, 4, 3, 0, 1),  RCFG16(12, 3, 1, 5, 3, 0, 1)};
    /* --scan: block 0 scans the aggregates into states, the exchange polls one
     * state word a tile; beside the bound and the groups' exchange */
    const config scan_cfgs[] = {CFG(4, 6, 0, false), SCFG(6, 4, 2, 3, 1, false),
                                XCFG(6, 4, 2, 3, false, 8), XCFG(6, 4, 2, 3, false, 4),
                                XCFG(8, 3, 1, 2, false, 8), XCFG16(12, 4, 2, 3, false, 8),
                                XCFG(6, 4, 2, 3, true, 8)};
    /* --reg: one more tile of lag in the tile threads' registers
     * (gwindow_kernel, the sm_90a build), beside swindow_kernel's forward */
    const config reg_cfgs[] = {
        CFG(4, 6, 0, false),       SCFG(6, 4, 2, 3, 0, false), SCFG(6, 4, 2, 3, 1, false),
        GCFG(6, 4, 2, 3, false),   GCFG(6, 4, 2, 3, true),     GCFG(6, 4, 2, 2, false),
        GCFG(8, 3, 1, 3, false),   GCFG(8, 3, 1, 2, false),    GCFG(5, 5, 3, 3, false),
        GCFG(5, 5, 3, 3, true),    SCFG16(12, 4, 2, 3, 0, false), GCFG16(12, 4, 2, 3, false),
        GCFG16(16, 3, 1, 3, false), SCFG16W(12, 4, 2, 3, false), GCFG16W(12, 4, 2, 3, false),
        GCFG16W(16, 3, 1, 3, false)};
    const char *opt = argc > 2 ? argv[2] : "";
    const bool nowait = !strcmp(opt, "--nowait"), lag = !strcmp(opt, "--lag"),
               profile = !strcmp(opt, "--prof"), tma = !strcmp(opt, "--tma"),
               probing = !strcmp(opt, "--probe"), clusters = !strcmp(opt, "--cluster"),
               ws = !strcmp(opt, "--ws"), reload = !strcmp(opt, "--reload"),
               scanning = !strcmp(opt, "--scan"), regs = !strcmp(opt, "--reg");
    const config *cfgs = nowait     ? nowait_cfgs
                         : lag      ? lag_cfgs
                         : profile  ? prof_cfgs
                         : tma      ? tma_cfgs
                         : probing  ? probe_cfgs
                         : clusters ? cluster_cfgs
                         : ws       ? ws_cfgs
                         : reload   ? reload_cfgs
                         : scanning ? scan_cfgs
                         : regs     ? reg_cfgs
                                    : pipe_cfgs;
    const int ncfgs = nowait     ? 3
                      : probing  ? (int)(sizeof probe_cfgs / sizeof probe_cfgs[0])
                      : clusters ? (int)(sizeof cluster_cfgs / sizeof cluster_cfgs[0])
                      : ws       ? (int)(sizeof ws_cfgs / sizeof ws_cfgs[0])
                      : reload   ? (int)(sizeof reload_cfgs / sizeof reload_cfgs[0])
                      : scanning ? (int)(sizeof scan_cfgs / sizeof scan_cfgs[0])
                      : regs     ? (int)(sizeof reg_cfgs / sizeof reg_cfgs[0])
                      : tma      ? (int)(sizeof tma_cfgs / sizeof tma_cfgs[0])
                      : lag      ? (int)(sizeof lag_cfgs / sizeof lag_cfgs[0])
                      : profile  ? (int)(sizeof prof_cfgs / sizeof prof_cfgs[0])
                                 : (int)(sizeof pipe_cfgs / sizeof pipe_cfgs[0]);
    int clock_khz;
    CUDA_CHECK(cudaDeviceGetAttribute(&clock_khz, cudaDevAttrClockRate, 0));
    const int Hs[] = {64, 256};
    printf("\n| H | dir | S:NS | mode | ms | GB/s | %% roofline | max rel err |\n"
           "|---|---|---|---|---|---|---|---|\n");
    for (int hi = 0; hi < 2; hi++) {
        const int H = Hs[hi], R = H / W;
        const size_t n = (size_t)T * H;
        float *ha = (float *)malloc(n * 4), *hb = (float *)malloc(n * 4),
              *hf = (float *)malloc(n * 4);
        float *out = (float *)malloc(n * 4);
        double *ref = (double *)malloc(n * 8), *refd = (double *)malloc(n * 8);
        /* inputs exact in bf16, so that one reference serves both storages */
        __nv_bfloat16 *q16 = (__nv_bfloat16 *)malloc(n * 2);
        for (size_t i = 0; i < n; i++) {
            ha[i] = __bfloat162float(__float2bfloat16((float)(0.5 + 0.5 * urand())));
            hb[i] = __bfloat162float(__float2bfloat16((float)(urand() - 0.5)));
            hf[i] = __bfloat162float(__float2bfloat16((float)(urand() - 0.5)));
        }
        float *da, *db, *dhf, *dout, *dout2;
        __nv_bfloat16 *da16, *db16, *dhf16, *dout16, *dout216;
        CUDA_CHECK(cudaMalloc(&da, n * 4));
        CUDA_CHECK(cudaMalloc(&db, n * 4));
        CUDA_CHECK(cudaMalloc(&dhf, n * 4));
        CUDA_CHECK(cudaMalloc(&dout, n * 4));
        CUDA_CHECK(cudaMalloc(&dout2, n * 4));
        CUDA_CHECK(cudaMalloc(&da16, n * 2));
        CUDA_CHECK(cudaMalloc(&db16, n * 2));
        CUDA_CHECK(cudaMalloc(&dhf16, n * 2));
        CUDA_CHECK(cudaMalloc(&dout16, n * 2));
        CUDA_CHECK(cudaMalloc(&dout216, n * 2));
        CUDA_CHECK(cudaMemcpy(da, ha, n * 4, cudaMemcpyHostToDevice));
        CUDA_CHECK(cudaMemcpy(db, hb, n * 4, cudaMemcpyHostToDevice));
        CUDA_CHECK(cudaMemcpy(dhf, hf, n * 4, cudaMemcpyHostToDevice));
        const float *srcs[3] = {ha, hb, hf};
        __nv_bfloat16 *dsts[3] = {da16, db16, dhf16};
        for (int a = 0; a < 3; a++) {
            for (size_t i = 0; i < n; i++)
                q16[i] = __float2bfloat16(srcs[a][i]);
            CUDA_CHECK(cudaMemcpy(dsts[a], q16, n * 2, cudaMemcpyHostToDevice));
        }
        const int64_t maxchunks = (T + 31) / 32;                 /* tiles of 32 steps or more */
        const size_t nwords = (size_t)maxchunks * R * 2 * W * 3; /* A/B, group, state words */
        unsigned long long *words;
        CUDA_CHECK(cudaMalloc(&words, nwords * 8));
        CUDA_CHECK(cudaMemset(words, 0, nwords * 8));
        unsigned tag = 0;
        unsigned long long *counter, tbase = 0; /* the ticketed kernels' counter */
        CUDA_CHECK(cudaMalloc(&counter, sizeof *counter));
        CUDA_CHECK(cudaMemset(counter, 0, sizeof *counter));
        if (probing) { /* the idle baseline */
            const int reps = 64;
            unsigned long long *dout_p, hout_p[2 * 132 * 4];
            if (sms > 132 * 4)
                return 1;
            CUDA_CHECK(cudaMalloc(&dout_p, (size_t)sms * 2 * sizeof(unsigned long long)));
            bench_flush_before(s);
            probe_idle_kernel<<<sms, 32, 0, s>>>(words, da, (int64_t)n, reps, dout_p);
            CUDA_CHECK(cudaGetLastError());
            CUDA_CHECK(cudaStreamSynchronize(s));
            CUDA_CHECK(cudaMemcpy(hout_p, dout_p, (size_t)sms * 2 * sizeof(unsigned long long),
                                  cudaMemcpyDeviceToHost));
            CUDA_CHECK(cudaFree(dout_p));
            double c[2] = {0, 0};
            for (int bk = 0; bk < sms; bk++)
                for (int i = 0; i < 2; i++)
                    c[i] += (double)hout_p[2 * bk + i];
            printf("| %d | idle | round trips: L2 hit %.0f ns, DRAM %.0f ns |\n", H,
                   c[0] / (sms * reps) * 1e6 / clock_khz, c[1] / (sms * reps) * 1e6 / clock_khz);
            fflush(stdout);
        }
        if (scanning && R == 1) { /* the scanner alone, over aggregates out beforehand */
            const int64_t NC = (T + 95) / 96;
            wparams q = {};
            q.words = words;
            q.pwords = words + 2 * (nwords / 3);
            q.R = 1;
            q.tag = ++tag;
            publish_all_kernel<<<(unsigned)((NC * W + 255) / 256), 256, 0, s>>>(q, NC);
            CUDA_CHECK(cudaGetLastError());
            CUDA_CHECK(cudaStreamSynchronize(s));
            cudaEvent_t e0, e1;
            CUDA_CHECK(cudaEventCreate(&e0));
            CUDA_CHECK(cudaEventCreate(&e1));
            CUDA_CHECK(cudaEventRecord(e0, s));
            scanner_alone_kernel<8><<<1, 480, 0, s>>>(q, NC);
            CUDA_CHECK(cudaEventRecord(e1, s));
            CUDA_CHECK(cudaEventSynchronize(e1));
            CUDA_CHECK(cudaGetLastError());
            float ms;
            CUDA_CHECK(cudaEventElapsedTime(&ms, e0, e1));
            printf("| %d | scanner alone | %lld tiles of 96 steps in %.3f ms: %.1f tiles/us "
                   "(the forward at 96-step tiles needs about 57 at 64 channels) |\n",
                   H, (long long)NC, ms, NC / (ms * 1e3));
            fflush(stdout);
            CUDA_CHECK(cudaEventDestroy(e0));
            CUDA_CHECK(cudaEventDestroy(e1));
        }
        for (int dir = 0; dir < (nowait ? 1 : 2); dir++) {
            /* the reference: h (forward), or db and da (backward, dhT = 0, h0 = 0) */
            for (int c = 0; c < H; c++) {
                double x = 0.0;
                for (int64_t u = 0; u < T; u++) {
                    const int64_t t = dir ? T - 1 - u : u;
                    const double coef = !dir        ? ha[t * H + c]
                                        : t + 1 < T ? ha[(t + 1) * H + c]
                                                    : 0.0;
                    x = coef * x + (double)hb[t * H + c];
                    ref[t * H + c] = x;
                    if (dir)
                        refd[t * H + c] = x * (t >= 1 ? (double)hf[(t - 1) * H + c] : 0.0);
                }
            }
            for (int ci = 0; ci < ncfgs; ci++) {
                const config &cf = cfgs[ci];
                if (cf.bwd != (dir == 1))
                    continue;
                const size_t smem = (size_t)cf.NS * 2 * TY * cf.S * W * cf.es;
#ifndef WINDOW_SM90A
                if (cf.mode == 12) {
                    printf("| %d | %s | %s | needs the sm_90a build (-DWINDOW_SM90A) |\n", H,
                           dir ? "bwd" : "fwd", cf.name);
                    continue;
                }
#endif
                const bool b16 = cf.es == 2;
                const char *dt = b16 ? "bf16" : "f32";
                cudaFuncAttributes fa;
                CUDA_CHECK(cudaFuncGetAttributes(&fa, cf.kernel));
                if (smem + fa.sharedSizeBytes > (size_t)optin) {
                    printf("| %d | %s %s | %s | %d | no room |\n", H, dt, dir ? "bwd" : "fwd",
                           cf.name, cf.mode);
                    continue;
                }
                CUDA_CHECK(cudaFuncSetAttribute(
                    cf.kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
                int per;
                const int nthreads = cf.mode == 12 ? kGThreads : cf.mode >= 10 ? kThreads + cf.xt * kXThreads + 32 : kThreads;
                CUDA_CHECK(
                    cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per, cf.kernel, nthreads, smem));
                const int L = TY * cf.S;
                if (cf.wide && (H != W || T % 2 || L % 2)) {
                    printf("| %d | %s | %s | wide boxes: H = 64 and even T only |\n", H,
                           dir ? "bwd" : "fwd", cf.name);
                    continue;
                }
                const CUtensorMap ta = cf.wide ? wide_map(b16 ? (void *)da16 : da, T, L, cf.es)
                                               : tile_map(b16 ? (void *)da16 : da, T, H, L, cf.es),
                                  tb = cf.wide ? wide_map(b16 ? (void *)db16 : db, T, L, cf.es)
                                               : tile_map(b16 ? (void *)db16 : db, T, H, L, cf.es),
                                  th = tile_map(b16 ? (void *)dout16 : dout, T, H, L, cf.es),
                                  td = tile_map(b16 ? (void *)dout216 : dout2, T, H, L, cf.es);
                if (per < 1) {
                    printf("| %d | %s %s | %s | %d | no room |\n", H, dt, dir ? "bwd" : "fwd",
                           cf.name, cf.mode);
                    continue;
                }
                int G = (sms / R) * R;
                cudaLaunchConfig_t lcfg = {};
                cudaLaunchAttribute lattr[2];
                if (cf.mode == 8) { /* a grid of co-resident clusters, a multiple of R of them */
                    if (cf.cs > 8)
                        CUDA_CHECK(cudaFuncSetAttribute(
                            cf.kernel, cudaFuncAttributeNonPortableClusterSizeAllowed, 1));
                    lcfg.blockDim = dim3(kThreads);
                    lcfg.dynamicSmemBytes = smem;
                    lcfg.stream = s;
                    lattr[0].id = cudaLaunchAttributeClusterDimension;
                    lattr[0].val.clusterDim.x = (unsigned)cf.cs;
                    lattr[0].val.clusterDim.y = lattr[0].val.clusterDim.z = 1;
                    lattr[1].id = cudaLaunchAttributeCooperative;
                    lattr[1].val.cooperative = 1;
                    lcfg.attrs = lattr;
                    lcfg.numAttrs = 1;
                    lcfg.gridDim = dim3((unsigned)(sms / cf.cs * cf.cs));
                    int ncl = 0;
                    if (cudaOccupancyMaxActiveClusters(&ncl, (void *)cf.kernel, &lcfg) !=
                            cudaSuccess ||
                        ncl / R < 1) {
                        (void)cudaGetLastError();
                        printf("| %d | %s | %s | clusters: none fit |\n", H, dir ? "bwd" : "fwd",
                               cf.name);
                        continue;
                    }
                    G = ncl / R * R * cf.cs;
                    if (ncl / R > 4 * kClusterEl) { /* more totals a thread than it holds */
                        printf("| %d | %s | %s | clusters: %d a chain, more than %d |\n", H,
                               dir ? "bwd" : "fwd", cf.name, ncl / R, 4 * kClusterEl);
                        continue;
                    }
                    lcfg.gridDim = dim3((unsigned)G);
                    lcfg.numAttrs = 2;
                }
                if (cf.scan && R != 1) {
                    printf("| %d | %s | %s | the scanner takes one chain |\n", H,
                           dir ? "bwd" : "fwd", cf.name);
                    continue;
                }
                const int Gc = G / R;
                int g = 1;
                while (g * g < Gc)
                    g++;
                if (cf.mode >= 10 && (g - 1 > kXWords || (Gc + g - 1) / g > kXWords)) {
                    printf("| %d | %s | %s | more than %d words a batch |\n", H,
                           dir ? "bwd" : "fwd", cf.name, kXWords);
                    continue;
                }
                wparams p = {da,
                             db,
                             b16 ? (float *)dout16 : dout,
                             b16 ? (const float *)dhf16 : dhf,
                             b16 ? (float *)dout216 : dout2,
                             T,
                             H,
                             R,
                             G,
                             words,
                             words + nwords / 3,
                             words + 2 * (nwords / 3),
                             g,
                             (Gc + g - 1) / g,
                             0,
                             cf.early,
                             cf.tstore,
                             cf.nofold,
                             cf.fast,
                             nullptr,
                             nullptr,
                             0};
                const unsigned long long nt = (unsigned long long)((T + L - 1) / L) * R;
                auto launch = [&]() {
                    p.tag = ++tag;
                    p.counter = counter;
                    p.tbase = tbase;
                    if (cf.tk) /* every block takes one ticket past the last tile (the
                                  scanner none) */
                        tbase += nt + (unsigned long long)p.G - (cf.scan ? 1 : 0);
                    void *args[] = {&p, (void *)&ta, (void *)&tb, (void *)&th, (void *)&td};
                    if (cf.mode == 8) { /* cooperative if the driver takes it with clusters */
                        if (cudaLaunchKernelExC(&lcfg, (void *)cf.kernel, args) != cudaSuccess &&
                            lcfg.numAttrs == 2) {
                            (void)cudaGetLastError();
                            lcfg.numAttrs = 1;
                            printf("|   | (clusters: the cooperative launch refused; %d blocks "
                                   "launched without it) |\n",
                                   G);
                            CUDA_CHECK(cudaLaunchKernelExC(&lcfg, (void *)cf.kernel, args));
                        }
                        CUDA_CHECK(cudaGetLastError());
                        return;
                    }
                    CUDA_CHECK(cudaLaunchCooperativeKernel((void *)cf.kernel, p.G, nthreads, args,
                                                           smem, s));
                };
                p.hint = cf.hint;
                p.scan = cf.scan;
                p.wide = cf.wide;
                CUDA_CHECK(cudaMemsetAsync(p.h, 0, n * cf.es, s));
                CUDA_CHECK(cudaMemsetAsync(p.hd, 0, n * cf.es, s));
                launch();
                CUDA_CHECK(cudaStreamSynchronize(s));
                auto fetch = [&](const void *d) {
                    if (!b16) {
                        CUDA_CHECK(cudaMemcpy(out, d, n * 4, cudaMemcpyDeviceToHost));
                        return;
                    }
                    CUDA_CHECK(cudaMemcpy(q16, d, n * 2, cudaMemcpyDeviceToHost));
                    for (size_t i = 0; i < n; i++)
                        out[i] = __bfloat162float(q16[i]);
                };
                fetch(p.h);
                double err = max_rel_err(out, ref, n);
                if (dir) {
                    fetch(p.hd);
                    const double e2 = max_rel_err(out, refd, n);
                    if (!(e2 <= err))
                        err = e2;
                }
                /* tolerance: fp32 1e-3 (the reorderings' rounding is ~1e-5); bf16
                 * 1e-2 (the output's own rounding is 2^-9, 2e-3) */
                const double tol = b16 ? 1e-2 : 1e-3;
                for (int i = 0; i < 2; i++)
                    launch();
                cudaEvent_t e0, e1;
                CUDA_CHECK(cudaEventCreate(&e0));
                CUDA_CHECK(cudaEventCreate(&e1));
                float ms[20];
                for (int i = 0; i < 20; i++) {
                    bench_flush_before(s);
                    CUDA_CHECK(cudaEventRecord(e0, s));
                    launch();
                    CUDA_CHECK(cudaEventRecord(e1, s));
                    CUDA_CHECK(cudaEventSynchronize(e1));
                    CUDA_CHECK(cudaEventElapsedTime(&ms[i], e0, e1));
                }
                const double t = bench_median(ms, 20) * 1e-3,
                             bw = (dir ? 20.0 : 12.0) * (b16 ? 0.5 : 1.0) * (double)n / t;
                printf("| %d | %s %s | %s | %s | %.3f | %.1f | %.1f | %.2e%s |\n", H, dt,
                       dir ? "bwd" : "fwd", cf.name,
                       cf.mode == 12  ? "reg"
                       : cf.mode == 11 ? "reload"
                       : cf.mode == 10 ? "ws"
                       : cf.mode == 8 ? "cluster"
                       : cf.mode == 6 ? "pipe"
                       : cf.mode == 4 ? "lag2"
                       : cf.mode == 3 ? "nowait"
                       : cf.mode == 2 ? "groups"
                                      : "bound",
                       t * 1e3, bw * 1e-9, 100.0 * bw / roof, err,
                       (cf.mode == 2 || cf.mode >= 4) && !cf.nofold && !(err < tol) ? " FAIL" : "");
                fflush(stdout);
                /* one launch with p.prof set (after a flush if asked): the blocks'
                 * kProf counters into hprof, or false where the grid is too large */
                static unsigned long long hprof[kProf * 132 * 4];
                auto launch_counted = [&](bool flush) {
                    const size_t pbytes = (size_t)p.G * kProf * sizeof(unsigned long long);
                    if (p.G > 132 * 4)
                        return false;
                    unsigned long long *dprof;
                    CUDA_CHECK(cudaMalloc(&dprof, pbytes));
                    CUDA_CHECK(cudaMemset(dprof, 0, pbytes));
                    p.prof = dprof;
                    if (flush)
                        bench_flush_before(s);
                    launch();
                    CUDA_CHECK(cudaStreamSynchronize(s));
                    p.prof = nullptr;
                    CUDA_CHECK(cudaMemcpy(hprof, dprof, pbytes, cudaMemcpyDeviceToHost));
                    CUDA_CHECK(cudaFree(dprof));
                    return true;
                };
                if (probing && cf.mode == 0) {
                    if (!launch_counted(true))
                        return 1;
                    double c[4] = {0, 0, 0, 0};
                    for (int bk = 0; bk < p.G; bk++)
                        for (int i = 0; i < 4; i++)
                            c[i] += (double)hprof[bk * kProf + i];
                    printf("|   | round trips under the copies: L2 hit %.0f ns, DRAM %.0f ns (%.0f "
                           "and %.0f loads) |\n",
                           c[0] / c[1] * 1e6 / clock_khz, c[2] / c[3] * 1e6 / clock_khz, c[1],
                           c[3]);
                    fflush(stdout);
                }
                if (cf.mode >= 10) { /* one launch with the exchange's and the workers' clocks */
                    if (!launch_counted(false))
                        return 1;
                    double c[10] = {0};
                    for (int bk = 0; bk < p.G; bk++)
                        for (int i = 0; i < 10; i++)
                            c[i] += (double)hprof[bk * kProf + i];
                    const double u = 1e6 / clock_khz;
                    printf("|   | ns/tile, exchange (team 0): own aggregate %.0f, members %.0f, "
                           "groups %.0f, state and carry %.0f, re-polls/tile %.2f; workers: copy "
                           "wait %.0f, carry wait %.0f |\n",
                           c[0] / c[4] * u, c[1] / c[4] * u, c[2] / c[4] * u, c[3] / c[4] * u,
                           c[5] / c[4], c[6] / c[8] * u, c[7] / c[8] * u);
                    if (cf.mode == 11)
                        printf("|   | workers' reload wait %.0f ns/tile |\n", c[9] / c[8] * u);
                    if (cf.scan)
                        printf("|   | scanner (warp 0): %llu rounds, %.2f tiles a round, %.0f ns a "
                               "round |\n",
                               hprof[10], (double)hprof[11] / (double)hprof[10],
                               (double)hprof[12] / (double)hprof[10] * u);
                    fflush(stdout);
                }
                if ((profile || tma) && cf.mode == 6 &&
                    cf.counters) { /* one launch with the phases' clocks */
                    if (!launch_counted(false))
                        return 1;
                    double ph[kProf] = {0};
                    for (int bk = 0; bk < p.G; bk++)
                        for (int i = 0; i < kProf - 1; i++)
                            ph[i] += (double)hprof[bk * kProf + i] /
                                     (double)hprof[bk * kProf + kProf - 1];
                    const double u = 1e6 / clock_khz / p.G;
                    printf("|   | ns/iteration: top %.0f, loads issued %.0f, copy wait %.0f, "
                           "summary %.0f, finish %.0f, "
                           "early issue %.0f, folds %.0f, barrier %.0f, tail %.0f; "
                           "re-polling threads/iteration %.2f (clock %d MHz) |\n",
                           ph[0] * u, ph[1] * u, ph[2] * u, ph[3] * u, ph[4] * u, ph[5] * u,
                           ph[6] * u, ph[7] * u, ph[8] * u, ph[11] / p.G, clock_khz / 1000);
                    fflush(stdout);
                }
                CUDA_CHECK(cudaEventDestroy(e0));
                CUDA_CHECK(cudaEventDestroy(e1));
            }
        }
        CUDA_CHECK(cudaFree(words));
        CUDA_CHECK(cudaFree(counter));
        CUDA_CHECK(cudaFree(da));
        CUDA_CHECK(cudaFree(db));
        CUDA_CHECK(cudaFree(dhf));
        CUDA_CHECK(cudaFree(dout));
        CUDA_CHECK(cudaFree(dout2));
        CUDA_CHECK(cudaFree(da16));
        CUDA_CHECK(cudaFree(db16));
        CUDA_CHECK(cudaFree(dhf16));
        CUDA_CHECK(cudaFree(dout16));
        CUDA_CHECK(cudaFree(dout216));
        free(q16);
        free(ha);
        free(hb);
        free(hf);
        free(out);
        free(ref);
        free(refd);
    }
    return 0;
}
