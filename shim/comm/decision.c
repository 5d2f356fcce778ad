/*
 * A new communicator's plan (decision.h): its action decided before NCCL is
 * called, by the rendezvous for a marked ID (this file sets up what each
 * action needs in round 2: the shim-only handle, the transport, the
 * redirected config) or on this rank's evidence, or taken from a parent.
 * lifecycle.c carries the plan out; policy/ holds the rules.
 */
#define _GNU_SOURCE
#include "decision.h"

#include "action.h"
#include "fabric_probe.h"
#include "setup.h"
#include "python_callsite.h"

#include "policy/classify.h"
#include "comm.h"
#include "config.h"
#include "cuda.h"
#include "ipc.h"
#include "nccl_config.h"
#include "net_env.h"
#include "record.h"
#include "version.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

/* A torch-made ID under weight-update or engine evidence: its frames, title
 * and loaded libraries are read (its own cost at ncclGetUniqueId, once per
 * process group; no rendezvous for a training group of a process that has
 * none of them). */
static int torch_id_marked(char *why, size_t whylen)
{
    const struct shim_config *cfg = shim_config();
    char title[FACTS_TITLE_LEN];
    char frames[EVIDENCE_MAX_FRAMES][EVIDENCE_FRAME_LEN];
    evidence_title(title, sizeof(title));
    int nframes = cfg->python_callsite ? python_callsite(frames, EVIDENCE_MAX_FRAMES) : 0;
    const char(*fr)[EVIDENCE_FRAME_LEN] = (const char(*)[EVIDENCE_FRAME_LEN])frames;
    struct verdict v = classify_torch_id(&cfg->patterns, title, nframes, fr, evidence_engine_now(title, nframes, fr));
    snprintf(why, whylen, "%s", v.reason);
    return v.value;
}

int plan_mark_id(enum api_family caller_api, char *why, size_t whylen)
{
    switch (shim_config()->tag) {
    case TAG_ALL:
        snprintf(why, whylen, "NCCLSHIM_TAG=all");
        return 1;
    case TAG_NONE:
        snprintf(why, whylen, "NCCLSHIM_TAG=none");
        return 0;
    default:
        if (caller_api != API_TORCH) {
            snprintf(why, whylen, "made by %s, not torch (NCCLSHIM_TAG=bindings)", api_family_name(caller_api));
            return 1;
        }
        return torch_id_marked(why, whylen);
    }
}

static void fill_facts(const struct plan_input *in, const struct plan *p, struct rank_facts *f, struct rank_text *t)
{
    const struct shim_config *cfg = shim_config();
    const struct creator *cr = in->cr;
    memset(f, 0, sizeof(*f));
    memset(t, 0, sizeof(*t));
    f->text = t;
    f->rank = in->rank;
    f->nranks = in->nranks;
    f->pid = (uint32_t)getpid();
    snprintf(f->host, sizeof(f->host), "%.*s", (int)sizeof(f->host) - 1, cfg->host);
    snprintf(f->host_id, sizeof(f->host_id), "%.*s", (int)sizeof(f->host_id) - 1, shim_host_identity()->id);
    f->cuda_device = p->cuda_device;
    snprintf(f->fn, sizeof(f->fn), "%s", in->fn);
    f->nccl_version = in->slot->version;
    snprintf(f->shim_version, sizeof(f->shim_version), "%s", NCCLSHIM_VERSION);
    f->api = cr->api;
    snprintf(t->caller_lib, sizeof(t->caller_lib), "%.*s", (int)sizeof(t->caller_lib) - 1, cr->caller_path);
    snprintf(t->title, sizeof(t->title), "%s", cr->title);
    f->role = (enum role)cr->role.value;
    snprintf(t->role_reason, sizeof(t->role_reason), "%s", cr->role.reason);
    f->local_purpose = p->local_purpose;
    snprintf(t->local_purpose_reason, sizeof(t->local_purpose_reason), "%s", p->local_purpose_reason);
    f->nframes = cr->nframes;
    for (int i = 0; i < cr->nframes && i < EVIDENCE_MAX_FRAMES; i++)
        snprintf(t->frames[i], sizeof(t->frames[i]), "%s", cr->frames[i]);
    f->strict_error = cfg->policy.strict && !cfg->policy.ok;
    f->full_api = cr->full_api.value ? 1 : 0;
    snprintf(t->full_api_why, sizeof(t->full_api_why), "%.*s", (int)sizeof(t->full_api_why) - 1, cr->full_api.reason);
    f->engine = cr->engine.bits;
    f->engine_frame = cr->engine.frame;
}

