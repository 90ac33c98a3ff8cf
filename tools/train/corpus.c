/*
 * corpus.c - the builtin training text: about 64 KiB of English-like prose
 * generated from a small grammar with a fixed seed, so it is the same bytes
 * everywhere and costs a few hundred lines of source instead of a file.
 *
 * It is made to be learnable at several ranges, so that a small byte-level
 * model shows steady progress and its samples visibly improve:
 *   - spelling of a closed vocabulary and punctuation (a few bytes back);
 *   - grammar: number agreement between subject and verb, articles;
 *   - counting ("three, four, five"), days and months in order;
 *   - sums in stories ("had 12 apples and found 7 more, so Ada had 19
 *     apples"): the name and the numbers must be remembered;
 *   - quotations repeated word for word later in the sentence, the longest
 *     dependency (tens of bytes), which rewards a real memory;
 *   - numbered chapters, counting up across the whole text.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "data.h"
#include "fileio.h"

#define CORPUS_TARGET_BYTES 65536
#define CORPUS_SEED 0x70726e6e636f7270ull

#define COUNT(a) ((int)(sizeof(a) / sizeof((a)[0])))

static const char *const names[] = {"Ada", "Ben", "Cleo", "Dan", "Eva", "Finn", "Gus", "Hana",
                                    "Ivo", "June", "Kai", "Lea", "Milo", "Nora", "Otto", "Pia"};
/* singular, plural */
static const char *const animals[][2] = {
    {"fox", "foxes"},   {"bird", "birds"}, {"cat", "cats"},     {"dog", "dogs"},
    {"owl", "owls"},    {"horse", "horses"}, {"mouse", "mice"}, {"goat", "goats"},
    {"bee", "bees"},    {"wolf", "wolves"}, {"frog", "frogs"},  {"sheep", "sheep"},
};
static const char *const adjectives[] = {"small", "old", "quiet", "red", "brown", "quick",
                                         "lazy", "bright", "tired", "young", "grey", "clever"};
static const char *const places[] = {"the river", "the hill", "the old mill", "the garden",
                                     "the market", "the forest", "the bridge", "the harbour",
                                     "the school", "the tower", "the well", "the orchard"};
/* third person singular, plural, past */
static const char *const verbs[][3] = {
    {"sees", "see", "saw"},          {"follows", "follow", "followed"},
    {"finds", "find", "found"},      {"carries", "carry", "carried"},
    {"watches", "watch", "watched"}, {"counts", "count", "counted"},
    {"paints", "paint", "painted"},  {"hides", "hide", "hid"},
    {"keeps", "keep", "kept"},       {"drops", "drop", "dropped"},
};
static const char *const objects[] = {"a stone", "the bell", "an apple", "the lamp", "a basket",
                                      "the map", "a feather", "the key", "a letter", "the boat",
                                      "an egg", "the rope"};
static const char *const times[] = {"at dawn", "at noon", "in the evening", "at night",
                                    "every morning", "before the rain", "after supper",
                                    "on sunday"};
static const char *const preps[] = {"near", "behind", "under", "beside", "across", "inside"};
static const char *const things[] = {"apples", "coins", "shells", "books", "plums", "buttons",
                                     "marbles", "cards"};
static const char *const numbers[] = {"zero", "one",   "two",    "three",  "four",
                                      "five", "six",   "seven",  "eight",  "nine",
                                      "ten",  "eleven", "twelve"};
static const char *const days[] = {"monday", "tuesday", "wednesday", "thursday",
                                   "friday", "saturday", "sunday"};
static const char *const months[] = {"january", "february", "march",     "april",
                                     "may",     "june",     "july",      "august",
                                     "september", "october", "november", "december"};

#define PICK(r, a) ((a)[train_rng_below((r), (uint64_t)COUNT(a))])

static int pick(train_rng *r, int n) { return (int)train_rng_below(r, (uint64_t)n); }

/* A clause without the final period: "the quick fox hides the key near the
 * well at noon" (singular) or "three grey wolves follow a letter ..." */
static void clause(train_text *s, train_rng *r)
{
    int a = pick(r, COUNT(animals)), v = pick(r, COUNT(verbs));
    if (pick(r, 2)) {
        train_text_printf(s, "the %s %s %s %s", PICK(r, adjectives), animals[a][0], verbs[v][0],
                          PICK(r, objects));
    } else {
        train_text_printf(s, "%s %s %s %s %s", numbers[2 + pick(r, 11)], PICK(r, adjectives),
                          animals[a][1], verbs[v][1], PICK(r, objects));
    }
    train_text_printf(s, " %s %s", PICK(r, preps), PICK(r, places));
    if (pick(r, 2)) train_text_printf(s, " %s", PICK(r, times));
}

