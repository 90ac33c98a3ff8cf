/*
 * sim.cpp - a small host simulator of the CUDA execution model, enough to
 * run prnn's real kernels (src/scan_cuda.cu and src/scan_window.cu compiled
 * by g++ against the shims in include/) and so check them against the CPU
 * oracle on a machine without a GPU. It proves the index arithmetic, the semantics (reverse,
 * lengths, states, dtypes, the scalar and vector paths) and the look-back's
 * logic; it proves nothing about speed or about the hardware memory model.
 *
 * Execution: blocks run one at a time, in a random order; the threads of a
 * block are ucontext fibers switched at __syncthreads, __ballot_sync and
 * look-back word loads, the runnable fiber picked at random. ld_word
 * returns, with probability PRNN_SIM_STALE (default 0.5), the value the
 * word held before its latest store in this launch (a legal stale read),
 * so the look-back sees aggregates (status A), not-yet-published tiles
 * (retries) and inclusive prefixes (P) in every mix, word by word; near 1,
 * long runs of aggregates force look-backs over many rounds.
 *
 * WINDOW's sm_90 instructions: mbarriers keep their pending arrivals,
 * transaction bytes and completed phases (a wait spins, yielding, until the
 * phase's parity turns); a tensor-map copy is done at once (elements
 * outside the tensor as zeros) and its bytes counted on the mbarrier; a
 * named barrier releases its first count arrivals. Blocks still run one at
 * a time: WINDOW takes its tiles by ticket and waits only on smaller
 * tickets, so the first block to run takes every tile.
 *
 * Memory: cudaMalloc returns host memory filled with 0xA5 bytes (garbage, as
 * on a device); copies are memcpy; streams are tokens. PRNN_SIM_SEED seeds
 * the scheduler.
 */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <ucontext.h>

#include <random>
#include <unordered_map>
#include <vector>

#include "cuda.h"
#include "cuda_runtime.h"
#include "cudaTypedefs.h"

