/*
 * ckpt.c - safetensors weights and the binary training state: writers and
 * validating readers (formats in ckpt.h).
 */
#include "ckpt.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const struct {
    const char *name;
    int64_t size;
} dtypes[TRAIN_ST_DTYPE_COUNT_] = {
    {"F64", 8}, {"F32", 4}, {"F16", 2}, {"BF16", 2}, {"I64", 8},
    {"I32", 4}, {"I16", 2}, {"I8", 1},  {"U8", 1},   {"BOOL", 1},
};

const char *train_st_dtype_name(train_st_dtype dtype)
{
    return (int)dtype >= 0 && dtype < TRAIN_ST_DTYPE_COUNT_ ? dtypes[dtype].name : NULL;
}

int64_t train_st_dtype_size(train_st_dtype dtype)
{
    return (int)dtype >= 0 && dtype < TRAIN_ST_DTYPE_COUNT_ ? dtypes[dtype].size : 0;
}

int train_st_dtype_parse(const char *name, train_st_dtype *dtype)
{
    for (int i = 0; i < TRAIN_ST_DTYPE_COUNT_; i++) {
        if (!strcmp(name, dtypes[i].name)) {
            *dtype = (train_st_dtype)i;
            return 0;
        }
    }
    return -1;
}

/* Elements and bytes of a shape; -1 when either overflows int64. */
static int shape_bytes(train_st_dtype dtype, int ndim, const int64_t *shape, int64_t *bytes)
{
    int64_t numel = 1;
    for (int d = 0; d < ndim; d++) {
        if (shape[d] < 0) return -1;
        if (shape[d] && numel > INT64_MAX / shape[d]) return -1;
        numel *= shape[d];
    }
    int64_t size = train_st_dtype_size(dtype);
    if (size == 0 || numel > INT64_MAX / size) return -1;
    *bytes = numel * size;
    return 0;
}

/* "[2, 3]" into buf (for messages). */
static const char *fmt_shape(char *buf, size_t n, int ndim, const int64_t *shape)
{
    size_t k = 0;
    buf[0] = 0;
    k += (size_t)snprintf(buf, n, "[");
    for (int d = 0; d < ndim && k < n; d++) {
        k += (size_t)snprintf(buf + k, n - k, "%s%lld", d ? ", " : "", (long long)shape[d]);
    }
    if (k < n) snprintf(buf + k, n - k, "]");
    return buf;
}

/* ------------------------------------------------------------------------ */
/* Writing safetensors                                                      */

/* A JSON string literal of str (valid UTF-8, checked by the caller). */
static void text_json_string(train_text *s, const char *str)
{
    train_text_puts(s, "\"");
    for (const unsigned char *c = (const unsigned char *)str; *c; c++) {
        if (*c == '"' || *c == '\\') {
            char esc[3] = {'\\', (char)*c, 0};
            train_text_puts(s, esc);
        } else if (*c < 0x20) {
            train_text_printf(s, "\\u%04x", *c);
        } else {
            train_text_put(s, (const char *)c, 1);
        }
    }
    train_text_puts(s, "\"");
}

typedef struct st_writer {
    const char *path;
    const train_text *header;
    const train_st_tensor *tensors;
    const int64_t *nbytes;
    int64_t n;
} st_writer;

static int st_write_body(FILE *f, void *ctx, train_err *e)
{
    const st_writer *w = ctx;
    uint8_t len[8];
    train_put_u64(len, (uint64_t)w->header->n);
    int rc = train_fwrite(f, len, 8, w->path, e);
    if (!rc) rc = train_fwrite(f, w->header->p, w->header->n, w->path, e);
    for (int64_t i = 0; i < w->n && !rc; i++) {
        rc = train_fwrite(f, w->tensors[i].data, (size_t)w->nbytes[i], w->path, e);
    }
    return rc;
}

