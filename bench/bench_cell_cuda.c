/*
 * bench_cell_cuda.c - speed of one training step (forward + backward,
 * GEMMs included) of each cell layer on the GPU, and where it goes.
 *
 * For every cell (minGRU, minLSTM, QRNN fo-pooling window 1 and 2, SRU with
 * D == H, GILR-LSTM), dtype (fp32, bf16) and T in {1K, 4K, 16K} at B = 16,
 * D = H = 1024 (unidirectional, bias, linear space, no lengths, no states,
 * no recompute), one run measures, each as the median of repetitions timed
 * with events after a warm-up:
 *
 *   step     prnn_cell_forward + prnn_cell_backward through the public API
 *   GEMMs    the GEMMs the layer issues (src/cell.c: same shapes,
 *            transposes, strides, dtypes and beta), alone, through the
 *            library's prnn_gemm (cuBLAS, fp32 compute, no TF32)
 *   ref      each of those shapes as a plain row-major NN cuBLAS GEMM
 *            (cublasGemmEx, contiguous operands), alone: what cuBLAS does
 *            for that M, N, K when the layout costs nothing
 *   passes   the layer's non-GEMM passes alone, in the layer's order
 *            (src/cell.c), through the CUDA backend's entry points and the
 *            scan: the same kernels the step runs, without the GEMMs
 *
 * and prints: rest = step - GEMMs (the non-GEMM time inside the step), its
 * bytes by the byte model below against the copy roofline (a 1 GiB
 * cudaMemcpyAsync device-to-device, read + write, measured in the same
 * run), the GEMMs' TFLOP/s and their speed as a fraction of the plain-NN
 * reference, and tokens/s. A markdown table comes last.
 *
 * Byte model (per step, N = B*T*H elements of the storage dtype; D = H so
 * x-sized tensors count as N too): each pass reads and writes each tensor
 * once, the minimum for that pass as cell.c orders them:
 *   gates_fwd   reads the gate groups it uses of P, writes a, b
 *   scan fwd    reads a, b, writes c          scan bwd  reads a, c, dc,
 *                                                       writes da, db
 *   out_fwd     reads c (+ o, or r and x), writes y
 *   out_bwd     reads dy (+ c, o / r, x, dx), writes dc (+ dP of o / r, dx);
 *               none where y = c (minGRU, minLSTM): the scan reads dy
 *   gates_a     reads the groups a depends on, writes a
 *   gates_bwd   reads da, db and the gate groups of P, writes their dP (and
 *               adds their column sums to the bias gradients)
 *   colsum      reads the dP groups out_bwd wrote   shift: reads n, writes n
 *   unshift_add reads src and dst, writes dst
 * The backward recomputes a alone by gates_a (the forward keeps P and c,
 * not a and b; the scan's backward needs a, not b). Parameter-sized traffic
 * (bias, the (G*H) sums, the column sums' partial rows: a few (G*H) rows per
 * SM) is ignored.
 * The per-cell pass lists print with the first configuration of each cell.
 *
 * Size letters: B batch rows, T steps, D input features, H hidden units, G
 * gate groups, N = B*T*H.
 *
 * Usage: prnn_bench_cell [--quick] [--dtype f32|bf16|all] [--cell NAME|all]
 *                        [--shape BxTxH]
 *   NAME: mingru, minlstm, qrnn-fo-w1, qrnn-fo-w2, sru, gilr-lstm.
 *   --quick: T = 1K only, fewer repetitions. --shape: that one shape
 *   (D = H) instead of the three.
 * Each configuration has a time budget (skipped when one step is too slow)
 * and a watchdog ends the program if a call hangs.
 */
#define _POSIX_C_SOURCE 200809L /* clock_gettime, alarm */

#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <math.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "prnn.h"
#include "prnn_cell.h"

#include "cell_internal.h" /* prnn_cuda_cell_*, prnn_gemm: the step's parts timed alone */
#include "check.h"
#include "bench_cuda.h"

