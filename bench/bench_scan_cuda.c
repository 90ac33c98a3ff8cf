/*
 * bench_scan_cuda.c - speed of the CUDA scan against the card's copy
 * roofline. One run measures the device-to-device copy bandwidth (bytes read
 * + written), then times every algorithm (AUTO, the default, then CHUNKED,
 * STRIPED, TREE, SERIAL) and storage dtype over B*H in {64, 256, 16384,
 * 12288 (16 x 768 and 8 x 1536)} x T in {4096, 65536, 1048576}, forward
 * and forward+backward, and prints ms, GB/s, the fraction of the roofline
 * and AUTO's speed-up over SERIAL, then a markdown table.
 *
 * Bytes moved per element: fp32 12 forward (read a, b; write h) and 32
 * forward+backward (backward reads a, h, dh, writes da, db); bf16/fp16 half.
 *
 * Size letters: B batch rows, T time steps, H channels.
 *
 * Timing (--timing, bench_cuda.h): queued, the default, enqueues each timed
 * call behind a read-only pass over four times the L2, so the events measure
 * the device's time from a cold cache with the host's preparation of the
 * call hidden, as in a running pipeline (the way triton.testing.do_bench
 * times the peers); idle times each call on an idle stream, host
 * preparation and launch latency included. The copy roofline is timed the
 * same way as the calls.
 *
 * The default algorithms are all but FIXED (--algo fixed, or all).
 *
 * Usage: prnn_bench_cuda [--quick] [--dtype f32|bf16|f16|all]
 *                        [--algo auto|chunked|striped|tree|serial|fixed|fast|all] [--shape BxTxH]
 *                        [--timing queued|idle]
 */
#include <cuda_runtime.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "prnn.h"

#include "check.h"
#include "bench_cuda.h"

#define MAX_REPS 64
#define MEM_BUDGET ((double)40 * (1 << 30)) /* bytes of tensors one shape may use */
#define SERIAL_LIMIT_S 2.0                  /* skip SERIAL calls slower than this */

/* ------------------------------------------------------------------------ */
/* Inputs: a random block on the host, tiled over the device buffer          */

static uint64_t rng_state = 0x243F6A8885A308D3ull;

