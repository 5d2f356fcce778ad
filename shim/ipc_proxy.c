/*
 * The broadcasts' proxy thread (the protocol: ipc_internal.h).  One per ipc
 * communicator, started at its first broadcast: it takes, in order, the
 * broadcasts the application's thread could not enqueue without waiting for
 * a peer, waits for what they need on the host, and enqueues them on the
 * communicator's stream (shim/ipc_bcast.c).  It is the only thread that
 * waits on the host for a peer; the application's thread never does.  Idle,
 * it gives back the mappings of peers' buffers nobody used for a while.
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

static void *proxy_main(void *arg)
{
    struct ipc_comm *c = arg;
    c->cu->cuCtxSetCurrent(c->ctx);
    pthread_mutex_lock(&c->qlock);
    for (;;) {
        while (!c->qhead && !c->stop) {
            /* Idle: nothing queued or running, and the application's
             * thread enqueues a broadcast directly only under qlock. */
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
        struct ipc_job *j = c->qhead;
        if (!j)
            break; /* stopping, and nothing left */
        c->qhead = j->next;
        if (!c->qhead)
            c->qtail = NULL;
        c->running = 1;
        pthread_mutex_unlock(&c->qlock);
        char why[512] = "";
        /* A failed communicator's streams are released already (DONE). */
        if (!atomic_load(&c->failed) && ipc_bcast_run(c, j, why, sizeof(why)) != 0 && !atomic_load(&c->failed)) {
            char what[640];
            snprintf(what, sizeof(what), "broadcast %llu: %s", (unsigned long long)j->b, why);
            pthread_mutex_lock(&c->qlock);
            int stop = c->stop;
            pthread_mutex_unlock(&c->qlock);
            if (stop)
                ipc_fail(c, what, 0); /* destroy gave up waiting: it says so */
            else
                ipc_fail_everywhere(c, what);
        }
        c->cu->cuEventDestroy(j->ready);
        free(j);
        pthread_mutex_lock(&c->qlock);
        c->running = 0;
    }
    pthread_mutex_unlock(&c->qlock);
    return NULL;
}

int ipc_proxy_start(struct ipc_comm *c, char *why, size_t whylen)
{
    if (c->proxy_started)
        return 0;
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old); /* the thread takes none of the application's signals */
    int rc = pthread_create(&c->proxy, NULL, proxy_main, c);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (rc != 0) {
        snprintf(why, whylen, "starting the ipc proxy thread: %s", strerror(rc));
        return -1;
    }
    c->proxy_started = 1;
    return 0;
}

void ipc_proxy_submit_locked(struct ipc_comm *c, struct ipc_job *job)
{
    job->next = NULL;
    if (c->qtail)
        c->qtail->next = job;
    else
        c->qhead = job;
    c->qtail = job;
    pthread_cond_signal(&c->qcond);
}

void ipc_proxy_stop(struct ipc_comm *c)
{
    if (!c->proxy_started)
        return;
    pthread_mutex_lock(&c->qlock);
    c->stop = 1;
    pthread_cond_broadcast(&c->qcond);
    pthread_mutex_unlock(&c->qlock);
    pthread_join(c->proxy, NULL);
    c->proxy_started = 0;
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
