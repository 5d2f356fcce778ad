/*
 * What shim/ipc/ipc_fail.c offers: marking a communicator failed and
 * releasing every wait of its streams.
 */
#ifndef NCCLSHIM_IPC_FAIL_H
#define NCCLSHIM_IPC_FAIL_H

#include "ipc_comm.h"

/* For a few seconds after a failure (the reaper's turn): the release again,
 * since a neighbour's stream released a moment later may have written over
 * it.  1 while it repeats, then 0. */
int ipc_release_again(struct ipc_comm *c);

/* Marks `c` failed (once) and releases every wait of its streams; `lost`:
 * a peer is gone (warned), else an abort. */
void ipc_fail(struct ipc_comm *c, const char *why, int lost);

#endif
