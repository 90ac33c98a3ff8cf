/*
 * test_dist_seq.c - the CPU suite of the sequence-parallel model
 * (prnn_model_set_seq_dist in prnn_dist.h, and `prnn train --dist
 * --seq-parallel`), run under mpirun with 2, 3 or more processes
 * (scripts/test.sh runs -np 2 and -np 3):
 *
 *   1. every cell (minGRU, minLSTM, QRNN with windows 1 and 2, SRU,
 *      GILR-LSTM), one- and bidirectional, with dropout, LayerNorm and
 *      --recompute among the variants, in double: the logits of each rank's
 *      segment, the loss, and every parameter gradient after
 *      prnn_model_seq_reduce_grads equal the one-process model over the
 *      whole sequence (each rank builds that model too), with segments of
 *      uneven lengths and ignored targets;
 *   2. a short fp32 training run (SGD) seq-parallel against one process;
 *   3. refusals: log-space cells, ranks that disagree on B;
 *   4. `prnn train --dist --seq-parallel` against `prnn train` in one
 *      process, a resumed run against an uninterrupted one, and
 *      --seq-parallel without --dist. (Refusals after MPI started, such as
 *      a --seq-len shorter than the process count, abort the job by
 *      design, so they are not run here.)
 *
 * Every rank draws the same global problem from the seed rank 0 prints
 * (PRNN_TEST_SEED repeats a run). Each check is made on every rank and
 * passes when it passed on all; rank 0 prints it.
 *
 * Size letters: B batch rows, T global time steps, Tr a rank's steps,
 * V vocabulary, P parameters, N ranks.
 */
#define _POSIX_C_SOURCE 200809L /* mkdtemp, dup, dup2 */
#include <fcntl.h>
#include <unistd.h>

#include "test_dist_cmd.h"

#include "prnn_blocks.h"
#include "prnn_dist.h"
#include "prnn_model.h"
#include "train/train.h"

static prnn_ctx *g_ctx;
static prnn_dist *g_dist;

/* ------------------------------------------------------------------------ */
/* A token problem cut into segments                                        */

typedef struct {
    int64_t B, T, V;
    int64_t *Tr, *off;    /* (N) */
    int32_t *ids, *tgt;   /* (B, T) global */
    int32_t *lids, *ltgt; /* (B, Tr) this rank's segment */
} tokens;

/* Segments of 1 .. maxr steps, uneven; some targets ignored (-1). */
static void tokens_init(tokens *p, int64_t B, int64_t V, int64_t maxr)
{
    const int N = g_size;
    p->B = B, p->V = V;
    p->Tr = tu_malloc((size_t)N * 8), p->off = tu_malloc((size_t)N * 8);
    for (int r = 0; r < N; r++) {
        p->Tr[r] = 1 + (int64_t)tu_uniform(0, (double)maxr);
        if (p->Tr[r] > maxr) p->Tr[r] = maxr;
    }
    if (N > 2) p->Tr[1] = 1; /* a one-step segment in the middle */
    p->off[0] = 0;
    for (int r = 1; r < N; r++) p->off[r] = p->off[r - 1] + p->Tr[r - 1];
    p->T = p->off[N - 1] + p->Tr[N - 1];
    const int64_t n = B * p->T, Tr = p->Tr[g_rank];
    p->ids = tu_malloc((size_t)n * 4), p->tgt = tu_malloc((size_t)n * 4);
    p->lids = tu_malloc((size_t)(B * Tr) * 4), p->ltgt = tu_malloc((size_t)(B * Tr) * 4);
    for (int64_t i = 0; i < n; i++) {
        p->ids[i] = (int32_t)(tu_next() % (uint64_t)V);
        p->tgt[i] = tu_uniform(0, 1) < 0.15 ? -1 : (int32_t)(tu_next() % (uint64_t)V);
    }
    for (int64_t b = 0; b < B; b++)
        for (int64_t t = 0; t < Tr; t++) {
            p->lids[b * Tr + t] = p->ids[b * p->T + p->off[g_rank] + t];
            p->ltgt[b * Tr + t] = p->tgt[b * p->T + p->off[g_rank] + t];
        }
}

