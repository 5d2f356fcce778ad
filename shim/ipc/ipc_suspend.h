/*
 * ncclCommSuspend, ncclCommResume and ncclCommMemStats of an ipc
 * communicator (shim/ipc/ipc_suspend.c; the protocol: ipc_internal.h,
 * "Suspend").
 */
#ifndef NCCLSHIM_IPC_SUSPEND_H
#define NCCLSHIM_IPC_SUSPEND_H

#include "ipc_types.h"

#include <stddef.h>
#include <stdint.h>

/* ncclCommSuspend: this rank's operations done, the
 * mappings of its peers' buffers given back and, with `release`
 * (NCCL_SUSPEND_MEM), its staging too, at once or, where a peer still holds
 * it, as soon as it lets go (0, or -1 with the reason).  ncclCommResume:
 * the staging back (0, or -1 with the reason: the rank stays suspended).
 * ncclCommMemStats: out[ncclCommMemStat_t] for this rank's memory. */
int ipc_suspend(struct ipc_comm *c, int release, char *why, size_t whylen);
int ipc_resume(struct ipc_comm *c, char *why, size_t whylen);
void ipc_mem_stats(const struct ipc_comm *c, int suspended, uint64_t out[4]);

#endif