/* Whether passing `in` through leaves a weight-update communicator without the
 * redirect the policy would give it: not where the user chose that
 * (NCCLSHIM_TAG=none, NCCLSHIM_MODE=observe). */
static void note_unprotected(struct plan *p, const char *why)
{
    const struct shim_config *cfg = shim_config();
    if (p->purpose != PURPOSE_WEIGHT_UPDATE || p->action != ACTION_PASSTHROUGH || cfg->tag == TAG_NONE ||
        cfg->mode == MODE_OBSERVE)
        return;
    snprintf(p->unprotected, sizeof(p->unprotected), "%s", why);
}

static void decide_locally(const struct plan_input *in, struct plan *p, const char *why)
{
    const struct policy *pol = &shim_config()->policy;
    p->purpose = p->local_purpose;
    snprintf(p->purpose_reason, sizeof(p->purpose_reason), "%s", p->local_purpose_reason);
    if (pol->strict && !pol->ok) {
        p->action = ACTION_FAIL;
        snprintf(p->action_reason, sizeof(p->action_reason),
                 "NCCLSHIM_STRICT=1 and a malformed policy (%.400s): %s fails until the setting is fixed",
                 pol->error, in->fn);
        return;
    }
    p->action = ACTION_PASSTHROUGH;
    snprintf(p->action_reason, sizeof(p->action_reason), "%s%s%.400s", why,
             pol->ok ? "" : "; and a malformed policy, failing open: ", pol->ok ? "" : pol->error);
    char un[RV_REASON_LEN];
    snprintf(un, sizeof(un), "this rank's evidence says weight-update, but no rendezvous decided it (%.300s): its "
             "ranks could not agree on a redirect, so NCCL has it as the application asked; make its unique ID with "
             "a binding, or where torch makes it, from a weight-update call site (docs/policy.md, \"Stacks\")", why);
    note_unprotected(p, un);
}

/* "10.0.0.5:41234": where the unique ID's maker listens (NCCL's bootstrap address in the ID). */
static void maker_addr(const ncclUniqueId *id, char *buf, size_t len)
{
    struct sockaddr_storage ss;
    char host[INET6_ADDRSTRLEN] = "?";
    unsigned port = 0;
    snprintf(buf, len, "unknown");
    socklen_t sl = uid_nccl_addr(id, &ss);
    if (sl == sizeof(struct sockaddr_in)) {
        const struct sockaddr_in *a = (const struct sockaddr_in *)&ss;
        if (!inet_ntop(AF_INET, &a->sin_addr, host, sizeof(host)))
            return;
        port = ntohs(a->sin_port);
    } else if (sl == sizeof(struct sockaddr_in6)) {
        const struct sockaddr_in6 *a = (const struct sockaddr_in6 *)&ss;
        if (!inet_ntop(AF_INET6, &a->sin6_addr, host, sizeof(host)))
            return;
        port = ntohs(a->sin6_port);
    } else {
        return;
    }
    snprintf(buf, len, "%s:%u", host, port);
}

/*
 * Never silent (issue 43): an engine's worker (its own title or frames) that
 * joins an unmarked ID, not as its maker, is in a group whose maker showed no
 * engine evidence at all (a process with any makes its torch IDs marked, and
 * a binding's IDs are always marked): the shape of a bridge that every rank
 * passes through, each alone.  Recorded, said once on stderr, with the
 * setting that gets the maker's ID marked.  The decision stays passthrough on
 * every rank: no rank can know what the others decided.
 */
