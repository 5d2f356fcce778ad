/*
 * The root's side of the rendezvous (shim/rendezvous/rendezvous.h): one listener per
 * marked unique ID, all served by one background thread per process that
 * exists only while some ID is being served.
 *
 * The thread owns every session's descriptors and state; other threads only
 * add sessions (under g_rv_lock) and wake it through a pipe.  Nothing here
 * blocks: sockets are non-blocking, and every wait is a poll() with the
 * nearest deadline.  Whatever goes wrong, the answer is passthrough, which
 * is always safe because no rank has touched NCCL yet.
 *
 * This file: the list of sessions, the thread and its poll, opening a
 * session, fork.  A session's parts: rv_session.h.
 */
#define _GNU_SOURCE
#include "rendezvous.h"

#include "clock.h"
#include "random.h"
#include "rv_admit.h"
#include "record.h"
#include "rv_deadlines.h"
#include "rv_decide.h"
#include "rv_io.h"
#include "rv_session.h"
#include "rv_watch.h"
#include "worker.h"

#include <arpa/inet.h>
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Sessions being served, and the thread serving them.  g_rv_lock guards the
 * list head, g_thread_running and the wake pipe; the sessions' contents
 * belong to the thread. */
static pthread_mutex_t g_rv_lock = PTHREAD_MUTEX_INITIALIZER;
static struct rv_session *g_sessions;
static int g_nsessions;
static int g_thread_running;
static int g_wake[2] = { -1, -1 };

/* What the serving thread waits on (rv_watch.h): each entry tagged with its
 * session (NULL: the wake pipe) and which of its descriptors (-1 the listener,
 * else a connection's index: the array may grow while entries are handled).
 * File-scope, not on its stack, so that a process that exits while the
 * thread runs leaves the arrays reachable (the thread alone uses them). */
static struct rv_watch g_watch = { NULL, NULL, 0, 0, UINT64_MAX };

/* Frees the finished sessions.  Under g_rv_lock; only this thread removes
 * sessions, so the pointers in the watch's tags stay valid. */
static void drop_finished(void)
{
    for (struct rv_session **pp = &g_sessions; *pp;) {
        struct rv_session *s = *pp;
        if (s->state == ST_DONE) {
            *pp = s->next;
            g_nsessions--;
            rv_session_free(s);
        } else {
            pp = &s->next;
        }
    }
}

/* Acts on the deadlines passed, and lists what to wait on, in the order
 * they are handled: the wake pipe, the ranks' connections (and those that
 * showed the token), the listeners, the strangers.  Under g_rv_lock. */
static void watch_set(struct rv_watch *w)
{
    uint64_t now = shim_mono_us(), until = UINT64_MAX;
    /* First: acting on a deadline may accept connections (rv_deadlines.c). */
    for (struct rv_session *s = g_sessions; s; s = s->next) {
        int t = rv_check_deadlines(s, now);
        uint64_t d = s->state == ST_DONE ? now : now + (uint64_t)t * 1000;
        until = d < until ? d : until;
    }
    size_t need = 1;
    for (struct rv_session *s = g_sessions; s; s = s->next)
        need += 1 + (size_t)s->nconns;
    rv_watch_begin(w, need); /* out of memory: fewer entries, this turn */
    rv_watch_until(w, until);
    rv_watch_add(w, g_wake[0], NULL, -1);
    for (int pass = 0; pass < 3; pass++) {
        for (struct rv_session *s = g_sessions; s; s = s->next) {
            if (s->state == ST_DONE)
                continue;
            if (pass == 1) {
                if (s->lfd >= 0 && s->accept_paused_until <= now)
                    rv_watch_add(w, s->lfd, s, -1);
                continue;
            }
            for (int i = 0; i < s->nconns; i++)
                if (s->conns[i].fd >= 0 && (s->conns[i].anon_slot >= 0) == (pass == 2))
                    rv_watch_add(w, s->conns[i].fd, s, i);
        }
    }
}

/* What the wait found ready.  Under g_rv_lock. */
static void handle_ready(const struct rv_watch *w)
{
    for (size_t j = 0; j < w->n; j++) {
        if (!w->pfd[j].revents)
            continue;
        struct rv_session *s = w->tag[j].owner;
        int conn = w->tag[j].what;
        if (!s) {
            shim_worker_drain(g_wake);
            continue;
        }
        if (s->state == ST_DONE)
            continue;
        if (conn < 0) {
            if (s->lfd == w->pfd[j].fd && (s->state == ST_WAIT_HELLO || s->state == ST_WAIT_VOTES))
                rv_on_acceptable(s);
            else if (s->lfd == w->pfd[j].fd && s->state == ST_ANSWER)
                rv_answer_late(s);
        } else if (s->conns[conn].fd == w->pfd[j].fd) {
            /* Not closed (and its slot not reused) since the wait. */
            rv_on_readable(s, &s->conns[conn]);
        }
    }
}

