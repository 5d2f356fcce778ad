/* TAP for the C unit tests: ok() prints one "ok N - what" line (what is a
 * printf format) and returns cond; tap_done() prints the plan and gives the
 * exit status. */
#ifndef NCCLSHIM_TEST_TAP_H
#define NCCLSHIM_TEST_TAP_H

#include <stdarg.h>
#include <stdio.h>

static int tap_n, tap_failed;

static int ok(int cond, const char *fmt, ...) __attribute__((format(printf, 2, 3), unused));
static int ok(int cond, const char *fmt, ...)
{
    va_list ap;
    printf("%sok %d - ", cond ? "" : "not ", ++tap_n);
    va_start(ap, fmt);
    vprintf(fmt, ap);
    va_end(ap);
    printf("\n");
    tap_failed += !cond;
    return cond;
}

static int tap_done(void) __attribute__((unused));
static int tap_done(void)
{
    printf("1..%d\n", tap_n);
    return tap_failed != 0;
}

#endif