static void note_unmarked_bridge(const struct plan_input *in, struct plan *p)
{
    const struct shim_config *cfg = shim_config();
    const struct creator *cr = in->cr;
    if (!in->id || in->rank == 0 || in->nranks < 2 || !(cr->engine.bits & ENGINE_STRONG) || cfg->tag != TAG_BINDINGS ||
        cfg->mode == MODE_OBSERVE || p->action != ACTION_PASSTHROUGH)
        return;
    char addr[INET6_ADDRSTRLEN + 8];
    maker_addr(in->id, addr, sizeof(addr));
    /* The first piece of the evidence (its title, else its frame), whole. */
    const char *sep = strstr(cr->engine.reason, "; ");
    int elen = sep ? (int)(sep - cr->engine.reason) : (int)strlen(cr->engine.reason);
    snprintf(p->unrecognized, sizeof(p->unrecognized),
             "this rank is an engine's worker (%.*s) joining, as rank %d of %d, a unique ID that its maker (rank 0, "
             "NCCL's bootstrap address %s) did not mark: the maker showed no engine evidence (or runs without the "
             "shim, or with NCCLSHIM_TAG=none), so this looks like a "
             "bridge between a trainer and the engine, passed through by every rank; to protect it %s",
             elen < 160 ? elen : 160, cr->engine.reason, in->rank, in->nranks, addr,
             cr->api == API_TORCH ? "set NCCLSHIM_ROLE=training in the environment of the process that made the ID "
                                    "(torch then marks its IDs)"
                                  : "run the process that made the ID under the shim (LD_PRELOAD), NCCLSHIM_TAG unset");
    shim_warn("unrecognized", "rank %d of %d (%s): %s", in->rank, in->nranks, in->fn, p->unrecognized);
}

/* Every plan starts from this rank's own evidence: the purpose it would give
 * the communicator alone (what a rendezvous weighs, and the fall-back). */
static void plan_begin(const struct plan_input *in, struct plan *p)
{
    memset(p, 0, sizeof(*p));
    p->cuda_device = -1; /* asked only for a rendezvous: the probe costs a library search where CUDA is absent */
    struct local_evidence ev = { in->cr->api, (enum role)in->cr->role.value, in->nranks, in->cr->nframes,
                                 in->cr->frames, in->cr->engine.bits };
    struct verdict local = classify_purpose(&shim_config()->patterns, &ev);
    p->local_purpose = (enum purpose)local.value;
    snprintf(p->local_purpose_reason, sizeof(p->local_purpose_reason), "%s", local.reason);
}

/* The child's action, the parent's carried out through the child's config. */
static void inherit_action(const struct plan_input *in, const struct plan_parent *parent, struct plan *p)
{
    char why[RV_REASON_LEN] = "";
    enum action a = parent->action;
    const struct action_ops *o = action_ops(a);
    int len = 0;
    int ok = action_has(a, ACT_INHERITED) && (!o->prepare || o->prepare(in, p, NULL, &len, why, sizeof(why)) == 0);
    p->action = ok ? a : ACTION_PASSTHROUGH;
    if (ok) {
        snprintf(p->action_reason, sizeof(p->action_reason), "%s, as its parent %.160s (ranks that split together "
                 "decide together: every rank holds the parent's decision)", action_name(a), parent->group);
        return;
    }
    free(p->net_config);
    p->net_config = NULL;
    snprintf(p->action_reason, sizeof(p->action_reason), "its parent %.160s is %s, which this rank could not carry "
             "out for the child (%.300s): passthrough", parent->group, action_name(a), why);
    snprintf(p->unprotected, sizeof(p->unprotected), "%s", p->action_reason);
}

void plan_child(const struct plan_input *in, const struct plan_parent *parent, struct plan *p)
{
    const struct shim_config *cfg = shim_config();
    plan_begin(in, p);
    p->inherited_from = parent->group;
    p->inherited_decision = parent->decision_id;
    p->purpose = parent->purpose;
    snprintf(p->purpose_reason, sizeof(p->purpose_reason), "%s, as its parent %.160s", purpose_name(p->purpose),
             parent->group);
    /* A weight-update call site where the child is made outweighs a parent of
     * another purpose (a trainer's world split for its refit); the weaker
     * local rules do not (a trainer's own split is training). */
    struct verdict site = classify_callsite(&cfg->patterns, in->cr->nframes, in->cr->frames);
    if (p->purpose != PURPOSE_WEIGHT_UPDATE && site.value) {
        p->purpose = PURPOSE_WEIGHT_UPDATE;
        snprintf(p->purpose_reason, sizeof(p->purpose_reason), "%s (its parent %.160s: %s)", site.reason,
                 parent->group, purpose_name(parent->purpose));
    }
    inherit_action(in, parent, p);
    if (p->purpose == PURPOSE_WEIGHT_UPDATE && p->action == ACTION_PASSTHROUGH && !p->unprotected[0] &&
        (parent->unprotected || parent->purpose != PURPOSE_WEIGHT_UPDATE)) {
        char why[RV_REASON_LEN];
        snprintf(why, sizeof(why), "a weight-update child of %.160s, which was not redirected (%s): the ranks that "
                 "split it hold no decision to redirect it by", parent->group,
                 parent->unprotected ? "not decided by a rendezvous" : purpose_name(parent->purpose));
        note_unprotected(p, why);
    }
}

