/*
 * What every file of the ipc transport and its callers share, with no code
 * of its own behind it (so that a file low in shim/ipc/ can use it without
 * depending on the transport's set-up, ipc.c): the communicator's name, the
 * kinds of hop, and the counts the records report (counted by ipc_bcast.c).
 */
#ifndef NCCLSHIM_IPC_TYPES_H
#define NCCLSHIM_IPC_TYPES_H

#include "cuda.h"
#include "nccl_abi.h"

struct ipc_comm;

/* The most ranks one ipc communicator takes: the shared page has a counter
 * per peer (ipc_proto.h).  Whoever decides ipc keeps to it. */
#define IPC_MAX_RANKS 64
/* The most bytes a rank's export takes (ipc_prepare, struct ipc_export). */
#define IPC_EXPORT_MAX 128

/* How this rank's broadcasts went, for its comm_end record: on how many
 * hops it came first (and took the passive half); how the data came in and
 * went out (indexed by IPC_HOP_*; ipc_hop_names). */
enum { IPC_HOP_NONE, IPC_HOP_PUSH, IPC_HOP_PULL, IPC_HOP_STAGED, IPC_HOPS };
extern const char *const ipc_hop_names[IPC_HOPS];
struct ipc_stats {
    unsigned long long first;
    unsigned long long in[IPC_HOPS], out[IPC_HOPS];
    unsigned long long sm, ce;          /* hops copied by the SMs (same GPU), by copy engines */
    const char *copy_note;              /* why no hop may use the SMs ("" if none shares the GPU); owned by c */
    /* Pieces of cuMemCreate memory (PyTorch's expandable segments) sent to
     * the neighbours, and theirs mapped here (shim/ipc/ipc_vmm.c); and why
     * such memory was staged, if it was ("" if not); owned by c. */
    unsigned long long vmm_sent, vmm_mapped;
    const char *vmm_note;
};
void ipc_get_stats(struct ipc_comm *c, struct ipc_stats *st);

#endif
