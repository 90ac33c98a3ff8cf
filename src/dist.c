/*
 * dist.c - the distributed context (include/prnn_dist.h): MPI start-up, the
 * communicators, the data-parallel average (one pass, or bucket by bucket
 * during the backward; ZeRO-1 shards), and the sequence-parallel
 * scan's logic for both devices. The CPU path is here (MPI collectives on
 * host memory, summaries in dist_cpu_impl.h); CUDA contexts call
 * dist_cuda.cu for NCCL and the kernels (built when NCCL is found, marked
 * by PRNN_DIST_NCCL). Built only when CMake finds MPI.
 *
 * Every entry point is collective. A rank that finds a bad argument still
 * takes part in the first exchange of a call, so that every rank learns of
 * it and returns instead of waiting for a partner that left.
 *
 * Size letters: B batch rows, T the local time steps, H channels, N ranks,
 * K record slots, n elements of a flat buffer.
 */
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include <mpi.h>

#include "dist_internal.h"

#define REAL float
#define FN(name) name##_f32
#include "dist_cpu_impl.h"
#undef REAL
#undef FN
#define REAL double
#define FN(name) name##_f64
#include "dist_cpu_impl.h"
#undef REAL
#undef FN

/* One bucket of a CPU mean: elements [off, off + count) of a buffer. Each
 * rank sums a part of it in rank order: the ranks' values of that part come
 * to it in one all-to-all (phase EXCHANGE); the sums then go back to every
 * rank in an all-gather (phase GATHER), or stay with their owner (a SCATTER
 * bucket). The arrays live as long as the bucket, since a non-blocking MPI
 * call reads them until it completes. */
enum { BK_IDLE, BK_EXCHANGE, BK_GATHER };

typedef struct dist_bucket {
    int64_t off, count;
    int scatter;
    int phase;
    MPI_Request req;
    int *cnt;         /* (6N): send counts, displacements; receive counts,
                         displacements; every part's count and start */
    float *tmp;       /* (N * mine): the ranks' values of my part */
    int64_t tmp_cap;
    int64_t mine_lo, mine; /* my part, relative to the bucket */
} dist_bucket;

struct prnn_dist {
    prnn_ctx *ctx;
    MPI_Comm comm; /* our duplicate of the caller's communicator */
    int rank, size;
    void *nccl;    /* ncclComm_t on CUDA contexts */
    void *side, *ev_main, *ev_side; /* CUDA: the side stream of bucketed
                                       collectives and its events */
    dist_bucket bk;                 /* the blocking mean's (CPU) */

    /* Workspace on the context's device (records, GPU scratch), grown on
     * demand and kept. */
    void *ws;
    size_t ws_bytes;
    /* Host workspace: the local lengths (B), the all-reduce's share. */
    int64_t *len;
    int64_t len_cap;
    float *share;
    int64_t share_cap;
    int *counts, *displs; /* (N) */
};

/* ------------------------------------------------------------------------ */
/* MPI                                                                      */

/* Starts that stop has yet to match, when prnn_dist_mpi_start initialised
 * MPI (0 when the program did, or nothing has started it). */
static int g_refs;

static prnn_status mpi_ok(int rc) { return rc == MPI_SUCCESS ? PRNN_OK : PRNN_ERR_COMM; }

prnn_status prnn_dist_mpi_start(prnn_dist_info *info)
{
    int inited = 0, finalized = 0;
    MPI_Initialized(&inited);
    MPI_Finalized(&finalized);
    if (finalized) return PRNN_ERR_COMM;
    if (!inited) {
        int provided = 0;
        if (MPI_Init_thread(NULL, NULL, MPI_THREAD_FUNNELED, &provided) != MPI_SUCCESS)
            return PRNN_ERR_COMM;
        g_refs = 1;
    } else if (g_refs > 0) {
        g_refs++;
    }
    if (!info) return PRNN_OK;
    MPI_Comm node;
    prnn_status s = mpi_ok(MPI_Comm_rank(MPI_COMM_WORLD, &info->rank));
    if (s == PRNN_OK) s = mpi_ok(MPI_Comm_size(MPI_COMM_WORLD, &info->size));
    if (s == PRNN_OK)
        s = mpi_ok(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, info->rank,
                                       MPI_INFO_NULL, &node));
    if (s != PRNN_OK) return s;
    s = mpi_ok(MPI_Comm_rank(node, &info->local_rank));
    if (s == PRNN_OK) s = mpi_ok(MPI_Comm_size(node, &info->local_size));
    MPI_Comm_free(&node);
    return s;
}

prnn_status prnn_dist_mpi_stop(void)
{
    if (g_refs == 0 || --g_refs > 0) return PRNN_OK;
    return mpi_ok(MPI_Finalize());
}

/* ------------------------------------------------------------------------ */
/* The distributed context                                                  */

