/*
 * sample.h - choosing the next byte from a model's logits for
 * `prnn sample`: temperature, top-k and a seeded draw, in plain C on the
 * host (the model's logits are copied down as floats first).
 */
#ifndef PRNN_TRAIN_SAMPLE_H
#define PRNN_TRAIN_SAMPLE_H

#include <stdint.h>

#include "rng.h"

/*
 * Draws a token in [0, V) with probability proportional to
 * exp(logits[i] / temperature) among the top_k largest logits (top_k = 0 or
 * >= V: all of them). temperature = 0 takes the largest logit (the lowest
 * index among equals) and draws nothing from r. NaN logits count as -inf.
 * Returns -1 when V < 1, temperature is negative or not finite, or no logit
 * is finite.
 *
 *   logits (V)  in
 */
int64_t train_sample_token(const float *logits, int64_t V, double temperature, int64_t top_k,
                           train_rng *r);

#endif /* PRNN_TRAIN_SAMPLE_H */
