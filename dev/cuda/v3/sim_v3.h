/*
 * sim_v3.h - a host simulator for scan_v3.cu (built by sim.sh): the v3
 * kernel compiles with g++ against these definitions and runs on the CPU, so
 * its index arithmetic, pipeline protocol and look-back logic can be checked
 * against the fp64 reference on a machine without a GPU.
 *
 * Unlike dev/cuda/sim (one block at a time, which suits the library's
 * one-tile blocks), every thread of EVERY block of a launch is a ucontext
 * fiber here: a persistent grid needs its blocks concurrent, because they
 * wait on each other's look-back words. The next fiber is picked at random at
 * every synchronizing or polling operation (warp and block barriers,
 * shuffles, mbarrier polls, global polls, the ticket atomic).
 *
 * Asynchronous copies (cp.async.bulk and cp.async) are queued and land at a
 * random later scheduling step, then complete their mbarrier transaction (or
 * the issuing thread's cp.async arrive-on), so a consumer that read a stage
 * before its barrier phase completed, or a producer that refilled a stage
 * still in use, shows up as a wrong result. Shared memory starts as 0xFF
 * bytes (NaN). A relaxed 64-bit load returns, with probability V3_SIM_STALE
 * (default 0.5), an older value of the word from this launch (or the one it
 * held before the launch): legal for a relaxed load, and it drives the
 * look-back through not-ready predecessors and aggregate folds.
 *
 * It proves nothing about speed or about the hardware memory model.
 */
#ifndef V3_SIM_H
#define V3_SIM_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <ucontext.h>

#include <functional>
#include <random>
#include <unordered_map>
#include <vector>

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(...)

struct uint2 {
    unsigned x, y;
};
struct uint3 {
    unsigned x, y, z;
};
struct uint4 {
    unsigned x, y, z, w;
};
struct float4 {
    float x, y, z, w;
};
inline float4 make_float4(float x, float y, float z, float w) { return float4{x, y, z, w}; }
struct dim3 {
    unsigned x, y, z;
    dim3(unsigned a = 1, unsigned b = 1, unsigned c = 1) : x(a), y(b), z(c) {}
};