static void *serve(void *arg)
{
    (void)arg;
    for (;;) {
        pthread_mutex_lock(&g_rv_lock);
        drop_finished();
        if (!g_sessions) {
            /* None left: the thread ends. */
            g_thread_running = 0;
            shim_worker_close(g_wake);
            rv_watch_free(&g_watch);
            pthread_mutex_unlock(&g_rv_lock);
            return NULL;
        }
        watch_set(&g_watch);
        pthread_mutex_unlock(&g_rv_lock);

        /* With no room at all (out of memory), a short sleep, then again. */
        int n = g_watch.n ? rv_watch_wait(&g_watch, 60000) : poll(NULL, 0, 10);
        if (n < 0) {
            if (errno != EINTR)
                shim_warn("rendezvous", "poll: %s", strerror(errno));
            continue;
        }

        pthread_mutex_lock(&g_rv_lock);
        handle_ready(&g_watch);
        pthread_mutex_unlock(&g_rv_lock);
    }
}

/* Starts the serving thread if it is not running.  Under g_rv_lock. */
static int ensure_thread(char *err, size_t errlen)
{
    if (g_thread_running)
        return 0;
    if (shim_worker_start(serve, g_wake, err, errlen) != 0)
        return -1;
    g_thread_running = 1;
    return 0;
}

/*
 * A listener on *ss's address, at a port the kernel picks from the ephemeral
 * range, as NCCL's own bootstrap root does (*ss gets it): the descriptor, or
 * -1 with the reason in err.  When that range is used up (live connections
 * and TIME_WAIT: SO_REUSEADDR would not help, as the closed sockets did not
 * set it), the caller leaves the ID unmarked and the group passes through,
 * saying so: NCCL's own root needs a port from the same range, and a port of
 * the shim's choosing outside it would meet firewalls that open only it.
 */
static int listen_any_port(struct sockaddr_storage *ss, socklen_t *sl, char *err, size_t errlen)
{
    ((struct sockaddr_in *)ss)->sin_port = 0; /* same offset in sockaddr_in6: any free port */
    char a[80];
    rv_addr_str((struct sockaddr *)ss, a, sizeof(a));
    int fd = socket(ss->ss_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0 || bind(fd, (struct sockaddr *)ss, *sl) != 0 || listen(fd, SOMAXCONN) != 0 ||
        getsockname(fd, (struct sockaddr *)ss, sl) != 0) {
        int e = errno;
        snprintf(err, errlen, "cannot listen on NCCL's bootstrap address %s: %s%s", a, strerror(e),
                 e == EADDRINUSE ? " (every port of this host's ephemeral range is taken on that address, by "
                                   "open connections and ones in TIME_WAIT: widen net.ipv4.ip_local_port_range)"
                                 : "");
        if (fd >= 0)
            close(fd);
        return -1;
    }
    return fd;
}

int rv_server_open(ncclUniqueId *id, char *where, size_t wherelen, char *err, size_t errlen)
{
    if (!uid_mark_space_free(id)) {
        snprintf(err, errlen, "bytes 64..127 of the unique ID are in use (an NCCL that fills them)");
        return -1;
    }
    struct sockaddr_storage ss;
    socklen_t sl = uid_nccl_addr(id, &ss);
    if (!sl) {
        snprintf(err, errlen, "the unique ID holds no IPv4/IPv6 address where NCCL 2.x puts one");
        return -1;
    }
    struct rv_session *s = calloc(1, sizeof(*s));
    if (!s) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    s->lfd = -1;
    s->free_head = -1;
    int fd = listen_any_port(&ss, &sl, err, errlen);
    if (fd < 0) {
        free(s);
        return -1;
    }
    s->lfd = fd;
    rv_addr_str((struct sockaddr *)&ss, s->addr, sizeof(s->addr));
    struct uid_mark mark = { UID_MARK_VERSION, ntohs(((struct sockaddr_in *)&ss)->sin_port), { 0 } };
    if (shim_random(mark.token, sizeof(mark.token)) != 0 ||
        shim_random(&s->verdict.decision_id, sizeof(s->verdict.decision_id)) != 0) {
        snprintf(err, errlen, "getrandom: %s", strerror(errno));
        rv_session_free(s);
        return -1;
    }
    memcpy(s->token, mark.token, sizeof(s->token));
    s->created_us = shim_mono_us();
    s->state = ST_WAIT_HELLO;

    pthread_mutex_lock(&g_rv_lock);
    if (ensure_thread(err, errlen) != 0) {
        pthread_mutex_unlock(&g_rv_lock);
        rv_session_free(s);
        return -1;
    }
    s->next = g_sessions;
    g_sessions = s;
    g_nsessions++;
    shim_worker_wake(g_wake);
    pthread_mutex_unlock(&g_rv_lock);

    /* Marked only once someone serves it. */
    uid_mark_write(id, &mark);
    snprintf(where, wherelen, "%s", s->addr);
    return 0;
}

int rv_server_sessions(void)
{
    pthread_mutex_lock(&g_rv_lock);
    int n = g_nsessions;
    pthread_mutex_unlock(&g_rv_lock);
    return n;
}

void rv_server_lock_for_fork(void)
{
    pthread_mutex_lock(&g_rv_lock);
}

void rv_server_unlock_after_fork(void)
{
    pthread_mutex_unlock(&g_rv_lock);
}

void rv_server_after_fork_child(void)
{
    /* The serving thread is not in the child; the parent serves its IDs. */
    while (g_sessions) {
        struct rv_session *s = g_sessions;
        g_sessions = s->next;
        rv_session_free(s);
    }
    g_nsessions = 0;
    shim_worker_close(g_wake);
    g_thread_running = 0;
    pthread_mutex_init(&g_rv_lock, NULL);
}