prnn_status prnn_dist_init(prnn_dist **out, prnn_ctx *ctx, const void *mpi_comm)
{
    if (!out || !ctx) return PRNN_ERR_NULL_POINTER;
    *out = NULL;
    int inited = 0;
    MPI_Initialized(&inited);
    if (!inited) return PRNN_ERR_COMM;
    prnn_dist *d = calloc(1, sizeof *d);
    if (!d) return PRNN_ERR_OUT_OF_MEMORY;
    d->ctx = ctx;
    d->comm = MPI_COMM_NULL;
    const MPI_Comm parent = mpi_comm ? *(const MPI_Comm *)mpi_comm : MPI_COMM_WORLD;
    prnn_status s = mpi_ok(MPI_Comm_dup(parent, &d->comm));
    if (s == PRNN_OK) {
        /* Failures come back as codes, to become a status. */
        MPI_Comm_set_errhandler(d->comm, MPI_ERRORS_RETURN);
        MPI_Comm_rank(d->comm, &d->rank);
        MPI_Comm_size(d->comm, &d->size);
        d->counts = calloc((size_t)d->size, sizeof(int));
        d->displs = calloc((size_t)d->size, sizeof(int));
        if (!d->counts || !d->displs) s = PRNN_ERR_OUT_OF_MEMORY;
    }
    if (s == PRNN_OK && ctx->device == PRNN_DEVICE_CUDA) {
#ifdef PRNN_DIST_NCCL
        /* Rank 0 makes the NCCL id and broadcasts it with its status, so
         * that a failure there stops every rank before the blocking init. */
        unsigned char msg[PRNN_DIST_NCCL_ID_BYTES + 8];
        memset(msg, 0, sizeof msg);
        if (d->rank == 0) msg[0] = (unsigned char)prnn_dist_nccl_unique_id(ctx, msg + 8);
        s = mpi_ok(MPI_Bcast(msg, (int)sizeof msg, MPI_BYTE, 0, d->comm));
        if (s == PRNN_OK) s = (prnn_status)msg[0];
        if (s == PRNN_OK) s = prnn_dist_nccl_init(ctx, &d->nccl, msg + 8, d->rank, d->size);
        if (s == PRNN_OK) s = prnn_dist_cuda_side_init(ctx, &d->side, &d->ev_main, &d->ev_side);
        /* Everyone agrees on the outcome. */
        int bad = s != PRNN_OK, any = 0;
        if (MPI_Allreduce(&bad, &any, 1, MPI_INT, MPI_MAX, d->comm) != MPI_SUCCESS) any = 1;
        if (any && s == PRNN_OK) s = PRNN_ERR_COMM;
#else
        s = PRNN_ERR_UNSUPPORTED;
#endif
    }
    if (s != PRNN_OK) {
        prnn_dist_free(d);
        return s;
    }
    *out = d;
    return PRNN_OK;
}

void prnn_dist_free(prnn_dist *d)
{
    if (!d) return;
#ifdef PRNN_DIST_NCCL
    if (d->side || d->ev_main || d->ev_side)
        prnn_dist_cuda_side_free(d->ctx, d->side, d->ev_main, d->ev_side);
    if (d->nccl) prnn_dist_nccl_free(d->ctx, d->nccl);
#endif
    prnn_mem_free(d->ctx, d->ws);
    if (d->comm != MPI_COMM_NULL) MPI_Comm_free(&d->comm);
    free(d->bk.cnt);
    free(d->bk.tmp);
    free(d->len);
    free(d->share);
    free(d->counts);
    free(d->displs);
    free(d);
}

int prnn_dist_rank(const prnn_dist *d) { return d ? d->rank : 0; }
int prnn_dist_size(const prnn_dist *d) { return d ? d->size : 1; }
prnn_ctx *prnn_dist_ctx(const prnn_dist *d) { return d ? d->ctx : NULL; }

const char *prnn_dist_backend(const prnn_dist *d)
{
    return d && d->ctx->device == PRNN_DEVICE_CUDA ? "nccl" : "mpi";
}

/* Workspace of at least `bytes` on the context's device. Growing waits for
 * the device (prnn_mem_free of device memory does). */
static void *workspace(prnn_dist *d, size_t bytes)
{
    if (d->ws && d->ws_bytes >= bytes) return d->ws;
    prnn_mem_free(d->ctx, d->ws);
    d->ws = NULL;
    d->ws_bytes = 0;
    if (prnn_mem_alloc(d->ctx, &d->ws, bytes) != PRNN_OK) return NULL;
    d->ws_bytes = bytes;
    return d->ws;
}

/* ------------------------------------------------------------------------ */
/* Data parallel                                                            */

/* Elements per bucket at most (bounds MPI's int counts and the scratch of
 * a CPU bucket: 64 MiB of fp32 in flight), and the default bucket. */
#define BUCKET_MAX ((int64_t)1 << 24)
#define BUCKET_DEFAULT ((int64_t)1 << 20)

void prnn_dist_shard(const prnn_dist *d, int64_t n, int rank, int64_t *lo, int64_t *hi)
{
    const int N = d ? d->size : 1;
    if (rank < 0) rank = d ? d->rank : 0;
    const int64_t S = n > 0 ? (n + N - 1) / N : 0;
    const int64_t a = S * rank < n ? S * rank : n;
    *lo = a;
    *hi = a + S < n ? a + S : n;
}

/* Rank r's part of bucket b, relative to the bucket: an even split of a
 * mean, the rank's shard of a scatter. */
static void bucket_part(const prnn_dist *d, const dist_bucket *b, int64_t n, int r, int64_t *lo,
                        int64_t *hi)
{
    const int N = d->size;
    if (!b->scatter) {
        *lo = b->count * r / N;
        *hi = b->count * (r + 1) / N;
        return;
    }
    int64_t slo, shi;
    prnn_dist_shard(d, n, r, &slo, &shi);
    const int64_t x = slo > b->off ? slo : b->off;
    const int64_t y = shi < b->off + b->count ? shi : b->off + b->count;
    *lo = x - b->off;
    *hi = (y > x ? y : x) - b->off;
}

