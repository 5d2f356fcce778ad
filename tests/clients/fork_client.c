/* A process that uses NCCL, forks, and whose child uses NCCL too (Ray and
 * multiprocessing do this): each writes its own record file. */
#include "nccl_abi.h"
#include "nccl_decls.h"

#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

static int use_nccl(void)
{
    ncclUniqueId id;
    ncclComm_t c;
    return ncclGetUniqueId(&id) == 0 && ncclCommInitRank(&c, 1, id, 0) == 0 && ncclCommDestroy(c) == 0;
}

int main(void)
{
    if (!use_nccl())
        return 1;
    pid_t pid = fork();
    if (pid == 0)
        exit(use_nccl() ? 0 : 1); /* exit, not _exit: destructors (the exit record) run */
    int st = 0;
    waitpid(pid, &st, 0);
    printf("child %d\n", (int)pid);
    return WIFEXITED(st) && WEXITSTATUS(st) == 0 ? 0 : 1;
}
