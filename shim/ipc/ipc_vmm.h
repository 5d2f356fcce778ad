/*
 * What shim/ipc/ipc_vmm.c offers: the sharing of cuMemCreate memory
 * (PyTorch's expandable segments, which cuIpcGetMemHandle refuses) as file
 * descriptors over Unix sockets between ring neighbours, set up, given its
 * turn in the reaper and closed.  A buffer is described by ipc_vmm_export.h
 * and mapped by ipc_vmm_import.h.
 */
#ifndef NCCLSHIM_IPC_VMM_H
#define NCCLSHIM_IPC_VMM_H

#include "ipc_comm.h"

/* ipc_vmm_listen (prepare): the socket the predecessor will connect to
 * (failing only turns VMM sharing off, noted); ipc_vmm_connect (connect,
 * the pages opened): to the successor.  Under qlock: ipc_vmm_reap (the
 * reaper) accepts, tells the neighbours of pieces this process no longer
 * maps, reads what they said and unmaps what they no longer map: the ms
 * until it wants to run again, or -1.  ipc_vmm_close (destroy) gives
 * everything back. */
void ipc_vmm_listen(struct ipc_comm *c);
void ipc_vmm_connect(struct ipc_comm *c, const char *succ_shm);
long ipc_vmm_reap(struct ipc_comm *c);
void ipc_vmm_close(struct ipc_comm *c);

#endif
