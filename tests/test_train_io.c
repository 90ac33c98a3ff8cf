/*
 * test_train_io.c - CPU suite of the trainer's infrastructure (tools/train/):
 * option parsing, the random generator, text data and batches, the
 * synthetic tasks, the JSON parser, safetensors and training-state files
 * (round trips, every class of corrupt file, crash-safe writes), the log and
 * sampling from logits.
 *
 * Files go to a fresh directory under $TMPDIR (or /tmp), removed at the end.
 * Random inputs come from the seed printed first (PRNN_TEST_SEED repeats it).
 */
#define _XOPEN_SOURCE 700 /* mkdtemp, nftw, symlink */

#include <dirent.h>
#include <ftw.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ckpt.h"
#include "data.h"
#include "fileio.h"
#include "json.h"
#include "log.h"
#include "options.h"
#include "rng.h"
#include "sample.h"
#include "test_util.h"

static char tmpdir[512];

/* A path inside the test directory, in one of 8 rotating buffers: copy it
 * when it must outlive 8 more calls. */
static const char *tpath(const char *name)
{
    static char bufs[8][1024];
    static int k;
    char *b = bufs[k++ % 8];
    snprintf(b, sizeof bufs[0], "%s/%s", tmpdir, name);
    return b;
}

static void write_bytes(const char *path, const void *data, size_t n)
{
    FILE *f = fopen(path, "wb");
    if (!f || (n && fwrite(data, 1, n, f) != n) || fclose(f) != 0) {
        fprintf(stderr, "test: cannot write %s\n", path);
        exit(2);
    }
}

static uint8_t *read_bytes(const char *path, int64_t *n)
{
    uint8_t *buf;
    train_err e;
    if (train_read_file(path, (int64_t)1 << 32, &buf, n, &e)) {
        fprintf(stderr, "test: %s\n", e.msg);
        exit(2);
    }
    return buf;
}

static int rm_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st, (void)flag, (void)ftw;
    return remove(path);
}

/* Number of entries in dir whose name contains ".tmp." (left-over temporaries). */
static int count_temporaries(const char *dir)
{
    DIR *d = opendir(dir);
    int n = 0;
    struct dirent *ent;
    while (d && (ent = readdir(d)) != NULL) n += strstr(ent->d_name, ".tmp.") != NULL;
    if (d) closedir(d);
    return n;
}

/* ------------------------------------------------------------------------ */
/* RNG                                                                      */

static void test_rng(void)
{
    printf("-- random generator\n");
    train_rng a, b;
    uint64_t seed = tu_next();
    train_rng_seed(&a, seed);
    train_rng_seed(&b, seed);
    int same = 1;
    for (int i = 0; i < 1000; i++) same &= train_rng_next(&a) == train_rng_next(&b);
    tu_check(same, "same seed, same 1000 draws");

    uint8_t saved[TRAIN_RNG_BYTES];
    train_rng_save(&a, saved);
    uint64_t first[200];
    for (int i = 0; i < 200; i++) first[i] = train_rng_next(&a);
    train_rng c;
    int load = train_rng_load(&c, saved);
    same = load == 0;
    for (int i = 0; i < 200; i++) same &= train_rng_next(&c) == first[i];
    tu_check(same, "saved state restores the exact continuation (200 draws)");

    uint8_t zero[TRAIN_RNG_BYTES] = {0};
    tu_check(train_rng_load(&c, zero) == -1, "all-zero state is refused");

    train_rng z;
    train_rng_seed(&z, 0);
    tu_check((z.s[0] | z.s[1] | z.s[2] | z.s[3]) != 0, "seed 0 gives a usable state");

    /* below(n): in range, and each of 7 values near 1/7 of 70000 draws
     * (binomial sd ~ 93; 6 sd = 560). */
    int64_t count[7] = {0};
    int in_range = 1;
    for (int i = 0; i < 70000; i++) {
        uint64_t v = train_rng_below(&a, 7);
        in_range &= v < 7;
        if (v < 7) count[v]++;
    }
    int64_t worst = 0;
    for (int i = 0; i < 7; i++) {
        int64_t d = llabs(count[i] - 10000);
        if (d > worst) worst = d;
    }
    tu_check(in_range && worst < 560,
             "below(7) in range and uniform (worst deviation %lld of 10000)", (long long)worst);
    double lo = 1, hi = 0;
    for (int i = 0; i < 10000; i++) {
        double u = train_rng_uniform(&a);
        lo = u < lo ? u : lo;
        hi = u > hi ? u : hi;
    }
    tu_check(lo >= 0 && hi < 1 && lo < 0.01 && hi > 0.99, "uniform() in [0, 1): min %.4f max %.4f",
             lo, hi);
    train_rng s1, s2;
    train_rng_seed2(&s1, seed, 1);
    train_rng_seed2(&s2, seed, 2);
    tu_check(train_rng_next(&s1) != train_rng_next(&s2), "derived streams differ");
}

/* ------------------------------------------------------------------------ */
/* Options                                                                  */

static int parse_words(train_options *o, train_command cmd, const char *line, char *err, size_t n)
{
    static char buf[4096];
    char *argv[256];
    int argc = 0;
    snprintf(buf, sizeof buf, "%s", line);
    for (char *t = strtok(buf, " "); t && argc < 256; t = strtok(NULL, " ")) argv[argc++] = t;
    return train_options_parse(o, cmd, argc, argv, err, n);
}

/* Expects an error whose message contains want. */
static void bad_option(train_command cmd, const char *line, const char *want)
{
    train_options o;
    char err[512];
    int rc = parse_words(&o, cmd, line, err, sizeof err);
    int ok = rc == TRAIN_OPTS_ERROR && strstr(err, want) != NULL;
    tu_check(ok, "prnn %s %s -> error mentioning '%s'", train_command_name(cmd), line, want);
    if (!ok) printf("        got rc %d: %s\n", rc, err);
    train_options_free(&o);
}

