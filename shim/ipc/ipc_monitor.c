/*
 * Watching for a lost peer (see ipc_proto.h): one thread per process, alive
 * while some ipc communicator runs, polls their root connections, and a
 * connection that closes fails the communicator (ipc_fail).  The other way
 * too: ipc_fail_everywhere shuts this rank's connection, so that every peer's
 * monitor fails it as well.  It owns struct ipc_watch.
 */
#define _GNU_SOURCE
#include "ipc_monitor.h"
#include "ipc_comm.h"
#include "ipc_core.h"
#include "ipc_fail.h"

#include "record.h"
#include "worker.h"

#include <poll.h>
#include <pthread.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <unistd.h>

/* --- The monitor: one thread per process watches the root connection of
 * every running ipc communicator; the root closes them all when any rank
 * leaves.  g_mon_lock guards the list and the thread's existence; the
 * thread takes it to handle an event, so a communicator removed under the
 * lock is never touched again. */
struct mon_entry {
    struct ipc_comm *c;
    struct mon_entry *next;
};
static pthread_mutex_t g_mon_lock = PTHREAD_MUTEX_INITIALIZER;
static struct mon_entry *g_mon;
static int g_mon_running;
static int g_mon_wake[2] = { -1, -1 };

/* The monitor's poll arrays, file-scope for the same reason as the
 * rendezvous thread's (reachable if the process exits while it runs). */
static struct pollfd *g_mon_pfd;
static struct ipc_comm **g_mon_who;

/* The poll set for n - 1 watched connections, under g_mon_lock: the wake
 * pipe first, then each connection (the arrays grown to n; where they could
 * not grow, none: the caller polls nothing for 10 ms and tries again).  The
 * entries in *pfd and *who. */
static size_t mon_poll_set(size_t n, struct pollfd **pfd, struct ipc_comm ***who, size_t *cap)
{
    if (n > *cap) {
        struct pollfd *p = realloc(*pfd, n * sizeof(*p));
        if (p)
            *pfd = p;
        struct ipc_comm **w = realloc(*who, n * sizeof(*w));
        if (w)
            *who = w;
        if (p && w)
            *cap = n;
        g_mon_pfd = *pfd;
        g_mon_who = *who;
    }
    size_t k = 0;
    if (*cap) {
        (*pfd)[k] = (struct pollfd){ g_mon_wake[0], POLLIN, 0 };
        (*who)[k++] = NULL;
        for (struct mon_entry *e = g_mon; e && k < *cap; e = e->next) {
            (*pfd)[k] = (struct pollfd){ e->c->watch.fd, POLLIN, 0 };
            (*who)[k++] = e->c;
        }
    }
    return k;
}

/* What poll said, under g_mon_lock: a closed connection of a communicator
 * still watched fails it (a peer is gone), or, once it is being destroyed,
 * is only the others' teardown; either way it is watched no more. */
static void mon_events(const struct pollfd *pfd, struct ipc_comm **who, size_t k)
{
    for (size_t j = 0; j < k; j++) {
        if (!pfd[j].revents)
            continue;
        if (!who[j]) {
            shim_worker_drain(g_mon_wake);
            continue;
        }
        /* Still registered?  (Removed entries are not touched.) */
        struct mon_entry **pp = &g_mon;
        while (*pp && (*pp)->c != who[j])
            pp = &(*pp)->next;
        if (!*pp)
            continue;
        struct mon_entry *e = *pp;
        *pp = e->next;
        free(e);
        if (atomic_load(&who[j]->watch.closing))
            atomic_store(&who[j]->watch.peer_closed, 1); /* the others are destroying it too */
        else
            ipc_fail(who[j], "a rank of this communicator is gone (the root's shim closed the connection: a "
                             "process exited or was killed)", 1);
        close(who[j]->watch.fd);
        who[j]->watch.fd = -1;
    }
}

