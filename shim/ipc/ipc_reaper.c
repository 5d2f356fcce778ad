/*
 * The reaper thread of an ipc communicator (the protocol: ipc_proto.h),
 * started at connect.  A mapping of a neighbour's buffer keeps that memory
 * allocated even after its owner freed it, so each rank's reaper asks
 * whether the allocations it exported still live and tells its neighbours
 * of the freed ones, whose reapers close their mappings of them ("Mappings
 * kept", ipc_proto.h); mappings unused for MAP_IDLE_MS go too (and beyond
 * MAP_CACHE at once).  A peer that
 * suspends asks every peer to let go of its staging (and of its buffers):
 * the reaper does, and finishes this rank's own release when the peers have
 * (shim/ipc/ipc_suspend.c).  It never enqueues GPU work: every broadcast is
 * enqueued whole by the application's thread.
 *
 * It sleeps on this rank's shared word (a futex in shared memory), which
 * the peers bump when they suspend, resume or let go, and the application's
 * thread when it maps or stops.
 */
#define _GNU_SOURCE
#include "ipc_reaper.h"
#include "ipc_bcast.h"
#include "ipc_core.h"
#include "ipc_maps.h"
#include "ipc_suspend.h"
#include "ipc_vmm.h"
#include "ipc_fail.h"

#include "clock.h"
#include "record.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* While a release waits for a stream to move (nothing wakes the reaper
 * then), it looks again this often. */
#define RETRY_MS 10

/* The sooner of two sleeps in ms (-1: without a bound). */
static long sooner(long a, long b)
{
    return a < 0 || (b >= 0 && b < a) ? b : a;
}

static void *reaper_main(void *arg)
{
    struct ipc_comm *c = arg;
    _Atomic uint32_t *word = &c->shared[c->rank]->word;
    c->cu->cuCtxSetCurrent(c->ctx);
    pthread_mutex_lock(&c->qlock);
    while (!c->reaper.stop) {
        /* Read before looking: a bump from now on cuts the sleep short. */
        uint32_t seen = atomic_load(word);
        long sleep_ms = ipc_release_again(c) ? RETRY_MS : -1;
        int later = ipc_data_reap(c);
        later |= ipc_release_step(c);
        if (later)
            sleep_ms = RETRY_MS;
        sleep_ms = sooner(sleep_ms, ipc_vmm_reap(c));
        sleep_ms = sooner(sleep_ms, ipc_maps_reap(c));
        sleep_ms = sooner(sleep_ms, ipc_exports_reap(c));
        pthread_mutex_unlock(&c->qlock);
        ipc_wait_word(word, seen, sleep_ms);
        pthread_mutex_lock(&c->qlock);
    }
    pthread_mutex_unlock(&c->qlock);
    return NULL;
}

int ipc_reaper_start(struct ipc_comm *c, char *why, size_t whylen)
{
    if (c->reaper.started)
        return 0;
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old); /* the thread takes none of the application's signals */
    int rc = pthread_create(&c->reaper.thread, NULL, reaper_main, c);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (rc != 0) {
        snprintf(why, whylen, "starting the ipc reaper thread: %s", strerror(rc));
        return -1;
    }
    c->reaper.started = 1;
    return 0;
}

void ipc_reaper_stop(struct ipc_comm *c)
{
    if (c->reaper.started) {
        pthread_mutex_lock(&c->qlock);
        c->reaper.stop = 1;
        pthread_mutex_unlock(&c->qlock);
        ipc_wake(c, c->rank);
        pthread_join(c->reaper.thread, NULL);
        c->reaper.started = 0;
    }
    /* ipc_free waited for the last operation; if it could not, what is
     * still mapped stays so (until the process exits) rather than be taken
     * from under a copy. */
    pthread_mutex_lock(&c->qlock);
    ipc_maps_close(c);
    pthread_mutex_unlock(&c->qlock);
    ipc_forget_exports(c);
}