static double uniform(double lo, double hi)
{
    uint64_t z = (rng_state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    return lo + (hi - lo) * ((double)(z >> 11) * (1.0 / 9007199254740992.0));
}

static uint16_t f32_to_bf16(float f)
{
    uint32_t x;
    memcpy(&x, &f, 4);
    x += 0x7fffu + ((x >> 16) & 1u);
    return (uint16_t)(x >> 16);
}

/* Values in [lo, hi) are small and normal, so truncating the mantissa is a
 * fine fp16 for timing purposes. */
static uint16_t f32_to_f16(float f)
{
    uint32_t x;
    memcpy(&x, &f, 4);
    const uint32_t sign = (x >> 16) & 0x8000u, ax = x & 0x7fffffffu;
    if (ax < 0x38800000u) return (uint16_t)sign; /* tiny: zero */
    return (uint16_t)(sign | ((((ax >> 23) - 112u) << 10) | ((ax & 0x7fffffu) >> 13)));
}

#define BLOCK_ELEMS ((int64_t)1 << 22)

static void fill_device(void *d, int64_t n, prnn_dtype dt, double lo, double hi, void *block)
{
    const size_t es = prnn_dtype_size(dt);
    for (int64_t i = 0; i < BLOCK_ELEMS; i++) {
        const float v = (float)uniform(lo, hi);
        if (dt == PRNN_DTYPE_F32) ((float *)block)[i] = v;
        else if (dt == PRNN_DTYPE_BF16) ((uint16_t *)block)[i] = f32_to_bf16(v);
        else ((uint16_t *)block)[i] = f32_to_f16(v);
    }
    for (int64_t i = 0; i < n; i += BLOCK_ELEMS) {
        const int64_t m = n - i < BLOCK_ELEMS ? n - i : BLOCK_ELEMS;
        CUDA_CHECK(cudaMemcpy((char *)d + (size_t)i * es, block, (size_t)m * es, cudaMemcpyHostToDevice));
    }
}

/* ------------------------------------------------------------------------ */
/* Timing                                                                   */

typedef struct {
    void *a, *b, *h, *dh, *da, *db; /* (B, T, H) */
    float *h0, *hT, *dhT, *dh0;     /* (B, H) */
} buffers;

typedef struct {
    prnn_scan_algo algo;
    prnn_dtype dt;
    int64_t B, T, H;
    double fwd_ms, fb_ms; /* medians; < 0: not run */
} result;

#define MAX_RESULTS 256
static result results[MAX_RESULTS];
static int nresults;

static int queued = 1; /* --timing: queued (1) or idle (0) */

/* Median ms of `reps` timed runs (after one warm-up), forward only or
 * forward + backward. Returns < 0, printing why, when one call is too slow. */
static double time_scan(prnn_ctx *ctx, cudaStream_t s, const prnn_scan_desc *d, const buffers *bf,
                        int with_backward, int reps, double limit_s)
{
    cudaEvent_t e0, e1;
    CUDA_CHECK(cudaEventCreate(&e0));
    CUDA_CHECK(cudaEventCreate(&e1));
    float ms[MAX_REPS];
    double out = -1.0;
    for (int i = -1; i < reps; i++) { /* i = -1: warm-up, also the too-slow probe */
        if (queued) bench_flush_before(s);
        CUDA_CHECK(cudaEventRecord(e0, s));
        PRNN_CHECK(prnn_scan_forward(ctx, d, bf->h, bf->hT, bf->a, bf->b, bf->h0));
        if (with_backward)
            PRNN_CHECK(prnn_scan_backward(ctx, d, bf->da, bf->db, bf->dh0, bf->a, bf->h, bf->h0,
                                          bf->dh, bf->dhT));
        CUDA_CHECK(cudaEventRecord(e1, s));
        CUDA_CHECK(cudaEventSynchronize(e1));
        float t;
        CUDA_CHECK(cudaEventElapsedTime(&t, e0, e1));
        if (i < 0) {
            if (t * 1e-3 > limit_s) {
                printf("    %s skipped: one call took %.2f s (> %.1f s)\n", prnn_scan_algo_name(d->algo),
                       t * 1e-3, limit_s);
                goto done;
            }
            continue;
        }
        ms[i] = t;
    }
    out = bench_median(ms, reps);
done:
    CUDA_CHECK(cudaEventDestroy(e0));
    CUDA_CHECK(cudaEventDestroy(e1));
    return out;
}

static const char *dtype_name(prnn_dtype dt)
{
    return dt == PRNN_DTYPE_F32 ? "f32" : dt == PRNN_DTYPE_BF16 ? "bf16" : "f16";
}

static const result *find(prnn_scan_algo algo, const result *r)
{
    for (int i = 0; i < nresults; i++)
        if (results[i].algo == algo && results[i].dt == r->dt && results[i].B == r->B &&
            results[i].T == r->T && results[i].H == r->H)
            return &results[i];
    return NULL;
}

int main(int argc, char **argv)
{
    int quick = 0, dt_mask = 3 /* f32, bf16 */, algo_mask = 31;
    long long oB = 0, oT = 0, oH = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--quick")) {
            quick = 1;
        } else if (!strcmp(argv[i], "--shape") && i + 1 < argc) {
            if (sscanf(argv[++i], "%lldx%lldx%lld", &oB, &oT, &oH) != 3 || oB <= 0 || oT <= 0 ||
                oH <= 0)
                dt_mask = 0;
        } else if (!strcmp(argv[i], "--dtype") && i + 1 < argc) {
            const char *v = argv[++i];
            dt_mask = !strcmp(v, "f32") ? 1 : !strcmp(v, "bf16") ? 2 : !strcmp(v, "f16") ? 4
                      : !strcmp(v, "all") ? 7 : 0;
        } else if (!strcmp(argv[i], "--timing") && i + 1 < argc) {
            const char *v = argv[++i];
            if (!strcmp(v, "queued")) queued = 1;
            else if (!strcmp(v, "idle")) queued = 0;
            else dt_mask = 0;
        } else if (!strcmp(argv[i], "--algo") && i + 1 < argc) {
            const char *v = argv[++i];
            algo_mask = !strcmp(v, "auto")      ? 1
                        : !strcmp(v, "chunked") ? 2
                        : !strcmp(v, "striped") ? 4
                        : !strcmp(v, "tree")    ? 8
                        : !strcmp(v, "serial")  ? 16
                        : !strcmp(v, "fixed")   ? 32
                        : !strcmp(v, "fast")    ? 7 /* auto, chunked, striped */
                        : !strcmp(v, "all")     ? 63
                                                : 0;
        } else {
            dt_mask = 0;
        }
        if (!dt_mask || !algo_mask) {
            fprintf(stderr, "usage: %s [--quick] [--dtype f32|bf16|f16|all] "
                            "[--algo auto|chunked|striped|tree|serial|fixed|fast|all] [--shape BxTxH] "
                            "[--timing queued|idle]\n", argv[0]);
            return 2;
        }
    }
    if (!prnn_cuda_available()) {
        printf("no CUDA device: nothing to measure\n");
        return 0;
    }

    prnn_ctx_config cfg = prnn_ctx_config_default();
    cfg.device = PRNN_DEVICE_CUDA;
    prnn_ctx *ctx;
    PRNN_CHECK(prnn_ctx_init(&ctx, &cfg));
    cudaStream_t s = (cudaStream_t)prnn_ctx_cuda_stream(ctx);
    struct cudaDeviceProp prop;
    CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
    if (queued && bench_flush_init() != 0) {
        fprintf(stderr, "no room for the cache flush's buffer\n");
        return 1;
    }
    const double bw = bench_copy_bandwidth(s, queued);
    printf("device: %s, %d SMs, L2 %d MiB\n", prop.name, prop.multiProcessorCount, prop.l2CacheSize >> 20);
    int mem_khz = 0, mem_bits = 0;
    CUDA_CHECK(cudaDeviceGetAttribute(&mem_khz, cudaDevAttrMemoryClockRate, 0));
    CUDA_CHECK(cudaDeviceGetAttribute(&mem_bits, cudaDevAttrGlobalMemoryBusWidth, 0));
    printf("memory: %d MHz x %d bits, peak %.0f GB/s (double data rate; %.1f GB/s an SM)\n", mem_khz / 1000,
           mem_bits, 2e-6 * mem_khz * (mem_bits / 8), 2e-6 * mem_khz * (mem_bits / 8) / prop.multiProcessorCount);
    printf("copy roofline: %.1f GB/s (cudaMemcpyAsync device-to-device of 1 GiB, read + write, median of 25)\n",
           bw * 1e-9);
    if (queued)
        printf("timing: queued (each timed call behind a read-only pass over %zu MiB: cold L2, host preparation hidden)\n\n",
               bench_flush_bytes() >> 20);
    else
        printf("timing: idle (each timed call on an idle stream: host preparation and launch latency included)\n\n");

    /* B*H -> (B, H): one row of 64 or 256 channels (long-sequence, small
     * batch), 16 x 1024, and 12288 channels two ways: 16 x 768 and 8 x 1536 */
    int64_t shapes_bh[][2] = {{1, 64}, {1, 256}, {16, 1024}, {16, 768}, {8, 1536}};
    const int nshapes = (int)(sizeof shapes_bh / sizeof shapes_bh[0]);
    int64_t Ts[] = {4096, 65536, 1048576};
    const int one_shape = oB > 0;
    if (one_shape) shapes_bh[0][0] = oB, shapes_bh[0][1] = oH, Ts[0] = oT;
    const prnn_dtype dts[] = {PRNN_DTYPE_F32, PRNN_DTYPE_BF16, PRNN_DTYPE_F16};
    const prnn_scan_algo algos[] = {PRNN_SCAN_AUTO, PRNN_SCAN_CHUNKED, PRNN_SCAN_STRIPED,
                                    PRNN_SCAN_TREE, PRNN_SCAN_SERIAL, PRNN_SCAN_FIXED};
    const int nalgos = (int)(sizeof algos / sizeof algos[0]);
    const int reps = quick ? 10 : 15;

    void *block = malloc((size_t)BLOCK_ELEMS * 4);
    if (!block) return 2;

    printf("%-8s %-5s %6s %8s %6s | %10s %8s %6s | %10s %8s %6s\n", "algo", "dtype", "B", "T", "H",
           "fwd ms", "GB/s", "roof", "fwd+bwd ms", "GB/s", "roof");
    for (int di = 0; di < 3; di++) {
        if (!(dt_mask >> di & 1)) continue;
        const prnn_dtype dt = dts[di];
        const size_t es = prnn_dtype_size(dt);
        for (int si = 0; si < nshapes; si++)
            for (int ti = 0; ti < 3; ti++) {
                if (quick && !((si == 0 && ti == 2) || (si == 2 && ti == 1) || (si == 1 && ti == 0)))
                    continue;
                if (one_shape && (si || ti)) continue;
                const int64_t B = shapes_bh[si][0], H = shapes_bh[si][1], T = Ts[ti];
                const int64_t n = B * T * H;
                const double need = 6.0 * (double)n * (double)es;
                if (need > MEM_BUDGET) {
                    printf("%-8s %-5s %6lld %8lld %6lld | skipped: %.1f GiB of tensors > %.0f GiB budget\n",
                           "all", dtype_name(dt), (long long)B, (long long)T, (long long)H,
                           need / (1 << 30), MEM_BUDGET / (1 << 30));
                    continue;
                }
                buffers bf;
                CUDA_CHECK(cudaMalloc(&bf.a, (size_t)n * es));
                CUDA_CHECK(cudaMalloc(&bf.b, (size_t)n * es));
                CUDA_CHECK(cudaMalloc(&bf.h, (size_t)n * es));
                CUDA_CHECK(cudaMalloc(&bf.dh, (size_t)n * es));
                CUDA_CHECK(cudaMalloc(&bf.da, (size_t)n * es));
                CUDA_CHECK(cudaMalloc(&bf.db, (size_t)n * es));
                CUDA_CHECK(cudaMalloc((void **)&bf.h0, (size_t)(B * H) * 4));
                CUDA_CHECK(cudaMalloc((void **)&bf.hT, (size_t)(B * H) * 4));
                CUDA_CHECK(cudaMalloc((void **)&bf.dhT, (size_t)(B * H) * 4));
                CUDA_CHECK(cudaMalloc((void **)&bf.dh0, (size_t)(B * H) * 4));
                fill_device(bf.a, n, dt, 0.5, 1.0, block);
                fill_device(bf.b, n, dt, -1.0, 1.0, block);
                fill_device(bf.dh, n, dt, -1.0, 1.0, block);
                fill_device(bf.h0, B * H, PRNN_DTYPE_F32, -1.0, 1.0, block);
                fill_device(bf.dhT, B * H, PRNN_DTYPE_F32, -1.0, 1.0, block);
                CUDA_CHECK(cudaDeviceSynchronize());

                for (int ai = 0; ai < nalgos; ai++) {
                    if (!(algo_mask >> ai & 1)) continue;
                    prnn_scan_desc d = prnn_scan_desc_make(B, T, H);
                    d.dtype = dt;
                    d.algo = algos[ai];
                    const double limit = d.algo == PRNN_SCAN_SERIAL ? SERIAL_LIMIT_S : 1e9;
                    result r = {d.algo, dt, B, T, H, -1.0, -1.0};
                    char kf[256];
                    r.fwd_ms = time_scan(ctx, s, &d, &bf, 0, reps, limit);
                    snprintf(kf, sizeof kf, "%s", prnn_scan_last_kernel(ctx));
                    if (r.fwd_ms >= 0) r.fb_ms = time_scan(ctx, s, &d, &bf, 1, reps, limit);
                    CUDA_CHECK(cudaDeviceSynchronize());
                    if (nresults < MAX_RESULTS) results[nresults++] = r;
                    if (r.fwd_ms < 0 || r.fb_ms < 0) continue;
                    const double bf_ = (double)n * (double)es * 3.0, bfb = (double)n * (double)es * 8.0;
                    const double gf = bf_ / (r.fwd_ms * 1e-3), gfb = bfb / (r.fb_ms * 1e-3);
                    printf("%-8s %-5s %6lld %8lld %6lld | %10.3f %8.1f %5.1f%% | %10.3f %8.1f %5.1f%%\n",
                           prnn_scan_algo_name(d.algo), dtype_name(dt), (long long)B, (long long)T,
                           (long long)H, r.fwd_ms, gf * 1e-9, 100.0 * gf / bw, r.fb_ms, gfb * 1e-9,
                           100.0 * gfb / bw);
                    if (d.algo == PRNN_SCAN_AUTO)
                        printf("    (auto: forward %s; backward %s)\n", kf, prnn_scan_last_kernel(ctx));
                    fflush(stdout);
                }
                CUDA_CHECK(cudaFree(bf.a));
                CUDA_CHECK(cudaFree(bf.b));
                CUDA_CHECK(cudaFree(bf.h));
                CUDA_CHECK(cudaFree(bf.dh));
                CUDA_CHECK(cudaFree(bf.da));
                CUDA_CHECK(cudaFree(bf.db));
                CUDA_CHECK(cudaFree(bf.h0));
                CUDA_CHECK(cudaFree(bf.hT));
                CUDA_CHECK(cudaFree(bf.dhT));
                CUDA_CHECK(cudaFree(bf.dh0));
            }
    }
    free(block);

    /* the markdown table, last */
    printf("\n%s, copy roofline %.1f GB/s, timing %s; bytes per element: fp32 12 forward, 32 fwd+bwd; "
           "bf16/fp16 half. Inputs random (a in (0.5, 1)), h0 and dhT given, hT and dh0 written.\n\n",
           prop.name, bw * 1e-9, queued ? "queued" : "idle");
    printf("| algo | dtype | B | T | H | fwd ms | fwd GB/s | fwd roof | fwd+bwd ms | fwd+bwd GB/s | fwd+bwd roof | x serial fwd | x serial fwd+bwd |\n");
    printf("|---|---|---|---|---|---|---|---|---|---|---|---|---|\n");
    for (int i = 0; i < nresults; i++) {
        const result *r = &results[i];
        if (r->fwd_ms < 0 || r->fb_ms < 0) {
            printf("| %s | %s | %lld | %lld | %lld | skipped (slower than %.0f s a call) | | | | | | | |\n",
                   prnn_scan_algo_name(r->algo), dtype_name(r->dt), (long long)r->B, (long long)r->T,
                   (long long)r->H, SERIAL_LIMIT_S);
            continue;
        }
        const double es = (double)prnn_dtype_size(r->dt), n = (double)(r->B * r->T * r->H);
        const double gf = n * es * 3.0 / (r->fwd_ms * 1e-3), gfb = n * es * 8.0 / (r->fb_ms * 1e-3);
        char sp[64] = "-", spb[64] = "-";
        const result *ser = find(PRNN_SCAN_SERIAL, r);
        if (r->algo == PRNN_SCAN_AUTO && ser && ser->fwd_ms > 0 && ser->fb_ms > 0) {
            snprintf(sp, sizeof sp, "%.1f", ser->fwd_ms / r->fwd_ms);
            snprintf(spb, sizeof spb, "%.1f", ser->fb_ms / r->fb_ms);
        }
        printf("| %s | %s | %lld | %lld | %lld | %.3f | %.0f | %.1f%% | %.3f | %.0f | %.1f%% | %s | %s |\n",
               prnn_scan_algo_name(r->algo), dtype_name(r->dt), (long long)r->B, (long long)r->T,
               (long long)r->H, r->fwd_ms, gf * 1e-9, 100.0 * gf / bw, r->fb_ms, gfb * 1e-9,
               100.0 * gfb / bw, sp, spb);
    }
    bench_flush_free();
    prnn_ctx_free(ctx);
    return 0;
}
