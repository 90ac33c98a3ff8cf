/*
 * test_util.h - the small harness every prnn test program shares: a seeded
 * random generator, pass/fail counting, error measures and the closing
 * "N passed, N failed" line.
 *
 * Header-only so that each test program is one C file plus this.
 */
#ifndef PRNN_TEST_UTIL_H
#define PRNN_TEST_UTIL_H

#ifndef _POSIX_C_SOURCE
#define _POSIX_C_SOURCE 200809L /* clock_gettime */
#endif

#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "check.h"
#include "prnn.h"

static int tu_passed, tu_failed;

/* Records one check. Prints a line for each check so that the log shows
 * every measured error beside its tolerance. */
static inline void tu_check(int ok, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static inline void tu_check(int ok, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    printf("%s ", ok ? "  ok  " : "  FAIL");
    vprintf(fmt, ap);
    printf("\n");
    va_end(ap);
    if (ok) tu_passed++;
    else tu_failed++;
}

/* Aborts the program on a status that must not fail (setup steps). */
#define TU_REQUIRE(call) PRNN_CHECK(call)

static inline int tu_finish(void)
{
    printf("%d passed, %d failed\n", tu_passed, tu_failed);
    return tu_failed ? 1 : 0;
}

/* ------------------------------------------------------------------------ */
/* Random numbers: splitmix64, seeded from the clock unless PRNN_TEST_SEED   */

static uint64_t tu_rng_state;

static inline uint64_t tu_seed_from_env(void)
{
    const char *s = getenv("PRNN_TEST_SEED");
    if (s && *s) return strtoull(s, NULL, 0);
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (uint64_t)ts.tv_sec * 1000003u ^ (uint64_t)ts.tv_nsec;
}

static inline void tu_seed(uint64_t seed) { tu_rng_state = seed; }

static inline uint64_t tu_next(void)
{
    uint64_t z = (tu_rng_state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* Uniform in [lo, hi). */
static inline double tu_uniform(double lo, double hi)
{
    return lo + (hi - lo) * ((double)(tu_next() >> 11) * (1.0 / 9007199254740992.0));
}

static inline void tu_fill_f32(float *x, int64_t n, double lo, double hi)
{
    for (int64_t i = 0; i < n; i++) x[i] = (float)tu_uniform(lo, hi);
}

static inline void tu_fill_f64(double *x, int64_t n, double lo, double hi)
{
    for (int64_t i = 0; i < n; i++) x[i] = tu_uniform(lo, hi);
}

/* ------------------------------------------------------------------------ */
/* Error measures                                                           */

/* Largest |x - ref| / (|ref| + floor) and where it happened. The floor keeps
 * entries near zero from dominating a relative measure; it is the scale below
 * which absolute error is what matters. */
typedef struct {
    double max_err;
    int64_t at;
    int64_t bad; /* count of entries over tol, or non-finite */
} tu_err;

/* Keeps the largest error seen; a NaN is the worst and stays. */
static inline void tu_err_max(tu_err *e, double d, int64_t i)
{
    if (d > e->max_err || (d != d && e->max_err == e->max_err)) {
        e->max_err = d;
        e->at = i;
    }
}

static inline tu_err tu_compare_f32(const float *x, const float *ref, int64_t n,
                             double floor_, double tol, const char *what)
{
    tu_err e = {0.0, -1, 0};
    int shown = 0;
    for (int64_t i = 0; i < n; i++) {
        double d = fabs((double)x[i] - (double)ref[i]) / (fabs((double)ref[i]) + floor_);
        if (!(d <= tol)) { /* also catches NaN */
            e.bad++;
            if (shown < 5) {
                printf("        %s mismatch at %lld: got %.9g want %.9g\n", what,
                       (long long)i, (double)x[i], (double)ref[i]);
                shown++;
            }
        }
        tu_err_max(&e, d, i);
    }
    return e;
}

static inline tu_err tu_compare_f64(const double *x, const double *ref, int64_t n,
                             double floor_, double tol, const char *what)
{
    tu_err e = {0.0, -1, 0};
    int shown = 0;
    for (int64_t i = 0; i < n; i++) {
        double d = fabs(x[i] - ref[i]) / (fabs(ref[i]) + floor_);
        if (!(d <= tol)) {
            e.bad++;
            if (shown < 5) {
                printf("        %s mismatch at %lld: got %.17g want %.17g\n", what,
                       (long long)i, x[i], ref[i]);
                shown++;
            }
        }
        tu_err_max(&e, d, i);
    }
    return e;
}

static inline void *tu_malloc(size_t bytes)
{
    void *p = malloc(bytes ? bytes : 1);
    if (!p) {
        fprintf(stderr, "test: out of memory (%zu bytes)\n", bytes);
        exit(2);
    }
    return p;
}

#endif /* PRNN_TEST_UTIL_H */
