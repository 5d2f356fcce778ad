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

int rv_ask_root(const struct sockaddr *root, socklen_t rootlen, const uint8_t token[RV_TOKEN_LEN],
                const char *reason, struct rv_verdict *v, char *err, size_t errlen)
{
    uint64_t deadline = shim_mono_us() + RV_ASK_US;
    int fd = rv_connect(root, rootlen, deadline, err, errlen);
    if (fd < 0)
        return -1;
    struct rv_msg *m = calloc(1, sizeof(*m));
    int rc = -1;
    if (!m) {
        snprintf(err, errlen, "out of memory for a message");
        errno = ENOMEM;
        goto out;
    }
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
    free(m);
    close(fd);
    return rc;
}
