/*
 * Creation and destruction of communicators: the evidence is gathered, the
 * action decided (shim/comm/decision.c: the rendezvous for a marked ID) and
 * carried out here (passthrough: the real init; socket: the real init with
 * netName "Socket", NCCL_NET hidden from it (shim/nccl/net_env.c); drop: a
 * shim-only handle, no NCCL; ipc: a shim-only handle over the CUDA IPC
 * transport, shim/ipc/ipc.c; fail), the communicator is registered (shim/registry/comm.c:
 * the application keeps NCCL's own ncclComm_t) and recorded (the records
 * themselves are built in comm_record.c).  The state of one creation
 * (creation.h) is this file's.
 */
#define _GNU_SOURCE
#include "lifecycle.h"

#include "action.h"
#include "clock.h"
#include "comm.h"
#include "comm_record.h"
#include "config.h"
#include "creation.h"
#include "creator.h"
#include "decision.h"
#include "ipc.h"
#include "net_env.h"
#include "record.h"
#include "uid_mark.h"
#include "vcomm.h"

#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/*
 * Depth of lifecycle wrappers on this thread.  NCCL, its plugins or a
 * profiler may call back into NCCL from inside an init; those inner calls are
 * forwarded untouched so the shim neither recurses nor records half-made
 * communicators.
 */
static __thread int t_depth;

#define REAL(slot, name, caller) ((__typeof__(&name))shim_real((slot), FN_##name, (caller)))

static int observing(void)
{
    return shim_config()->mode != MODE_OFF && t_depth == 0;
}

/* FNV-1a over all 128 bytes: NCCL's own commId hash differs between versions. */
static uint64_t id_hash(const ncclUniqueId *id)
{
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < sizeof(id->internal); i++) {
        h ^= (unsigned char)id->internal[i];
        h *= 0x100000001b3ull;
    }
    return h;
}

ncclResult_t life_ncclGetUniqueId(struct shim_slot *slot, const void *caller, ncclUniqueId *uniqueId)
{
    __typeof__(&ncclGetUniqueId) f = REAL(slot, ncclGetUniqueId, caller);
    if (!f)
        return ncclInternalError;
    if (!observing())
        return f(uniqueId);
    t_depth++;
    uint64_t t0 = shim_mono_us();
    ncclResult_t r = f(uniqueId);
    uint64_t dur = shim_mono_us() - t0;
    struct creator cr; /* only the caller is recorded: no libraries; frames and title for torch's IDs */
    evidence_caller(&cr, caller);
    /* Marked before anyone sees the ID: every rank must hash the same bytes. */
    char where[80] = "", why[256] = "", mark_why[EVIDENCE_REASON_LEN] = "";
    int marked = 0;
    if (r == ncclSuccess && uniqueId && plan_mark_id(cr.api, mark_why, sizeof(mark_why))) {
        marked = rv_server_open(uniqueId, where, sizeof(where), why, sizeof(why)) == 0;
        if (!marked)
            shim_warn("unmarked-id", "the unique ID was left unmarked (%s): communicators made with it pass "
                      "through", why);
    }
    /* Marked: why it was; else why not (the root could not listen, or the ID is not one to mark). */
    const char *said = marked ? mark_why : why[0] ? why : mark_why[0] ? mark_why : "not made";
    int has_id = r == ncclSuccess && uniqueId;
    comm_record_unique_id(has_id, has_id ? id_hash(uniqueId) : 0, r, dur, &cr, marked ? where : NULL, said);
    t_depth--;
    return r;
}

/* Asks the real library about a new communicator; -1 if it cannot say (yet). */
static int ask_int(struct shim_slot *slot, enum fn_index fn, ncclComm_t real)
{
    ncclResult_t (*f)(ncclComm_t, int *) = (ncclResult_t(*)(ncclComm_t, int *))shim_real(slot, fn, NULL);
    int v = -1;
    if (!f || f(real, &v) != ncclSuccess)
        return -1;
    return v;
}

