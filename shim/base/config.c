#define _GNU_SOURCE
#include "config.h"
#include "host_id.h"
#include "policy/classify.h"


#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

const char *const shim_setting_names[] = {
    "NCCLSHIM_MODE", "NCCLSHIM_LOG_DIR", "NCCLSHIM_HOSTNAME", "NCCLSHIM_ROLE",
    "NCCLSHIM_TRAINING_TITLES", "NCCLSHIM_INFERENCE_TITLES", "NCCLSHIM_INFERENCE_LIBS",
    "NCCLSHIM_WEIGHT_UPDATE_CALLSITES", "NCCLSHIM_TRAINER_CALLSITES", "NCCLSHIM_FULL_API",
    "NCCLSHIM_ENGINE_TITLES", "NCCLSHIM_ENGINE_FRAMES",
    "NCCLSHIM_PYTHON_CALLSITE", "NCCLSHIM_TAG", "NCCLSHIM_WEIGHT_UPDATE",
    "NCCLSHIM_RULES", "NCCLSHIM_STRICT", "NCCLSHIM_RENDEZVOUS_TIMEOUT_MS", "NCCLSHIM_RENDEZVOUS_IDLE_MS", "NCCLSHIM_RENDEZVOUS_FANIN", "NCCLSHIM_RENDEZVOUS_ONE_ROUND", "NCCLSHIM_IPC_CHUNK_BYTES", "NCCLSHIM_IPC_SLOTS", "NCCLSHIM_IPC_STEP_BYTES",
    "NCCLSHIM_IPC_PUSH_WAIT_US", "NCCLSHIM_IPC_COPY", "NCCLSHIM_IPC_RESUME_WAIT_MS", "NCCLSHIM_IPC_VMM",
    "NCCLSHIM_FABRIC_BUDGET", "NCCLSHIM_SYSFS_ROOT", NULL,
};

_Static_assert(HOST_ID_LEN == FACTS_HOST_LEN, "a host identity travels in a rank's facts");

/* Written once under pthread_once, read-only afterwards. */
static struct shim_config g_config;
static pthread_once_t g_config_once = PTHREAD_ONCE_INIT;
/* Problems found while reading settings, reported once records can be written. */
#define CONFIG_MAX_WARNINGS 32
static char g_config_warnings[CONFIG_MAX_WARNINGS][POLICY_ERROR_LEN + 128];
static int g_config_nwarnings; /* kept (at most CONFIG_MAX_WARNINGS) */
static int g_config_nfound;    /* found, kept or not */
/* Linux's HOST_NAME_MAX: what gethostname can return. */
#define CONFIG_HOST_NAME_MAX 64
/* policy/pattern.c's buffer for one pattern: a longer one never matches. */
#define CONFIG_PATTERN_MAX 256

const char *shim_mode_name(enum shim_mode m)
{
    return m == MODE_OFF ? "off" : m == MODE_ENFORCE ? "enforce" : "observe";
}

static void config_warn(const char *fmt, const char *a, const char *b);


/* A number in lo..hi, a multiple of `mult`, or the default with a warning. */
static long config_number(const char *name, long def, long lo, long hi, long mult)
{
    const char *v = getenv(name);
    if (!v || !*v)
        return def;
    char *end;
    errno = 0;
    long x = strtol(v, &end, 10);
    if (errno || *end || x < lo || x > hi || x % mult) {
        char defs[32], msg[160];
        snprintf(defs, sizeof(defs), "%ld", def);
        snprintf(msg, sizeof(msg), "%s='%%.40s' is not a number in %ld..%ld%s; using %%s", name, lo, hi,
                 mult > 1 ? " (a multiple of 4096)" : "");
        config_warn(msg, v, defs);
        return def;
    }
    return x;
}

/* NCCLSHIM_FABRIC_BUDGET: decimal digits only, 1..FABRIC_MAX_BUDGET.  A bad
 * value is not replaced by a default: the user meant to say the fabric is
 * tight, so this host's fabric goes unjudged (auto across hosts: socket). */
static int fabric_budget_read(void)
{
    const char *v = getenv("NCCLSHIM_FABRIC_BUDGET");
    if (!v || !*v)
        return 0;
    long x = 0;
    size_t n = strspn(v, "0123456789");
    if (n == strlen(v) && n <= 9)
        x = strtol(v, NULL, 10);
    if (n != strlen(v) || n > 9 || x < 1 || x > FABRIC_MAX_BUDGET) {
        config_warn("NCCLSHIM_FABRIC_BUDGET='%.40s' is not a number in 1..16777216 (queue pairs a device the "
                    "weight-update communicator may take on this host); auto will not weigh this host's fabric "
                    "(socket across hosts) until it is fixed or unset%s", v, "");
        return -1;
    }
    return (int)x;
}

