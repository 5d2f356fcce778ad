/*
 * The shim's background threads (worker.h): started detached with the
 * application's signals blocked (a signal meant for the application must not
 * land on a thread of the shim), woken through a non-blocking pipe.
 */
#define _GNU_SOURCE
#include "worker.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

int shim_thread_start(void *(*fn)(void *), void *arg)
{
    /* The thread must not take the application's signals: it inherits the
     * mask in force at its creation. */
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    pthread_t t;
    int rc = pthread_create(&t, &attr, fn, arg);
    pthread_attr_destroy(&attr);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    return rc;
}

int shim_worker_start(void *(*fn)(void *), int wake[2], char *err, size_t errlen)
{
    if (pipe2(wake, O_CLOEXEC | O_NONBLOCK) != 0) {
        snprintf(err, errlen, "pipe2: %s", strerror(errno));
        wake[0] = wake[1] = -1;
        return -1;
    }
    int rc = shim_thread_start(fn, NULL);
    if (rc != 0) {
        snprintf(err, errlen, "pthread_create: %s", strerror(rc));
        shim_worker_close(wake);
        return -1;
    }
    return 0;
}

void shim_worker_wake(const int wake[2])
{
    if (wake[1] >= 0)
        (void)!write(wake[1], "", 1);
}

void shim_worker_drain(const int wake[2])
{
    char buf[64];
    while (wake[0] >= 0 && read(wake[0], buf, sizeof(buf)) > 0)
        ;
}

void shim_worker_close(int wake[2])
{
    if (wake[0] >= 0)
        close(wake[0]);
    if (wake[1] >= 0)
        close(wake[1]);
    wake[0] = wake[1] = -1;
}
