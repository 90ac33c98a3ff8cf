/*
 * test_cell_cuda.c - the GPU test suite of the cell layers (prnn_cell.h).
 * Every cell variant (minGRU and minLSTM in linear and log space, QRNN f/fo/
 * ifo pooling x window 1/2, SRU with D == H and D != H, GILR-LSTM) x option
 * set (bias, h0/hT/dhT/dh0, bidirectional, lengths with 0, 1 and T,
 * recompute k) x shape runs through the public API twice on the same
 * inputs: on a CPU context in F32 (the oracle, itself checked against
 * double and finite differences by prnn_test_cell) and on a CUDA context in
 * F32 and BF16. y, hT, dx, dparams (pre-filled: the backward adds) and dh0
 * are compared; prnn_cell_step too.
 *
 *   1. layers, F32          4. prnn_cell_step, F32 and BF16
 *   2. layers, BF16         5. errors
 *   3. long T (65537), small B*H
 *
 * Each section has a time budget (a section over it stops, and that counts
 * as a failure) and a watchdog that ends the program if a call hangs.
 *
 * Size letters: B batch rows, T time steps, D input features, H hidden units
 * per direction, G gate groups, S2 state floats per batch row of the layer,
 * P parameters.
 *
 * Usage: prnn_gpu_test_cell [--quick] [--no-time-limit]
 *   --quick: a small subset (every variant with all options at once, on
 *   two shapes), for compute-sanitizer; --no-time-limit: no budgets, no
 *   watchdog.
 * PRNN_TEST_SEED=N repeats a run. Without a CUDA device it skips and passes.
 */
#define _POSIX_C_SOURCE 200809L /* clock_gettime, alarm */

#include <cuda_runtime.h>
#include <signal.h>
#include <unistd.h>

#include "test_util.h"

#include "check.h"
#include "prnn_cell.h"

/* ------------------------------------------------------------------------ */
/* bf16 on the host (round to nearest even)                                 */

