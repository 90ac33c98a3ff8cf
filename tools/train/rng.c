/*
 * rng.c - xoshiro256** (Blackman and Vigna) with splitmix64 seeding.
 */
#include "rng.h"

#include "fileio.h"

static uint64_t splitmix64(uint64_t *x)
{
    uint64_t z = (*x += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

void train_rng_seed(train_rng *r, uint64_t seed)
{
    uint64_t x = seed;
    for (int i = 0; i < 4; i++) r->s[i] = splitmix64(&x);
    /* splitmix64 is a bijection of its counter, so four consecutive outputs
     * are never all zero; the check keeps that promise visible. */
    if (!(r->s[0] | r->s[1] | r->s[2] | r->s[3])) r->s[0] = 1;
}

void train_rng_seed2(train_rng *r, uint64_t seed, uint64_t stream)
{
    uint64_t x = stream;
    train_rng_seed(r, seed ^ splitmix64(&x));
}

static inline uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

uint64_t train_rng_next(train_rng *r)
{
    uint64_t *s = r->s;
    const uint64_t result = rotl(s[1] * 5, 7) * 9;
    const uint64_t t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return result;
}

uint64_t train_rng_below(train_rng *r, uint64_t n)
{
    if (n == 0) return 0;
    /* Rejection of the last partial block of 2^64 keeps every value equally
     * likely; at most half the draws are rejected, usually almost none. */
    uint64_t limit = UINT64_MAX - UINT64_MAX % n;
    uint64_t x;
    do x = train_rng_next(r);
    while (x >= limit);
    return x % n;
}

double train_rng_uniform(train_rng *r)
{
    return (double)(train_rng_next(r) >> 11) * (1.0 / 9007199254740992.0);
}

void train_rng_save(const train_rng *r, uint8_t out[TRAIN_RNG_BYTES])
{
    for (int i = 0; i < 4; i++) train_put_u64(out + 8 * i, r->s[i]);
}

int train_rng_load(train_rng *r, const uint8_t in[TRAIN_RNG_BYTES])
{
    train_rng t;
    for (int i = 0; i < 4; i++) t.s[i] = train_get_u64(in + 8 * i);
    if (!(t.s[0] | t.s[1] | t.s[2] | t.s[3])) return -1;
    *r = t;
    return 0;
}