namespace prnn_sim {
namespace {

constexpr size_t kStack = 256 * 1024;
enum { RUN = 0, AT_BLOCK_BARRIER = 1, AT_WARP_BARRIER = 2, AT_NAMED_BARRIER = 16 /* + id */ };

struct fiber {
    ucontext_t ctx;
    uint3 tid;
    int done;
    int wait;
};

struct warp {
    int arrived;
    unsigned gen, vote, result[2];
    float vals[2][32]; /* shuffles: the lanes' values of generation gen & 1 */
};

std::vector<fiber> fibers;
std::vector<char *> stacks;
std::vector<warp> warps;
ucontext_t sched_ctx;
int cur = -1, alive = 0, bar_arrived = 0;
uint3 cur_block;
dim3 cur_grid, cur_bdim;
const std::function<void()> *cur_body;
std::mt19937_64 rng;
bool seeded;
double stale_prob = 0.5; /* PRNN_SIM_STALE: chance a word load sees the previous value */
std::unordered_map<const unsigned long long *, std::vector<unsigned long long>> word_history;

unsigned nthreads() { return cur_bdim.x * cur_bdim.y * cur_bdim.z; }

void release(int kind)
{
    for (fiber &f : fibers)
        if (f.wait == kind) f.wait = RUN;
}

void to_scheduler() { swapcontext(&fibers[cur].ctx, &sched_ctx); }

void trampoline()
{
    (*cur_body)();
    fibers[cur].done = 1;
    alive--;
    if (bar_arrived > 0 && bar_arrived == alive) {
        bar_arrived = 0;
        release(AT_BLOCK_BARRIER);
    }
    /* returning resumes sched_ctx through uc_link */
}

void run_block()
{
    const unsigned n = nthreads();
    if (fibers.size() < n) {
        fibers.resize(n);
        while (stacks.size() < n) stacks.push_back(static_cast<char *>(malloc(kStack)));
    }
    warps.assign((n + 31) / 32, warp{});
    alive = (int)n;
    bar_arrived = 0;
    for (unsigned i = 0; i < n; i++) {
        fiber &f = fibers[i];
        f.tid = uint3{i % cur_bdim.x, (i / cur_bdim.x) % cur_bdim.y, i / (cur_bdim.x * cur_bdim.y)};
        f.done = 0;
        f.wait = RUN;
        getcontext(&f.ctx);
        f.ctx.uc_stack.ss_sp = stacks[i];
        f.ctx.uc_stack.ss_size = kStack;
        f.ctx.uc_link = &sched_ctx;
        makecontext(&f.ctx, trampoline, 0);
    }
    std::vector<int> runnable;
    while (alive > 0) {
        runnable.clear();
        for (unsigned i = 0; i < n; i++)
            if (!fibers[i].done && fibers[i].wait == RUN) runnable.push_back((int)i);
        if (runnable.empty()) {
            fprintf(stderr, "prnn sim: deadlock in block (%u, %u): %d threads alive, none runnable\n",
                    cur_block.x, cur_block.y, alive);
            abort();
        }
        cur = runnable[rng() % runnable.size()];
        swapcontext(&sched_ctx, &fibers[cur].ctx);
    }
    cur = -1;
}

} // namespace

uint3 thread_idx() { return fibers[cur].tid; }
uint3 block_idx() { return cur_block; }
dim3 grid_dim() { return cur_grid; }
dim3 block_dim() { return cur_bdim; }

void syncthreads()
{
    bar_arrived++;
    if (bar_arrived == alive) { /* the last to arrive releases the others */
        bar_arrived = 0;
        release(AT_BLOCK_BARRIER);
        return;
    }
    fibers[cur].wait = AT_BLOCK_BARRIER;
    to_scheduler();
}

/* The calling thread's linear index t and its warp, for a full-warp
 * operation `what` (ballot, shuffle): every lane of the warp must take part. */
static warp &warp_op(unsigned mask, const char *what, unsigned &t)
{
    if (mask != 0xffffffffu) {
        fprintf(stderr, "prnn sim: only full-warp %ss are simulated\n", what);
        abort();
    }
    t = fibers[cur].tid.x + cur_bdim.x * (fibers[cur].tid.y + cur_bdim.y * fibers[cur].tid.z);
    for (unsigned i = t / 32 * 32; i < t / 32 * 32 + 32; i++)
        if (i >= nthreads() || fibers[i].done) {
            fprintf(stderr, "prnn sim: %s in a warp with exited threads\n", what);
            abort();
        }
    return warps[t / 32];
}

unsigned ballot(unsigned mask, int pred)
{
    unsigned t;
    warp &w = warp_op(mask, "ballot", t);
    const unsigned gen = w.gen;
    if (pred) w.vote |= 1u << (t % 32);
    if (++w.arrived == 32) {
        w.result[gen & 1] = w.vote;
        w.vote = 0;
        w.arrived = 0;
        w.gen++;
        for (unsigned i = t / 32 * 32; i < t / 32 * 32 + 32; i++)
            if (fibers[i].wait == AT_WARP_BARRIER) fibers[i].wait = RUN;
    } else {
        fibers[cur].wait = AT_WARP_BARRIER;
        to_scheduler();
    }
    return w.result[gen & 1];
}

/* A full-warp barrier at which every lane leaves its value and reads lane
 * src's (the generation's slot is double-buffered like the ballot's). */
float shfl(unsigned mask, float v, int src)
{
    unsigned t;
    warp &w = warp_op(mask, "shuffle", t);
    const unsigned gen = w.gen;
    w.vals[gen & 1][t % 32] = v;
    if (++w.arrived == 32) {
        w.arrived = 0;
        w.gen++;
        for (unsigned i = t / 32 * 32; i < t / 32 * 32 + 32; i++)
            if (fibers[i].wait == AT_WARP_BARRIER) fibers[i].wait = RUN;
    } else {
        fibers[cur].wait = AT_WARP_BARRIER;
        to_scheduler();
    }
    return w.vals[gen & 1][src & 31];
}

/* A full-warp barrier (__syncwarp): a shuffle whose value nobody reads. */
void syncwarp() { (void)shfl(0xffffffffu, 0.0f, 0); }

/* Named barriers (bar.sync id, count): the first count threads to arrive
 * at id go on together. */
void named_sync(int id, int count)
{
    static int arrived[16];
    if (++arrived[id] == count) {
        arrived[id] = 0;
        release(AT_NAMED_BARRIER + id);
        return;
    }
    fibers[cur].wait = AT_NAMED_BARRIER + id;
    to_scheduler();
}

/* mbarriers: the arrivals a phase expects, those still pending, the
 * transaction bytes still to come and the phases completed. A wait on
 * parity p returns once the completed phases' parity differs from p. */
struct mbarrier {
    unsigned count, pending;
    long long tx;
    unsigned phases;
};
std::unordered_map<const uint64_t *, mbarrier> mbarriers;

static mbarrier &mbar_of(uint64_t *m)
{
    auto it = mbarriers.find(m);
    if (it == mbarriers.end()) {
        fprintf(stderr, "prnn sim: mbarrier used before its init\n");
        abort();
    }
    return it->second;
}

static void mbar_check(mbarrier &b)
{
    if (b.pending == 0 && b.tx == 0) {
        b.phases++;
        b.pending = b.count;
    }
}

void mbar_init(uint64_t *m, unsigned count) { mbarriers[m] = mbarrier{count, count, 0, 0}; }

void mbar_arrive(uint64_t *m)
{
    mbarrier &b = mbar_of(m);
    if (b.pending == 0) {
        fprintf(stderr, "prnn sim: mbarrier arrival past its count\n");
        abort();
    }
    b.pending--;
    mbar_check(b);
}

void mbar_expect(uint64_t *m, unsigned bytes)
{
    mbar_of(m).tx += bytes;
    mbar_arrive(m);
}

void mbar_wait(uint64_t *m, unsigned parity)
{
    while ((mbar_of(m).phases & 1u) == (parity & 1u))
        to_scheduler(); /* a spin: let the others move */
}

/* The simulator's tensor map, in CUtensorMap's opaque bytes. */
struct sim_map {
    char *base;
    unsigned esize, rank;
    unsigned long long dims[3], strides[3], box[3];
};
static_assert(sizeof(sim_map) <= sizeof(CUtensorMap), "tensor map");

/* f(element) for each element of the box at (x, y, b) in order, its
 * address in the tensor, or nullptr where it lies outside. */
template <typename F> void for_box(const sim_map &t, int x, int y, int b, F f)
{
    const long long at[3] = {x, y, b};
    for (unsigned long long k = 0; k < (t.rank > 2 ? t.box[2] : 1); k++)
        for (unsigned long long j = 0; j < (t.rank > 1 ? t.box[1] : 1); j++)
            for (unsigned long long i = 0; i < t.box[0]; i++) {
                const long long c[3] = {at[0] + (long long)i, at[1] + (long long)j,
                                        at[2] + (long long)k};
                bool in = true;
                for (unsigned r = 0; r < t.rank; r++)
                    in = in && c[r] >= 0 && (unsigned long long)c[r] < t.dims[r];
                char *e = nullptr;
                if (in) {
                    e = t.base + (unsigned long long)c[0] * t.esize;
                    for (unsigned r = 1; r < t.rank; r++) e += (unsigned long long)c[r] * t.strides[r - 1];
                }
                f(e);
            }
}

/* The box at (x, y, b) into dst, packed; elements outside the tensor as
 * zeros; its bytes counted on m. */
void tma_3d(void *dst, const void *map, int x, int y, int b, uint64_t *m)
{
    sim_map t;
    memcpy(&t, map, sizeof t);
    char *d = static_cast<char *>(dst);
    unsigned long long bytes = 0;
    for_box(t, x, y, b, [&](const char *src) {
        if (src)
            memcpy(d, src, t.esize);
        else
            memset(d, 0, t.esize);
        d += t.esize;
        bytes += t.esize;
    });
    mbarrier &bar = mbar_of(m);
    bar.tx -= (long long)bytes;
    if (bar.tx < 0) {
        fprintf(stderr, "prnn sim: a tensor copy of more bytes than its mbarrier expects\n");
        abort();
    }
    mbar_check(bar);
}

/* The box at (x, y, b) from src, packed, into the tensor; elements
 * outside it are not written. */
void tma_store_3d(const void *map, const void *src, int x, int y, int b)
{
    sim_map t;
    memcpy(&t, map, sizeof t);
    const char *s = static_cast<const char *>(src);
    for_box(t, x, y, b, [&](char *dst) {
        if (dst)
            memcpy(dst, s, t.esize);
        s += t.esize;
    });
}

/* Look-back words: a load may return the value before the latest store,
 * whose tag then says it is not out yet (or only its aggregate). */
unsigned long long ld_word(const unsigned long long *p)
{
    to_scheduler(); /* let the others move: this is a spin loop's poll */
    auto it = word_history.find(p);
    if (it == word_history.end() || it->second.size() < 2 ||
        std::uniform_real_distribution<double>(0.0, 1.0)(rng) >= stale_prob)
        return __atomic_load_n(p, __ATOMIC_SEQ_CST);
    return it->second[it->second.size() - 2]; /* the value before the latest */
}

void st_word(unsigned long long *p, unsigned long long v)
{
    auto &h = word_history[p];
    if (h.empty()) h.push_back(*p); /* the value the launch found */
    h.push_back(v);
    __atomic_store_n(p, v, __ATOMIC_SEQ_CST);
}

/* Block-wide OR: three rotating accumulators, each fiber keeping its own
 * count of calls, so a fast fiber's next call never touches the one that
 * slower fibers are still reading. */
int syncthreads_or(int pred)
{
    static int acc[3];
    static unsigned calls[1024];
    const unsigned t = thread_idx().x, k = calls[t]++ % 3;
    acc[(k + 1) % 3] = 0; /* the next call's, unused until everyone is past this barrier */
    if (pred) acc[k] = 1;
    syncthreads();
    return acc[k];
}

void launch(dim3 grid, dim3 block, const std::function<void()> &body)
{
    if (!seeded) {
        const char *s = getenv("PRNN_SIM_SEED");
        rng.seed(s ? strtoull(s, nullptr, 0) : 12345u);
        const char *st = getenv("PRNN_SIM_STALE");
        if (st) stale_prob = atof(st);
        seeded = true;
    }
    word_history.clear(); /* a launch never sees values from before it began */
    mbarriers.clear();
    cur_grid = grid;
    cur_bdim = block;
    cur_body = &body;
    std::vector<uint3> order;
    for (unsigned z = 0; z < grid.z; z++)
        for (unsigned y = 0; y < grid.y; y++)
            for (unsigned x = 0; x < grid.x; x++) order.push_back(uint3{x, y, z});
    std::shuffle(order.begin(), order.end(), rng);
    for (const uint3 &b : order) {
        cur_block = b;
        run_block();
    }
}

} // namespace prnn_sim

