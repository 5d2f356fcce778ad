/* A process that leaves with a communicator alive, in one of the ways that
 * skip exit(): its records must still say what the communicator carried.
 * usage: leave_client _exit|_Exit|segv|fault|term|abort|handler|vfork|wait
 *        leave_client nonblocking   a blocking=0 init, polled with
 *                                   ncclCommGetAsyncError, destroyed, exit 0 */
#define _GNU_SOURCE
#include "client_util.h"
#include "nccl_abi.h"
#include "nccl_decls.h"

#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static void on_term(int sig)
{
    (void)sig;
    _exit(3); /* an application's own handler that ends the process its way */
}

static int nonblocking(void)
{
    ncclUniqueId id;
    ncclComm_t c = NULL;
    ncclConfig_t cfg;
    client_config(&cfg, 0);
    if (ncclGetUniqueId(&id) != ncclSuccess)
        return 1;
    ncclResult_t r = ncclCommInitRankConfig(&c, 1, id, 0, &cfg);
    printf("init %d\n", (int)r);
    ncclResult_t a = ncclInProgress;
    int polls = 0;
    while (a == ncclInProgress && polls < 1000) {
        if (ncclCommGetAsyncError(c, &a) != ncclSuccess)
            return 1;
        polls++;
    }
    printf("polls %d async %d\n", polls, (int)a);
    /* Polling again (as torch's watchdog does) records nothing more. */
    for (int i = 0; i < 3; i++)
        ncclCommGetAsyncError(c, &a);
    return a == ncclSuccess && ncclCommDestroy(c) == ncclSuccess ? 0 : 1;
}

int main(int argc, char **argv)
{
    const char *how = argc > 1 ? argv[1] : "exit";
    if (strcmp(how, "nonblocking") == 0)
        return nonblocking();
    ncclUniqueId id;
    ncclComm_t c;
    static float buf[64];
    if (ncclGetUniqueId(&id) != ncclSuccess || ncclCommInitRank(&c, 1, id, 0) != ncclSuccess ||
        ncclAllReduce(buf, buf, 64, ncclFloat32, ncclSum, c, NULL) != ncclSuccess) {
        fprintf(stderr, "leave_client: NCCL failed\n");
        return 1;
    }
    if (strcmp(how, "_exit") == 0)
        _exit(7);
    if (strcmp(how, "_Exit") == 0)
        _Exit(7);
    if (strcmp(how, "segv") == 0)
        raise(SIGSEGV);
    if (strcmp(how, "fault") == 0) {
        volatile int *volatile p = NULL; /* a real fault, not a raise */
        *p = 1;
    }
    if (strcmp(how, "term") == 0)
        kill(getpid(), SIGTERM);
    if (strcmp(how, "abort") == 0)
        abort();
    if (strcmp(how, "handler") == 0) {
        signal(SIGTERM, on_term);
        kill(getpid(), SIGTERM);
    }
    if (strcmp(how, "vfork") == 0) {
        /* A vfork child shares our memory and our record file: its _exit
         * (a failed exec, as in posix_spawn or Python's subprocess) must
         * write nothing in our name. */
        pid_t pid = vfork();
        if (pid == 0)
            _exit(0);
        int st;
        waitpid(pid, &st, 0);
        printf("child %d\n", (int)pid);
        fflush(stdout);
        _exit(5);
    }
    for (;;)
        pause(); /* "signal" sent from outside, or the end of the test's bound */
    return 0;
}