static void test_options(void)
{
    printf("-- options\n");
    train_options o;
    char err[512];

    int rc = train_options_parse(&o, TRAIN_CMD_TRAIN, 0, NULL, err, sizeof err);
    tu_check(rc == TRAIN_OPTS_OK && o.task == TRAIN_TASK_BUILTIN && o.cell == PRNN_CELL_MINGRU &&
                 o.layers == 2 && o.hidden == 128 && o.seq_len == 128 && o.batch == 16 &&
                 o.steps == 1000 && o.device == PRNN_DEVICE_CPU && o.dtype == PRNN_DTYPE_F32,
             "no arguments: builtin task, 2 x 128 minGRU, T 128, B 16, 1000 steps, cpu f32");
    tu_check(!strcmp(o.model_path, "out/model.safetensors") &&
                 !strcmp(o.state_path, "out/model.state") && !strcmp(o.log_path, "out/log.tsv"),
             "default files: %s, %s, %s", o.model_path, o.state_path, o.log_path);

    {
        train_options big;
        const int rb = parse_words(&big, TRAIN_CMD_TRAIN,
                                   "--dist --seq-parallel --task adding --seq-len 1073741824 --batch 1",
                                   err, sizeof err);
        tu_check(rb == TRAIN_OPTS_OK && big.seq_len == ((int64_t)1 << 30),
                 "--seq-len 2^30 (one sequence cut over processes) parses (%s)", err);
        train_options_free(&big);
    }

    rc = parse_words(&o, TRAIN_CMD_TRAIN,
                     "--cell gilr-lstm --layers 3 --hidden=96 --bidirectional --seq-len 4096 "
                     "--batch 4 --steps 20000 --lr 1e-3 --min-lr 0 --warmup 100 --weight-decay 0.1 "
                     "--grad-clip 0 --dtype bf16 --device cuda --seed 0xdeadbeef --eval-interval 0 "
                     "--eval-batches 3 --ckpt-interval 250 --out runs/x/ --resume --log l.tsv "
                     "--data a.txt --data dir --val-frac 0.1 --data-order sequential --norm layer "
                     "--dropout 0.1 --threads 2",
                     err, sizeof err);
    tu_check(rc == TRAIN_OPTS_OK, "every train option parses (%s)", err);
    tu_check(o.cell == PRNN_CELL_GILR_LSTM && o.layers == 3 && o.hidden == 96 && o.bidirectional &&
                 o.seq_len == 4096 && o.batch == 4 && o.steps == 20000 && o.lr == 1e-3 &&
                 o.min_lr == 0 && o.warmup == 100 && o.weight_decay == 0.1 && o.grad_clip == 0 &&
                 o.dtype == PRNN_DTYPE_BF16 && o.device == PRNN_DEVICE_CUDA &&
                 o.seed == 0xdeadbeefull && o.eval_interval == 0 && o.eval_batches == 3 &&
                 o.ckpt_interval == 250 && o.resume && o.task == TRAIN_TASK_TEXT &&
                 o.n_data == 2 && !strcmp(o.data[1], "dir") && o.val_frac == 0.1 &&
                 o.order == TRAIN_ORDER_SEQUENTIAL && o.norm == PRNN_NORM_LAYER &&
                 o.dropout == 0.1 && o.threads == 2,
             "values land in their fields; --data implies --task text");
    tu_check(!strcmp(o.model_path, "runs/x/model.safetensors") && !strcmp(o.log_path, "l.tsv") &&
                 train_options_given(&o, "hidden") && !train_options_given(&o, "task"),
             "paths joined without a double slash; given() tracks the command line");

    rc = parse_words(
        &o, TRAIN_CMD_SAMPLE,
        "--checkpoint m.safetensors --prompt Hello --length 50 --temperature 0 --top-k 5 --seed 3",
        err, sizeof err);
    tu_check(rc == TRAIN_OPTS_OK && !strcmp(o.prompt, "Hello") && o.length == 50 &&
                 o.temperature == 0 && o.top_k == 5 && !strcmp(o.model_path, "m.safetensors") &&
                 !strcmp(o.state_path, "m.state"),
             "sample options");
    rc = parse_words(&o, TRAIN_CMD_EVAL, "--data held.txt --batch 2", err, sizeof err);
    tu_check(rc == TRAIN_OPTS_OK && o.task == TRAIN_TASK_TEXT && o.val_frac == 1.0 &&
                 o.seq_len == 0 && o.eval_batches == 0 &&
                 !strcmp(o.model_path, "out/model.safetensors"),
             "eval --data scores the whole file; seq-len left to the checkpoint");
    {
        char *argv[] = {"--prompt", "--not-an-option"};
        rc = train_options_parse(&o, TRAIN_CMD_SAMPLE, 2, argv, err, sizeof err);
        tu_check(rc == TRAIN_OPTS_OK && !strcmp(o.prompt, "--not-an-option"),
                 "a --prompt may itself start with dashes");
    }
    tu_check(parse_words(&o, TRAIN_CMD_TRAIN, "--steps 5 --help", err, sizeof err) ==
                     TRAIN_OPTS_HELP &&
                 parse_words(&o, TRAIN_CMD_EVAL, "-h", err, sizeof err) == TRAIN_OPTS_HELP,
             "--help and -h ask for help");

    bad_option(TRAIN_CMD_TRAIN, "--hiden 64", "did you mean --hidden");
    bad_option(TRAIN_CMD_TRAIN, "--frobnicate", "unknown option '--frobnicate'");
    bad_option(TRAIN_CMD_TRAIN, "--steps", "--steps needs a value");
    bad_option(TRAIN_CMD_TRAIN, "--lr --steps 5", "--lr needs a value");
    bad_option(TRAIN_CMD_TRAIN, "--hidden 0", "--hidden wants an integer from 1 to 65536, got '0'");
    bad_option(TRAIN_CMD_TRAIN, "--layers 65", "--layers wants an integer from 1 to 64");
    bad_option(TRAIN_CMD_TRAIN, "--batch 12abc", "--batch wants an integer");
    bad_option(TRAIN_CMD_TRAIN, "--steps 1e3", "--steps wants an integer");
    bad_option(TRAIN_CMD_TRAIN, "--steps 99999999999999999999", "--steps wants an integer");
    bad_option(TRAIN_CMD_TRAIN, "--batch=", "--batch wants an integer");
    bad_option(TRAIN_CMD_TRAIN, "--lr 0", "--lr wants a number above 0");
    bad_option(TRAIN_CMD_TRAIN, "--lr -1", "--lr wants a number above 0");
    bad_option(TRAIN_CMD_TRAIN, "--lr nan", "--lr wants a number");
    bad_option(TRAIN_CMD_TRAIN, "--lr inf", "--lr wants a number");
    bad_option(TRAIN_CMD_TRAIN, "--val-frac 0.6",
               "--val-frac wants a number above 0 and at most 0.5");
    bad_option(TRAIN_CMD_TRAIN, "--seed -1", "--seed wants an integer");
    bad_option(TRAIN_CMD_TRAIN, "--seed 0x", "--seed wants an integer");
    rc = parse_words(&o, TRAIN_CMD_TRAIN, "--seed 010", err, sizeof err);
    tu_check(rc == TRAIN_OPTS_OK && o.seed == 10, "--seed 010 is ten (decimal, not octal)");
    bad_option(TRAIN_CMD_TRAIN, "--cell lstm",
               "--cell wants mingru, minlstm, qrnn, sru or gilr-lstm");
    bad_option(TRAIN_CMD_TRAIN, "--device tpu", "--device wants cpu or cuda");
    bad_option(TRAIN_CMD_TRAIN, "--task copy", "--task wants builtin, text");
    bad_option(TRAIN_CMD_TRAIN, "--prompt hi",
               "--prompt is an option of prnn sample, not of prnn train");
    bad_option(TRAIN_CMD_SAMPLE, "--hidden 64", "--hidden is an option of prnn train");
    bad_option(TRAIN_CMD_TRAIN, "data.txt", "unexpected argument 'data.txt'");
    bad_option(TRAIN_CMD_TRAIN, "--resume=1", "--resume takes no value");
    bad_option(TRAIN_CMD_TRAIN, "--lr 0.001 --min-lr 0.01", "--min-lr 0.01 is above --lr 0.001");
    bad_option(TRAIN_CMD_TRAIN, "--steps 10 --warmup 20", "--warmup 20 is longer than --steps 10");
    bad_option(TRAIN_CMD_TRAIN, "--dtype bf16", "--dtype bf16 needs --device cuda");
    bad_option(TRAIN_CMD_TRAIN, "--task text", "--task text needs at least one --data PATH");
    bad_option(TRAIN_CMD_TRAIN, "--task adding --data x.txt", "--data goes with --task text");
    bad_option(TRAIN_CMD_TRAIN, "--task adding --seq-len 3", "needs --seq-len of at least 4");
    bad_option(TRAIN_CMD_TRAIN, "--batch 65536 --seq-len 16777216", "more than 2^34 tokens");
    bad_option(TRAIN_CMD_TRAIN, "--seq-len 1073741825", "--seq-len wants an integer from 1 to 1073741824");
    bad_option(TRAIN_CMD_TRAIN, "--bidirectional --hidden 33",
               "--bidirectional needs an even --hidden");
    bad_option(TRAIN_CMD_SAMPLE, "--top-k 257", "--top-k wants an integer from 0 to 256");
    bad_option(TRAIN_CMD_SAMPLE, "--temperature -0.5", "--temperature wants a number from 0");
    bad_option(TRAIN_CMD_TRAIN, "--dropout 1", "--dropout wants a number from 0 and at most 0.95");
    {
        char line[2048] = "";
        for (int i = 0; i <= TRAIN_MAX_PATHS; i++) strcat(line, "--data f ");
        bad_option(TRAIN_CMD_TRAIN, line, "more than 64 --data paths");
    }

    /* help text: every option of the command, its default, examples */
    FILE *f = tmpfile();
    train_options_usage(f, TRAIN_CMD_TRAIN);
    long len = ftell(f);
    char *text = tu_malloc((size_t)len + 1);
    rewind(f);
    size_t got = fread(text, 1, (size_t)len, f);
    text[got] = 0;
    fclose(f);
    int lines_ok = 1;
    for (char *p = text; *p;) {
        char *nl = strchr(p, '\n');
        size_t l = nl ? (size_t)(nl - p) : strlen(p);
        lines_ok &= l <= 79;
        p += l + (nl != NULL);
    }
    tu_check(strstr(text, "usage: prnn train") && strstr(text, "--hidden N") &&
                 strstr(text, "(default: 128)") && strstr(text, "--resume") &&
                 strstr(text, "examples:") && !strstr(text, "--temperature") && lines_ok,
             "train --help lists its options with defaults and examples, lines <= 79 columns");
    free(text);

    /* the schedule: warmup to lr, cosine to min_lr at the last step */
    train_options_default(&o, TRAIN_CMD_TRAIN);
    o.lr = 1e-2, o.min_lr = 1e-3, o.warmup = 10, o.steps = 111;
    int mono = 1;
    for (int64_t s = 11; s < 111; s++) mono &= train_lr_at(&o, s) <= train_lr_at(&o, s - 1) + 1e-15;
    /* steps 10 .. 110 are the cosine: 60 is its middle */
    tu_check(fabs(train_lr_at(&o, 0) - 1e-3) < 1e-15 && fabs(train_lr_at(&o, 9) - 1e-2) < 1e-15 &&
                 fabs(train_lr_at(&o, 110) - 1e-3) < 1e-15 &&
                 fabs(train_lr_at(&o, 60) - 5.5e-3) < 1e-12 && mono,
             "lr: %.2e at step 0, %.2e at the end of warmup, %.2e halfway, %.2e at the last step",
             train_lr_at(&o, 0), train_lr_at(&o, 9), train_lr_at(&o, 60), train_lr_at(&o, 110));

    train_options p;
    train_options_default(&p, TRAIN_CMD_TRAIN);
    uint64_t h0 = train_options_model_hash(&p);
    p.lr = 0.5, p.steps = 7, p.seq_len = 9;
    uint64_t h1 = train_options_model_hash(&p);
    p.hidden = 64;
    uint64_t h2 = train_options_model_hash(&p);
    p.hidden = 128, p.cell = PRNN_CELL_SRU;
    uint64_t h3 = train_options_model_hash(&p);
    tu_check(h0 == h1 && h0 != h2 && h0 != h3 && h2 != h3,
             "model hash ignores training options, changes with hidden and cell");
}