#define CUBLAS_CHECK(call)                                                                         \
    do {                                                                                           \
        cublasStatus_t s_ = (call);                                                                \
        if (s_ != CUBLAS_STATUS_SUCCESS) {                                                         \
            fprintf(stderr, "%s:%d: %s: cuBLAS status %d\n", __FILE__, __LINE__, #call, (int)s_);  \
            exit(2);                                                                               \
        }                                                                                          \
    } while (0)

#define MAX_REPS 16
#define STEP_LIMIT_S 10.0   /* skip a configuration whose warm-up step is slower */
#define TIME_PER_PART_S 1.5 /* repetitions: about this long per measured part */
#define WATCHDOG_S 300      /* one configuration, all parts */

/* ------------------------------------------------------------------------ */
/* Small helpers                                                            */

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void on_alarm(int sig)
{
    (void)sig;
    static const char msg[] = "\nwatchdog: one configuration ran past its time limit (a hang?); aborting\n";
    ssize_t w = write(1, msg, sizeof msg - 1);
    (void)w;
    _exit(3);
}

static const char *dtype_name(prnn_dtype dt) { return dt == PRNN_DTYPE_F32 ? "f32" : "bf16"; }

static uint16_t f32_to_bf16(float f)
{
    uint32_t x;
    memcpy(&x, &f, 4);
    x += 0x7fffu + ((x >> 16) & 1u);
    return (uint16_t)(x >> 16);
}

/* A random block on the device (fp32 and bf16 copies), tiled over buffers:
 * timing never runs on zeros, and filling GBs costs device copies only. */
#define BLOCK_ELEMS ((int64_t)1 << 22)
static void *g_block[2];

static void make_block(void)
{
    uint64_t st = 0x243F6A8885A308D3ull;
    float *f = malloc((size_t)BLOCK_ELEMS * 4);
    uint16_t *h = malloc((size_t)BLOCK_ELEMS * 2);
    if (!f || !h) exit(2);
    for (int64_t i = 0; i < BLOCK_ELEMS; i++) {
        uint64_t z = (st += 0x9E3779B97F4A7C15ull);
        z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
        z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
        z ^= z >> 31;
        f[i] = (float)(2.0 * ((double)(z >> 11) * (1.0 / 9007199254740992.0)) - 1.0);
        h[i] = f32_to_bf16(f[i]);
    }
    CUDA_CHECK(cudaMalloc(&g_block[0], (size_t)BLOCK_ELEMS * 4));
    CUDA_CHECK(cudaMalloc(&g_block[1], (size_t)BLOCK_ELEMS * 2));
    CUDA_CHECK(cudaMemcpy(g_block[0], f, (size_t)BLOCK_ELEMS * 4, cudaMemcpyHostToDevice));
    CUDA_CHECK(cudaMemcpy(g_block[1], h, (size_t)BLOCK_ELEMS * 2, cudaMemcpyHostToDevice));
    free(f);
    free(h);
}

static void fill(void *d, int64_t n, prnn_dtype dt, cudaStream_t s)
{
    const size_t es = prnn_dtype_size(dt);
    const void *src = g_block[dt == PRNN_DTYPE_F32 ? 0 : 1];
    for (int64_t i = 0; i < n; i += BLOCK_ELEMS) {
        const int64_t m = n - i < BLOCK_ELEMS ? n - i : BLOCK_ELEMS;
        CUDA_CHECK(cudaMemcpyAsync((char *)d + (size_t)i * es, src, (size_t)m * es,
                                   cudaMemcpyDeviceToDevice, s));
    }
}

/* ------------------------------------------------------------------------ */
/* One configuration's tensors                                              */

typedef struct {
    const char *name;
    prnn_cell_type type;
    prnn_qrnn_pooling pooling;
    int window;
} bcell;

static const bcell CELLS[] = {
    {"mingru", PRNN_CELL_MINGRU, PRNN_QRNN_FO, 1},  {"minlstm", PRNN_CELL_MINLSTM, PRNN_QRNN_FO, 1},
    {"qrnn-fo-w1", PRNN_CELL_QRNN, PRNN_QRNN_FO, 1}, {"qrnn-fo-w2", PRNN_CELL_QRNN, PRNN_QRNN_FO, 2},
    {"sru", PRNN_CELL_SRU, PRNN_QRNN_FO, 1},         {"gilr-lstm", PRNN_CELL_GILR_LSTM, PRNN_QRNN_FO, 1},
};
#define N_CELLS ((int)(sizeof CELLS / sizeof CELLS[0]))

typedef struct {
    const bcell *cl;
    prnn_ctx *ctx;
    cudaStream_t s;
    prnn_cell_desc d;
    prnn_dtype dt;
    int64_t B, T, D, H, G, GH, Din, BT, N, P, nW, nU;
    size_t es, act_bytes;
    int gilr, w2, sru;
    /* the layer's tensors */
    void *x, *params, *y, *act, *dy, *dx;
    float *dparams;
    /* the passes' own tensors (the layer keeps its in act and scratch) */
    void *xs, *dXs, *P_, *dP, *a, *b, *c, *dc, *da, *db, *s_, *ss, *dss, *ds;
} config;

static void *dalloc(int64_t n, size_t es, int64_t *total)
{
    void *p;
    CUDA_CHECK(cudaMalloc(&p, (size_t)(n ? n : 1) * es));
    *total += n * (int64_t)es;
    return p;
}

/* Bytes the configuration allocates (here, and roughly in the library's
 * act and backward scratch: dP and up to 10 (B, T, H) tensors), to skip
 * what does not fit. */
static double config_bytes(const config *c)
{
    const double n = (double)c->N * (double)c->es, nP = (double)c->BT * c->GH * c->es;
    return (double)c->act_bytes + (nP + 10 * n) + 2 * nP + 14 * n;
}

static void config_init(config *c, const bcell *cl, prnn_ctx *ctx, prnn_dtype dt, int64_t B,
                        int64_t T, int64_t H)
{
    memset(c, 0, sizeof *c);
    c->cl = cl;
    c->ctx = ctx;
    c->s = (cudaStream_t)prnn_ctx_cuda_stream(ctx);
    c->dt = dt;
    c->es = prnn_dtype_size(dt);
    c->B = B, c->T = T, c->D = H, c->H = H;
    c->d = prnn_cell_desc_make(cl->type, H, H);
    c->d.pooling = cl->pooling;
    c->d.window = cl->window;
    c->d.dtype = dt;
    c->G = prnn_cell_gates(&c->d);
    c->GH = c->G * H;
    c->gilr = cl->type == PRNN_CELL_GILR_LSTM;
    c->w2 = cl->type == PRNN_CELL_QRNN && cl->window == 2;
    c->sru = cl->type == PRNN_CELL_SRU;
    c->Din = c->w2 ? 2 * c->D : c->D;
    c->BT = B * T;
    c->N = c->BT * H;
    c->nW = c->Din * c->GH;
    c->nU = c->gilr ? 4 * H * H : 0;
    PRNN_CHECK(prnn_cell_param_count(&c->d, &c->P));
    PRNN_CHECK(prnn_cell_act_bytes(&c->d, B, T, &c->act_bytes));
}

static void config_alloc(config *c)
{
    const int64_t N = c->N, Nx = c->BT * c->D, NP = c->BT * c->GH;
    const size_t es = c->es;
    int64_t t = 0;
    c->x = dalloc(Nx, es, &t);
    c->params = dalloc(c->P, es, &t);
    c->y = dalloc(N, es, &t);
    c->dy = dalloc(N, es, &t);
    c->dx = dalloc(Nx, es, &t);
    c->dparams = dalloc(c->P, 4, &t);
    CUDA_CHECK(cudaMalloc(&c->act, c->act_bytes));
    c->P_ = dalloc(NP, es, &t);
    c->dP = dalloc(NP, es, &t);
    c->a = dalloc(N, es, &t);
    c->b = dalloc(N, es, &t);
    c->c = dalloc(N, es, &t);
    c->dc = dalloc(N, es, &t);
    c->da = dalloc(N, es, &t);
    c->db = dalloc(N, es, &t);
    if (c->w2) {
        c->xs = dalloc(Nx, es, &t);
        c->dXs = dalloc(Nx, es, &t);
    }
    if (c->gilr) {
        c->s_ = dalloc(N, es, &t);
        c->ss = dalloc(N, es, &t);
        c->dss = dalloc(N, es, &t);
        c->ds = dalloc(N, es, &t);
    }
    /* Inputs random; parameters as prnn_cell_init_params makes them (bias
     * of forget gates +1), converted to the storage dtype on the device. */
    fill(c->x, Nx, c->dt, c->s);
    fill(c->dy, N, c->dt, c->s);
    fill(c->P_, NP, c->dt, c->s);
    fill(c->dP, NP, c->dt, c->s);
    void *seq[] = {c->a, c->b, c->c, c->dc, c->da, c->db, c->s_, c->ss, c->dss, c->ds, c->y};
    for (size_t i = 0; i < sizeof seq / sizeof seq[0]; i++)
        if (seq[i]) fill(seq[i], N, c->dt, c->s);
    void *xsized[] = {c->xs, c->dXs, c->dx};
    for (size_t i = 0; i < sizeof xsized / sizeof xsized[0]; i++)
        if (xsized[i]) fill(xsized[i], Nx, c->dt, c->s);
    prnn_cell_desc f = c->d;
    f.dtype = PRNN_DTYPE_F32;
    float *hp = malloc((size_t)c->P * 4);
    if (!hp) exit(2);
    PRNN_CHECK(prnn_cell_init_params(&f, hp, 1234));
    float *dp32;
    CUDA_CHECK(cudaMalloc((void **)&dp32, (size_t)c->P * 4));
    CUDA_CHECK(cudaMemcpy(dp32, hp, (size_t)c->P * 4, cudaMemcpyHostToDevice));
    PRNN_CHECK(prnn_mem_convert(c->ctx, c->params, c->dt, dp32, PRNN_DTYPE_F32, c->P));
    PRNN_CHECK(prnn_ctx_synchronize(c->ctx));
    CUDA_CHECK(cudaFree(dp32));
    free(hp);
    CUDA_CHECK(cudaMemsetAsync(c->dparams, 0, (size_t)c->P * 4, c->s));
    CUDA_CHECK(cudaMemsetAsync(c->act, 0, c->act_bytes, c->s));
    CUDA_CHECK(cudaStreamSynchronize(c->s));
}

static void config_free(config *c)
{
    void *p[] = {c->x, c->params, c->y, c->act, c->dy, c->dx, c->dparams, c->xs, c->dXs, c->P_,
                 c->dP, c->a, c->b, c->c, c->dc, c->da, c->db, c->s_, c->ss, c->dss, c->ds};
    for (size_t i = 0; i < sizeof p / sizeof p[0]; i++)
        if (p[i]) CUDA_CHECK(cudaFree(p[i]));
}

/* ------------------------------------------------------------------------ */
/* The three measured parts                                                 */

static void step_fwd(config *c)
{
    PRNN_CHECK(prnn_cell_forward(c->ctx, &c->d, c->B, c->T, NULL, c->y, NULL, c->act, c->x,
                                 c->params, NULL));
}

static void step_bwd(config *c)
{
    PRNN_CHECK(prnn_cell_backward(c->ctx, &c->d, c->B, c->T, NULL, c->dx, c->dparams, NULL, c->dy,
                                  NULL, c->x, c->params, NULL, c->act));
}

/* The GEMMs of one step as cell.c issues them (one direction, no
 * recompute), row-major: C (M, N) = op(A) op(B) + beta C. */
typedef struct {
    const char *name;
    int ta, tb;
    int64_t M, N, K;
    const void *A;
    int64_t lda;
    const void *B;
    int64_t ldb;
    double beta;
    void *C;
    int64_t ldc;
    prnn_dtype c; /* C's dtype: the storage dtype, or fp32 for gradients */
} gemm_op;

#define MAX_GEMMS 10

static int gemm_list(const config *c, gemm_op *g)
{
    const int64_t BT = c->BT, D = c->D, H = c->H, GH = c->GH, es = (int64_t)c->es;
    const char *W = c->params, *W1 = W + D * GH * es, *U = W + c->nW * es;
    const char *dPu = (const char *)c->dP + 2 * H * es;
    float *dW = c->dparams, *dW1 = dW + D * GH, *dU = dW + c->nW;
    const prnn_dtype dt = c->dt, at = PRNN_DTYPE_F32;
    int n = 0;
    g[n++] = (gemm_op){"P=xW", 0, 0, BT, GH, D, c->x, D, W, GH, 0.0, c->P_, GH, dt};
    if (c->w2) g[n++] = (gemm_op){"P+=xsW1", 0, 0, BT, GH, D, c->xs, D, W1, GH, 1.0, c->P_, GH, dt};
    if (c->gilr)
        g[n++] = (gemm_op){"P+=ssU", 0, 0, BT, 4 * H, H, c->ss, H, U, 4 * H, 1.0,
                           (char *)c->P_ + 2 * H * es, GH, dt};
    if (c->gilr) {
        g[n++] = (gemm_op){"dU+=ss'dP", 1, 0, H, 4 * H, BT, c->ss, H, dPu, GH, 1.0, dU, 4 * H, at};
        g[n++] = (gemm_op){"dss=dPU'", 0, 1, BT, H, 4 * H, dPu, GH, U, 4 * H, 0.0, c->dss, H, dt};
    }
    g[n++] = (gemm_op){"dW+=x'dP", 1, 0, D, GH, BT, c->x, D, c->dP, GH, 1.0, dW, GH, at};
    if (c->w2) g[n++] = (gemm_op){"dW1+=xs'dP", 1, 0, D, GH, BT, c->xs, D, c->dP, GH, 1.0, dW1, GH, at};
    g[n++] = (gemm_op){"dx=dPW'", 0, 1, BT, D, GH, c->dP, GH, W, GH, c->sru ? 1.0 : 0.0, c->dx, D, dt};
    if (c->w2) g[n++] = (gemm_op){"dXs=dPW1'", 0, 1, BT, D, GH, c->dP, GH, W1, GH, 0.0, c->dXs, D, dt};
    return n;
}

static double gemm_flops(const gemm_op *g) { return 2.0 * (double)g->M * (double)g->N * (double)g->K; }

static void run_gemm(config *c, const gemm_op *g)
{
    PRNN_CHECK(prnn_gemm(c->ctx, g->ta, g->tb, g->M, g->N, g->K, 1.0, g->A, g->lda, g->B, g->ldb,
                         g->beta, g->C, g->ldc, c->dt, g->c));
}

/* The same (M, N, K) and dtypes as a plain NN GEMM on contiguous operands
 * (A (M, K), B (K, N), C (M, N)), straight through cuBLAS. Operands are
 * other buffers of the configuration large enough for them. */
static cublasHandle_t g_blas;

static void run_ref(config *c, const gemm_op *g)
{
    const cudaDataType_t ab = c->dt == PRNN_DTYPE_F32 ? CUDA_R_32F : CUDA_R_16BF;
    const cudaDataType_t ct = g->c == PRNN_DTYPE_F32 ? CUDA_R_32F : CUDA_R_16BF;
    /* A: dP holds BT*GH >= M*K elements; B: params (P elements) or P
     * (BT*GH); C: dparams (P floats: fits any dtype), dx (BT*D) or P. */
    const void *A = c->dP;
    const void *B = g->K * g->N <= c->P ? c->params : c->P_;
    void *C = g->M * g->N <= c->P ? (void *)c->dparams : g->M * g->N <= c->BT * c->D ? c->dx : c->P_;
    const float one = 1.0f, beta = (float)g->beta;
    /* row-major C = A B is column-major C^T = B^T A^T */
    CUBLAS_CHECK(cublasGemmEx(g_blas, CUBLAS_OP_N, CUBLAS_OP_N, (int)g->N, (int)g->M, (int)g->K, &one,
                              B, ab, (int)g->N, A, ab, (int)g->K, &beta, C, ct, (int)g->N,
                              CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
}

/* ------------------------------------------------------------------------ */
/* The non-GEMM passes, in cell.c's order, with their bytes                 */

typedef struct {
    double bytes;
    int count;
    char list[1024];
    int listing; /* fill list (once per cell) */
} pass_acc;

/* One pass: reads and writes in units of N elements of the storage dtype. */
static void pass(const config *c, pass_acc *acc, const char *name, double rd, double wr)
{
    acc->bytes += (rd + wr) * (double)c->N * (double)c->es;
    acc->count++;
    if (acc->listing) {
        const size_t k = strlen(acc->list);
        snprintf(acc->list + k, sizeof acc->list - k, "%s%s %g+%g", k ? ", " : "", name, rd, wr);
    }
}

static cell_ew ew_of(const config *c, cell_stage stage, int reverse)
{
    cell_ew e;
    memset(&e, 0, sizeof e);
    e.type = c->d.type;
    e.pooling = c->d.pooling;
    e.stage = stage;
    e.dtype = c->dt;
    e.B = c->B;
    e.T = c->T;
    e.H = c->H;
    e.D = c->D;
    e.G = c->G;
    e.reverse = reverse;
    return e;
}

/* Gate groups gates_fwd / gates_bwd read for the main stage. */
static double gate_groups(const config *c)
{
    if (c->d.type == PRNN_CELL_MINLSTM || c->gilr) return 3; /* f, i, n / f, i, z */
    return 2;
}

/* Groups a alone depends on (gates_a): minLSTM's normalised f reads f and i;
 * every other a is one gate. */
static double a_groups(const config *c) { return c->d.type == PRNN_CELL_MINLSTM ? 2 : 1; }

static void run_passes(config *c, pass_acc *acc)
{
    prnn_ctx *ctx = c->ctx;
    const int64_t H = c->H, D = c->D, GH = c->GH;
    const cell_ew e = ew_of(c, CELL_STAGE_MAIN, 0), es_ = ew_of(c, CELL_STAGE_SURROGATE, 0);
    const cell_ew er = ew_of(c, CELL_STAGE_MAIN, 1);
    prnn_scan_desc sd = prnn_scan_desc_make(c->B, c->T, H);
    sd.dtype = c->dt;
    const void *bias = (const char *)c->params + (c->nW + c->nU) * (int64_t)c->es;
    float *dbias = c->dparams + c->nW + c->nU;
    const double gg = gate_groups(c);
    /* what y reads of P: o (QRNN fo, GILR-LSTM), r (SRU, whose highway is x) */
    const cell_out_use ou = cell_out_use_of(c->d.type, c->d.pooling, 0, c->sru);
    acc->bytes = 0;
    acc->count = 0;
    if (acc->listing) acc->list[0] = '\0';

    /* forward */
    if (c->w2) {
        PRNN_CHECK(prnn_cuda_cell_shift(ctx, &e, D, c->xs, D, c->x, D, NULL, 0));
        pass(c, acc, "shift x", 1, 1);
    }
    if (c->gilr) {
        PRNN_CHECK(prnn_cuda_cell_gates_fwd(ctx, &es_, c->a, c->b, c->P_, bias));
        pass(c, acc, "gates_fwd s", 2, 2);
        PRNN_CHECK(prnn_scan_forward(ctx, &sd, c->s_, NULL, c->a, c->b, NULL));
        pass(c, acc, "scan s", 2, 1);
        PRNN_CHECK(prnn_cuda_cell_shift(ctx, &e, H, c->ss, H, c->s_, H, NULL, 0));
        pass(c, acc, "shift s", 1, 1);
    }
    PRNN_CHECK(prnn_cuda_cell_gates_fwd(ctx, &e, c->a, c->b, c->P_, bias));
    pass(c, acc, "gates_fwd", gg, 2);
    PRNN_CHECK(prnn_scan_forward(ctx, &sd, c->c, NULL, c->a, c->b, NULL));
    pass(c, acc, "scan", 2, 1);
    PRNN_CHECK(prnn_cuda_cell_out_fwd(ctx, &e, c->y, H, c->c, c->P_, bias, c->x));
    pass(c, acc, "out_fwd", 1 + (double)ou.count + c->sru, 1); /* c, its groups (, x) */

    /* backward */
    if (c->gilr) {
        PRNN_CHECK(prnn_cuda_cell_shift(ctx, &e, H, c->ss, H, c->s_, H, NULL, 0));
        pass(c, acc, "shift s", 1, 1);
    }
    if (c->w2) {
        PRNN_CHECK(prnn_cuda_cell_shift(ctx, &e, D, c->xs, D, c->x, D, NULL, 0));
        pass(c, acc, "shift x", 1, 1);
    }
    if (c->sru) {
        CUDA_CHECK(cudaMemsetAsync(c->dx, 0, (size_t)(c->BT * D) * c->es, c->s));
        pass(c, acc, "zero dx", 0, 1);
    }
    const void *dc = c->dy; /* y = c: the scan reads dy itself */
    if (!ou.y_is_c) {
        PRNN_CHECK(prnn_cuda_cell_out_bwd(ctx, &e, c->dc, c->dP, c->sru ? c->dx : NULL, c->dy, H,
                                          c->c, c->P_, bias, c->x));
        /* dy c, the groups (, x and dx) / dc, their dP (, dx) */
        pass(c, acc, "out_bwd", 2 + (double)ou.count + 2 * c->sru, 1 + (double)ou.count + c->sru);
        dc = c->dc;
    }
    PRNN_CHECK(prnn_cuda_cell_gates_fwd(ctx, &e, c->a, NULL, c->P_, bias));
    pass(c, acc, "gates_a", a_groups(c), 1);
    PRNN_CHECK(prnn_scan_backward(ctx, &sd, c->da, c->db, NULL, c->a, c->c, NULL, dc, NULL));
    pass(c, acc, "scan_bwd", 3, 2);
    PRNN_CHECK(prnn_cuda_cell_gates_bwd(ctx, &e, c->dP, c->da, c->db, c->P_, bias, dbias));
    pass(c, acc, "gates_bwd", 2 + gg, gg);
    if (c->gilr) {
        PRNN_CHECK(prnn_cuda_cell_shift(ctx, &er, H, c->ds, H, c->dss, H, NULL, 0));
        pass(c, acc, "shift ds", 1, 1);
        PRNN_CHECK(prnn_cuda_cell_gates_fwd(ctx, &es_, c->a, NULL, c->P_, bias));
        pass(c, acc, "gates_a s", 1, 1);
        PRNN_CHECK(prnn_scan_backward(ctx, &sd, c->da, c->db, NULL, c->a, c->s_, NULL, c->ds, NULL));
        pass(c, acc, "scan_bwd s", 3, 2);
        PRNN_CHECK(prnn_cuda_cell_gates_bwd(ctx, &es_, c->dP, c->da, c->db, c->P_, bias, dbias));
        pass(c, acc, "gates_bwd s", 4, 2);
    }
    if (ou.count) { /* the bias gradients of the groups out_bwd wrote */
        PRNN_CHECK(prnn_cuda_cell_colsum_add(ctx, c->dt, c->BT, ou.count * H, dbias + ou.first * H,
                                             (const char *)c->dP + ou.first * H * c->es, GH));
        pass(c, acc, "colsum", (double)ou.count, 0);
    }
    if (c->w2) {
        PRNN_CHECK(prnn_cuda_cell_unshift_add(ctx, &e, D, c->dx, D, c->dXs, D, NULL, 0));
        pass(c, acc, "unshift_add", 2, 1);
    }
}

/* ------------------------------------------------------------------------ */
/* Timing                                                                   */

typedef enum { PART_STEP, PART_GEMMS, PART_PASSES, PART_ONE_GEMM, PART_ONE_REF } part;

typedef struct {
    config *c;
    part what;
    const gemm_op *g; /* PART_ONE_* */
    int ng;
    gemm_op *all;     /* PART_GEMMS */
    pass_acc *acc;    /* PART_PASSES */
} work;

static void run_work(const work *w)
{
    switch (w->what) {
    case PART_STEP:
        step_fwd(w->c);
        step_bwd(w->c);
        break;
    case PART_GEMMS:
        for (int i = 0; i < w->ng; i++) run_gemm(w->c, &w->all[i]);
        break;
    case PART_PASSES: run_passes(w->c, w->acc); break;
    case PART_ONE_GEMM: run_gemm(w->c, w->g); break;
    case PART_ONE_REF: run_ref(w->c, w->g); break;
    }
}

/* Median ms over reps timed calls after one warm-up call; for the step also
 * the medians of its forward and backward halves (fwd_ms, bwd_ms). */
static double time_ms(const work *w, int reps, double *fwd_ms, double *bwd_ms)
{
    cudaStream_t s = w->c->s;
    cudaEvent_t e0, e1, e2;
    CUDA_CHECK(cudaEventCreate(&e0));
    CUDA_CHECK(cudaEventCreate(&e1));
    CUDA_CHECK(cudaEventCreate(&e2));
    float t[MAX_REPS], tf[MAX_REPS], tb[MAX_REPS];
    if (reps > MAX_REPS) reps = MAX_REPS;
    for (int i = -1; i < reps; i++) {
        CUDA_CHECK(cudaEventRecord(e0, s));
        if (w->what == PART_STEP) {
            step_fwd(w->c);
            CUDA_CHECK(cudaEventRecord(e1, s));
            step_bwd(w->c);
        } else {
            run_work(w);
            CUDA_CHECK(cudaEventRecord(e1, s));
        }
        CUDA_CHECK(cudaEventRecord(e2, s));
        CUDA_CHECK(cudaEventSynchronize(e2));
        if (i < 0) continue;
        CUDA_CHECK(cudaEventElapsedTime(&t[i], e0, e2));
        CUDA_CHECK(cudaEventElapsedTime(&tf[i], e0, e1));
        CUDA_CHECK(cudaEventElapsedTime(&tb[i], e1, e2));
    }
    if (fwd_ms) *fwd_ms = bench_median(tf, reps);
    if (bwd_ms) *bwd_ms = bench_median(tb, reps);
    CUDA_CHECK(cudaEventDestroy(e0));
    CUDA_CHECK(cudaEventDestroy(e1));
    CUDA_CHECK(cudaEventDestroy(e2));
    return bench_median(t, reps);
}

static int reps_for(double ms, int quick)
{
    int r = (int)(TIME_PER_PART_S * (quick ? 0.5 : 1.0) * 1e3 / (ms > 1e-3 ? ms : 1e-3));
    return r < 3 ? 3 : r > (quick ? 7 : MAX_REPS) ? (quick ? 7 : MAX_REPS) : r;
}

/* ------------------------------------------------------------------------ */
/* Results                                                                  */

typedef struct {
    const char *cell;
    prnn_dtype dt;
    int64_t B, T;
    int skipped;
    double step, fwd, bwd, gemm, ref, passes, rest_bytes, gemm_flops;
} result;

#define MAX_RESULTS 64
static result g_res[MAX_RESULTS];
static int g_nres;

static void print_header(void)
{
    printf("%-10s %-4s %6s | %9s %8s %8s %7s | %9s %7s %6s | %8s %6s %6s %6s | %8s %6s\n", "cell",
           "type", "T", "step ms", "fwd ms", "bwd ms", "Mtok/s", "GEMM ms", "TFLOP/s", "x ref",
           "rest ms", "GB", "%bw", "x roof", "passes", "x roof");
}

static void run_config(const bcell *cl, prnn_ctx *ctx, prnn_dtype dt, int64_t B, int64_t T,
                       int64_t H, int quick, double bw, int list_passes)
{
    config c;
    config_init(&c, cl, ctx, dt, B, T, H);
    result r = {cl->name, dt, B, T, 0, 0, 0, 0, 0, 0, 0, 0, 0};
    size_t fr = 0, tot = 0;
    CUDA_CHECK(cudaMemGetInfo(&fr, &tot));
    if (config_bytes(&c) > 0.9 * (double)fr) {
        printf("%-10s %-4s %6lld | skipped: needs ~%.1f GiB, %.1f GiB free\n", cl->name,
               dtype_name(dt), (long long)T, config_bytes(&c) / (1 << 30), (double)fr / (1 << 30));
        r.skipped = 1;
        if (g_nres < MAX_RESULTS) g_res[g_nres++] = r;
        return;
    }
    alarm(WATCHDOG_S);
    config_alloc(&c);

    /* warm-up step: also sizes the library's scratch, and the too-slow probe */
    const double t0 = now_s();
    step_fwd(&c);
    step_bwd(&c);
    PRNN_CHECK(prnn_ctx_synchronize(ctx));
    const double probe = now_s() - t0;
    if (probe > STEP_LIMIT_S) {
        printf("%-10s %-4s %6lld | skipped: one step took %.1f s (> %.0f s)\n", cl->name,
               dtype_name(dt), (long long)T, probe, STEP_LIMIT_S);
        r.skipped = 1;
    } else {
        const int reps = reps_for(probe * 1e3, quick);
        work w = {&c, PART_STEP, NULL, 0, NULL, NULL};
        r.step = time_ms(&w, reps, &r.fwd, &r.bwd);

        gemm_op g[MAX_GEMMS];
        const int ng = gemm_list(&c, g);
        w = (work){&c, PART_GEMMS, NULL, ng, g, NULL};
        r.gemm = time_ms(&w, reps, NULL, NULL);
        char gl[1024] = "";
        for (int i = 0; i < ng; i++) {
            r.gemm_flops += gemm_flops(&g[i]);
            work wg = {&c, PART_ONE_GEMM, &g[i], 0, NULL, NULL};
            const double tg = time_ms(&wg, reps, NULL, NULL);
            wg.what = PART_ONE_REF;
            const double tr = time_ms(&wg, reps, NULL, NULL);
            r.ref += tr;
            const size_t k = strlen(gl);
            snprintf(gl + k, sizeof gl - k, "%s%s (%lldx%lldx%lld) %.1f TF/s %.0f%%", i ? ", " : "",
                     g[i].name, (long long)g[i].M, (long long)g[i].N, (long long)g[i].K,
                     gemm_flops(&g[i]) / (tg * 1e-3) * 1e-12, 100.0 * tr / tg);
        }

        pass_acc acc;
        memset(&acc, 0, sizeof acc);
        acc.listing = 1;
        run_passes(&c, &acc); /* fills the list and the byte count once */
        acc.listing = 0;
        w = (work){&c, PART_PASSES, NULL, 0, NULL, &acc};
        r.passes = time_ms(&w, reps, NULL, NULL);
        r.rest_bytes = acc.bytes;

        const double rest = r.step - r.gemm, roof_ms = r.rest_bytes / bw * 1e3;
        printf("%-10s %-4s %6lld | %9.3f %8.3f %8.3f %7.2f | %9.3f %7.1f %5.0f%% | %8.3f %6.2f %5.0f%% "
               "%6.2f | %8.3f %6.2f\n",
               cl->name, dtype_name(dt), (long long)T, r.step, r.fwd, r.bwd,
               (double)(B * T) / (r.step * 1e-3) * 1e-6, r.gemm, r.gemm_flops / (r.gemm * 1e-3) * 1e-12,
               100.0 * r.ref / r.gemm, rest, r.rest_bytes * 1e-9, 100.0 * roof_ms / rest,
               rest / roof_ms, r.passes, r.passes / roof_ms);
        printf("    GEMMs (layout as in the layer, TFLOP/s, plain-NN ref time / this time): %s\n", gl);
        if (list_passes)
            printf("    passes (reads+writes in units of N = B*T*H elements): %s = %g N\n", acc.list,
                   r.rest_bytes / ((double)c.N * (double)c.es));
    }
    fflush(stdout);
    PRNN_CHECK(prnn_ctx_synchronize(ctx));
    config_free(&c);
    alarm(0);
    if (g_nres < MAX_RESULTS) g_res[g_nres++] = r;
}

int main(int argc, char **argv)
{
    int quick = 0, dt_mask = 3, cell_mask = (1 << N_CELLS) - 1, bad = 0;
    long long oB = 16, oT = 0, oH = 1024;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--quick")) {
            quick = 1;
        } else if (!strcmp(argv[i], "--dtype") && i + 1 < argc) {
            const char *v = argv[++i];
            dt_mask = !strcmp(v, "f32") ? 1 : !strcmp(v, "bf16") ? 2 : !strcmp(v, "all") ? 3 : 0;
            bad |= !dt_mask;
        } else if (!strcmp(argv[i], "--cell") && i + 1 < argc) {
            const char *v = argv[++i];
            cell_mask = 0;
            for (int k = 0; k < N_CELLS; k++)
                if (!strcmp(v, CELLS[k].name) || !strcmp(v, "all")) cell_mask |= 1 << k;
            bad |= !cell_mask;
        } else if (!strcmp(argv[i], "--shape") && i + 1 < argc) {
            bad |= sscanf(argv[++i], "%lldx%lldx%lld", &oB, &oT, &oH) != 3 || oB <= 0 || oT <= 0 ||
                   oH <= 0;
        } else {
            bad = 1;
        }
    }
    if (bad) {
        fprintf(stderr, "usage: %s [--quick] [--dtype f32|bf16|all] [--cell NAME|all] [--shape BxTxH]\n"
                        "  NAME: mingru, minlstm, qrnn-fo-w1, qrnn-fo-w2, sru, gilr-lstm\n", argv[0]);
        return 2;
    }
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (!prnn_cuda_available()) {
        printf("no CUDA device: nothing to measure\n");
        return 0;
    }
    signal(SIGALRM, on_alarm);

    prnn_ctx_config cfg = prnn_ctx_config_default();
    cfg.device = PRNN_DEVICE_CUDA;
    prnn_ctx *ctx;
    PRNN_CHECK(prnn_ctx_init(&ctx, &cfg));
    cudaStream_t s = (cudaStream_t)prnn_ctx_cuda_stream(ctx);
    CUBLAS_CHECK(cublasCreate(&g_blas));
    CUBLAS_CHECK(cublasSetStream(g_blas, s));
    struct cudaDeviceProp prop;
    CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
    make_block();
    const double bw = bench_copy_bandwidth(s, 0);
    printf("device: %s, %d SMs\n", prop.name, prop.multiProcessorCount);
    printf("copy roofline: %.1f GB/s (cudaMemcpyAsync device-to-device of 1 GiB, read + write, median of 25)\n",
           bw * 1e-9);
    printf("layer: B = %lld, D = H = %lld, unidirectional, bias, linear space, no lengths, no states, "
           "no recompute\n", oB, oH);
    printf("step = forward + backward (public API); GEMM = the layer's GEMMs alone (prnn_gemm); "
           "x ref = plain-NN cuBLAS time of the same shapes / GEMM time;\nrest = step - GEMM, "
           "against its byte model at the copy roofline (%%bw = roofline time / rest, x roof = "
           "rest / roofline time);\npasses = the non-GEMM passes alone (x roof likewise)\n\n");
    print_header();

    int64_t Ts[] = {1024, 4096, 16384};
    if (oT) Ts[0] = oT;
    const prnn_dtype dts[] = {PRNN_DTYPE_F32, PRNN_DTYPE_BF16};
    for (int di = 0; di < 2; di++) {
        if (!(dt_mask >> di & 1)) continue;
        for (int k = 0; k < N_CELLS; k++) {
            if (!(cell_mask >> k & 1)) continue;
            for (int ti = 0; ti < 3; ti++) {
                if ((quick || oT) && ti > 0) continue;
                run_config(&CELLS[k], ctx, dts[di], oB, Ts[ti], oH, quick, bw, ti == 0 && di == 0);
            }
        }
    }

    /* the markdown table, last */
    printf("\n%s, copy roofline %.1f GB/s. B = %lld, D = H = %lld; step = forward + backward; "
           "rest = step - GEMMs; roofline = rest's modelled bytes at copy bandwidth.\n\n",
           prop.name, bw * 1e-9, oB, oH);
    printf("| cell | dtype | T | step ms | fwd ms | bwd ms | Mtok/s | GEMM ms | GEMM TFLOP/s | GEMM vs NN ref "
           "| rest ms | rest GB | rest %% of copy bw | rest x roofline | passes alone ms | passes x roofline |\n");
    printf("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n");
    for (int i = 0; i < g_nres; i++) {
        const result *r = &g_res[i];
        if (r->skipped) {
            printf("| %s | %s | %lld | skipped | | | | | | | | | | | | |\n", r->cell, dtype_name(r->dt),
                   (long long)r->T);
            continue;
        }
        const double rest = r->step - r->gemm, roof = r->rest_bytes / bw * 1e3;
        printf("| %s | %s | %lld | %.3f | %.3f | %.3f | %.2f | %.3f | %.1f | %.0f%% | %.3f | %.2f | %.0f%% "
               "| %.2f | %.3f | %.2f |\n",
               r->cell, dtype_name(r->dt), (long long)r->T, r->step, r->fwd, r->bwd,
               (double)(r->B * r->T) / (r->step * 1e-3) * 1e-6, r->gemm,
               r->gemm_flops / (r->gemm * 1e-3) * 1e-12, 100.0 * r->ref / r->gemm, rest,
               r->rest_bytes * 1e-9, 100.0 * roof / rest, rest / roof, r->passes, r->passes / roof);
    }
    CUBLAS_CHECK(cublasDestroy(g_blas));
    CUDA_CHECK(cudaFree(g_block[0]));
    CUDA_CHECK(cudaFree(g_block[1]));
    prnn_ctx_free(ctx);
    return 0;
}
