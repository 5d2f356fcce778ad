/*
 * Bounded socket I/O for the rendezvous (rv_io.h): addresses as text, connect
 * with resent SYNs, whole frames sent and received, every call under a
 * deadline, so that no rank, leader or root waits on a peer past its own.
 */
#define _GNU_SOURCE
#include "rv_io.h"

#include "clock.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <unistd.h>

void rv_addr_str(const struct sockaddr *sa, char *buf, size_t len)
{
    char ip[INET6_ADDRSTRLEN] = "?";
    if (sa->sa_family == AF_INET) {
        const struct sockaddr_in *in = (const struct sockaddr_in *)sa;
        inet_ntop(AF_INET, &in->sin_addr, ip, sizeof(ip));
        snprintf(buf, len, "%s:%u", ip, ntohs(in->sin_port));
    } else if (sa->sa_family == AF_INET6) {
        const struct sockaddr_in6 *in6 = (const struct sockaddr_in6 *)sa;
        inet_ntop(AF_INET6, &in6->sin6_addr, ip, sizeof(ip));
        snprintf(buf, len, "[%s]:%u", ip, ntohs(in6->sin6_port));
    } else {
        snprintf(buf, len, "(family %d)", sa->sa_family);
    }
}

/* Milliseconds left before `deadline_us` for poll(), at least 0. */
static int ms_left(uint64_t deadline_us)
{
    uint64_t now = shim_mono_us();
    if (now >= deadline_us)
        return 0;
    uint64_t ms = (deadline_us - now + 999) / 1000;
    return ms > 1000000 ? 1000000 : (int)ms;
}

/* Waits for `events` on fd until the deadline: 1 ready, 0 timeout, -1 error. */
static int wait_fd(int fd, short events, uint64_t deadline_us)
{
    for (;;) {
        struct pollfd p = { fd, events, 0 };
        int n = poll(&p, 1, ms_left(deadline_us));
        if (n > 0)
            return 1;
        if (n < 0 && errno != EINTR)
            return -1;
        if (n == 0 && shim_mono_us() >= deadline_us)
            return 0;
    }
}

/* The first connect attempt's own limit; each later one's is twice the last.
 * A listener whose accept queue is full (a flood of strangers, a root
 * starved of CPU) drops a SYN, and the kernel sends it again only after 1 s,
 * then 3 s: a new socket's SYN goes out at once.  Doubling keeps a slow path
 * (a long round trip) within reach. */
#define CONNECT_STEP_US 250000ull

socklen_t rv_addr_parse(const char *str, struct sockaddr_storage *ss)
{
    char ip[INET6_ADDRSTRLEN + 2];
    const char *colon = strrchr(str, ':');
    size_t n = colon ? (size_t)(colon - str) : 0;
    char *end;
    unsigned long port = colon ? strtoul(colon + 1, &end, 10) : 0;
    if (!colon || !colon[1] || *end || port == 0 || port > 65535 || n == 0 || n >= sizeof(ip))
        return 0;
    memcpy(ip, str, n);
    ip[n] = '\0';
    memset(ss, 0, sizeof(*ss));
    if (ip[0] == '[' && ip[n - 1] == ']') {
        struct sockaddr_in6 *in6 = (struct sockaddr_in6 *)ss;
        ip[n - 1] = '\0';
        in6->sin6_family = AF_INET6;
        in6->sin6_port = htons((uint16_t)port);
        return inet_pton(AF_INET6, ip + 1, &in6->sin6_addr) == 1 ? sizeof(*in6) : 0;
    }
    struct sockaddr_in *in = (struct sockaddr_in *)ss;
    in->sin_family = AF_INET;
    in->sin_port = htons((uint16_t)port);
    return inet_pton(AF_INET, ip, &in->sin_addr) == 1 ? sizeof(*in) : 0;
}

int rv_connect(const struct sockaddr *sa, socklen_t salen, uint64_t deadline_us, char *err, size_t errlen)
{
    char where[80];
    rv_addr_str(sa, where, sizeof(where));
    int e = ETIMEDOUT;
    for (uint64_t step = CONNECT_STEP_US;; step *= 2) {
        uint64_t now = shim_mono_us();
        if (now >= deadline_us)
            break;
        uint64_t until = deadline_us - now > step ? now + step : deadline_us;
        int fd = socket(sa->sa_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
        if (fd < 0) {
            snprintf(err, errlen, "socket: %s", strerror(errno));
            return -1;
        }
        int one = 1;
        /* Small request/answer messages: do not let Nagle hold them back. */
        (void)setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
        if (connect(fd, sa, salen) == 0)
            return fd;
        e = errno;
        if (e == EINPROGRESS || e == EINTR) {
            int r = wait_fd(fd, POLLOUT, until), soerr = 0;
            socklen_t sl = sizeof(soerr);
            if (r == 1 && getsockopt(fd, SOL_SOCKET, SO_ERROR, &soerr, &sl) == 0 && soerr == 0)
                return fd;
            e = r == 0 ? ETIMEDOUT : r < 0 ? errno : soerr;
        }
        close(fd);
        if (e != ETIMEDOUT)
            break; /* refused, unreachable...: another SYN would be answered the same */
    }
    snprintf(err, errlen, "connect to the root's shim at %s: %s", where, e == ETIMEDOUT ? "timed out" : strerror(e));
    errno = e; /* the caller explains by the cause */
    return -1;
}

int rv_block_until(int fd, uint64_t deadline_us)
{
    uint64_t now = shim_mono_us(), left = deadline_us > now ? deadline_us - now : 0;
    if (left < 1000)
        left = 1000; /* a zero timeout would mean none at all */
    struct timeval tv = { (time_t)(left / 1000000), (suseconds_t)(left % 1000000) };
    if (setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv)) != 0)
        return -1;
    /* Our own sockets: O_NONBLOCK is the only status flag they carry. */
    return fcntl(fd, F_SETFL, 0);
}

