/*
 * test_dist_seq_cuda.c - the GPU suite of the sequence-parallel model
 * (prnn_model_set_seq_dist over NCCL), one GPU per process, run under
 * mpirun by scripts/test.sh --gpu (-np 2): for minGRU (bidirectional, with
 * dropout), QRNN window 2, SRU and GILR-LSTM, fp32 and bf16, the loss and
 * every parameter gradient of the model cut over the ranks against the
 * same model over the whole sequence on this rank's GPU. Both run the
 * same kernels; only the scans' merge order differs, so the tolerances
 * are those of fp32 (bf16: of the bf16 activations) rounding.
 *
 * Size letters: B batch rows, T global time steps, Tr a rank's steps,
 * V vocabulary, P parameters, N ranks.
 */
#define _POSIX_C_SOURCE 200809L /* mkdtemp (test_dist_util.h) */
#include <cuda_runtime.h>

#include "test_dist_util.h"

#include "check.h"
#include "prnn_dist.h"
#include "prnn_model.h"

static prnn_ctx *g_gpu;
static prnn_dist *g_dist;

typedef struct {
    const char *name;
    prnn_cell_type cell;
    int bidir, window;
    double dropout;
} variant;

static int32_t *upload_ids(const int32_t *h, int64_t n)
{
    int32_t *d = NULL;
    TU_REQUIRE(prnn_mem_alloc(g_gpu, (void **)&d, (size_t)n * 4));
    TU_REQUIRE(prnn_mem_upload(g_gpu, d, h, (size_t)n * 4));
    TU_REQUIRE(prnn_ctx_synchronize(g_gpu));
    return d;
}

/* Loss and gradients (host, fp32) of one forward + backward. */
static prnn_status run(const prnn_model_config *c, uint64_t wseed, int seq, int64_t B, int64_t T,
                       const int32_t *ids, const int32_t *tgt, float *loss, float *grads,
                       int64_t P)
{
    prnn_model *m = NULL;
    float *d_loss = NULL;
    int32_t *d_ids = upload_ids(ids, B * T), *d_tgt = upload_ids(tgt, B * T);
    prnn_status s = prnn_model_init(g_gpu, &m, c);
    if (s == PRNN_OK) s = prnn_model_init_params(m, wseed);
    if (s == PRNN_OK && seq) s = prnn_model_set_seq_dist(m, g_dist);
    if (s == PRNN_OK) s = prnn_mem_alloc(g_gpu, (void **)&d_loss, 8);
    if (s == PRNN_OK) s = prnn_model_zero_grads(m);
    if (s == PRNN_OK) s = prnn_model_forward(m, B, T, d_loss, d_ids, d_tgt, 1, 99);
    if (s == PRNN_OK) s = prnn_model_backward(m, 1.0);
    if (s == PRNN_OK && seq) s = prnn_model_seq_reduce_grads(m);
    if (s == PRNN_OK) s = prnn_mem_download(g_gpu, loss, d_loss, 4);
    if (s == PRNN_OK) s = prnn_mem_download(g_gpu, grads, prnn_model_grads(m), (size_t)P * 4);
    prnn_mem_free(g_gpu, d_loss);
    prnn_mem_free(g_gpu, d_ids);
    prnn_mem_free(g_gpu, d_tgt);
    prnn_model_free(m);
    return s;
}

/*
 * Tolerances (relative to each gradient tensor's largest entry): fp32
 * 1e-4 (states equal to ~1e-6 after the merge, through two layers and the
 * head); bf16 3e-2 (bf16 activations rounded at different values). A
 * missing boundary term shows as order 1.
 */
