/*
 * prnn.h - the public C API of libprnn.
 *
 * prnn trains recurrent networks whose recurrence runs in O(log T) parallel
 * depth. The primitive underneath every cell is the linear scan
 *
 *     h_t = a_t * h_{t-1} + b_t          (elementwise over H)
 *
 * over tensors laid out [B, T, H] with H contiguous (B batch rows, T time
 * steps, H channels), which is what one GEMM over all B*T tokens writes.
 * State tensors (h0, hT and their gradients) are [B, H].
 *
 * Manners: every function returns a prnn_status (PRNN_OK on success) and
 * prnn_strerror() turns it into text; the library never exits and never
 * prints. Objects come in init/free pairs. Sizes are int64_t.
 */
#ifndef PRNN_H
#define PRNN_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define PRNN_VERSION_MAJOR 0
#define PRNN_VERSION_MINOR 1
#define PRNN_VERSION_PATCH 0

/* ------------------------------------------------------------------------ */
/* Status codes                                                             */

typedef enum prnn_status {
    PRNN_OK = 0,
    PRNN_ERR_NULL_POINTER,     /* a required pointer was NULL */
    PRNN_ERR_INVALID_SIZE,     /* a size was zero or negative */
    PRNN_ERR_SIZE_OVERFLOW,    /* a size product or byte count overflows int64 */
    PRNN_ERR_INVALID_LENGTH,   /* a lengths[] entry lies outside [0, T] */
    PRNN_ERR_ALIASING,         /* an output overlaps an input or another output */
    PRNN_ERR_INVALID_ARGUMENT, /* an enum or option value out of range */
    PRNN_ERR_OUT_OF_MEMORY,    /* host or device allocation failed */
    PRNN_ERR_UNSUPPORTED,      /* valid request this build or device cannot do */
    PRNN_ERR_NO_DEVICE,        /* no usable CUDA device */
    PRNN_ERR_CUDA,             /* the CUDA runtime reported an error */
    PRNN_ERR_COMM,             /* MPI or NCCL communication failed (prnn_dist.h) */
    PRNN_STATUS_COUNT_
} prnn_status;

/* A static, human-readable description of a status. Never NULL. */
const char *prnn_strerror(prnn_status status);

/* The library version as "MAJOR.MINOR.PATCH". */
const char *prnn_version(void);

/* ------------------------------------------------------------------------ */
/* Context                                                                  */

/*
 * A context owns the resources a computation runs on: the CPU thread count,
 * or the CUDA device, stream and workspace. Contexts are not thread-safe;
 * use one per host thread. All tensors passed with a CUDA context are device
 * pointers; all tensors passed with a CPU context are host pointers.
 *
 * CUDA graphs: the look-back scans (PRNN_SCAN_CHUNKED, and what AUTO and
 * STRIPED run for few chains) take a fresh range of tickets and a fresh tag
 * from the context's workspace on the host at every call, so a captured
 * call must not be replayed: replays would share one range and one tag.
 * Calls with PRNN_SCAN_TREE take neither; nor do calls with
 * PRNN_SCAN_FIXED queued while the stream is being captured (outside
 * capture, FIXED runs a few long chains through WINDOW, which takes
 * tickets: see prnn_scan_algo).
 */
typedef struct prnn_ctx prnn_ctx;

typedef enum prnn_device {
    PRNN_DEVICE_CPU = 0,
    PRNN_DEVICE_CUDA = 1
} prnn_device;

typedef struct prnn_ctx_config {
    prnn_device device;
    int num_threads;   /* CPU: worker threads; 0 = OpenMP's default */
    int cuda_device;   /* CUDA: device ordinal */
    void *cuda_stream; /* CUDA: a cudaStream_t to run on; NULL = the context
                          creates (and later destroys) a non-blocking stream,
                          which does not wait for work on the legacy default
                          stream (cudaMemset, cudaMemcpy without a stream):
                          finish such work, or queue it on
                          prnn_ctx_cuda_stream(), before passing its buffers */
} prnn_ctx_config;

/* A configuration for the CPU with the default thread count. */
prnn_ctx_config prnn_ctx_config_default(void);

/* Creates a context. cfg may be NULL for the default CPU context. */
prnn_status prnn_ctx_init(prnn_ctx **ctx, const prnn_ctx_config *cfg);

