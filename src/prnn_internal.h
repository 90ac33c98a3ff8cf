/*
 * prnn_internal.h - what the library's translation units share: the context
 * struct, the backends' entry points and small helpers.
 *
 * The public functions in scan.c validate every argument once and then call
 * a backend (scan_cpu.c, or scan_cuda.cu through the prnn_cuda_* functions
 * below). Backends may therefore assume valid, non-overlapping arguments.
 *
 * Size letters: B batch rows, T time steps, H channels.
 */
#ifndef PRNN_INTERNAL_H
#define PRNN_INTERNAL_H

#include "prnn.h"

#ifdef __cplusplus
extern "C" {
#endif

struct prnn_cuda_state; /* defined by the CUDA backend */

struct prnn_ctx {
    prnn_device device;
    int num_threads;

    /* Host workspace, grown on demand and kept. */
    void *host_ws;
    size_t host_ws_bytes;

    struct prnn_cuda_state *cuda; /* NULL on CPU contexts */
};

/* Returns a host workspace of at least `bytes`, 64-byte aligned, or NULL. */
void *prnn_host_workspace(prnn_ctx *ctx, size_t bytes);

/* Checked multiplication of non-negative sizes; 0 on overflow. */
int prnn_mul_ok(int64_t x, int64_t y, int64_t *out);

/* ------------------------------------------------------------------------ */
/* CPU backend (scan_cpu.c)                                                 */

prnn_status prnn_cpu_scan_forward(prnn_ctx *ctx, const prnn_scan_desc *d,
                                  void *h, void *hT,
                                  const void *a, const void *b,
                                  const void *h0);
prnn_status prnn_cpu_scan_backward(prnn_ctx *ctx, const prnn_scan_desc *d,
                                   void *da, void *db, void *dh0,
                                   const void *a, const void *h,
                                   const void *h0, const void *dh,
                                   const void *dhT);

/* ------------------------------------------------------------------------ */
/* CUDA backend (scan_cuda.cu; cuda_stub.c in builds without CUDA)          */

prnn_status prnn_cuda_ctx_init(prnn_ctx *ctx, const prnn_ctx_config *cfg);
void prnn_cuda_ctx_free(prnn_ctx *ctx);
prnn_status prnn_cuda_synchronize(prnn_ctx *ctx);
void *prnn_cuda_stream(const prnn_ctx *ctx);
int prnn_cuda_device_count(void);

/* Arguments as validated by scan.c: device pointers, d->lengths in host
 * memory (the backend copies it into its workspace). */
prnn_status prnn_cuda_scan_forward(prnn_ctx *ctx, const prnn_scan_desc *d,
                                   void *h, void *hT,
                                   const void *a, const void *b,
                                   const void *h0);
prnn_status prnn_cuda_scan_backward(prnn_ctx *ctx, const prnn_scan_desc *d,
                                    void *da, void *db, void *dh0,
                                    const void *a, const void *h,
                                    const void *h0, const void *dh,
                                    const void *dhT);

#ifdef __cplusplus
}
#endif

#endif /* PRNN_INTERNAL_H */
