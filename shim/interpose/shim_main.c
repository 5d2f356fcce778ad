/*
 * The shim's life in a process: the load record when it is loaded, a fresh
 * record file after fork, the traffic of live communicators at exit.
 */
#define _GNU_SOURCE
#include "comm.h"
#include "cuda.h"
#include "forward.h"
#include "config.h"
#include "loader.h"
#include "net_env.h"
#include "creator.h"
#include "record.h"
#include "ipc.h"
#include "rendezvous.h"
#include "version.h"

#include <pthread.h>
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
    jw_open(&w, "settings", '{');
    for (const char *const *s = shim_setting_names; *s; s++)
        jw_str(&w, *s, getenv(*s));
    jw_close(&w, '}');
    jw_emit(&w);
    for (int i = 0; i < shim_config_warning_count(); i++)
        shim_record_warning("bad-setting", shim_config_warning(i));
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
 * reset at all (dl_iterate_phdr's, glibc 2.36) is no longer on the shim's
 * path (creator.c reads /proc/self/maps).
 */
static void before_fork(void)
{
    shim_cuda_lock_for_fork();
    shim_slots_lock_for_fork();
    shim_comm_lock_for_fork();
    rv_server_lock_for_fork();
    ipc_monitor_lock_for_fork();
    shim_record_lock_for_fork();
}

static void after_fork_parent(void)
{
    shim_record_unlock_after_fork();
    ipc_monitor_unlock_after_fork();
    rv_server_unlock_after_fork();
    shim_comm_unlock_after_fork();
    shim_slots_unlock_after_fork();
    shim_cuda_unlock_after_fork();
}

static void after_fork_child(void)
{
    shim_slots_after_fork_child();
    shim_cuda_after_fork_child();
    rv_server_after_fork_child();
    ipc_monitor_after_fork_child();
    shim_comm_after_fork_child();
    shim_record_after_fork_child();
}

__attribute__((constructor)) static void shim_load(void)
{
    /* Resolve glibc's dlsym now, while the process is still single-threaded. */
    shim_real_dlsym();
    shim_self_base();
    net_env_init();
    if (shim_config()->mode == MODE_OFF)
        return;
    shim_record_set_first(write_load_record);
    pthread_atfork(before_fork, after_fork_parent, after_fork_child);
    for (int i = 0; i < shim_config_warning_count(); i++)
        fprintf(stderr, "ncclshim: warning: %s\n", shim_config_warning(i));
}

__attribute__((destructor)) static void shim_unload(void)
{
    /* A process that never used NCCL leaves no file behind. */
    if (shim_config()->mode != MODE_OFF && shim_record_opened())
        shim_comm_record_exit();
}