static int cmp_cstr(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

static int valid_name(const char *s)
{
    return s && train_json_utf8_valid(s, (int64_t)strlen(s));
}

int train_st_write(const char *path, const train_st_tensor *tensors, int64_t n_tensors,
                   const train_kv *meta, int64_t n_meta, train_err *e)
{
    if (!path) return train_err_set(e, TRAIN_IO_ERR_ARG, "safetensors: no path");
    if (!train_host_is_little_endian()) {
        return train_err_set(e, TRAIN_IO_ERR_ARG, "%s: safetensors needs a little-endian host",
                             path);
    }
    if (n_tensors < 0 || n_meta < 0 || (n_tensors && !tensors) || (n_meta && !meta)) {
        return train_err_set(e, TRAIN_IO_ERR_ARG, "%s: bad tensor or metadata list", path);
    }
    int64_t *nbytes = malloc((size_t)(n_tensors ? n_tensors : 1) * sizeof *nbytes);
    const char **names = malloc((size_t)(n_tensors + n_meta + 1) * sizeof *names);
    train_text h = {0};
    int rc = TRAIN_IO_OK;
    if (!nbytes || !names) {
        rc = train_err_set(e, TRAIN_IO_ERR_NOMEM, "%s: out of memory", path);
        goto done;
    }
    for (int64_t i = 0; i < n_tensors; i++) {
        const train_st_tensor *t = &tensors[i];
        if (!valid_name(t->name) || !t->name[0] || !strcmp(t->name, "__metadata__")) {
            rc = train_err_set(e, TRAIN_IO_ERR_ARG, "%s: tensor %lld has a bad name", path,
                               (long long)i);
            goto done;
        }
        if (!train_st_dtype_name(t->dtype) || t->ndim < 0 || t->ndim > TRAIN_ST_MAX_DIMS ||
            shape_bytes(t->dtype, t->ndim, t->shape, &nbytes[i]) || (nbytes[i] && !t->data)) {
            rc = train_err_set(e, TRAIN_IO_ERR_ARG,
                               "%s: tensor '%s' has a bad dtype, shape or no data", path, t->name);
            goto done;
        }
        names[i] = t->name;
    }
    qsort(names, (size_t)n_tensors, sizeof *names, cmp_cstr);
    for (int64_t i = 1; i < n_tensors; i++) {
        if (!strcmp(names[i - 1], names[i])) {
            rc = train_err_set(e, TRAIN_IO_ERR_ARG, "%s: tensor name '%s' given twice", path,
                               names[i]);
            goto done;
        }
    }
    for (int64_t i = 0; i < n_meta; i++) {
        if (!valid_name(meta[i].key) || !valid_name(meta[i].value)) {
            rc = train_err_set(e, TRAIN_IO_ERR_ARG, "%s: metadata entry %lld is not valid UTF-8",
                               path, (long long)i);
            goto done;
        }
        names[i] = meta[i].key;
    }
    qsort(names, (size_t)n_meta, sizeof *names, cmp_cstr);
    for (int64_t i = 1; i < n_meta; i++) {
        if (!strcmp(names[i - 1], names[i])) {
            rc = train_err_set(e, TRAIN_IO_ERR_ARG, "%s: metadata key '%s' given twice", path,
                               names[i]);
            goto done;
        }
    }

    train_text_puts(&h, "{");
    if (n_meta) {
        train_text_puts(&h, "\"__metadata__\":{");
        for (int64_t i = 0; i < n_meta; i++) {
            if (i) train_text_puts(&h, ",");
            text_json_string(&h, meta[i].key);
            train_text_puts(&h, ":");
            text_json_string(&h, meta[i].value);
        }
        train_text_puts(&h, "}");
    }
    int64_t offset = 0;
    for (int64_t i = 0; i < n_tensors; i++) {
        const train_st_tensor *t = &tensors[i];
        if (n_meta || i) train_text_puts(&h, ",");
        text_json_string(&h, t->name);
        train_text_printf(&h, ":{\"dtype\":\"%s\",\"shape\":[", train_st_dtype_name(t->dtype));
        for (int d = 0; d < t->ndim; d++)
            train_text_printf(&h, "%s%lld", d ? "," : "", (long long)t->shape[d]);
        if (nbytes[i] > INT64_MAX - offset) {
            rc = train_err_set(e, TRAIN_IO_ERR_ARG, "%s: total tensor bytes overflow", path);
            goto done;
        }
        train_text_printf(&h, "],\"data_offsets\":[%lld,%lld]}", (long long)offset,
                  (long long)(offset + nbytes[i]));
        offset += nbytes[i];
    }
    train_text_puts(&h, "}");
    /* Spaces up to a multiple of 8 put the data on an 8-byte boundary. */
    while (!h.failed && h.n % 8) train_text_puts(&h, " ");
    if (h.failed) {
        rc = train_err_set(e, TRAIN_IO_ERR_NOMEM, "%s: out of memory building the header", path);
        goto done;
    }
    if ((int64_t)h.n > TRAIN_ST_MAX_HEADER) {
        rc = train_err_set(e, TRAIN_IO_ERR_ARG, "%s: header of %zu bytes is over the %lld limit",
                           path, h.n, (long long)TRAIN_ST_MAX_HEADER);
        goto done;
    }
    st_writer w = {path, &h, tensors, nbytes, n_tensors};
    rc = train_atomic_write(path, st_write_body, &w, e);
done:
    free(h.p);
    free(names);
    free(nbytes);
    return rc;
}

/* ------------------------------------------------------------------------ */
/* Reading safetensors                                                      */

void train_st_free(train_st_file *f)
{
    free(f->path);
    free(f->buf);
    train_json_free(&f->doc);
    free(f->tensors);
    free(f->meta);
    memset(f, 0, sizeof *f);
}

static int cmp_offsets(const void *a, const void *b)
{
    const train_st_tensor *x = a, *y = b;
    const uint8_t *px = x->data, *py = y->data;
    if (px != py) return px < py ? -1 : 1;
    return (x->nbytes > y->nbytes) - (x->nbytes < y->nbytes);
}

/* Reads one tensor entry of the header into t. */
static int parse_tensor(const train_json *v, const char *label, const uint8_t *data,
                        int64_t data_size, train_st_tensor *t, train_err *e)
{
    const char *name = v->key;
    t->name = name;
    if (v->type != TRAIN_JSON_OBJECT) {
        return train_err_set(e, TRAIN_IO_ERR_JSON,
                             "%s: header entry '%.80s' is a %s, not an object", label, name,
                             train_json_type_name(v->type));
    }
    const train_json *dt = NULL, *sh = NULL, *off = NULL;
    for (const train_json *c = v->child; c; c = c->next) {
        if (!strcmp(c->key, "dtype")) dt = c;
        else if (!strcmp(c->key, "shape")) sh = c;
        else if (!strcmp(c->key, "data_offsets")) off = c;
        else {
            return train_err_set(e, TRAIN_IO_ERR_JSON,
                                 "%s: tensor '%.80s' has an unknown field '%.40s'", label, name,
                                 c->key);
        }
    }
    if (!dt || !sh || !off) {
        return train_err_set(e, TRAIN_IO_ERR_JSON, "%s: tensor '%.80s' lacks its %s", label, name,
                             !dt ? "dtype" : !sh ? "shape" : "data_offsets");
    }
    if (dt->type != TRAIN_JSON_STRING) {
        return train_err_set(e, TRAIN_IO_ERR_JSON, "%s: tensor '%.80s': dtype is not a string",
                             label, name);
    }
    if (train_st_dtype_parse(dt->str, &t->dtype)) {
        return train_err_set(e, TRAIN_IO_ERR_DTYPE, "%s: tensor '%.80s' has unknown dtype '%.20s'",
                             label, name, dt->str);
    }
    if (sh->type != TRAIN_JSON_ARRAY || sh->n > TRAIN_ST_MAX_DIMS) {
        return train_err_set(e, TRAIN_IO_ERR_JSON,
                             "%s: tensor '%.80s': shape must be an array of at most %d sizes",
                             label, name, TRAIN_ST_MAX_DIMS);
    }
    t->ndim = (int)sh->n;
    int d = 0;
    for (const train_json *c = sh->child; c; c = c->next, d++) {
        if (c->type != TRAIN_JSON_NUMBER || !c->is_int || c->i < 0) {
            return train_err_set(e, TRAIN_IO_ERR_JSON,
                                 "%s: tensor '%.80s': shape entry %d is not a size >= 0", label,
                                 name, d);
        }
        t->shape[d] = c->i;
    }
    if (shape_bytes(t->dtype, t->ndim, t->shape, &t->nbytes)) {
        return train_err_set(e, TRAIN_IO_ERR_SIZE,
                             "%s: tensor '%.80s': shape overflows 64-bit sizes", label, name);
    }
    if (off->type != TRAIN_JSON_ARRAY || off->n != 2 || off->child->type != TRAIN_JSON_NUMBER ||
        off->child->next->type != TRAIN_JSON_NUMBER || !off->child->is_int ||
        !off->child->next->is_int) {
        return train_err_set(e, TRAIN_IO_ERR_JSON,
                             "%s: tensor '%.80s': data_offsets must be two integers", label, name);
    }
    int64_t begin = off->child->i, end = off->child->next->i;
    if (begin < 0 || end < begin) {
        return train_err_set(e, TRAIN_IO_ERR_OFFSETS,
                             "%s: tensor '%.80s': data_offsets [%lld, %lld] are not an interval",
                             label, name, (long long)begin, (long long)end);
    }
    if (end > data_size) {
        return train_err_set(e, TRAIN_IO_ERR_TRUNCATED,
                             "%s: tensor '%.80s' ends at data byte %lld but the file holds only "
                             "%lld data bytes (truncated?)",
                             label, name, (long long)end, (long long)data_size);
    }
    if (end - begin != t->nbytes) {
        char s[200];
        return train_err_set(
            e, TRAIN_IO_ERR_OFFSETS,
            "%s: tensor '%.80s': data_offsets span %lld bytes but %s %s needs %lld", label, name,
            (long long)(end - begin), dtypes[t->dtype].name,
            fmt_shape(s, sizeof s, t->ndim, t->shape), (long long)t->nbytes);
    }
    t->data = data + begin;
    return TRAIN_IO_OK;
}

int train_st_parse(train_st_file *f, const uint8_t *buf, int64_t n, const char *label,
                   train_err *e)
{
    memset(f, 0, sizeof *f);
    if (!label) label = "safetensors";
    if (!buf || n == 0) {
        return train_err_set(e, TRAIN_IO_ERR_EMPTY, "%s: empty file, not a safetensors checkpoint",
                             label);
    }
    if (n < 8) {
        return train_err_set(e, TRAIN_IO_ERR_TRUNCATED,
                             "%s: %lld bytes, too short for the 8-byte header length (truncated?)",
                             label, (long long)n);
    }
    uint64_t hl = train_get_u64(buf);
    if (hl > (uint64_t)TRAIN_ST_MAX_HEADER) {
        return train_err_set(e, TRAIN_IO_ERR_SIZE,
                             "%s: header length %llu is absurd (limit %lld bytes): not a "
                             "safetensors file, or a corrupt one",
                             label, (unsigned long long)hl, (long long)TRAIN_ST_MAX_HEADER);
    }
    if ((int64_t)hl > n - 8) {
        return train_err_set(e, TRAIN_IO_ERR_TRUNCATED,
                             "%s: the header length says %llu bytes of JSON but only %lld follow "
                             "(truncated?)",
                             label, (unsigned long long)hl, (long long)(n - 8));
    }
    if (hl == 0) return train_err_set(e, TRAIN_IO_ERR_JSON, "%s: the JSON header is empty", label);
    const uint8_t *data = buf + 8 + hl;
    const int64_t data_size = n - 8 - (int64_t)hl;

    char jerr[256];
    if (train_json_parse(&f->doc, (const char *)buf + 8, (int64_t)hl, jerr, sizeof jerr)) {
        return train_err_set(e, TRAIN_IO_ERR_JSON,
                             "%s: bad JSON header: %s (file offset = header offset + 8)", label,
                             jerr);
    }
    int rc = TRAIN_IO_OK;
    const train_json *root = f->doc.root;
    if (root->type != TRAIN_JSON_OBJECT) {
        rc = train_err_set(e, TRAIN_IO_ERR_JSON, "%s: the JSON header is a %s, not an object",
                           label, train_json_type_name(root->type));
        goto fail;
    }
    const train_json *meta = NULL;
    int64_t n_tensors = 0;
    for (const train_json *c = root->child; c; c = c->next) {
        if (!strcmp(c->key, "__metadata__")) meta = c;
        else n_tensors++;
    }
    f->tensors = calloc((size_t)(n_tensors ? n_tensors : 1), sizeof *f->tensors);
    if (meta) {
        if (meta->type != TRAIN_JSON_OBJECT) {
            rc = train_err_set(e, TRAIN_IO_ERR_JSON, "%s: __metadata__ is a %s, not an object",
                               label, train_json_type_name(meta->type));
            goto fail;
        }
        f->meta = calloc((size_t)(meta->n ? meta->n : 1), sizeof *f->meta);
    }
    if (!f->tensors || (meta && !f->meta)) {
        rc = train_err_set(e, TRAIN_IO_ERR_NOMEM, "%s: out of memory", label);
        goto fail;
    }
    if (meta) {
        for (const train_json *c = meta->child; c; c = c->next) {
            if (c->type != TRAIN_JSON_STRING) {
                rc = train_err_set(e, TRAIN_IO_ERR_JSON,
                                   "%s: __metadata__ value of '%.80s' is a %s, not a string", label,
                                   c->key, train_json_type_name(c->type));
                goto fail;
            }
            f->meta[f->n_meta].key = c->key;
            f->meta[f->n_meta].value = c->str;
            f->n_meta++;
        }
    }
    for (const train_json *c = root->child; c; c = c->next) {
        if (c == meta) continue;
        rc = parse_tensor(c, label, data, data_size, &f->tensors[f->n_tensors], e);
        if (rc) goto fail;
        f->n_tensors++;
    }
    /* The tensors must tile the data section exactly: sorted by offset, each
     * starts where the previous ended, and the last ends at the file's end. */
    qsort(f->tensors, (size_t)f->n_tensors, sizeof *f->tensors, cmp_offsets);
    int64_t at = 0;
    for (int64_t i = 0; i < f->n_tensors; i++) {
        int64_t begin = (const uint8_t *)f->tensors[i].data - data;
        if (begin != at) {
            rc = train_err_set(e, TRAIN_IO_ERR_OFFSETS,
                               "%s: tensor '%.80s' starts at data byte %lld, expected %lld "
                               "(tensors overlap or leave a gap)",
                               label, f->tensors[i].name, (long long)begin, (long long)at);
            goto fail;
        }
        at += f->tensors[i].nbytes;
    }
    if (at != data_size) {
        rc = train_err_set(e, TRAIN_IO_ERR_SIZE,
                           "%s: %lld bytes after the last tensor's data (the tensors cover %lld of "
                           "%lld data bytes)",
                           label, (long long)(data_size - at), (long long)at, (long long)data_size);
        goto fail;
    }
    return TRAIN_IO_OK;
fail:
    train_st_free(f);
    return rc;
}

int train_st_read(train_st_file *f, const char *path, train_err *e)
{
    memset(f, 0, sizeof *f);
    if (!train_host_is_little_endian()) {
        return train_err_set(e, TRAIN_IO_ERR_ARG, "%s: safetensors needs a little-endian host",
                             path);
    }
    uint8_t *buf;
    int64_t n;
    int rc = train_read_file(path, TRAIN_ST_MAX_FILE, &buf, &n, e);
    if (rc) return rc;
    rc = train_st_parse(f, buf, n, path, e);
    if (rc) {
        free(buf);
        return rc;
    }
    f->buf = buf;
    size_t len = strlen(path);
    f->path = malloc(len + 1);
    if (!f->path) {
        train_st_free(f);
        return train_err_set(e, TRAIN_IO_ERR_NOMEM, "%s: out of memory", path);
    }
    memcpy(f->path, path, len + 1);
    return TRAIN_IO_OK;
}

const train_st_tensor *train_st_find(const train_st_file *f, const char *name)
{
    for (int64_t i = 0; i < f->n_tensors; i++) {
        if (!strcmp(f->tensors[i].name, name)) return &f->tensors[i];
    }
    return NULL;
}

const char *train_st_meta(const train_st_file *f, const char *key)
{
    for (int64_t i = 0; i < f->n_meta; i++) {
        if (!strcmp(f->meta[i].key, key)) return f->meta[i].value;
    }
    return NULL;
}

int train_st_load(const train_st_file *f, const train_st_slot *slots, int64_t n_slots,
                  train_err *e)
{
    const char *label = f->path ? f->path : "safetensors";
    for (int64_t i = 0; i < n_slots; i++) {
        const train_st_slot *s = &slots[i];
        const train_st_tensor *t = train_st_find(f, s->name);
        if (!t) {
            return train_err_set(e, TRAIN_IO_ERR_TENSOR,
                                 "%s: tensor '%s' is missing (the checkpoint is of another model?)",
                                 label, s->name);
        }
        if (t->dtype != s->dtype) {
            return train_err_set(
                e, TRAIN_IO_ERR_DTYPE, "%s: tensor '%s' is %s, the model expects %s", label,
                s->name, train_st_dtype_name(t->dtype),
                train_st_dtype_name(s->dtype) ? train_st_dtype_name(s->dtype) : "?");
        }
        int same = t->ndim == s->ndim;
        for (int d = 0; same && d < t->ndim; d++) same = t->shape[d] == s->shape[d];
        if (!same) {
            char a[200], b[200];
            return train_err_set(e, TRAIN_IO_ERR_SHAPE,
                                 "%s: tensor '%s' has shape %s, the model expects %s", label,
                                 s->name, fmt_shape(a, sizeof a, t->ndim, t->shape),
                                 fmt_shape(b, sizeof b, s->ndim < 0 ? 0 : s->ndim > 8 ? 8 : s->ndim,
                                           s->shape));
        }
    }
    /* Every slot was found once; an equal count means no tensor is extra
     * (names are unique on both sides). */
    if (f->n_tensors != n_slots) {
        for (int64_t i = 0; i < f->n_tensors; i++) {
            int64_t j = 0;
            while (j < n_slots && strcmp(slots[j].name, f->tensors[i].name)) j++;
            if (j == n_slots) {
                return train_err_set(e, TRAIN_IO_ERR_TENSOR,
                                     "%s: tensor '%.80s' is not part of the model (%lld tensors "
                                     "in the file, %lld expected)",
                                     label, f->tensors[i].name, (long long)f->n_tensors,
                                     (long long)n_slots);
            }
        }
        return train_err_set(e, TRAIN_IO_ERR_TENSOR, "%s: %lld tensors in the file, %lld expected",
                             label, (long long)f->n_tensors, (long long)n_slots);
    }
    for (int64_t i = 0; i < n_slots; i++) {
        const train_st_tensor *t = train_st_find(f, slots[i].name); /* found above */
        if (t && slots[i].dst && t->nbytes) memcpy(slots[i].dst, t->data, (size_t)t->nbytes);
    }
    return TRAIN_IO_OK;
}

/* ------------------------------------------------------------------------ */
/* Training state                                                           */

static const char state_magic[8] = {'P', 'R', 'N', 'N', 'S', 'T', 'A', 'T'};

static void state_header(const train_state *s, uint8_t h[TRAIN_STATE_HEADER])
{
    memset(h, 0, TRAIN_STATE_HEADER);
    memcpy(h, state_magic, 8);
    train_put_u32(h + 8, TRAIN_STATE_VERSION);
    train_put_u32(h + 12, TRAIN_STATE_HEADER);
    train_put_u64(h + 16, s->config_hash);
    train_put_u64(h + 24, (uint64_t)s->step);
    train_put_u64(h + 32, (uint64_t)s->tokens);
    train_put_u64(h + 40, (uint64_t)s->sampler.batches);
    train_put_u64(h + 48, (uint64_t)s->sampler.pos);
    train_rng_save(&s->sampler.rng, h + 56);
    train_rng_save(&s->rng, h + 88);
    uint64_t bits;
    memcpy(&bits, &s->best_val_loss, 8);
    train_put_u64(h + 120, bits);
    train_put_u64(h + 128, (uint64_t)s->n_params);
}

typedef struct state_writer {
    const char *path;
    const train_state *s;
} state_writer;

static int state_write_body(FILE *f, void *ctx, train_err *e)
{
    const state_writer *w = ctx;
    uint8_t h[TRAIN_STATE_HEADER];
    state_header(w->s, h);
    uint64_t sum = train_fnv1a64(TRAIN_FNV1A64_INIT, h, sizeof h);
    int rc = train_fwrite(f, h, sizeof h, w->path, e);
    const size_t bytes = (size_t)w->s->n_params * sizeof(float);
    if (!rc && bytes) {
        sum = train_fnv1a64(sum, w->s->m, (int64_t)bytes);
        rc = train_fwrite(f, w->s->m, bytes, w->path, e);
    }
    if (!rc && bytes) {
        sum = train_fnv1a64(sum, w->s->v, (int64_t)bytes);
        rc = train_fwrite(f, w->s->v, bytes, w->path, e);
    }
    uint8_t tail[8];
    train_put_u64(tail, sum);
    if (!rc) rc = train_fwrite(f, tail, 8, w->path, e);
    return rc;
}

static int state_values_ok(const train_state *s)
{
    return s->step >= 0 && s->tokens >= 0 && s->sampler.batches >= 0 && s->sampler.pos >= 0 &&
           s->n_params >= 0 && s->n_params <= TRAIN_STATE_MAX_PARAMS;
}

int train_state_write(const char *path, const train_state *s, train_err *e)
{
    if (!path || !s) return train_err_set(e, TRAIN_IO_ERR_ARG, "state: no path or state");
    if (!train_host_is_little_endian()) {
        return train_err_set(e, TRAIN_IO_ERR_ARG, "%s: the state file needs a little-endian host",
                             path);
    }
    if (!state_values_ok(s) || (s->n_params && (!s->m || !s->v))) {
        return train_err_set(e, TRAIN_IO_ERR_ARG, "%s: state with negative counters or no moments",
                             path);
    }
    state_writer w = {path, s};
    return train_atomic_write(path, state_write_body, &w, e);
}

void train_state_free(train_state *s)
{
    free(s->m);
    free(s->v);
    s->m = s->v = NULL;
}

int train_state_parse(train_state *s, const uint8_t *buf, int64_t n, const char *label,
                      train_err *e)
{
    memset(s, 0, sizeof *s);
    if (!label) label = "state";
    if (!buf || n == 0) {
        return train_err_set(e, TRAIN_IO_ERR_EMPTY, "%s: empty file, not a training state", label);
    }
    if (memcmp(buf, state_magic, (size_t)(n < 8 ? n : 8)) != 0) {
        return train_err_set(e, TRAIN_IO_ERR_MAGIC,
                             "%s: not a prnn training state (the file does not start with "
                             "\"PRNNSTAT\")",
                             label);
    }
    if (n < 16) {
        return train_err_set(e, TRAIN_IO_ERR_TRUNCATED,
                             "%s: %lld bytes, shorter than the header (truncated)", label,
                             (long long)n);
    }
    uint32_t version = train_get_u32(buf + 8), header = train_get_u32(buf + 12);
    if (version != TRAIN_STATE_VERSION) {
        return train_err_set(e, TRAIN_IO_ERR_VERSION,
                             "%s: state format version %u, this program reads version %d", label,
                             version, TRAIN_STATE_VERSION);
    }
    if (header != TRAIN_STATE_HEADER) {
        return train_err_set(e, TRAIN_IO_ERR_SIZE, "%s: header size %u, version %d has %d", label,
                             header, TRAIN_STATE_VERSION, TRAIN_STATE_HEADER);
    }
    if (n < TRAIN_STATE_HEADER) {
        return train_err_set(e, TRAIN_IO_ERR_TRUNCATED,
                             "%s: %lld bytes, shorter than the %d-byte header (truncated)", label,
                             (long long)n, TRAIN_STATE_HEADER);
    }
    int64_t P = (int64_t)train_get_u64(buf + 128);
    if (P < 0 || P > TRAIN_STATE_MAX_PARAMS) {
        return train_err_set(e, TRAIN_IO_ERR_SIZE, "%s: parameter count %lld is absurd", label,
                             (long long)P);
    }
    const int64_t expect = TRAIN_STATE_HEADER + 8 * P + 8;
    if (n < expect) {
        return train_err_set(e, TRAIN_IO_ERR_TRUNCATED,
                             "%s: %lld bytes, but %lld parameters need %lld (truncated)", label,
                             (long long)n, (long long)P, (long long)expect);
    }
    if (n > expect) {
        return train_err_set(e, TRAIN_IO_ERR_SIZE,
                             "%s: %lld bytes, %lld more than %lld parameters need", label,
                             (long long)n, (long long)(n - expect), (long long)P);
    }
    uint64_t stored = train_get_u64(buf + n - 8);
    uint64_t sum = train_fnv1a64(TRAIN_FNV1A64_INIT, buf, n - 8);
    if (stored != sum) {
        return train_err_set(e, TRAIN_IO_ERR_CHECKSUM,
                             "%s: checksum mismatch (stored %016llx, contents give %016llx): the "
                             "file is corrupt",
                             label, (unsigned long long)stored, (unsigned long long)sum);
    }
    s->config_hash = train_get_u64(buf + 16);
    s->step = (int64_t)train_get_u64(buf + 24);
    s->tokens = (int64_t)train_get_u64(buf + 32);
    s->sampler.batches = (int64_t)train_get_u64(buf + 40);
    s->sampler.pos = (int64_t)train_get_u64(buf + 48);
    uint64_t bits = train_get_u64(buf + 120);
    memcpy(&s->best_val_loss, &bits, 8);
    s->n_params = P;
    if (train_rng_load(&s->sampler.rng, buf + 56) || train_rng_load(&s->rng, buf + 88)) {
        memset(s, 0, sizeof *s);
        return train_err_set(e, TRAIN_IO_ERR_VALUE, "%s: a random generator state is all zero",
                             label);
    }
    if (!state_values_ok(s)) {
        memset(s, 0, sizeof *s);
        return train_err_set(e, TRAIN_IO_ERR_VALUE, "%s: a negative step, token or data counter",
                             label);
    }
    const size_t bytes = (size_t)P * sizeof(float);
    s->m = malloc(bytes ? bytes : 1);
    s->v = malloc(bytes ? bytes : 1);
    if (!s->m || !s->v) {
        train_state_free(s);
        return train_err_set(e, TRAIN_IO_ERR_NOMEM, "%s: out of memory for %lld moments", label,
                             (long long)P);
    }
    memcpy(s->m, buf + TRAIN_STATE_HEADER, bytes);
    memcpy(s->v, buf + TRAIN_STATE_HEADER + bytes, bytes);
    return TRAIN_IO_OK;
}

int train_state_read(train_state *s, const char *path, train_err *e)
{
    memset(s, 0, sizeof *s);
    if (!train_host_is_little_endian()) {
        return train_err_set(e, TRAIN_IO_ERR_ARG, "%s: the state file needs a little-endian host",
                             path);
    }
    uint8_t *buf;
    int64_t n;
    int rc =
        train_read_file(path, TRAIN_STATE_HEADER + 8 * TRAIN_STATE_MAX_PARAMS + 8, &buf, &n, e);
    if (rc) return rc;
    rc = train_state_parse(s, buf, n, path, e);
    free(buf);
    return rc;
}

int train_state_check(const train_state *s, const char *label, uint64_t config_hash,
                      int64_t n_params, train_err *e)
{
    if (s->config_hash != config_hash) {
        return train_err_set(e, TRAIN_IO_ERR_CONFIG,
                             "%s: saved for a different model configuration (hash %016llx, this "
                             "run's is %016llx): resume with the options it was trained with",
                             label, (unsigned long long)s->config_hash,
                             (unsigned long long)config_hash);
    }
    if (s->n_params != n_params) {
        return train_err_set(e, TRAIN_IO_ERR_CONFIG,
                             "%s: holds moments for %lld parameters, the model has %lld", label,
                             (long long)s->n_params, (long long)n_params);
    }
    return TRAIN_IO_OK;
}