/* Starts bucket b of buf (n) on the host: its parts go to their owners. */
static prnn_status bucket_start(prnn_dist *d, dist_bucket *b, float *buf, int64_t n,
                                MPI_Comm comm)
{
    const int N = d->size;
    if (!b->cnt) {
        b->cnt = malloc((size_t)N * 6 * sizeof(int));
        if (!b->cnt) return PRNN_ERR_OUT_OF_MEMORY;
    }
    int *sc = b->cnt, *sd = sc + N, *rc = sd + N, *rd = rc + N, *pc = rd + N, *pd = pc + N;
    for (int r = 0; r < N; r++) {
        int64_t lo, hi;
        bucket_part(d, b, n, r, &lo, &hi);
        sc[r] = pc[r] = (int)(hi - lo);
        sd[r] = pd[r] = (int)lo;
    }
    b->mine_lo = pd[d->rank];
    b->mine = pc[d->rank];
    const int64_t need = b->mine * N > 0 ? b->mine * N : 1;
    if (need > b->tmp_cap) {
        free(b->tmp);
        b->tmp = malloc((size_t)need * sizeof(float));
        b->tmp_cap = b->tmp ? need : 0;
        if (!b->tmp) return PRNN_ERR_OUT_OF_MEMORY;
    }
    for (int r = 0; r < N; r++) {
        rc[r] = (int)b->mine;
        rd[r] = (int)(r * b->mine);
    }
    b->phase = BK_EXCHANGE;
    return mpi_ok(MPI_Ialltoallv(buf + b->off, sc, sd, MPI_FLOAT, b->tmp, rc, rd, MPI_FLOAT, comm,
                                 &b->req));
}

/* After the exchange: my part's sum in rank order, divided by the rank
 * count; then back to every rank (a mean) or into my shard (a scatter). */
static prnn_status bucket_reduce(prnn_dist *d, dist_bucket *b, float *buf, MPI_Comm comm)
{
    const int N = d->size;
    const int64_t m = b->mine;
    float *out = b->scatter ? buf + b->off + b->mine_lo : b->tmp;
    for (int64_t i = 0; i < m; i++) {
        float x = b->tmp[i];
        for (int r = 1; r < N; r++) x += b->tmp[r * m + i];
        out[i] = x / (float)N;
    }
    if (b->scatter) {
        b->phase = BK_IDLE;
        return PRNN_OK;
    }
    const int *pc = b->cnt + 4 * N, *pd = pc + N;
    b->phase = BK_GATHER;
    return mpi_ok(MPI_Iallgatherv(b->tmp, (int)m, MPI_FLOAT, buf + b->off, pc, pd, MPI_FLOAT,
                                  comm, &b->req));
}

/* Waits for bucket b (wait = 1) or checks on it, moving it on when its
 * exchange has finished. */
static prnn_status bucket_poll(prnn_dist *d, dist_bucket *b, float *buf, MPI_Comm gather,
                               int wait)
{
    while (b->phase != BK_IDLE) {
        int flag = 1;
        prnn_status s = mpi_ok(wait ? MPI_Wait(&b->req, MPI_STATUS_IGNORE)
                                    : MPI_Test(&b->req, &flag, MPI_STATUS_IGNORE));
        if (s != PRNN_OK) {
            b->phase = BK_IDLE;
            return s;
        }
        if (!flag) return PRNN_OK;
        if (b->phase == BK_GATHER) {
            b->phase = BK_IDLE;
        } else if ((s = bucket_reduce(d, b, buf, gather)) != PRNN_OK) {
            b->phase = BK_IDLE;
            return s;
        }
    }
    return PRNN_OK;
}

prnn_status prnn_dist_allreduce_mean(prnn_dist *d, float *buf, int64_t n)
{
    if (!d || (!buf && n > 0)) return PRNN_ERR_NULL_POINTER;
    if (n < 0) return PRNN_ERR_INVALID_SIZE;
    if (n == 0 || d->size == 1) return PRNN_OK;
    if (d->ctx->device == PRNN_DEVICE_CUDA) {
#ifdef PRNN_DIST_NCCL
        return prnn_dist_nccl_allreduce_mean(d->ctx, d->nccl, buf, n, d->size, NULL);
#else
        return PRNN_ERR_UNSUPPORTED;
#endif
    }
    /* The buckets of prnn_dist_grad, one at a time: the same sums. */
    dist_bucket *b = &d->bk;
    for (int64_t off = 0; off < n; off += BUCKET_MAX) {
        b->off = off;
        b->count = n - off < BUCKET_MAX ? n - off : BUCKET_MAX;
        b->scatter = 0;
        prnn_status s = bucket_start(d, b, buf, n, d->comm);
        if (s == PRNN_OK) s = bucket_poll(d, b, buf, d->comm, 1);
        b->phase = BK_IDLE;
        if (s != PRNN_OK) return s;
    }
    return PRNN_OK;
}

prnn_status prnn_dist_allgather_shards(prnn_dist *d, float *buf, int64_t n)
{
    if (!d || (!buf && n > 0)) return PRNN_ERR_NULL_POINTER;
    if (n < 0) return PRNN_ERR_INVALID_SIZE;
    const int N = d->size;
    if (n == 0 || N == 1) return PRNN_OK;
    int64_t *lo = malloc((size_t)N * 2 * sizeof(int64_t));
    MPI_Request *req = malloc((size_t)N * sizeof(MPI_Request));
    prnn_status s = lo && req ? PRNN_OK : PRNN_ERR_OUT_OF_MEMORY;
    int64_t *hi = lo ? lo + N : NULL;
    for (int r = 0; r < N && s == PRNN_OK; r++) prnn_dist_shard(d, n, r, &lo[r], &hi[r]);
    if (s == PRNN_OK && d->ctx->device == PRNN_DEVICE_CUDA) {
#ifdef PRNN_DIST_NCCL
        s = prnn_dist_nccl_broadcast_owners(d->ctx, d->nccl, buf, lo, hi, N);
#else
        s = PRNN_ERR_UNSUPPORTED;
#endif
    } else if (s == PRNN_OK) {
        /* Every owner broadcasts its shard, BUCKET_MAX elements per round. */
        for (int64_t k = 0; s == PRNN_OK && k < hi[0] - lo[0]; k += BUCKET_MAX) {
            for (int r = 0; r < N; r++) {
                const int64_t a = lo[r] + k, e = a + BUCKET_MAX < hi[r] ? a + BUCKET_MAX : hi[r];
                req[r] = MPI_REQUEST_NULL;
                if (e > a && s == PRNN_OK)
                    s = mpi_ok(MPI_Ibcast(buf + a, (int)(e - a), MPI_FLOAT, r, d->comm, &req[r]));
            }
            const prnn_status w = mpi_ok(MPI_Waitall(N, req, MPI_STATUSES_IGNORE));
            if (s == PRNN_OK) s = w;
        }
    }
    free(lo);
    free(req);
    return s;
}

