/*
 * bench_dist_cuda.c - speed of the sequence-parallel scan over the GPUs of
 * an MPI job (one process per GPU), for scripts/dist_gpu_check.sh.
 *
 * One (B, T, H) sequence is cut into equal segments, one per process, and
 * the distributed forward (and, with --backward, forward + backward) is
 * timed from a barrier to the last process's finish, median of --reps
 * runs. The same ranks also time the plain one-GPU scan of their own
 * segment, the floor the distributed scan adds its summary pass and
 * exchange to. Rank 0 prints one line per measurement:
 *
 *   dist  gpus=N dtype=bf16 op=fwd B=1 T=67108864 H=256 ms=... tbps=...
 *   local gpus=N ...  (the one-GPU scan of a segment of T/N steps)
 *
 * tbps: the bytes a one-GPU scan of the whole sequence must move (forward:
 * read a, b, write h; backward adds read a, h, dh, write da, db) over the
 * time, in TB/s: the same work counted the same way for every GPU count.
 *
 * Inputs: a random block uploaded once and tiled over each buffer (never
 * zeros). Size letters: B batch rows, T global time steps, H channels.
 *
 * Usage: mpirun -np N prnn_bench_dist [--B 1] [--T 67108864] [--H 256]
 *        [--dtype f32|bf16|f16] [--backward] [--reps 5]
 */
#include <cuda_runtime.h>
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "prnn.h"
#include "prnn_dist.h"

#include "check.h"

#define MAX_REPS 32
#define BLOCK_ELEMS ((int64_t)1 << 22)

static int cmp_double(const void *x, const void *y)
{
    const double a = *(const double *)x, b = *(const double *)y;
    return (a > b) - (a < b);
}

static uint64_t rng_state = 0x243F6A8885A308D3ull;

