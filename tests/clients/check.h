/* The C clients' checks: one "CHECK ok|fail <what>" line each, which the .t
 * scripts turn into TAP (import_checks); `failures` counts the failed ones. */
#ifndef NCCLSHIM_TEST_CHECK_H
#define NCCLSHIM_TEST_CHECK_H

#include <stdio.h>

static int failures;

#define CHECK(cond, ...)                                                                     \
    do {                                                                                     \
        int ok_ = (cond);                                                                    \
        printf("CHECK %s ", ok_ ? "ok" : "fail");                                            \
        printf(__VA_ARGS__);                                                                 \
        printf("\n");                                                                        \
        fflush(stdout);                                                                      \
        if (!ok_)                                                                            \
            failures++;                                                                      \
    } while (0)

#endif
