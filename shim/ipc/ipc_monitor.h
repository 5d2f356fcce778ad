/*
 * What shim/ipc/ipc_monitor.c offers: watching for a lost peer (the root's
 * connection closing means a rank is gone, and the communicator fails on
 * every survivor).
 */
#ifndef NCCLSHIM_IPC_MONITOR_H
#define NCCLSHIM_IPC_MONITOR_H

#include "ipc_types.h"

/* From creation on: `fd` (the root's connection, owned from now on) closing
 * means a rank is gone.  -1 if it cannot be watched (then nothing is). */
int ipc_watch(struct ipc_comm *c, int fd);

/* Before it is watched: no connection (at prepare); ipc_watch_closing:
 * from now on a connection closing is the others' teardown, not a loss (at
 * destroy, before its barrier). */
void ipc_watch_none(struct ipc_comm *c);
void ipc_watch_closing(struct ipc_comm *c);

/* ipc_fail, and the peers are told: this rank's connection to the root is
 * shut, the root closes every other, and their monitors fail them too (a
 * rank that cannot go on must not leave its peers waiting on it). */
void ipc_fail_everywhere(struct ipc_comm *c, const char *why);

/* Stops watching `c` and closes its connection. */
void ipc_unwatch(struct ipc_comm *c);

/* After fork, in the child: the lost-peer monitor starts from nothing. */
void ipc_monitor_after_fork_child(void);
void ipc_monitor_lock_for_fork(void);
void ipc_monitor_unlock_after_fork(void);

#endif