/* Not inlined: inlined into config_read, gcc's truncation analysis of the
 * formats (checked by -Wformat-truncation) depends on how many calls there
 * are; a warning cut at its buffer's end is acceptable. */
static __attribute__((noinline)) void config_warn(const char *fmt, const char *a, const char *b)
{
    g_config_nfound++;
    if (g_config_nwarnings < CONFIG_MAX_WARNINGS)
        snprintf(g_config_warnings[g_config_nwarnings++], sizeof(g_config_warnings[0]), fmt, a, b);
}

/*
 * NCCLSHIM_* variables that are no setting of the shim: a misspelt name
 * would otherwise be ignored without a word (NCCLSHIM_WEIGHT_UPDTE=ipc and
 * every communicator passes through).  Our own tools' variables, the debug
 * trace and retired settings are known.
 */
static int listed(const char *const *list, const char *name, size_t n)
{
    for (; *list; list++)
        if (strlen(*list) == n && strncmp(*list, name, n) == 0)
            return 1;
    return 0;
}

/* Whether environment entry `e` is an NCCLSHIM_* name that is no setting;
 * its name's length in *n. */
static int stray_name(const char *e, size_t *n)
{
    /* A debugging switch, and the test harnesses' variables, which reach the
     * preloaded processes too. */
    static const char *const tools[] = { "NCCLSHIM_IPC_TRACE", "NCCLSHIM_GPU_KEEP", "NCCLSHIM_GPU_SKIP_ONE",
                                         "NCCLSHIM_GPU_LOST", "NCCLSHIM_TEST_KEEP", "NCCLSHIM_TEST_RV_FAULT",
                                         /* the shim's own: these warnings were printed (shim_main.c) */
                                         "NCCLSHIM_WARNED", NULL };
    const char *eq = strchr(e, '=');
    *n = eq ? (size_t)(eq - e) : strlen(e);
    return strncmp(e, "NCCLSHIM_", 9) == 0 && !listed(shim_setting_names, e, *n) && !listed(tools, e, *n);
}

static int name_cmp(const char *a, size_t an, const char *b, size_t bn)
{
    int c = strncmp(a, b, an < bn ? an : bn);
    return c ? c : (an > bn) - (an < bn);
}

/* The stray names in name order, not the environment's: which are kept
 * past CONFIG_MAX_WARNINGS, and the warnings' digest (shim_main.c), must not
 * change when a shell between two processes reorders their environment.  A
 * selection, not a sort: no memory, and there are seldom any. */
static void check_names(void)
{
    const char *prev = NULL;
    size_t prevn = 0;
    for (;;) {
        const char *next = NULL;
        size_t nextn = 0, n;
        for (char **e = environ; e && *e; e++)
            if (stray_name(*e, &n) && (!prev || name_cmp(*e, n, prev, prevn) > 0) &&
                (!next || name_cmp(*e, n, next, nextn) < 0)) {
                next = *e;
                nextn = n;
            }
        if (!next)
            return;
        char name[64];
        snprintf(name, sizeof(name), "%.*s", (int)(nextn < 60 ? nextn : 60), next);
        if (strcmp(name, "NCCLSHIM_IPC_STREAMS") == 0)
            config_warn("%s is no longer used (an ipc broadcast runs on the caller's stream); unset it%s", name, "");
        else
            config_warn("%s is not a setting of ncclshim (misspelt? docs/policy.md lists them); ignored%s", name, "");
        prev = next;
        prevn = nextn;
    }
}

/* What the shim does at all, and whether it reads Python's call site. */
static void read_mode(struct shim_config *c)
{
    const char *v = getenv("NCCLSHIM_MODE");
    c->mode = MODE_ENFORCE;
    if (v && *v) {
        if (strcasecmp(v, "observe") == 0)
            c->mode = MODE_OBSERVE;
        else if (strcasecmp(v, "off") == 0)
            c->mode = MODE_OFF;
        else if (strcasecmp(v, "enforce") == 0)
            c->mode = MODE_ENFORCE;
        else
            config_warn("NCCLSHIM_MODE='%.60s' is not one of enforce|observe|off; using enforce%s", v, "");
    }

    c->python_callsite = 1;
    v = getenv("NCCLSHIM_PYTHON_CALLSITE");
    if (v && *v) {
        if (strcmp(v, "0") == 0)
            c->python_callsite = 0;
        else if (strcmp(v, "1") != 0)
            config_warn("NCCLSHIM_PYTHON_CALLSITE='%.60s' is not 0 or 1; using 1%s", v, "");
    }
}

