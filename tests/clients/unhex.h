/* Hex text to bytes, for the programs that take an ID or a token on their command line. */
#ifndef NCCLSHIM_TEST_UNHEX_H
#define NCCLSHIM_TEST_UNHEX_H

#include <stdint.h>
#include <stdio.h>
#include <string.h>

/* The first 2n hex digits of s into out[0..n): 0, or -1 if s is shorter or not hex. */
static inline int unhex(const char *s, uint8_t *out, size_t n)
{
    if (strlen(s) < 2 * n)
        return -1;
    for (size_t i = 0; i < n; i++) {
        unsigned v;
        if (sscanf(s + 2 * i, "%2x", &v) != 1)
            return -1;
        out[i] = (uint8_t)v;
    }
    return 0;
}

#endif