static void tokens_free(tokens *p)
{
    free(p->Tr), free(p->off), free(p->ids), free(p->tgt), free(p->lids), free(p->ltgt);
}

/* ------------------------------------------------------------------------ */
/* 1. Loss and gradients in double against the whole sequence               */

typedef struct {
    const char *name;
    prnn_cell_type cell;
    int bidir, window, recompute, layer_norm;
    prnn_qrnn_pooling pooling;
    double dropout;
} variant;

static prnn_model_config variant_config(const variant *v, prnn_dtype dt)
{
    prnn_model_config c = prnn_model_config_default();
    c.vocab = 11;
    c.dim = 6;
    c.layers = 2;
    c.cell = prnn_cell_desc_make(v->cell, c.dim, c.dim);
    c.cell.bidirectional = v->bidir;
    c.cell.window = v->cell == PRNN_CELL_QRNN ? v->window : 1;
    c.cell.pooling = v->pooling;
    c.cell.recompute = v->recompute;
    c.norm = v->layer_norm ? PRNN_NORM_LAYER : PRNN_NORM_RMS;
    c.dropout = v->dropout;
    c.dtype = dt;
    return c;
}

/*
 * Tolerance 1e-12 relative (to each tensor's largest entry): the states are
 * the same numbers computed with the segments' summaries merged in another
 * order, so they differ by double rounding (~1e-16) amplified by the depth
 * of the model; a missing boundary term (a halo, a dropout mask, a share of
 * the loss) shows as 1e-3 or more.
 */
static void check_model_f64(const variant *v)
{
    tokens p;
    tokens_init(&p, 2, 11, 6);
    const prnn_model_config c = variant_config(v, PRNN_DTYPE_F64);
    const uint64_t wseed = tu_next(), dseed = tu_next();
    prnn_model *ref = NULL, *seq = NULL;
    TU_REQUIRE(prnn_model_init(g_ctx, &ref, &c));
    TU_REQUIRE(prnn_model_init(g_ctx, &seq, &c));
    TU_REQUIRE(prnn_model_init_params(ref, wseed));
    TU_REQUIRE(prnn_model_init_params(seq, wseed));
    TU_REQUIRE(prnn_model_set_seq_dist(seq, g_dist));
    const int64_t Tr = p.Tr[g_rank], P = prnn_model_param_count(ref), V = c.vocab;
    double lref = 0, lseq = 0;
    prnn_status s1 = prnn_model_zero_grads(ref), s2 = prnn_model_zero_grads(seq);
    if (s1 == PRNN_OK) s1 = prnn_model_forward(ref, p.B, p.T, &lref, p.ids, p.tgt, 1, dseed);
    if (s1 == PRNN_OK) s1 = prnn_model_backward(ref, 1.0);
    if (s2 == PRNN_OK) s2 = prnn_model_forward(seq, p.B, Tr, &lseq, p.lids, p.ltgt, 1, dseed);

    /* the segment's logits against the same positions of the whole */
    double err_logits = 0, worst_logit = 0;
    const double *gl = prnn_model_logits(ref), *ll = prnn_model_logits(seq);
    for (int64_t i = 0; i < p.B * p.T * V; i++)
        if (fabs(gl[i]) > worst_logit) worst_logit = fabs(gl[i]);
    for (int64_t b = 0; s2 == PRNN_OK && b < p.B; b++)
        for (int64_t t = 0; t < Tr; t++)
            for (int64_t k = 0; k < V; k++) {
                const double want = gl[(b * p.T + p.off[g_rank] + t) * V + k];
                const double e = fabs(ll[(b * Tr + t) * V + k] - want) / worst_logit;
                if (!(e <= err_logits)) err_logits = e;
            }
    if (s2 == PRNN_OK) s2 = prnn_model_backward(seq, 1.0);
    if (s2 == PRNN_OK) s2 = prnn_model_seq_reduce_grads(seq);

    /* every tensor's gradient, relative to its largest entry */
    double err_grad = 0;
    const double *gr = prnn_model_grads(ref), *gs = prnn_model_grads(seq);
    char worst_name[64] = "";
    for (int i = 0; i < prnn_model_tensor_count(ref); i++) {
        prnn_tensor_info ti;
        prnn_model_tensor(ref, i, &ti);
        double scale = 1e-300, e = 0;
        for (int64_t j = 0; j < ti.count; j++)
            if (fabs(gr[ti.offset + j]) > scale) scale = fabs(gr[ti.offset + j]);
        for (int64_t j = 0; j < ti.count; j++) {
            const double d = fabs(gs[ti.offset + j] - gr[ti.offset + j]) / scale;
            if (!(d <= e)) e = d;
        }
        if (!(e <= err_grad)) {
            err_grad = e;
            snprintf(worst_name, sizeof worst_name, "%s", ti.name);
        }
    }
    const double err_loss = fabs(lseq - lref) / fabs(lref);
    const double tol = 1e-12;
    const int ok = s1 == PRNN_OK && s2 == PRNN_OK && P > 0 && err_loss <= tol &&
                   err_logits <= tol && err_grad <= tol;
    const double err = err_grad > err_loss ? err_grad : err_loss;
    dcheck(ok, err > err_logits ? err : err_logits,
           "%s, T = %lld: loss (rel err %.1e), logits (%.1e), all %lld gradients (%.1e, worst "
           "%s) equal one process, tol %.0e [%s, %s]",
           v->name, (long long)p.T, err_loss, err_logits, (long long)P, err_grad,
           worst_name[0] ? worst_name : "-", tol, prnn_strerror(s1), prnn_strerror(s2));
    prnn_model_free(ref);
    prnn_model_free(seq);
    tokens_free(&p);
}