/* ------------------------------------------------------------------------ */
/* Runtime API                                                              */

struct prnn_sim_stream {
    int token;
};

extern "C" {

cudaError_t cudaGetDeviceCount(int *count)
{
    *count = 1;
    return cudaSuccess;
}
cudaError_t cudaGetDevice(int *dev)
{
    *dev = 0;
    return cudaSuccess;
}
cudaError_t cudaSetDevice(int dev) { return dev == 0 ? cudaSuccess : cudaErrorInvalidDevice; }
/* An integer from the environment, or `def` where unset or not a number. */
static int sim_env_int(const char *name, int def)
{
    const char *v = getenv(name);
    if (!v || !*v) return def;
    char *end;
    const long x = strtol(v, &end, 10);
    return *end || x <= 0 || x > INT_MAX ? def : (int)x;
}
cudaError_t cudaDeviceGetAttribute(int *value, enum cudaDeviceAttr attr, int dev)
{
    (void)dev;
    /* an H100/H200 (the memory an H200's, 3201 MHz x 6144 bits, unless
     * PRNN_SIM_MEM_KHZ and PRNN_SIM_BUS_BITS say otherwise: an H100's is
     * 2619000 x 5120) */
    static const int mem_khz = sim_env_int("PRNN_SIM_MEM_KHZ", 3201000);
    static const int bus_bits = sim_env_int("PRNN_SIM_BUS_BITS", 6144);
    *value = attr == cudaDevAttrL2CacheSize                   ? 50 << 20
             : attr == cudaDevAttrMemoryClockRate              ? mem_khz
             : attr == cudaDevAttrGlobalMemoryBusWidth         ? bus_bits
             : attr == cudaDevAttrMaxSharedMemoryPerBlockOptin ? 227 << 10
             : attr == cudaDevAttrComputeCapabilityMajor       ? 9
                                                               : 132;
    return cudaSuccess;
}
cudaError_t cudaDeviceSynchronize(void) { return cudaSuccess; }
cudaError_t cudaStreamCreateWithFlags(cudaStream_t *s, unsigned flags)
{
    (void)flags;
    *s = new prnn_sim_stream{1};
    return cudaSuccess;
}
cudaError_t cudaStreamDestroy(cudaStream_t s)
{
    if (!s || s->token != 1) return cudaErrorInvalidValue;
    s->token = 0;
    delete s;
    return cudaSuccess;
}
cudaError_t cudaStreamSynchronize(cudaStream_t s) { return !s || s->token == 1 ? cudaSuccess : cudaErrorInvalidValue; }
cudaError_t cudaStreamQuery(cudaStream_t s) { return cudaStreamSynchronize(s); }
cudaError_t cudaStreamIsCapturing(cudaStream_t s, cudaStreamCaptureStatus *status)
{
    (void)s;
    *status = cudaStreamCaptureStatusNone; /* no graphs here */
    return cudaSuccess;
}
cudaError_t cudaMalloc(void **p, size_t bytes)
{
    *p = aligned_alloc(256, (bytes + 255) / 256 * 256);
    if (!*p) return cudaErrorMemoryAllocation;
    memset(*p, 0xa5, bytes);
    return cudaSuccess;
}
cudaError_t cudaFree(void *p)
{
    free(p);
    return cudaSuccess;
}
cudaError_t cudaMemcpy(void *dst, const void *src, size_t bytes, enum cudaMemcpyKind kind)
{
    (void)kind;
    memcpy(dst, src, bytes);
    return cudaSuccess;
}
cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t bytes, enum cudaMemcpyKind kind,
                            cudaStream_t s)
{
    (void)s;
    return cudaMemcpy(dst, src, bytes, kind);
}
cudaError_t cudaMemset(void *p, int value, size_t bytes)
{
    memset(p, value, bytes);
    return cudaSuccess;
}
cudaError_t cudaMemsetAsync(void *p, int value, size_t bytes, cudaStream_t s)
{
    (void)s;
    return cudaMemset(p, value, bytes);
}
cudaError_t cudaGetLastError(void) { return cudaSuccess; }

