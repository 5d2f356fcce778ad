/*
 * One frame reader for every non-blocking peer of the rendezvous: the root's
 * connections (rv_admit.c) and a host's leader's, to its ranks and to the
 * root (rv_leader.c).  A frame comes in pieces; the reader keeps what has
 * come, and says after each piece where it stands, so that the root can
 * check a stranger's token before its frame is whole.
 */
#ifndef NCCLSHIM_RV_READER_H
#define NCCLSHIM_RV_READER_H

#include "rv_wire.h"

#include <stddef.h>
#include <stdint.h>

struct rv_reader {
    size_t have;                        /* bytes of the current frame received */
    long need;                          /* its length once the header is in, else 0 */
    uint8_t head[RV_HEADER_LEN];
    uint8_t *buf;                       /* the frame, once its length is known */
};

/* What one step of reading found. */
enum rv_read {
    RV_READ_FRAME,                      /* a whole frame: *frame, *len (the caller frees it) */
    RV_READ_MORE,                       /* bytes came, the frame is not whole: rv_reader_partial shows them */
    RV_READ_WAIT,                       /* nothing to read now */
    RV_READ_CLOSED,                     /* closed or reset by the peer (err: which) */
    RV_READ_BAD,                        /* not a frame of this protocol (err) */
    RV_READ_NOMEM,                      /* no memory for the frame (err) */
};

/* One recv() on `fd` (non-blocking) into `r`. */
enum rv_read rv_read_step(int fd, struct rv_reader *r, uint8_t **frame, size_t *len, char *err, size_t errlen);
/* The frame received so far (NULL until its length is known): what rv_frame_token reads. */
const uint8_t *rv_reader_partial(const struct rv_reader *r, size_t *have);
/* Forgets the frame begun (its buffer freed): a connection closed, or replaced. */
void rv_reader_reset(struct rv_reader *r);

#endif