static void check_cells(void)
{
    if (g_rank == 0) printf("\n== seq-parallel model vs one process, f64 ==\n");
    const variant vs[] = {
        {"mingru", PRNN_CELL_MINGRU, 0, 1, 0, 0, PRNN_QRNN_FO, 0.0},
        {"mingru bidirectional, dropout 0.3", PRNN_CELL_MINGRU, 1, 1, 0, 0, PRNN_QRNN_FO, 0.3},
        {"minlstm, layernorm", PRNN_CELL_MINLSTM, 0, 1, 0, 1, PRNN_QRNN_FO, 0.0},
        {"minlstm bidirectional", PRNN_CELL_MINLSTM, 1, 1, 0, 0, PRNN_QRNN_FO, 0.0},
        {"qrnn fo", PRNN_CELL_QRNN, 0, 1, 0, 0, PRNN_QRNN_FO, 0.0},
        {"qrnn ifo window 2", PRNN_CELL_QRNN, 0, 2, 0, 0, PRNN_QRNN_IFO, 0.0},
        {"qrnn f window 2 bidirectional", PRNN_CELL_QRNN, 1, 2, 0, 0, PRNN_QRNN_F, 0.0},
        {"sru", PRNN_CELL_SRU, 0, 1, 0, 0, PRNN_QRNN_FO, 0.0},
        {"sru bidirectional, dropout 0.2", PRNN_CELL_SRU, 1, 1, 0, 0, PRNN_QRNN_FO, 0.2},
        {"gilr-lstm", PRNN_CELL_GILR_LSTM, 0, 1, 0, 0, PRNN_QRNN_FO, 0.0},
        {"gilr-lstm bidirectional", PRNN_CELL_GILR_LSTM, 1, 1, 0, 0, PRNN_QRNN_FO, 0.0},
        {"mingru recompute 2", PRNN_CELL_MINGRU, 0, 1, 2, 0, PRNN_QRNN_FO, 0.0},
        {"gilr-lstm bidirectional recompute 3", PRNN_CELL_GILR_LSTM, 1, 1, 3, 0, PRNN_QRNN_FO,
         0.0},
        {"qrnn window 2 recompute 2", PRNN_CELL_QRNN, 0, 2, 2, 0, PRNN_QRNN_FO, 0.0},
    };
    for (size_t i = 0; i < sizeof vs / sizeof vs[0]; i++) check_model_f64(&vs[i]);
}

