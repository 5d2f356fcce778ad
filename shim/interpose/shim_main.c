/*
 * The shim's life in a process: the load record when it is loaded, a fresh
 * record file after fork, the traffic of live communicators at exit.
 */
#define _GNU_SOURCE
#include "comm.h"
#include "comm_record.h"
#include "cuda.h"
#include "forward.h"
#include "config.h"
#include "loader.h"
#include "getenv.h"
#include "creator.h"
#include "record.h"
#include "record_file.h"
#include "ipc.h"
#include "rendezvous.h"
#include "rv_leader.h"
#include "version.h"

#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <string.h>
#include <sys/syscall.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

/* The first line of a record file: who wrote it, with which settings. */
static void write_load_record(void)
{
    const struct shim_config *c = shim_config();
    char title[256], exe[PATH_MAX];
    evidence_title(title, sizeof(title));
    ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
    exe[n > 0 ? n : 0] = '\0';
    struct jw w;
    jw_begin(&w, "load");
    jw_str(&w, "shim_version", NCCLSHIM_VERSION);
    jw_str(&w, "mode", shim_mode_name(c->mode));
    jw_str(&w, "log_file", shim_record_path());
    jw_str(&w, "title", title);
    jw_str(&w, "exe", exe);
    /* With host_identity and pid, which process this is (the record file's name holds it too). */
    jw_u64(&w, "start_ticks", record_file_start_ticks());
    /* Why ranks are one host or not: what the identity is made of (host_id.c). */
    const struct host_identity *id = shim_host_identity();
    jw_open(&w, "host_identity", '{');
    jw_str(&w, "id", id->id);
    jw_str(&w, "hostname", id->hostname);
    jw_str(&w, "boot_id", id->boot_id);
    jw_str(&w, "nccl_hostid", id->hostid_set ? id->hostid : NULL);
    jw_str(&w, "nccl_hostid_from", id->hostid_set ? id->hostid_from : NULL);
    jw_close(&w, '}');
    jw_open(&w, "settings", '{');
    for (const char *const *s = shim_setting_names; *s; s++)
        jw_str(&w, *s, getenv(*s));
    jw_close(&w, '}');
    jw_emit(&w);
    for (int i = 0; i < shim_config_warning_count(); i++)
        shim_record_warning("bad-setting", shim_config_warning(i));
}

/* What NCCLSHIM_WARNED holds: a digest of this process's warnings, the sum of
 * each one's FNV-1a, so that their order does not count: stray names are
 * listed in the environment's order, which a shell between two processes
 * rebuilds (bash exports from its own table). */
static void warnings_digest(char *out, size_t len)
{
    uint64_t sum = 0;
    for (int i = 0; i < shim_config_warning_count(); i++) {
        uint64_t h = 0xcbf29ce484222325ull;
        for (const unsigned char *p = (const unsigned char *)shim_config_warning(i); *p; p++)
            h = (h ^ *p) * 0x100000001b3ull;
        sum += h;
    }
    snprintf(out, len, "%016llx", (unsigned long long)sum);
}

/*
 * The settings' warnings on stderr, when the shim is loaded: in every process
 * that has it, whether or not it ever calls NCCL, so that `/bin/true` under
 * the job's environment checks the job's settings.  Once per process tree:
 * a launcher and the shells and scripts between it and the workers (a pyenv
 * shim runs ~30 processes before Python starts) would each print the same
 * lines.  So the first process that prints them leaves their digest in its
 * environment (NCCLSHIM_WARNED), which its children inherit; a process whose
 * own warnings have that digest stays quiet, one with other bad settings
 * (its own environment) prints them.  Only set when there is something to
 * say; set here, in the constructor, before the program's main and threads.
 * A fork child prints nothing: no constructor runs in it.
 */
static void print_setting_warnings(void)
{
    if (shim_config_warning_count() == 0)
        return;
    char digest[24];
    warnings_digest(digest, sizeof(digest));
    const char *seen = getenv("NCCLSHIM_WARNED");
    if (seen && strcmp(seen, digest) == 0)
        return;
    for (int i = 0; i < shim_config_warning_count(); i++)
        fprintf(stderr, "ncclshim: warning: %s\n", shim_config_warning(i));
    /* Failing (no memory) costs only a repeat in the children. */
    if (setenv("NCCLSHIM_WARNED", digest, 1) != 0)
        fprintf(stderr, "ncclshim: warning: cannot set NCCLSHIM_WARNED (%s): child processes will repeat these "
                        "warnings\n", strerror(errno));
}

/*
 * fork() in a multi-threaded process (Python multiprocessing, Ray workers):
 * the child has one thread, and any lock another thread held at the fork
 * stays held in it forever.  So the forking thread takes every lock of the
 * shim's that the child's path to its first NCCL call could take, always in
 * this order (no path of the shim nests them the other way: each is held for
 * a few stores, the record lock, innermost, for an open(), the CUDA lock,
 * outermost and waited for a bounded time, across dlopen), and the child
 * starts with them reset.  That CUDA lock is taken so that no thread of the
 * shim is inside dlopen at the fork: glibc resets its loader lock in the
 * child but not the loader's half-changed state.  The lock glibc does not
 * reset at all (dl_iterate_phdr's, glibc 2.36) is not on a child's path
 * (creator.c reads /proc/self/maps there).
 */