/* ------------------------------------------------------------------------ */
/* Data                                                                     */

static int batch_is_text_window(const train_batch *b, int64_t row, const uint8_t *text,
                                int64_t lo, int64_t hi)
{
    const int64_t T = b->T;
    const int32_t *x = b->x + row * T, *y = b->y + row * T;
    for (int64_t t = 0; t + 1 < T; t++) {
        if (y[t] != x[t + 1]) return 0;
    }
    /* find the window in text[lo, hi) */
    for (int64_t s = lo; s + T + 1 <= hi; s++) {
        if (text[s] != x[0]) continue;
        int64_t t = 0;
        while (t < T && text[s + t] == x[t] && text[s + t + 1] == y[t]) t++;
        if (t == T) return 1;
    }
    return 0;
}

static void test_text_data(void)
{
    printf("-- text data\n");
    int64_t n1, n2;
    uint8_t *c1 = train_corpus_builtin(&n1), *c2 = train_corpus_builtin(&n2);
    int printable = 1;
    for (int64_t i = 0; i < n1; i++) printable &= (c1[i] >= 32 && c1[i] < 127) || c1[i] == '\n';
    tu_check(c1 && c2 && n1 == n2 && !memcmp(c1, c2, (size_t)n1) && n1 > 40000 && n1 < 100000 &&
                 printable,
             "builtin corpus: %lld bytes of printable text, the same every time", (long long)n1);
    free(c1);
    free(c2);

    /* a tree: dir/a.txt, dir/b/c.txt, dir/.hidden, dir/bin.dat (NUL), dir/link -> a.txt */
    mkdir(tpath("tree"), 0755);
    mkdir(tpath("tree/b"), 0755);
    mkdir(tpath("empty"), 0755);
    const char *a = "alpha text\n", *c = "gamma text in a subdirectory\n";
    write_bytes(tpath("tree/a.txt"), a, strlen(a));
    write_bytes(tpath("tree/b/c.txt"), c, strlen(c));
    write_bytes(tpath("tree/.hidden"), "hidden", 6);
    write_bytes(tpath("tree/bin.dat"), "ab\0cd", 5);
    write_bytes(tpath("zero.txt"), "", 0);
    if (symlink(tpath("tree/a.txt"), tpath("tree/link")) != 0)
        printf("        (no symlink support)\n");

    uint8_t *one = tu_malloc(3000);
    for (int i = 0; i < 3000; i++) one[i] = (uint8_t)('a' + tu_next() % 26);
    write_bytes(tpath("one.txt"), one, 3000);

    train_data d;
    train_err e;
    const char *paths[] = {tpath("tree"), tpath("one.txt"), tpath("tree/bin.dat")};
    train_data_config cfg = {TRAIN_TASK_TEXT, paths, 3, 0.25, 8, 2, TRAIN_ORDER_RANDOM, 1};
    int rc = train_data_open(&d, &cfg, &e);
    size_t la = strlen(a), lc = strlen(c);
    int order_ok = rc == 0 && d.n_text == (int64_t)(la + lc + 3000 + 5) && !memcmp(d.text, a, la) &&
                   !memcmp(d.text + la, c, lc) && !memcmp(d.text + la + lc, one, 3000) &&
                   !memcmp(d.text + la + lc + 3000, "ab\0cd", 5);
    tu_check(order_ok && d.n_files == 4 && d.n_skipped == 1,
             "directory walk: sorted, recursive, hidden/links/binary skipped, explicit binary kept "
             "(%lld files, %lld skipped)",
             (long long)d.n_files, (long long)d.n_skipped);
    int64_t n_val = (int64_t)ceil((double)d.n_text * 0.25);
    tu_check(d.n_train == d.n_text - n_val, "validation is the last ceil(n * 0.25) = %lld bytes",
             (long long)n_val);
    train_data_free(&d);

    const char *missing[] = {tpath("nope.txt")};
    cfg.paths = missing, cfg.n_paths = 1;
    rc = train_data_open(&d, &cfg, &e);
    tu_check(rc == TRAIN_IO_ERR_OPEN && strstr(e.msg, "nope.txt"), "missing file: %s", e.msg);
    const char *zero[] = {tpath("zero.txt")};
    cfg.paths = zero;
    rc = train_data_open(&d, &cfg, &e);
    tu_check(rc == TRAIN_IO_ERR_DATA && strstr(e.msg, "empty"), "empty file: %s", e.msg);
    const char *empty[] = {tpath("empty")};
    cfg.paths = empty;
    rc = train_data_open(&d, &cfg, &e);
    tu_check(rc == TRAIN_IO_ERR_DATA && strstr(e.msg, "no text files"), "empty directory: %s",
             e.msg);
    const char *short_[] = {tpath("tree/a.txt")};
    cfg.paths = short_;
    rc = train_data_open(&d, &cfg, &e);
    tu_check(rc == TRAIN_IO_ERR_DATA && strstr(e.msg, "--seq-len"),
             "text shorter than a window: %s", e.msg);

    /* batches from random windows: inside the training part, shifted
     * targets, deterministic, and resumable from a saved sampler */
    const char *onep[] = {tpath("one.txt")};
    train_data_config tc = {TRAIN_TASK_TEXT, onep, 1, 0.1, 16, 4, TRAIN_ORDER_RANDOM, 7};
    rc = train_data_open(&d, &tc, &e);
    tu_check(rc == 0 && d.n_train == 2700, "3000 bytes split 2700 / 300");
    train_batch b1, b2;
    train_batch_init(&b1, 4, 16);
    train_batch_init(&b2, 4, 16);
    train_sampler s1, s2;
    train_sampler_init(&s1, 42);
    train_sampler_init(&s2, 42);
    int inside = 1, same = 1;
    for (int i = 0; i < 20; i++) {
        train_data_next(&d, &s1, &b1);
        train_data_next(&d, &s2, &b2);
        same &= !memcmp(b1.x, b2.x, 64 * 4) && !memcmp(b1.y, b2.y, 64 * 4);
        for (int r = 0; r < 4; r++) inside &= batch_is_text_window(&b1, r, d.text, 0, d.n_train);
        inside &= b1.n_counted == 64;
    }
    tu_check(inside, "training windows lie in the training part, y = x shifted by one");
    tu_check(same && s1.batches == 20, "same seed, same batches");
    train_sampler saved = s1;
    train_data_next(&d, &s1, &b1);
    train_data_next(&d, &s1, &b1);
    train_data_next(&d, &saved, &b2);
    train_data_next(&d, &saved, &b2);
    tu_check(!memcmp(b1.x, b2.x, 64 * 4) && saved.batches == s1.batches,
             "a copied sampler continues with the same batches");

    /* evaluation: every validation byte after the first is a target once */
    int64_t nb = train_data_eval_batches(&d);
    uint8_t *seen = tu_malloc(300);
    int64_t k = 0;
    int order = 1;
    for (int64_t i = 0; i < nb; i++) {
        train_data_eval(&d, i, &b1);
        for (int64_t j = 0; j < 64; j++) {
            if (!b1.mask[j]) {
                order &= b1.y[j] == -1;
                continue;
            }
            if (k < 300) seen[k] = (uint8_t)b1.y[j];
            k++;
        }
    }
    tu_check(k == 299 && order && !memcmp(seen, d.text + 2701, 299),
             "eval: %lld batches score the 299 validation targets once each, in order",
             (long long)nb);
    train_data_eval(&d, 1, &b1);
    train_data_eval(&d, 1, &b2);
    tu_check(!memcmp(b1.x, b2.x, 64 * 4) && !memcmp(b1.mask, b2.mask, 64),
             "eval batches are the same on every call");
    train_data_eval(&d, nb + 5, &b1);
    tu_check(b1.n_counted == 0, "eval batches past the end score nothing");
    free(seen);
    train_data_free(&d);

    /* sequential order: rows continue from batch to batch */
    tc.order = TRAIN_ORDER_SEQUENTIAL;
    rc = train_data_open(&d, &tc, &e);
    train_sampler_init(&s1, 1);
    train_data_next(&d, &s1, &b1);
    train_data_next(&d, &s1, &b2);
    int cont = b2.continues && !b1.continues;
    for (int r = 0; r < 4; r++) cont &= b2.x[r * 16] == b1.y[r * 16 + 15];
    int64_t seg = d.n_train / 4;
    cont &= b1.x[16] == d.text[seg] && b1.x[0] == d.text[0];
    /* seg = 675 bytes: (675 - 17) / 16 + 1 = 42 windows, then a wrap */
    for (int i = 2; i < 42; i++) train_data_next(&d, &s1, &b1);
    tu_check(cont && b1.continues, "sequential: row r reads part r; next batch continues the row");
    train_data_next(&d, &s1, &b1);
    tu_check(!b1.continues && b1.x[0] == d.text[0],
             "sequential: wraps to the start, continues = 0");
    train_data_free(&d);
    train_batch_free(&b1);
    train_batch_free(&b2);
    free(one);

    /* builtin: opens, with a sensible unigram entropy */
    train_data_config bc = {TRAIN_TASK_BUILTIN, NULL, 0, 0.05, 128, 16, TRAIN_ORDER_RANDOM, 1};
    rc = train_data_open(&d, &bc, &e);
    tu_check(rc == 0 && d.chance_loss > 2.5 && d.chance_loss < 3.5 &&
                 train_data_eval_batches(&d) > 0,
             "builtin task: %s", d.describe);
    train_data_free(&d);
}

