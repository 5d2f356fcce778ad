#define _GNU_SOURCE
#include "config.h"

#include "record.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

const char *const shim_setting_names[] = {
    "NCCLSHIM_MODE", "NCCLSHIM_LOG_DIR", "NCCLSHIM_HOSTNAME", "NCCLSHIM_ROLE",
    "NCCLSHIM_TRAINING_TITLES", "NCCLSHIM_INFERENCE_TITLES", "NCCLSHIM_INFERENCE_LIBS",
    "NCCLSHIM_WEIGHT_UPDATE_CALLSITES", "NCCLSHIM_PYTHON_CALLSITE", NULL,
};

/* Written once under pthread_once, read-only afterwards. */
static struct shim_config g_config;
static pthread_once_t g_config_once = PTHREAD_ONCE_INIT;
/* Problems found while reading settings, reported once records can be written. */
static char g_config_warnings[4][320];
static int g_config_nwarnings;

const char *shim_mode_name(enum shim_mode m)
{
    return m == MODE_OFF ? "off" : m == MODE_ENFORCE ? "enforce" : "observe";
}

static void config_warn(const char *fmt, const char *a, const char *b)
{
    if (g_config_nwarnings < (int)(sizeof(g_config_warnings) / sizeof(g_config_warnings[0])))
        snprintf(g_config_warnings[g_config_nwarnings++], sizeof(g_config_warnings[0]), fmt, a, b);
}

static void config_read(void)
{
    struct shim_config *c = &g_config;
    const char *v = getenv("NCCLSHIM_MODE");
    c->mode = MODE_OBSERVE;
    if (v && *v) {
        if (strcasecmp(v, "observe") == 0)
            c->mode = MODE_OBSERVE;
        else if (strcasecmp(v, "off") == 0)
            c->mode = MODE_OFF;
        else if (strcasecmp(v, "enforce") == 0)
            c->mode = MODE_ENFORCE;
        else
            config_warn("NCCLSHIM_MODE='%.60s' is not one of observe|enforce|off; using observe%s", v, "");
    }

    c->python_callsite = 1;
    v = getenv("NCCLSHIM_PYTHON_CALLSITE");
    if (v && *v) {
        if (strcmp(v, "0") == 0)
            c->python_callsite = 0;
        else if (strcmp(v, "1") != 0)
            config_warn("NCCLSHIM_PYTHON_CALLSITE='%.60s' is not 0 or 1; using 1%s", v, "");
    }

    v = getenv("NCCLSHIM_LOG_DIR");
    if (v && *v && strlen(v) < sizeof(c->log_dir) - 64)
        snprintf(c->log_dir, sizeof(c->log_dir), "%s", v);
    else {
        if (v && *v)
            config_warn("NCCLSHIM_LOG_DIR is too long (%.40s...); using /tmp/ncclshim-<uid>%s", v, "");
        snprintf(c->log_dir, sizeof(c->log_dir), "/tmp/ncclshim-%u", (unsigned)getuid());
    }

    v = getenv("NCCLSHIM_HOSTNAME");
    if (v && *v)
        snprintf(c->host, sizeof(c->host), "%s", v);
    else if (gethostname(c->host, sizeof(c->host) - 1) != 0)
        snprintf(c->host, sizeof(c->host), "unknown-host");
    c->host[sizeof(c->host) - 1] = '\0';
    /* NCCL's log prefix is the host name up to the first '.', and records join with it. */
    char *dot = strchr(c->host, '.');
    if (dot && !(v && *v))
        *dot = '\0';

    c->patterns.role_env = getenv("NCCLSHIM_ROLE");
    c->patterns.training_titles = getenv("NCCLSHIM_TRAINING_TITLES");
    c->patterns.inference_titles = getenv("NCCLSHIM_INFERENCE_TITLES");
    c->patterns.inference_libs = getenv("NCCLSHIM_INFERENCE_LIBS");
    c->patterns.weight_update_callsites = getenv("NCCLSHIM_WEIGHT_UPDATE_CALLSITES");
}

const struct shim_config *shim_config(void)
{
    pthread_once(&g_config_once, config_read);
    return &g_config;
}

void shim_config_report_warnings(void)
{
    shim_config();
    for (int i = 0; i < g_config_nwarnings; i++)
        shim_record_warning("bad-setting", g_config_warnings[i]);
}

void shim_config_print_warnings(void)
{
    shim_config();
    for (int i = 0; i < g_config_nwarnings; i++)
        fprintf(stderr, "ncclshim: warning: %s\n", g_config_warnings[i]);
}
