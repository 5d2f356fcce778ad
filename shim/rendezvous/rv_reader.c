/* The rendezvous's frame reader (rv_reader.h). */
#define _GNU_SOURCE
#include "rv_reader.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

enum rv_read rv_read_step(int fd, struct rv_reader *r, uint8_t **frame, size_t *len, char *err, size_t errlen)
{
    uint8_t *dst = r->need ? r->buf + r->have : r->head + r->have;
    size_t want = r->need ? (size_t)r->need - r->have : RV_HEADER_LEN - r->have;
    ssize_t n = recv(fd, dst, want, 0);
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
        return RV_READ_WAIT;
    if (n <= 0) {
        snprintf(err, errlen, "%s", n == 0 ? "connection closed" : strerror(errno));
        return RV_READ_CLOSED;
    }
    r->have += (size_t)n;
    if (!r->need) {
        if (r->have < RV_HEADER_LEN)
            return RV_READ_MORE;
        long total = rv_frame_length(r->head, r->have, err, errlen);
        if (total <= 0)
            return RV_READ_BAD;
        if (!(r->buf = malloc((size_t)total))) {
            snprintf(err, errlen, "out of memory for a message");
            return RV_READ_NOMEM;
        }
        memcpy(r->buf, r->head, RV_HEADER_LEN);
        r->need = total;
    }
    if (r->have < (size_t)r->need)
        return RV_READ_MORE;
    *frame = r->buf;
    *len = r->have;
    r->buf = NULL;
    r->need = 0;
    r->have = 0;
    return RV_READ_FRAME;
}

const uint8_t *rv_reader_partial(const struct rv_reader *r, size_t *have)
{
    *have = r->have;
    return r->need ? r->buf : NULL;
}

void rv_reader_reset(struct rv_reader *r)
{
    free(r->buf);
    *r = (struct rv_reader){ 0, 0, { 0 }, NULL };
}