prnn_status prnn_dist_gather_shards_host(prnn_dist *d, float *buf, int64_t n, int root)
{
    if (!d || (!buf && n > 0)) return PRNN_ERR_NULL_POINTER;
    if (n < 0) return PRNN_ERR_INVALID_SIZE;
    if (root < 0 || root >= d->size) return PRNN_ERR_INVALID_ARGUMENT;
    prnn_status s = PRNN_OK;
    for (int r = 0; r < d->size && s == PRNN_OK; r++) {
        if (r == root || (d->rank != root && d->rank != r)) continue;
        int64_t lo, hi;
        prnn_dist_shard(d, n, r, &lo, &hi);
        for (int64_t a = lo; a < hi && s == PRNN_OK; a += BUCKET_MAX) {
            const int c = (int)(hi - a < BUCKET_MAX ? hi - a : BUCKET_MAX);
            s = mpi_ok(d->rank == root
                           ? MPI_Recv(buf + a, c, MPI_FLOAT, r, 0, d->comm, MPI_STATUS_IGNORE)
                           : MPI_Send(buf + a, c, MPI_FLOAT, root, 0, d->comm));
        }
    }
    return s;
}

/* ------------------------------------------------------------------------ */
/* Data parallel: the bucketed average                                      */

struct prnn_dist_grad {
    prnn_dist *d;
    float *buf;
    int64_t n, bucket;
    int scatter;
    int open;             /* between begin and finish */
    int64_t made_ready;   /* elements made ready since begin */
    int64_t pend_off, pend_count; /* the bucket being filled */
    /* Buckets of this step, in the order they started; the CPU keeps each
     * one's scratch from step to step (the same layout comes back). */
    dist_bucket *bk;
    int nb, cap, polled;  /* polled: buckets before it are through their exchange */
    int64_t *lo, *hi;     /* (N) CUDA scatter: a bucket's owner parts */
    MPI_Comm xchg, gath;  /* CPU: one communicator per phase, so that each
                             sees its collectives in bucket order on every
                             rank whenever a rank notices a finished exchange */
};

prnn_status prnn_dist_grad_init(prnn_dist_grad **out, prnn_dist *d, float *buf, int64_t n,
                                prnn_dist_grad_mode mode, int64_t bucket_elems)
{
    if (!out || !d || (!buf && n > 0)) return PRNN_ERR_NULL_POINTER;
    *out = NULL;
    if (n < 0) return PRNN_ERR_INVALID_SIZE;
    if (mode != PRNN_DIST_GRAD_MEAN && mode != PRNN_DIST_GRAD_SCATTER)
        return PRNN_ERR_INVALID_ARGUMENT;
    const int cuda = d->ctx->device == PRNN_DEVICE_CUDA;
#ifndef PRNN_DIST_NCCL
    if (cuda) return PRNN_ERR_UNSUPPORTED;
#endif
    prnn_dist_grad *g = calloc(1, sizeof *g);
    if (!g) return PRNN_ERR_OUT_OF_MEMORY;
    g->d = d;
    g->buf = buf;
    g->n = n;
    g->bucket = bucket_elems > 0 ? bucket_elems : BUCKET_DEFAULT;
    if (g->bucket > BUCKET_MAX) g->bucket = BUCKET_MAX;
    g->scatter = mode == PRNN_DIST_GRAD_SCATTER;
    g->xchg = g->gath = MPI_COMM_NULL;
    g->lo = malloc((size_t)d->size * 2 * sizeof(int64_t));
    prnn_status s = g->lo ? PRNN_OK : PRNN_ERR_OUT_OF_MEMORY;
    g->hi = g->lo ? g->lo + d->size : NULL;
    if (!cuda) {
        /* Collective: every rank dups, even one that ran out of memory. */
        const prnn_status a = mpi_ok(MPI_Comm_dup(d->comm, &g->xchg));
        const prnn_status b = mpi_ok(MPI_Comm_dup(d->comm, &g->gath));
        if (s == PRNN_OK) s = a != PRNN_OK ? a : b;
    }
    if (s != PRNN_OK) {
        prnn_dist_grad_free(g);
        return s;
    }
    *out = g;
    return PRNN_OK;
}

void prnn_dist_grad_free(prnn_dist_grad *g)
{
    if (!g) return;
    for (int i = 0; i < g->cap; i++) {
        free(g->bk[i].cnt);
        free(g->bk[i].tmp);
    }
    free(g->bk);
    free(g->lo);
    if (g->xchg != MPI_COMM_NULL) MPI_Comm_free(&g->xchg);
    if (g->gath != MPI_COMM_NULL) MPI_Comm_free(&g->gath);
    free(g);
}

int prnn_dist_grad_buckets(const prnn_dist_grad *g) { return g ? g->nb : 0; }

