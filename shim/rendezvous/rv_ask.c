/* A rank asks the root for the verdict after its path broke (rv_ask.h). */
#define _GNU_SOURCE
#include "rv_ask.h"

#include "clock.h"
#include "rv_io.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* One try: 0 with the verdict, -1 with the reason (errno set). */
static int ask_once(const struct sockaddr *root, socklen_t rootlen, const uint8_t token[RV_TOKEN_LEN],
                    struct rv_msg *m, const char *reason, uint64_t deadline, struct rv_verdict *v, char *err,
                    size_t errlen)
{
    int fd = rv_connect(root, rootlen, deadline, err, errlen);
    if (fd < 0)
        return -1;
    int rc = -1;
    rv_make_abort(m, token, reason);
    if (rv_send_msg(fd, m, deadline, err, errlen) != 0 || rv_recv_msg(fd, m, deadline, err, errlen) != 0)
        goto out;
    if (!rv_token_equal(m->token, token) || (m->type != RV_COMMIT && m->type != RV_DECISION)) {
        snprintf(err, errlen, "the root's answer is not a verdict of this ID (type %d)", (int)m->type);
        errno = EPROTO;
        goto out;
    }
    *v = m->u.verdict;
    v->final = 1; /* the root answers only a final verdict here (COMMIT does not carry `final`) */
    rc = 0;
out:
    {
        int e = errno;
        close(fd);
        errno = e;
    }
    return rc;
}

int rv_ask_root(const struct sockaddr *root, socklen_t rootlen, const uint8_t token[RV_TOKEN_LEN],
                const char *reason, struct rv_verdict *v, char *err, size_t errlen)
{
    uint64_t deadline = shim_mono_us() + RV_ASK_US;
    struct rv_msg *m = calloc(1, sizeof(*m));
    if (!m) {
        snprintf(err, errlen, "out of memory for a message");
        errno = ENOMEM;
        return -1;
    }
    /* A root answering many askers at once (every rank below a frozen leader)
     * closes one that did not speak within its short wait (rv_limits.c,
     * rv_answer_waiting): closed without a word, ask again, while time is left. */
    int rc = -1;
    for (int attempt = 1; attempt <= RV_ASK_TRIES; attempt++) {
        rc = ask_once(root, rootlen, token, m, reason, deadline, v, err, errlen);
        if (rc == 0 || !(errno == ECONNRESET || errno == EPIPE || errno == EPROTO) ||
            shim_mono_us() >= deadline)
            break;
    }
    free(m);
    return rc;
}
