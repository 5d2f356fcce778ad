/*
 * A rank whose path to the root broke after its HELLO was handed on (its
 * host's leader died or gave up, its connection closed) asks the root for the
 * verdict on a connection of its own (docs/design.md, "All or nothing").
 */
#ifndef NCCLSHIM_RV_ASK_H
#define NCCLSHIM_RV_ASK_H

#include "rv_wire.h"

#include <stdint.h>
#include <sys/socket.h>

/* The longest a rank waits to connect to the root and for its answer, when it asks. */
#define RV_ASK_US 5000000ull
/* Connections an ask makes, within RV_ASK_US, when the root closes one without a word. */
#define RV_ASK_TRIES 4

/*
 * Sends ABORT (`reason`) to the root on a new connection and waits for its
 * answer: the final verdict if there is one (the root's listener answers it
 * for T + RV_LINGER_US after its verdict), else the root falls back for every rank
 * at once and answers that.  0 with the verdict in *v (final), or -1 with the
 * reason (errno set): the root could not be reached or said nothing.
 */
int rv_ask_root(const struct sockaddr *root, socklen_t rootlen, const uint8_t token[RV_TOKEN_LEN],
                const char *reason, struct rv_verdict *v, char *err, size_t errlen);

#endif