/* Where records go, and the names this host goes by in them. */
static void read_place(struct shim_config *c)
{
    const char *v = getenv("NCCLSHIM_LOG_DIR");
    if (v && *v && strlen(v) < sizeof(c->log_dir) - 64)
        snprintf(c->log_dir, sizeof(c->log_dir), "%s", v);
    else {
        if (v && *v)
            config_warn("NCCLSHIM_LOG_DIR is too long (%.40s...); using /tmp/ncclshim-<uid>%s", v, "");
        snprintf(c->log_dir, sizeof(c->log_dir), "/tmp/ncclshim-%u", (unsigned)getuid());
        c->log_dir_default = 1;
    }

    /* The whole host name, as NCCL reads it for its host identity; records
     * name the host by it up to the first '.', as NCCL's log prefix does.
     * An override longer than any host name would make record file names
     * longer than a file name may be: named here, not as a LOG_DIR problem. */
    char whole[256];
    v = getenv("NCCLSHIM_HOSTNAME");
    if (v && *v && strlen(v) > CONFIG_HOST_NAME_MAX) {
        char len[64];
        snprintf(len, sizeof(len), "%zu bytes; a host name has at most %d", strlen(v), CONFIG_HOST_NAME_MAX);
        config_warn("NCCLSHIM_HOSTNAME is too long ('%.40s...', %s); using this host's own name", v, len);
        v = NULL;
    }
    if (v && *v)
        snprintf(whole, sizeof(whole), "%s", v);
    else if (gethostname(whole, sizeof(whole) - 1) != 0)
        snprintf(whole, sizeof(whole), "unknown"); /* NCCL's own stand-in */
    whole[sizeof(whole) - 1] = '\0';
    snprintf(c->host, sizeof(c->host), "%s", whole);
    char *dot = strchr(c->host, '.');
    if (dot && !(v && *v))
        *dot = '\0';

    snprintf(c->hostname, sizeof(c->hostname), "%s", whole);
}

/* Which unique IDs are marked, and how the rendezvous runs. */
static void read_rendezvous(struct shim_config *c)
{
    c->tag = TAG_BINDINGS;
    const char *v = getenv("NCCLSHIM_TAG");
    if (v && *v) {
        if (strcasecmp(v, "all") == 0)
            c->tag = TAG_ALL;
        else if (strcasecmp(v, "none") == 0)
            c->tag = TAG_NONE;
        else if (strcasecmp(v, "bindings") != 0)
            config_warn("NCCLSHIM_TAG='%.60s' is not one of bindings|all|none; using bindings%s", v, "");
    }
    c->rendezvous_timeout_ms = (int)config_number("NCCLSHIM_RENDEZVOUS_TIMEOUT_MS", 30000, 1, 3600000, 1);
    c->rendezvous_idle_ms = (int)config_number("NCCLSHIM_RENDEZVOUS_IDLE_MS", 600000, 1, 86400000, 1);
    /* Up to the ipc chain's size every rank talks to the root itself (one
     * hop less; ipc's monitor needs the direct connection); above it the
     * root would hold a descriptor per rank: the ranks of a host meet at a
     * leader there (shim/rendezvous/rv_leader.c). */
    c->rendezvous_fanin = (int)config_number("NCCLSHIM_RENDEZVOUS_FANIN", 64, 0, FACTS_MAX_RANKS, 1);
    /* 0 makes a rank speak as a shim before issue 19 did (no socket_ready in
     * its HELLO): the root then takes the vote round; for comparison and as a
     * way back should the one-round path misjudge a set-up. */
    c->rendezvous_one_round = (int)config_number("NCCLSHIM_RENDEZVOUS_ONE_ROUND", 1, 0, 1, 1);
}