/* ------------------------------------------------------------------------ */
/* 2. A short fp32 training run                                             */

/* Loss after each of `steps` SGD steps (lr 0.5) on the same batch, with the
 * sequence cut (seq = 1) or whole. */
static prnn_status sgd_run(const tokens *p, const prnn_model_config *c, uint64_t wseed,
                           int seq, int steps, double *losses, float *final, int64_t P)
{
    prnn_model *m = NULL;
    prnn_status s = prnn_model_init(g_ctx, &m, c);
    if (s == PRNN_OK) s = prnn_model_init_params(m, wseed);
    if (s == PRNN_OK && seq) s = prnn_model_set_seq_dist(m, g_dist);
    const int64_t T = seq ? p->Tr[g_rank] : p->T;
    for (int k = 0; k < steps && s == PRNN_OK; k++) {
        float loss = 0;
        s = prnn_model_zero_grads(m);
        if (s == PRNN_OK)
            s = prnn_model_forward(m, p->B, T, &loss, seq ? p->lids : p->ids,
                                   seq ? p->ltgt : p->tgt, 1, 7 + (uint64_t)k);
        if (s == PRNN_OK) s = prnn_model_backward(m, 1.0);
        if (s == PRNN_OK && seq) s = prnn_model_seq_reduce_grads(m);
        if (s == PRNN_OK)
            s = prnn_axpby(g_ctx, prnn_model_params(m), prnn_model_params(m),
                           prnn_model_grads(m), P, 1.0, -0.5, PRNN_DTYPE_F32);
        losses[k] = loss;
    }
    if (s == PRNN_OK) memcpy(final, prnn_model_params(m), (size_t)P * 4);
    prnn_model_free(m);
    return s;
}

/*
 * Tolerances: fp32 states merged in another order differ by ~1e-7
 * relative, and 5 SGD steps carry that into the weights; losses 1e-5
 * relative, weights 1e-5 absolute (a step moves a weight by lr x gradient
 * ~1e-2, so a wrong gradient shows as 1e-3 or more).
 */
static void check_training_f32(void)
{
    if (g_rank == 0) printf("\n== seq-parallel training vs one process, f32 ==\n");
    const variant vs[] = {
        {"mingru", PRNN_CELL_MINGRU, 0, 1, 0, 0, PRNN_QRNN_FO, 0.1},
        {"qrnn window 2 bidirectional", PRNN_CELL_QRNN, 1, 2, 0, 0, PRNN_QRNN_FO, 0.0},
        {"gilr-lstm", PRNN_CELL_GILR_LSTM, 0, 1, 0, 0, PRNN_QRNN_FO, 0.0},
    };
    for (size_t i = 0; i < sizeof vs / sizeof vs[0]; i++) {
        tokens p;
        tokens_init(&p, 3, 11, 9);
        prnn_model_config c = variant_config(&vs[i], PRNN_DTYPE_F32);
        c.dim = 16;
        c.cell.D = c.cell.H = 16;
        const uint64_t wseed = tu_next();
        prnn_model *probe = NULL;
        TU_REQUIRE(prnn_model_init(g_ctx, &probe, &c));
        const int64_t P = prnn_model_param_count(probe);
        prnn_model_free(probe);
        enum { STEPS = 5 };
        double l1[STEPS], l2[STEPS];
        float *w1 = tu_malloc((size_t)P * 4), *w2 = tu_malloc((size_t)P * 4);
        const prnn_status s1 = sgd_run(&p, &c, wseed, 0, STEPS, l1, w1, P);
        const prnn_status s2 = sgd_run(&p, &c, wseed, 1, STEPS, l2, w2, P);
        double el = 0, ew = 0;
        for (int k = 0; k < STEPS; k++) {
            const double e = fabs(l1[k] - l2[k]) / fabs(l1[k]);
            if (!(e <= el)) el = e;
        }
        for (int64_t j = 0; j < P; j++) {
            const double e = fabs((double)w1[j] - (double)w2[j]);
            if (!(e <= ew)) ew = e;
        }
        const int ok = s1 == PRNN_OK && s2 == PRNN_OK && el <= 1e-5 && ew <= 1e-5 &&
                       l1[STEPS - 1] < l1[0];
        dcheck(ok, ew,
               "%s, T = %lld: %d SGD steps, losses %.4f -> %.4f agree (rel err %.1e, tol "
               "1e-5), weights (abs err, tol 1e-5)",
               vs[i].name, (long long)p.T, STEPS, l1[0], l1[STEPS - 1], el);
        free(w1), free(w2);
        tokens_free(&p);
    }
}

