/*
 * ncclGroupStart/End as the shim sees them: the depth of the calling thread's
 * group, and the Send/Recv on ipc communicators that wait for its end (NCCL
 * runs a group's point-to-point operations together; so must the shim, or two
 * ranks sending to each other would each wait for the other's receive).
 */
#ifndef NCCLSHIM_GROUP_H
#define NCCLSHIM_GROUP_H

#include "slots.h"
#include "ipc.h"

struct shim_comm;

ncclResult_t group_ncclGroupStart(struct shim_slot *slot, const void *caller);
ncclResult_t group_ncclGroupEnd(struct shim_slot *slot, const void *caller);

/* A Send or Recv on an ipc communicator: queued until the group ends, or run
 * at once outside a group. */
ncclResult_t group_ipc_p2p(struct shim_comm *h, const struct ipc_p2p *op, const char *fn);

#endif
