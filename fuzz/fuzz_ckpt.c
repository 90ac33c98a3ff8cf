/*
 * fuzz_ckpt.c - libFuzzer target: any bytes as a training state file. The
 * reader must refuse or accept without reading out of bounds or allocating
 * more than the input justifies; what it accepts must say what it holds
 * (sizes matching the input, sane counters, usable generators).
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "ckpt.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    uint8_t *buf = malloc(size ? size : 1);
    if (!buf) return 0;
    if (size) memcpy(buf, data, size);
    train_state s;
    train_err e;
    if (train_state_parse(&s, buf, (int64_t)size, "fuzz", &e) == 0) {
        if (s.n_params < 0 || TRAIN_STATE_HEADER + 8 * s.n_params + 8 != (int64_t)size) abort();
        if (s.step < 0 || s.tokens < 0 || s.sampler.batches < 0 || s.sampler.pos < 0) abort();
        if (!(s.rng.s[0] | s.rng.s[1] | s.rng.s[2] | s.rng.s[3])) abort();
        if (s.n_params && (memcmp(s.m, buf + TRAIN_STATE_HEADER, 4) != 0)) abort();
        (void)train_rng_next(&s.sampler.rng);
        (void)train_state_check(&s, "fuzz", s.config_hash, s.n_params, &e);
        train_state_free(&s);
    } else if (s.m || s.v) {
        abort(); /* a refused file leaves nothing allocated */
    }
    free(buf);
    return 0;
}