/* ------------------------------------------------------------------------ */
/* 3. Refusals                                                              */

static void check_refusals(void)
{
    if (g_rank == 0) printf("\n== refusals ==\n");
    prnn_model_config c = prnn_model_config_default();
    c.dim = 8;
    c.cell = prnn_cell_desc_make(PRNN_CELL_MINGRU, 8, 8);
    c.cell.log_space = 1;
    prnn_model *m = NULL;
    TU_REQUIRE(prnn_model_init(g_ctx, &m, &c));
    const prnn_status s = prnn_model_set_seq_dist(m, g_dist);
    dcheck(s == PRNN_ERR_UNSUPPORTED, 0, "log-space cells: %s", prnn_strerror(s));
    prnn_model_free(m);

    /* ranks that disagree on the batch rows: every rank returns the error */
    c.cell.log_space = 0;
    TU_REQUIRE(prnn_model_init(g_ctx, &m, &c));
    TU_REQUIRE(prnn_model_init_params(m, 1));
    TU_REQUIRE(prnn_model_set_seq_dist(m, g_dist));
    int32_t ids[8] = {1, 2, 3, 4, 5, 6, 7, 8};
    float loss = 0;
    const int64_t B = g_rank == g_size - 1 ? 2 : 1;
    const prnn_status s2 = prnn_model_forward(m, B, 4 / B, &loss, ids, ids, 1, 0);
    dcheck(s2 == PRNN_ERR_INVALID_ARGUMENT, 0, "ranks with different batch rows: %s",
           prnn_strerror(s2));
    /* and the mode still works after it */
    const prnn_status s3 = prnn_model_forward(m, 1, 3, &loss, ids, ids, 1, 0);
    dcheck(s3 == PRNN_OK && isfinite(loss), 0, "the next forward runs: %s", prnn_strerror(s3));
    const prnn_status s4 = prnn_model_set_seq_dist(m, NULL);
    dcheck(s4 == PRNN_OK, 0, "turned off: %s", prnn_strerror(s4));
    prnn_model_free(m);
}

/* ------------------------------------------------------------------------ */
/* 4. The trainer                                                           */

static char g_dir[256];

/*
 * The same run in one process (rank 0) and with its sequences cut over
 * every rank. Tolerances as for data parallelism (test_dist.c): the only
 * difference is rounding (the scans' merge order, the gradient sum), which
 * AdamW turns into weight differences of about lr x the relative error;
 * losses 1e-4 relative over 5 steps, weights dist_runs_agree
 * (test_dist_util.h: AdamW and rounding-level gradients). The seq-len
 * does not divide by 3 ranks (uneven segments), and a --stop-after 3 then
 * --resume run must end with the same weights.
 */
