/*
 * The communicator's records in one file (comm_record.h): every key and its
 * order, so that docs/records.md and the tools that read the records have one
 * place to match.  Their owners (lifecycle.c, comm.c) keep the state and hand
 * it here; nothing here changes it.
 */
#include "comm_record.h"

#include "action.h"
#include "clock.h"
#include "ipc.h"
#include "net_env.h"
#include "nccl_config.h"
#include "policy/classify.h"
#include "policy/decide.h"
#include "record.h"

#include <stddef.h>
#include <string.h>

/* Names, not NCCL's strings: asking the real library would be a call the
 * application did not make. */
static const char *result_name(ncclResult_t r)
{
    static const char *const names[] = { "ncclSuccess", "ncclUnhandledCudaError", "ncclSystemError",
                                         "ncclInternalError", "ncclInvalidArgument", "ncclInvalidUsage",
                                         "ncclRemoteError", "ncclInProgress", "ncclTimeout" };
    return (unsigned)r < sizeof(names) / sizeof(names[0]) ? names[r] : "unknown";
}

static void record_caller(struct jw *w, const struct creator *cr)
{
    jw_open(w, "caller", '{');
    jw_str(w, "lib", cr->caller_path);
    jw_str(w, "api", api_family_name(cr->api));
    jw_close(w, '}');
}

void comm_record_unique_id(int has_id, uint64_t id_hash, ncclResult_t r, uint64_t dur_us, const struct creator *cr,
                           const char *rendezvous, const char *why)
{
    struct jw w;
    jw_begin(&w, "unique_id");
    if (has_id)
        jw_hex64(&w, "id_hash", id_hash);
    jw_int(&w, "result", r);
    jw_u64(&w, "duration_us", dur_us);
    record_caller(&w, cr);
    if (rendezvous) {
        jw_str(&w, "rendezvous", rendezvous);
        jw_str(&w, "marked", why);
    } else {
        jw_str(&w, "unmarked", why);
    }
    jw_emit(&w);
}

/* One field of a config as the record shows it: its value, or null where
 * the config does not hold it or leaves it to NCCL ("undefined"). */
static void record_config_field(struct jw *w, const ncclConfig_t *c, enum nccl_config_index f)
{
    const char *name = nccl_config_fields[f].name;
    if (!nccl_config_is_set(c, f))
        jw_null(w, name);
    else if (nccl_config_fields[f].kind == NCCL_CONFIG_KIND_INT)
        jw_int(w, name, nccl_config_int(c, f));
    else
        jw_str(w, name, nccl_config_str(c, f));
}

/* The names of the fields in `mask`, as a list. */
static void record_config_names(struct jw *w, const char *key, uint32_t mask)
{
    jw_open(w, key, '[');
    for (int f = 0; f < CFG_COUNT; f++)
        if (mask & (1u << f))
            jw_str(w, NULL, nccl_config_fields[f].name);
    jw_close(w, ']');
}

/* The application's config, and the fields it set that this NCCL does not
 * read (its version is too old for them, or NCCL too old): NCCL resets
 * those to its defaults, whatever they hold (docs/records.md). */
static void record_config(struct jw *w, const ncclConfig_t *c, int nccl_version)
{
    if (!c) {
        jw_null(w, "config");
        return;
    }
    if (!nccl_config_valid(c)) {
        jw_str(w, "config", "invalid (not made with NCCL_CONFIG_INITIALIZER)");
        return;
    }
    jw_open(w, "config", '{');
    jw_u64(w, "size", c->size);
    jw_int(w, "version", (int)c->version);
    uint32_t ignored = 0;
    for (int f = 0; f < CFG_COUNT; f++) {
        record_config_field(w, c, (enum nccl_config_index)f);
        if (nccl_config_is_set(c, (enum nccl_config_index)f) &&
            !nccl_config_read(c, (enum nccl_config_index)f, nccl_version))
            ignored |= 1u << f;
    }
    if (ignored)
        record_config_names(w, "ignored_by_nccl", ignored);
    jw_close(w, '}');
}

