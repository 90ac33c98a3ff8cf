/*
 * fuzz_json.c - libFuzzer target: any bytes as JSON. The parser must refuse
 * or accept without reading past the input, and an accepted document must be
 * well formed: child counts matching the lists, keys exactly on object
 * members, strings valid UTF-8 of their stated length.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "json.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int64_t walk(const train_json *v, int depth)
{
    if (depth > TRAIN_JSON_MAX_DEPTH + 1) abort();
    int64_t nodes = 1;
    if (v->type == TRAIN_JSON_STRING) {
        if ((int64_t)strlen(v->str) != v->len || !train_json_utf8_valid(v->str, v->len)) abort();
    }
    if (v->type == TRAIN_JSON_ARRAY || v->type == TRAIN_JSON_OBJECT) {
        int64_t n = 0;
        for (const train_json *c = v->child; c; c = c->next) {
            if ((v->type == TRAIN_JSON_OBJECT) != (c->key != NULL)) abort();
            if (c->key && !train_json_utf8_valid(c->key, (int64_t)strlen(c->key))) abort();
            if (c->key && train_json_get(v, c->key) == NULL) abort();
            nodes += walk(c, depth + 1);
            n++;
        }
        if (n != v->n) abort();
    }
    return nodes;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *buf = malloc(size ? size : 1);
    if (!buf) return 0;
    if (size) memcpy(buf, data, size);
    train_json_doc d;
    char err[256];
    if (train_json_parse(&d, buf, (int64_t)size, err, sizeof err) == 0) {
        if (walk(d.root, 0) > (int64_t)size) abort(); /* every node costs a byte at least */
    } else if (d.root || d.arena || !err[0]) {
        abort();
    }
    train_json_free(&d);
    free(buf);
    return 0;
}