prnn_status prnn_dist_grad_begin(prnn_dist_grad *g)
{
    if (!g) return PRNN_ERR_NULL_POINTER;
    if (g->open) return PRNN_ERR_INVALID_ARGUMENT; /* no finish for the last begin */
    g->open = 1;
    g->made_ready = 0;
    g->pend_count = 0;
    g->nb = 0;
    g->polled = 0;
    return PRNN_OK;
}

/* CPU: moves the started buckets on (wait = 1: to their end). Gathers
 * start in bucket order: the walk stops at the first bucket still in its
 * exchange, and `polled` remembers where that was. */
static prnn_status grad_progress(prnn_dist_grad *g, int wait)
{
    prnn_status s = PRNN_OK;
    for (int i = wait ? 0 : g->polled; i < g->nb; i++) {
        const prnn_status e = bucket_poll(g->d, &g->bk[i], g->buf, g->gath, wait);
        if (s == PRNN_OK) s = e;
        if (g->bk[i].phase == BK_EXCHANGE) break;
        if (i >= g->polled) g->polled = i + 1;
    }
    return s;
}

/* Starts the averaging of elements [off, off + count) as one bucket. */
static prnn_status grad_launch(prnn_dist_grad *g, int64_t off, int64_t count)
{
    prnn_dist *d = g->d;
    if (g->nb == g->cap) {
        const int cap = g->cap ? 2 * g->cap : 16;
        dist_bucket *p = realloc(g->bk, (size_t)cap * sizeof *p);
        if (!p) return PRNN_ERR_OUT_OF_MEMORY;
        memset(p + g->cap, 0, (size_t)(cap - g->cap) * sizeof *p);
        g->bk = p;
        g->cap = cap;
    }
    dist_bucket *b = &g->bk[g->nb++];
    b->off = off;
    b->count = count;
    b->scatter = g->scatter;
    b->phase = BK_IDLE;
    if (d->size == 1) return PRNN_OK; /* x / 1 is x */
    if (d->ctx->device == PRNN_DEVICE_CUDA) {
#ifdef PRNN_DIST_NCCL
        prnn_status s = prnn_dist_cuda_side_waits(d->ctx, d->side, d->ev_main);
        if (s != PRNN_OK) return s;
        if (!g->scatter)
            return prnn_dist_nccl_allreduce_mean(d->ctx, d->nccl, g->buf + off, count, d->size,
                                                 d->side);
        for (int r = 0; r < d->size; r++) {
            int64_t lo, hi;
            bucket_part(d, b, g->n, r, &lo, &hi);
            g->lo[r] = lo, g->hi[r] = hi;
        }
        return prnn_dist_nccl_reduce_owners(d->ctx, d->nccl, g->buf + off, g->lo, g->hi, d->size,
                                            d->rank, d->side);
#else
        return PRNN_ERR_UNSUPPORTED;
#endif
    }
    prnn_status s = bucket_start(d, b, g->buf, g->n, g->xchg);
    if (s != PRNN_OK) b->phase = BK_IDLE;
    return s;
}

/* Starts the filled bucket, in pieces of at most BUCKET_MAX. */
static prnn_status grad_flush(prnn_dist_grad *g)
{
    prnn_status s = PRNN_OK;
    while (g->pend_count > 0 && s == PRNN_OK) {
        const int64_t c = g->pend_count < BUCKET_MAX ? g->pend_count : BUCKET_MAX;
        s = grad_launch(g, g->pend_off, c);
        g->pend_off += c;
        g->pend_count -= c;
    }
    g->pend_count = 0;
    return s;
}

prnn_status prnn_dist_grad_ready(prnn_dist_grad *g, int64_t offset, int64_t count)
{
    if (!g) return PRNN_ERR_NULL_POINTER;
    if (!g->open) return PRNN_ERR_INVALID_ARGUMENT;
    if (offset < 0 || count < 0 || offset > g->n - count) return PRNN_ERR_INVALID_SIZE;
    if (count == 0) return PRNN_OK;
    g->made_ready += count;
    prnn_status s = PRNN_OK;
    if (g->pend_count > 0 && offset + count == g->pend_off) { /* grows downwards */
        g->pend_off = offset;
        g->pend_count += count;
    } else if (g->pend_count > 0 && offset == g->pend_off + g->pend_count) { /* upwards */
        g->pend_count += count;
    } else {
        s = grad_flush(g);
        g->pend_off = offset;
        g->pend_count = count;
    }
    if (s == PRNN_OK && g->pend_count >= g->bucket) s = grad_flush(g);
    if (s == PRNN_OK && g->d->ctx->device != PRNN_DEVICE_CUDA) s = grad_progress(g, 0);
    return s;
}

prnn_status prnn_dist_grad_hook(void *g, int64_t offset, int64_t count)
{
    return prnn_dist_grad_ready((prnn_dist_grad *)g, offset, count);
}

prnn_status prnn_dist_grad_finish(prnn_dist_grad *g)
{
    if (!g) return PRNN_ERR_NULL_POINTER;
    if (!g->open) return PRNN_ERR_INVALID_ARGUMENT;
    prnn_status s = grad_flush(g);
    prnn_dist *d = g->d;
    if (d->size > 1 && d->ctx->device == PRNN_DEVICE_CUDA) {
#ifdef PRNN_DIST_NCCL
        const prnn_status w = prnn_dist_cuda_main_waits(d->ctx, d->side, d->ev_side);
        if (s == PRNN_OK) s = w;
#endif
    } else if (d->size > 1) {
        const prnn_status w = grad_progress(g, 1);
        if (s == PRNN_OK) s = w;
    }
    g->open = 0;
    if (s == PRNN_OK && g->made_ready != g->n) s = PRNN_ERR_INVALID_ARGUMENT;
    return s;
}