/* The fields an action sets in NCCL's config, under its record key
 * (docs/records.md, "frugal"). */
static void record_action_config(struct jw *w, const struct action_ops *o, const ncclConfig_t *told)
{
    jw_open(w, o->record_key, '{');
    for (int i = 0; i < o->nconfig; i++)
        record_config_field(w, told, o->config[i].field);
    jw_close(w, '}');
}

/* The config the shim handed NCCL (socket, frugal): its size and version,
 * the fields it set, and those it set back to NCCL's default because the
 * version had to be raised to carry them (docs/records.md, "told"). */
static void record_told(struct jw *w, const ncclConfig_t *c, const struct nccl_config_told *t)
{
    jw_open(w, "told", '{');
    jw_u64(w, "size", c->size);
    jw_int(w, "version", (int)c->version);
    jw_int(w, "app_version", (int)t->from_version);
    for (int f = 0; f < CFG_COUNT; f++)
        if (t->changed & (1u << f))
            record_config_field(w, c, (enum nccl_config_index)f);
    record_config_names(w, "reset", t->reset);
    jw_close(w, '}');
}

static void record_properties(struct jw *w, const ncclCommProperties_t *p)
{
    jw_open(w, "nccl_properties", '{');
    jw_int(w, "cudaDev", p->cudaDev);
    jw_int(w, "deviceApiSupport", p->deviceApiSupport);
    jw_int(w, "multimemSupport", p->multimemSupport);
    jw_int(w, "ginType", (int)p->ginType);
    jw_int(w, "railedGinType", (int)p->railedGinType);
    jw_int(w, "hostRmaSupport", p->hostRmaSupport);
    jw_int(w, "nLsaTeams", p->nLsaTeams);
    jw_close(w, '}');
}

/* The decision's part of a comm record: purpose, action, network, rendezvous. */
static void record_plan(struct jw *w, const struct plan *p, const ncclConfig_t *config, int nccl_made)
{
    jw_str(w, "purpose", purpose_name(p->purpose));
    jw_str(w, "purpose_reason", p->purpose_reason);
    jw_str(w, "local_purpose", purpose_name(p->local_purpose));
    jw_str(w, "local_purpose_reason", p->local_purpose_reason);
    jw_str(w, "action", action_name(p->action));
    jw_str(w, "action_reason", p->action_reason);
    int hides = action_has(p->action, ACT_HIDES_NCCL_NET);
    if (nccl_made || hides) {
        /* The network NCCL was told to use, and by what: for socket the
         * config, NCCL_NET hidden from this init; else whatever NCCL reads. */
        char net_by[256];
        const char *net = net_env_told(hides, config, net_by, sizeof(net_by));
        jw_str(w, "net", net);
        jw_str(w, "net_by", net_by);
    }
    if (plan_configures(p) && p->net_config)
        record_told(w, p->net_config, &p->told);
    const struct action_ops *o = action_ops(p->action);
    if (o->record_key && p->net_config)
        record_action_config(w, o, p->net_config);
    if (p->unprotected[0])
        jw_str(w, "unprotected", p->unprotected);
    if (p->unrecognized[0])
        jw_str(w, "unrecognized", p->unrecognized);
    if (p->inherited_from) {
        jw_open(w, "inherited", '{');
        jw_str(w, "from", p->inherited_from);
        if (p->inherited_decision)
            jw_hex64(w, "decision_id", p->inherited_decision);
        jw_close(w, '}');
    }
    if (p->marked) {
        jw_open(w, "decision", '{');
        jw_str(w, "by", p->rv.via_root ? "root" : "this rank (fallback)");
        jw_hex64(w, "id", p->rv.v.decision_id);
        jw_str(w, "root", p->rv.root);
        jw_int(w, "rounds", p->rv.rounds);
        jw_u64(w, "wait_us", p->rv.wait_us);
        jw_double(w, "decided_ts", p->rv.decided_ts, 6);
        jw_int(w, "hosts", p->rv.v.nhosts);
        if (p->rv.fallback[0])
            jw_str(w, "fallback", p->rv.fallback);
        if (p->rv.fallback_kind[0])
            jw_str(w, "fallback_kind", p->rv.fallback_kind);
        if (p->rv.asked)
            jw_int(w, "asked", 1);
        jw_close(w, '}');
    }
}