/* Checks one synthetic batch row by row; returns the number of bad rows. */
static int64_t check_synthetic(const train_data *d, const train_batch *b)
{
    const int64_t T = b->T, K = d->k;
    int64_t bad = 0;
    for (int64_t r = 0; r < b->B; r++) {
        const int32_t *x = b->x + r * T, *y = b->y + r * T;
        const uint8_t *m = b->mask + r * T;
        int ok = 1;
        int64_t counted = 0;
        for (int64_t t = 0; t < T; t++) {
            counted += m[t];
            ok &= m[t] ? y[t] >= 0 && y[t] < 256 : y[t] == -1;
            if (m[t] && t + 1 < T) ok &= y[t] == x[t + 1]; /* teacher forcing */
        }
        switch (d->cfg.task) {
        case TRAIN_TASK_SELECTIVE_COPY: {
            int64_t L = T - K, j = 0;
            ok &= x[L] == '|' && counted == K;
            for (int64_t t = 0; t < L && ok; t++) {
                if (x[t] == '.') continue;
                ok &= x[t] >= 'a' && x[t] < 'a' + 16 && j < K && m[L + j] && y[L + j] == x[t];
                j++;
            }
            ok &= j == K;
            break;
        }
        case TRAIN_TASK_DELAYED_RECALL: {
            int64_t L = T - K;
            ok &= x[L] == '|' && counted == K;
            for (int64_t t = 0; t < K; t++)
                ok &= x[t] >= 'a' && x[t] < 'a' + 8 && m[L + t] && y[L + t] == x[t];
            for (int64_t t = K; t < L; t++) ok &= x[t] == '.';
            break;
        }
        default: {
            int64_t L = T - 2, marks = 0, first = -1, second = -1;
            int sum = 0;
            for (int64_t t = 0; t < L; t++) {
                if (x[t] >= 'A' && x[t] <= 'J') {
                    marks++;
                    sum += x[t] - 'A';
                    if (first < 0) first = t;
                    else second = t;
                } else {
                    ok &= x[t] >= '0' && x[t] <= '9';
                }
            }
            ok &= marks == 2 && first < L / 2 && second >= L / 2 && x[L] == '=' && counted == 2 &&
                  m[L] && m[L + 1] && y[L] == '0' + sum / 10 && y[L + 1] == '0' + sum % 10;
            break;
        }
        }
        bad += !ok;
    }
    return bad;
}

static void test_synthetic(void)
{
    printf("-- synthetic tasks\n");
    const train_task tasks[] = {TRAIN_TASK_SELECTIVE_COPY, TRAIN_TASK_ADDING,
                                TRAIN_TASK_DELAYED_RECALL};
    const double chance[] = {log(16.0), 1.3968860421243985, log(8.0)};
    const int64_t Ts[] = {4, 5, 7, 64, 1000};
    for (int i = 0; i < 3; i++) {
        int64_t bad = 0, rows = 0;
        int opened = 1;
        double cl = 0;
        for (size_t j = 0; j < sizeof Ts / sizeof Ts[0]; j++) {
            train_data_config c = {tasks[i],           NULL,     0, 0.05, Ts[j], 8,
                                   TRAIN_ORDER_RANDOM, tu_next()};
            train_data d;
            train_err e;
            if (train_data_open(&d, &c, &e)) {
                opened = 0;
                printf("        %s\n", e.msg);
                continue;
            }
            cl = d.chance_loss;
            train_batch b;
            train_batch_init(&b, 8, Ts[j]);
            train_sampler s;
            train_sampler_init(&s, tu_next());
            for (int k = 0; k < 20; k++) {
                train_data_next(&d, &s, &b);
                bad += check_synthetic(&d, &b);
                rows += 8;
            }
            train_data_eval(&d, 3, &b);
            bad += check_synthetic(&d, &b);
            rows += 8;
            train_batch_free(&b);
            train_data_free(&d);
        }
        tu_check(opened && bad == 0 && fabs(cl - chance[i]) < 1e-12,
                 "%s: %lld rows at T = 4..1000 well formed (%lld bad); chance %.4f nats",
                 train_task_name(tasks[i]), (long long)rows, (long long)bad, cl);
    }

    /* a million steps */
    for (int i = 0; i < 3; i++) {
        const int64_t T = (int64_t)1 << 20;
        train_data_config c = {tasks[i], NULL, 0, 0.05, T, 1, TRAIN_ORDER_RANDOM, 5};
        train_data d;
        train_err e;
        train_batch b;
        train_sampler s;
        int ok = train_data_open(&d, &c, &e) == 0 && train_batch_init(&b, 1, T) == 0;
        train_sampler_init(&s, 9);
        ok = ok && train_data_next(&d, &s, &b) == 0 && check_synthetic(&d, &b) == 0;
        tu_check(ok, "%s at T = 2^20: well formed, %lld scored tokens", train_task_name(tasks[i]),
                 (long long)b.n_counted);
        train_batch_free(&b);
        train_data_free(&d);
    }

    /* the same eval batches in every run; training draws differ from them */
    train_data_config c = {TRAIN_TASK_SELECTIVE_COPY, NULL, 0, 0.05, 64, 4, TRAIN_ORDER_RANDOM, 11};
    train_data d;
    train_err e;
    train_data_open(&d, &c, &e);
    train_batch b1, b2;
    train_batch_init(&b1, 4, 64);
    train_batch_init(&b2, 4, 64);
    train_data_eval(&d, 2, &b1);
    train_data_eval(&d, 2, &b2);
    int same = !memcmp(b1.x, b2.x, 256 * 4);
    train_data_eval(&d, 3, &b2);
    int differ = memcmp(b1.x, b2.x, 256 * 4) != 0;
    tu_check(same && differ && train_data_eval_batches(&d) == -1,
             "synthetic eval batch i is fixed; different i differ");
    train_batch_free(&b1);
    train_batch_free(&b2);
    train_data_free(&d);

    c.T = 3;
    int rc = train_data_open(&d, &c, &e);
    tu_check(rc == TRAIN_IO_ERR_DATA && strstr(e.msg, "at least 4"), "T = 3 refused: %s", e.msg);
}

/* ------------------------------------------------------------------------ */
/* JSON                                                                     */

static int json_ok(const char *s)
{
    train_json_doc d;
    char err[200];
    int rc = train_json_parse(&d, s, (int64_t)strlen(s), err, sizeof err);
    train_json_free(&d);
    return rc == 0;
}

static void test_text(void)
{
    printf("-- growing text\n");
    train_text t = {0};
    tu_check(t.n == 0 && !t.failed, "a zeroed text is empty");
    /* Enough pieces to grow past the first allocation several times, and
     * formatted pieces longer than any fixed scratch buffer would hold. */
    char *want = malloc(64 * 1024), *longarg = malloc(3001);
    memset(longarg, 'q', 3000);
    longarg[3000] = 0;
    size_t n = 0;
    for (int i = 0; i < 20; i++) {
        train_text_puts(&t, "ab");
        train_text_put(&t, "xyz\0ignored", 3);
        train_text_printf(&t, "[%d:%s]", i, longarg);
        n += (size_t)sprintf(want + n, "abxyz[%d:%s]", i, longarg);
    }
    train_text_printf(&t, "%s", "");
    tu_check(!t.failed && t.n == n && t.p && t.p[t.n] == 0 && !memcmp(t.p, want, n + 1),
             "puts, put and printf append exactly what they are given (%zu bytes)", n);
    tu_check(t.cap >= t.n + 1, "capacity covers the text and its NUL");
    t.failed = 1;
    train_text_puts(&t, "more");
    train_text_printf(&t, "%d", 7);
    tu_check(t.n == n && !memcmp(t.p, want, n + 1), "after a failure every write is a no-op");
    free(t.p);
    free(want);
    free(longarg);
}

