/*
 * The rendezvous's limits (rv_limits.h): what a process that runs out of
 * descriptors, memory or threads says, and does, so that every rank passes
 * through at once with the setting that fixes it, instead of waiting for
 * the timeout.  The root (rv_admit.c, rv_decide.c), the hosts' leaders
 * (rv_leader.c) and the ranks (rv_client.c) share it.
 */
#define _GNU_SOURCE
#include "rv_limits.h"

#include "clock.h"
#include "rv_io.h"

#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

int rv_leader_cap(void)
{
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY && rl.rlim_cur / 4 < RV_LEADER_MAX_RANKS)
        return rl.rlim_cur / 4 < 4 ? 4 : (int)(rl.rlim_cur / 4);
    return RV_LEADER_MAX_RANKS;
}

int rv_is_limit(int e)
{
    return e == EMFILE || e == ENFILE || e == ENOMEM || e == ENOBUFS || e == EAGAIN;
}

void rv_limit_reason(int e, const char *who, const char *doing, char *buf, size_t len)
{
    struct rlimit rl = { 0, 0 };
    switch (e) {
    case EMFILE:
        (void)getrlimit(RLIMIT_NOFILE, &rl);
        snprintf(buf, len,
                 "%s ran out of file descriptors %s (EMFILE: RLIMIT_NOFILE is %llu; raise it with `ulimit -n` "
                 "where the job is launched: the root holds a descriptor per host's leader, a leader one per rank "
                 "of its host, at most %d)",
                 who, doing, (unsigned long long)rl.rlim_cur, RV_LEADER_MAX_RANKS);
        break;
    case ENFILE:
        snprintf(buf, len, "%s: the system's file table is full %s (ENFILE: raise the sysctl fs.file-max)", who,
                 doing);
        break;
    case EAGAIN:
        snprintf(buf, len,
                 "%s could not start a thread %s (EAGAIN: RLIMIT_NPROC, the sysctl kernel.threads-max or the "
                 "container's pids.max; raise the one that is reached)", who, doing);
        break;
    default:
        snprintf(buf, len, "%s ran out of memory %s (%s: the container's memory limit or RLIMIT_AS)", who, doing,
                 e == ENOBUFS ? "ENOBUFS" : "ENOMEM");
        break;
    }
}

int rv_limit_or_error(int e, const char *doing, const char *call, char *err, size_t errlen)
{
    if (!rv_is_limit(e)) {
        snprintf(err, errlen, "%s: %s", call, strerror(e));
        return 0;
    }
    rv_limit_reason(e, "this rank's process", doing, err, errlen);
    return 1;
}

void rv_abort_root(const struct sockaddr *root, socklen_t rootlen, const uint8_t token[RV_TOKEN_LEN],
                   const char *reason, uint64_t deadline_us)
{
    char err[256];
    int fd = rv_connect(root, rootlen, deadline_us, err, sizeof(err));
    if (fd < 0)
        return;
    struct rv_msg *m = calloc(1, sizeof(*m));
    if (m) {
        rv_make_abort(m, token, reason);
        (void)rv_send_msg(fd, m, deadline_us, err, sizeof(err));
        free(m);
    }
    close(fd);
}

int rv_answer_waiting(int lfd, const int *fds, int nfds, const uint8_t token[RV_TOKEN_LEN], const struct rv_msg *m,
                      int max, int wait_ms)
{
    uint8_t *out = malloc(RV_MAX_FRAME);
    struct rv_msg *in = malloc(sizeof(*in));
    struct pollfd *pfd = calloc((size_t)(max + nfds) + 1, sizeof(*pfd));
    size_t n = out ? rv_encode(m, out, RV_MAX_FRAME) : 0;
    int answered = 0, k = 0;
    for (int i = 0; i < nfds; i++) {
        if (pfd)
            pfd[k++] = (struct pollfd){ fds[i], POLLIN, 0 };
        else
            close(fds[i]);
    }
    /* All of them first, then their first messages, under one deadline: a
     * rank whose thread is not scheduled at once still gets its answer. */
    while (lfd >= 0 && n && in && pfd && k < max + nfds) {
        struct sockaddr_storage ss;
        socklen_t sl = sizeof(ss);
        int fd = accept4(lfd, (struct sockaddr *)&ss, &sl, SOCK_CLOEXEC | SOCK_NONBLOCK);
        if (fd < 0)
            break;
        /* A rank waiting at a leader's door expects its admit byte first. */
        if (ss.ss_family == AF_UNIX)
            (void)send(fd, "A", 1, MSG_NOSIGNAL);
        pfd[k++] = (struct pollfd){ fd, POLLIN, 0 };
    }
    uint64_t deadline = shim_mono_us() + (uint64_t)wait_ms * 1000;
    for (int left = n && in ? k : 0; left > 0;) {
        uint64_t now = shim_mono_us();
        if (now >= deadline || poll(pfd, (nfds_t)k, (int)((deadline - now + 999) / 1000)) <= 0)
            break;
        for (int i = 0; i < k; i++) {
            if (pfd[i].fd < 0 || !pfd[i].revents)
                continue;
            char err[256];
            /* Its whole HELLO follows its first bytes at once. */
            if (rv_recv_msg(pfd[i].fd, in, shim_mono_us() + 50000, err, sizeof(err)) == 0 &&
                rv_token_equal(in->token, token) && rv_send_bytes(pfd[i].fd, out, n, shim_mono_us() + RV_SEND_US) == 0)
                answered++;
            close(pfd[i].fd);
            pfd[i].fd = -1; /* poll() skips it */
            left--;
        }
    }
    for (int i = 0; i < k; i++)
        if (pfd[i].fd >= 0)
            close(pfd[i].fd);
    free(pfd);
    free(out);
    free(in);
    return answered;
}