/*
 * What NCCL (2.29+) says of a communicator the shim redirected: GPU-initiated
 * networking (GIN), which NCCL sets up whatever the config's netName, carries
 * the device API's traffic over the fabric, outside a socket or frugal
 * redirect (inspect --check flags it where a device communicator is made).
 * Asked only of what the shim changed, after a blocking init: on every other
 * communicator NCCL sees no call the application did not make.
 */
static void query_properties(struct creation *c, ncclComm_t real)
{
    ncclResult_t (*f)(ncclComm_t, ncclCommProperties_t *) =
        (ncclResult_t(*)(ncclComm_t, ncclCommProperties_t *))shim_real(c->slot, FN_ncclCommQueryProperties, NULL);
    if (!f || c->slot->version < 22900)
        return;
    memset(&c->props, 0, sizeof(c->props));
    c->props.size = sizeof(c->props);
    c->props.magic = NCCL_API_MAGIC;
    c->props.version = NCCL_ABI_VERSION;
    c->has_props = f(real, &c->props) == ncclSuccess;
}

/* The state of what was made, findable from here on by the application's pointer. */
static void register_creation(struct creation *c, struct shim_comm *h, int cuda_device)
{
    struct plan *p = &c->plan;
    h->action = p->action;
    h->purpose = p->purpose;
    h->unprotected = p->unprotected[0] != 0;
    h->decision_id = p->marked ? p->rv.v.decision_id : p->inherited_decision;
    if (plan_configures(p)) {
        h->net_config = p->net_config; /* NCCL may keep reading it: it lives as long as the communicator */
        p->net_config = NULL;
    }
    h->rank = c->rank;
    h->nranks = c->nranks;
    h->cuda_device = cuda_device;
    h->id_hash = c->id_hash;
    memcpy(h->group, c->group, sizeof(h->group));
    if (shim_comm_register(h) != 0)
        shim_warn("memory", "out of memory for the table of communicators: %s's communicator %s works, but "
                  "its traffic is not counted", c->fn, c->group);
}

/* Communicators whose non-blocking init has not been seen to end: while 0
 * (always, for blocking inits), ncclCommGetAsyncError costs one load more. */
static atomic_int g_inits_pending;

/* Takes `h` out of the pending inits; 1 if it was in (once). */
static int init_seen_ended(struct shim_comm *h)
{
    if (!atomic_load_explicit(&h->init_pending, memory_order_relaxed) || !atomic_exchange(&h->init_pending, 0))
        return 0;
    atomic_fetch_sub(&g_inits_pending, 1);
    return 1;
}

/*
 * After the real call: register what was made and record it.  `out` is
 * where the caller receives the communicator: NCCL's own pointer, left as it
 * is, or for drop and ipc the shim-only handle, stored there.
 */
static void finish_creation(struct creation *c, ncclResult_t r, uint64_t dur_us, ncclComm_t *out)
{
    struct plan *p = &c->plan;
    int shim_only = action_has(p->action, ACT_SHIM_ONLY);
    ncclComm_t real = (out && !shim_only && (r == ncclSuccess || r == ncclInProgress)) ? *out : NULL;
    struct shim_comm *h = NULL;
    int cuda_device = -1;
    if (shim_only && r == ncclSuccess) {
        h = p->vcomm; /* taken: plan_release leaves it */
        p->vcomm = NULL;
        cuda_device = p->cuda_device;
        if (p->ipc) {
            h->ipc = p->ipc;
            p->ipc = NULL;
            cuda_device = ipc_device(h->ipc);
        }
    } else if (real) {
        h = shim_comm_new(real, c->slot);
        if (!h)
            shim_warn("memory", "out of memory for a communicator's state; %s's communicator %p works, but its "
                      "traffic is not counted", c->fn, (void *)real);
    }
    if (real && r == ncclSuccess) {
        if (plan_configures(p))
            query_properties(c, real);
        cuda_device = ask_int(c->slot, FN_ncclCommCuDevice, real);
        if (c->rank < 0)
            c->rank = ask_int(c->slot, FN_ncclCommUserRank, real);
        if (c->nranks < 0)
            c->nranks = ask_int(c->slot, FN_ncclCommCount, real);
    }
    comm_record_creation(c, r, dur_us, real, h ? shim_comm_handle(h) : real, cuda_device);
    if (h) {
        if (real && r == ncclInProgress) {
            /* Its end is recorded when ncclCommGetAsyncError reveals it. */
            atomic_store_explicit(&h->init_pending, 1, memory_order_relaxed);
            atomic_fetch_add(&g_inits_pending, 1);
        }
        register_creation(c, h, cuda_device);
        if (!real)
            *out = (ncclComm_t)h;
    }
}

