/*
 * prnn_model.h - a deep recurrent token model built from the cell layers
 * and blocks: the model `prnn train` trains and `prnn sample` runs.
 *
 *   x_0     = embed(ids)                                  (N, dim)
 *   x_{l+1} = x_l + dropout(cell_l(norm_l(x_l)))          l = 0 .. layers-1
 *   logits  = norm_f(x_L) W_head + b_head                 (N, vocab)
 *   loss    = mean cross-entropy of logits against targets (-1 = ignored)
 *
 * A pre-norm residual stack: each cell sees a normalised input, and the
 * residual path carries gradients past every recurrence. A bidirectional
 * cell has H = dim / 2 per direction, so its output is dim wide.
 *
 * Parameters live in ONE buffer in the accumulation type (fp32 master
 * weights; double for F64 models), cut into named tensors by a table
 * (prnn_model_tensor): initialization, zeroing, the optimizer step and
 * checkpoint I/O are single loops over it. Gradients have the same layout.
 * A BF16 model also keeps a bf16 copy of the weights that its layers read;
 * refresh it with prnn_model_params_changed() after changing the master
 * weights (prnn_adamw_step can write it in the same pass).
 *
 * Tensors passed in (ids, targets) and the buffers returned are on the
 * context's device. Size letters: B batch rows, T steps, N = B*T tokens,
 * V vocabulary.
 */
#ifndef PRNN_MODEL_H
#define PRNN_MODEL_H

#include "prnn.h"
#include "prnn_cell.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum prnn_norm_type {
    PRNN_NORM_RMS = 0,
    PRNN_NORM_LAYER,
    PRNN_NORM_TYPE_COUNT_
} prnn_norm_type;

typedef struct prnn_model_config {
    int64_t vocab;        /* ids are in [0, vocab) */
    int64_t dim;          /* width of the embedding and the residual stream */
    int64_t layers;       /* >= 1 */
    prnn_cell_desc cell;  /* every layer's cell: type and options (D, H and
                             dtype are set by the model) */
    prnn_norm_type norm;
    double dropout;       /* on each cell's output, in [0, 1) */
    prnn_dtype dtype;     /* CPU: F32, F64; CUDA: F32, BF16 */
} prnn_model_config;

/* vocab 256, dim 128, 2 layers of minGRU, RMSNorm, no dropout, F32. */
prnn_model_config prnn_model_config_default(void);

typedef struct prnn_model prnn_model;

prnn_status prnn_model_init(prnn_ctx *ctx, prnn_model **model, const prnn_model_config *cfg);
void prnn_model_free(prnn_model *model);

const prnn_model_config *prnn_model_config_get(const prnn_model *model);

/* One named tensor of the parameter buffer. */
typedef struct prnn_tensor_info {
    char name[64];     /* e.g. "layers.0.cell.fwd.W" */
    int ndim;          /* 1 or 2 */
    int64_t shape[2];
    int64_t offset;    /* first element in the buffer */
    int64_t count;     /* elements */
    int decay;         /* 1 for matrices (weight decay applies), 0 for gains and biases */
} prnn_tensor_info;

int64_t prnn_model_param_count(const prnn_model *model);
int prnn_model_tensor_count(const prnn_model *model);
prnn_status prnn_model_tensor(const prnn_model *model, int i, prnn_tensor_info *info);

/* The master parameters and the gradients, (param_count) in the
 * accumulation type on the context's device. */
void *prnn_model_params(prnn_model *model);
void *prnn_model_grads(prnn_model *model);
/* The bf16 copy a BF16 model computes with (NULL for other dtypes). */
void *prnn_model_params_bf16(prnn_model *model);

/* Initialises the parameters from seed (embedding and head normal with std
 * 0.02 ... see the implementation; cells by prnn_cell_init_params; gains 1,
 * biases 0), deterministically on every device. */
prnn_status prnn_model_init_params(prnn_model *model, uint64_t seed);

/* Refreshes the bf16 copy after the master weights changed (no-op unless
 * BF16). */
prnn_status prnn_model_params_changed(prnn_model *model);

prnn_status prnn_model_zero_grads(prnn_model *model);

/*
 * Forward over (B, T) tokens. With train = 1 it keeps what the backward
 * needs and applies dropout with dropout_seed; with train = 0 it saves
 * nothing. loss (device, acc scalar) receives the mean cross-entropy over
 * tokens whose target is not -1; targets may be NULL (no loss: logits only).
 *
 *   loss    (1)    acc   out, optional
 *   ids     (B, T) int32 in
 *   targets (B, T) int32 in, optional
 */
prnn_status prnn_model_forward(prnn_model *model, int64_t B, int64_t T, void *loss,
                               const int32_t *ids, const int32_t *targets, int train,
                               uint64_t dropout_seed);

/* The last forward's logits, (B*T, vocab) in the model's dtype. */
const void *prnn_model_logits(const prnn_model *model);

/* Backward of the last train-mode forward: ADDS d(dloss * loss)/dparams to
 * the gradients. */
prnn_status prnn_model_backward(prnn_model *model, double dloss);

/*
 * Told during prnn_model_backward that the gradients [offset, offset +
 * count) are final for this backward, as soon as the ops that write them
 * are queued on the context (on CUDA they may still be running: order later
 * work after them on the context's stream, e.g. with an event). Slices come
 * in the order they finish, which is the reverse of the buffer's order: the
 * head, norm_f, each layer from the last to the first (its norm and cell
 * together), then the embedding; together they cover the buffer once.
 * A status other than PRNN_OK stops the backward, which returns it. Meant
 * for starting the gradient average of data-parallel training early
 * (prnn_dist_grad_hook in prnn_dist.h fits).
 */
typedef prnn_status (*prnn_model_grad_hook)(void *user, int64_t offset, int64_t count);

/* Sets the hook (NULL: none, the default). */
prnn_status prnn_model_set_grad_hook(prnn_model *model, prnn_model_grad_hook hook, void *user);

/*
 * Recurrent mode, O(1) work per token: one step for B rows. state (B,
 * state_floats) in the accumulation type holds every layer's cell state
 * (zero it to start); logits (B, vocab) are in the model's dtype.
 * Unidirectional models only.
 *
 *   logits (B, V)  out
 *   state  (B, S)  in/out
 *   ids    (B)     int32 in
 */
prnn_status prnn_model_state_floats(const prnn_model *model, int64_t *floats);
prnn_status prnn_model_step(prnn_model *model, int64_t B, void *logits, void *state,
                            const int32_t *ids);

#ifdef __cplusplus
}
#endif

#endif /* PRNN_MODEL_H */
