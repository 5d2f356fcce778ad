/*
 * getenv interposition (docs/design.md, "NCCL_NET and the socket action").
 * Every getenv of the process passes here; the cost is one thread-local load
 * and a tail call.  While a thread is inside a socket-redirected init
 * (shim/nccl/net_env.c says when), NCCL_NET reads as unset on that thread.
 */
#define _GNU_SOURCE
#include "getenv.h"

#include "loader.h"
#include "net_env.h"

#include <dlfcn.h>
#include <stdatomic.h>
#include <stddef.h>
#include <string.h>

typedef char *(*getenv_fn)(const char *);

/* glibc's getenv; set once, the same value from any thread that races. */
static _Atomic(getenv_fn) g_real_getenv;

extern char **environ;

/* getenv before glibc's is known (a constructor of a library loaded before
 * the shim's): what glibc's does, a scan of the environment. */
SHIM_EARLY static char *scan_environ(const char *name)
{
    size_t n = strlen(name);
    for (char **e = environ; e && *e; e++)
        if (strncmp(*e, name, n) == 0 && (*e)[n] == '=')
            return *e + n + 1;
    return NULL;
}

void shim_getenv_init(void)
{
    if (atomic_load_explicit(&g_real_getenv, memory_order_acquire))
        return;
    getenv_fn f = (getenv_fn)shim_glibc_sym("getenv");
    if (!f)
        f = (getenv_fn)shim_real_dlsym()(RTLD_NEXT, "getenv");
    if (f)
        atomic_store_explicit(&g_real_getenv, f, memory_order_release);
}

/* Named apart from getenv, and exported under that name by the alias below:
 * the shim's own getenv calls are calls to libc's, which this only sits in
 * front of, and a reader (or a tool) looking for where getenv is defined in
 * the shim's sources should not take them for calls up to this folder. */
SHIM_EARLY static char *interposed_getenv(const char *name)
{
    if (__builtin_expect(net_env_hiding != 0, 0) && name && strcmp(name, "NCCL_NET") == 0)
        return NULL;
    getenv_fn f = atomic_load_explicit(&g_real_getenv, memory_order_acquire);
    if (__builtin_expect(f == NULL, 0))
        return name ? scan_environ(name) : NULL;
    return f(name);
}

/* stdlib.h is not included here: its getenv carries nonnull(1), which would
 * let the compiler drop the checks of a NULL name above. */
extern __typeof__(interposed_getenv) getenv __attribute__((alias("interposed_getenv"), visibility("default")));
