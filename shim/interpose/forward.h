/*
 * The wrappers (forward.c, generated from nccl_api.def through wrappers.inc):
 * what an application's NCCL call reaches.  Each finds the communicator's
 * slot and forwards, or hands the call to lifecycle.c / vcomm.c / group.c.
 */
#ifndef NCCLSHIM_FORWARD_H
#define NCCLSHIM_FORWARD_H

#include "slots.h"

/* The shim's wrapper for `fn` in `slot`, as returned by dlsym. */
void *shim_wrapper(const struct shim_slot *slot, enum fn_index fn);

#endif