static uint16_t f32_to_bf16(float f)
{
    uint32_t x;
    memcpy(&x, &f, 4);
    if ((x & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((x >> 16) | 0x40u); /* NaN */
    x += 0x7fffu + ((x >> 16) & 1u);
    return (uint16_t)(x >> 16);
}

static float bf16_to_f32(uint16_t h)
{
    const uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* Rounds x in place to what dtype stores. */
static void round_to(float *x, int64_t n, prnn_dtype dt)
{
    if (dt != PRNN_DTYPE_BF16) return;
    for (int64_t i = 0; i < n; i++) x[i] = bf16_to_f32(f32_to_bf16(x[i]));
}

static const char *dtype_name(prnn_dtype dt) { return dt == PRNN_DTYPE_F32 ? "f32" : "bf16"; }

/* ------------------------------------------------------------------------ */
/* Device buffers                                                           */

/* n floats to the device in dtype (NULL for NULL). */
static void *upload(const float *x, int64_t n, prnn_dtype dt)
{
    if (!x) return NULL;
    const size_t es = prnn_dtype_size(dt);
    void *d, *h = tu_malloc((size_t)n * es);
    if (dt == PRNN_DTYPE_BF16)
        for (int64_t i = 0; i < n; i++) ((uint16_t *)h)[i] = f32_to_bf16(x[i]);
    else memcpy(h, x, (size_t)n * 4);
    CUDA_CHECK(cudaMalloc(&d, (size_t)(n ? n : 1) * es));
    CUDA_CHECK(cudaMemcpy(d, h, (size_t)n * es, cudaMemcpyHostToDevice));
    CUDA_CHECK(cudaDeviceSynchronize()); /* see poisoned() */
    free(h);
    return d;
}

/* n elements of dtype, every byte 0xff: NaN in fp32 and bf16, so an element
 * the library should write and does not shows. The fill runs on the legacy
 * default stream, which the context's non-blocking stream does not wait
 * for, so it is waited for here (as the uploads are): a late fill would
 * land on the library's outputs. */
static void *poisoned(int64_t n, prnn_dtype dt)
{
    void *d;
    const size_t bytes = (size_t)(n ? n : 1) * prnn_dtype_size(dt);
    CUDA_CHECK(cudaMalloc(&d, bytes));
    CUDA_CHECK(cudaMemset(d, 0xff, bytes));
    CUDA_CHECK(cudaDeviceSynchronize());
    return d;
}

static void download(float *x, const void *d, int64_t n, prnn_dtype dt)
{
    const size_t es = prnn_dtype_size(dt);
    if (dt == PRNN_DTYPE_F32) {
        CUDA_CHECK(cudaMemcpy(x, d, (size_t)n * 4, cudaMemcpyDeviceToHost));
        return;
    }
    uint16_t *h = tu_malloc((size_t)n * es);
    CUDA_CHECK(cudaMemcpy(h, d, (size_t)n * es, cudaMemcpyDeviceToHost));
    for (int64_t i = 0; i < n; i++) x[i] = bf16_to_f32(h[i]);
    free(h);
}

static void dfree(void *d)
{
    if (d) CUDA_CHECK(cudaFree(d));
}

/* ------------------------------------------------------------------------ */
/* Tolerances, with where they come from                                    */

/*
 * Two measures per tensor, both against the reference's RMS r:
 *   norm  RMS(gpu - cpu) / r                 the tensor as a whole
 *   max   max |gpu - cpu| / (|cpu| + r)      the worst entry (relative to
 *                                            itself where it is above r)
 * A wrong term anywhere shows in max as O(1e-1) or more.
 */
typedef struct {
    double norm, max;
    const char *why;
} tolerance;

/*
 * fp32: both sides compute in fp32 from identical inputs and differ only in
 * the order of sums: cuBLAS vs OpenBLAS GEMMs (K = D..2D forward, K = G*H
 * for dx, K = B*T up to 2e5 for the weight gradients), the GPU's chunked
 * scan vs the CPU's, and the GPU's exp (__expf, 2 ulp) in the gates. cuBLAS
 * runs in its default math mode (no TF32: the library asks for fp32
 * compute), so each sum is off by ~sqrt(K) ulps of its terms: ~1e-6 of the
 * RMS, <= 1e-5 with cancellation; 1e-4 leaves room and still catches a
 * wrong term by orders of magnitude.
 */
static const tolerance TOL_F32 = {1e-5, 1e-4, "fp32: summation order of GEMMs and scan, no TF32"};

/*
 * fp32 at T = 65537: the weight and bias gradients sum K = B*T up to 2e5
 * terms, ~sqrt(K) = 443 ulps (2.6e-5) of the terms before any cancellation
 * against each other; measured on an H200 (minGRU in log space, B = 3):
 * norm 1.3e-5, max 1.4e-5, in 1 run of 6 (same seed, same bits with the
 * library of the previous release). Norm bound 5e-5; max stays 1e-4.
 */
static const tolerance TOL_F32_LONG = {5e-5, 1e-4, "fp32 over 2e5-term gradient sums"};

/*
 * bf16: x, params and dy are rounded to bf16 for both sides, so what
 * differs is the GPU's bf16 storage of everything in between: P = xW, the
 * gates a and b (log a, log b), the states c (log c), y, dc, da, db and dP,
 * one rounding of 2^-9 relative each, carried through the recurrence
 * (decays ~0.5..0.9 remember a few to tens of steps: the errors of the
 * steps remembered add up at random) and into the gradients, where
 * da = g c_prev and db = g enter the gate gradients as differences (minGRU:
 * dk ~ db g(n) - da), which lose relative precision where the two are
 * close. Measured in a host simulation of the kernels (dev/cuda/sim):
 * norm <= 9e-3; max 1e-2..5e-2 over 1e3..1e5 entries, up to 1.1e-1 over
 * the 5e5 entries of a 65537-step row. Bounds: norm 2e-2, max 2.5e-1 (a
 * wrong or missing term gives O(1) in max, and moves norm far beyond 2e-2).
 */
static const tolerance TOL_BF16 = {2e-2, 2.5e-1, "bf16: storage of P, a, b, c, y, da, db, dP (2^-9 each)"};

/*
 * bf16 in log space: log c is what bf16 holds there, with an absolute error
 * of 2^-9 |log c|, so w = exp(la + l_prev - l) (the log scan's local
 * derivative, itself stored in bf16) carries ~2^-9 (|la| + 2 |l|) relative
 * error, ~1% for |l| ~ 2, and the gate gradients are differences of terms
 * of that size (minGRU: dk = g (1 - z - w), small where w ~ 1 - z). The
 * forward keeps bf16's usual accuracy; the backward's tail is heavier
 * (simulator: norm <= 6e-3 as in linear space, max up to 1.3e-1 where
 * linear space stays below 5e-2). Bounds for the backward: norm 2e-2, max
 * 5e-1.
 */
static const tolerance TOL_BF16_LOG = {2e-2, 5e-1, "bf16 log space: log c stored in bf16 (abs. error 2^-9 |log c|)"};

/*
 * bf16 at T = 65537 with 8 or 9 channels: the same per-entry errors as
 * above, but ~1e6 entries per tensor instead of 1e4..1e5, so the largest
 * error is an extreme of the cancellation tails (measured on an H200: norm
 * ~3e-3, max up to 0.43 of the RMS, in entries where the gate gradients
 * are differences of nearly equal terms). With D = 5 and H = 3, dx sums only
 * 6 terms per entry and the norm error itself reaches ~2.3e-2. A
 * bidirectional layer's dx is the forward direction's GEMM result, stored in
 * bf16, plus the reverse direction's: where the two nearly cancel, the
 * entry keeps the first one's rounding, 2^-9 of a partial that can be far
 * above the RMS (seen: -2^-9 for a true -1e-6, 1.4 x RMS; and in GILR-LSTM
 * with every option, 2^-8 for a true -1.5e-4: 2.1 x (|want| + RMS), in 1
 * run of 6). fp32 at the same shapes stays within TOL_F32_LONG, so a wrong
 * term would still show there, and the norm bound here still catches one.
 */
static const tolerance TOL_BF16_LONG = {4e-2, 4.0, "bf16 over 1e6 entries: tail extremes (see above)"};
static int g_long_t; /* in the long-T section */

static tolerance tol_of(prnn_dtype dt)
{
    if (dt == PRNN_DTYPE_F32) return g_long_t ? TOL_F32_LONG : TOL_F32;
    return g_long_t ? TOL_BF16_LONG : TOL_BF16;
}

static double rms(const float *x, int64_t n)
{
    double s = 0;
    for (int64_t i = 0; i < n; i++) s += (double)x[i] * x[i];
    return n ? sqrt(s / (double)n) : 0.0;
}

/* Compares one tensor; appends " name norm/max" to line; returns ok. An
 * all-zero reference asks for exact zeros. */
static int cmp(char *line, size_t cap, const char *name, const float *got, const float *want,
               int64_t n, tolerance t)
{
    if (n == 0) return 1;
    const double r = rms(want, n), floor_ = r > 0 ? r : 1e-30;
    tu_err e = tu_compare_f32(got, want, n, floor_, t.max, name);
    double s = 0;
    for (int64_t i = 0; i < n; i++) s += ((double)got[i] - want[i]) * ((double)got[i] - want[i]);
    const double norm = sqrt(s / (double)n) / floor_;
    const int ok = e.bad == 0 && norm <= t.norm;
    if (!(norm <= t.norm)) printf("        %s: norm error %.2e over %.0e\n", name, norm, t.norm);
    const size_t len = strlen(line);
    snprintf(line + len, cap - len, " %s %.1e/%.1e", name, norm, e.max_err);
    return ok;
}

/* ------------------------------------------------------------------------ */
/* Time budgets and the watchdog                                            */

static int g_no_limit;
static double g_section_start, g_section_budget;
static const char *g_section_name = "";
static int g_section_over; /* the budget ran out: remaining cases skipped */
static int64_t g_section_skipped;

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void on_alarm(int sig)
{
    (void)sig;
    static const char msg[] = "\nFAIL watchdog: a section ran past 3x its time budget (a hang?); aborting\n";
    ssize_t w = write(1, msg, sizeof msg - 1);
    (void)w;
    _exit(3);
}

static void section_begin(const char *name, double budget_s)
{
    printf("\n== %s (budget %.0f s) ==\n", name, budget_s);
    fflush(stdout);
    g_section_name = name;
    g_section_start = now_s();
    g_section_budget = budget_s;
    g_section_over = 0;
    g_section_skipped = 0;
    if (!g_no_limit) alarm((unsigned)(3 * budget_s + 30));
}

/* 1 when the next case may run. */
static int section_time_left(void)
{
    if (g_no_limit) return 1;
    if (!g_section_over && now_s() - g_section_start > g_section_budget) g_section_over = 1;
    if (g_section_over) g_section_skipped++;
    return !g_section_over;
}

static void section_end(void)
{
    if (!g_no_limit) alarm(0);
    const double t = now_s() - g_section_start;
    if (g_section_over)
        tu_check(0, "%s: over its %.0f s budget after %.1f s; %lld cases not run", g_section_name,
                 g_section_budget, t, (long long)g_section_skipped);
    else
        printf("   (%s: %.1f s)\n", g_section_name, t);
    fflush(stdout);
}

/* ------------------------------------------------------------------------ */
/* Variants, options, shapes                                                */

typedef struct {
    const char *name;
    prnn_cell_type type;
    prnn_qrnn_pooling pooling;
    int window;    /* QRNN: 1 or 2 */
    int log_space; /* MINGRU, MINLSTM */
    int proj;      /* SRU: 1 = D != H (projection group p), 0 = D == H */
} variant;

static const variant VARIANTS[] = {
    {"mingru", PRNN_CELL_MINGRU, PRNN_QRNN_FO, 1, 0, 0},
    {"mingru-log", PRNN_CELL_MINGRU, PRNN_QRNN_FO, 1, 1, 0},
    {"minlstm", PRNN_CELL_MINLSTM, PRNN_QRNN_FO, 1, 0, 0},
    {"minlstm-log", PRNN_CELL_MINLSTM, PRNN_QRNN_FO, 1, 1, 0},
    {"qrnn-f-w1", PRNN_CELL_QRNN, PRNN_QRNN_F, 1, 0, 0},
    {"qrnn-fo-w1", PRNN_CELL_QRNN, PRNN_QRNN_FO, 1, 0, 0},
    {"qrnn-ifo-w1", PRNN_CELL_QRNN, PRNN_QRNN_IFO, 1, 0, 0},
    {"qrnn-f-w2", PRNN_CELL_QRNN, PRNN_QRNN_F, 2, 0, 0},
    {"qrnn-fo-w2", PRNN_CELL_QRNN, PRNN_QRNN_FO, 2, 0, 0},
    {"qrnn-ifo-w2", PRNN_CELL_QRNN, PRNN_QRNN_IFO, 2, 0, 0},
    {"sru-highway", PRNN_CELL_SRU, PRNN_QRNN_FO, 1, 0, 0},
    {"sru-proj", PRNN_CELL_SRU, PRNN_QRNN_FO, 1, 0, 1},
    {"gilr-lstm", PRNN_CELL_GILR_LSTM, PRNN_QRNN_FO, 1, 0, 0},
};
#define N_VARIANTS ((int)(sizeof VARIANTS / sizeof VARIANTS[0]))

enum {
    O_BIAS = 1,   /* desc.bias */
    O_H0 = 2,     /* h0 given */
    O_HT = 4,     /* hT requested, dhT given */
    O_DH0 = 8,    /* dh0 requested */
    O_BIDIR = 16, /* bidirectional */
    O_LEN = 32,   /* lengths, with 0, 1 and T */
    O_RECOMP = 64 /* recompute = k */
};

typedef struct {
    const char *name;
    unsigned o;
} optset;

static const optset OPTSETS[] = {
    {"plain", O_BIAS},
    {"nobias", O_H0 | O_HT},
    {"states", O_BIAS | O_H0 | O_HT | O_DH0},
    {"bidir", O_BIAS | O_BIDIR | O_H0 | O_HT | O_DH0},
    {"len", O_BIAS | O_LEN | O_HT | O_DH0},
    {"recompute", O_BIAS | O_RECOMP | O_H0 | O_HT | O_DH0},
    {"all", O_BIAS | O_BIDIR | O_LEN | O_H0 | O_HT | O_DH0 | O_RECOMP},
};
#define N_OPTSETS ((int)(sizeof OPTSETS / sizeof OPTSETS[0]))
#define OPT_ALL (N_OPTSETS - 1)

typedef struct {
    int64_t B, T, D, H;
} shape;

static prnn_ctx *g_cpu, *g_gpu;
static int64_t g_case; /* counts cases: varies lengths and recompute k */

/* D of a variant: SRU's highway needs D == H, its projection D != H. */
static int64_t variant_D(const variant *v, int64_t D, int64_t H)
{
    if (v->type != PRNN_CELL_SRU) return D;
    if (!v->proj) return H;
    return D == H ? D + 1 : D;
}

static prnn_cell_desc variant_desc(const variant *v, int64_t D, int64_t H, unsigned o)
{
    prnn_cell_desc d = prnn_cell_desc_make(v->type, variant_D(v, D, H), H);
    d.bidirectional = (o & O_BIDIR) ? 1 : 0;
    d.bias = (o & O_BIAS) ? 1 : 0;
    d.log_space = v->log_space;
    d.pooling = v->pooling;
    d.window = v->window;
    return d;
}

/*
 * Random parameters with pre-activations of O(1): W and U uniform in
 * +-2/sqrt(fan_in), biases in (-1, 1), so gates from near 0 to near 1 and
 * decays that remember up to tens of steps all occur. The layout (per
 * direction W (Din, G*H), U (H, 4H) for GILR, bias (G*H)) is the header's;
 * returns 0 when the library counts another number of parameters.
 */
static int fill_params(const prnn_cell_desc *d, float *w, int64_t P)
{
    const int64_t G = prnn_cell_gates(d), H = d->H;
    const int64_t Din = d->type == PRNN_CELL_QRNN && d->window == 2 ? 2 * d->D : d->D;
    const int gilr = d->type == PRNN_CELL_GILR_LSTM;
    const int64_t blk = Din * G * H + (gilr ? 4 * H * H : 0) + (d->bias ? G * H : 0);
    const int64_t dirs = d->bidirectional ? 2 : 1;
    if (blk * dirs != P) return 0;
    for (int64_t k = 0; k < dirs; k++) {
        float *p = w + k * blk;
        const double sw = 2.0 / sqrt((double)Din), su = 2.0 / sqrt((double)H);
        tu_fill_f32(p, Din * G * H, -sw, sw);
        p += Din * G * H;
        if (gilr) {
            tu_fill_f32(p, 4 * H * H, -su, su);
            p += 4 * H * H;
        }
        if (d->bias) tu_fill_f32(p, G * H, -1.0, 1.0);
    }
    return 1;
}

/*
 * g(n), minGRU's and minLSTM's positive activation, has a kink at n = 0:
 * slope 1/4 below and 1 above (log g: 1/2 and 2). Where the GPU's n and
 * the CPU's lie on different sides of 0, that entry's gradient differs by
 * 4x: not an error, but no tolerance covers it. bf16 stores P = xW, so an
 * n within bf16 rounding (2^-9 |P|) of 0 can flip; fp32 sums P in another
 * order (cuBLAS against the CPU's GEMM), ~1e-7 apart, which at T = 65537
 * (1e6 values of n a case) flips one now and then (seen: one step's dx
 * and the dparams 8x over the fp32 bound, from one n of ~1e-7). So for
 * runs of these cells x is quantised to multiples of 1/2 and the weights
 * and biases to multiples of 1/64: every product and partial sum of P = xW
 * is a multiple of 1/128 below 2^7 in magnitude (at most 14 significant
 * bits), exact in fp32 in any order and in cuBLAS's tensor-core
 * accumulation, and P itself is exact in bf16 wherever n is near 0 (there
 * |P| < 2: at most 8 significant bits). Both sides then see the same n
 * and take the same branch.
 */
static float quantise(float v, float step) { return step * nearbyintf(v / step); }

static void exact_n(const prnn_cell_desc *d, float *w, int64_t P, float *x, int64_t nx)
{
    if (d->type != PRNN_CELL_MINGRU && d->type != PRNN_CELL_MINLSTM) return;
    for (int64_t i = 0; i < nx; i++) x[i] = quantise(x[i], 0.5f);
    for (int64_t i = 0; i < P; i++) w[i] = quantise(w[i], 1.0f / 64);
}

/* States: c must be positive in log space; x_prev and GILR's s any sign. */
static void fill_states(const prnn_cell_desc *d, float *h, int64_t B, int64_t S2)
{
    tu_fill_f32(h, B * S2, -1.0, 1.0);
    if (d->log_space)
        for (int64_t i = 0; i < B * S2; i++) h[i] = (float)tu_uniform(0.1, 1.0);
}

/* Rows 0, 1, 2 of B = 3 get T, 0 and 1; smaller batches cycle through T,
 * 0, 1 and a random length. */
static void fill_lengths(int64_t *len, int64_t B, int64_t T)
{
    for (int64_t b = 0; b < B; b++) {
        const int64_t pick = B >= 3 ? b : (g_case + b) % 4;
        len[b] = pick == 0 ? T : pick == 1 ? 0 : pick == 2 ? 1 : (int64_t)(tu_next() % (uint64_t)(T + 1));
    }
}

/* ------------------------------------------------------------------------ */
/* One layer case: CPU F32 vs CUDA dt, forward and backward                  */

static void run_case(const variant *v, prnn_dtype dt, shape sh, const optset *os)
{
    if (!section_time_left()) return;
    g_case++;
    const unsigned o = os->o;
    const int64_t B = sh.B, T = sh.T, H = sh.H;
    prnn_cell_desc cd = variant_desc(v, sh.D, H, o);
    const int64_t D = cd.D;
    prnn_cell_desc gd = cd;
    gd.dtype = dt;
    /* k of 3 or 16: chunks shorter than, equal to and longer than T */
    if (o & O_RECOMP) gd.recompute = g_case % 2 ? 3 : 16;

    char what[200];
    snprintf(what, sizeof what, "%-4s %-11s B=%lld T=%lld D=%lld H=%lld [%s%s]", dtype_name(dt), v->name,
             (long long)B, (long long)T, (long long)D, (long long)H, os->name,
             gd.recompute ? (gd.recompute == 3 ? " k=3" : " k=16") : "");

    int64_t P = 0, S2 = 0;
    size_t act_cpu = 0, act_gpu = 0;
    prnn_status s = prnn_cell_check(&gd);
    if (s == PRNN_OK) s = prnn_cell_param_count(&cd, &P);
    if (s == PRNN_OK) s = prnn_cell_state_size(&cd, &S2);
    if (s == PRNN_OK) s = prnn_cell_act_bytes(&cd, B, T, &act_cpu);
    if (s == PRNN_OK) s = prnn_cell_act_bytes(&gd, B, T, &act_gpu);
    if (s != PRNN_OK) {
        tu_check(0, "%s: setup: %s", what, prnn_strerror(s));
        return;
    }
    const int64_t Hout = prnn_cell_out_size(&cd);
    const int64_t nx = B * T * D, ny = B * T * Hout, ns = B * S2;

    float *x = tu_malloc((size_t)nx * 4), *w = tu_malloc((size_t)P * 4);
    float *h0 = tu_malloc((size_t)ns * 4), *dhT = tu_malloc((size_t)ns * 4);
    float *dy = tu_malloc((size_t)ny * 4), *dp0 = tu_malloc((size_t)P * 4);
    int64_t *len = tu_malloc((size_t)B * sizeof(int64_t));
    if (!fill_params(&cd, w, P)) {
        tu_check(0, "%s: the library counts %lld parameters, not the header's layout", what, (long long)P);
        free(x), free(w), free(h0), free(dhT), free(dy), free(dp0), free(len);
        return;
    }
    tu_fill_f32(x, nx, -1.0, 1.0);
    fill_states(&cd, h0, B, S2);
    tu_fill_f32(dhT, ns, -1.0, 1.0);
    tu_fill_f32(dy, ny, -1.0, 1.0);
    tu_fill_f32(dp0, P, -1.0, 1.0); /* the backward adds to it */
    fill_lengths(len, B, T);
    if ((o & O_LEN) && B < 3) { /* the lengths vary with the case: name them */
        size_t at = strlen(what);
        for (int64_t b = 0; b < B && at + 24 < sizeof what; b++, at = strlen(what))
            snprintf(what + at, sizeof what - at, "%sL=%lld", b ? "," : " ", (long long)len[b]);
    }
    exact_n(&cd, w, P, x, nx);
    /* Both sides see the values the GPU stores. */
    round_to(x, nx, dt);
    round_to(w, P, dt);
    round_to(dy, ny, dt);
    const int64_t *lengths = (o & O_LEN) ? len : NULL;
    const int use_h0 = (o & O_H0) != 0, use_hT = (o & O_HT) != 0, use_dh0 = (o & O_DH0) != 0;

    /* CPU oracle, F32, recompute off */
    float *ry = tu_malloc((size_t)ny * 4), *rhT = tu_malloc((size_t)ns * 4);
    float *rdx = tu_malloc((size_t)nx * 4), *rdp = tu_malloc((size_t)P * 4);
    float *rdh0 = tu_malloc((size_t)ns * 4);
    void *ract = tu_malloc(act_cpu ? act_cpu : 1);
    memcpy(rdp, dp0, (size_t)P * 4);
    s = prnn_cell_forward(g_cpu, &cd, B, T, lengths, ry, use_hT ? rhT : NULL, ract, x, w,
                          use_h0 ? h0 : NULL);
    if (s == PRNN_OK)
        s = prnn_cell_backward(g_cpu, &cd, B, T, lengths, rdx, rdp, use_dh0 ? rdh0 : NULL, dy,
                               use_hT ? dhT : NULL, x, w, use_h0 ? h0 : NULL, ract);
    if (s != PRNN_OK) {
        tu_check(0, "%s: CPU oracle: %s", what, prnn_strerror(s));
    } else {
        /* GPU */
        void *d_x = upload(x, nx, dt), *d_w = upload(w, P, dt), *d_dy = upload(dy, ny, dt);
        void *d_h0 = upload(use_h0 ? h0 : NULL, ns, PRNN_DTYPE_F32);
        void *d_dhT = upload(use_hT ? dhT : NULL, ns, PRNN_DTYPE_F32);
        void *d_dp = upload(dp0, P, PRNN_DTYPE_F32);
        void *d_y = poisoned(ny, dt), *d_dx = poisoned(nx, dt);
        void *d_hT = use_hT ? poisoned(ns, PRNN_DTYPE_F32) : NULL;
        void *d_dh0 = use_dh0 ? poisoned(ns, PRNN_DTYPE_F32) : NULL;
        void *d_act;
        CUDA_CHECK(cudaMalloc(&d_act, act_gpu ? act_gpu : 1));
        CUDA_CHECK(cudaMemset(d_act, 0, act_gpu ? act_gpu : 1));
        CUDA_CHECK(cudaDeviceSynchronize()); /* see poisoned() */

        const prnn_status sf = prnn_cell_forward(g_gpu, &gd, B, T, lengths, d_y, d_hT, d_act, d_x,
                                                 d_w, d_h0);
        const prnn_status sb = sf != PRNN_OK ? sf
                               : prnn_cell_backward(g_gpu, &gd, B, T, lengths, d_dx, d_dp, d_dh0,
                                                    d_dy, d_dhT, d_x, d_w, d_h0, d_act);
        const prnn_status ss = prnn_ctx_synchronize(g_gpu);
        if (sf != PRNN_OK || sb != PRNN_OK || ss != PRNN_OK) {
            tu_check(0, "%s: CUDA: forward %s, backward %s, sync %s", what, prnn_strerror(sf),
                     prnn_strerror(sb), prnn_strerror(ss));
        } else {
            const tolerance t = tol_of(dt);
            int64_t most = nx > ny ? nx : ny;
            if (P > most) most = P;
            if (ns > most) most = ns;
            float *got = tu_malloc((size_t)most * 4);
            char line[512] = "";
            int ok = 1;
            download(got, d_y, ny, dt);
            ok &= cmp(line, sizeof line, "y", got, ry, ny, t);
            if (use_hT) {
                download(got, d_hT, ns, PRNN_DTYPE_F32);
                ok &= cmp(line, sizeof line, "hT", got, rhT, ns, t);
            }
            tu_check(ok, "%s fwd:%s (norm/max; tol %g/%g: %s)", what, line, t.norm, t.max, t.why);

            /* the forward for inference (no act: y may be written by the
             * scan itself) against the same reference */
            void *d_y2 = poisoned(ny, dt);
            const prnn_status si =
                prnn_cell_forward(g_gpu, &gd, B, T, lengths, d_y2, NULL, NULL, d_x, d_w, d_h0);
            const prnn_status si2 = prnn_ctx_synchronize(g_gpu);
            line[0] = '\0';
            if (si != PRNN_OK || si2 != PRNN_OK) {
                tu_check(0, "%s fwd without act: %s, sync %s", what, prnn_strerror(si),
                         prnn_strerror(si2));
            } else {
                download(got, d_y2, ny, dt);
                ok = cmp(line, sizeof line, "y", got, ry, ny, t);
                tu_check(ok, "%s fwd without act:%s (tol %g/%g)", what, line, t.norm, t.max);
            }
            dfree(d_y2);

            line[0] = '\0';
            ok = 1;
            /* the backward in log space: the looser of the two bounds */
            tolerance tb = t;
            if (dt == PRNN_DTYPE_BF16 && cd.log_space) {
                tb.norm = fmax(t.norm, TOL_BF16_LOG.norm);
                tb.max = fmax(t.max, TOL_BF16_LOG.max);
            }
            download(got, d_dx, nx, dt);
            ok &= cmp(line, sizeof line, "dx", got, rdx, nx, tb);
            download(got, d_dp, P, PRNN_DTYPE_F32);
            ok &= cmp(line, sizeof line, "dparams", got, rdp, P, tb);
            if (use_dh0) {
                download(got, d_dh0, ns, PRNN_DTYPE_F32);
                ok &= cmp(line, sizeof line, "dh0", got, rdh0, ns, tb);
            }
            tu_check(ok, "%s bwd:%s (tol %g/%g%s)", what, line, tb.norm, tb.max,
                     tb.norm != t.norm || tb.max != t.max ? ": bf16 log space" : "");
            free(got);
        }
        dfree(d_x), dfree(d_w), dfree(d_dy), dfree(d_h0), dfree(d_dhT), dfree(d_dp);
        dfree(d_y), dfree(d_dx), dfree(d_hT), dfree(d_dh0), dfree(d_act);
    }
    fflush(stdout);
    free(x), free(w), free(h0), free(dhT), free(dy), free(dp0), free(len);
    free(ry), free(rhT), free(rdx), free(rdp), free(rdh0), free(ract);
}

/* ------------------------------------------------------------------------ */
/* prnn_cell_step: CPU F32 vs CUDA, several steps chained                   */

static void run_step(const variant *v, prnn_dtype dt, int64_t B, int64_t D, int64_t H)
{
    if (!section_time_left()) return;
    g_case++;
    const int64_t nsteps = 5;
    prnn_cell_desc cd = variant_desc(v, D, H, O_BIAS);
    D = cd.D;
    prnn_cell_desc gd = cd;
    gd.dtype = dt;
    char what[160];
    snprintf(what, sizeof what, "%-4s %-11s step x%lld B=%lld D=%lld H=%lld", dtype_name(dt), v->name,
             (long long)nsteps, (long long)B, (long long)D, (long long)H);
    int64_t P = 0, S = 0;
    prnn_status s = prnn_cell_param_count(&cd, &P);
    if (s == PRNN_OK) s = prnn_cell_state_size(&cd, &S);
    if (s != PRNN_OK) {
        tu_check(0, "%s: setup: %s", what, prnn_strerror(s));
        return;
    }
    float *w = tu_malloc((size_t)P * 4), *st = tu_malloc((size_t)(B * S) * 4);
    float *x = tu_malloc((size_t)(nsteps * B * D) * 4);
    float *ry = tu_malloc((size_t)(nsteps * B * H) * 4), *gy = tu_malloc((size_t)(nsteps * B * H) * 4);
    float *gst = tu_malloc((size_t)(B * S) * 4);
    if (!fill_params(&cd, w, P)) {
        tu_check(0, "%s: the library counts %lld parameters, not the header's layout", what, (long long)P);
        free(w), free(st), free(x), free(ry), free(gy), free(gst);
        return;
    }
    fill_states(&cd, st, B, S);
    tu_fill_f32(x, nsteps * B * D, -1.0, 1.0);
    round_to(w, P, dt);
    round_to(x, nsteps * B * D, dt);

    void *d_w = upload(w, P, dt), *d_st = upload(st, B * S, PRNN_DTYPE_F32);
    void *d_x = upload(x, nsteps * B * D, dt), *d_y = poisoned(nsteps * B * H, dt);
    prnn_status sc = PRNN_OK, sg = PRNN_OK;
    for (int64_t k = 0; k < nsteps; k++) {
        if (sc == PRNN_OK) sc = prnn_cell_step(g_cpu, &cd, B, ry + k * B * H, st, x + k * B * D, w);
        if (sg == PRNN_OK)
            sg = prnn_cell_step(g_gpu, &gd, B, (char *)d_y + (size_t)(k * B * H) * prnn_dtype_size(dt),
                                d_st, (const char *)d_x + (size_t)(k * B * D) * prnn_dtype_size(dt), d_w);
    }
    const prnn_status ss = prnn_ctx_synchronize(g_gpu);
    if (sc != PRNN_OK || sg != PRNN_OK || ss != PRNN_OK) {
        tu_check(0, "%s: CPU %s, CUDA %s, sync %s", what, prnn_strerror(sc), prnn_strerror(sg),
                 prnn_strerror(ss));
    } else {
        const tolerance t = tol_of(dt);
        char line[256] = "";
        int ok = 1;
        download(gy, d_y, nsteps * B * H, dt);
        download(gst, d_st, B * S, PRNN_DTYPE_F32);
        ok &= cmp(line, sizeof line, "y", gy, ry, nsteps * B * H, t);
        ok &= cmp(line, sizeof line, "state", gst, st, B * S, t);
        tu_check(ok, "%s:%s (norm/max; tol %g/%g: %s)", what, line, t.norm, t.max, t.why);
    }
    dfree(d_w), dfree(d_st), dfree(d_x), dfree(d_y);
    free(w), free(st), free(x), free(ry), free(gy), free(gst);
}

/* ------------------------------------------------------------------------ */
/* Errors                                                                   */

static void check_errors(void)
{
    prnn_cell_desc d = prnn_cell_desc_make(PRNN_CELL_MINGRU, 4, 4);
    d.dtype = PRNN_DTYPE_F64;
    size_t act = 0;
    int64_t P = 0;
    TU_REQUIRE(prnn_cell_param_count(&d, &P));
    prnn_cell_act_bytes(&d, 2, 3, &act);
    void *buf;
    const size_t n = (size_t)(2 * 3 * 4 + P) * 8 + act + 256;
    CUDA_CHECK(cudaMalloc(&buf, 3 * n));
    char *p = buf;
    const prnn_status s = prnn_cell_forward(g_gpu, &d, 2, 3, NULL, p, NULL, p + n, p + 2 * n,
                                            p + 2 * n + 2 * 3 * 4 * 8, NULL);
    tu_check(s == PRNN_ERR_UNSUPPORTED, "F64 layer on CUDA -> PRNN_ERR_UNSUPPORTED (got %s)",
             prnn_strerror(s));
    CUDA_CHECK(cudaFree(buf));
}

/* ------------------------------------------------------------------------ */

int main(int argc, char **argv)
{
    int quick = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--quick")) quick = 1;
        else if (!strcmp(argv[i], "--no-time-limit")) g_no_limit = 1;
        else {
            fprintf(stderr, "usage: %s [--quick] [--no-time-limit]\n", argv[0]);
            return 2;
        }
    }
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (!prnn_cuda_available()) {
        printf("no CUDA device: GPU cell tests skipped\n");
        printf("0 passed, 0 failed\n");
        return 0;
    }
    const uint64_t seed = tu_seed_from_env();
    printf("seed %llu (PRNN_TEST_SEED=%llu repeats this run)%s\n", (unsigned long long)seed,
           (unsigned long long)seed, quick ? ", quick" : "");
    tu_seed(seed);
    signal(SIGALRM, on_alarm);

    TU_REQUIRE(prnn_ctx_init(&g_cpu, NULL));
    prnn_ctx_config cfg = prnn_ctx_config_default();
    cfg.device = PRNN_DEVICE_CUDA;
    cfg.cuda_device = 0;
    TU_REQUIRE(prnn_ctx_init(&g_gpu, &cfg));

    /* T = 1, 31, 33, 1000; B = 1, 3; H = 33 (odd: the scalar paths) and
     * 64 (16-byte vectors); D != H (SRU's highway variant sets D = H). */
    const shape full[] = {{1, 1, 24, 33}, {3, 31, 40, 33}, {3, 33, 24, 64}, {1, 1000, 40, 64},
                          {3, 1000, 24, 33}};
    const prnn_dtype dts[] = {PRNN_DTYPE_F32, PRNN_DTYPE_BF16};

    if (quick) {
        /* For compute-sanitizer (scripts/gpu_check.sh gives it 240 s per
         * tool): every variant once with every option, on the scalar path
         * (H = 33) in one dtype and the vector path (H = 64) in the other,
         * and one step each. Budgets leave room for the tools' slowdown. */
        const shape qs[] = {{3, 31, 40, 33}, {2, 33, 24, 64}};
        section_begin("layers, quick: CPU f32 vs CUDA f32 / bf16", 150.0);
        for (int vi = 0; vi < N_VARIANTS; vi++)
            for (int si = 0; si < 2; si++)
                run_case(&VARIANTS[vi], dts[(vi + si) % 2], qs[si], &OPTSETS[OPT_ALL]);
        section_end();
        section_begin("prnn_cell_step, quick: CPU f32 vs CUDA", 40.0);
        for (int vi = 0; vi < N_VARIANTS; vi++) run_step(&VARIANTS[vi], dts[vi % 2], 2, 24, 32);
        section_end();
        section_begin("errors", 10.0);
        check_errors();
        section_end();
        prnn_ctx_free(g_gpu);
        prnn_ctx_free(g_cpu);
        return tu_finish();
    }

    for (int di = 0; di < 2; di++) {
        char name[64];
        snprintf(name, sizeof name, "layers, %s: CPU f32 vs CUDA %s", dtype_name(dts[di]), dtype_name(dts[di]));
        section_begin(name, 40.0);
        for (int si = 0; si < (int)(sizeof full / sizeof full[0]); si++)
            for (int vi = 0; vi < N_VARIANTS; vi++)
                for (int oi = 0; oi < N_OPTSETS; oi++) run_case(&VARIANTS[vi], dts[di], full[si], &OPTSETS[oi]);
        section_end();
    }

    /* T = 65537 with B*H = 8 or 9: the scans split time over many blocks;
     * one row of 8 (vector path) and 3 rows of 3 (scalar path). */
    section_begin("long T: 65537 steps, small B*H", 40.0);
    g_long_t = 1;
    const shape longT[] = {{1, 65537, 16, 8}, {3, 65537, 5, 3}};
    for (int si = 0; si < 2; si++)
        for (int vi = 0; vi < N_VARIANTS; vi++)
            for (int di = 0; di < 2; di++) {
                run_case(&VARIANTS[vi], dts[di], longT[si], &OPTSETS[0]);
                if (si == 0) run_case(&VARIANTS[vi], dts[di], longT[si], &OPTSETS[OPT_ALL]);
            }
    g_long_t = 0;
    section_end();

    section_begin("prnn_cell_step: CPU f32 vs CUDA", 20.0);
    for (int vi = 0; vi < N_VARIANTS; vi++)
        for (int di = 0; di < 2; di++) {
            run_step(&VARIANTS[vi], dts[di], 1, 24, 33);
            run_step(&VARIANTS[vi], dts[di], 3, 40, 64);
        }
    section_end();

    section_begin("errors", 10.0);
    check_errors();
    section_end();

    prnn_ctx_free(g_gpu);
    prnn_ctx_free(g_cpu);
    return tu_finish();
}
