/*
 * sample.c - temperature and top-k sampling from logits (sample.h).
 *
 * Size letters: V vocabulary.
 */
#include "sample.h"

#include <math.h>
#include <stdlib.h>

typedef struct cand {
    float logit; /* NaN already mapped to -inf */
    int64_t index;
} cand;

/* Larger logit first, then lower index, so that top-k is the same set on
 * every machine. */
static int by_logit(const void *a, const void *b)
{
    const cand *x = a, *y = b;
    if (x->logit != y->logit) return x->logit > y->logit ? -1 : 1;
    return (x->index > y->index) - (x->index < y->index);
}

static float clean(float x) { return isnan(x) ? -INFINITY : x; }

int64_t train_sample_token(const float *logits, int64_t V, double temperature, int64_t top_k,
                           train_rng *r)
{
    if (!logits || V < 1 || !(temperature >= 0) || !isfinite(temperature)) return -1;
    int64_t best = -1;
    for (int64_t i = 0; i < V; i++) {
        float x = clean(logits[i]);
        if (isfinite(x) && (best < 0 || x > clean(logits[best]))) best = i;
    }
    if (best < 0) return -1;
    if (temperature == 0.0 || top_k == 1 || !r) return best;

    const double max = clean(logits[best]);
    if (top_k <= 0 || top_k >= V) {
        double total = 0.0;
        for (int64_t i = 0; i < V; i++) total += exp((clean(logits[i]) - max) / temperature);
        double u = train_rng_uniform(r) * total, acc = 0.0;
        int64_t last = best;
        for (int64_t i = 0; i < V; i++) {
            double p = exp((clean(logits[i]) - max) / temperature);
            if (p > 0) last = i;
            acc += p;
            if (u < acc) return i;
        }
        return last; /* rounding left u at the very top */
    }

    /* top-k: sort the candidates (V is small: 256 for bytes) */
    cand stack[1024];
    cand *c = V <= 1024 ? stack : malloc((size_t)V * sizeof *c);
    if (!c) return best;
    for (int64_t i = 0; i < V; i++) c[i].logit = clean(logits[i]), c[i].index = i;
    qsort(c, (size_t)V, sizeof *c, by_logit);
    double total = 0.0;
    for (int64_t k = 0; k < top_k; k++) total += exp((c[k].logit - max) / temperature);
    double u = train_rng_uniform(r) * total, acc = 0.0;
    int64_t pick = c[0].index;
    for (int64_t k = 0; k < top_k; k++) {
        double p = exp((c[k].logit - max) / temperature);
        if (p > 0) pick = c[k].index;
        acc += p;
        if (u < acc) {
            pick = c[k].index;
            break;
        }
    }
    if (c != stack) free(c);
    return pick;
}