static void check_trainer(void)
{
    if (g_rank == 0) printf("\n== prnn train --dist --seq-parallel vs one process ==\n");
    dist_tmpdir(g_dir, sizeof g_dir, "/tmp/prnn_test_dist_seq_XXXXXX");
    if (!g_dir[0]) {
        dcheck(0, 0, "cannot make a temporary directory");
        return;
    }
    const struct {
        const char *what, *args;
    } runs[] = {
        {"builtin text, qrnn window 1, batch 2, seq-len 40, dropout 0.1",
         "--cell qrnn --batch 2 --seq-len 40 --dropout 0.1"},
        {"selective copy (ignored targets), gilr-lstm, batch 1, seq-len 31",
         "--task selective-copy --cell gilr-lstm --batch 1 --seq-len 31"},
    };
    for (size_t k = 0; k < sizeof runs / sizeof runs[0]; k++) {
        char common[1024], args[1400], out[512];
        dist_train_common(common, sizeof common, runs[k].args);
        dist_vs_one r;
        dist_run_vs_one(g_dir, k, common, "--dist --seq-parallel", "seq", &r);
        dist_check_vs_one(runs[k].what, &r);
        /* interrupted after 3 steps, then resumed */
        snprintf(args, sizeof args, "%s --dist --seq-parallel --stop-after 3 --out %s/res%zu",
                 common, g_dir, k);
        snprintf(out, sizeof out, "%s/res%zu.rank%d.txt", g_dir, k, g_rank);
        int rc3 = tc_run(train_cmd_train, args, out);
        if (rc3 == 0) {
            snprintf(args, sizeof args, "%s --dist --seq-parallel --resume --out %s/res%zu",
                     common, g_dir, k);
            rc3 = tc_run(train_cmd_train, args, out);
        }
        if (rc3 != 0) tc_show(out);

        char seq[32], res[32];
        snprintf(seq, sizeof seq, "seq%zu", k);
        snprintf(res, sizeof res, "res%zu", k);
        const double err_res = dist_compare_runs(g_dir, seq, res).err_w; /* weights only */
        /* The CPU is deterministic: a resumed run repeats the same bits. */
        dcheck(rc3 == 0 && (g_rank != 0 || err_res == 0), err_res,
               "%s: --stop-after 3 then --resume ends with the uninterrupted run's weights",
               runs[k].what);
    }

    /* refusals */
    char args[1024], out[512];
    snprintf(out, sizeof out, "%s/refuse.rank%d.txt", g_dir, g_rank);
    snprintf(args, sizeof args, "--seq-parallel --steps 1 --warmup 0 --out %s/refuse", g_dir);
    int rc = tc_run(train_cmd_train, args, out);
    dcheck(rc == 2 && tc_file_has(out, "--seq-parallel needs --dist"), 0,
           "--seq-parallel without --dist: exit %d and a message", rc);
    const char *dp_only[] = {"--zero1", "--no-overlap"};
    for (int k = 0; k < 2; k++) {
        snprintf(args, sizeof args, "--dist --seq-parallel %s --steps 1 --warmup 0 --out %s/refuse",
                 dp_only[k], g_dir);
        rc = tc_run(train_cmd_train, args, out);
        dcheck(rc == 2 && tc_file_has(out, "is for data parallelism"), 0,
               "--seq-parallel %s: exit %d and a message", dp_only[k], rc);
    }
    MPI_Barrier(MPI_COMM_WORLD);
    if (g_rank == 0 && tu_failed == 0) {
        char cmd[300];
        snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_dir);
        if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", g_dir);
    }
}

/* ------------------------------------------------------------------------ */

int main(void)
{
    prnn_dist_info info;
    prnn_status s = prnn_dist_mpi_start(&info);
    if (s != PRNN_OK) {
        fprintf(stderr, "cannot start MPI: %s\n", prnn_strerror(s));
        return 2;
    }
    g_rank = info.rank, g_size = info.size;
    prnn_ctx_config cfg = prnn_ctx_config_default();
    cfg.num_threads = 1;
    TU_REQUIRE(prnn_ctx_init(&g_ctx, &cfg));
    g_cpu = g_ctx;
    TU_REQUIRE(prnn_dist_init(&g_dist, g_ctx, NULL));

    uint64_t seed = tu_seed_from_env();
    MPI_Bcast(&seed, 1, MPI_UINT64_T, 0, MPI_COMM_WORLD);
    tu_seed(seed);
    if (g_rank == 0)
        printf("%d processes (%s), seed %llu (PRNN_TEST_SEED=%llu repeats this run)\n", g_size,
               prnn_dist_backend(g_dist), (unsigned long long)seed, (unsigned long long)seed);

    check_cells();
    check_training_f32();
    check_refusals();
    check_trainer();

    prnn_dist_free(g_dist);
    prnn_ctx_free(g_ctx);
    return dist_suite_finish();
}
