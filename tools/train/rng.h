/*
 * rng.h - the trainer's random numbers: xoshiro256** seeded through
 * splitmix64. The whole state is four 64-bit words, saved and restored
 * exactly (train_rng_save / train_rng_load), so a resumed run draws the same
 * batches an uninterrupted one would have.
 */
#ifndef PRNN_TRAIN_RNG_H
#define PRNN_TRAIN_RNG_H

#include <stdint.h>

#define TRAIN_RNG_BYTES 32 /* serialized size */

typedef struct train_rng {
    uint64_t s[4];
} train_rng;

/* Seeds from any 64-bit value (0 included). */
void train_rng_seed(train_rng *r, uint64_t seed);

/* Seeds a stream derived from (seed, stream): independent generators for
 * different purposes (training data, evaluation example i, ...). */
void train_rng_seed2(train_rng *r, uint64_t seed, uint64_t stream);

uint64_t train_rng_next(train_rng *r);

/* Uniform in [0, n), unbiased; n = 0 returns 0. */
uint64_t train_rng_below(train_rng *r, uint64_t n);

/* Uniform in [0, 1) with 53 random bits. */
double train_rng_uniform(train_rng *r);

/* Little-endian bytes of the state; load returns -1 for the all-zero state,
 * which xoshiro can never reach and which would stay zero forever. */
void train_rng_save(const train_rng *r, uint8_t out[TRAIN_RNG_BYTES]);
int train_rng_load(train_rng *r, const uint8_t in[TRAIN_RNG_BYTES]);

#endif /* PRNN_TRAIN_RNG_H */
