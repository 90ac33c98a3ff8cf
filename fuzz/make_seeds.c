/*
 * make_seeds.c - writes the small seed corpora the fuzz targets start from:
 * valid files made by the real writers (so the fuzzer begins inside the
 * formats, not at random bytes) plus a few hand-made near misses.
 *
 *   make_seeds DIR     writes DIR/{safetensors,ckpt,json,data}/...
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "ckpt.h"
#include "options.h"

static char root[2048];

static void put(const char *target, const char *name, const void *data, size_t n)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/%s/%s", root, target, name);
    FILE *f = fopen(path, "wb");
    if (!f || (n && fwrite(data, 1, n, f) != n) || fclose(f)) {
        fprintf(stderr, "make_seeds: cannot write %s\n", path);
        exit(2);
    }
}

static void copy_file(const char *from, const char *target, const char *name)
{
    uint8_t *buf;
    int64_t n;
    train_err e;
    if (train_read_file(from, 1 << 24, &buf, &n, &e)) {
        fprintf(stderr, "make_seeds: %s\n", e.msg);
        exit(2);
    }
    put(target, name, buf, (size_t)n);
    free(buf);
}

/* Arguments separated by NUL, after a byte choosing the subcommand. */
static void put_args(const char *name, int cmd, const char *const *args, int n)
{
    char buf[1024];
    size_t k = 0;
    buf[k++] = (char)cmd;
    for (int i = 0; i < n; i++) {
        size_t l = strlen(args[i]) + 1;
        memcpy(buf + k, args[i], l);
        k += l;
    }
    put("data", name, buf, k - 1);
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: make_seeds DIR\n");
        return 2;
    }
    snprintf(root, sizeof root, "%s", argv[1]);
    const char *targets[] = {"safetensors", "ckpt", "json", "data"};
    train_err e;
    for (int i = 0; i < 4; i++) {
        char d[2100];
        snprintf(d, sizeof d, "%s/%s", root, targets[i]);
        if (train_make_dirs(d, &e)) {
            fprintf(stderr, "make_seeds: %s\n", e.msg);
            return 2;
        }
    }

    /* safetensors: a small model-like file with prnn metadata, and one bare */
    float w[4 * 3] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}, b[3] = {0.5f, -1, 2};
    uint16_t h[2] = {0x3f80, 0xc000};
    train_st_tensor t[] = {
        {"embed.weight", TRAIN_ST_F32, 2, {4, 3}, w, 0},
        {"layers.0.cell.fwd.bias", TRAIN_ST_F32, 1, {3}, b, 0},
        {"head.bf16", TRAIN_ST_BF16, 1, {2}, h, 0},
    };
    train_options o;
    train_options_default(&o, TRAIN_CMD_TRAIN);
    train_meta m = {0};
    if (train_options_metadata(&o, &m) || train_meta_set(&m, "step", "1000")) return 2;
    char tmp[2200];
    snprintf(tmp, sizeof tmp, "%s/seed.tmp", root);
    if (train_st_write(tmp, t, 3, m.kv, m.n, &e)) {
        fprintf(stderr, "make_seeds: %s\n", e.msg);
        return 2;
    }
    copy_file(tmp, "safetensors", "model");
    if (train_st_write(tmp, t, 1, NULL, 0, &e)) return 2;
    copy_file(tmp, "safetensors", "bare");
    train_meta_free(&m);

    /* training state with a few moments */
    float mo[5] = {0.1f, -0.2f, 0.3f, 0, 1e-8f}, vo[5] = {1e-4f, 2e-4f, 0, 1, 3};
    train_state s;
    memset(&s, 0, sizeof s);
    s.config_hash = train_options_model_hash(&o);
    s.step = 250;
    s.tokens = 250 * 2048;
    train_sampler_init(&s.sampler, 1);
    s.sampler.batches = 250;
    train_rng_seed(&s.rng, 2);
    s.best_val_loss = 1.5;
    s.n_params = 5;
    s.m = mo;
    s.v = vo;
    if (train_state_write(tmp, &s, &e)) return 2;
    copy_file(tmp, "ckpt", "state");
    s.n_params = 0;
    if (train_state_write(tmp, &s, &e)) return 2;
    copy_file(tmp, "ckpt", "empty_moments");
    remove(tmp);

    /* JSON */
    const char *js[] = {
        ("{\"__metadata__\":{\"format\":\"prnn\"},\"a\":{\"dtype\":\"F32\",\"shape\":[2,3],"
         "\"data_offsets\":[0,24]}}"),
        "[1, -2.5e3, true, false, null, \"x\\u00e9\\ud83d\\ude00\\n\", {}, []]",
        "{\"a\":{\"b\":{\"c\":[[[\"deep\"]]]}}}",
        "-9223372036854775808",
    };
    for (int i = 0; i < 4; i++) {
        char name[16];
        snprintf(name, sizeof name, "j%d", i);
        put("json", name, js[i], strlen(js[i]));
    }

    /* command lines */
    const char *a0[] = {"--task", "selective-copy", "--seq-len", "64", "--batch", "2"};
    const char *a1[] = {
        "--task=adding", "--seq-len=100", "--lr", "1e-3", "--warmup", "5", "--steps", "10"};
    const char *a2[] = {"--cell",          "gilr-lstm", "--hidden", "64",
                        "--bidirectional", "--data",    "x.txt"};
    const char *a3[] = {"--prompt", "Hello", "--temperature", "0.7", "--top-k", "5"};
    const char *a4[] = {"--data", "f.txt", "--seq-len", "256", "--eval-batches", "3"};
    const char *a5[] = {"--task", "delayed-recall", "--seq-len", "40", "--seed", "0x10"};
    put_args("train_copy", 0, a0, 6);
    put_args("train_adding", 0, a1, 8);
    put_args("train_text", 0, a2, 7);
    put_args("sample", 1, a3, 6);
    put_args("eval", 2, a4, 6);
    put_args("train_recall", 0, a5, 6);
    return 0;
}
