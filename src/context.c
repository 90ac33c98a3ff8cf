/*
 * context.c - contexts, status strings, version, and the host workspace.
 *
 * A context is the one place where resources live: the CPU thread count and
 * host workspace, or (through the CUDA backend) the device, stream and device
 * workspace. Every op takes one.
 */
#include <stdlib.h>
#include <string.h>

#include <omp.h>

#include "prnn_internal.h"

/* ------------------------------------------------------------------------ */
/* Status and version                                                       */

const char *prnn_strerror(prnn_status status)
{
    switch (status) {
    case PRNN_OK: return "success";
    case PRNN_ERR_NULL_POINTER: return "a required pointer argument is NULL";
    case PRNN_ERR_INVALID_SIZE: return "a size argument is zero or negative";
    case PRNN_ERR_SIZE_OVERFLOW: return "the tensor sizes overflow a 64-bit byte count";
    case PRNN_ERR_INVALID_LENGTH: return "a sequence length lies outside [0, T]";
    case PRNN_ERR_ALIASING: return "an output tensor overlaps an input or another output";
    case PRNN_ERR_INVALID_ARGUMENT: return "an option has an invalid value";
    case PRNN_ERR_OUT_OF_MEMORY: return "out of memory";
    case PRNN_ERR_UNSUPPORTED: return "this build or device does not support the request";
    case PRNN_ERR_NO_DEVICE: return "no usable CUDA device";
    case PRNN_ERR_CUDA: return "the CUDA runtime reported an error";
    case PRNN_ERR_COMM: return "MPI or NCCL communication between processes failed";
    case PRNN_STATUS_COUNT_: break;
    }
    return "unknown status code";
}

const char *prnn_version(void)
{
#define PRNN_STR2(x) #x
#define PRNN_STR(x) PRNN_STR2(x)
    return PRNN_STR(PRNN_VERSION_MAJOR) "." PRNN_STR(PRNN_VERSION_MINOR) "." PRNN_STR(
        PRNN_VERSION_PATCH);
#undef PRNN_STR
#undef PRNN_STR2
}

size_t prnn_dtype_size(prnn_dtype dtype)
{
    switch (dtype) {
    case PRNN_DTYPE_F32: return 4;
    case PRNN_DTYPE_F64: return 8;
    case PRNN_DTYPE_BF16: return 2;
    case PRNN_DTYPE_F16: return 2;
    case PRNN_DTYPE_COUNT_: break;
    }
    return 0;
}

int prnn_mul_ok(int64_t x, int64_t y, int64_t *out)
{
    if (x < 0 || y < 0) return 0;
    if (x != 0 && y > INT64_MAX / x) return 0;
    *out = x * y;
    return 1;
}

/* ------------------------------------------------------------------------ */
/* Contexts                                                                 */

prnn_ctx_config prnn_ctx_config_default(void)
{
    prnn_ctx_config cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.device = PRNN_DEVICE_CPU;
    return cfg;
}

prnn_status prnn_ctx_init(prnn_ctx **out, const prnn_ctx_config *cfg)
{
    if (!out) return PRNN_ERR_NULL_POINTER;
    *out = NULL;
    prnn_ctx_config def = prnn_ctx_config_default();
    if (!cfg) cfg = &def;
    if (cfg->device != PRNN_DEVICE_CPU && cfg->device != PRNN_DEVICE_CUDA)
        return PRNN_ERR_INVALID_ARGUMENT;
    if (cfg->num_threads < 0 || cfg->cuda_device < 0) return PRNN_ERR_INVALID_ARGUMENT;

    prnn_ctx *ctx = calloc(1, sizeof *ctx);
    if (!ctx) return PRNN_ERR_OUT_OF_MEMORY;
    ctx->device = cfg->device;
    ctx->num_threads = cfg->num_threads > 0 ? cfg->num_threads : omp_get_max_threads();
    if (ctx->num_threads < 1) ctx->num_threads = 1;

    if (cfg->device == PRNN_DEVICE_CUDA) {
        prnn_status s = prnn_cuda_ctx_init(ctx, cfg);
        if (s != PRNN_OK) {
            free(ctx);
            return s;
        }
    }
    *out = ctx;
    return PRNN_OK;
}

void prnn_ctx_free(prnn_ctx *ctx)
{
    if (!ctx) return;
    if (ctx->device == PRNN_DEVICE_CUDA)
        prnn_cuda_ctx_free(ctx); /* also frees the device scratch */
    else
        free(ctx->scratch);
    free(ctx->host_ws);
    free(ctx);
}

prnn_status prnn_ctx_synchronize(prnn_ctx *ctx)
{
    if (!ctx) return PRNN_ERR_NULL_POINTER;
    if (ctx->device == PRNN_DEVICE_CUDA) return prnn_cuda_synchronize(ctx);
    return PRNN_OK;
}

prnn_device prnn_ctx_device(const prnn_ctx *ctx)
{
    return ctx ? ctx->device : PRNN_DEVICE_CPU;
}

int prnn_ctx_num_threads(const prnn_ctx *ctx)
{
    return ctx ? ctx->num_threads : 0;
}

void *prnn_ctx_cuda_stream(const prnn_ctx *ctx)
{
    if (!ctx || ctx->device != PRNN_DEVICE_CUDA) return NULL;
    return prnn_cuda_stream(ctx);
}

prnn_status prnn_ctx_wait_for(prnn_ctx *waiter, prnn_ctx *other)
{
    if (!waiter || !other) return PRNN_ERR_NULL_POINTER;
    if (waiter->device != PRNN_DEVICE_CUDA || other->device != PRNN_DEVICE_CUDA) return PRNN_OK;
    return prnn_cuda_wait_for(waiter, other);
}

int prnn_cuda_available(void)
{
    return prnn_cuda_device_count() > 0;
}

void *prnn_host_workspace(prnn_ctx *ctx, size_t bytes)
{
    if (bytes <= ctx->host_ws_bytes) return ctx->host_ws;
    /* Round up so that slowly growing requests do not reallocate each call. */
    size_t want = bytes + bytes / 4 + 64;
    want = (want + 63) & ~(size_t)63;
    void *p = aligned_alloc(64, want);
    if (!p) return NULL;
    free(ctx->host_ws);
    ctx->host_ws = p;
    ctx->host_ws_bytes = want;
    return p;
}
