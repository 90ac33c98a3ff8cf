/*
 * cuda_stub.c - the CUDA backend's entry points in a build without CUDA.
 * Every call reports that no CUDA device is usable, so a CPU-only build links
 * the same public API and CUDA requests fail with a clear status.
 */
#include "prnn_internal.h"

prnn_status prnn_cuda_ctx_init(prnn_ctx *ctx, const prnn_ctx_config *cfg)
{
    (void)ctx;
    (void)cfg;
    return PRNN_ERR_NO_DEVICE;
}

void prnn_cuda_ctx_free(prnn_ctx *ctx) { (void)ctx; }

prnn_status prnn_cuda_synchronize(prnn_ctx *ctx)
{
    (void)ctx;
    return PRNN_ERR_NO_DEVICE;
}

void *prnn_cuda_stream(const prnn_ctx *ctx)
{
    (void)ctx;
    return NULL;
}

int prnn_cuda_device_count(void) { return 0; }

prnn_status prnn_cuda_scan_forward(prnn_ctx *ctx, const prnn_scan_desc *d, void *h,
                                   void *hT, const void *a, const void *b, const void *h0)
{
    (void)ctx, (void)d, (void)h, (void)hT, (void)a, (void)b, (void)h0;
    return PRNN_ERR_NO_DEVICE;
}

prnn_status prnn_cuda_scan_backward(prnn_ctx *ctx, const prnn_scan_desc *d, void *da,
                                    void *db, void *dh0, const void *a, const void *h,
                                    const void *h0, const void *dh, const void *dhT)
{
    (void)ctx, (void)d, (void)da, (void)db, (void)dh0, (void)a, (void)h, (void)h0, (void)dh,
        (void)dhT;
    return PRNN_ERR_NO_DEVICE;
}