/*
 * Every creation: enter (nested NCCL calls are then forwarded untouched),
 * gather the evidence before NCCL runs, start the clock.  The caller fills in
 * what is particular to it (group of a split, ...) and calls end_creation.
 */
static void begin_creation(struct creation *c, const char *fn, struct shim_slot *slot, const void *caller,
                           int rank, int nranks, const ncclUniqueId *id, const ncclConfig_t *config,
                           const struct plan_parent *parent)
{
    t_depth++;
    memset(c, 0, sizeof(*c));
    c->fn = fn;
    c->slot = slot;
    c->caller = caller;
    c->rank = rank;
    c->nranks = nranks;
    c->config = config;
    if (id) {
        c->has_id = 1;
        c->id_hash = id_hash(id);
        snprintf(c->group, sizeof(c->group), "id:0x%016llx", (unsigned long long)c->id_hash);
    }
    evidence_gather(&c->cr, caller);
    struct plan_input in = { fn, slot, id, rank, nranks, config, &c->cr, c->group };
    if (parent)
        plan_child(&in, parent, &c->plan);
    else
        plan_creation(&in, &c->plan);
    c->t0 = shim_mono_us();
}

/*
 * The actions that need no NCCL call (shim-only ones return the handle made
 * in round 2; fail fails).  Returns 1 with the result in *r if the action
 * handled the creation; 0 if NCCL is to be called.
 */
static int carried_out_by_shim(struct creation *c, ncclComm_t *newcomm, ncclResult_t *r)
{
    const struct action_ops *o = action_ops(c->plan.action);
    if (!o->instead_of_init)
        return 0;
    *r = o->instead_of_init(&c->plan, c->fn, newcomm);
    return 1;
}

/* The config NCCL gets: the caller's, or the shim's copy of it (socket:
 * netName "Socket"; frugal: one channel). */
static ncclConfig_t *config_for(struct creation *c, ncclConfig_t *config)
{
    return plan_configures(&c->plan) ? c->plan.net_config : config;
}

/* Around the real init: NCCL_NET is hidden from it where the action says
 * so (socket), and from nothing else (shim/nccl/net_env.c). */
static void redirect_begin(const struct creation *c)
{
    if (action_has(c->plan.action, ACT_HIDES_NCCL_NET))
        net_env_hide();
}

static void redirect_end(const struct creation *c)
{
    if (action_has(c->plan.action, ACT_HIDES_NCCL_NET))
        net_env_show();
}

/* After the real call: wrap and record what it made (`out`: where it is returned; NULL if nothing). */
static ncclResult_t end_creation(struct creation *c, ncclResult_t r, ncclComm_t *out)
{
    finish_creation(c, r, shim_mono_us() - c->t0, out);
    plan_release(&c->plan);
    t_depth--;
    return r;
}

ncclResult_t life_ncclCommInitRank(struct shim_slot *slot, const void *caller, ncclComm_t *newcomm, int nranks,
                                   ncclUniqueId commId, int rank)
{
    __typeof__(&ncclCommInitRank) f = REAL(slot, ncclCommInitRank, caller);
    if (!f)
        return ncclInternalError;
    if (!observing())
        return f(newcomm, nranks, commId, rank);
    struct creation c;
    begin_creation(&c, "ncclCommInitRank", slot, caller, rank, nranks, &commId, NULL, NULL);
    ncclResult_t r;
    if (!carried_out_by_shim(&c, newcomm, &r)) {
        if (plan_configures(&c.plan)) { /* only InitRankConfig takes a config; prepared in round 2 */
            redirect_begin(&c);
            r = REAL(slot, ncclCommInitRankConfig, caller)(newcomm, nranks, commId, rank, c.plan.net_config);
            redirect_end(&c);
        } else {
            r = f(newcomm, nranks, commId, rank);
        }
    }
    return end_creation(&c, r, newcomm);
}

