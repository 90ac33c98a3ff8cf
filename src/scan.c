/*
 * scan.c - the public scan entry points: argument validation, then dispatch
 * to the CPU or CUDA backend.
 *
 * Every check happens here once, so that backends can assume sizes >= 1, no
 * overflow in element or byte counts, lengths in [0, T], a dtype the device
 * supports, and outputs that overlap nothing.
 *
 * Size letters: B batch rows, T time steps, H channels.
 */
#include <stdint.h>
#include <string.h>

#include "prnn_internal.h"

prnn_scan_desc prnn_scan_desc_make(int64_t B, int64_t T, int64_t H)
{
    prnn_scan_desc d;
    memset(&d, 0, sizeof d);
    d.B = B;
    d.T = T;
    d.H = H;
    d.dtype = PRNN_DTYPE_F32;
    d.algo = PRNN_SCAN_AUTO;
    return d;
}

const char *prnn_scan_last_kernel(const prnn_ctx *ctx)
{
    return ctx && ctx->device == PRNN_DEVICE_CUDA ? prnn_cuda_scan_last_kernel(ctx) : "";
}

const char *prnn_scan_algo_name(prnn_scan_algo algo)
{
    switch (algo) {
    case PRNN_SCAN_AUTO: return "auto";
    case PRNN_SCAN_SERIAL: return "serial";
    case PRNN_SCAN_TREE: return "tree";
    case PRNN_SCAN_CHUNKED: return "chunked";
    case PRNN_SCAN_STRIPED: return "striped";
    case PRNN_SCAN_FIXED: return "fixed";
    case PRNN_SCAN_ALGO_COUNT_: break;
    }
    return "unknown";
}

/* ------------------------------------------------------------------------ */
/* Validation                                                               */

/* Checks the context and descriptor; on success sets the byte sizes of one
 * [B, T, H] tensor and one [B, H] state tensor. */
static prnn_status check_desc(const prnn_ctx *ctx, const prnn_scan_desc *d,
                              int64_t *seq_bytes, int64_t *state_bytes)
{
    if (!ctx || !d) return PRNN_ERR_NULL_POINTER;
    if (d->B <= 0 || d->T <= 0 || d->H <= 0) return PRNN_ERR_INVALID_SIZE;
    if ((unsigned)d->dtype >= PRNN_DTYPE_COUNT_) return PRNN_ERR_INVALID_ARGUMENT;
    if ((unsigned)d->algo >= PRNN_SCAN_ALGO_COUNT_) return PRNN_ERR_INVALID_ARGUMENT;
    if (d->reverse != 0 && d->reverse != 1) return PRNN_ERR_INVALID_ARGUMENT;
    if (d->chunk < 0) return PRNN_ERR_INVALID_ARGUMENT;

    int64_t esize = (int64_t)prnn_dtype_size(d->dtype);
    int64_t ssize = d->dtype == PRNN_DTYPE_F64 ? 8 : 4;
    int64_t bt, bth, bh;
    if (!prnn_mul_ok(d->B, d->T, &bt) || !prnn_mul_ok(bt, d->H, &bth) ||
        !prnn_mul_ok(bth, esize, seq_bytes) || !prnn_mul_ok(d->B, d->H, &bh) ||
        !prnn_mul_ok(bh, ssize, state_bytes))
        return PRNN_ERR_SIZE_OVERFLOW;
    /* Keep every pointer offset computed from these sizes representable. */
    if (*seq_bytes > INT64_MAX / 4 || (uint64_t)*seq_bytes > (uint64_t)SIZE_MAX / 4)
        return PRNN_ERR_SIZE_OVERFLOW;

    if (ctx->device == PRNN_DEVICE_CPU) {
        if (d->dtype != PRNN_DTYPE_F32 && d->dtype != PRNN_DTYPE_F64)
            return PRNN_ERR_UNSUPPORTED;
    } else if (d->dtype == PRNN_DTYPE_F64) {
        return PRNN_ERR_UNSUPPORTED;
    }

    if (d->lengths) {
        for (int64_t i = 0; i < d->B; i++)
            if (d->lengths[i] < 0 || d->lengths[i] > d->T) return PRNN_ERR_INVALID_LENGTH;
    }
    return PRNN_OK;
}

/* ------------------------------------------------------------------------ */
/* Entry points                                                             */

prnn_status prnn_scan_forward(prnn_ctx *ctx, const prnn_scan_desc *d, void *h, void *hT,
                              const void *a, const void *b, const void *h0)
{
    int64_t sb, st;
    prnn_status s = check_desc(ctx, d, &sb, &st);
    if (s != PRNN_OK) return s;
    if (!h || !a || !b) return PRNN_ERR_NULL_POINTER;

    prnn_span out[] = {{h, sb}, {hT, st}};
    prnn_span in[] = {{a, sb}, {b, sb}, {h0, st}};
    if (prnn_any_overlap(out, 2, in, 3)) return PRNN_ERR_ALIASING;

    if (ctx->device == PRNN_DEVICE_CUDA) return prnn_cuda_scan_forward(ctx, d, h, hT, a, b, h0);
    return prnn_cpu_scan_forward(ctx, d, h, hT, a, b, h0);
}

prnn_status prnn_scan_backward(prnn_ctx *ctx, const prnn_scan_desc *d, void *da, void *db,
                               void *dh0, const void *a, const void *h, const void *h0,
                               const void *dh, const void *dhT)
{
    int64_t sb, st;
    prnn_status s = check_desc(ctx, d, &sb, &st);
    if (s != PRNN_OK) return s;
    if (!da || !db || !a || !h) return PRNN_ERR_NULL_POINTER;

    prnn_span out[] = {{da, sb}, {db, sb}, {dh0, st}};
    prnn_span in[] = {{a, sb}, {h, sb}, {h0, st}, {dh, sb}, {dhT, st}};
    if (prnn_any_overlap(out, 3, in, 5)) return PRNN_ERR_ALIASING;

    if (ctx->device == PRNN_DEVICE_CUDA)
        return prnn_cuda_scan_backward(ctx, d, da, db, dh0, a, h, h0, dh, dhT);
    return prnn_cpu_scan_backward(ctx, d, da, db, dh0, a, h, h0, dh, dhT);
}
