/*
 * test_dist_util.h - what the distributed suites (test_dist.c on the CPU,
 * test_dist_cuda.c on GPUs) share: checks made on every rank and reported
 * by rank 0, and the global scan problem every rank draws from the same
 * seed, with its one-process reference in double and each rank's segment.
 *
 * Header-only, like test_util.h; the including file defines
 * _POSIX_C_SOURCE (mkdtemp) before any header. Size letters: B batch rows,
 * T global time steps, Tr a rank's steps, H channels, N ranks.
 */
#ifndef PRNN_TEST_DIST_UTIL_H
#define PRNN_TEST_DIST_UTIL_H

#include <mpi.h>

#include "prnn_dist.h"
#include "test_util.h"

static int g_rank, g_size;
static prnn_ctx *g_cpu; /* the oracle's: CPU, one thread (the ranks share the cores) */

/* Weights after a few AdamW steps (lr 3e-3 in the trainer checks) of two
 * runs that differ only in the summation order of the gradients. AdamW
 * divides each update by the root of its second moment, so the update of
 * an entry whose gradient happens to sit near rounding level (|g| ~ 1e-8,
 * AdamW's eps) follows its rounding: such an entry can move by a good
 * fraction of lr in one run and not in the other (seen: 3.6e-4 after 5
 * steps on 2 ranks, one entry of 10128; over 300 seeds on 2 ranks no run
 * had an entry past 1.1e-4). A wrong gradient (a rank's share lost or
 * counted twice, a segment boundary wrong) turns the direction of whole
 * tensors, so most entries move by about lr. So: every entry within a
 * tenth of lr, absolute, but for at most DIST_TRAIN_WEIGHT_OUTLIERS of them
 * (a thousandth of the entries), and those within lr per step. */
#define DIST_TRAIN_LR 3e-3
#define DIST_TRAIN_WEIGHT_TOL (DIST_TRAIN_LR / 10)
#define DIST_TRAIN_WEIGHT_OUTLIERS(nw) ((nw) / 1000)

/* ------------------------------------------------------------------------ */
/* Checks made on every rank                                                */

/* The GPU suites' start: MPI, the rank and size, and whether every node has
 * a CUDA device per process (devices: this node's count). 1: go on; 0: rank
 * 0 said why the suite is skipped and MPI is stopped (exit 0); -1: MPI did
 * not start (exit 2). */