/* Writes str with its first letter capitalised. */
static void put_cap(train_text *s, const char *str)
{
    char tmp[512];
    snprintf(tmp, sizeof tmp, "%s", str);
    if (tmp[0] >= 'a' && tmp[0] <= 'z') tmp[0] = (char)(tmp[0] - 'a' + 'A');
    train_text_puts(s, tmp);
}

static void sentence(train_text *s, train_rng *r)
{
    switch (pick(r, 9)) {
    case 0:
    case 1: { /* plain description */
        train_text c = {0};
        clause(&c, r);
        if (c.failed || !c.p) {
            s->failed = 1;
            free(c.p);
            return;
        }
        put_cap(s, c.p);
        train_text_puts(s, ".");
        free(c.p);
        break;
    }
    case 2: { /* a past-tense event */
        int v = pick(r, COUNT(verbs));
        train_text_printf(s, "Yesterday %s %s %s %s %s.", PICK(r, names), verbs[v][2],
                          PICK(r, objects), PICK(r, preps), PICK(r, places));
        break;
    }
    case 3: { /* sums in a story */
        const char *who = PICK(r, names), *what = PICK(r, things);
        int a = 2 + pick(r, 20), b = 2 + pick(r, 20); /* plural nouns */
        if (pick(r, 2)) {
            train_text_printf(s, "%s had %d %s and found %d more, so %s had %d %s.", who, a, what,
                              b, who, a + b, what);
        } else {
            train_text_printf(s, "%s had %d %s and gave away %d, so %s had %d %s left.", who,
                              a + b, what, b, who, a, what);
        }
        break;
    }
    case 4: { /* counting */
        int from = 1 + pick(r, 6), len = 3 + pick(r, 5);
        train_text_printf(s, "%s counted: ", PICK(r, names));
        for (int i = 0; i < len; i++) {
            train_text_printf(s, "%s%s", numbers[from + i], i + 1 < len ? ", " : ".");
        }
        break;
    }
    case 5: { /* days and months in order */
        if (pick(r, 2)) {
            int d = pick(r, 7);
            train_text_printf(s, "After %s comes %s.", days[d], days[(d + 1) % 7]);
        } else {
            int m = pick(r, 12);
            train_text_printf(s, "The month after %s is %s.", months[m], months[(m + 1) % 12]);
        }
        break;
    }
    case 6:
    case 7: { /* a quotation repeated word for word */
        train_text c = {0};
        clause(&c, r);
        if (c.failed || !c.p) {
            s->failed = 1;
            free(c.p);
            return;
        }
        const char *a = PICK(r, names), *b = PICK(r, names);
        if (pick(r, 2)) {
            train_text_printf(s, "%s said, \"%s.\" And %s said it again: \"%s.\"", a, c.p, b, c.p);
        } else {
            train_text_printf(s, "%s wrote \"%s\" on the wall, and %s read it aloud: \"%s.\"", a,
                              c.p, b, c.p);
        }
        free(c.p);
        break;
    }
    default: { /* a question answered with the same noun */
        int a = pick(r, COUNT(animals));
        train_text_printf(s, "Where is the %s? The %s is %s %s.", animals[a][0], animals[a][0],
                          PICK(r, preps), PICK(r, places));
        break;
    }
    }
}

uint8_t *train_corpus_builtin(int64_t *n)
{
    train_rng r;
    train_rng_seed(&r, CORPUS_SEED);
    train_text s = {0};
    int chapter = 0, para = 0;
    while (s.n < CORPUS_TARGET_BYTES && !s.failed) {
        if (para % 12 == 0) train_text_printf(&s, "Chapter %d\n\n", ++chapter);
        int sentences = 3 + pick(&r, 4);
        for (int i = 0; i < sentences; i++) {
            if (i) train_text_puts(&s, " ");
            sentence(&s, &r);
        }
        train_text_puts(&s, "\n\n");
        para++;
    }
    if (s.failed) {
        free(s.p);
        *n = 0;
        return NULL;
    }
    *n = (int64_t)s.n;
    return (uint8_t *)s.p;
}