static void check_variant(const variant *v, prnn_dtype dt)
{
    const int N = g_size;
    const int64_t B = 2, V = 32;
    int64_t *Tr = tu_malloc((size_t)N * 8), T = 0, off = 0;
    for (int r = 0; r < N; r++) {
        Tr[r] = 40 + (int64_t)tu_uniform(0, 90); /* uneven, longer than a scan chunk */
        if (r < g_rank) off += Tr[r];
        T += Tr[r];
    }
    int32_t *ids = tu_malloc((size_t)(B * T) * 4), *tgt = tu_malloc((size_t)(B * T) * 4);
    int32_t *lids = tu_malloc((size_t)(B * Tr[g_rank]) * 4);
    int32_t *ltgt = tu_malloc((size_t)(B * Tr[g_rank]) * 4);
    for (int64_t i = 0; i < B * T; i++) {
        ids[i] = (int32_t)(tu_next() % V);
        tgt[i] = tu_uniform(0, 1) < 0.1 ? -1 : (int32_t)(tu_next() % V);
    }
    for (int64_t b = 0; b < B; b++)
        for (int64_t t = 0; t < Tr[g_rank]; t++) {
            lids[b * Tr[g_rank] + t] = ids[b * T + off + t];
            ltgt[b * Tr[g_rank] + t] = tgt[b * T + off + t];
        }
    prnn_model_config c = prnn_model_config_default();
    c.vocab = V;
    c.dim = 64;
    c.layers = 2;
    c.cell = prnn_cell_desc_make(v->cell, c.dim, c.dim);
    c.cell.bidirectional = v->bidir;
    c.cell.window = v->window;
    c.cell.algo = PRNN_SCAN_TREE;
    c.dropout = v->dropout;
    c.dtype = dt;
    prnn_model *probe = NULL;
    TU_REQUIRE(prnn_model_init(g_gpu, &probe, &c));
    const int64_t P = prnn_model_param_count(probe);
    prnn_model_free(probe);
    const uint64_t wseed = tu_next();
    float l1 = 0, l2 = 0;
    float *g1 = tu_malloc((size_t)P * 4), *g2 = tu_malloc((size_t)P * 4);
    const prnn_status s1 = run(&c, wseed, 0, B, T, ids, tgt, &l1, g1, P);
    const prnn_status s2 = run(&c, wseed, 1, B, Tr[g_rank], lids, ltgt, &l2, g2, P);
    double scale = 1e-30, err = 0;
    for (int64_t j = 0; j < P; j++)
        if (fabs(g1[j]) > scale) scale = fabs(g1[j]);
    for (int64_t j = 0; j < P; j++) {
        const double e = fabs((double)g1[j] - (double)g2[j]) / scale;
        if (!(e <= err)) err = e;
    }
    const double el = fabs((double)l1 - (double)l2) / fabs((double)l1);
    const double tol = dt == PRNN_DTYPE_BF16 ? 3e-2 : 1e-4;
    dcheck(s1 == PRNN_OK && s2 == PRNN_OK && el <= tol && err <= tol, err,
           "%s %s, T = %lld: loss (rel err %.1e) and %lld gradients equal one process, tol "
           "%.0e [%s, %s]",
           v->name, dt == PRNN_DTYPE_BF16 ? "bf16" : "fp32", (long long)T, el, (long long)P,
           tol, prnn_strerror(s1), prnn_strerror(s2));
    free(Tr), free(ids), free(tgt), free(lids), free(ltgt), free(g1), free(g2);
}

int main(void)
{
    int devices = 0;
    if (cudaGetDeviceCount(&devices) != cudaSuccess) devices = 0;
    prnn_dist_info info;
    const int go = dist_gpu_suite_start(devices, &info);
    if (go <= 0) return go < 0 ? 2 : 0;
    CUDA_CHECK(cudaSetDevice(info.local_rank));
    prnn_ctx_config cfg = prnn_ctx_config_default();
    cfg.device = PRNN_DEVICE_CUDA;
    cfg.cuda_device = info.local_rank;
    TU_REQUIRE(prnn_ctx_init(&g_gpu, &cfg));
    TU_REQUIRE(prnn_dist_init(&g_dist, g_gpu, NULL));
    uint64_t seed = tu_seed_from_env();
    MPI_Bcast(&seed, 1, MPI_UINT64_T, 0, MPI_COMM_WORLD);
    tu_seed(seed);
    if (g_rank == 0)
        printf("%d processes (%s), seed %llu (PRNN_TEST_SEED=%llu repeats this run)\n", g_size,
               prnn_dist_backend(g_dist), (unsigned long long)seed, (unsigned long long)seed);

    const variant vs[] = {
        {"mingru bidirectional, dropout 0.2", PRNN_CELL_MINGRU, 1, 1, 0.2},
        {"qrnn window 2", PRNN_CELL_QRNN, 0, 2, 0.0},
        {"sru", PRNN_CELL_SRU, 0, 1, 0.0},
        {"gilr-lstm bidirectional", PRNN_CELL_GILR_LSTM, 1, 1, 0.0},
    };
    for (size_t i = 0; i < sizeof vs / sizeof vs[0]; i++) {
        check_variant(&vs[i], PRNN_DTYPE_F32);
        check_variant(&vs[i], PRNN_DTYPE_BF16);
    }

    prnn_dist_free(g_dist);
    prnn_ctx_free(g_gpu);
    return dist_suite_finish();
}