static void test_json(void)
{
    printf("-- JSON\n");
    const char *doc =
        " {\"a\": [1, -2, 3.5e2, true, false, null], \"b\\u00e9\\n\": {\"c\": \"\\ud83d\\ude00x\"},"
        "\"big\": 9223372036854775807, \"neg\": -9223372036854775808, \"huge\": "
        "9223372036854775808} ";
    train_json_doc d;
    char err[200];
    int rc = train_json_parse(&d, doc, (int64_t)strlen(doc), err, sizeof err);
    const train_json *a = train_json_get(d.root, "a");
    const train_json *bb = train_json_get(d.root, "b\xc3\xa9\n");
    const train_json *cc = bb ? train_json_get(bb, "c") : NULL;
    const train_json *big = train_json_get(d.root, "big"), *neg = train_json_get(d.root, "neg");
    const train_json *huge = train_json_get(d.root, "huge");
    tu_check(rc == 0 && a && a->n == 6 && a->child->is_int && a->child->i == 1 &&
                 a->child->next->i == -2 && !a->child->next->next->is_int &&
                 a->child->next->next->num == 350.0 &&
                 a->child->next->next->next->type == TRAIN_JSON_TRUE,
             "arrays, integers, floats, literals");
    tu_check(cc && cc->type == TRAIN_JSON_STRING && cc->len == 5 &&
                 !memcmp(cc->str, "\xf0\x9f\x98\x80x", 5),
             "escapes and surrogate pairs decode to UTF-8");
    tu_check(big && big->is_int && big->i == INT64_MAX && neg && neg->is_int &&
                 neg->i == INT64_MIN && huge && !huge->is_int,
             "int64 limits exact; beyond them not an integer");
    train_json_free(&d);

    const char *bad[] = {
        "",          "  ",          "{",          "{\"a\":1,}",  "[1,]",       "[01]",
        "[1.]",      "[.5]",        "[1e]",       "[-]",         "\"abc",      "\"a\x01\"",
        "\"\\x\"",   "\"\\u12\"",   "\"\\ud800\"", "\"\\udc00\"", "\"\\u0000\"", "\"\xc0\x80\"",
        "\"\xed\xa0\x80\"", "\"\xff\"", "{\"a\":1,\"a\":2}", "[1] x", "[NaN]",  "// c\n1",
        "{'a':1}",   "{\"a\" 1}",   "[true false]", "tru",       "{1:2}",      "[1,,2]",
    };
    int all = 1;
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        if (json_ok(bad[i])) {
            all = 0;
            printf("        accepted bad JSON #%zu\n", i);
        }
    }
    tu_check(all, "%zu kinds of malformed JSON refused", sizeof bad / sizeof bad[0]);

    char deep[200];
    memset(deep, '[', 65);
    memset(deep + 65, ']', 65);
    deep[130] = 0;
    int refused = !json_ok(deep);
    memset(deep, '[', 64);
    memset(deep + 64, ']', 64);
    deep[128] = 0;
    tu_check(refused && json_ok(deep), "nesting: 64 levels parse, 65 are refused");
    rc = train_json_parse(&d, "[1, 2", 5, err, sizeof err);
    tu_check(rc == -1 && strstr(err, "at byte 5"), "errors name the byte: %s", err);
}

/* ------------------------------------------------------------------------ */
/* safetensors                                                              */

/* A file from a literal header and data bytes. */
static void write_st(const char *name, const char *header, const void *data, size_t n)
{
    const char *path = tpath(name);
    size_t hl = strlen(header);
    uint8_t *buf = tu_malloc(8 + hl + n);
    train_put_u64(buf, hl);
    memcpy(buf + 8, header, hl);
    if (n) memcpy(buf + 8 + hl, data, n);
    write_bytes(path, buf, 8 + hl + n);
    free(buf);
}

static void expect_st(const char *name, train_io_code want, const char *want_msg)
{
    train_st_file f;
    train_err e = {0, ""};
    int rc = train_st_read(&f, tpath(name), &e);
    int ok = rc == (int)want && (want == TRAIN_IO_OK || strstr(e.msg, name)) &&
             (!want_msg || strstr(e.msg, want_msg));
    tu_check(ok, "%-22s -> %s: %s", name, train_io_code_name(want), e.msg);
    if (!ok) printf("        got code %d (%s)\n", rc, train_io_code_name((train_io_code)rc));
    train_st_free(&f);
}

