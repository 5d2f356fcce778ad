/* fork() while other threads create communicators (Python multiprocessing and
 * Ray workers do this), then a communicator in each child: no child may hang.
 * usage: fork_threads <children> <threads>
 * Prints "hung N failed M" and exits 0 only if every child created, used and
 * destroyed a communicator within its bound. */
#include "nccl_abi.h"
#include "nccl_decls.h"
#include "test_bound.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static atomic_int g_stop;
static atomic_long g_made;

static int use_nccl(void)
{
    ncclUniqueId id;
    ncclComm_t c;
    return ncclGetUniqueId(&id) == 0 && ncclCommInitRank(&c, 1, id, 0) == 0 && ncclCommDestroy(c) == 0;
}

static void *creator(void *arg)
{
    (void)arg;
    while (!atomic_load(&g_stop))
        if (use_nccl())
            atomic_fetch_add(&g_made, 1);
    return NULL;
}

int main(int argc, char **argv)
{
    int nchild = argc > 1 ? atoi(argv[1]) : 10, nthr = argc > 2 ? atoi(argv[2]) : 4;
    if (nchild < 1 || nchild > 1000 || nthr < 1 || nthr > 64) {
        fprintf(stderr, "usage: fork_threads <children 1..1000> <threads 1..64>\n");
        return 2;
    }
    pthread_t t[64];
    for (int i = 0; i < nthr; i++) {
        int e = pthread_create(&t[i], NULL, creator, NULL);
        if (e) {
            fprintf(stderr, "pthread_create: %s\n", strerror(e));
            return 2;
        }
    }
    /* Fork only once the creators are busy, so that forks land inside their calls. */
    while (atomic_load(&g_made) < nthr)
        sched_yield();
    int hung = 0, failed = 0;
    /* (reckoned before the forks: a child of threads keeps to async-signal-safe calls) */
    unsigned bound = (unsigned)test_bound(10);
    for (int i = 0; i < nchild; i++) {
        pid_t pid = fork();
        if (pid < 0) {
            perror("fork");
            return 2;
        }
        if (pid == 0) {
            alarm(bound); /* the bound: a hung child dies of SIGALRM */
            exit(use_nccl() ? 0 : 1);
        }
        int st;
        while (waitpid(pid, &st, 0) < 0)
            if (errno != EINTR) {
                perror("waitpid");
                return 2;
            }
        if (WIFSIGNALED(st) && WTERMSIG(st) == SIGALRM)
            hung++;
        else if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
            failed++;
            fprintf(stderr, "child %d: %s %d\n", (int)pid, WIFEXITED(st) ? "exit" : "signal",
                    WIFEXITED(st) ? WEXITSTATUS(st) : WTERMSIG(st));
        }
    }
    atomic_store(&g_stop, 1);
    for (int i = 0; i < nthr; i++)
        pthread_join(t[i], NULL);
    printf("hung %d failed %d made %ld\n", hung, failed, atomic_load(&g_made));
    return hung || failed;
}
