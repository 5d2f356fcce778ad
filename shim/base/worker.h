/*
 * The shim's background threads (the rendezvous server, the ipc monitor):
 * detached, deaf to the application's signals, woken through a pipe.  Each
 * owner keeps its pipe and its "running" flag under its own lock.
 */
#ifndef NCCLSHIM_WORKER_H
#define NCCLSHIM_WORKER_H

#include <stddef.h>

/* Starts fn(arg) on a detached thread that takes none of the application's
 * signals: 0, or pthread_create's error number. */
int shim_thread_start(void *(*fn)(void *), void *arg);

/* Opens a non-blocking wake-up pipe into wake[2] and starts `fn` on a
 * detached thread that takes none of the application's signals.  0, or -1
 * with the reason (and nothing left open). */
int shim_worker_start(void *(*fn)(void *), int wake[2], char *err, size_t errlen);

void shim_worker_wake(const int wake[2]);
/* Empties the pipe's read end after poll() said it is readable. */
void shim_worker_drain(const int wake[2]);
/* Closes both ends (if open) and marks them closed. */
void shim_worker_close(int wake[2]);

#endif