ncclResult_t life_ncclCommInitRankConfig(struct shim_slot *slot, const void *caller, ncclComm_t *newcomm,
                                         int nranks, ncclUniqueId commId, int rank, ncclConfig_t *config)
{
    __typeof__(&ncclCommInitRankConfig) f = REAL(slot, ncclCommInitRankConfig, caller);
    if (!f)
        return ncclInternalError;
    if (!observing())
        return f(newcomm, nranks, commId, rank, config);
    struct creation c;
    begin_creation(&c, "ncclCommInitRankConfig", slot, caller, rank, nranks, &commId, config, NULL);
    ncclResult_t r;
    if (!carried_out_by_shim(&c, newcomm, &r)) {
        redirect_begin(&c);
        r = f(newcomm, nranks, commId, rank, config_for(&c, config));
        redirect_end(&c);
    }
    return end_creation(&c, r, newcomm);
}

ncclResult_t life_ncclCommInitRankScalable(struct shim_slot *slot, const void *caller, ncclComm_t *newcomm,
                                           int nranks, int myrank, int nId, ncclUniqueId *commIds,
                                           ncclConfig_t *config)
{
    __typeof__(&ncclCommInitRankScalable) f = REAL(slot, ncclCommInitRankScalable, caller);
    if (!f)
        return ncclInternalError;
    if (!observing())
        return f(newcomm, nranks, myrank, nId, commIds, config);
    struct creation c;
    begin_creation(&c, "ncclCommInitRankScalable", slot, caller, myrank, nranks,
                   (nId > 0 && commIds) ? &commIds[0] : NULL, config, NULL);
    ncclResult_t r;
    if (!carried_out_by_shim(&c, newcomm, &r)) {
        redirect_begin(&c);
        r = f(newcomm, nranks, myrank, nId, commIds, config_for(&c, config));
        redirect_end(&c);
    }
    return end_creation(&c, r, newcomm);
}

ncclResult_t life_ncclCommInitAll(struct shim_slot *slot, const void *caller, ncclComm_t *comms, int ndev,
                                  const int *devlist)
{
    __typeof__(&ncclCommInitAll) f = REAL(slot, ncclCommInitAll, caller);
    if (!f)
        return ncclInternalError;
    if (!observing())
        return f(comms, ndev, devlist);
    /* Distinguishes several InitAll groups of one process. */
    static atomic_uint initall_seq;
    unsigned seq = atomic_fetch_add(&initall_seq, 1);
    struct creation c;
    begin_creation(&c, "ncclCommInitAll", slot, caller, 0, ndev, NULL, NULL, NULL);
    snprintf(c.group, sizeof(c.group), "initall:%.100s:%d:%u", shim_config()->host, (int)getpid(), seq);
    ncclResult_t r = f(comms, ndev, devlist);
    uint64_t dur = shim_mono_us() - c.t0;
    /* One process holds every rank: one record per rank, same evidence. */
    for (int i = 0; comms && i < ndev; i++) {
        c.rank = i;
        finish_creation(&c, r, dur, &comms[i]);
    }
    plan_release(&c.plan);
    t_depth--;
    return r;
}

/* A shim-only communicator has no NCCL to split, shrink or grow: the ranks'
 * colors are not exchanged, so the child's size is unknown.  Refused with
 * the action named, and recorded. */
static ncclResult_t shim_only_child(ncclComm_t comm, ncclComm_t *newcomm, const char *fn)
{
    if (newcomm)
        *newcomm = NULL;
    struct shim_comm *v = shim_vcomm_of(comm);
    return v ? vcomm_unsupported(v, fn) : vcomm_stale(fn);
}

