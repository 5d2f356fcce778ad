/*
 * The shim's mark in an ncclUniqueId (docs/design.md, "Mark the unique ID").
 * NCCL fills the first 40 bytes (its magic and its bootstrap socket address)
 * and reads back only those; the root's shim writes its rendezvous data into
 * bytes 64..127, only if they are all zero.  The ID stays a valid NCCL ID,
 * byte for byte the same on every rank: nobody strips the mark before calling
 * NCCL.
 */
#ifndef NCCLSHIM_UID_MARK_H
#define NCCLSHIM_UID_MARK_H

#include "nccl_abi.h"

#include <stdint.h>
#include <sys/socket.h>

#define UID_MARK_OFFSET 64
#define UID_MARK_VERSION 1
#define UID_TOKEN_LEN 16

struct uid_mark {
    int version;
    uint16_t port;                      /* host order */
    uint8_t token[UID_TOKEN_LEN];
};

/* 1 if bytes 64..127 are all zero (NCCL left them to us). */
int uid_mark_space_free(const ncclUniqueId *id);

void uid_mark_write(ncclUniqueId *id, const struct uid_mark *m);

/* 1 and `m` filled if the ID carries a mark of a version this shim speaks;
 * 0 if it carries none (or a corrupt one: its check value is wrong). */
int uid_mark_read(const ncclUniqueId *id, struct uid_mark *m);

/*
 * The grow mark: an ID that ncclCommGetUniqueId made from a communicator the
 * shim redirected carries the action, so that the ranks a grow adds (which
 * hold no parent) take what the existing ranks take from theirs.  Written,
 * like the rendezvous mark, only where bytes 64..127 are all zero; its own
 * magic, so the two are never taken for each other.
 */
void uid_inherit_write(ncclUniqueId *id, int action, uint64_t decision_id);
/* 1 and the action and decision filled if the ID carries a grow mark. */
int uid_inherit_read(const ncclUniqueId *id, int *action, uint64_t *decision_id);

/* NCCL's bootstrap address in bytes 8..35 (a sockaddr_in or sockaddr_in6, as
 * NCCL 2.x lays its bootstrap handle out).  Returns its length, or 0 if the
 * family is neither (an NCCL whose layout the shim does not know). */
socklen_t uid_nccl_addr(const ncclUniqueId *id, struct sockaddr_storage *ss);

#endif