static void test_safetensors(void)
{
    printf("-- safetensors\n");
    float w[6 * 5], bias[5];
    uint16_t h[3 * 4];
    int32_t ids[7];
    tu_fill_f32(w, 30, -2, 2);
    tu_fill_f32(bias, 5, -1, 1);
    for (int i = 0; i < 12; i++) h[i] = (uint16_t)tu_next();
    for (int i = 0; i < 7; i++) ids[i] = (int32_t)tu_next();
    double scalar = tu_uniform(-1, 1);
    train_st_tensor t[] = {
        {"layers.0.W", TRAIN_ST_F32, 2, {6, 5}, w, 0},
        {"layers.0.b", TRAIN_ST_F32, 1, {5}, bias, 0},
        {"emb \"q\"\\", TRAIN_ST_BF16, 2, {3, 4}, h, 0},
        {"ids", TRAIN_ST_I32, 1, {7}, ids, 0},
        {"empty", TRAIN_ST_F32, 2, {0, 9}, NULL, 0},
        {"scalar", TRAIN_ST_F64, 0, {0}, &scalar, 0},
    };
    train_kv meta[] = {{"format", "prnn"}, {"note", "tab\there \"quoted\" \xc3\xa9\n"}};
    const char *path = tpath("m.safetensors");
    train_err e;
    int rc = train_st_write(path, t, 6, meta, 2, &e);
    tu_check(rc == 0, "write 6 tensors (f32, bf16, i32, f64 scalar, empty) and metadata");

    int64_t n;
    uint8_t *raw = read_bytes(path, &n);
    uint64_t hl = train_get_u64(raw);
    int64_t data_bytes = 120 + 20 + 24 + 28 + 0 + 8;
    tu_check(hl % 8 == 0 && raw[8] == '{' && (int64_t)(8 + hl) + data_bytes == n &&
                 !memcmp(raw + 8 + hl, w, 120),
             "layout: 8-byte length, JSON padded to 8, data in order (%lld bytes)", (long long)n);

    train_st_file f;
    rc = train_st_read(&f, path, &e);
    const train_st_tensor *tw = rc ? NULL : train_st_find(&f, "layers.0.W");
    const train_st_tensor *th = rc ? NULL : train_st_find(&f, "emb \"q\"\\");
    const train_st_tensor *ts = rc ? NULL : train_st_find(&f, "scalar");
    const train_st_tensor *te = rc ? NULL : train_st_find(&f, "empty");
    tu_check(rc == 0 && f.n_tensors == 6 && tw && tw->ndim == 2 && tw->shape[0] == 6 &&
                 tw->shape[1] == 5 && !memcmp(tw->data, w, sizeof w) && th &&
                 th->dtype == TRAIN_ST_BF16 && !memcmp(th->data, h, sizeof h) && ts &&
                 ts->ndim == 0 && !memcmp(ts->data, &scalar, 8) && te && te->nbytes == 0,
             "read back: names, dtypes, shapes and bytes exact");
    tu_check(rc == 0 && f.n_meta == 2 && !strcmp(train_st_meta(&f, "note"), meta[1].value),
             "metadata strings exact, escapes included");

    float w2[30], b2[5];
    train_st_slot slots[] = {
        {"layers.0.W", TRAIN_ST_F32, 2, {6, 5}, w2},    {"layers.0.b", TRAIN_ST_F32, 1, {5}, b2},
        {"emb \"q\"\\", TRAIN_ST_BF16, 2, {3, 4}, NULL}, {"ids", TRAIN_ST_I32, 1, {7}, NULL},
        {"empty", TRAIN_ST_F32, 2, {0, 9}, NULL},        {"scalar", TRAIN_ST_F64, 0, {0}, NULL},
    };
    rc = train_st_load(&f, slots, 6, &e);
    tu_check(rc == 0 && !memcmp(w2, w, sizeof w) && !memcmp(b2, bias, sizeof bias),
             "load into the model's table");
    slots[1].shape[0] = 6;
    rc = train_st_load(&f, slots, 6, &e);
    tu_check(rc == TRAIN_IO_ERR_SHAPE && strstr(e.msg, "[5]") && strstr(e.msg, "[6]"),
             "shape mismatch: %s", e.msg);
    slots[1].shape[0] = 5;
    slots[1].dtype = TRAIN_ST_BF16;
    rc = train_st_load(&f, slots, 6, &e);
    tu_check(rc == TRAIN_IO_ERR_DTYPE && strstr(e.msg, "F32"), "dtype mismatch: %s", e.msg);
    slots[1].dtype = TRAIN_ST_F32;
    rc = train_st_load(&f, slots, 5, &e);
    tu_check(rc == TRAIN_IO_ERR_TENSOR && strstr(e.msg, "scalar"), "extra tensor: %s", e.msg);
    slots[5].name = "layers.1.W";
    rc = train_st_load(&f, slots, 6, &e);
    tu_check(rc == TRAIN_IO_ERR_TENSOR && strstr(e.msg, "layers.1.W") && strstr(e.msg, "missing"),
             "missing tensor: %s", e.msg);
    train_st_free(&f);

    /* refused writes */
    train_st_tensor dup[] = {{"x", TRAIN_ST_F32, 1, {5}, bias, 0},
                             {"x", TRAIN_ST_F32, 1, {5}, bias, 0}};
    tu_check(train_st_write(tpath("dup.safetensors"), dup, 2, NULL, 0, &e) == TRAIN_IO_ERR_ARG,
             "writer refuses duplicate names: %s", e.msg);
    train_st_tensor neg[] = {{"x", TRAIN_ST_F32, 1, {-1}, bias, 0}};
    tu_check(train_st_write(tpath("neg.safetensors"), neg, 1, NULL, 0, &e) == TRAIN_IO_ERR_ARG,
             "writer refuses a negative size: %s", e.msg);

    /* every truncation of a valid file */
    int all = 1;
    for (int64_t k = 0; k < n; k++) {
        train_st_file g;
        rc = train_st_parse(&g, raw, k, "cut", &e);
        train_io_code want = k == 0 ? TRAIN_IO_ERR_EMPTY : TRAIN_IO_ERR_TRUNCATED;
        if (rc != (int)want) {
            all = 0;
            printf("        cut at %lld: %s\n", (long long)k, e.msg);
        }
        train_st_free(&g);
    }
    tu_check(all, "all %lld truncations: empty or truncated", (long long)n);

    /* random corruption: never a crash, never accepted with a tensor out of
     * the buffer */
    uint8_t *copy = tu_malloc((size_t)n);
    int sane = 1;
    for (int k = 0; k < 3000; k++) {
        memcpy(copy, raw, (size_t)n);
        int flips = 1 + (int)(tu_next() % 4);
        for (int j = 0; j < flips; j++)
            copy[tu_next() % (uint64_t)n] ^= (uint8_t)(1 + tu_next() % 255);
        train_st_file g;
        if (train_st_parse(&g, copy, n, "flip", &e) == 0) {
            for (int64_t i = 0; i < g.n_tensors; i++) {
                const uint8_t *p = g.tensors[i].data;
                sane &= p >= copy && p + g.tensors[i].nbytes <= copy + n;
            }
        }
        train_st_free(&g);
    }
    tu_check(sane, "3000 randomly corrupted copies: parsed or refused, data always in bounds");
    free(copy);
    free(raw);

    /* each class of bad file, with its own error */
    const char *hdr_ok = "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}";
    const float two[2] = {1, 2};
    write_st("ok.safetensors", hdr_ok, two, 8);
    expect_st("ok.safetensors", TRAIN_IO_OK, NULL);
    expect_st("missing.safetensors", TRAIN_IO_ERR_OPEN, "cannot open");
    write_bytes(tpath("empty.safetensors"), "", 0);
    expect_st("empty.safetensors", TRAIN_IO_ERR_EMPTY, "empty");
    write_bytes(tpath("short.safetensors"), "\x10\0\0", 3);
    expect_st("short.safetensors", TRAIN_IO_ERR_TRUNCATED, "too short");
    {
        uint8_t b[16] = {0};
        train_put_u64(b, (uint64_t)1 << 62);
        write_bytes(tpath("absurd.safetensors"), b, 16);
        train_put_u64(b, UINT64_MAX);
        write_bytes(tpath("overflow.safetensors"), b, 16);
        train_put_u64(b, 1000);
        write_bytes(tpath("hdrcut.safetensors"), b, 16);
        train_put_u64(b, 0);
        write_bytes(tpath("nohdr.safetensors"), b, 8);
    }
    expect_st("absurd.safetensors", TRAIN_IO_ERR_SIZE, "absurd");
    expect_st("overflow.safetensors", TRAIN_IO_ERR_SIZE, "absurd");
    expect_st("hdrcut.safetensors", TRAIN_IO_ERR_TRUNCATED, "1000 bytes of JSON");
    expect_st("nohdr.safetensors", TRAIN_IO_ERR_JSON, "empty");
    write_st("badjson.safetensors", "{\"a\":{\"dtype\":\"F32\",}}", NULL, 0);
    expect_st("badjson.safetensors", TRAIN_IO_ERR_JSON, "at byte");
    write_st("array.safetensors", "[1,2]", NULL, 0);
    expect_st("array.safetensors", TRAIN_IO_ERR_JSON, "not an object");
    write_st("metanum.safetensors", "{\"__metadata__\":{\"k\":1}}", NULL, 0);
    expect_st("metanum.safetensors", TRAIN_IO_ERR_JSON, "not a string");
    write_st("dtype.safetensors",
             "{\"a\":{\"dtype\":\"F33\",\"shape\":[2],\"data_offsets\":[0,8]}}", two, 8);
    expect_st("dtype.safetensors", TRAIN_IO_ERR_DTYPE, "F33");
    write_st("negshape.safetensors",
             "{\"a\":{\"dtype\":\"F32\",\"shape\":[-2],\"data_offsets\":[0,8]}}", two, 8);
    expect_st("negshape.safetensors", TRAIN_IO_ERR_JSON, "shape");
    write_st("fracshape.safetensors",
             "{\"a\":{\"dtype\":\"F32\",\"shape\":[2.0],\"data_offsets\":[0,8]}}", two, 8);
    expect_st("fracshape.safetensors", TRAIN_IO_ERR_JSON, "shape");
    write_st("bigshape.safetensors",
             "{\"a\":{\"dtype\":\"F32\",\"shape\":[4611686018427387904,4],\"data_offsets\":[0,8]}}",
             two, 8);
    expect_st("bigshape.safetensors", TRAIN_IO_ERR_SIZE, "overflows");
    write_st("nodims.safetensors",
             "{\"a\":{\"dtype\":\"F32\",\"shape\":[1,1,1,1,1,1,1,1,1],\"data_offsets\":[0,4]}}",
             two, 4);
    expect_st("nodims.safetensors", TRAIN_IO_ERR_JSON, "at most 8");
    write_st("missingfield.safetensors", "{\"a\":{\"dtype\":\"F32\",\"shape\":[2]}}", two, 8);
    expect_st("missingfield.safetensors", TRAIN_IO_ERR_JSON, "data_offsets");
    write_st("extrafield.safetensors",
             "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8],\"x\":1}}", two, 8);
    expect_st("extrafield.safetensors", TRAIN_IO_ERR_JSON, "unknown field");
    write_st("backwards.safetensors",
             "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,0]}}", two, 8);
    expect_st("backwards.safetensors", TRAIN_IO_ERR_OFFSETS, "not an interval");
    write_st("span.safetensors", "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,8]}}",
             two, 8);
    expect_st("span.safetensors", TRAIN_IO_ERR_OFFSETS, "span 8 bytes");
    write_st("beyond.safetensors",
             "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}", two, 8);
    expect_st("beyond.safetensors", TRAIN_IO_ERR_TRUNCATED, "ends at data byte 12");
    write_st("hugeoff.safetensors",
             "{\"a\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[9223372036854775806,"
             "9223372036854775807]}}",
             two, 8);
    expect_st("hugeoff.safetensors", TRAIN_IO_ERR_TRUNCATED, "ends at data byte");
    write_st("overlap.safetensors",
             "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
             "\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}", two, 8);
    expect_st("overlap.safetensors", TRAIN_IO_ERR_OFFSETS, "overlap");
    write_st("gap.safetensors", "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}",
             two, 8);
    expect_st("gap.safetensors", TRAIN_IO_ERR_OFFSETS, "gap");
    write_st("trailing.safetensors",
             "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", two, 8);
    expect_st("trailing.safetensors", TRAIN_IO_ERR_SIZE, "after the last tensor");
    write_st("dupkey.safetensors",
             "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
             "\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}", two, 8);
    expect_st("dupkey.safetensors", TRAIN_IO_ERR_JSON, "duplicate");
    mkdir(tpath("dir.safetensors"), 0755);
    expect_st("dir.safetensors", TRAIN_IO_ERR_OPEN, "directory");
}

/* ------------------------------------------------------------------------ */
/* Training state and crash-safe writes                                     */

static void expect_state(const char *name, train_io_code want, const char *want_msg)
{
    train_state s;
    train_err e = {0, ""};
    int rc = train_state_read(&s, tpath(name), &e);
    int ok = rc == (int)want && strstr(e.msg, name) && (!want_msg || strstr(e.msg, want_msg));
    tu_check(ok, "%-16s -> %s: %s", name, train_io_code_name(want), e.msg);
    if (!ok) printf("        got code %d\n", rc);
    train_state_free(&s);
}

typedef struct half_writer {
    int fail;
} half_writer;

static int write_half(FILE *f, void *ctx, train_err *e)
{
    half_writer *h = ctx;
    fputs("NEW CONTENT, first half", f);
    fflush(f);
    if (h->fail) return train_err_set(e, TRAIN_IO_ERR_WRITE, "simulated failure halfway");
    fputs(" and second half", f);
    return 0;
}