namespace v3sim {

enum { RUN = 0, AT_WARP = 1, AT_BLOCK = 2, DONE = 3, AT_NAMED = 4 /* + barrier id */ };

struct fiber {
    ucontext_t ctx;
    unsigned tid, block;
    int state;
};
struct warp_t {
    int arrived = 0;
    alignas(16) unsigned char slot[32][64];
};
struct block_t {
    std::vector<unsigned char> smem;
    int arrived = 0;
    int named[16] = {0}; /* arrivals at bar.sync id, count */
    std::vector<warp_t> warps;
};
struct mbar_t {
    int count, pending;
    long long tx;
    unsigned phase;
};
struct copy_t {
    void *dst;
    const void *src;
    unsigned bytes;
    uint64_t *bar; /* bulk copy: complete_tx on bar; NULL: a cp.async of `owner` */
    int owner;
};
struct arrive_t {
    int owner;
    uint64_t *bar;
};

constexpr size_t kStack = 128 * 1024;

inline std::vector<fiber> F;
inline std::vector<char *> stacks;
inline std::vector<block_t> blocks;
inline int cur = -1, nrun = 0, alive = 0;
inline ucontext_t sched;
inline unsigned bdim = 1, gdim = 1;
inline const std::function<void()> *body;
inline std::mt19937_64 rng(1);
inline bool seeded = false;
inline double stale = 0.5, pcopy = 0.05;
inline unsigned long long steps = 0, last_progress = 0, stat_stale = 0, stat_copies = 0;
inline std::unordered_map<const void *, mbar_t> mbars;
inline std::vector<copy_t> copies;
inline std::vector<int> outstanding;  /* per fiber: cp.async not yet landed */
inline std::vector<arrive_t> arrives; /* cp.async.mbarrier.arrive.noinc waiting */
inline std::unordered_map<const void *, std::vector<unsigned long long>> history;

[[noreturn]] inline void fail(const char *what)
{
    fprintf(stderr, "v3 sim: %s (step %llu, fiber %d)\n", what, steps, cur);
    abort();
}

inline void progress() { last_progress = steps; }
inline double uniform() { return std::uniform_real_distribution<double>(0.0, 1.0)(rng); }
inline void yield() { swapcontext(&F[cur].ctx, &sched); }
inline unsigned lane() { return F[cur].tid & 31u; }
inline warp_t &my_warp() { return blocks[F[cur].block].warps[F[cur].tid / 32]; }

inline void wake(unsigned block, int state, unsigned first, unsigned last)
{
    for (unsigned t = first; t < last; t++) {
        fiber &f = F[block * bdim + t];
        if (f.state == state) {
            f.state = RUN;
            nrun++;
        }
    }
}

/* ---- barriers and shuffles ------------------------------------------- */

inline void warp_sync()
{
    warp_t &w = my_warp();
    const unsigned base = F[cur].tid / 32 * 32;
    if (++w.arrived == 32) {
        w.arrived = 0;
        wake(F[cur].block, AT_WARP, base, base + 32);
        progress();
        yield();
        return;
    }
    F[cur].state = AT_WARP;
    nrun--;
    yield();
}

inline void block_sync()
{
    block_t &b = blocks[F[cur].block];
    if (++b.arrived == (int)bdim) {
        b.arrived = 0;
        wake(F[cur].block, AT_BLOCK, 0, bdim);
        progress();
        yield();
        return;
    }
    F[cur].state = AT_BLOCK;
    nrun--;
    yield();
}

/* bar.sync id, nthreads: the barrier completes when nthreads threads (of
 * any warps) have arrived, as on the GPU. */
inline void named_sync(int id, int nthreads)
{
    if (id <= 0 || id >= 16) fail("named barrier id out of range");
    block_t &b = blocks[F[cur].block];
    if (++b.named[id] == nthreads) {
        b.named[id] = 0;
        wake(F[cur].block, AT_NAMED + id, 0, bdim);
        progress();
        yield();
        return;
    }
    F[cur].state = AT_NAMED + id;
    nrun--;
    yield();
}

/* Every lane hands in `size` bytes and gets lane src's (its own if src is
 * outside the warp, as __shfl_up_sync does for lanes below the offset). */
inline void exchange(void *v, size_t size, int src)
{
    if (size > 64) fail("shuffle payload too large");
    warp_t &w = my_warp();
    memcpy(w.slot[lane()], v, size);
    warp_sync();
    if (src >= 0 && src < 32) memcpy(v, w.slot[src], size);
    warp_sync();
}

/* ---- mbarriers ------------------------------------------------------- */

inline mbar_t &mbar(const void *p)
{
    auto it = mbars.find(p);
    if (it == mbars.end()) fail("mbarrier used before init");
    return it->second;
}

inline void mbar_check(mbar_t &m)
{
    if (m.pending < 0) fail("mbarrier: more arrivals than its count");
    if (m.pending == 0 && m.tx == 0) {
        m.phase++;
        m.pending = m.count;
        progress();
    }
}

inline void mbar_init(uint64_t *p, unsigned count)
{
    mbars[p] = mbar_t{(int)count, (int)count, 0, 0};
}

inline void mbar_arrive(uint64_t *p, unsigned tx)
{
    mbar_t &m = mbar(p);
    m.tx += tx;
    m.pending--;
    mbar_check(m);
}

inline bool mbar_try_wait(uint64_t *p, unsigned parity)
{
    yield();
    return (mbar(p).phase & 1u) != (parity & 1u);
}

/* ---- asynchronous copies --------------------------------------------- */

inline void fire_arrives(int owner)
{
    for (size_t k = 0; k < arrives.size();) {
        if (arrives[k].owner == owner) {
            mbar_arrive(arrives[k].bar, 0);
            arrives[k] = arrives.back();
            arrives.pop_back();
        } else {
            k++;
        }
    }
}

inline void land(size_t k)
{
    const copy_t c = copies[k];
    copies[k] = copies.back();
    copies.pop_back();
    memcpy(c.dst, c.src, c.bytes);
    stat_copies++;
    progress();
    if (c.bar) {
        mbar_t &m = mbar(c.bar);
        m.tx -= c.bytes;
        mbar_check(m);
    } else if (--outstanding[c.owner] == 0) {
        fire_arrives(c.owner);
    }
}

inline void bulk_copy(void *dst, const void *src, unsigned bytes, uint64_t *bar)
{
    if (bytes == 0 || bytes % 16 || (uintptr_t)dst % 16 || (uintptr_t)src % 16)
        fail("cp.async.bulk: size and addresses must be multiples of 16");
    copies.push_back(copy_t{dst, src, bytes, bar, cur});
}

inline void cp_async16(void *dst, const void *src)
{
    if ((uintptr_t)dst % 16 || (uintptr_t)src % 16) fail("cp.async: misaligned 16-byte copy");
    copies.push_back(copy_t{dst, src, 16, nullptr, cur});
    outstanding[cur]++;
}

inline void cp_async_arrive_noinc(uint64_t *bar)
{
    if (outstanding[cur] == 0) mbar_arrive(bar, 0);
    else arrives.push_back(arrive_t{cur, bar});
}

/* ---- global words and atomics ---------------------------------------- */

inline unsigned long long ld_relaxed(const unsigned long long *p)
{
    yield();
    auto it = history.find(p);
    if (it != history.end() && it->second.size() > 1 && uniform() < stale) {
        stat_stale++;
        const size_t n = it->second.size() - 1; /* any value before the latest */
        return it->second[rng() % n];
    }
    return __atomic_load_n(p, __ATOMIC_SEQ_CST);
}

inline void st_relaxed(unsigned long long *p, unsigned long long v)
{
    auto &h = history[p];
    if (h.empty()) h.push_back(*p); /* the value the launch found */
    h.push_back(v);
    __atomic_store_n(p, v, __ATOMIC_SEQ_CST);
    progress();
}

inline unsigned long long atomic_add(unsigned long long *p, unsigned long long v)
{
    yield();
    const unsigned long long old = *p;
    *p = old + v;
    progress();
    return old;
}

/* ---- launch ---------------------------------------------------------- */

inline void trampoline()
{
    (*body)();
    F[cur].state = DONE;
    nrun--;
    alive--;
    progress();
}

inline void seed_once()
{
    if (seeded) return;
    const char *s = getenv("V3_SIM_SEED");
    rng.seed(s ? strtoull(s, nullptr, 0) : 12345u);
    const char *st = getenv("V3_SIM_STALE");
    if (st) stale = atof(st);
    const char *pc = getenv("V3_SIM_PCOPY");
    if (pc) pcopy = atof(pc);
    seeded = true;
}

/* Runs grid x block threads, all blocks at once, each block with `smem`
 * bytes of dynamic shared memory (0xFF-filled). */
inline void launch(unsigned grid, unsigned block, size_t smem, const std::function<void()> &fn)
{
    seed_once();
    const unsigned n = grid * block;
    gdim = grid;
    bdim = block;
    body = &fn;
    mbars.clear();
    history.clear();
    copies.clear();
    arrives.clear();
    F.assign(n, fiber{});
    outstanding.assign(n, 0);
    while (stacks.size() < n) stacks.push_back(static_cast<char *>(malloc(kStack)));
    blocks.assign(grid, block_t{});
    for (block_t &b : blocks) {
        b.smem.assign(smem + 16, 0xFF);
        b.warps.assign((block + 31) / 32, warp_t{});
    }
    for (unsigned i = 0; i < n; i++) {
        fiber &f = F[i];
        f.tid = i % block;
        f.block = i / block;
        f.state = RUN;
        getcontext(&f.ctx);
        f.ctx.uc_stack.ss_sp = stacks[i];
        f.ctx.uc_stack.ss_size = kStack;
        f.ctx.uc_link = &sched;
        makecontext(&f.ctx, trampoline, 0);
    }
    nrun = alive = (int)n;
    steps = last_progress = 0;
    while (alive > 0) {
        steps++;
        if (!copies.empty() && (nrun == 0 || uniform() < pcopy)) land(rng() % copies.size());
        if (nrun == 0) {
            if (copies.empty()) fail("deadlock: no thread can run and no copy is in flight");
            continue;
        }
        if (steps - last_progress > 20000000ull) fail("livelock: 2e7 steps without progress");
        int k;
        do k = (int)(rng() % n);
        while (F[k].state != RUN);
        cur = k;
        swapcontext(&sched, &F[k].ctx);
        cur = -1;
    }
    if (!copies.empty() || !arrives.empty()) fail("kernel exited with copies in flight");
}

inline uint3 thread_idx() { return uint3{F[cur].tid, 0, 0}; }
inline uint3 block_idx() { return uint3{F[cur].block, 0, 0}; }
inline unsigned char *smem() { return blocks[F[cur].block].smem.data(); }

} // namespace v3sim

#define threadIdx (v3sim::thread_idx())
#define blockIdx (v3sim::block_idx())

#endif /* V3_SIM_H */
