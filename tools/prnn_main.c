/*
 * prnn_main.c - the `prnn` command-line program.
 *
 * Subcommands:
 *   prnn train     train a recurrent model (tools/train/train.c)
 *   prnn sample    generate text from a checkpoint
 *   prnn eval      a checkpoint's loss and bits per byte on a file
 *   prnn bench     the CPU scan benchmark against memcpy
 *   prnn version   the library version and build features
 */
#define _POSIX_C_SOURCE 200809L /* setenv, execv */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench_cpu.h"
#include "prnn.h"
#include "train.h"

static void usage(FILE *f)
{
    fprintf(f,
            "usage: prnn <command> [options]\n"
            "\n"
            "commands:\n"
            "  train     train a model (no arguments: a small minGRU on the built-in\n"
            "            corpus, a few minutes on a CPU); prnn train --help for options\n"
            "  sample    generate text from a checkpoint (prnn sample --help)\n"
            "  eval      loss and bits per byte of a checkpoint on files (prnn eval --help)\n"
            "  bench     time the CPU scan (serial loop and divide-and-conquer tree)\n"
            "            against memcpy of the same bytes, and print a table\n"
            "  version   print the version and whether CUDA is available\n"
            "  help      print this text\n"
            "\n"
            "bench options:\n"
            "  --threads N   worker threads (default: all cores)\n"
            "  --reps N      timed runs per figure, the median is reported (default 5)\n"
            "  --shape BxTxH one shape instead of the default matrix, e.g. 1x1048576x64\n");
}

/* Parses a positive integer option value; returns 0 on error. */
static int parse_i64(const char *s, int64_t *out)
{
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno || end == s || *end || v <= 0) return 0;
    *out = v;
    return 1;
}

static int cmd_bench(int argc, char **argv)
{
    bench_cpu_options o = {.threads = 0, .reps = 5};
    for (int i = 0; i < argc; i++) {
        int64_t v;
        const char *val = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(argv[i], "--threads") && val && parse_i64(val, &v) && v <= 4096) {
            o.threads = (int)v, i++;
        } else if (!strcmp(argv[i], "--reps") && val && parse_i64(val, &v) && v <= 64) {
            o.reps = (int)v, i++;
        } else if (!strcmp(argv[i], "--shape") && val) {
            long long B, T, H;
            char tail;
            if (sscanf(val, "%lldx%lldx%lld%c", &B, &T, &H, &tail) != 3 || B <= 0 || T <= 0 || H <= 0) {
                fprintf(stderr, "prnn bench: --shape wants BxTxH with positive sizes, got '%s'\n", val);
                return 2;
            }
            o.B = B, o.T = T, o.H = H, i++;
        } else {
            fprintf(stderr, "prnn bench: bad option or value '%s'\n\n", argv[i]);
            usage(stderr);
            return 2;
        }
    }
    return prnn_bench_cpu(&o);
}

/*
 * OpenMP threads that wait for work spin by default, which is fastest on an
 * idle machine and ruinous on a busy one (a spinning worker takes the core
 * the thread with work needs: measured 6x slower training steps on two
 * shared cores). The program therefore runs with OMP_WAIT_POLICY=passive
 * unless the user chose a policy. The OpenMP runtime reads the variable when
 * it starts, before main, so the program re-executes itself once with it set.
 */
static void set_wait_policy(char **argv)
{
    if (getenv("OMP_WAIT_POLICY")) return;
    if (setenv("OMP_WAIT_POLICY", "passive", 1) != 0) return;
    execv("/proc/self/exe", argv);
    /* If that fails, carry on with the default policy. */
}

int main(int argc, char **argv)
{
    set_wait_policy(argv);
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    const char *cmd = argv[1];
    if (!strcmp(cmd, "train")) return train_cmd_train(argc - 2, argv + 2);
    if (!strcmp(cmd, "sample")) return train_cmd_sample(argc - 2, argv + 2);
    if (!strcmp(cmd, "eval")) return train_cmd_eval(argc - 2, argv + 2);
    if (!strcmp(cmd, "bench")) return cmd_bench(argc - 2, argv + 2);
    if (!strcmp(cmd, "version") || !strcmp(cmd, "--version")) {
        printf("prnn %s (CUDA %s)\n", prnn_version(),
               prnn_cuda_available() ? "available" : "not available");
        return 0;
    }
    if (!strcmp(cmd, "help") || !strcmp(cmd, "--help") || !strcmp(cmd, "-h")) {
        usage(stdout);
        return 0;
    }
    fprintf(stderr, "prnn: unknown command '%s'\n\n", cmd);
    usage(stderr);
    return 2;
}
