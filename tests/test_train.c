/*
 * test_train.c - `prnn train`, `prnn sample` and `prnn eval` end to end on
 * the CPU, through the same functions the program calls: a run stopped
 * half way and resumed ends with exactly the weights, optimizer state and
 * losses of an uninterrupted run; sampling and evaluation read the
 * checkpoint; bad arguments exit 2 and bad or mismatched files exit 1 with
 * a message, never a crash.
 *
 * The commands' own output goes to a file in the test's directory (shown
 * when a check fails), so the suite prints one line per check.
 */
#define _POSIX_C_SOURCE 200809L /* mkdtemp, dup, dup2 */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "test_cmd.h"
#include "test_util.h"
#include "train/train.h"

static char g_dir[256];
static char g_out[300];

typedef int (*cmd_fn)(int, char **);

/* Runs a command with its output in g_out; returns its exit code. */
static int run(cmd_fn fn, const char *args) { return tc_run(fn, args, g_out); }

static int same_file(const char *a, const char *b)
{
    long na = 0, nb = 0;
    char *x = tc_slurp(a, &na), *y = tc_slurp(b, &nb);
    const int same = x && y && na == nb && !memcmp(x, y, (size_t)na);
    free(x);
    free(y);
    return same;
}

static int output_has(const char *needle)
{
    long n = 0;
    char *s = tc_slurp(g_out, &n);
    const int has = s && strstr(s, needle);
    free(s);
    return has;
}

static void show_output_if(int failed)
{
    if (!failed) return;
    long n = 0;
    char *s = tc_slurp(g_out, &n);
    if (s) fprintf(stderr, "---- command output ----\n%s------------------------\n", s);
    free(s);
}

/* The loss column of the log's train rows for steps > from, as one string. */
static char *train_losses(const char *log, int from)
{
    long n = 0;
    char *s = tc_slurp(log, &n);
    if (!s) return NULL;
    char *out = calloc((size_t)n + 1, 1);
    for (char *line = strtok(s, "\n"); line; line = strtok(NULL, "\n")) {
        int step;
        char kind[16], loss[32];
        if (sscanf(line, "%d %15s %31s", &step, kind, loss) == 3 && !strcmp(kind, "train") &&
            step > from) {
            strcat(out, loss);
            strcat(out, " ");
        }
    }
    free(s);
    return out;
}

static void write_file(const char *path, const char *text, size_t n)
{
    FILE *f = fopen(path, "wb");
    if (f) {
        fwrite(text, 1, n, f);
        fclose(f);
    }
}

