/* A client's bounded waits, stretched to the machine as the harness's are (tests/tap.sh
 * tap_scale, tests/tap.py scaled; CONTRIBUTING.md, "Bounds"): a quiet machine's bound times
 * SHIM_TEST_SLOW (the build's own factor) and the load, runnable tasks per core (at least 1). */
#ifndef NCCLSHIM_TEST_BOUND_H
#define NCCLSHIM_TEST_BOUND_H

#include <stdlib.h>
#include <unistd.h>

/* The factor; 1 where SHIM_TEST_SLOW is unset or not a number from 1 to 1000 (the
 * harness rejects those before any client runs) or the load cannot be read. */
static inline double test_slow(void)
{
    const char *s = getenv("SHIM_TEST_SLOW");
    char *end = NULL;
    double f = s && *s ? strtod(s, &end) : 1.0;
    if (end && *end != '\0')
        f = 1.0;
    if (!(f >= 1.0 && f <= 1000.0))
        f = 1.0;
    double load;
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    if (getloadavg(&load, 1) == 1 && cores > 0 && load / (double)cores > 1.0)
        f *= load / (double)cores;
    return f;
}

/* A quiet machine's `n` (milliseconds, seconds or polls) for this one. */
static inline long test_bound(long n)
{
    return (long)((double)n * test_slow());
}

#endif
