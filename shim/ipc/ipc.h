/*
 * The CUDA IPC transport (docs/design.md, "The CUDA IPC transport"): a
 * communicator of ranks on one host that exists only in the shim.  Each rank
 * owns one device allocation, its staging (exported with cuIpcGetMemHandle,
 * given back by ncclCommSuspend), and a page of host shared memory whose first
 * 4 KiB are its counters, pinned and mapped into every peer's context.
 * Operations only enqueue work on the caller's stream (copies on copy engines,
 * waits and writes of counters with cuStreamWaitValue64 /
 * cuStreamWriteValue64), except small all-reduces, which synchronise the host.
 * The protocol: ipc_proto.h.
 *
 * This header is what shim/comm/ and shim/interpose/ call: set-up and
 * teardown (ipc.c), and through the headers it includes, the operations
 * (ipc_ops.h), the lost-peer monitor (ipc_monitor.h), suspend and resume
 * (ipc_suspend.h) and the records' counts (ipc_types.h).
 */
#ifndef NCCLSHIM_IPC_H
#define NCCLSHIM_IPC_H

#include "ipc_monitor.h"
#include "ipc_ops.h"
#include "ipc_suspend.h"
#include "ipc_types.h"

#include <stddef.h>
#include <stdint.h>

/* Round 2 of the rendezvous: allocate and export.  The export goes into
 * `blob` (*bloblen bytes, at most IPC_EXPORT_MAX).  0, or -1 with the reason
 * (nothing left allocated). */
int ipc_prepare(struct ipc_comm **out, int rank, int nranks, uint8_t *blob, int *bloblen, char *why, size_t whylen);

/* The communicator's name in the records (messages name it). */
void ipc_set_group(struct ipc_comm *c, const char *group);

/* One rank's export, as its ipc_prepare made it and the rendezvous carried it. */
struct ipc_peer_export {
    int rank;
    int len;
    const uint8_t *bytes;
};

/* Round 3: open every other rank's export (`npeers` of them, this rank's
 * own included).  0, or -1 with the reason. */
int ipc_connect(struct ipc_comm *c, const struct ipc_peer_export *peers, int npeers, char *why, size_t whylen);

/* ncclRemoteError once a peer is gone (or after ncclCommAbort), else ncclSuccess. */
ncclResult_t ipc_async_error(struct ipc_comm *c);

/* ncclCommAbort: release every wait, so that destroy does not wait for peers. */
void ipc_abort(struct ipc_comm *c);

/* Waits (bounded) until this rank's operations are done and every peer has
 * stopped reading this rank's memory, then frees everything. */
void ipc_free(struct ipc_comm *c);

int ipc_device(const struct ipc_comm *c);

#endif