/* Frees a context and its workspace. NULL is a no-op. */
void prnn_ctx_free(prnn_ctx *ctx);

/* Waits for all work queued on the context (a no-op on the CPU). */
prnn_status prnn_ctx_synchronize(prnn_ctx *ctx);

prnn_device prnn_ctx_device(const prnn_ctx *ctx);

/* The CPU thread count the context uses (CPU contexts). */
int prnn_ctx_num_threads(const prnn_ctx *ctx);

/* The cudaStream_t the context runs on, or NULL on a CPU context. */
void *prnn_ctx_cuda_stream(const prnn_ctx *ctx);

/*
 * Orders two contexts' streams: work queued on `waiter` after this call
 * starts only after everything queued on `other` before it has finished,
 * without blocking the host. With one context for copies and one for
 * compute, the upload of batch k+1 overlaps the compute of batch k. A no-op
 * when either context is on the CPU (CPU work is synchronous).
 */
prnn_status prnn_ctx_wait_for(prnn_ctx *waiter, prnn_ctx *other);

/* 1 when this build has CUDA support and a CUDA device is visible. */
int prnn_cuda_available(void);

/* ------------------------------------------------------------------------ */
/* Scan: h_t = a_t * h_{t-1} + b_t                                          */

typedef enum prnn_dtype {
    PRNN_DTYPE_F32 = 0,
    PRNN_DTYPE_F64 = 1,  /* CPU only: the precision of gradient checks */
    PRNN_DTYPE_BF16 = 2, /* CUDA only */
    PRNN_DTYPE_F16 = 3,  /* CUDA only */
    PRNN_DTYPE_COUNT_
} prnn_dtype;

/* Bytes per element of a dtype (0 for an invalid value). */
size_t prnn_dtype_size(prnn_dtype dtype);

/* ------------------------------------------------------------------------ */
/* Memory on the context's device                                           */

/*
 * Tensors live in host memory for CPU contexts and in device memory for CUDA
 * contexts. These helpers let a program hold its buffers without including
 * the CUDA headers. Allocations are 256-byte aligned. Copies and fills run
 * on the context's stream: prnn_mem_upload returns before the copy is done
 * (keep the source alive and unchanged until prnn_ctx_synchronize, or use
 * pinned memory from prnn_mem_alloc_pinned), prnn_mem_download waits.
 */
prnn_status prnn_mem_alloc(prnn_ctx *ctx, void **ptr, size_t bytes);
void prnn_mem_free(prnn_ctx *ctx, void *ptr);
prnn_status prnn_mem_zero(prnn_ctx *ctx, void *ptr, size_t bytes);
prnn_status prnn_mem_upload(prnn_ctx *ctx, void *dst, const void *host_src, size_t bytes);
prnn_status prnn_mem_download(prnn_ctx *ctx, void *host_dst, const void *src, size_t bytes);
prnn_status prnn_mem_copy(prnn_ctx *ctx, void *dst, const void *src, size_t bytes);

/* Page-locked host memory (plain host memory on a CPU context), the source
 * of asynchronous uploads that overlap compute. */
prnn_status prnn_mem_alloc_pinned(prnn_ctx *ctx, void **ptr, size_t bytes);
void prnn_mem_free_pinned(prnn_ctx *ctx, void *ptr);

/* Converts n elements between dtypes on the context's device (e.g. fp32
 * master weights to their bf16 copy). src and dst must not overlap. */
prnn_status prnn_mem_convert(prnn_ctx *ctx, void *dst, prnn_dtype dst_dtype,
                             const void *src, prnn_dtype src_dtype, int64_t n);

typedef enum prnn_scan_algo {
    PRNN_SCAN_AUTO = 0, /* the fastest exact algorithm for the device */
    PRNN_SCAN_SERIAL,   /* the plain loop over t: CPU oracle, GPU baseline */
    PRNN_SCAN_TREE,     /* divide and conquer: serial local scans over short
                           chunks, merged level by level up a tree */
    PRNN_SCAN_CHUNKED,  /* GPU single-pass chunked scan with decoupled look-back
                           (on the CPU: the same as TREE) */
    PRNN_SCAN_STRIPED,  /* GPU: one block carries a stripe of channels through
                           the whole sequence, no look-back; for large B*H
                           (with too few stripes for the card, through
                           segments of the sequence joined by a look-back;
                           on the CPU: the same as TREE) */
    PRNN_SCAN_FIXED,    /* the fastest algorithm whose summation order never
                           depends on timing, so that every run gives the same
                           bits: on CUDA STRIPED where its blocks fill the
                           card; a few long chains on sm_90 outside graph
                           capture, the window scan that AUTO's backward
                           takes (its order is fixed by the shape and the SM
                           count), forward and backward; else TREE.
                           The same bits for the same shape, card and capture
                           mode. On the CPU, TREE */
    PRNN_SCAN_ALGO_COUNT_
} prnn_scan_algo;

