/*
 * scan_cpu.c - the CPU backend of the scan: the serial reference loop and the
 * divide-and-conquer scan (scan_cpu_impl.h), for float and double.
 *
 * The serial loop is the oracle every other implementation is tested
 * against; the tree scan is what PRNN_SCAN_AUTO runs on the CPU.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "prnn_internal.h"

/* The widest lane (channels of one row handled together); rows wider than
 * this are cut into lanes of PRNN_LANE_WIDTH channels. */
#define PRNN_LANE_MAX 4096
#define PRNN_LANE_WIDTH 2048
/* Bytes of streamed input per thread that one window of the tree keeps in
 * cache between its two passes (the L2 of current server cores is 1-2 MiB). */
#define PRNN_WINDOW_BYTES (1024 * 1024)
/* Below this many elements a scan runs on one thread. */
#define PRNN_SMALL_SCAN (1 << 15)

/* Outputs at least this large are written with non-temporal stores: they
 * cannot stay in cache anyway, and streaming them saves reading every output
 * line in before it is written. */
#define PRNN_STREAM_MIN_BYTES ((int64_t)64 << 20)

#if defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>
/* Streaming needs 32-byte aligned rows that stay aligned step to step. */
#define PRNN_STREAM_F32(ptr, step, w)                                                          \
    ((((uintptr_t)(ptr)) & 31) == 0 && ((step) & 7) == 0 && ((w) & 7) == 0)
#endif

#define REAL float
#define FN(name) name##_f32
#include "scan_cpu_impl.h"
#undef REAL
#undef FN
#undef PRNN_STREAM_F32

#define REAL double
#define FN(name) name##_f64
#include "scan_cpu_impl.h"
#undef REAL
#undef FN

prnn_status prnn_cpu_scan_forward(prnn_ctx *ctx, const prnn_scan_desc *d, void *h, void *hT,
                                  const void *a, const void *b, const void *h0)
{
    if (d->dtype == PRNN_DTYPE_F64) {
        if (d->algo == PRNN_SCAN_SERIAL) {
            serial_forward_f64(d, h, hT, a, b, h0);
            return PRNN_OK;
        }
        job_f64 jb = {.d = d, .h = h, .hT = hT, .a = a, .b = b, .h0 = h0};
        return tree_f64(ctx, &jb);
    }
    if (d->algo == PRNN_SCAN_SERIAL) {
        serial_forward_f32(d, h, hT, a, b, h0);
        return PRNN_OK;
    }
    job_f32 jb = {.d = d, .h = h, .hT = hT, .a = a, .b = b, .h0 = h0};
    return tree_f32(ctx, &jb);
}

prnn_status prnn_cpu_scan_backward(prnn_ctx *ctx, const prnn_scan_desc *d, void *da, void *db,
                                   void *dh0, const void *a, const void *h, const void *h0,
                                   const void *dh, const void *dhT)
{
    if (d->dtype == PRNN_DTYPE_F64) {
        if (d->algo == PRNN_SCAN_SERIAL) {
            serial_backward_f64(d, da, db, dh0, a, h, h0, dh, dhT);
            return PRNN_OK;
        }
        job_f64 jb = {.d = d, .backward = 1, .da = da, .db = db, .dh0 = dh0,
                      .a = a, .hin = h, .h0 = h0, .dh = dh, .dhT = dhT};
        return tree_f64(ctx, &jb);
    }
    if (d->algo == PRNN_SCAN_SERIAL) {
        serial_backward_f32(d, da, db, dh0, a, h, h0, dh, dhT);
        return PRNN_OK;
    }
    job_f32 jb = {.d = d, .backward = 1, .da = da, .db = db, .dh0 = dh0,
                  .a = a, .hin = h, .h0 = h0, .dh = dh, .dhT = dhT};
    return tree_f32(ctx, &jb);
}