int main(void)
{
    snprintf(g_dir, sizeof g_dir, "/tmp/prnn_test_train_XXXXXX");
    if (!mkdtemp(g_dir)) {
        perror("mkdtemp");
        return 1;
    }
    snprintf(g_out, sizeof g_out, "%s/output.txt", g_dir);
    printf("prnn trainer tests in %s\n", g_dir);

    /* A small model, a short run: checkpoints at 4 and 8, evaluations at 5
     * and 10, dropout on so that its masks must also resume exactly. */
    char common[1024], args[1400], a[512], b[512];
    snprintf(common, sizeof common,
             "--steps 10 --warmup 2 --hidden 16 --layers 2 --seq-len 24 --batch 3 "
             "--eval-interval 5 --eval-batches 2 --ckpt-interval 4 --dropout 0.1 --threads 2 "
             "--seed 5");

    snprintf(args, sizeof args, "%s --out %s/a", common, g_dir);
    int rc = run(train_cmd_train, args);
    tu_check(rc == 0, "uninterrupted run of 10 steps: exit %d", rc);
    show_output_if(rc != 0);

    snprintf(args, sizeof args, "%s --out %s/b --stop-after 6", common, g_dir);
    rc = run(train_cmd_train, args);
    tu_check(rc == 0 && output_has("stopped after step 6"),
             "run stopped after 6 steps saves a checkpoint: exit %d", rc);
    show_output_if(rc != 0);
    snprintf(args, sizeof args, "%s --out %s/b --resume", common, g_dir);
    rc = run(train_cmd_train, args);
    tu_check(rc == 0 && output_has("resuming"), "resumed run finishes: exit %d", rc);
    show_output_if(rc != 0);

    snprintf(a, sizeof a, "%s/a/model.safetensors", g_dir);
    snprintf(b, sizeof b, "%s/b/model.safetensors", g_dir);
    tu_check(same_file(a, b), "resumed weights equal the uninterrupted run's, byte for byte");
    snprintf(a, sizeof a, "%s/a/model.state", g_dir);
    snprintf(b, sizeof b, "%s/b/model.state", g_dir);
    tu_check(same_file(a, b),
             "resumed optimizer moments, step and data position equal, byte for byte");
    snprintf(a, sizeof a, "%s/a/log.tsv", g_dir);
    snprintf(b, sizeof b, "%s/b/log.tsv", g_dir);
    char *la = train_losses(a, 6), *lb = train_losses(b, 6);
    tu_check(la && lb && *la && !strcmp(la, lb), "losses of steps 7-10 equal: [%s] vs [%s]",
             la ? la : "?", lb ? lb : "?");
    free(la);
    free(lb);

    /* sample and eval from the checkpoint */
    snprintf(args, sizeof args, "--checkpoint %s/a/model.safetensors --length 40 --seed 3 --prompt The",
             g_dir);
    rc = run(train_cmd_sample, args);
    long n = 0;
    char *s1 = tc_slurp(g_out, &n);
    rc |= run(train_cmd_sample, args);
    char *s2 = tc_slurp(g_out, &n);
    tu_check(rc == 0 && s1 && s2 && !strcmp(s1, s2) && strlen(s1) >= 40,
             "sample writes 40 bytes, the same for the same seed: exit %d", rc);
    free(s1);
    free(s2);

    char text[300], tp[400];
    for (int i = 0; i < 299; i++) text[i] = "the cat sat on the mat. "[i % 24];
    snprintf(tp, sizeof tp, "%s/held_out.txt", g_dir);
    write_file(tp, text, 299);
    snprintf(args, sizeof args, "--checkpoint %s/a/model.safetensors --data %s --seq-len 24", g_dir,
             tp);
    rc = run(train_cmd_eval, args);
    tu_check(rc == 0 && output_has("bits/byte"), "eval scores a file: exit %d", rc);
    show_output_if(rc != 0);

    /* A bidirectional model trains and saves, then says why it shows no
     * sample (it cannot generate); prnn sample refuses its checkpoint. */
    snprintf(args, sizeof args,
             "--bidirectional --steps 2 --warmup 0 --hidden 8 --layers 1 --seq-len 16 --batch 2 "
             "--eval-interval 0 --threads 2 --out %s/bi", g_dir);
    rc = run(train_cmd_train, args);
    tu_check(rc == 0 && output_has("no sample: a bidirectional model"),
             "bidirectional training ends with exit 0 and says why there is no sample: exit %d", rc);
    show_output_if(rc != 0);
    snprintf(args, sizeof args, "--checkpoint %s/bi/model.safetensors", g_dir);
    rc = run(train_cmd_sample, args);
    tu_check(rc == 1 && output_has("cannot generate"),
             "prnn sample on a bidirectional checkpoint: exit %d with a message", rc);

    /* bad arguments: exit 2 */
    rc = run(train_cmd_train, "--hidden 0");
    tu_check(rc == 2 && output_has("--hidden"), "train --hidden 0: exit %d, names the option", rc);
    rc = run(train_cmd_train, "--bogus 3");
    tu_check(rc == 2, "train --bogus: exit %d", rc);
    rc = run(train_cmd_sample, "--temperature -1");
    tu_check(rc == 2, "sample --temperature -1: exit %d", rc);

    /* bad files: exit 1 with a message */
    snprintf(args, sizeof args, "--checkpoint %s/none.safetensors", g_dir);
    rc = run(train_cmd_sample, args);
    tu_check(rc == 1 && output_has("none.safetensors"), "missing checkpoint: exit %d", rc);

    snprintf(a, sizeof a, "%s/a/model.safetensors", g_dir);
    long na = 0;
    char *w = tc_slurp(a, &na);
    char cut[400];
    snprintf(cut, sizeof cut, "%s/cut.safetensors", g_dir);
    write_file(cut, w ? w : "", w ? (size_t)na / 2 : 0);
    snprintf(args, sizeof args, "--checkpoint %s", cut);
    rc = run(train_cmd_sample, args);
    tu_check(rc == 1, "truncated checkpoint: exit %d", rc);
    write_file(cut, "", 0);
    rc = run(train_cmd_sample, args);
    tu_check(rc == 1, "empty checkpoint: exit %d", rc);
    write_file(cut, "not a checkpoint at all, just text", 34);
    rc = run(train_cmd_sample, args);
    tu_check(rc == 1, "checkpoint of the wrong kind: exit %d", rc);
    free(w);

    /* a corrupt state file, and a resume with another model, are refused */
    snprintf(b, sizeof b, "%s/b/model.state", g_dir);
    long nb = 0;
    char *st = tc_slurp(b, &nb);
    if (st && nb > 200) {
        st[nb / 2] ^= 0x40;
        write_file(b, st, (size_t)nb);
    }
    free(st);
    snprintf(args, sizeof args, "%s --out %s/b --resume --steps 12", common, g_dir);
    rc = run(train_cmd_train, args);
    tu_check(rc == 1 && output_has("checksum"), "resume from a corrupt state file: exit %d", rc);
    show_output_if(rc != 1);

    snprintf(args, sizeof args,
             "--steps 12 --warmup 2 --hidden 32 --layers 2 --seq-len 24 --batch 3 --threads 2 "
             "--out %s/a --resume",
             g_dir);
    rc = run(train_cmd_train, args);
    tu_check(rc == 1, "resume with a different model width: exit %d", rc);
    show_output_if(rc != 1);

    char empty[400];
    snprintf(empty, sizeof empty, "%s/empty.txt", g_dir);
    write_file(empty, "", 0);
    snprintf(args, sizeof args, "--data %s --out %s/c --steps 3 --warmup 1", empty, g_dir);
    rc = run(train_cmd_train, args);
    tu_check(rc == 1, "training on an empty file: exit %d", rc);

    /* clean up the directory (best effort) */
    char cmd[400];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_dir);
    if (tu_failed == 0 && system(cmd) != 0) fprintf(stderr, "could not remove %s\n", g_dir);
    return tu_finish();
}
