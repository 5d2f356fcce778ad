/* Time running out on a rendezvous session (rv_deadlines.c). */
#ifndef NCCLSHIM_RV_DEADLINES_H
#define NCCLSHIM_RV_DEADLINES_H

#include "rv_session.h"

#include <stdint.h>

/* Acts on the deadlines passed at `now`; returns the poll timeout (ms) until
 * the nearest one still ahead. */
int rv_check_deadlines(struct rv_session *s, uint64_t now);

#endif