/* The comm record of a creation: what was asked, what was decided and why,
 * what was made (`real`: NCCL's pointer, `handle`: what the application holds). */
void comm_record_creation(const struct creation *c, ncclResult_t r, uint64_t dur_us, ncclComm_t real,
                          ncclComm_t handle, int cuda_device)
{
    const struct creator *cr = &c->cr;
    const struct plan *p = &c->plan;
    struct jw w;
    jw_begin(&w, "comm");
    jw_str(&w, "fn", c->fn);
    jw_ptr(&w, "comm", real);
    jw_ptr(&w, "handle", handle);
    jw_str(&w, "group", c->group);
    if (c->has_id)
        jw_hex64(&w, "id_hash", c->id_hash);
    if (c->parent)
        jw_str(&w, "parent", c->parent->group);
    if (c->is_split) {
        jw_int(&w, "color", c->color);
        jw_int(&w, "key", c->key);
    }
    if (c->exclude) {
        jw_open(&w, "exclude", '[');
        for (int i = 0; i < c->nexclude && i < 1024; i++)
            jw_int(&w, NULL, c->exclude[i]);
        jw_close(&w, ']');
    }
    jw_int(&w, "rank", c->rank);
    jw_int(&w, "nranks", c->nranks);
    jw_int(&w, "cuda_device", cuda_device);
    record_config(&w, c->config, c->slot->version);
    jw_int(&w, "result", r);
    jw_str(&w, "result_str", result_name(r));
    jw_u64(&w, "duration_us", dur_us);
    jw_int(&w, "slot", c->slot->index);
    jw_int(&w, "nccl_version", c->slot->version);
    record_caller(&w, cr);
    jw_str(&w, "title", cr->title);
    if (cr->nframes > 0) {
        jw_open(&w, "python", '[');
        for (int i = 0; i < cr->nframes; i++)
            jw_str(&w, NULL, cr->frames[i]);
        jw_close(&w, ']');
    }
    jw_str(&w, "role", role_name((enum role)cr->role.value));
    jw_str(&w, "role_reason", cr->role.reason);
    if (cr->full_api.value)
        jw_str(&w, "full_api", cr->full_api.reason);
    if (cr->engine.bits)
        jw_str(&w, "engine", cr->engine.reason);
    record_plan(&w, p, c->config, real != NULL);
    if (c->has_props)
        record_properties(&w, &c->props);
    jw_emit(&w);
}

void comm_record_init_end(ncclComm_t comm, const struct shim_comm *h, ncclResult_t result)
{
    struct jw w;
    jw_begin(&w, "comm_init_end");
    jw_ptr(&w, "comm", comm);
    jw_str(&w, "group", h->group);
    jw_int(&w, "rank", h->rank);
    jw_int(&w, "nranks", h->nranks);
    jw_int(&w, "cuda_device", h->cuda_device);
    jw_int(&w, "result", result);
    jw_str(&w, "result_str", result_name(result));
    jw_str(&w, "by", "ncclCommGetAsyncError");
    jw_double(&w, "after_s", shim_now() - h->created_ts, 6);
    jw_emit(&w);
}

/* An object of two counts and a note (left out where empty). */
static void record_two(struct jw *w, const char *key, const char *k1, unsigned long long v1, const char *k2,
                       unsigned long long v2, const char *note)
{
    jw_open(w, key, '{');
    jw_u64(w, k1, v1);
    jw_u64(w, k2, v2);
    if (note[0])
        jw_str(w, "note", note);
    jw_close(w, '}');
}