prnn_status prnn_dist_allreduce_sum_host(prnn_dist *d, double *buf, int64_t n)
{
    if (!d || (!buf && n > 0)) return PRNN_ERR_NULL_POINTER;
    if (n < 0) return PRNN_ERR_INVALID_SIZE;
    for (int64_t off = 0; off < n; off += INT_MAX / 2) {
        const int64_t c = n - off < INT_MAX / 2 ? n - off : INT_MAX / 2;
        prnn_status s = mpi_ok(
            MPI_Allreduce(MPI_IN_PLACE, buf + off, (int)c, MPI_DOUBLE, MPI_SUM, d->comm));
        if (s != PRNN_OK) return s;
    }
    return PRNN_OK;
}

/* ------------------------------------------------------------------------ */
/* Sequence parallel scan: checks and the local segment                     */

/* What every rank tells the others at the start of a call. */
enum { I_STATUS, I_B, I_T, I_H, I_DTYPE, I_REVERSE, I_HAS_LEN, I_LEN_HASH, I_COUNT };

static uint64_t lengths_hash(const int64_t *len, int64_t B)
{
    uint64_t x = 1469598103934665603ull; /* FNV-1a over the values */
    for (int64_t i = 0; i < B; i++) {
        x ^= (uint64_t)len[i];
        x *= 1099511628211ull;
    }
    return x;
}

/* This call's geometry: the local descriptor (T = the segment, lengths =
 * the rows' local valid steps) and the ranks' order. */
typedef struct {
    prnn_scan_desc local;
    int p;      /* this rank's position in scan order */
    int64_t BH;
    int f64;    /* records in double (CPU F64), else float */
} dist_call;

/*
 * The first exchange of every sequence-parallel call. `s` is what this rank
 * found wrong with its own arguments (PRNN_OK if nothing). All ranks share
 * their descriptors, and all return the same verdict: a rank's own error,
 * else the first other rank's error, else PRNN_ERR_INVALID_ARGUMENT when
 * the descriptors disagree. Then the local descriptor: this segment's
 * offset in the global time axis gives each row's local valid steps.
 */
static prnn_status dist_begin(prnn_dist *d, const prnn_scan_desc *desc, prnn_status s,
                              dist_call *c)
{
    int64_t mine[I_COUNT] = {0};
    mine[I_STATUS] = s;
    if (s == PRNN_OK) {
        mine[I_B] = desc->B, mine[I_T] = desc->T, mine[I_H] = desc->H;
        mine[I_DTYPE] = desc->dtype, mine[I_REVERSE] = desc->reverse;
        mine[I_HAS_LEN] = desc->lengths != NULL;
        mine[I_LEN_HASH] = desc->lengths ? (int64_t)lengths_hash(desc->lengths, desc->B) : 0;
    }
    const int N = d->size;
    int64_t *all = malloc((size_t)N * I_COUNT * sizeof(int64_t));
    if (!all) return s != PRNN_OK ? s : PRNN_ERR_OUT_OF_MEMORY; /* cannot take part */
    prnn_status m = mpi_ok(
        MPI_Allgather(mine, I_COUNT, MPI_INT64_T, all, I_COUNT, MPI_INT64_T, d->comm));
    if (m != PRNN_OK) {
        free(all);
        return s != PRNN_OK ? s : m;
    }
    prnn_status verdict = s;
    int64_t off = 0, total = 0;
    for (int r = 0; r < N && verdict == PRNN_OK; r++) {
        const int64_t *x = all + (int64_t)r * I_COUNT;
        if (x[I_STATUS] != PRNN_OK) {
            verdict = (prnn_status)x[I_STATUS];
            break;
        }
        for (int k = I_B; k < I_COUNT; k++)
            if (k != I_T && x[k] != all[k]) verdict = PRNN_ERR_INVALID_ARGUMENT;
        if (r < d->rank) off += x[I_T];
        total += x[I_T];
    }
    free(all);
    if (verdict != PRNN_OK) return verdict;

    /* Global lengths lie in [0, sum of T]; the same array everywhere (the
     * hash agreed), so every rank reaches the same verdict here too. */
    const int64_t B = desc->B;
    if (desc->lengths) {
        for (int64_t i = 0; i < B; i++)
            if (desc->lengths[i] < 0 || desc->lengths[i] > total) return PRNN_ERR_INVALID_LENGTH;
        if (B > d->len_cap) {
            int64_t *p = realloc(d->len, (size_t)B * sizeof(int64_t));
            if (!p) return PRNN_ERR_OUT_OF_MEMORY;
            d->len = p;
            d->len_cap = B;
        }
        for (int64_t i = 0; i < B; i++) {
            const int64_t l = desc->lengths[i] - off;
            d->len[i] = l < 0 ? 0 : l > desc->T ? desc->T : l;
        }
    }
    c->local = *desc;
    c->local.lengths = desc->lengths ? d->len : NULL;
    c->p = desc->reverse ? N - 1 - d->rank : d->rank;
    c->BH = desc->B * desc->H;
    c->f64 = desc->dtype == PRNN_DTYPE_F64;
    return PRNN_OK;
}

