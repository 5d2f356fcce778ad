/*
 * What shim/ipc/ipc_vmm_link.c offers the other VMM files: the Unix sockets
 * to the ring neighbours (messages with their file descriptors, the
 * predecessor's connection accepted) and the note of why sharing is off.
 */
#ifndef NCCLSHIM_IPC_VMM_LINK_H
#define NCCLSHIM_IPC_VMM_LINK_H

#include "ipc_vmm_state.h"

#include <sys/types.h>

void vmm_note(struct ipc_comm *c, int warn, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
void vmm_link_close(struct link *l);
void vmm_close_fds(const int *fds, int n);
int vmm_send_msg(int fd, const struct vmm_msg *m, const int *fds, int nfds);
ssize_t vmm_recv_msg(int fd, struct vmm_msg *m, int *fds, int *nfds, int *truncated);
void vmm_stop_listening(struct ipc_vmm *v);
void vmm_try_accept(struct ipc_comm *c);

#endif
