/*
 * What shim/ipc/ipc_suspend.c offers: ncclCommSuspend, ncclCommResume and
 * ncclCommMemStats of an ipc communicator (for shim/comm/, through ipc.h),
 * and the peers' staging as the other files of the transport map it and
 * let go of it (the protocol: ipc_proto.h, "Suspend").
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

/* This rank's staging: ipc_staging_init (prepare) sizes the table of every
 * rank's (0, or -1: out of memory); ipc_staging_create allocates this
 * rank's and publishes its handle (0, or -1 with the reason);
 * ipc_staging_destroy frees it (destroy, after ipc_data_close), and
 * ipc_staging_free the table. */
int ipc_staging_init(struct ipc_comm *c, int nranks);
int ipc_staging_create(struct ipc_comm *c, char *why, size_t whylen);
void ipc_staging_destroy(struct ipc_comm *c);
void ipc_staging_free(struct ipc_comm *c);

/* Peers' staging.  ipc_data_get (qlock held): rank r's staging mapped here
 * in c->staging.at[r]: 0; 1 if r has given it back (or is giving it back) and
 * this rank holds no mapping (wait: ipc_data_wait, without qlock); -1 with
 * the reason.  ipc_data_wait: 0 once r's staging is there again, -1 past
 * NCCLSHIM_IPC_RESUME_WAIT_MS with a reason that says r is suspended.
 * ipc_data_reap (reaper, qlock held): lets go of the staging of peers that
 * release it; ipc_release_step (qlock held) frees this rank's once nobody
 * holds it; both return 1 while something is left to do later.
 * ipc_data_close (destroy): closes every peer's staging. */
int ipc_data_get(struct ipc_comm *c, int r, char *why, size_t whylen);
int ipc_data_wait(struct ipc_comm *c, int r, char *why, size_t whylen);
int ipc_data_reap(struct ipc_comm *c);
int ipc_release_step(struct ipc_comm *c);
void ipc_data_close(struct ipc_comm *c);

#endif
