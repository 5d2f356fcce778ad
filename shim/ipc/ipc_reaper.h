/*
 * What shim/ipc/ipc_reaper.c offers: the communicator's helper thread, which
 * gives back idle mappings and peers' released staging, and finishes this
 * rank's own release.
 */
#ifndef NCCLSHIM_IPC_REAPER_H
#define NCCLSHIM_IPC_REAPER_H

#include "ipc_comm.h"

#include <stddef.h>

/* Starts the reaper if it is not: 0, or -1 with the reason.  ipc_reaper_stop
 * (after the last operation): stops it and gives back what was mapped. */
int ipc_reaper_start(struct ipc_comm *c, char *why, size_t whylen);
void ipc_reaper_stop(struct ipc_comm *c);

#endif