int rv_nonblocking(int fd)
{
    return fcntl(fd, F_SETFL, O_NONBLOCK);
}

int rv_send_bytes(int fd, const uint8_t *buf, size_t len, uint64_t deadline_us)
{
    size_t off = 0;
    while (off < len) {
        /* MSG_DONTWAIT: on a socket made blocking for its receives
         * (rv_block_until) too, a full buffer is waited for in poll(). */
        ssize_t n = send(fd, buf + off, len - off, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (n > 0) {
            off += (size_t)n;
            continue;
        }
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            int w = wait_fd(fd, POLLOUT, deadline_us);
            if (w == 1)
                continue;
            if (w == 0)
                errno = ETIMEDOUT;
        }
        return -1;
    }
    return 0;
}

int rv_send_msg(int fd, const struct rv_msg *m, uint64_t deadline_us, char *err, size_t errlen)
{
    uint8_t *buf = malloc(RV_MAX_FRAME);
    if (!buf) {
        snprintf(err, errlen, "out of memory for a message");
        return -1;
    }
    size_t len = rv_encode(m, buf, RV_MAX_FRAME);
    int rc = 0;
    if (!len) {
        snprintf(err, errlen, "message does not fit %d bytes", RV_MAX_FRAME);
        rc = -1;
    } else if (rv_send_bytes(fd, buf, len, deadline_us) != 0) {
        if (errno == ETIMEDOUT)
            snprintf(err, errlen, "send: timed out");
        else if (errno == ECONNRESET || errno == EPIPE)
            snprintf(err, errlen, "connection closed by the peer (send: %s)", strerror(errno));
        else
            snprintf(err, errlen, "send: %s", strerror(errno));
        rc = -1;
    }
    int e = errno; /* the caller reads it */
    free(buf);
    errno = e;
    return rc;
}

/* Reads exactly `len` bytes before the deadline. */
static int recv_all(int fd, uint8_t *buf, size_t len, uint64_t deadline_us, char *err, size_t errlen)
{
    size_t off = 0;
    while (off < len) {
        ssize_t n = recv(fd, buf + off, len - off, 0);
        if (n > 0) {
            off += (size_t)n;
            continue;
        }
        if (n == 0) {
            snprintf(err, errlen, "connection closed by the peer%s", off ? " in the middle of a message" : "");
            errno = off ? EPROTO : ECONNRESET;
            return -1;
        }
        if (errno == ECONNRESET) {
            /* A peer that exits with our bytes unread resets instead of
             * closing: the same event for the reader. */
            snprintf(err, errlen, "connection closed by the peer (reset)%s", off ? " in the middle of a message" : "");
            errno = off ? EPROTO : ECONNRESET;
            return -1;
        }
        if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
            snprintf(err, errlen, "recv: %s", strerror(errno));
            return -1;
        }
        /* Nothing yet (or, on a blocking socket, its timeout or a signal):
         * wait under the deadline. */
        int w = wait_fd(fd, POLLIN, deadline_us);
        if (w != 1) {
            snprintf(err, errlen, "recv: %s", w == 0 ? "timed out" : strerror(errno));
            if (w == 0)
                errno = ETIMEDOUT;
            return -1;
        }
    }
    return 0;
}

int rv_recv_msg(int fd, struct rv_msg *m, uint64_t deadline_us, char *err, size_t errlen)
{
    uint8_t head[RV_HEADER_LEN];
    if (recv_all(fd, head, sizeof(head), deadline_us, err, errlen) != 0)
        return -1;
    char why[256];
    long total = rv_frame_length(head, sizeof(head), why, sizeof(why));
    if (total <= 0) {
        snprintf(err, errlen, "malformed message: %s", total < 0 ? why : "short header");
        errno = EPROTO;
        return -1;
    }
    uint8_t *buf = malloc((size_t)total);
    if (!buf) {
        snprintf(err, errlen, "out of memory for a %ld-byte message", total);
        errno = ENOMEM;
        return -1;
    }
    memcpy(buf, head, sizeof(head));
    int rc = recv_all(fd, buf + sizeof(head), (size_t)total - sizeof(head), deadline_us, err, errlen);
    if (rc != 0 && errno == ECONNRESET)
        errno = EPROTO; /* after the header: in the middle of a message */
    if (rc == 0 && rv_decode(buf, (size_t)total, m, why, sizeof(why)) != 0) {
        snprintf(err, errlen, "malformed message: %s", why);
        errno = EPROTO;
        rc = -1;
    }
    int e = errno; /* the caller reads it */
    free(buf);
    errno = e;
    return rc;
}
