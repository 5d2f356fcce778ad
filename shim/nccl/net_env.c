/*
 * NCCL_NET for socket-redirected inits only: the getenv interposition (see
 * net_env.h).  Every getenv of the process passes here; the cost is one
 * thread-local load and a tail call.
 */
#define _GNU_SOURCE
#include "net_env.h"

#include "loader.h"

#include <dlfcn.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

typedef char *(*getenv_fn)(const char *);

/* glibc's getenv; set once, the same value from any thread that races. */
static _Atomic(getenv_fn) g_real_getenv;

/* Nesting depth of socket-redirected inits on this thread.  initial-exec:
 * the shim is preloaded, and a general-dynamic access would cost every getenv
 * of the process a call. */
static __thread int t_hide __attribute__((tls_model("initial-exec")));

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

void net_env_init(void)
{
    if (atomic_load_explicit(&g_real_getenv, memory_order_acquire))
        return;
    getenv_fn f = (getenv_fn)shim_glibc_sym("getenv");
    if (!f)
        f = (getenv_fn)shim_real_dlsym()(RTLD_NEXT, "getenv");
    if (f)
        atomic_store_explicit(&g_real_getenv, f, memory_order_release);
}

SHIM_EARLY __attribute__((visibility("default"))) char *getenv(const char *name)
{
    if (__builtin_expect(t_hide != 0, 0) && name && strcmp(name, "NCCL_NET") == 0)
        return NULL;
    getenv_fn f = atomic_load_explicit(&g_real_getenv, memory_order_acquire);
    if (__builtin_expect(f == NULL, 0))
        return name ? scan_environ(name) : NULL;
    return f(name);
}

void net_env_hide(void)
{
    t_hide++;
}

void net_env_show(void)
{
    t_hide--;
}

const char *net_env_value(void)
{
    const char *v = getenv("NCCL_NET");
    return v && *v ? v : NULL;
}

int net_env_can_hide(int version, char *why, size_t whylen)
{
    if (version > NET_ENV_CHECKED_UPTO) {
        snprintf(why, whylen, "this NCCL (%d) is newer than the releases whose reading of NCCL_NET the shim "
                 "knows (2.18 to 2.30): NCCL_NET=%.40s might win over the redirect; unset NCCL_NET in the "
                 "weight-update processes, or use a newer ncclshim", version, net_env_value());
        return 0;
    }
    /* An env plugin (NCCL 2.28+) answers NCCL's reads itself and need not
     * ask getenv. */
    const char *plugin = getenv("NCCL_ENV_PLUGIN");
    void *loaded = dlopen("libnccl-env.so", RTLD_NOW | RTLD_NOLOAD);
    if (loaded)
        dlclose(loaded); /* NOLOAD took a reference */
    if ((plugin && *plugin && strcasecmp(plugin, "none") != 0) || loaded) {
        snprintf(why, whylen, "an NCCL env plugin (NCCL_ENV_PLUGIN=%.60s) may give NCCL its NCCL_NET=%.40s "
                 "without getenv, which the shim cannot hide from the redirected init; unset NCCL_NET in the "
                 "weight-update processes", plugin ? plugin : "libnccl-env.so", net_env_value());
        return 0;
    }
    return 1;
}

const char *net_env_told(int socket, const ncclConfig_t *config, char *by, size_t bylen)
{
    const char *env = net_env_value();
    if (socket) {
        if (env)
            snprintf(by, bylen, "the socket action: config netName \"Socket\"; this process's NCCL_NET=%.60s "
                     "was hidden from this init only", env);
        else
            snprintf(by, bylen, "the socket action: config netName \"Socket\"");
        return "Socket";
    }
    if (env) {
        snprintf(by, bylen, "NCCL_NET in the environment (NCCL lets it override the config)");
        return env;
    }
    if (config && config->magic == NCCL_CONFIG_MAGIC &&
        config->size >= offsetof(ncclConfig_t, netName) + sizeof(config->netName) && config->netName) {
        snprintf(by, bylen, "the application's config netName");
        return config->netName;
    }
    snprintf(by, bylen, "nothing: NCCL picks (a net plugin first, then IB, then Socket)");
    return NULL;
}
