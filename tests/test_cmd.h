/*
 * test_cmd.h - running the program's commands (train_cmd_train and friends)
 * inside a test: the command's stdout and stderr go to a file, so a suite
 * prints one line per check, and files are read back whole.
 *
 * The including file defines _POSIX_C_SOURCE (dup, dup2) before any header.
 */
#ifndef PRNN_TEST_CMD_H
#define PRNN_TEST_CMD_H

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Runs fn on the space-separated args with stdout and stderr sent to the
 * file out; returns its exit code. */
static inline int tc_run(int (*fn)(int, char **), const char *args, const char *out)
{
    char buf[2048];
    snprintf(buf, sizeof buf, "%s", args);
    char *argv[64];
    int argc = 0;
    for (char *tok = strtok(buf, " "); tok && argc < 63; tok = strtok(NULL, " ")) argv[argc++] = tok;
    argv[argc] = NULL;
    fflush(stdout);
    fflush(stderr);
    const int so = dup(1), se = dup(2);
    const int fd = open(out, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    dup2(fd, 1);
    dup2(fd, 2);
    close(fd);
    const int rc = fn(argc, argv);
    fflush(stdout);
    fflush(stderr);
    dup2(so, 1);
    dup2(se, 2);
    close(so);
    close(se);
    return rc;
}

/* A whole file, NUL-terminated, in new memory (NULL if unreadable). */
static inline char *tc_slurp(const char *path, long *n)
{
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    *n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *b = malloc((size_t)*n + 1);
    if (b && fread(b, 1, (size_t)*n, f) != (size_t)*n) {
        free(b);
        b = NULL;
    }
    if (b) b[*n] = 0;
    fclose(f);
    return b;
}

#endif /* PRNN_TEST_CMD_H */