/* What moved over the CUDA IPC transport of a comm_end: hops in and out,
 * which engine copied, the cuMem pieces shared. */
static void record_ipc(struct jw *w, struct ipc_comm *ipc)
{
    struct ipc_stats st;
    ipc_get_stats(ipc, &st);
    jw_open(w, "ipc", '{');
    jw_u64(w, "first", st.first);
    const char *dir[2] = { "in", "out" };
    for (int d = 0; d < 2; d++) {
        jw_open(w, dir[d], '{');
        for (int k = IPC_HOP_PUSH; k < IPC_HOPS; k++)
            jw_u64(w, ipc_hop_names[k], d ? st.out[k] : st.in[k]);
        jw_close(w, '}');
    }
    record_two(w, "copy", "sm", st.sm, "ce", st.ce, st.copy_note);
    if (st.vmm_sent || st.vmm_mapped || st.vmm_note[0])
        record_two(w, "vmm", "pieces_sent", st.vmm_sent, "pieces_mapped", st.vmm_mapped, st.vmm_note);
    jw_close(w, '}');
}

/* Async-signal-safe (the leaving path calls it from a fatal signal's handler):
 * the writer, atomics, and ipc_get_stats' atomic loads. */
static void record_end_into(struct jw *w, struct shim_comm *h, const char *how, int result)
{
    jw_begin(w, "comm_end");
    jw_ptr(w, "comm", h->real);
    jw_ptr(w, "handle", shim_comm_handle(h));
    jw_str(w, "group", h->group);
    jw_int(w, "rank", h->rank);
    jw_int(w, "nranks", h->nranks);
    jw_str(w, "how", how);
    jw_str(w, "action", action_name((enum action)h->action));
    if (h->decision_id)
        jw_hex64(w, "decision_id", h->decision_id);
    if (result >= 0)
        jw_int(w, "result", result);
    jw_double(w, "lifetime_s", shim_now() - h->created_ts, 3);
    unsigned devcomms = atomic_load_explicit(&h->devcomms, memory_order_relaxed);
    if (devcomms)
        jw_int(w, "devcomms", (int)devcomms);
    jw_open(w, "ops", '{');
    for (int op = 0; op < OP_COUNT; op++) {
        unsigned long long n = atomic_load_explicit(&h->ops[op].count, memory_order_relaxed);
        if (!n)
            continue;
        jw_open(w, op_kind_names[op], '{');
        jw_u64(w, "count", n);
        jw_u64(w, "bytes", atomic_load_explicit(&h->ops[op].bytes, memory_order_relaxed));
        jw_close(w, '}');
    }
    jw_close(w, '}');
    if (h->ipc)
        record_ipc(w, h->ipc);
    jw_emit(w);
}

void shim_comm_record_end(struct shim_comm *h, const char *how, int result)
{
    struct jw w;
    record_end_into(&w, h, how, result);
}

/* The communicators still alive at exit, each recorded as it is found. */
struct at_exit {
    struct jw *w;
    unsigned long alive;
};

static void record_alive(struct shim_comm *h, void *arg)
{
    struct at_exit *x = arg;
    record_end_into(x->w, h, "exit", -1);
    x->alive++;
}

void shim_comm_record_exit(struct jw *w, const char *by, int signo)
{
    struct at_exit x = { w, 0 };
    /* At exit() the table is read under its lock: nobody else should be
     * creating communicators, and none must be freed while we read it.  From
     * _exit or a fatal signal no lock may be waited for (comm.h,
     * shim_comm_each_live). */
    unsigned long created = shim_comm_each_live(by && strcmp(by, "exit") == 0, record_alive, &x);
    jw_begin(w, "exit");
    jw_u64(w, "comms_created", created);
    jw_u64(w, "comms_alive", x.alive);
    jw_str(w, "by", by);
    if (signo > 0)
        jw_int(w, "signal", signo);
    jw_emit(w);
}
