/*
 * json.c - strict, bounded recursive-descent JSON parser (see json.h).
 */
#include "json.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------------ */
/* Arena: blocks chained for freeing, allocations 8-byte aligned            */

typedef struct arena_block {
    struct arena_block *next;
    size_t used, cap;
    unsigned char *data;
} arena_block;

#define ARENA_BLOCK 65536

static void *arena_alloc(arena_block **head, size_t n)
{
    n = (n + 7) & ~(size_t)7;
    arena_block *b = *head;
    if (!b || b->cap - b->used < n) {
        size_t cap = n > ARENA_BLOCK ? n : ARENA_BLOCK;
        b = malloc(sizeof *b);
        if (!b) return NULL;
        b->data = malloc(cap);
        if (!b->data) {
            free(b);
            return NULL;
        }
        b->used = 0;
        b->cap = cap;
        b->next = *head;
        *head = b;
    }
    void *p = b->data + b->used;
    b->used += n;
    return p;
}

static void arena_free(arena_block *b)
{
    while (b) {
        arena_block *next = b->next;
        free(b->data);
        free(b);
        b = next;
    }
}

/* ------------------------------------------------------------------------ */

typedef struct parser {
    const unsigned char *s;
    int64_t n, i;
    arena_block *arena;
    char *err;
    size_t errlen;
    int failed;
} parser;