const char *prnn_scan_algo_name(prnn_scan_algo algo);

/* The kernel the last scan call on ctx chose, in words, for benchmarks,
 * tests and questions of speed: for example "striped: 256-byte stripes,
 * 6 steps a lane, 1 block an SM, unstaged, whole rows". "" on a CPU
 * context, before the first call, or without CUDA. The text stays valid
 * until the next call of this function on ctx. */
const char *prnn_scan_last_kernel(const prnn_ctx *ctx);

/*
 * Describes one scan problem. Build it with prnn_scan_desc_make() and then
 * change the fields you need.
 *
 * Direction. reverse = 0 runs t = 0 .. T-1; reverse = 1 runs t = T-1 .. 0,
 * i.e. h_t = a_t * h_{t+1} + b_t (the backward half of a bidirectional layer).
 *
 * Variable lengths. lengths (host memory, B entries, each in [0, T]) gives
 * the number of valid steps of every row; NULL means all rows have T steps.
 * Row b's valid steps are t < lengths[b] (a padded layout). A reverse scan
 * of row b runs t = lengths[b]-1 .. 0. Past a row's length the outputs h, da
 * and db are zero, and hT is the state after the row's last valid step (h0,
 * or zero without h0, when the length is 0).
 *
 * States. The optional state tensors h0, hT, dh0, dhT are [B, H] and stored
 * in the accumulation type: double for F64, float for every other dtype, so
 * state carried between chunks of a long stream never loses precision.
 */
typedef struct prnn_scan_desc {
    int64_t B, T, H;
    prnn_dtype dtype;
    prnn_scan_algo algo;
    int reverse;
    int64_t chunk;           /* steps of the tree's serial intervals; 0 = 32.
                                The GPU chunked scan picks its own tiles. */
    const int64_t *lengths;  /* (B) in host memory, or NULL */
} prnn_scan_desc;

/* A descriptor for an F32, forward-direction, full-length AUTO scan. */
prnn_scan_desc prnn_scan_desc_make(int64_t B, int64_t T, int64_t H);

/*
 * Forward scan. h may not overlap any input or hT.
 *
 *   h   (B, T, H) out   all states
 *   hT  (B, H)    out   final state per row, optional (NULL)
 *   a   (B, T, H) in    decay
 *   b   (B, T, H) in    input
 *   h0  (B, H)    in    initial state, optional (NULL = zeros)
 */
prnn_status prnn_scan_forward(prnn_ctx *ctx, const prnn_scan_desc *desc,
                              void *h, void *hT,
                              const void *a, const void *b, const void *h0);

/*
 * Backward scan: gradients of a loss L given dL/dh and dL/dhT.
 * With g_t = dL/dh_t + a_{t+1} g_{t+1} (in the scan's direction),
 * dL/da_t = g_t * h_{t-1}, dL/db_t = g_t and dL/dh0 = a_first * g_first.
 * Outputs may not overlap inputs or each other.
 *
 *   da  (B, T, H) out
 *   db  (B, T, H) out
 *   dh0 (B, H)    out   optional (NULL)
 *   a   (B, T, H) in    as given to the forward
 *   h   (B, T, H) in    the forward's output
 *   h0  (B, H)    in    as given to the forward (NULL = zeros)
 *   dh  (B, T, H) in    dL/dh, optional (NULL = zeros)
 *   dhT (B, H)    in    dL/dhT, optional (NULL = zeros)
 */
prnn_status prnn_scan_backward(prnn_ctx *ctx, const prnn_scan_desc *desc,
                               void *da, void *db, void *dh0,
                               const void *a, const void *h, const void *h0,
                               const void *dh, const void *dhT);

#ifdef __cplusplus
}
#endif

#endif /* PRNN_H */