static void test_state(void)
{
    printf("-- training state\n");
    const int64_t P = 1000 + (int64_t)(tu_next() % 1000);
    train_state s = {0};
    s.config_hash = tu_next();
    s.step = 12345;
    s.tokens = (int64_t)1 << 40;
    train_sampler_init(&s.sampler, tu_next());
    for (int i = 0; i < 17; i++) train_rng_next(&s.sampler.rng);
    s.sampler.batches = 12345;
    s.sampler.pos = 777;
    train_rng_seed(&s.rng, tu_next());
    s.best_val_loss = 1.2345678901234567;
    s.n_params = P;
    s.m = tu_malloc((size_t)P * 4);
    s.v = tu_malloc((size_t)P * 4);
    tu_fill_f32(s.m, P, -1, 1);
    tu_fill_f32(s.v, P, 0, 1);
    s.m[0] = -0.0f;
    s.v[1] = INFINITY;
    char path[1024];
    snprintf(path, sizeof path, "%s", tpath("run.state"));
    train_err e;
    int rc = train_state_write(path, &s, &e);
    train_state r;
    int rc2 = train_state_read(&r, path, &e);
    tu_check(rc == 0 && rc2 == 0 && r.config_hash == s.config_hash && r.step == s.step &&
                 r.tokens == s.tokens && r.sampler.batches == 12345 && r.sampler.pos == 777 &&
                 !memcmp(&r.sampler.rng, &s.sampler.rng, sizeof r.rng) &&
                 !memcmp(&r.rng, &s.rng, sizeof r.rng) && r.best_val_loss == s.best_val_loss &&
                 r.n_params == P && !memcmp(r.m, s.m, (size_t)P * 4) &&
                 !memcmp(r.v, s.v, (size_t)P * 4),
             "round trip of %lld moments, counters and both generators: bit exact", (long long)P);
    tu_check(train_rng_next(&r.sampler.rng) == train_rng_next(&s.sampler.rng),
             "restored data generator continues identically");
    tu_check(train_state_check(&r, path, s.config_hash, P, &e) == 0 &&
                 train_state_check(&r, path, s.config_hash ^ 1, P, &e) == TRAIN_IO_ERR_CONFIG &&
                 strstr(e.msg, "different model") &&
                 train_state_check(&r, path, s.config_hash, P + 1, &e) == TRAIN_IO_ERR_CONFIG,
             "state check: config hash and parameter count must match");
    train_state_free(&r);

    int64_t n;
    uint8_t *raw = read_bytes(path, &n);
    tu_check(n == TRAIN_STATE_HEADER + 8 * P + 8 && !memcmp(raw, "PRNNSTAT", 8),
             "file size is header + 8 P + checksum");
    int all = 1;
    for (int64_t k = 0; k < n; k += k < 300 ? 1 : 97) {
        train_state g;
        rc = train_state_parse(&g, raw, k, "cut", &e);
        train_io_code want = k == 0 ? TRAIN_IO_ERR_EMPTY : TRAIN_IO_ERR_TRUNCATED;
        if (rc != (int)want) {
            all = 0;
            printf("        cut at %lld: %s\n", (long long)k, e.msg);
        }
        train_state_free(&g);
    }
    tu_check(all, "truncations (every length to 300, then every 97th): empty or truncated");

    int caught = 1;
    for (int k = 0; k < 500; k++) {
        int64_t at = (int64_t)(tu_next() % (uint64_t)n);
        uint8_t old = raw[at];
        raw[at] ^= (uint8_t)(1 + tu_next() % 255);
        train_state g;
        rc = train_state_parse(&g, raw, n, "flip", &e);
        caught &= rc != 0;
        train_state_free(&g);
        raw[at] = old;
    }
    tu_check(caught, "500 single-byte corruptions: every one refused");

    uint8_t *bad = tu_malloc((size_t)n + 1);
    memcpy(bad, raw, (size_t)n);
    bad[0] = 'X';
    write_bytes(tpath("magic.state"), bad, (size_t)n);
    memcpy(bad, raw, (size_t)n);
    train_put_u32(bad + 8, 2);
    write_bytes(tpath("version.state"), bad, (size_t)n);
    memcpy(bad, raw, (size_t)n);
    train_put_u64(bad + 128, (uint64_t)1 << 50);
    write_bytes(tpath("absurd.state"), bad, (size_t)n);
    memcpy(bad, raw, (size_t)n);
    train_put_u64(bad + 128, UINT64_MAX);
    write_bytes(tpath("negative.state"), bad, (size_t)n);
    memcpy(bad, raw, (size_t)n);
    bad[n] = 0;
    write_bytes(tpath("trailing.state"), bad, (size_t)n + 1);
    memcpy(bad, raw, (size_t)n);
    bad[TRAIN_STATE_HEADER + 5] ^= 0x40;
    write_bytes(tpath("moment.state"), bad, (size_t)n);
    memcpy(bad, raw, (size_t)n);
    bad[24] ^= 1; /* the step */
    write_bytes(tpath("step.state"), bad, (size_t)n);
    memcpy(bad, raw, (size_t)n);
    memset(bad + 56, 0, 32);
    train_put_u64(bad + n - 8, train_fnv1a64(TRAIN_FNV1A64_INIT, bad, n - 8));
    write_bytes(tpath("zerorng.state"), bad, (size_t)n);
    memcpy(bad, raw, (size_t)n);
    train_put_u64(bad + 24, (uint64_t)-5);
    train_put_u64(bad + n - 8, train_fnv1a64(TRAIN_FNV1A64_INIT, bad, n - 8));
    write_bytes(tpath("negstep.state"), bad, (size_t)n);
    write_bytes(tpath("empty.state"), "", 0);
    write_bytes(tpath("prefix.state"), "PRNN", 4);
    expect_state("missing.state", TRAIN_IO_ERR_OPEN, "cannot open");
    expect_state("empty.state", TRAIN_IO_ERR_EMPTY, "empty");
    expect_state("prefix.state", TRAIN_IO_ERR_TRUNCATED, "truncated");
    expect_state("magic.state", TRAIN_IO_ERR_MAGIC, "PRNNSTAT");
    expect_state("version.state", TRAIN_IO_ERR_VERSION, "version 2");
    expect_state("absurd.state", TRAIN_IO_ERR_SIZE, "absurd");
    expect_state("negative.state", TRAIN_IO_ERR_SIZE, "absurd");
    expect_state("trailing.state", TRAIN_IO_ERR_SIZE, "1 more");
    expect_state("moment.state", TRAIN_IO_ERR_CHECKSUM, "checksum");
    expect_state("step.state", TRAIN_IO_ERR_CHECKSUM, "checksum");
    expect_state("zerorng.state", TRAIN_IO_ERR_VALUE, "all zero");
    expect_state("negstep.state", TRAIN_IO_ERR_VALUE, "negative");
    free(bad);

    /* crash safety: a failed write leaves the old file as it was */
    train_state broken = s;
    broken.v = NULL;
    rc = train_state_write(path, &broken, &e);
    int64_t n2;
    uint8_t *after = read_bytes(path, &n2);
    tu_check(rc == TRAIN_IO_ERR_ARG && n2 == n && !memcmp(after, raw, (size_t)n),
             "refused state write leaves the old file intact");
    free(after);

    char target[1024];
    snprintf(target, sizeof target, "%s", tpath("atomic.txt"));
    write_bytes(target, "OLD", 3);
    half_writer hw = {1};
    rc = train_atomic_write(target, write_half, &hw, &e);
    after = read_bytes(target, &n2);
    tu_check(rc == TRAIN_IO_ERR_WRITE && n2 == 3 && !memcmp(after, "OLD", 3) &&
                 count_temporaries(tmpdir) == 0,
             "write failing halfway: old file intact, no temporary left (%s)", e.msg);
    free(after);
    hw.fail = 0;
    rc = train_atomic_write(target, write_half, &hw, &e);
    after = read_bytes(target, &n2);
    tu_check(rc == 0 && n2 == 39 && !memcmp(after, "NEW CONTENT", 11) &&
                 count_temporaries(tmpdir) == 0,
             "successful write replaces the file whole");
    free(after);
    rc = train_atomic_write(tpath("no/such/dir/file"), write_half, &hw, &e);
    tu_check(rc == TRAIN_IO_ERR_WRITE && strstr(e.msg, "no/such/dir/file"),
             "write into a missing directory: %s", e.msg);

    free(raw);
    free(s.m);
    free(s.v);
}

/* ------------------------------------------------------------------------ */
/* Options as checkpoint metadata                                           */

static void test_metadata(void)
{
    printf("-- configuration in checkpoint metadata\n");
    train_options o;
    char err[512];
    int rc =
        parse_words(&o, TRAIN_CMD_TRAIN,
                    "--cell sru --layers 3 --hidden 64 --norm layer --dropout 0.25 --data a.txt "
                    "--data b.txt --val-frac 0.125 --seq-len 77 --seed 99 --data-order sequential",
                    err, sizeof err);
    train_meta m = {0};
    rc |= train_options_metadata(&o, &m);
    rc |= train_meta_set(&m, "step", "500");
    float x[3] = {1, 2, 3};
    train_st_tensor t = {"w", TRAIN_ST_F32, 1, {3}, x, 0};
    train_err e;
    const char *path = tpath("cfg.safetensors");
    rc |= train_st_write(path, &t, 1, m.kv, m.n, &e);
    train_meta_free(&m);
    train_st_file f;
    rc |= train_st_read(&f, path, &e);
    train_options s;
    rc |= parse_words(&s, TRAIN_CMD_SAMPLE, "--length 10", err, sizeof err);
    rc |= train_options_from_checkpoint(&s, &f, &e);
    tu_check(rc == 0 && s.cell == PRNN_CELL_SRU && s.layers == 3 && s.hidden == 64 &&
                 s.norm == PRNN_NORM_LAYER && s.dropout == 0.25 && s.task == TRAIN_TASK_TEXT &&
                 s.n_data == 2 && !strcmp(s.data[0], "a.txt") && !strcmp(s.data[1], "b.txt") &&
                 s.val_frac == 0.125 && s.seq_len == 77 && s.seed == 99 &&
                 s.order == TRAIN_ORDER_SEQUENTIAL &&
                 train_options_model_hash(&s) == train_options_model_hash(&o) &&
                 !strcmp(train_st_meta(&f, "step"), "500"),
             "train options -> metadata -> sample options: the same model and data");
    train_options_free(&s);
    rc = parse_words(&s, TRAIN_CMD_EVAL, "--seq-len 5 --data held.txt", err, sizeof err);
    rc |= train_options_from_checkpoint(&s, &f, &e);
    tu_check(rc == 0 && s.seq_len == 5 && s.n_data == 1 && !strcmp(s.data[0], "held.txt") &&
                 s.val_frac == 1.0 && s.hidden == 64,
             "eval: the command line's --seq-len and --data win over the checkpoint's");
    train_options_free(&s);
    train_st_free(&f);

    train_kv bad[] = {{"format", "prnn"}, {"format_version", "1"}, {"cell", "mingru"},
                      {"layers", "0"}};
    train_st_write(tpath("badmeta.safetensors"), &t, 1, bad, 4, &e);
    train_st_read(&f, tpath("badmeta.safetensors"), &e);
    train_options_default(&s, TRAIN_CMD_SAMPLE);
    rc = train_options_from_checkpoint(&s, &f, &e);
    tu_check(rc == TRAIN_IO_ERR_VALUE && strstr(e.msg, "'layers' = '0'"), "bad metadata value: %s",
             e.msg);
    train_st_free(&f);
    train_st_write(tpath("foreign.safetensors"), &t, 1, NULL, 0, &e);
    train_st_read(&f, tpath("foreign.safetensors"), &e);
    rc = train_options_from_checkpoint(&s, &f, &e);
    tu_check(rc == TRAIN_IO_ERR_CONFIG && strstr(e.msg, "not a prnn checkpoint"),
             "foreign safetensors file: %s", e.msg);
    train_st_free(&f);
    train_options_free(&s);
    train_options_free(&o);
}

