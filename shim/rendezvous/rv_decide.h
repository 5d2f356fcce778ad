/* The rounds of the root's decision (rv_decide.c). */
#ifndef NCCLSHIM_RV_DECIDE_H
#define NCCLSHIM_RV_DECIDE_H

#include "rv_session.h"

#include <stddef.h>
#include <stdint.h>

/* A whole frame from `c`: HELLO, VOTE or ABORT, each in its round. */
void rv_on_message(struct rv_session *s, struct rv_conn *c, const uint8_t *buf, size_t len);
/* Ends the session with a final passthrough for every connected rank. */
void rv_fall_back(struct rv_session *s, enum rv_type type, const char *why);
/* Ends a session that is waiting for ranks with a final passthrough, now. */
void rv_give_up_now(struct rv_session *s, const char *why);
/* A limit here or at a leader: every rank falls back now, and ranks still
 * arriving get the same answer until the timeout. */
void rv_limit_fall_back(struct rv_session *s, const char *cause);
/* ST_ANSWER: ranks arriving after a fall-back at a limit get its verdict. */
void rv_answer_late(struct rv_session *s);

#endif
