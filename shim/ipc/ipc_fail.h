/*
 * What shim/ipc/ipc_fail.c offers: marking a communicator failed and
 * releasing every wait of its streams.
 */
#ifndef NCCLSHIM_IPC_FAIL_H
#define NCCLSHIM_IPC_FAIL_H

#include "ipc_comm.h"

/* Stores RELEASE into every counter this rank's streams may wait on. */
void ipc_release_waits(struct ipc_comm *c);
/* After a failure, the reaper releases the waits again for this long. */
#define RELEASE_REPEAT_US (5ull * 1000 * 1000)

/* Marks `c` failed (once) and releases every wait of its streams; `lost`:
 * a peer is gone (warned), else an abort. */
void ipc_fail(struct ipc_comm *c, const char *why, int lost);

#endif