static CUresult sim_encode_tiled(CUtensorMap *map, CUtensorMapDataType type, cuuint32_t rank,
                                 void *base, const cuuint64_t *dims, const cuuint64_t *strides,
                                 const cuuint32_t *box, const cuuint32_t *element_strides,
                                 CUtensorMapInterleave, CUtensorMapSwizzle, CUtensorMapL2promotion,
                                 CUtensorMapFloatOOBfill)
{
    if (rank < 1 || rank > 3) return 1;
    prnn_sim::sim_map t = {};
    t.base = static_cast<char *>(base);
    t.esize = type == CU_TENSOR_MAP_DATA_TYPE_FLOAT32 ? 4 : 2;
    t.rank = rank;
    for (unsigned r = 0; r < rank; r++) {
        if (element_strides[r] != 1 || box[r] == 0 || box[r] > 256) return 1;
        t.dims[r] = dims[r];
        t.box[r] = box[r];
        if (r > 0) t.strides[r - 1] = strides[r - 1];
    }
    memset(map, 0, sizeof *map);
    memcpy(map, &t, sizeof t);
    return CUDA_SUCCESS;
}

cudaError_t cudaGetDriverEntryPointByVersion(const char *symbol, void **fn, unsigned version,
                                             unsigned long long flags,
                                             cudaDriverEntryPointQueryResult *status)
{
    (void)version, (void)flags;
    const bool known = !strcmp(symbol, "cuTensorMapEncodeTiled");
    *fn = known ? reinterpret_cast<void *>(&sim_encode_tiled) : nullptr;
    if (status) *status = known ? cudaDriverEntryPointSuccess : cudaDriverEntryPointSymbolNotFound;
    return cudaSuccess;
}
const char *cudaGetErrorString(cudaError_t e) { return e == cudaSuccess ? "no error" : "simulated error"; }

/* The library's cuda_util.cu is not part of the simulated build; the scan
 * tests need only its release and stream-ordering hooks. */
struct prnn_ctx;
void prnn_cuda_release(struct prnn_ctx *ctx);
void prnn_cuda_release(struct prnn_ctx *ctx) { (void)ctx; }
int prnn_cuda_wait_for(struct prnn_ctx *waiter, struct prnn_ctx *other);
int prnn_cuda_wait_for(struct prnn_ctx *waiter, struct prnn_ctx *other)
{
    (void)waiter, (void)other;
    return 0; /* the simulator runs every stream in order */
}

} /* extern "C" */