static void before_fork(void)
{
    shim_cuda_lock_for_fork();
    shim_slots_lock_for_fork();
    shim_comm_lock_for_fork();
    rv_server_lock_for_fork();
    rv_leader_lock_for_fork();
    ipc_monitor_lock_for_fork();
    shim_record_lock_for_fork();
}

static void after_fork_parent(void)
{
    shim_record_unlock_after_fork();
    ipc_monitor_unlock_after_fork();
    rv_leader_unlock_after_fork();
    rv_server_unlock_after_fork();
    shim_comm_unlock_after_fork();
    shim_slots_unlock_after_fork();
    shim_cuda_unlock_after_fork();
}

static void after_fork_child(void)
{
    shim_slots_after_fork_child();
    shim_cuda_after_fork_child();
    evidence_after_fork_child();
    rv_server_after_fork_child();
    rv_leader_after_fork_child();
    ipc_monitor_after_fork_child();
    shim_comm_after_fork_child();
    shim_record_after_fork_child();
}

/*
 * Leaving without exit(): the records of communicators still alive are the
 * evidence an operator reads after a crash, and no destructor runs after
 * _exit (Python's os._exit: every multiprocessing child) or a fatal signal.
 * So _exit and _Exit are interposed, and the fatal signals whose action is
 * still the default get a handler; each writes what exit() would have
 * (comm_end "how":"exit", then the exit record, "by" saying how), to the file
 * already open, async-signal-safely, then does what would have happened
 * without the shim.
 */
typedef void (*exit_fn_t)(int);
/* glibc's _exit, found by the constructor; read-only afterwards. */
static exit_fn_t g_real_exit;
/* The records are built here, not on the stack: a fatal signal's handler may
 * run on a small alternate stack.  Used by the one caller shim_record_leaving
 * lets through. */
static struct jw g_leave_jw;

static void leave_records(const char *by, int signo)
{
    if (shim_config()->mode != MODE_OFF && shim_record_leaving())
        shim_comm_record_exit(&g_leave_jw, by, signo);
}

static __attribute__((noreturn)) void real_exit(int status)
{
    if (g_real_exit)
        g_real_exit(status);
    /* Called before the constructor (another library's): the system call
     * _exit makes. */
    for (;;)
        syscall(SYS_exit_group, status);
}

__attribute__((visibility("default"), noreturn)) void _exit(int status)
{
    leave_records("_exit", 0);
    real_exit(status);
}

__attribute__((visibility("default"), noreturn)) void _Exit(int status)
{
    leave_records("_exit", 0);
    real_exit(status);
}

static const int g_fatal_signals[] = { SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT, SIGTERM };

static void on_fatal_signal(int sig)
{
    int saved = errno;
    leave_records("signal", sig);
    /* Then the default action, as SA_RESETHAND would give: the signal is
     * blocked while this handler runs, so the raise is delivered when it
     * returns (a faulting instruction would fault again anyway), and the
     * process ends as it would have, by this signal, with its core dump. */
    struct sigaction dfl;
    memset(&dfl, 0, sizeof(dfl));
    dfl.sa_handler = SIG_DFL;
    sigemptyset(&dfl.sa_mask);
    sigaction(sig, &dfl, NULL);
    raise(sig);
    errno = saved;
}

/* Only signals whose action is still the default: a handler or SIG_IGN set
 * before the shim (another preloaded library) is the application's, and
 * stays.  One set later replaces this one, and the application's own
 * handling applies (a handler that ends in _exit still gets the records
 * written). */
static void install_fatal_handlers(void)
{
    for (size_t i = 0; i < sizeof(g_fatal_signals) / sizeof(g_fatal_signals[0]); i++) {
        struct sigaction old, sa;
        if (sigaction(g_fatal_signals[i], NULL, &old) != 0 || (old.sa_flags & SA_SIGINFO) ||
            old.sa_handler != SIG_DFL)
            continue;
        memset(&sa, 0, sizeof(sa));
        sa.sa_handler = on_fatal_signal;
        sigemptyset(&sa.sa_mask);
        sa.sa_flags = SA_ONSTACK | SA_RESTART;
        if (sigaction(g_fatal_signals[i], &sa, NULL) != 0)
            fprintf(stderr, "ncclshim: warning: cannot watch signal %d (%s): records of communicators alive "
                            "when it kills the process will be lost\n", g_fatal_signals[i], strerror(errno));
    }
}

__attribute__((constructor)) static void shim_load(void)
{
    /* Resolve glibc's dlsym now, while the process is still single-threaded. */
    shim_real_dlsym();
    shim_self_base();
    g_real_exit = (exit_fn_t)shim_real_dlsym()(RTLD_NEXT, "_exit");
    shim_getenv_init();
    /* off: the shim only forwards, and its other settings are unused. */
    if (shim_config()->mode == MODE_OFF)
        return;
    print_setting_warnings();
    shim_record_set_first(write_load_record);
    pthread_atfork(before_fork, after_fork_parent, after_fork_child);
    install_fatal_handlers();
}

__attribute__((destructor)) static void shim_unload(void)
{
    /* A process that never used NCCL leaves no file behind (and
     * shim_record_leaving lets nobody through). */
    if (shim_config()->mode != MODE_OFF && shim_record_leaving()) {
        struct jw w;
        shim_comm_record_exit(&w, "exit", 0);
    }
}