/* ------------------------------------------------------------------------ */
/* Log                                                                      */

static void test_log(void)
{
    printf("-- log\n");
    const char *path = tpath("log.tsv");
    train_log l;
    train_err e;
    int rc = train_log_open(&l, path, 0, "test run", &e);
    rc |= train_log_step(&l, 1, log(256.0), 1.5, 6e-5, 48.25, 42000, &e);
    rc |= train_log_eval(&l, 1, 2.0, &e);
    rc |= train_log_close(&l, &e);
    rc |= train_log_open(&l, path, 1, "resumed at 1", &e);
    rc |= train_log_step(&l, 2, 5.0, 1.0, 1e-4, 40, 50000, &e);
    rc |= train_log_close(&l, &e);
    int64_t n;
    char *text = (char *)read_bytes(path, &n);
    int headers = 0, rows = 0, fields_ok = 1;
    for (char *line = strtok(text, "\n"); line; line = strtok(NULL, "\n")) {
        if (line[0] == '#') continue;
        if (!strncmp(line, "step\t", 5)) {
            headers++;
            continue;
        }
        int tabs = 0;
        for (char *p = line; *p; p++) tabs += *p == '\t';
        fields_ok &= tabs == 7;
        rows++;
    }
    tu_check(rc == 0 && headers == 1 && rows == 3 && fields_ok,
             "log: one header, 3 rows of 8 tab-separated fields, appended on resume");
    free(text);
    text = (char *)read_bytes(path, &n);
    tu_check(strstr(text, "1\ttrain\t5.545177\t8.000000\t1.5\t6e-05\t48.250\t42000.0") &&
                 strstr(text, "1\tval\t2.000000\t2.885390\t-\t-\t-\t-"),
             "row contents (loss, bits per byte, grad norm, lr, ms, tok/s)");
    free(text);
    rc = train_log_open(&l, tpath("no/dir/log.tsv"), 0, NULL, &e);
    tu_check(rc == TRAIN_IO_ERR_OPEN && strstr(e.msg, "no/dir/log.tsv"), "unwritable log: %s",
             e.msg);

    char b[160];
    tu_check(!strcmp(train_fmt_duration(b, sizeof b, 45.2), "45s") &&
                 !strcmp(train_fmt_duration(b, sizeof b, 185), "3m05s") &&
                 !strcmp(train_fmt_duration(b, sizeof b, 7620), "2h07m") &&
                 !strcmp(train_fmt_duration(b, sizeof b, 273600), "3d04h") &&
                 !strcmp(train_fmt_duration(b, sizeof b, -1), "?") &&
                 !strcmp(train_fmt_duration(b, sizeof b, NAN), "?"),
             "durations: 45s, 3m05s, 2h07m, 3d04h, ?");
    tu_check(!strcmp(train_fmt_si(b, sizeof b, 950), "950") &&
                 !strcmp(train_fmt_si(b, sizeof b, 40012), "40.0k") &&
                 !strcmp(train_fmt_si(b, sizeof b, 1.5e6), "1.50M") &&
                 !strcmp(train_fmt_si(b, sizeof b, 999.7), "1.00k"),
             "SI counts: 950, 40.0k, 1.50M, 1.00k");
    train_progress p = {120, 1000, 2.34567, 0.8123, 2.94e-3, 51.2, 40012, 6.0, 120};
    train_fmt_progress(b, sizeof b, &p);
    tu_check(strstr(b, "step  120/1000") && strstr(b, "loss 2.3457") && strstr(b, "gnorm 0.812") &&
                 strstr(b, "lr 2.94e-03") && strstr(b, "51.2 ms") && strstr(b, "40.0k tok/s") &&
                 strstr(b, "eta 44s"),
             "progress line: %s", b);
    train_fmt_eval(b, sizeof b, 1000, 1.0);
    tu_check(strstr(b, "1.4427 bits/byte") == NULL && strstr(b, "1.443 bits/byte"), "eval line: %s",
             b);
}

/* ------------------------------------------------------------------------ */
/* Sampling                                                                 */

static void test_sampling(void)
{
    printf("-- sampling\n");
    float logits[256];
    tu_fill_f32(logits, 256, -3, 3);
    int64_t argmax = 0;
    for (int i = 1; i < 256; i++) argmax = logits[i] > logits[argmax] ? i : argmax;
    train_rng r;
    train_rng_seed(&r, tu_next());
    tu_check(train_sample_token(logits, 256, 0.0, 0, &r) == argmax &&
                 train_sample_token(logits, 256, 1.0, 1, &r) == argmax,
             "temperature 0 and top-k 1 take the largest logit (%lld)", (long long)argmax);

    /* 4 logits, temperature 0.5: frequencies of 40000 draws against softmax;
     * binomial sd <= 100, so 5 sd = 500 draws */
    const float four[4] = {0.0f, 0.5f, -1.0f, 0.25f};
    int64_t count[4] = {0};
    for (int i = 0; i < 40000; i++) {
        int64_t t = train_sample_token(four, 4, 0.5, 0, &r);
        if (t >= 0 && t < 4) count[t]++;
    }
    double z = 0, worst = 0;
    for (int i = 0; i < 4; i++) z += exp(four[i] / 0.5);
    for (int i = 0; i < 4; i++) {
        double d = fabs((double)count[i] - 40000 * exp(four[i] / 0.5) / z);
        worst = d > worst ? d : worst;
    }
    tu_check(worst < 500, "draws follow softmax(logits / T): worst deviation %.0f of 40000", worst);

    int inside = 1;
    int64_t hits[256] = {0};
    for (int i = 0; i < 20000; i++) {
        int64_t t = train_sample_token(logits, 256, 2.0, 5, &r);
        int rank = 0;
        for (int j = 0; j < 256 && t >= 0; j++) rank += logits[j] > logits[t];
        inside &= t >= 0 && rank < 5;
        if (t >= 0) hits[t]++;
    }
    int distinct = 0;
    for (int i = 0; i < 256; i++) distinct += hits[i] > 0;
    tu_check(inside && distinct == 5, "top-k 5 draws only among the 5 largest (%d seen)", distinct);

    float odd[3] = {NAN, -INFINITY, 1.0f};
    float none[2] = {NAN, -INFINITY};
    int odd_ok = 1;
    for (int i = 0; i < 100; i++) odd_ok &= train_sample_token(odd, 3, 1.0, 0, &r) == 2;
    tu_check(odd_ok && train_sample_token(none, 2, 1.0, 0, &r) == -1 &&
                 train_sample_token(logits, 256, -1.0, 0, &r) == -1 &&
                 train_sample_token(logits, 0, 1.0, 0, &r) == -1,
             "NaN counts as -inf; nothing finite, negative temperature or V = 0 give -1");
}

int main(void)
{
    uint64_t seed = tu_seed_from_env();
    printf("seed: %llu (set PRNN_TEST_SEED to repeat)\n", (unsigned long long)seed);
    tu_seed(seed);
    const char *base = getenv("TMPDIR");
    snprintf(tmpdir, sizeof tmpdir, "%s/prnn_test_train_io.XXXXXX", base && *base ? base : "/tmp");
    if (!mkdtemp(tmpdir)) {
        fprintf(stderr, "test: cannot create a directory under %s\n", base ? base : "/tmp");
        return 2;
    }
    test_rng();
    test_options();
    test_text_data();
    test_synthetic();
    test_text();
    test_json();
    test_safetensors();
    test_state();
    test_metadata();
    test_log();
    test_sampling();
    nftw(tmpdir, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
    return tu_finish();
}