static void *monitor(void *arg)
{
    (void)arg;
    struct pollfd *pfd = g_mon_pfd;
    struct ipc_comm **who = g_mon_who;
    size_t cap = 0;
    for (;;) {
        pthread_mutex_lock(&g_mon_lock);
        size_t n = 1;
        for (struct mon_entry *e = g_mon; e; e = e->next)
            n++;
        if (n == 1) {
            g_mon_running = 0;
            shim_worker_close(g_mon_wake);
            g_mon_pfd = NULL;
            g_mon_who = NULL;
            pthread_mutex_unlock(&g_mon_lock);
            free(pfd);
            free(who);
            return NULL;
        }
        size_t k = mon_poll_set(n, &pfd, &who, &cap);
        pthread_mutex_unlock(&g_mon_lock);
        if (poll(pfd, k, cap ? -1 : 10) < 0)
            continue;
        pthread_mutex_lock(&g_mon_lock);
        mon_events(pfd, who, k);
        pthread_mutex_unlock(&g_mon_lock);
    }
}

void ipc_watch_none(struct ipc_comm *c)
{
    c->watch.fd = -1;
}

void ipc_watch_closing(struct ipc_comm *c)
{
    atomic_store(&c->watch.closing, 1);
}

int ipc_watch(struct ipc_comm *c, int fd)
{
    /* Called at commit, when every rank has connected. */
    ipc_unlink_shared(c);
    c->watch.fd = fd;
    if (fd < 0)
        return -1;
    struct mon_entry *e = calloc(1, sizeof(*e));
    if (!e)
        return -1;
    e->c = c;
    pthread_mutex_lock(&g_mon_lock);
    char err[128];
    if (!g_mon_running) {
        if (shim_worker_start(monitor, g_mon_wake, err, sizeof(err)) != 0) {
            pthread_mutex_unlock(&g_mon_lock);
            free(e);
            shim_warn("ipc", "cannot watch for lost peers (%s): a peer that dies will hang this rank's streams", err);
            return -1;
        }
        g_mon_running = 1;
    }
    e->next = g_mon;
    g_mon = e;
    shim_worker_wake(g_mon_wake);
    pthread_mutex_unlock(&g_mon_lock);
    return 0;
}

/* Stops watching `c` (before it is freed) and closes its connection. */
void ipc_unwatch(struct ipc_comm *c)
{
    pthread_mutex_lock(&g_mon_lock);
    for (struct mon_entry **pp = &g_mon; *pp; pp = &(*pp)->next) {
        if ((*pp)->c == c) {
            struct mon_entry *e = *pp;
            *pp = e->next;
            free(e);
            shim_worker_wake(g_mon_wake);
            break;
        }
    }
    pthread_mutex_unlock(&g_mon_lock);
    if (c->watch.fd >= 0)
        close(c->watch.fd);
    c->watch.fd = -1;
}


void ipc_fail_everywhere(struct ipc_comm *c, const char *why)
{
    shim_warn("ipc", "ipc communicator %s (rank %d of %d): %s; it fails here and at every peer (ncclRemoteError)",
              c->group, c->rank, c->nranks, why);
    ipc_fail(c, why, 0);
    if (c->watch.fd >= 0)
        shutdown(c->watch.fd, SHUT_RDWR);
}

void ipc_monitor_lock_for_fork(void)
{
    pthread_mutex_lock(&g_mon_lock);
}

void ipc_monitor_unlock_after_fork(void)
{
    pthread_mutex_unlock(&g_mon_lock);
}

void ipc_monitor_after_fork_child(void)
{
    /* The monitor thread is not in the child, nor are its communicators (CUDA
     * does not survive fork): start from nothing.  The entries stay allocated:
     * the parent owns them. */
    g_mon = NULL;
    g_mon_running = 0;
    shim_worker_close(g_mon_wake);
    g_mon_pfd = NULL;
    g_mon_who = NULL;
    pthread_mutex_init(&g_mon_lock, NULL);
}
