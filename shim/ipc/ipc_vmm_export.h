/*
 * What shim/ipc/ipc_vmm_export.c offers: this rank's cuMemCreate buffers
 * described for the neighbours, their pieces sent over the sockets, and
 * forgotten once PyTorch gives them back (the reaper's turn).
 */
#ifndef NCCLSHIM_IPC_VMM_EXPORT_H
#define NCCLSHIM_IPC_VMM_EXPORT_H

#include "ipc_comm.h"

#include <stddef.h>
#include <stdint.h>

/* A piece of cuMemCreate memory (a mapping). */
struct ipc_vmm_piece {
    uint64_t block, base, size;
};

/* Under qlock: fills d (vmm, range, offset, sizes, sequence numbers;
 * `first`, the piece that holds buf if known (size 0: not), saves the
 * driver's word for it) and sends the neighbours the pieces they lack: 1,
 * or 0 if the memory cannot be shared so (staged then). */
int ipc_vmm_describe(struct ipc_comm *c, CUdeviceptr buf, size_t bytes, CUdeviceptr start, size_t size,
                     struct ipc_vmm_piece *first, struct ipc_desc *d);
/* The reaper's turn: tells the neighbours of pieces this process no longer maps. */
void vmm_check_sent(struct ipc_comm *c);

#endif