static int fail(parser *p, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int fail(parser *p, const char *fmt, ...)
{
    if (p->failed) return -1;
    p->failed = 1;
    if (p->err && p->errlen) {
        int k = snprintf(p->err, p->errlen, "at byte %lld: ", (long long)p->i);
        if (k >= 0 && (size_t)k < p->errlen) {
            va_list ap;
            va_start(ap, fmt);
            vsnprintf(p->err + k, p->errlen - (size_t)k, fmt, ap);
            va_end(ap);
        }
    }
    return -1;
}

static void skip_ws(parser *p)
{
    while (p->i < p->n) {
        unsigned char c = p->s[p->i];
        if (c != ' ' && c != '\t' && c != '\n' && c != '\r') break;
        p->i++;
    }
}

static train_json *new_node(parser *p, train_json_type type)
{
    train_json *v = arena_alloc(&p->arena, sizeof *v);
    if (!v) {
        fail(p, "out of memory");
        return NULL;
    }
    memset(v, 0, sizeof *v);
    v->type = type;
    return v;
}

/* Length of the valid UTF-8 sequence starting at s[0] (at most n bytes), or
 * 0 when it is malformed, overlong, a surrogate or above U+10FFFF. */
static int utf8_len(const unsigned char *s, int64_t n)
{
    unsigned char c = s[0];
    if (c < 0x80) return 1;
    int len;
    unsigned lo = 0x80, hi = 0xBF;
    if (c >= 0xC2 && c <= 0xDF) len = 2;
    else if (c == 0xE0) len = 3, lo = 0xA0;
    else if (c >= 0xE1 && c <= 0xEC) len = 3;
    else if (c == 0xED) len = 3, hi = 0x9F;
    else if (c >= 0xEE && c <= 0xEF) len = 3;
    else if (c == 0xF0) len = 4, lo = 0x90;
    else if (c >= 0xF1 && c <= 0xF3) len = 4;
    else if (c == 0xF4) len = 4, hi = 0x8F;
    else return 0;
    if (n < len) return 0;
    if (s[1] < lo || s[1] > hi) return 0;
    for (int k = 2; k < len; k++) {
        if (s[k] < 0x80 || s[k] > 0xBF) return 0;
    }
    return len;
}

static int hex4(const unsigned char *s, unsigned *out)
{
    unsigned v = 0;
    for (int k = 0; k < 4; k++) {
        unsigned c = s[k], d;
        if (c >= '0' && c <= '9') d = c - '0';
        else if (c >= 'a' && c <= 'f') d = c - 'a' + 10;
        else if (c >= 'A' && c <= 'F') d = c - 'A' + 10;
        else return -1;
        v = v * 16 + d;
    }
    *out = v;
    return 0;
}

static char *put_utf8(char *o, unsigned cp)
{
    if (cp < 0x80) {
        *o++ = (char)cp;
    } else if (cp < 0x800) {
        *o++ = (char)(0xC0 | (cp >> 6));
        *o++ = (char)(0x80 | (cp & 0x3F));
    } else if (cp < 0x10000) {
        *o++ = (char)(0xE0 | (cp >> 12));
        *o++ = (char)(0x80 | ((cp >> 6) & 0x3F));
        *o++ = (char)(0x80 | (cp & 0x3F));
    } else {
        *o++ = (char)(0xF0 | (cp >> 18));
        *o++ = (char)(0x80 | ((cp >> 12) & 0x3F));
        *o++ = (char)(0x80 | ((cp >> 6) & 0x3F));
        *o++ = (char)(0x80 | (cp & 0x3F));
    }
    return o;
}

/* Parses a string at p->i (on the opening quote) into new arena memory. */
static int parse_string(parser *p, const char **out, int64_t *out_len)
{
    p->i++; /* opening quote */
    /* The decoded form is never longer than the raw one, so the first pass
     * only finds the closing quote. */
    int64_t j = p->i;
    while (j < p->n && p->s[j] != '"') j += p->s[j] == '\\' ? 2 : 1;
    if (j >= p->n) return fail(p, "unterminated string");
    char *o = arena_alloc(&p->arena, (size_t)(j - p->i) + 1);
    if (!o) return fail(p, "out of memory");
    char *start = o;
    while (p->s[p->i] != '"') {
        unsigned char c = p->s[p->i];
        if (c < 0x20) return fail(p, "control character 0x%02x inside a string", c);
        if (c != '\\') {
            int len = utf8_len(p->s + p->i, p->n - p->i);
            if (!len) return fail(p, "invalid UTF-8 inside a string");
            memcpy(o, p->s + p->i, (size_t)len);
            o += len;
            p->i += len;
            continue;
        }
        /* the first pass guarantees a byte after each backslash */
        unsigned char esc = p->s[p->i + 1];
        p->i += 2;
        switch (esc) {
        case '"': *o++ = '"'; break;
        case '\\': *o++ = '\\'; break;
        case '/': *o++ = '/'; break;
        case 'b': *o++ = '\b'; break;
        case 'f': *o++ = '\f'; break;
        case 'n': *o++ = '\n'; break;
        case 'r': *o++ = '\r'; break;
        case 't': *o++ = '\t'; break;
        case 'u': {
            unsigned cp;
            if (p->n - p->i < 4 || hex4(p->s + p->i, &cp)) return fail(p, "bad \\u escape");
            p->i += 4;
            if (cp >= 0xDC00 && cp <= 0xDFFF) return fail(p, "lone low surrogate in \\u escape");
            if (cp >= 0xD800 && cp <= 0xDBFF) {
                unsigned lo;
                if (p->n - p->i < 6 || p->s[p->i] != '\\' || p->s[p->i + 1] != 'u' ||
                    hex4(p->s + p->i + 2, &lo) || lo < 0xDC00 || lo > 0xDFFF) {
                    return fail(p, "high surrogate without its low half in \\u escape");
                }
                p->i += 6;
                cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
            }
            if (cp == 0) return fail(p, "\\u0000 is not allowed in a string");
            o = put_utf8(o, cp);
            break;
        }
        default: return fail(p, "bad escape '\\%c'", esc >= 0x20 && esc < 0x7F ? esc : '?');
        }
    }
    p->i++; /* closing quote */
    *o = 0;
    *out = start;
    *out_len = (int64_t)(o - start);
    return 0;
}

static int is_digit(unsigned char c) { return c >= '0' && c <= '9'; }

static int parse_number(parser *p, train_json *v)
{
    int64_t start = p->i;
    int neg = 0, integral = 1;
    if (p->s[p->i] == '-') neg = 1, p->i++;
    if (p->i >= p->n || !is_digit(p->s[p->i])) return fail(p, "bad number");
    if (p->s[p->i] == '0') {
        p->i++;
        if (p->i < p->n && is_digit(p->s[p->i])) return fail(p, "number with a leading zero");
    } else {
        while (p->i < p->n && is_digit(p->s[p->i])) p->i++;
    }
    if (p->i < p->n && p->s[p->i] == '.') {
        integral = 0;
        p->i++;
        if (p->i >= p->n || !is_digit(p->s[p->i])) return fail(p, "bad fraction in a number");
        while (p->i < p->n && is_digit(p->s[p->i])) p->i++;
    }
    if (p->i < p->n && (p->s[p->i] == 'e' || p->s[p->i] == 'E')) {
        integral = 0;
        p->i++;
        if (p->i < p->n && (p->s[p->i] == '+' || p->s[p->i] == '-')) p->i++;
        if (p->i >= p->n || !is_digit(p->s[p->i])) return fail(p, "bad exponent in a number");
        while (p->i < p->n && is_digit(p->s[p->i])) p->i++;
    }
    int64_t len = p->i - start;
    char buf[64];
    if (len >= (int64_t)sizeof buf) return fail(p, "number longer than %d characters", 63);
    memcpy(buf, p->s + start, (size_t)len);
    buf[len] = 0;
    v->num = strtod(buf, NULL);
    if (integral) {
        /* Accumulate negatively so that INT64_MIN fits. */
        int64_t acc = 0;
        int fits = 1;
        for (int64_t k = neg; k < len; k++) {
            int d = buf[k] - '0';
            if (acc < (INT64_MIN + d) / 10) {
                fits = 0;
                break;
            }
            acc = acc * 10 - d;
        }
        if (fits && !neg && acc == INT64_MIN) fits = 0;
        if (fits) {
            v->is_int = 1;
            v->i = neg ? acc : -acc;
        }
    }
    return 0;
}

static int literal(parser *p, const char *word)
{
    size_t len = strlen(word);
    if ((size_t)(p->n - p->i) < len || memcmp(p->s + p->i, word, len) != 0) {
        return fail(p, "unexpected character '%c'",
                    p->s[p->i] >= 0x20 && p->s[p->i] < 0x7F ? p->s[p->i] : '?');
    }
    p->i += (int64_t)len;
    return 0;
}

static int cmp_keys(const void *a, const void *b)
{
    return strcmp((*(const train_json *const *)a)->key, (*(const train_json *const *)b)->key);
}

/* Duplicate keys would let two readers of one file see different values;
 * sorting finds them in O(n log n) even in a huge object. */
static int check_duplicates(parser *p, train_json *obj)
{
    if (obj->n < 2) return 0;
    train_json **v = malloc((size_t)obj->n * sizeof *v);
    if (!v) return fail(p, "out of memory");
    int64_t k = 0;
    for (train_json *c = obj->child; c; c = c->next) v[k++] = c;
    qsort(v, (size_t)k, sizeof *v, cmp_keys);
    int rc = 0;
    for (int64_t j = 1; j < k; j++) {
        if (!strcmp(v[j - 1]->key, v[j]->key)) {
            rc = fail(p, "duplicate key \"%.64s\" in an object", v[j]->key);
            break;
        }
    }
    free(v);
    return rc;
}

static train_json *parse_value(parser *p, int depth);

static train_json *parse_container(parser *p, int depth, int is_object)
{
    if (depth >= TRAIN_JSON_MAX_DEPTH) {
        fail(p, "nested deeper than %d levels", TRAIN_JSON_MAX_DEPTH);
        return NULL;
    }
    train_json *v = new_node(p, is_object ? TRAIN_JSON_OBJECT : TRAIN_JSON_ARRAY);
    if (!v) return NULL;
    const unsigned char close = is_object ? '}' : ']';
    p->i++;
    skip_ws(p);
    if (p->i < p->n && p->s[p->i] == close) {
        p->i++;
        return v;
    }
    train_json **tail = &v->child;
    for (;;) {
        const char *key = NULL;
        if (is_object) {
            skip_ws(p);
            if (p->i >= p->n || p->s[p->i] != '"') {
                fail(p, "expected a string key in an object");
                return NULL;
            }
            int64_t klen;
            if (parse_string(p, &key, &klen)) return NULL;
            skip_ws(p);
            if (p->i >= p->n || p->s[p->i] != ':') {
                fail(p, "expected ':' after an object key");
                return NULL;
            }
            p->i++;
        }
        train_json *c = parse_value(p, depth + 1);
        if (!c) return NULL;
        c->key = key;
        *tail = c;
        tail = &c->next;
        v->n++;
        skip_ws(p);
        if (p->i >= p->n) {
            fail(p, "unterminated %s", is_object ? "object" : "array");
            return NULL;
        }
        if (p->s[p->i] == ',') {
            p->i++;
            continue;
        }
        if (p->s[p->i] == close) {
            p->i++;
            break;
        }
        fail(p, "expected ',' or '%c'", close);
        return NULL;
    }
    if (is_object && check_duplicates(p, v)) return NULL;
    return v;
}

static train_json *parse_value(parser *p, int depth)
{
    skip_ws(p);
    if (p->i >= p->n) {
        fail(p, "unexpected end of input");
        return NULL;
    }
    unsigned char c = p->s[p->i];
    train_json *v;
    switch (c) {
    case '{': return parse_container(p, depth, 1);
    case '[': return parse_container(p, depth, 0);
    case '"':
        v = new_node(p, TRAIN_JSON_STRING);
        if (!v || parse_string(p, &v->str, &v->len)) return NULL;
        return v;
    case 't':
        v = new_node(p, TRAIN_JSON_TRUE);
        return v && !literal(p, "true") ? v : NULL;
    case 'f':
        v = new_node(p, TRAIN_JSON_FALSE);
        return v && !literal(p, "false") ? v : NULL;
    case 'n':
        v = new_node(p, TRAIN_JSON_NULL);
        return v && !literal(p, "null") ? v : NULL;
    default:
        if (c == '-' || is_digit(c)) {
            v = new_node(p, TRAIN_JSON_NUMBER);
            if (!v || parse_number(p, v)) return NULL;
            return v;
        }
        fail(p, "unexpected character '%c'", c >= 0x20 && c < 0x7F ? c : '?');
        return NULL;
    }
}

int train_json_parse(train_json_doc *doc, const char *text, int64_t len, char *err, size_t errlen)
{
    doc->root = NULL;
    doc->arena = NULL;
    if (err && errlen) err[0] = 0;
    parser p = {(const unsigned char *)text, len, 0, NULL, err, errlen, 0};
    if (!text || len < 0) {
        p.n = 0;
        fail(&p, "no input");
        return -1;
    }
    train_json *root = parse_value(&p, 0);
    if (root) {
        skip_ws(&p);
        if (p.i != p.n) {
            fail(&p, "unexpected data after the JSON value");
            root = NULL;
        }
    }
    if (!root) {
        arena_free(p.arena);
        return -1;
    }
    doc->root = root;
    doc->arena = p.arena;
    return 0;
}

void train_json_free(train_json_doc *doc)
{
    arena_free(doc->arena);
    doc->root = NULL;
    doc->arena = NULL;
}

const train_json *train_json_get(const train_json *obj, const char *key)
{
    if (!obj || obj->type != TRAIN_JSON_OBJECT) return NULL;
    for (const train_json *c = obj->child; c; c = c->next) {
        if (!strcmp(c->key, key)) return c;
    }
    return NULL;
}

int train_json_utf8_valid(const char *s, int64_t n)
{
    const unsigned char *u = (const unsigned char *)s;
    for (int64_t i = 0; i < n;) {
        int len = utf8_len(u + i, n - i);
        if (!len) return 0;
        i += len;
    }
    return 1;
}

const char *train_json_type_name(train_json_type type)
{
    static const char *const n[] = {"null", "false", "true", "number", "string", "array", "object"};
    return (int)type >= 0 && type <= TRAIN_JSON_OBJECT ? n[type] : "unknown";
}
