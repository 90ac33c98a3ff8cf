/*
 * json.h - a small strict JSON parser for safetensors headers.
 *
 * Strict: RFC 8259 grammar only (no comments, trailing commas, NaN, leading
 * zeros or bare control characters), valid UTF-8 and escapes, no duplicate
 * keys, no "\u0000" (names become C strings). Bounded: nesting depth is
 * capped, every allocation comes from one arena freed at once, and the work
 * is O(n log n) in the input size whatever the input is.
 */
#ifndef PRNN_TRAIN_JSON_H
#define PRNN_TRAIN_JSON_H

#include <stddef.h>
#include <stdint.h>

typedef enum train_json_type {
    TRAIN_JSON_NULL = 0,
    TRAIN_JSON_FALSE,
    TRAIN_JSON_TRUE,
    TRAIN_JSON_NUMBER,
    TRAIN_JSON_STRING,
    TRAIN_JSON_ARRAY,
    TRAIN_JSON_OBJECT
} train_json_type;

typedef struct train_json train_json;
struct train_json {
    train_json_type type;
    const char *key;    /* member name inside an object (NUL-terminated), else NULL */
    const char *str;    /* STRING: decoded UTF-8, NUL-terminated */
    int64_t len;        /* STRING: bytes in str */
    int is_int;         /* NUMBER: 1 when written as an integer that fits int64 */
    int64_t i;          /* NUMBER with is_int */
    double num;         /* NUMBER: the value as a double */
    int64_t n;          /* ARRAY, OBJECT: number of children */
    train_json *child;  /* ARRAY, OBJECT: first child, in document order */
    train_json *next;   /* next sibling */
};

typedef struct train_json_doc {
    train_json *root;
    void *arena;
} train_json_doc;

#define TRAIN_JSON_MAX_DEPTH 64

/*
 * Parses text[0..len) (need not be NUL-terminated). On failure returns -1
 * with err holding "at byte N: what was wrong"; doc is then empty and
 * train_json_free() is still safe.
 */
int train_json_parse(train_json_doc *doc, const char *text, int64_t len, char *err, size_t errlen);
void train_json_free(train_json_doc *doc);

/* The member named key of an object, or NULL. */
const train_json *train_json_get(const train_json *obj, const char *key);

/* 1 when s[0..n) is valid UTF-8 (no overlongs, surrogates or code points
 * above U+10FFFF): what the parser accepts inside strings. */
int train_json_utf8_valid(const char *s, int64_t n);

/* "null", "false", "true", "number", "string", "array", "object". */
const char *train_json_type_name(train_json_type type);

#endif /* PRNN_TRAIN_JSON_H */