/* How a split, shrink or grow goes on, after the opening they share. */
enum child_way {
    CHILD_ANSWERED, /* the real function is missing, or the parent shim-only: return the result */
    CHILD_FORWARD,  /* not the shim's to observe: the real call, untouched */
    CHILD_OBSERVE,  /* a child of `*parent` (NULL: a grow's new rank) is made and recorded */
};

/* The opening of a split, shrink and grow: `f` is the real function, `comm`
 * the parent (for a grow, NULL on the ranks it adds: `new_rank_ok`). */
static enum child_way open_child(const void *f, ncclComm_t comm, ncclComm_t *newcomm, const char *fn,
                                 int new_rank_ok, struct shim_comm **parent, ncclResult_t *r)
{
    *parent = NULL;
    if (!f) {
        *r = ncclInternalError;
        return CHILD_ANSWERED;
    }
    if (shim_is_vcomm(comm)) {
        *r = shim_only_child(comm, newcomm, fn);
        return CHILD_ANSWERED;
    }
    if (comm || !new_rank_ok)
        *parent = shim_comm_find(comm);
    return observing() && (*parent || (!comm && new_rank_ok)) ? CHILD_OBSERVE : CHILD_FORWARD;
}

/*
 * The opening of a split, shrink and grow wrapper, around open_child: the
 * real function `f`, and a return from the wrapper unless the child is the
 * shim's to observe (`forward`: the real call, untouched).  Declares f,
 * parent and r for the rest of the wrapper.
 */