/* What a rank can check of its own arguments before the exchange. */
static prnn_status check_local(const prnn_dist *d, const prnn_scan_desc *desc)
{
    if (!desc) return PRNN_ERR_NULL_POINTER;
    if (desc->B <= 0 || desc->T <= 0 || desc->H <= 0) return PRNN_ERR_INVALID_SIZE;
    if ((unsigned)desc->dtype >= PRNN_DTYPE_COUNT_) return PRNN_ERR_INVALID_ARGUMENT;
    if (desc->reverse != 0 && desc->reverse != 1) return PRNN_ERR_INVALID_ARGUMENT;
    const int cuda = d->ctx->device == PRNN_DEVICE_CUDA;
    if (!cuda && desc->dtype != PRNN_DTYPE_F32 && desc->dtype != PRNN_DTYPE_F64)
        return PRNN_ERR_UNSUPPORTED;
    if (cuda && desc->dtype == PRNN_DTYPE_F64) return PRNN_ERR_UNSUPPORTED;
#ifndef PRNN_DIST_NCCL
    if (cuda) return PRNN_ERR_UNSUPPORTED;
#endif
    int64_t bt, bth, bh, rec;
    if (!prnn_mul_ok(desc->B, desc->T, &bt) || !prnn_mul_ok(bt, desc->H, &bth) ||
        !prnn_mul_ok(desc->B, desc->H, &bh) || !prnn_mul_ok(bh, PRNN_DIST_KB, &rec) ||
        rec > INT_MAX || !prnn_mul_ok(rec, d->size, &rec) || rec > INT64_MAX / 16)
        return PRNN_ERR_SIZE_OVERFLOW;
    return PRNN_OK;
}

/* Records and merge outputs in the workspace: send (K*BH), recv (N*K*BH),
 * then `extra` (B, H) tensors, in the record type; on CUDA also the
 * summary kernels' scratch and the device copy of the local lengths. */
typedef struct {
    void *send, *recv, *extra[3];
    float *part;
    int64_t chunks;
    int64_t *len_dev;
} dist_ws;

static prnn_status take_workspace(prnn_dist *d, const dist_call *c, int K, dist_ws *w)
{
    const int64_t es = c->f64 ? 8 : 4, BH = c->BH, N = d->size;
    const int64_t B = c->local.B;
    const int cuda = d->ctx->device == PRNN_DEVICE_CUDA;
    int64_t n = (int64_t)K * BH + N * K * BH + 3 * BH; /* elements */
    w->chunks = 0;
#ifdef PRNN_DIST_NCCL
    if (cuda) w->chunks = prnn_dist_cuda_chunks(d->ctx, B, c->local.T, c->local.H);
#endif
    const int64_t part = 2 * B * w->chunks * c->local.H;
    const size_t bytes = (size_t)((n + part) * es + (cuda ? B * 8 + 256 : 0));
    char *p = workspace(d, bytes);
    if (!p) return PRNN_ERR_OUT_OF_MEMORY;
    w->send = p;
    w->recv = p + K * BH * es;
    for (int k = 0; k < 3; k++)
        w->extra[k] = p + (K * BH + N * K * BH + k * BH) * es;
    w->part = (float *)(p + n * es);
    w->len_dev = cuda ? (int64_t *)(((uintptr_t)(p + (n + part) * es) + 255) & ~(uintptr_t)255)
                      : NULL;
    return PRNN_OK;
}

/* Slot k of the send record <- src (B, H) in the record type, or zeros. */
static prnn_status put_slot(prnn_dist *d, const dist_call *c, dist_ws *w, int k,
                            const void *src)
{
    const size_t es = c->f64 ? 8 : 4, bytes = (size_t)c->BH * es;
    char *dst = (char *)w->send + (size_t)k * bytes;
    return src ? prnn_mem_copy(d->ctx, dst, src, bytes) : prnn_mem_zero(d->ctx, dst, bytes);
}

static prnn_status allgather(prnn_dist *d, const dist_call *c, dist_ws *w, int K)
{
    const int64_t count = (int64_t)K * c->BH;
    if (d->ctx->device == PRNN_DEVICE_CUDA) {
#ifdef PRNN_DIST_NCCL
        return prnn_dist_nccl_allgather(d->ctx, d->nccl, w->send, w->recv, count);
#else
        return PRNN_ERR_UNSUPPORTED;
#endif
    }
    const MPI_Datatype t = c->f64 ? MPI_DOUBLE : MPI_FLOAT;
    return mpi_ok(MPI_Allgather(w->send, (int)count, t, w->recv, (int)count, t, d->comm));
}

#ifdef PRNN_DIST_NCCL
static prnn_status upload_lengths(prnn_dist *d, const dist_call *c, dist_ws *w)
{
    if (!c->local.lengths || !w->len_dev) return PRNN_OK;
    return prnn_mem_upload(d->ctx, w->len_dev, c->local.lengths,
                           (size_t)c->local.B * sizeof(int64_t));
}
#endif

/* ------------------------------------------------------------------------ */
/* Sequence parallel scan: forward and backward                             */

/* The start both directions share: the workspace for K summary tensors
 * (when this rank found nothing wrong, s == PRNN_OK), then dist_begin's
 * verdict, the same on every rank. */
static prnn_status dist_open(prnn_dist *d, const prnn_scan_desc *desc, prnn_status s, int K,
                             dist_call *c, dist_ws *w)
{
    memset(c, 0, sizeof *c);
    memset(w, 0, sizeof *w);
    if (s == PRNN_OK) {
        c->BH = desc->B * desc->H, c->f64 = desc->dtype == PRNN_DTYPE_F64;
        c->local = *desc;
        s = take_workspace(d, c, K, w);
    }
    return dist_begin(d, desc, s, c);
}

