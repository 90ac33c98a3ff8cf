/*
 * fuzz_safetensors.c - libFuzzer target: any bytes as a safetensors file.
 * The parser must refuse or accept without reading out of bounds, and what it
 * accepts must be consistent: every tensor inside the buffer, tiling the data
 * section, and loadable. Accepted files also go through the checkpoint
 * metadata reader (train_options_from_checkpoint), which must not crash on
 * any metadata either.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "ckpt.h"
#include "options.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    train_st_file f;
    train_err e;
    /* a copy of exactly size bytes, so that ASan sees any read past the end */
    uint8_t *buf = malloc(size ? size : 1);
    if (!buf) return 0;
    if (size) memcpy(buf, data, size);
    if (train_st_parse(&f, buf, (int64_t)size, "fuzz", &e) == 0) {
        int64_t total = 0;
        for (int64_t i = 0; i < f.n_tensors; i++) {
            const train_st_tensor *t = &f.tensors[i];
            const uint8_t *p = t->data;
            if (p < buf || t->nbytes < 0 || p + t->nbytes > buf + size) abort();
            if (t->ndim < 0 || t->ndim > TRAIN_ST_MAX_DIMS) abort();
            total += t->nbytes;
            if (train_st_find(&f, t->name) == NULL) abort();
        }
        if (total > (int64_t)size) abort();
        /* load everything the file holds into scratch memory, with its own
         * table as the model's */
        train_st_slot *slots = calloc((size_t)(f.n_tensors ? f.n_tensors : 1), sizeof *slots);
        if (slots) {
            int64_t cap = 1 << 20, used = 0;
            for (int64_t i = 0; i < f.n_tensors; i++) {
                slots[i].name = f.tensors[i].name;
                slots[i].dtype = f.tensors[i].dtype;
                slots[i].ndim = f.tensors[i].ndim;
                memcpy(slots[i].shape, f.tensors[i].shape, sizeof slots[i].shape);
                if (used + f.tensors[i].nbytes <= cap) {
                    slots[i].dst = malloc((size_t)(f.tensors[i].nbytes ? f.tensors[i].nbytes : 1));
                    used += f.tensors[i].nbytes;
                }
            }
            if (train_st_load(&f, slots, f.n_tensors, &e) != 0) abort();
            for (int64_t i = 0; i < f.n_tensors; i++) free(slots[i].dst);
            free(slots);
        }
        train_options o;
        train_options_default(&o, TRAIN_CMD_SAMPLE);
        (void)train_options_from_checkpoint(&o, &f, &e);
        train_options_free(&o);
        train_st_free(&f);
    }
    free(buf);
    return 0;
}