#define OPEN_CHILD(name, new_rank_ok, forward)                                                                 \
    __typeof__(&name) f = REAL(slot, name, caller);                                                            \
    struct shim_comm *parent;                                                                                  \
    ncclResult_t r;                                                                                            \
    enum child_way way = open_child(f, comm, newcomm, #name, new_rank_ok, &parent, &r);                        \
    if (way != CHILD_OBSERVE)                                                                                  \
    return way == CHILD_FORWARD ? (forward) : r

/* The parent's part of a split, shrink or grow: its state, and the name of
 * the child (every rank makes its parent's children in the same order, so
 * the sequence number names the child alike on every rank). */
static void begin_child(struct creation *c, const char *fn, struct shim_slot *slot, const void *caller,
                        struct shim_comm *parent, atomic_uint *seq, const char *kind, const ncclConfig_t *config)
{
    unsigned n = atomic_fetch_add(seq, 1);
    struct plan_parent pp = { parent->group, (enum purpose)parent->purpose, (enum action)parent->action,
                              parent->unprotected, parent->decision_id };
    begin_creation(c, fn, slot, caller, -1, -1, NULL, config, &pp);
    c->parent = parent;
    snprintf(c->group, sizeof(c->group), "%.100s/%s%u", parent->group, kind, n);
}

ncclResult_t life_ncclCommSplit(struct shim_slot *slot, const void *caller, ncclComm_t comm, int color, int key,
                                ncclComm_t *newcomm, ncclConfig_t *config)
{
    OPEN_CHILD(ncclCommSplit, 0, f(comm, color, key, newcomm, config));
    struct creation c;
    begin_child(&c, "ncclCommSplit", slot, caller, parent, &parent->splits, "split", config);
    c.is_split = 1;
    c.color = color;
    c.key = key;
    snprintf(c.group + strlen(c.group), sizeof(c.group) - strlen(c.group), ":color%d", color);
    redirect_begin(&c);
    r = f(comm, color, key, newcomm, config_for(&c, config));
    redirect_end(&c);
    /* NCCL_SPLIT_NOCOLOR: this rank is in no child, and there is nothing to record. */
    if (r == ncclSuccess && !(newcomm && *newcomm)) {
        plan_release(&c.plan);
        t_depth--;
        return r;
    }
    return end_creation(&c, r, newcomm);
}

ncclResult_t life_ncclCommShrink(struct shim_slot *slot, const void *caller, ncclComm_t comm,
                                 int *excludeRanksList, int excludeRanksCount, ncclComm_t *newcomm,
                                 ncclConfig_t *config, int shrinkFlags)
{
    OPEN_CHILD(ncclCommShrink, 0, f(comm, excludeRanksList, excludeRanksCount, newcomm, config, shrinkFlags));
    struct creation c;
    begin_child(&c, "ncclCommShrink", slot, caller, parent, &parent->shrinks, "shrink", config);
    c.exclude = excludeRanksList;
    c.nexclude = excludeRanksList ? excludeRanksCount : 0;
    redirect_begin(&c);
    r = f(comm, excludeRanksList, excludeRanksCount, newcomm, config_for(&c, config), shrinkFlags);
    redirect_end(&c);
    return end_creation(&c, r, newcomm);
}

/*
 * NCCL 2.29's grow: the ranks of `comm` (rank -1) and the new ranks (comm
 * NULL) make a larger communicator from an ID of ncclCommGetUniqueId.  The
 * existing ranks' child is named after its parent, like a split's; a new
 * rank's after the ID, like an init's.  Either is decided on this rank's
 * evidence (the ID carries no mark: NCCL made it from the communicator).
 */
ncclResult_t life_ncclCommGrow(struct shim_slot *slot, const void *caller, ncclComm_t comm, int nRanks,
                               const ncclUniqueId *uniqueId, int rank, ncclComm_t *newcomm, ncclConfig_t *config)
{
    OPEN_CHILD(ncclCommGrow, 1, f(comm, nRanks, uniqueId, rank, newcomm, config));
    struct creation c;
    if (parent) {
        begin_child(&c, "ncclCommGrow", slot, caller, parent, &parent->grows, "grow", config);
        c.nranks = nRanks;
    } else {
        /* A new rank holds no parent: the ID a redirected parent made carries its action. */
        int action = 0;
        uint64_t decision = 0;
        struct plan_parent pp = { "the grow's unique ID", PURPOSE_WEIGHT_UPDATE, ACTION_PASSTHROUGH, 0, 0 };
        int inherited = uniqueId && uid_inherit_read(uniqueId, &action, &decision) &&
                        action_has((enum action)action, ACT_CONFIGURES);
        pp.action = (enum action)action;
        pp.decision_id = decision;
        begin_creation(&c, "ncclCommGrow", slot, caller, rank, nRanks, uniqueId, config, inherited ? &pp : NULL);
    }
    redirect_begin(&c);
    r = f(comm, nRanks, uniqueId, rank, newcomm, config_for(&c, config));
    redirect_end(&c);
    return end_creation(&c, r, newcomm);
}

/*
 * NCCL 2.29's ID for a grow, made from an existing communicator: for one the
 * shim redirected (socket, frugal) it carries the action in its tail (the
 * grow mark, shim/rendezvous/uid_mark.h), so that the ranks the grow adds,
 * which hold no parent, take the same as the existing ones take from theirs.
 */
ncclResult_t life_ncclCommGetUniqueId(struct shim_slot *slot, const void *caller, ncclComm_t comm,
                                      ncclUniqueId *uniqueId)
{
    if (shim_is_vcomm(comm)) {
        struct shim_comm *v = shim_vcomm_of(comm);
        return v ? vcomm_unsupported(v, "ncclCommGetUniqueId") : vcomm_stale("ncclCommGetUniqueId");
    }
    __typeof__(&ncclCommGetUniqueId) f = REAL(slot, ncclCommGetUniqueId, caller);
    if (!f)
        return ncclInternalError;
    ncclResult_t r = f(comm, uniqueId);
    struct shim_comm *h = r == ncclSuccess && uniqueId && observing() ? shim_comm_find(comm) : NULL;
    if (h && action_has((enum action)h->action, ACT_CONFIGURES) && uid_mark_space_free(uniqueId))
        uid_inherit_write(uniqueId, h->action, h->decision_id);
    return r;
}

ncclResult_t life_ncclCommFinalize(struct shim_slot *slot, const void *caller, ncclComm_t comm)
{
    __typeof__(&ncclCommFinalize) f = REAL(slot, ncclCommFinalize, caller);
    if (shim_is_vcomm(comm)) /* nothing in flight that a finalize would wait for */
        return shim_vcomm_of(comm) ? ncclSuccess : vcomm_stale("ncclCommFinalize");
    if (!f)
        return ncclInternalError;
    return f(comm);
}

/*
 * A non-blocking init (config blocking=0) returns ncclInProgress, and its
 * comm record can say no more; the application learns how it ended from
 * ncclCommGetAsyncError.  The first answer other than ncclInProgress is
 * recorded (comm_init_end, docs/records.md): an init that fails there is
 * otherwise invisible in the records.
 */
ncclResult_t life_ncclCommGetAsyncError(struct shim_slot *slot, const void *caller, ncclComm_t comm,
                                        ncclResult_t *asyncError)
{
    if (shim_is_vcomm(comm))
        return shim_vcomm_of(comm) ? vcomm_ncclCommGetAsyncError(comm, asyncError)
                                   : vcomm_stale("ncclCommGetAsyncError");
    __typeof__(&ncclCommGetAsyncError) f = REAL(slot, ncclCommGetAsyncError, caller);
    if (!f)
        return ncclInternalError;
    ncclResult_t r = f(comm, asyncError);
    if (__builtin_expect(!atomic_load_explicit(&g_inits_pending, memory_order_relaxed), 1) || r != ncclSuccess ||
        !asyncError || *asyncError == ncclInProgress)
        return r;
    struct shim_comm *h = shim_comm_find(comm);
    if (!h || !init_seen_ended(h) || shim_config()->mode == MODE_OFF)
        return r;
    if (*asyncError == ncclSuccess && h->cuda_device < 0)
        h->cuda_device = ask_int(h->slot, FN_ncclCommCuDevice, comm);
    comm_record_init_end(comm, h, *asyncError);
    return r;
}

/*
 * Destroy and abort.  A communicator NCCL made leaves the table before NCCL
 * frees it: once NCCL has, it may hand the same address to a communicator
 * another thread is creating.  A shim-only one is claimed by one caller
 * (its magic), so that a second destroy of it is refused, never freed twice.
 */
static ncclResult_t end_comm(ncclResult_t (*f)(ncclComm_t), ncclComm_t comm, const char *fn, const char *how)
{
    if (shim_is_vcomm(comm)) {
        struct shim_comm *v = (struct shim_comm *)comm;
        uint64_t alive = SHIM_VCOMM_MAGIC;
        if (!atomic_compare_exchange_strong(&v->magic, &alive, SHIM_VCOMM_MAGIC ^ 1))
            return vcomm_stale(fn);
        shim_comm_unregister(v);
        if (shim_config()->mode != MODE_OFF)
            shim_comm_record_end(v, how, ncclSuccess);
        shim_comm_free(v);
        return ncclSuccess;
    }
    struct shim_comm *h = f ? shim_comm_find(comm) : NULL;
    if (h)
        init_seen_ended(h); /* its comm_end says how it ended: no separate record */
    int registered = h && shim_comm_unregister(h);
    ncclResult_t r = f ? f(comm) : ncclInternalError;
    if (registered) {
        if (shim_config()->mode != MODE_OFF)
            shim_comm_record_end(h, how, r);
        shim_comm_free(h);
    }
    return r;
}

ncclResult_t life_ncclCommDestroy(struct shim_slot *slot, const void *caller, ncclComm_t comm)
{
    return end_comm(REAL(slot, ncclCommDestroy, caller), comm, "ncclCommDestroy", "destroy");
}

ncclResult_t life_ncclCommAbort(struct shim_slot *slot, const void *caller, ncclComm_t comm)
{
    struct shim_comm *v = shim_vcomm_of(comm);
    if (v && v->ipc)
        ipc_abort(v->ipc); /* destroy then skips waiting for the peers */
    return end_comm(REAL(slot, ncclCommAbort, caller), comm, "ncclCommAbort", "abort");
}
