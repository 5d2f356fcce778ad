/* The replays' store (what TCPStore or Ray's named actor is to the stacks):
 * a rank publishes a unique ID as one line "UID <key> <hex>" on its stdout;
 * the harness (tests/replay/replay.py) writes "<key> <hex>" to every other
 * rank's stdin.  Used by the C stubs that make an ID themselves (torch's
 * ProcessGroupNCCL makes it inside libtorch, lazily).  Reads and writes are
 * unbuffered, so that they interleave with Python's own lines. */
#ifndef REPLAY_STORE_H
#define REPLAY_STORE_H

#include "client_util.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

static inline int store_write(const char *s, size_t n)
{
    while (n) {
        ssize_t w = write(1, s, n);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return -1;
        s += w;
        n -= (size_t)w;
    }
    return 0;
}

/* One line "APP <function>" on stdout: what this application called NCCL
 * with, for the tests that compare it with what NCCL got. */
static inline void app_note(const char *fn)
{
    char line[128];
    int n = snprintf(line, sizeof(line), "APP %s\n", fn);
    store_write(line, (size_t)n);
}

static inline int store_publish(const char *key, const ncclUniqueId *id)
{
    char line[32 + 64 + 2 * NCCL_UNIQUE_ID_BYTES];
    int n = snprintf(line, sizeof(line), "UID %s ", key);
    for (size_t i = 0; i < sizeof(id->internal); i++)
        n += snprintf(line + n, sizeof(line) - (size_t)n, "%02x", (unsigned char)id->internal[i]);
    line[n++] = '\n';
    return store_write(line, (size_t)n);
}

/* Blocks on stdin (the harness bounds the whole process) until the line of
 * `key`; lines of other keys are skipped.  0, or -1 at EOF. */
static inline int store_fetch(const char *key, ncclUniqueId *id)
{
    char line[64 + 2 * NCCL_UNIQUE_ID_BYTES + 8];
    for (;;) {
        size_t n = 0;
        for (;;) {
            char c;
            ssize_t r = read(0, &c, 1);
            if (r < 0 && errno == EINTR)
                continue;
            if (r <= 0)
                return -1;
            if (c == '\n')
                break;
            if (n < sizeof(line) - 1)
                line[n++] = c;
        }
        line[n] = '\0';
        size_t k = strlen(key);
        if (n > k && strncmp(line, key, k) == 0 && line[k] == ' ')
            return id_from_hex(line + k + 1, id);
    }
}

#endif