prnn_status prnn_dist_scan_forward(prnn_dist *d, const prnn_scan_desc *desc, void *h, void *hT,
                                   const void *a, const void *b, const void *h0)
{
    if (!d) return PRNN_ERR_NULL_POINTER;
    if (d->size == 1) return prnn_scan_forward(d->ctx, desc, h, hT, a, b, h0);
    prnn_status s = check_local(d, desc);
    if (s == PRNN_OK && (!h || !a || !b)) s = PRNN_ERR_NULL_POINTER;
    dist_call c;
    dist_ws w;
    s = dist_open(d, desc, s, PRNN_DIST_KF, &c, &w);
    if (s != PRNN_OK) return s;
    const int K = PRNN_DIST_KF, N = d->size;
    const int64_t BH = c.BH;

    /* 1. This segment's summary from zero, and rank 0's h0. */
    if (d->ctx->device == PRNN_DEVICE_CUDA) {
#ifdef PRNN_DIST_NCCL
        s = upload_lengths(d, &c, &w);
        if (s == PRNN_OK)
            s = prnn_dist_cuda_fwd_summary(d->ctx, &c.local, c.local.lengths ? w.len_dev : NULL,
                                           w.send, a, b, w.part, w.chunks);
#endif
    } else if (c.f64) {
        cpu_fwd_summary_f64(&c.local, c.local.lengths, w.send, a, b, d->ctx->num_threads);
    } else {
        cpu_fwd_summary_f32(&c.local, c.local.lengths, w.send, a, b, d->ctx->num_threads);
    }
    if (s == PRNN_OK) s = put_slot(d, &c, &w, DF_H0, d->rank == 0 ? h0 : NULL);

    /* 2. Everyone's summaries; 3. the state entering this segment. */
    if (s == PRNN_OK) s = allgather(d, &c, &w, K);
    if (s != PRNN_OK) return s;
    void *carry = w.extra[0];
    if (d->ctx->device == PRNN_DEVICE_CUDA) {
#ifdef PRNN_DIST_NCCL
        s = prnn_dist_cuda_fwd_combine(d->ctx, w.recv, BH, N, desc->reverse, c.p, carry, hT);
#endif
    } else if (c.f64) {
        cpu_fwd_combine_f64(w.recv, BH, N, desc->reverse, c.p, carry, hT);
    } else {
        cpu_fwd_combine_f32(w.recv, BH, N, desc->reverse, c.p, carry, hT);
    }
    /* 4. The segment from its true start state. */
    if (s == PRNN_OK) s = prnn_scan_forward(d->ctx, &c.local, h, NULL, a, b, carry);
    return s;
}

prnn_status prnn_dist_scan_backward(prnn_dist *d, const prnn_scan_desc *desc, void *da,
                                    void *db, void *dh0, const void *a, const void *h,
                                    const void *h0, const void *dh, const void *dhT)
{
    if (!d) return PRNN_ERR_NULL_POINTER;
    if (d->size == 1) return prnn_scan_backward(d->ctx, desc, da, db, dh0, a, h, h0, dh, dhT);
    prnn_status s = check_local(d, desc);
    if (s == PRNN_OK && (!da || !db || !a || !h)) s = PRNN_ERR_NULL_POINTER;
    dist_call c;
    dist_ws w;
    s = dist_open(d, desc, s, PRNN_DIST_KB, &c, &w);
    if (s != PRNN_OK) return s;
    const int K = PRNN_DIST_KB, N = d->size;
    const int64_t BH = c.BH;

    /* 1. This segment's gradient summary and boundary state, rank 0's h0
     * and this rank's share of dhT. */
    if (d->ctx->device == PRNN_DEVICE_CUDA) {
#ifdef PRNN_DIST_NCCL
        s = upload_lengths(d, &c, &w);
        if (s == PRNN_OK)
            s = prnn_dist_cuda_bwd_summary(d->ctx, &c.local, c.local.lengths ? w.len_dev : NULL,
                                           w.send, a, h, dh, w.part, w.chunks);
#endif
    } else if (c.f64) {
        cpu_bwd_summary_f64(&c.local, c.local.lengths, w.send, a, h, dh, d->ctx->num_threads);
    } else {
        cpu_bwd_summary_f32(&c.local, c.local.lengths, w.send, a, h, dh, d->ctx->num_threads);
    }
    if (s == PRNN_OK) s = put_slot(d, &c, &w, DB_H0, d->rank == 0 ? h0 : NULL);
    if (s == PRNN_OK) s = put_slot(d, &c, &w, DB_DT, dhT);

    /* 2. Everyone's; 3. the forward state and the gradient entering this
     * segment, and on rank 0 of a reverse scan (whose segment is the last
     * in scan order) the gradient of the global h0. */
    if (s == PRNN_OK) s = allgather(d, &c, &w, K);
    if (s != PRNN_OK) return s;
    void *h0l = w.extra[0], *dhTl = w.extra[1];
    void *dh0_merged = d->rank == 0 && desc->reverse ? dh0 : NULL;
    if (d->ctx->device == PRNN_DEVICE_CUDA) {
#ifdef PRNN_DIST_NCCL
        s = prnn_dist_cuda_bwd_combine(d->ctx, w.recv, BH, N, desc->reverse, c.p, h0l, dhTl,
                                       dh0_merged);
#endif
    } else if (c.f64) {
        cpu_bwd_combine_f64(w.recv, BH, N, desc->reverse, c.p, h0l, dhTl, dh0_merged);
    } else {
        cpu_bwd_combine_f32(w.recv, BH, N, desc->reverse, c.p, h0l, dhTl, dh0_merged);
    }
    /* 4. The segment's backward; rank 0 of a forward scan is first in scan
     * order, so its local dh0 is the global one. */
    void *dh0_local = d->rank == 0 && !desc->reverse ? dh0 : NULL;
    if (s == PRNN_OK)
        s = prnn_scan_backward(d->ctx, &c.local, da, db, dh0_local, a, h, h0l, dh, dhTl);
    if (s == PRNN_OK && dh0 && d->rank != 0)
        s = prnn_mem_zero(d->ctx, dh0, (size_t)BH * (c.f64 ? 8 : 4));
    return s;
}
