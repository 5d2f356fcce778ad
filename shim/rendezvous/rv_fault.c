/* NCCLSHIM_TEST_RV_FAULT (rv_fault.h): delays and kills at the rendezvous's steps, for tests. */
#define _GNU_SOURCE
#include "rv_fault.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* The setting, read once: rv_fault runs for every HELLO a leader forwards.
 * Written under g_once, read only after it. */
static pthread_once_t g_once = PTHREAD_ONCE_INIT;
static char g_spec[256];

static void read_spec(void)
{
    const char *v = getenv("NCCLSHIM_TEST_RV_FAULT");
    if (v)
        snprintf(g_spec, sizeof(g_spec), "%s", v);
}

static const char *fault_spec(void)
{
    pthread_once(&g_once, read_spec);
    return g_spec;
}

void rv_fault(const char *point)
{
    const char *spec = fault_spec();
    size_t plen = strlen(point);
    for (const char *p = spec; p && *p;) {
        const char *end = strchr(p, ',');
        size_t n = end ? (size_t)(end - p) : strlen(p);
        if (n > plen && strncmp(p, point, plen) == 0 && p[plen] == '=') {
            const char *what = p + plen + 1;
            if (strncmp(what, "kill", 4) == 0) {
                raise(SIGKILL);
            } else {
                long ms = strtol(what, NULL, 10);
                struct timespec ts = { ms / 1000, (ms % 1000) * 1000000L };
                while (ms > 0 && nanosleep(&ts, &ts) != 0 && errno == EINTR)
                    ;
            }
            return;
        }
        p = end ? end + 1 : NULL;
    }
}

void rv_fault_once(const char *point)
{
    /* Set by whichever thread calls first; atomic, as any thread may. */
    static atomic_int done;
    if (!atomic_exchange(&done, 1))
        rv_fault(point);
}

int rv_test_fanout(int dflt)
{
    const char *spec = fault_spec();
    const char *p = strstr(spec, "fanout=");
    if (!p || (p != spec && p[-1] != ','))
        return dflt;
    long n = strtol(p + 7, NULL, 10);
    return n >= 1 && n <= dflt ? (int)n : dflt;
}
