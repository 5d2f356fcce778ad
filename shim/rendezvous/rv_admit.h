/* Reading the rendezvous' connections (rv_admit.c). */
#ifndef NCCLSHIM_RV_ADMIT_H
#define NCCLSHIM_RV_ADMIT_H

#include "rv_session.h"

/* Reads what `c` has sent; handles each whole frame. */
void rv_on_readable(struct rv_session *s, struct rv_conn *c);
/* The listener is readable: accepts (a burst at most), making room if need be. */
void rv_on_acceptable(struct rv_session *s);

#endif