/* The ipc transport's sizes, waits and copies. */
static void read_ipc(struct shim_config *c)
{
    /* Measured on H200 NVLink (docs/benchmarks.md): each chunk costs a fixed
     * ~10 us besides its copy, as a lone peer copy does, so bandwidth follows
     * the chunk size (4 MiB: 217 GB/s, 16 MiB: 310-323, 32 MiB: 347) more than
     * the number of slots or streams; 2 slots of 23 MiB, with the Send/Recv
     * slots (16 MiB), keep a rank's allocation within 64 MiB. */
    c->ipc_chunk_bytes = (size_t)config_number("NCCLSHIM_IPC_CHUNK_BYTES", 23 << 20, 4096, 1 << 30, 4096);
    c->ipc_slots = (int)config_number("NCCLSHIM_IPC_SLOTS", 2, 2, 64, 1);
    /* 0: a broadcast's step along a chain is chosen from its size
     * (ipc_bcast.c, step_of); a number fixes it, for the protocol tests (many
     * steps of a small buffer) and for measuring schedules. */
    c->ipc_step_bytes = (size_t)config_number("NCCLSHIM_IPC_STEP_BYTES", 0, 4096, 1 << 30, 4096);
    /* Long enough for a receiver's own call of the broadcast through
     * Python and ctypes (tens of us); short beside the copy it saves time
     * on (64 MiB: 180 us). */
    c->ipc_push_wait_us = (int)config_number("NCCLSHIM_IPC_PUSH_WAIT_US", 200, 0, 1000000, 1);
    /* As long as any other wait for a peer that stopped answering. */
    c->ipc_resume_wait_ms = (int)config_number("NCCLSHIM_IPC_RESUME_WAIT_MS", 120000, 0, 3600000, 1);
    /* 1: buffers of cuMemCreate (PyTorch's expandable segments) are shared
     * as file descriptors over Unix sockets and pushed or pulled; 0: they
     * are staged, as before (shim/ipc/ipc_vmm.c). */
    c->ipc_vmm = (int)config_number("NCCLSHIM_IPC_VMM", 1, 0, 1, 1);
    /* auto and ce: copy engines on every hop, also between processes on
     * one GPU, where they measured faster than the shim's copy kernel (H100
     * and H200, driver 580: docs/benchmarks.md, "Colocated"); sm: the kernel
     * for those hops.  auto is what the shim finds best, ce pins copy
     * engines whatever a later version finds. */
    c->ipc_copy_sm = 0;
    const char *v = getenv("NCCLSHIM_IPC_COPY");
    if (v && *v) {
        if (strcasecmp(v, "sm") == 0)
            c->ipc_copy_sm = 1;
        else if (strcasecmp(v, "auto") != 0 && strcasecmp(v, "ce") != 0)
            config_warn("NCCLSHIM_IPC_COPY='%.60s' is not one of auto|ce|sm; using auto%s", v, "");
    }
}

/* NCCLSHIM_ROLE: a typo (`inferance`) must not pass unnoticed: the process's
 * role then comes from its title, and an inference rank that is not
 * recognised leaves the weight-update group unprotected. */
static void check_role(const char *v)
{
    if (!v || !*v || classify_role_setting_valid(v))
        return;
    config_warn("NCCLSHIM_ROLE='%.40s' is not one of training|inference|unknown; ignored: the role comes from the "
                "process title and libraries instead%s", v, "");
}

/*
 * A pattern list that cannot mean what its writer meant: set but holding no
 * pattern (its defaults are gone, nothing replaces them), a pattern longer
 * than policy/pattern.c matches (it never matches), or one with a space at an
 * end ("a, b": ' b' matches only a text starting with a space).  Each of them
 * quietly stops a role or a purpose from being recognised.  One warning per
 * variable: the first such pattern.
 */
static void check_pattern_list(const char *name, const char *v)
{
    if (!v)
        return;
    char what[160] = "";
    int npatterns = 0;
    for (const char *p = v; *p && !what[0];) {
        size_t n = strcspn(p, ",");
        if (n > 0)
            npatterns++;
        if (n >= CONFIG_PATTERN_MAX)
            snprintf(what, sizeof(what), "pattern %d is %zu bytes long ('%.30s...'): longer than %d, it never matches",
                     npatterns, n, p, CONFIG_PATTERN_MAX - 1);
        else if (n > 0 && (p[0] == ' ' || p[0] == '\t' || p[n - 1] == ' ' || p[n - 1] == '\t'))
            snprintf(what, sizeof(what), "pattern '%.*s' has a space at an end: patterns are separated by ',' "
                     "alone, and it matches only a text with that space", (int)(n < 60 ? n : 60), p);
        p += n;
        if (*p == ',')
            p++;
    }
    if (!what[0] && npatterns == 0)
        snprintf(what, sizeof(what), "is set but holds no pattern: its defaults are not used and nothing replaces "
                 "them (unset it to keep them)");
    if (what[0])
        config_warn("%s %s", name, what);
}

