/*
 * fuzz_data.c - libFuzzer target for what faces the user on the command line
 * and what the trainer feeds the model: the input is split at NUL bytes into
 * the arguments of `prnn train | sample | eval` (the first byte picks the
 * subcommand). The parser must never crash and must either fail with a
 * message or give options inside their documented ranges. Accepted options
 * of a synthetic task, with the sizes cut down, then generate training and
 * evaluation batches, whose rows are checked to be well formed.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "data.h"
#include "options.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check_batch(const train_batch *b)
{
    int64_t counted = 0;
    for (int64_t i = 0; i < b->B * b->T; i++) {
        if (b->x[i] < 0 || b->x[i] > 255) abort();
        if (b->mask[i] > 1) abort();
        if (b->mask[i] ? (b->y[i] < 0 || b->y[i] > 255) : b->y[i] != -1) abort();
        if (b->mask[i] && i % b->T + 1 < b->T && b->y[i] != b->x[i + 1]) abort();
        counted += b->mask[i];
    }
    if (counted != b->n_counted) abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1 || size > 4096) return 0;
    train_command cmd = (train_command)(data[0] % TRAIN_CMD_COUNT_);
    char *buf = malloc(size);
    char *argv[1024];
    int argc = 0;
    if (!buf) return 0;
    memcpy(buf, data + 1, size - 1);
    buf[size - 1] = 0;
    for (size_t i = 0; i < size - 1 && argc < 1024;) {
        argv[argc++] = buf + i;
        i += strlen(buf + i) + 1;
    }
    train_options o;
    char err[512];
    err[0] = 0;
    int rc = train_options_parse(&o, cmd, argc, argv, err, sizeof err);
    if (rc == TRAIN_OPTS_ERROR && !err[0]) abort();
    if (rc == TRAIN_OPTS_OK) {
        if (o.layers < 1 || o.layers > 64 || o.hidden < 1 || o.hidden > 65536) abort();
        if (o.batch < 1 || o.lr <= 0 || o.min_lr > o.lr || o.top_k < 0 || o.top_k > 256) abort();
        if (o.dtype == PRNN_DTYPE_BF16 && o.device != PRNN_DEVICE_CUDA) abort();
        if (!o.model_path[0] || !o.state_path[0]) abort();
        (void)train_lr_at(&o, o.steps / 2);
        (void)train_options_model_hash(&o);
        train_meta m = {0};
        if (train_options_metadata(&o, &m) == 0 && m.n < 10) abort();
        train_meta_free(&m);
        if (cmd == TRAIN_CMD_TRAIN && train_task_is_synthetic(o.task)) {
            train_data_config c = train_options_data_config(&o);
            c.T = 4 + c.T % 512; /* keep each input fast */
            c.B = 1 + c.B % 4;
            train_data d;
            train_err e;
            if (train_data_open(&d, &c, &e) != 0) abort();
            train_batch b;
            train_sampler s;
            train_sampler_init(&s, o.seed);
            if (train_batch_init(&b, c.B, c.T) == 0) {
                if (train_data_next(&d, &s, &b) != 0) abort();
                check_batch(&b);
                if (train_data_eval(&d, (int64_t)(o.seed % 1000), &b) != 0) abort();
                check_batch(&b);
                train_batch_free(&b);
            }
            train_data_free(&d);
        }
    }
    train_options_free(&o);
    free(buf);
    return 0;
}
