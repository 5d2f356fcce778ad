/*
 * The reaper thread of an ipc communicator (the protocol: ipc_internal.h),
 * started at its first broadcast.  A mapping of a neighbour's buffer keeps
 * that memory allocated even after its owner freed it, so mappings unused
 * for MAP_IDLE_MS are given back (and beyond MAP_CACHE at once).  It never
 * enqueues GPU work: every broadcast is enqueued whole by the application's
 * thread.
 */
#define _GNU_SOURCE
#include "ipc_internal.h"

#include "record.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static void *reaper_main(void *arg)
{
    struct ipc_comm *c = arg;
    c->cu->cuCtxSetCurrent(c->ctx);
    pthread_mutex_lock(&c->qlock);
    while (!c->stop) {
        int had = c->nmap;
        if (had > MAP_CACHE) {
            ipc_trim_maps(c, MAP_CACHE);
            if (c->nmap < had)
                continue;
        }
        if (!c->nmap) {
            pthread_cond_wait(&c->qcond, &c->qlock);
            continue;
        }
        uint64_t now = shim_mono_us(), due = c->map_used_us + MAP_IDLE_MS * 1000ull;
        if (now >= due) {
            ipc_trim_maps(c, 0);
            if (!c->nmap)
                continue;
            due = now + MAP_IDLE_MS * 1000ull; /* the last operation is not over: later */
        }
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        uint64_t ns = (uint64_t)ts.tv_nsec + (due - now) * 1000ull;
        ts.tv_sec += (time_t)(ns / 1000000000ull);
        ts.tv_nsec = (long)(ns % 1000000000ull);
        pthread_cond_timedwait(&c->qcond, &c->qlock, &ts);
    }
    pthread_mutex_unlock(&c->qlock);
    return NULL;
}

int ipc_reaper_start(struct ipc_comm *c, char *why, size_t whylen)
{
    if (c->reaper_started)
        return 0;
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old); /* the thread takes none of the application's signals */
    int rc = pthread_create(&c->reaper, NULL, reaper_main, c);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (rc != 0) {
        snprintf(why, whylen, "starting the ipc reaper thread: %s", strerror(rc));
        return -1;
    }
    c->reaper_started = 1;
    return 0;
}

void ipc_reaper_stop(struct ipc_comm *c)
{
    if (c->reaper_started) {
        pthread_mutex_lock(&c->qlock);
        c->stop = 1;
        pthread_cond_broadcast(&c->qcond);
        pthread_mutex_unlock(&c->qlock);
        pthread_join(c->reaper, NULL);
        c->reaper_started = 0;
    }
    /* ipc_free waited for the last operation; if it could not, what is
     * still mapped stays so (until the process exits) rather than be taken
     * from under a copy. */
    pthread_mutex_lock(&c->qlock);
    ipc_trim_maps(c, 0);
    pthread_mutex_unlock(&c->qlock);
    if (c->nmap)
        shim_warn("ipc", "ipc communicator %s (rank %d): %d mappings of peers' buffers stay open: its last operation "
                  "did not finish", c->group, c->rank, c->nmap);
    else {
        free(c->map);
        c->map = NULL;
        c->capmap = 0;
    }
}