static inline int dist_gpu_suite_start(int devices, prnn_dist_info *info)
{
    prnn_status s = prnn_dist_mpi_start(info);
    if (s != PRNN_OK) {
        fprintf(stderr, "cannot start MPI: %s\n", prnn_strerror(s));
        return -1;
    }
    g_rank = info->rank, g_size = info->size;
    int enough = devices >= info->local_size, all = 0;
    MPI_Allreduce(&enough, &all, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    if (all) return 1;
    if (g_rank == 0) {
        printf("fewer CUDA devices than processes on a node (%d here for %d): GPU tests skipped\n",
               devices, info->local_size);
        printf("0 passed, 0 failed\n");
    }
    prnn_dist_mpi_stop();
    return 0;
}

/* The end of a suite, after its contexts are freed: rank 0's verdict
 * (with the "N passed, N failed" line) becomes every rank's exit code, then
 * MPI stops. */
static inline int dist_suite_finish(void)
{
    fflush(stdout);
    MPI_Barrier(MPI_COMM_WORLD);
    int rc = 0;
    if (g_rank == 0) rc = tu_finish();
    MPI_Bcast(&rc, 1, MPI_INT, 0, MPI_COMM_WORLD);
    prnn_dist_mpi_stop();
    return rc;
}

/* A temporary directory made by rank 0 from template (ending in XXXXXX) and
 * known to every rank; dir[0] == 0 everywhere when it could not be made. */
static inline void dist_tmpdir(char *dir, size_t n, const char *template_)
{
    if (g_rank == 0) {
        snprintf(dir, n, "%s", template_);
        if (!mkdtemp(dir)) dir[0] = 0;
    }
    MPI_Bcast(dir, (int)n, MPI_CHAR, 0, MPI_COMM_WORLD);
}

/* Passes when ok on every rank; err is this rank's measured error, and the
 * line shows the largest over the ranks and its rank. */
static inline void dcheck(int ok, double err, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static inline void dcheck(int ok, double err, const char *fmt, ...)
{
    int all = 0;
    MPI_Allreduce(&ok, &all, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    struct {
        double v;
        int r;
    } in = {err == err ? err : INFINITY, g_rank}, out;
    MPI_Allreduce(&in, &out, 1, MPI_DOUBLE_INT, MPI_MAXLOC, MPI_COMM_WORLD);
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (g_rank == 0) tu_check(all, "%s (max %.2e on rank %d)", msg, out.v, out.r);
}

/* Largest |x - ref| / (|ref| + floor) over n entries. */
static inline double max_rel(const double *x, const double *ref, int64_t n, double floor_)
{
    double worst = 0;
    for (int64_t i = 0; i < n; i++) {
        const double d = fabs(x[i] - ref[i]) / (fabs(ref[i]) + floor_);
        if (!(d <= worst)) worst = d; /* NaN wins */
    }
    return worst;
}

static inline double rms(const double *x, int64_t n)
{
    double s = 0;
    for (int64_t i = 0; i < n; i++) s += x[i] * x[i];
    return n ? sqrt(s / (double)n) + 1e-30 : 1.0;
}

/* ------------------------------------------------------------------------ */
/* A global problem and its one-process reference                           */

/*
 * A global problem, the same on every rank: segment lengths Tr per rank,
 * inputs in double (exactly representable in float, so that the f32 runs
 * and the f64 reference see the same numbers), and each rank's share of
 * dhT (the distributed backward uses their sum).
 */
typedef struct {
    int64_t B, T, H;
    int64_t *Tr, *off; /* (N) */
    int use_h0, use_hT, use_dh, use_dhT, reverse, varlen;
    int64_t *lengths;
    double *a, *b, *dh, *h0, *junk_h0; /* (B, T, H) x 3, (B, H) x 2 */
    double *dhT;                       /* (N, B, H) */
} problem;

enum { O_H0 = 1, O_HT = 2, O_DHT = 4, O_REV = 8, O_LEN = 16, O_NO_DH = 32 };

static inline void round_to_float(double *x, int64_t n)
{
    for (int64_t i = 0; i < n; i++) x[i] = (double)(float)x[i];
}

/* Segments: each rank draws 1 .. maxr steps (one-step segments included). */
static inline void problem_init(problem *p, int64_t B, int64_t H, int64_t maxr, unsigned opts,
                         double decay_lo)
{
    memset(p, 0, sizeof *p);
    const int N = g_size;
    p->B = B, p->H = H;
    p->Tr = tu_malloc((size_t)N * 8), p->off = tu_malloc((size_t)N * 8);
    for (int r = 0; r < N; r++) {
        p->Tr[r] = 1 + (int64_t)tu_uniform(0, (double)maxr);
        if (p->Tr[r] > maxr) p->Tr[r] = maxr;
        p->off[r] = r ? p->off[r - 1] + p->Tr[r - 1] : 0;
    }
    if (maxr > 2 && N > 2) p->Tr[1] = 1; /* a one-step segment in the middle */
    for (int r = 1; r < N; r++) p->off[r] = p->off[r - 1] + p->Tr[r - 1];
    p->T = p->off[N - 1] + p->Tr[N - 1];
    p->use_h0 = !!(opts & O_H0), p->use_hT = !!(opts & O_HT), p->use_dhT = !!(opts & O_DHT);
    p->reverse = !!(opts & O_REV), p->varlen = !!(opts & O_LEN), p->use_dh = !(opts & O_NO_DH);
    const int64_t n = B * p->T * H, s = B * H;
    p->a = tu_malloc((size_t)n * 8), p->b = tu_malloc((size_t)n * 8);
    p->dh = tu_malloc((size_t)n * 8);
    p->h0 = tu_malloc((size_t)s * 8), p->junk_h0 = tu_malloc((size_t)s * 8);
    p->dhT = tu_malloc((size_t)(N * s) * 8);
    tu_fill_f64(p->a, n, decay_lo, 1.0);
    tu_fill_f64(p->b, n, -1.0, 1.0);
    tu_fill_f64(p->dh, n, -1.0, 1.0);
    tu_fill_f64(p->h0, s, -1.0, 1.0);
    tu_fill_f64(p->junk_h0, s, 50.0, 100.0); /* what ranks > 0 pass: must be ignored */
    tu_fill_f64(p->dhT, N * s, -1.0, 1.0);
    round_to_float(p->a, n), round_to_float(p->b, n), round_to_float(p->dh, n);
    round_to_float(p->h0, s), round_to_float(p->dhT, N * s);
    if (p->varlen) {
        /* The edges 0, T and 1, and lengths that end exactly at, one before
         * and one after a segment boundary. */
        p->lengths = tu_malloc((size_t)B * 8);
        for (int64_t r = 0; r < B; r++) {
            int64_t L = (int64_t)tu_uniform(0, (double)p->T + 1);
            const int64_t edge = p->off[N > 1 ? 1 + r % (N - 1) : 0];
            if (r == 0) L = p->T;
            if (r == 1) L = 0;
            if (r == 2) L = 1;
            if (r == 3) L = edge;
            if (r == 4) L = edge - 1;
            if (r == 5) L = edge + 1;
            p->lengths[r] = L < 0 ? 0 : L > p->T ? p->T : L;
        }
    }
}

static inline void problem_free(problem *p)
{
    free(p->Tr), free(p->off), free(p->a), free(p->b), free(p->dh), free(p->h0);
    free(p->junk_h0), free(p->dhT), free(p->lengths);
}

static inline const char *opts_name(const problem *p, char *buf, size_t n)
{
    snprintf(buf, n, "%s%s%s%s%s%s", p->use_h0 ? "h0," : "", p->use_hT ? "hT," : "",
             p->use_dh ? "" : "no dh,", p->use_dhT ? "dhT," : "", p->reverse ? "rev," : "",
             p->varlen ? "len," : "");
    size_t k = strlen(buf);
    if (k == 0) snprintf(buf, n, "plain");
    else buf[k - 1] = 0;
    return buf;
}

/* Outputs in double: the whole sequence (reference) or one segment. */
typedef struct {
    double *h, *hT, *da, *db, *dh0;
} result;

static inline void result_alloc(result *r, int64_t n, int64_t s)
{
    r->h = tu_malloc((size_t)n * 8), r->da = tu_malloc((size_t)n * 8);
    r->db = tu_malloc((size_t)n * 8);
    r->hT = tu_malloc((size_t)s * 8), r->dh0 = tu_malloc((size_t)s * 8);
}

static inline void result_free(result *r) { free(r->h), free(r->hT), free(r->da), free(r->db), free(r->dh0); }

/* The whole sequence in one process, in double, with dhT = the sum of the
 * ranks' shares. */
static inline void run_reference(const problem *p, result *ref)
{
    const int64_t s = p->B * p->H;
    double *dhT = tu_malloc((size_t)s * 8);
    for (int64_t i = 0; i < s; i++) {
        dhT[i] = 0;
        for (int r = 0; r < g_size; r++) dhT[i] += p->dhT[r * s + i];
    }
    prnn_scan_desc d = prnn_scan_desc_make(p->B, p->T, p->H);
    d.dtype = PRNN_DTYPE_F64;
    d.algo = PRNN_SCAN_SERIAL;
    d.reverse = p->reverse;
    d.lengths = p->lengths;
    TU_REQUIRE(prnn_scan_forward(g_cpu, &d, ref->h, ref->hT, p->a, p->b, p->use_h0 ? p->h0 : NULL));
    TU_REQUIRE(prnn_scan_backward(g_cpu, &d, ref->da, ref->db, ref->dh0, p->a, ref->h,
                                  p->use_h0 ? p->h0 : NULL, p->use_dh ? p->dh : NULL,
                                  p->use_dhT ? dhT : NULL));
    free(dhT);
}

/* x (B, T, H) -> this rank's segment (B, Tr, H). */
static inline void segment(const problem *p, const double *x, double *out)
{
    const int64_t Tr = p->Tr[g_rank], off = p->off[g_rank];
    for (int64_t b = 0; b < p->B; b++)
        memcpy(out + b * Tr * p->H, x + (b * p->T + off) * p->H, (size_t)(Tr * p->H) * 8);
}

/* FNV-1a of n bytes. */
static inline uint64_t hash_bytes(const void *p, size_t n)
{
    const unsigned char *c = p;
    uint64_t x = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++) x = (x ^ c[i]) * 1099511628211ull;
    return x;
}

/* 1 when every rank has the same hash. */
static inline int same_everywhere(uint64_t h)
{
    uint64_t lo = h, hi = h;
    MPI_Allreduce(&h, &lo, 1, MPI_UINT64_T, MPI_MIN, MPI_COMM_WORLD);
    MPI_Allreduce(&h, &hi, 1, MPI_UINT64_T, MPI_MAX, MPI_COMM_WORLD);
    return lo == hi;
}

#endif /* PRNN_TEST_DIST_UTIL_H */