static double uniform(double lo, double hi)
{
    uint64_t z = (rng_state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    return lo + (hi - lo) * ((double)(z >> 11) * (1.0 / 9007199254740992.0));
}

/* A device buffer of n elements of dt: a random block in [lo, hi) converted
 * on the device, then tiled. */
static void *filled(prnn_ctx *ctx, int64_t n, prnn_dtype dt, double lo, double hi)
{
    const size_t es = prnn_dtype_size(dt);
    void *d = NULL, *blk32 = NULL;
    PRNN_CHECK(prnn_mem_alloc(ctx, &d, (size_t)n * es));
    const int64_t m = n < BLOCK_ELEMS ? n : BLOCK_ELEMS;
    float *host = malloc((size_t)m * 4);
    if (!host) exit(2);
    for (int64_t i = 0; i < m; i++) host[i] = (float)uniform(lo, hi);
    PRNN_CHECK(prnn_mem_alloc(ctx, &blk32, (size_t)m * 4));
    PRNN_CHECK(prnn_mem_upload(ctx, blk32, host, (size_t)m * 4));
    PRNN_CHECK(prnn_mem_convert(ctx, d, dt, blk32, PRNN_DTYPE_F32, m));
    for (int64_t off = m; off < n; off += m) {
        const int64_t c = n - off < m ? n - off : m;
        PRNN_CHECK(prnn_mem_copy(ctx, (char *)d + off * es, d, (size_t)c * es));
    }
    PRNN_CHECK(prnn_ctx_synchronize(ctx));
    prnn_mem_free(ctx, blk32);
    free(host);
    return d;
}

/* Seconds from a barrier to the slowest rank's finish. */
typedef prnn_status (*step_fn)(void *);

static double timed(prnn_ctx *ctx, step_fn fn, void *arg)
{
    MPI_Barrier(MPI_COMM_WORLD);
    const double t0 = MPI_Wtime();
    PRNN_CHECK(fn(arg));
    PRNN_CHECK(prnn_ctx_synchronize(ctx));
    double dt = MPI_Wtime() - t0, worst = 0;
    MPI_Allreduce(&dt, &worst, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    return worst;
}

typedef struct {
    prnn_dist *dist;
    prnn_ctx *ctx;
    prnn_scan_desc d;
    void *a, *b, *h, *dh, *da, *db;
    int backward;
} job;

static prnn_status run_dist(void *p)
{
    job *j = p;
    prnn_status s = prnn_dist_scan_forward(j->dist, &j->d, j->h, NULL, j->a, j->b, NULL);
    if (s == PRNN_OK && j->backward)
        s = prnn_dist_scan_backward(j->dist, &j->d, j->da, j->db, NULL, j->a, j->h, NULL, j->dh,
                                    NULL);
    return s;
}

static prnn_status run_local(void *p)
{
    job *j = p;
    prnn_status s = prnn_scan_forward(j->ctx, &j->d, j->h, NULL, j->a, j->b, NULL);
    if (s == PRNN_OK && j->backward)
        s = prnn_scan_backward(j->ctx, &j->d, j->da, j->db, NULL, j->a, j->h, NULL, j->dh, NULL);
    return s;
}

static double median_time(prnn_ctx *ctx, step_fn fn, void *arg, int reps)
{
    double t[MAX_REPS];
    (void)timed(ctx, fn, arg); /* warm-up: workspaces, NCCL channels */
    for (int r = 0; r < reps; r++) t[r] = timed(ctx, fn, arg);
    qsort(t, (size_t)reps, sizeof t[0], cmp_double);
    return reps % 2 ? t[reps / 2] : 0.5 * (t[reps / 2 - 1] + t[reps / 2]);
}

int main(int argc, char **argv)
{
    int64_t B = 1, T = (int64_t)1 << 26, H = 256;
    int reps = 5, backward = 0;
    prnn_dtype dt = PRNN_DTYPE_BF16;
    for (int i = 1; i < argc; i++) {
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(argv[i], "--B") && v) B = atoll(v), i++;
        else if (!strcmp(argv[i], "--T") && v) T = atoll(v), i++;
        else if (!strcmp(argv[i], "--H") && v) H = atoll(v), i++;
        else if (!strcmp(argv[i], "--reps") && v) reps = atoi(v), i++;
        else if (!strcmp(argv[i], "--backward")) backward = 1;
        else if (!strcmp(argv[i], "--dtype") && v) {
            dt = !strcmp(v, "f32") ? PRNN_DTYPE_F32 : !strcmp(v, "f16") ? PRNN_DTYPE_F16 : PRNN_DTYPE_BF16;
            i++;
        } else {
            fprintf(stderr, "usage: mpirun -np N %s [--B 1] [--T 67108864] [--H 256] "
                            "[--dtype f32|bf16|f16] [--backward] [--reps 5]\n", argv[0]);
            return 2;
        }
    }
    if (B < 1 || T < 1 || H < 1 || reps < 1 || reps > MAX_REPS) {
        fprintf(stderr, "prnn_bench_dist: bad sizes\n");
        return 2;
    }
    prnn_dist_info info;
    PRNN_CHECK(prnn_dist_mpi_start(&info));
    prnn_ctx_config cfg = prnn_ctx_config_default();
    cfg.device = PRNN_DEVICE_CUDA;
    cfg.cuda_device = info.local_rank;
    prnn_ctx *ctx = NULL;
    PRNN_CHECK(prnn_ctx_init(&ctx, &cfg));
    job j;
    memset(&j, 0, sizeof j);
    j.ctx = ctx;
    j.backward = backward;
    PRNN_CHECK(prnn_dist_init(&j.dist, ctx, NULL));
    const int N = info.size;
    const int64_t Tr = T * (info.rank + 1) / N - T * info.rank / N, n = B * Tr * H;
    j.d = prnn_scan_desc_make(B, Tr, H);
    j.d.dtype = dt;
    j.a = filled(ctx, n, dt, 0.5, 1.0);
    j.b = filled(ctx, n, dt, -1.0, 1.0);
    j.h = filled(ctx, n, dt, -1.0, 1.0);
    if (backward) {
        j.dh = filled(ctx, n, dt, -1.0, 1.0);
        j.da = filled(ctx, n, dt, -1.0, 1.0);
        j.db = filled(ctx, n, dt, -1.0, 1.0);
    }
    const char *dname = dt == PRNN_DTYPE_F32 ? "f32" : dt == PRNN_DTYPE_F16 ? "f16" : "bf16";
    const double es = (double)prnn_dtype_size(dt), elems = (double)B * (double)T * (double)H;
    const double bytes = elems * es * (backward ? 8.0 : 3.0);
    const double td = median_time(ctx, run_dist, &j, reps);
    const double tl = median_time(ctx, run_local, &j, reps);
    if (info.rank == 0) {
        printf("dist  gpus=%d dtype=%s op=%s B=%lld T=%lld H=%lld ms=%.3f tbps=%.3f\n", N, dname,
               backward ? "fwd+bwd" : "fwd", (long long)B, (long long)T, (long long)H, td * 1e3,
               bytes / td / 1e12);
        printf("local gpus=%d dtype=%s op=%s B=%lld T=%lld H=%lld ms=%.3f tbps=%.3f\n", N, dname,
               backward ? "fwd+bwd" : "fwd", (long long)B, (long long)(T / N), (long long)H,
               tl * 1e3, bytes / N / tl / 1e12);
        fflush(stdout);
    }
    void *all[] = {j.a, j.b, j.h, j.dh, j.da, j.db};
    for (int i = 0; i < 6; i++) prnn_mem_free(ctx, all[i]);
    prnn_dist_free(j.dist);
    prnn_ctx_free(ctx);
    prnn_dist_mpi_stop();
    return 0;
}