/* Why no rendezvous can decide `in` (its mark read into *mark otherwise):
 * NULL if one can. */
static const char *no_rendezvous(const struct plan_input *in, struct uid_mark *mark, char *buf, size_t len)
{
    if (!in->id)
        return "no unique ID (made from another communicator, or by ncclCommInitAll): "
               "decided on this rank's evidence";
    if (!uid_mark_read(in->id, mark))
        return "unmarked unique ID (NCCLSHIM_TAG, or made without the shim): "
               "decided on this rank's evidence";
    if (in->nranks < 1 || in->nranks > FACTS_MAX_RANKS || in->rank < 0 || in->rank >= in->nranks) {
        snprintf(buf, len, "rank or size outside what the rendezvous serves (1..%d ranks): "
                 "NCCL will judge the arguments", FACTS_MAX_RANKS);
        if (in->nranks > FACTS_MAX_RANKS && in->rank >= 0 && in->rank < in->nranks)
            /* Not the policy's choice: said on every rank (issue 34). */
            shim_warn("rendezvous-fallback", "rank %d of %d: the weight-update rendezvous serves at most %d ranks: "
                      "this communicator is decided on this rank's evidence alone, as every rank of it is", in->rank,
                      in->nranks, FACTS_MAX_RANKS);
        return buf;
    }
    return NULL;
}

/* What this rank tells the root in its HELLO: its facts, its host's fabric
 * (what auto across hosts weighs, policy/fabric.c), and the actions it could
 * take (shim/action/setup.c). */
static void gather_facts(const struct plan_input *in, struct plan *p, struct action_setup *setup,
                         struct rank_facts *f, struct rank_text *t)
{
    fill_facts(in, p, f, t);
    fabric_probe(&f->fabric);
    action_setup_hello(setup, f, t, shim_config()->rendezvous_one_round);
}

/* The rendezvous's outcome as the plan: its action, and its purpose (this
 * rank's own where the root never answered). */
static void take_verdict(struct plan *p)
{
    p->action = (enum action)p->rv.v.action;
    if (p->rv.via_root || p->rv.v.purpose_reason[0]) {
        p->purpose = (enum purpose)p->rv.v.purpose;
        snprintf(p->purpose_reason, sizeof(p->purpose_reason), "%s", p->rv.v.purpose_reason);
    } else {
        p->purpose = p->local_purpose;
        snprintf(p->purpose_reason, sizeof(p->purpose_reason), "%s (this rank's evidence: no answer from the root)",
                 p->local_purpose_reason);
    }
    snprintf(p->action_reason, sizeof(p->action_reason), "%s", p->rv.v.action_reason);
}

void plan_creation(const struct plan_input *in, struct plan *p)
{
    plan_begin(in, p);
    struct uid_mark mark;
    char buf[160];
    const char *why = no_rendezvous(in, &mark, buf, sizeof(buf));
    if (why) {
        decide_locally(in, p, why);
        int action;
        uint64_t grown;
        if (in->id && !uid_mark_read(in->id, &mark) && !uid_inherit_read(in->id, &action, &grown))
            note_unmarked_bridge(in, p);
        return;
    }
    p->marked = 1;
    p->cuda_device = shim_cuda_current_device();
    /* Off the stack: its text is a few KiB, and init may run on a small one. */
    struct hello {
        struct rank_facts f;
        struct rank_text t;
    } *h = malloc(sizeof(*h));
    if (!h) {
        decide_locally(in, p, "out of memory for the rendezvous");
        return;
    }
    struct action_setup setup = { .in = in, .plan = p };
    gather_facts(in, p, &setup, &h->f, &h->t);
    struct rv_setup callbacks = action_setup_callbacks(&setup);
    rv_client_run(in->id, &mark, &h->f, shim_config()->rendezvous_timeout_ms, &callbacks, &p->rv);
    free(h);
    take_verdict(p);
    plan_hold(p);
}