/* The policy (what to do with a weight-update communicator), the patterns
 * that tell one, and what this host's fabric allows it (auto across hosts). */
static void read_policy(struct shim_config *c)
{
    c->fabric_budget = fabric_budget_read();
    policy_parse(&c->policy, getenv("NCCLSHIM_WEIGHT_UPDATE"), getenv("NCCLSHIM_RULES"), getenv("NCCLSHIM_STRICT"));
    if (!c->policy.ok)
        config_warn("%s; %s", c->policy.error,
                    c->policy.strict ? "NCCLSHIM_STRICT=1: communicator creation will fail until it is fixed"
                                     : "failing open: every communicator passes through");

    c->patterns.role_env = getenv("NCCLSHIM_ROLE");
    c->patterns.training_titles = getenv("NCCLSHIM_TRAINING_TITLES");
    c->patterns.inference_titles = getenv("NCCLSHIM_INFERENCE_TITLES");
    c->patterns.inference_libs = getenv("NCCLSHIM_INFERENCE_LIBS");
    c->patterns.weight_update_callsites = getenv("NCCLSHIM_WEIGHT_UPDATE_CALLSITES");
    c->patterns.trainer_callsites = getenv("NCCLSHIM_TRAINER_CALLSITES");
    c->patterns.full_api = getenv("NCCLSHIM_FULL_API");
    c->patterns.engine_titles = getenv("NCCLSHIM_ENGINE_TITLES");
    c->patterns.engine_frames = getenv("NCCLSHIM_ENGINE_FRAMES");

    check_role(c->patterns.role_env);
    const struct { const char *name, *value; } lists[] = {
        { "NCCLSHIM_TRAINING_TITLES", c->patterns.training_titles },
        { "NCCLSHIM_INFERENCE_TITLES", c->patterns.inference_titles },
        { "NCCLSHIM_INFERENCE_LIBS", c->patterns.inference_libs },
        { "NCCLSHIM_WEIGHT_UPDATE_CALLSITES", c->patterns.weight_update_callsites },
        { "NCCLSHIM_TRAINER_CALLSITES", c->patterns.trainer_callsites },
        { "NCCLSHIM_FULL_API", c->patterns.full_api },
        { "NCCLSHIM_ENGINE_TITLES", c->patterns.engine_titles },
        { "NCCLSHIM_ENGINE_FRAMES", c->patterns.engine_frames },
    };
    for (size_t i = 0; i < sizeof(lists) / sizeof(lists[0]); i++)
        check_pattern_list(lists[i].name, lists[i].value);
}

/* In the order the warnings come out in. */
static void config_read(void)
{
    struct shim_config *c = &g_config;
    read_mode(c);
    read_place(c);
    read_rendezvous(c);
    read_ipc(c);
    read_policy(c);
    /* Last: a bad value of a real setting is reported before any stray name. */
    check_names();

    /* None goes unreported: past the table, its last line counts the rest
     * (a misspelt NCCLSHIM_MODE among 40 stray variables is then at least
     * announced, not dropped in silence). */
    if (g_config_nfound > CONFIG_MAX_WARNINGS)
        snprintf(g_config_warnings[CONFIG_MAX_WARNINGS - 1], sizeof(g_config_warnings[0]),
                 "%d more bad NCCLSHIM_* settings not shown (the first %d are); fix these and run again to see them",
                 g_config_nfound - (CONFIG_MAX_WARNINGS - 1), CONFIG_MAX_WARNINGS - 1);
}

const struct shim_config *shim_config(void)
{
    pthread_once(&g_config_once, config_read);
    return &g_config;
}

int shim_config_warning_count(void)
{
    shim_config();
    return g_config_nwarnings;
}

const char *shim_config_warning(int i)
{
    return i >= 0 && i < shim_config_warning_count() ? g_config_warnings[i] : "";
}

/* Written once under g_ident_once, read only after it. */
static pthread_once_t g_ident_once = PTHREAD_ONCE_INIT;
static struct host_identity g_ident;

static void ident_read(void)
{
    host_identity_read(&g_ident, shim_config()->hostname, "/proc/sys/kernel/random/boot_id");
}

const struct host_identity *shim_host_identity(void)
{
    pthread_once(&g_ident_once, ident_read);
    return &g_ident;
}
