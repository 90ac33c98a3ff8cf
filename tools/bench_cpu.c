/*
 * bench_cpu.c - `prnn bench`: the CPU scan against memcpy.
 *
 * The scan is memory-bound: forward reads a and b and writes h (12 bytes per
 * fp32 element), backward reads a, h and dh and writes da and db (20 bytes).
 * Its floor is the time the machine takes to move those bytes, measured
 * here by memcpy moving the same number of bytes (a copy of N bytes reads N
 * and writes N). Every figure is the median of several timed runs after a
 * warm-up, on random inputs.
 *
 * Size letters: B batch rows, T time steps, H channels.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <omp.h>

#include "bench_cpu.h"
#include "prnn.h"

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int cmp_double(const void *x, const void *y)
{
    double a = *(const double *)x, b = *(const double *)y;
    return (a > b) - (a < b);
}

static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* One timed operation of the matrix. */
typedef enum { OP_MEMCPY, OP_MEMCPY_PAR, OP_FORWARD, OP_BACKWARD } op_kind;

typedef struct {
    prnn_ctx *ctx;
    prnn_scan_desc d;
    float *a, *b, *h, *dh, *da, *db, *hT;
    char *src, *dst;
    size_t copy_bytes;
} bench_state;

static int run_op(bench_state *s, op_kind op)
{
    switch (op) {
    case OP_MEMCPY: memcpy(s->dst, s->src, s->copy_bytes); return 0;
    case OP_MEMCPY_PAR: {
        const int nt = prnn_ctx_num_threads(s->ctx);
        const size_t per = (s->copy_bytes / (size_t)nt + 63) & ~(size_t)63;
#pragma omp parallel for num_threads(nt)
        for (int i = 0; i < nt; i++) {
            size_t lo = (size_t)i * per, hi = lo + per > s->copy_bytes ? s->copy_bytes : lo + per;
            if (lo < hi) memcpy(s->dst + lo, s->src + lo, hi - lo);
        }
        return 0;
    }
    case OP_FORWARD: return prnn_scan_forward(s->ctx, &s->d, s->h, s->hT, s->a, s->b, NULL);
    case OP_BACKWARD:
        return prnn_scan_backward(s->ctx, &s->d, s->da, s->db, NULL, s->a, s->h, NULL, s->dh, NULL);
    }
    return 0;
}

static double time_op(bench_state *s, op_kind op, int reps)
{
    double t[64];
    if (reps > 64) reps = 64;
    if (run_op(s, op)) return -1; /* warm-up */
    for (int i = 0; i < reps; i++) {
        double t0 = now_s();
        if (run_op(s, op)) return -1;
        t[i] = now_s() - t0;
    }
    return median(t, reps);
}

static void *alloc_random(size_t n, unsigned *seed, double lo, double hi)
{
    float *p = aligned_alloc(64, (n * sizeof(float) + 63) & ~(size_t)63);
    if (!p) return NULL;
    for (size_t i = 0; i < n; i++) p[i] = (float)(lo + (hi - lo) * (rand_r(seed) / (double)RAND_MAX));
    return p;
}

