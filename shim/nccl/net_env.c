/*
 * NCCL_NET for socket-redirected inits only (see net_env.h): when to hide it,
 * whether hiding is sure to work, and what the records say NCCL was told.
 * The getenv interposer that reads net_env_hiding is shim/interpose/getenv.c.
 */
#define _GNU_SOURCE
#include "net_env.h"

#include <dlfcn.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <strings.h>

__thread int net_env_hiding;

void net_env_hide(void)
{
    net_env_hiding++;
}

void net_env_show(void)
{
    net_env_hiding--;
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