int prnn_bench_cpu(const bench_cpu_options *o)
{
    const int64_t shapes_default[][3] = {
        {1, 1 << 20, 64},   /* small B*H, long T: only the tree's split of T gives parallelism */
        {4, 1 << 16, 256},  /* medium */
        {16, 1 << 12, 1024}, /* wide: B*H alone fills the cores */
        {64, 1 << 20, 1},   /* scalar channels */
    };
    int64_t shapes[4][3];
    int nshapes = 0;
    if (o->B > 0 && o->T > 0 && o->H > 0) {
        shapes[0][0] = o->B, shapes[0][1] = o->T, shapes[0][2] = o->H;
        nshapes = 1;
    } else {
        memcpy(shapes, shapes_default, sizeof shapes_default);
        nshapes = 4;
    }

    prnn_ctx_config cfg = prnn_ctx_config_default();
    cfg.num_threads = o->threads;
    prnn_ctx *ctx = NULL, *ctx1 = NULL;
    prnn_status st = prnn_ctx_init(&ctx, &cfg);
    cfg.num_threads = 1;
    if (st == PRNN_OK) st = prnn_ctx_init(&ctx1, &cfg);
    if (st != PRNN_OK) {
        fprintf(stderr, "prnn bench: %s\n", prnn_strerror(st));
        prnn_ctx_free(ctx);
        return 1;
    }
    const int nt = prnn_ctx_num_threads(ctx);
    printf("prnn %s CPU scan benchmark: fp32, %d threads, median of %d runs, random inputs\n",
           prnn_version(), nt, o->reps);
    printf("bytes moved: forward 12 B/element (read a, b; write h), backward 20 B/element "
           "(read a, h, dh; write da, db)\n");
    printf("memcpy: one call moving the same bytes (N read + N written); memcpy x%d: %d threads "
           "each copying a slice\n\n", nt, nt);

    /* The table is printed after all measurements so that it stays whole. */
    char table[8192];
    int len = snprintf(table, sizeof table,
                       "| shape (B x T x H) | pass | algorithm | ms | GB/s | vs memcpy | vs memcpy x%d |\n"
                       "|---|---|---|---:|---:|---:|---:|\n", nt);
    int rc = 0;
    for (int si = 0; si < nshapes && !rc; si++) {
        const int64_t B = shapes[si][0], T = shapes[si][1], H = shapes[si][2];
        const size_t n = (size_t)(B * T * H);
        unsigned seed = (unsigned)time(NULL) + (unsigned)si;
        bench_state s = {.ctx = ctx, .d = prnn_scan_desc_make(B, T, H)};
        s.a = alloc_random(n, &seed, 0.5, 1.0);
        s.b = alloc_random(n, &seed, -1.0, 1.0);
        s.dh = alloc_random(n, &seed, -1.0, 1.0);
        s.h = aligned_alloc(64, n * 4), s.da = aligned_alloc(64, n * 4), s.db = aligned_alloc(64, n * 4);
        s.hT = aligned_alloc(64, ((size_t)(B * H) * 4 + 63) & ~(size_t)63);
        s.src = aligned_alloc(64, n * 10), s.dst = aligned_alloc(64, n * 10);
        if (!s.a || !s.b || !s.dh || !s.h || !s.da || !s.db || !s.hT || !s.src || !s.dst) {
            fprintf(stderr, "prnn bench: out of memory for %lld elements\n", (long long)n);
            rc = 1;
        } else {
            memset(s.src, 1, n * 10), memset(s.dst, 2, n * 10);
            memset(s.h, 0, n * 4), memset(s.da, 0, n * 4), memset(s.db, 0, n * 4);
            for (int pass = 0; pass < 2 && !rc; pass++) {
                const double bytes = (double)n * (pass ? 20.0 : 12.0);
                s.copy_bytes = n * (pass ? 10 : 6);
                s.ctx = ctx;
                const double t_mc = time_op(&s, OP_MEMCPY, o->reps);
                const double t_mcp = time_op(&s, OP_MEMCPY_PAR, o->reps);
                struct {
                    const char *name;
                    prnn_ctx *c;
                    prnn_scan_algo algo;
                } rows[] = {{"memcpy", ctx, 0}, {"serial (1 thread)", ctx1, PRNN_SCAN_SERIAL},
                            {"tree", ctx, PRNN_SCAN_TREE}};
                for (size_t r = 0; r < 3 && !rc; r++) {
                    double t = t_mc;
                    if (r > 0) {
                        s.ctx = rows[r].c;
                        s.d.algo = rows[r].algo;
                        t = time_op(&s, pass ? OP_BACKWARD : OP_FORWARD, o->reps);
                        if (t < 0) {
                            fprintf(stderr, "prnn bench: scan failed\n");
                            rc = 1;
                            break;
                        }
                    }
                    char shape[64];
                    snprintf(shape, sizeof shape, "%lld x %lld x %lld", (long long)B, (long long)T,
                             (long long)H);
                    len += snprintf(table + len, sizeof table - (size_t)len,
                                    "| %s | %s | %s | %.2f | %.1f | %.2f | %.2f |\n", shape,
                                    pass ? "backward" : "forward", rows[r].name, t * 1e3,
                                    bytes / t * 1e-9, t_mc / t, t_mcp / t);
                    if (len >= (int)sizeof table) len = (int)sizeof table - 1;
                }
                fprintf(stderr, "  measured %lld x %lld x %lld %s\n", (long long)B, (long long)T,
                        (long long)H, pass ? "backward" : "forward");
            }
        }
        free(s.a), free(s.b), free(s.dh), free(s.h), free(s.da), free(s.db), free(s.hT);
        free(s.src), free(s.dst);
    }
    printf("%s", table);
    printf("\n'vs memcpy' is memcpy's time over the scan's for the same bytes: 1.00 means the scan "
           "moves its data as fast as memcpy, 0.77 is 1.3x slower.\n");
    prnn_ctx_free(ctx);
    prnn_ctx_free(ctx1);
    return rc;
}
