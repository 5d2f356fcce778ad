/* The problem rules. Each rule looks at one communicator and appends short,
 * operator-facing strings to c->problems. To add a rule: write a function
 * and add a row to `rules`; docs/inspect.md lists what each one means. */
#include "inspect.h"

#include <stdlib.h>
#include <string.h>
#include <strings.h>

typedef void (*rule_fn)(inspect_state *st, communicator *c);

/* One rule can fire once per rank; on a 4096-rank job that would bury the
 * other problems, so each rule keeps its first few and counts the rest. */
#define MAX_PER_RULE 5
static size_t rule_added, rule_suppressed;

static void add(communicator *c, char *owned)
{
    if (rule_added++ < MAX_PER_RULE) {
        strlist_add(&c->problems, owned);
    } else {
        rule_suppressed++;
        free(owned);
    }
}

static void rule_rank_missing(inspect_state *st, communicator *c)
{
    (void)st;
    if (c->nranks <= 0)
        return;
    long long present = 0;
    for (size_t i = 0; i < c->nranks_rec; i++)
        if (c->ranks[i]->rank < c->nranks && (i == 0 || c->ranks[i]->rank != c->ranks[i - 1]->rank))
            present++;
    long long missing = c->nranks - present;
    if (missing <= 0)
        return;
    list_buf b = {0};
    size_t k = 0;
    /* stops once the list is full: nranks comes from the input and may be huge */
    for (long long r = 0; r < c->nranks && !b.full; r++) {
        while (k < c->nranks_rec && c->ranks[k]->rank < r)
            k++;
        if (k < c->nranks_rec && c->ranks[k]->rank == r)
            continue;
        char item[24];
        snprintf(item, sizeof item, "%lld", r);
        lb_add(&b, item);
    }
    if (missing)
        add(c, b.full ? xasprintf("ranks missing: %s of %lld (%lld missing)", b.s, c->nranks, missing)
                      : xasprintf("rank%s missing: %s of %lld", missing > 1 ? "s" : "", b.s, c->nranks));
}

static void rule_rank_out_of_range(inspect_state *st, communicator *c)
{
    (void)st;
    for (size_t i = 0; i < c->nranks_rec; i++) {
        rank_rec *r = c->ranks[i];
        if (r->rank >= r->nranks)
            add(c, xasprintf("rank %lld out of range for nranks %lld (%s pid %lld)", r->rank,
                             r->nranks, r->host, r->pid));
    }
}

static void rule_duplicate_rank(inspect_state *st, communicator *c)
{
    (void)st;
    /* ranks are sorted by (rank, ts): a duplicate is a later record of the
     * same rank whose predecessor had not ended before it was created */
    for (size_t i = 1; i < c->nranks_rec; i++) {
        rank_rec *a = c->ranks[i - 1], *b = c->ranks[i];
        if (a->rank != b->rank)
            continue;
        if (a->end && (a->end->ts <= b->ts || !a->end->ts))
            continue;
        add(c, xasprintf("duplicate rank %lld: %s pid %lld and %s pid %lld", b->rank, a->host,
                         a->pid, b->host, b->pid));
    }
}

static void rule_init_failed(inspect_state *st, communicator *c)
{
    (void)st;
    /* 7 is ncclInProgress: a non-blocking init still completing, not a failure */
    for (size_t i = 0; i < c->nranks_rec; i++) {
        rank_rec *r = c->ranks[i];
        /* action fail: the policy's doing, 'creation failed by policy' says why */
        if (r->result != 0 && r->result != 7 && !(r->action && strcmp(r->action, "fail") == 0))
            add(c, xasprintf("init failed on rank %lld (%s pid %lld): result %lld (%s)", r->rank,
                             r->host, r->pid, r->result, r->result_str ? r->result_str : "?"));
    }
}

static void rule_nranks_disagree(inspect_state *st, communicator *c)
{
    (void)st;
    list_buf b = {0};
    strlist seen = {0};
    for (size_t i = 0; i < c->nranks_rec; i++) {
        char item[24];
        snprintf(item, sizeof item, "%lld", c->ranks[i]->nranks);
        size_t before = seen.n;
        strlist_add_unique(&seen, item);
        if (seen.n != before)
            lb_add(&b, item);
    }
    if (seen.n > 1)
        add(c, xasprintf("nranks disagree: %s", b.s));
    strlist_free(&seen);
}

static void disagree(communicator *c, const char *what, const char *(*get)(const rank_rec *))
{
    list_buf b = {0};
    strlist seen = {0};
    for (size_t i = 0; i < c->nranks_rec; i++) {
        if (c->ranks[i]->from_log) /* no shim there: nothing to compare */
            continue;
        size_t before = seen.n;
        strlist_add_unique(&seen, get(c->ranks[i]));
        if (seen.n != before)
            lb_add(&b, seen.v[seen.n - 1]);
    }
    if (seen.n > 1)
        add(c, xasprintf("%s disagree: %s", what, b.s));
    strlist_free(&seen);
}

static const char *purpose_of(const rank_rec *r) { return r->purpose ? r->purpose : "unknown"; }
static const char *action_of(const rank_rec *r) { return r->action ? r->action : "unknown"; }

static void rule_purposes_disagree(inspect_state *st, communicator *c)
{
    (void)st;
    /* after a fallback each rank keeps its own guess: 'decision fell back' says why */
    if (c->fell_back)
        return;
    disagree(c, "purposes", purpose_of);
}

static void rule_actions_disagree(inspect_state *st, communicator *c)
{
    (void)st;
    disagree(c, "actions", action_of);
}

static void rule_dropped_carried_data(inspect_state *st, communicator *c)
{
    (void)st;
    unsigned long long ops = 0;
    list_buf b = {0};
    for (size_t i = 0; i < c->nranks_rec; i++) {
        rank_rec *r = c->ranks[i];
        if (!r->end)
            continue;
        /* newer comm_end records say what the shim did; older ones only the comm record */
        const char *action = r->end->action ? r->end->action : r->action;
        if (!action || strcmp(action, "drop") != 0)
            continue;
        unsigned long long n = 0;
        op_stat *o, *tmp;
        HASH_ITER(hh, r->end->ops, o, tmp)
            n += o->count;
        if (n) {
            char item[24];
            snprintf(item, sizeof item, "%lld", r->rank);
            lb_add(&b, item);
            ops += n;
        }
    }
    if (ops)
        add(c, xasprintf("dropped communicator carried data: %llu calls on rank%s %s never reached NCCL",
                         ops, b.items > 1 ? "s" : "", b.s));
}

/* Next "a" or "a-b" of a rank list like "1,3-4"; 0 at the end or on junk. */
static int next_range(const char **p, long long *a, long long *b)
{
    char *end;
    while (**p == ',' || **p == ' ')
        (*p)++;
    if (**p < '0' || **p > '9')
        return 0;
    *a = strtoll(*p, &end, 10);
    *b = *a;
    *p = end;
    if (**p == '-') {
        (*p)++;
        if (**p < '0' || **p > '9')
            return 0;
        *b = strtoll(*p, &end, 10);
        *p = end;
    }
    return *a >= 0 && *b >= *a;
}

static int in_rank_list(const char *list, long long rank)
{
    long long a, b;
    const char *p = list;
    while (list && next_range(&p, &a, &b))
        if (rank >= a && rank <= b)
            return 1;
    return 0;
}

/* c->ranks is sorted by rank: the first record of `rank`, or NULL. */
static rank_rec *rank_record(communicator *c, long long rank)
{
    size_t lo = 0, hi = c->nranks_rec;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (c->ranks[mid]->rank < rank)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < c->nranks_rec && c->ranks[lo]->rank == rank ? c->ranks[lo] : NULL;
}

static char *append(char *s, char *owned)
{
    char *o = xasprintf("%s%s", s, owned);
    free(s);
    free(owned);
    return o;
}


/* The root's rendezvous-rejected warnings for `root`: how many, and the first. */
static size_t root_rejections(inspect_state *st, const char *root, const warning_rec **first)
{
    size_t n = 0;
    *first = NULL;
    if (!root)
        return 0;
    char *prefix = xasprintf("rendezvous %s: ", root);
    size_t plen = strlen(prefix);
    for (size_t i = 0; i < st->warnings.n; i++) {
        const warning_rec *w = &st->warnings.v[i];
        if (strcmp(w->what, "rendezvous-rejected") == 0 && strncmp(w->message, prefix, plen) == 0) {
            if (!n++)
                *first = w;
        }
    }
    free(prefix);
    return n;
}

/* The root gave up with ranks missing: say, per missing rank, what its
 * records tell (none, too late, could not reach the root, an older shim). */
static void root_gave_up(communicator *c)
{
    const decision_rec *d = c->decision;
    if (d->action_reason && !strstr(d->action_reason, "timed out after")) {
        /* Not the timeout: a limit (descriptors, memory, threads) or a host's
         * leader that lost a rank ended it at once; the ranks still missing were
         * on their way, and the root's reason names the cause and its setting. */
        char *why = str_cut(d->action_reason, 500);
        add(c, xasprintf("decision fell back to passthrough: the root's rendezvous (%s, %s pid %lld) gave up at "
                         "once, after %lld ms with %lld of %lld ranks arrived: %s", d->listen ? d->listen : "?",
                         d->host, d->pid, (d->wait_us + 500) / 1000, d->arrived, d->nranks, why));
        free(why);
        return;
    }
    list_buf noshim = {0}, late = {0}, unreach = {0}, old = {0};
    double latest = 0;
    const char *unreach_why = NULL;
    long long a, b, seen = 0;
    const char *p = d->missing;
    /* a 4096-rank list is bounded by the lists' own caps; stop walking soon after */
    while (p && next_range(&p, &a, &b) && seen < 1024) {
        for (long long m = a; m <= b && seen < 1024; m++, seen++) {
            rank_rec *r = rank_record(c, m);
            double start = r ? r->ts - (double)r->duration_us / 1e6 : 0;
            if (!r) {
                lb_add_ll(&noshim, m);
            } else if (!r->has_decision) {
                lb_add_ll(&old, m);
            } else if (d->ts > 0 && r->ts > 0 && start > d->ts) {
                lb_add_ll(&late, m);
                if (start - d->ts > latest)
                    latest = start - d->ts;
            } else {
                lb_add_ll(&unreach, m);
                if (!unreach_why)
                    unreach_why = r->dec_fallback ? r->dec_fallback : r->action_reason;
            }
        }
    }
    char *msg = xasprintf("decision fell back to passthrough: the root's rendezvous (%s, %s pid %lld) gave up "
                          "after %lld ms with %lld of %lld ranks (missing %s)",
                          d->listen ? d->listen : "?", d->host, d->pid, (d->wait_us + 500) / 1000, d->arrived,
                          d->nranks, d->missing && d->missing[0] ? d->missing : "?");
    if (noshim.items)
        msg = append(msg, xasprintf("; rank%s %s left no records: %s without the shim (or with NCCLSHIM_MODE=off), "
                                    "or %s records were not collected: preload libncclshim.so in every rank's "
                                    "process", noshim.items > 1 ? "s" : "", noshim.s,
                                    noshim.items > 1 ? "they ran" : "it ran", noshim.items > 1 ? "their" : "its"));
    if (late.items)
        msg = append(msg, xasprintf("; rank%s %s called init %s%.2f s after the root gave up, later than "
                                    "NCCLSHIM_RENDEZVOUS_TIMEOUT_MS: raise it, or create the communicator on all "
                                    "ranks at about the same time", late.items > 1 ? "s" : "", late.s,
                                    late.items > 1 ? "up to " : "", latest));
    if (unreach.items) {
        char *why = str_cut(unreach_why ? unreach_why : "no reason recorded", 200);
        msg = append(msg, xasprintf("; rank%s %s could not reach the root (%s): check that %s host%s can reach %s "
                                    "(firewall, the address in the unique ID)", unreach.items > 1 ? "s" : "",
                                    unreach.s, why, unreach.items > 1 ? "their" : "its",
                                    unreach.items > 1 ? "s" : "", d->listen ? d->listen : "the root"));
        free(why);
    }
    if (old.items)
        msg = append(msg, xasprintf("; rank%s %s recorded no decision: an older ncclshim without the rendezvous, "
                                    "use one version everywhere", old.items > 1 ? "s" : "", old.s));
    add(c, msg);
}

static void rule_decision_fell_back_explained(inspect_state *st, communicator *c);

/* Ranks whose records say they fell back (decision.fallback_kind) when
 * nothing above explained it: every fallback that is not the policy's choice
 * is a problem (issue 34). */
static void kinds_unexplained(communicator *c)
{
    list_buf ranks = {0};
    const rank_rec *first = NULL;
    for (size_t i = 0; i < c->nranks_rec; i++)
        if (c->ranks[i]->dec_fallback_kind) {
            lb_add_ll(&ranks, c->ranks[i]->rank);
            if (!first)
                first = c->ranks[i];
        }
    if (!first)
        return;
    char *why = str_cut(first->dec_fallback ? first->dec_fallback : first->action_reason ? first->action_reason
                                                                                          : "no reason recorded", 400);
    add(c, xasprintf("decision fell back to passthrough on rank%s %s (%s; first: %s pid %lld): %s",
                     ranks.items > 1 ? "s" : "", ranks.s, first->dec_fallback_kind, first->host, first->pid, why));
    free(why);
}

static void rule_decision_fell_back(inspect_state *st, communicator *c)
{
    size_t before = c->problems.n;
    rule_decision_fell_back_explained(st, c);
    if (c->problems.n == before)
        kinds_unexplained(c);
}

static void rule_decision_fell_back_explained(inspect_state *st, communicator *c)
{
    const decision_rec *d = c->decision;
    int gave_up = inspect_root_gave_up(c);
    if (d && gave_up) {
        root_gave_up(c);
    } else if (gave_up) {
        const char *told = NULL;
        for (size_t i = 0; i < c->nranks_rec && !told; i++)
            if (c->ranks[i]->dec_via_root && c->ranks[i]->dec_hosts == 0)
                told = c->ranks[i]->action_reason;
        char *why = str_cut(told ? told : "no reason recorded", 300);
        add(c, xasprintf("decision fell back to passthrough: the root's rendezvous (%s) timed out before every "
                         "rank arrived; the ranks were told: %s (the root's decision record, in the records of "
                         "the process that called ncclGetUniqueId, was not among the inputs)",
                         c->root ? c->root : "?", why));
        free(why);
    } else if (inspect_vote_undone(c)) {
        add(c, xasprintf("decision fell back to passthrough in the vote round: %s; the decided action could not "
                         "be set up on every rank: fix what the named rank reports, or choose another action for "
                         "purpose %s (NCCLSHIM_WEIGHT_UPDATE, NCCLSHIM_RULES)",
                         d->action_reason ? d->action_reason : "no reason recorded",
                         d->purpose ? d->purpose : "?"));
    }

    /* Ranks that fell back on their own, and that the root's record does not
     * already explain: one problem per distinct reason. */
    strlist reasons = {0};
    const warning_rec *w = NULL;
    size_t nrej = 0;
    int nrej_known = 0;
    for (size_t i = 0; i < c->nranks_rec; i++) {
        rank_rec *r = c->ranks[i];
        if (!r->dec_fallback || (d && gave_up && in_rank_list(d->missing, r->rank)))
            continue;
        size_t before = reasons.n;
        strlist_add_unique(&reasons, r->dec_fallback);
        if (reasons.n == before)
            continue;
        list_buf ranks = {0};
        for (size_t j = i; j < c->nranks_rec; j++) {
            rank_rec *q = c->ranks[j];
            if (q->dec_fallback && strcmp(q->dec_fallback, r->dec_fallback) == 0 &&
                !(d && gave_up && in_rank_list(d->missing, q->rank)))
                lb_add_ll(&ranks, q->rank);
        }
        char *msg = xasprintf("decision fell back to passthrough on rank%s %s (%s%s pid %lld): %s",
                              ranks.items > 1 ? "s" : "", ranks.s, ranks.items > 1 ? "first: " : "", r->host,
                              r->pid, r->dec_fallback);
        if (!nrej_known) {
            nrej = root_rejections(st, c->root, &w);
            nrej_known = 1;
        }
        if (c->expired) {
            msg = append(msg, xasprintf("; the root's listener %s expired after %lld ms unused "
                                        "(NCCLSHIM_RENDEZVOUS_IDLE_MS): the ranks created the communicator later "
                                        "than that after ncclGetUniqueId; raise NCCLSHIM_RENDEZVOUS_IDLE_MS",
                                        c->expired->listen, c->expired->idle_ms));
        } else if (nrej) {
            char *first = str_cut(w->message + strlen("rendezvous ") + strlen(c->root) + 2, 200);
            msg = append(msg, xasprintf("; the root (%s pid %lld) dropped %zu connection%s, first: %s", w->host,
                                        w->pid, nrej, nrej == 1 ? "" : "s", first));
            free(first);
        } else {
            msg = append(msg, xasprintf("; the rank got no answer from the root: keep the process that called "
                                        "ncclGetUniqueId alive until every rank has created the communicator, and "
                                        "check that this host can reach %s", c->root ? c->root : "the root"));
        }
        add(c, msg);
    }
    strlist_free(&reasons);
}

/* action socket, but NCCL did not (or will not) use Socket. */
static void rule_redirect_ineffective(inspect_state *st, communicator *c)
{
    (void)st;
    strlist notes = {0};
    list_buf other = {0};
    const char *other_net = NULL;
    for (size_t i = 0; i < c->nranks_rec; i++) {
        rank_rec *r = c->ranks[i];
        if (!r->action || strcmp(r->action, "socket") != 0)
            continue;
        if (r->net_note) {
            size_t before = notes.n;
            strlist_add_unique(&notes, r->net_note);
            if (notes.n == before)
                continue;
            list_buf ranks = {0};
            for (size_t j = i; j < c->nranks_rec; j++) {
                rank_rec *q = c->ranks[j];
                if (q->net_note && strcmp(q->net_note, r->net_note) == 0 && q->action &&
                    strcmp(q->action, "socket") == 0)
                    lb_add_ll(&ranks, q->rank);
            }
            add(c, xasprintf("redirect to Socket ineffective on rank%s %s: %s", ranks.items > 1 ? "s" : "",
                             ranks.s, r->net_note));
        } else if (r->network && strcasecmp(r->network, "Socket") != 0) {
            lb_add_ll(&other, r->rank);
            if (!other_net)
                other_net = r->network;
        }
    }
    if (other.items)
        add(c, xasprintf("redirect to Socket ineffective on rank%s %s: the shim set netName Socket but NCCL's log "
                         "says it used %s: NCCL_NET or a network plugin overrides the config's netName; unset "
                         "NCCL_NET in those processes and check NCCL's NET/Plugin lines",
                         other.items > 1 ? "s" : "", other.s, other_net));
    strlist_free(&notes);
}

/* action fail: NCCLSHIM_STRICT=1 with a malformed policy somewhere. */
static void rule_failed_by_policy(inspect_state *st, communicator *c)
{
    list_buf ranks = {0};
    const rank_rec *first = NULL;
    for (size_t i = 0; i < c->nranks_rec; i++) {
        rank_rec *r = c->ranks[i];
        if (r->action && strcmp(r->action, "fail") == 0) {
            lb_add_ll(&ranks, r->rank);
            if (!first)
                first = r;
        }
    }
    if (!first)
        return;
    /* the malformed setting is in a bad-setting warning of one of the ranks' processes */
    const warning_rec *bad = NULL;
    for (size_t j = 0; j < c->nranks_rec; j++)
        if (c->ranks[j]->proc)
            c->ranks[j]->proc->mark = 1;
    for (size_t i = 0; i < st->warnings.n && !bad; i++) {
        const warning_rec *w = &st->warnings.v[i];
        if (strcmp(w->what, "bad-setting") != 0)
            continue;
        char *key = xasprintf("%s:%lld", w->host, w->pid);
        process *p;
        HASH_FIND_STR(st->procs, key, p);
        free(key);
        if (p && p->mark)
            bad = w;
    }
    for (size_t j = 0; j < c->nranks_rec; j++)
        if (c->ranks[j]->proc)
            c->ranks[j]->proc->mark = 0;
    char *reason = str_cut(first->action_reason ? first->action_reason : "no reason recorded", 300);
    char *setting = bad ? xasprintf("%s pid %lld: %s", bad->host, bad->pid, bad->message)
                        : xstrdup("see the bad-setting warning in the records of the rank it names");
    char *setting_cut = str_cut(setting, 300);
    add(c, xasprintf("creation failed by policy on rank%s %s: %s; the malformed setting: %s; fix it, or unset "
                     "NCCLSHIM_STRICT to fail open (passthrough)", ranks.items > 1 ? "s" : "", ranks.s, reason,
                     setting_cut));
    free(reason);
    free(setting);
    free(setting_cut);
}

/*
 * frugal told NCCL one channel (minCTAs = maxCTAs = 1); NCCL's log says how
 * many it took.  More means something outside the config won: the
 * environment's NCCL_MIN_NCHANNELS or NCCL_MIN_CTAS, which NCCL lets
 * override it, and the communicator takes more of the fabric than asked.
 */
static void rule_frugal_ineffective(inspect_state *st, communicator *c)
{
    (void)st;
    list_buf b = {0};
    int most = 0;
    for (size_t i = 0; i < c->nranks_rec; i++) {
        const rank_rec *r = c->ranks[i];
        if (!r->action || strcmp(r->action, "frugal") != 0 || r->coll_channels <= 1)
            continue;
        lb_add_ll(&b, r->rank);
        if (r->coll_channels > most)
            most = r->coll_channels;
    }
    if (b.items)
        add(c, xasprintf("frugal ineffective on rank%s %s: NCCL took up to %d channels where the shim told it 1 "
                         "(NCCL log); NCCL_MIN_NCHANNELS or NCCL_MIN_CTAS in the environment win over the config: "
                         "unset them for the job, or use socket for this communicator",
                         b.items > 1 ? "s" : "", b.s, most));
}

/* NCCL's GIN type (ncclGinType_t) by name. */
static const char *gin_name(long long t)
{
    return t == 2 ? "proxy" : t == 3 ? "GDAKI" : t == 4 ? "GPI" : "a GIN backend";
}

/*
 * NCCL sets up GPU-initiated networking (GIN) for a communicator whatever its
 * config's netName: a device communicator made on a socket or frugal one
 * (ncclDevCommCreate) moves the device API's data over the fabric, which the
 * redirect does not cover.  Flagged where NCCL said GIN is there (its
 * properties, 2.29+) and the application made one.
 */
static void rule_redirect_bypassed(inspect_state *st, communicator *c)
{
    (void)st;
    list_buf b = {0};
    long long type = 0;
    for (size_t i = 0; i < c->nranks_rec; i++) {
        const rank_rec *r = c->ranks[i];
        if (!r->action || (strcmp(r->action, "socket") != 0 && strcmp(r->action, "frugal") != 0) || !r->end ||
            r->end->devcomms <= 0)
            continue;
        long long t = r->gin_type > 0 ? r->gin_type : r->railed_gin_type;
        if (t <= 0)
            continue;
        lb_add_ll(&b, r->rank);
        type = t;
    }
    if (b.items)
        add(c, xasprintf("redirect bypassed by the device API on rank%s %s: the application made NCCL device "
                         "communicators on it, and NCCL has GPU-initiated networking (%s) for it, which moves their "
                         "data over the fabric whatever the redirect told NCCL; pass this communicator through "
                         "(NCCLSHIM_WEIGHT_UPDATE=passthrough or a rule), or set NCCL_GIN_ENABLE=0 where the job "
                         "needs no GIN", b.items > 1 ? "s" : "", b.s, gin_name(type)));
}

/*
 * NCCL names a network for every communicator, even one whose ranks all talk
 * over NVLink or shared memory; Socket only hurts when data crosses it: the
 * ranks span hosts, or NCCL logged channels "via NET/Socket".
 */
static void rule_training_on_socket(inspect_state *st, communicator *c)
{
    (void)st;
    list_buf b = {0};
    for (size_t i = 0; i < c->nranks_rec; i++) {
        rank_rec *r = c->ranks[i];
        if (r->purpose && strcmp(r->purpose, "training") == 0 && r->network &&
            strcmp(r->network, "Socket") == 0 && (c->hosts.n > 1 || r->net_channels > 0)) {
            char item[24];
            snprintf(item, sizeof item, "%lld", r->rank);
            lb_add(&b, item);
        }
    }
    if (b.items)
        add(c, xasprintf("training communicator on Socket (NCCL log, rank%s %s)",
                         b.items > 1 ? "s" : "", b.s));
}

/* The communicator's ranks chose Socket by the shim's policy (action socket,
 * or the shim set netName Socket): not a fallback. */
static int socket_by_policy(const rank_rec *r)
{
    return (r->action && strcmp(r->action, "socket") == 0) || (r->net && strcasecmp(r->net, "Socket") == 0);
}

static int is_fabric(const char *net)
{
    return net && strcasecmp(net, "Socket") != 0 && strcmp(net, "ipc") != 0 && strcmp(net, "-") != 0 &&
           strcmp(net, "mixed") != 0;
}

/*
 * NCCL gives each communicator the first NET plugin that initialises for it;
 * a plugin out of resources (EFA's queue pairs taken by a communicator made
 * earlier) refuses, and NCCL silently moves on to Socket. Evidence that the
 * fabric was there: another communicator on the same host used it, or NCCL
 * logged "Failed to initialize NET plugin X" while initialising this one.
 * Like the training rule, only when data crosses the network (several
 * hosts, or channels "via NET/Socket").
 */
static void rule_fell_back_to_socket(inspect_state *st, communicator *c)
{
    list_buf ranks = {0};
    const rank_rec *first = NULL, *failed = NULL;
    for (size_t i = 0; i < c->nranks_rec; i++) {
        const rank_rec *r = c->ranks[i];
        /* a weight-update communicator on Socket is where the policy wants it */
        if (!r->network || strcasecmp(r->network, "Socket") != 0 || socket_by_policy(r) ||
            (r->purpose && strcmp(r->purpose, "weight-update") == 0) ||
            !(c->hosts.n > 1 || r->net_channels > 0))
            continue;
        lb_add_ll(&ranks, r->rank);
        if (!first)
            first = r;
        if (!failed && r->net_failed)
            failed = r;
    }
    if (!ranks.items)
        return;
    /* other communicators with a rank on a host of ours, on a fabric */
    list_buf others = {0};
    const char *fabric = failed ? failed->net_failed : NULL;
    for (size_t k = 0; k < st->ncomms; k++) {
        communicator *d = st->sorted[k];
        if (d == c)
            continue;
        list_buf dr = {0};
        const char *dnet = NULL;
        for (size_t i = 0; i < d->nranks_rec; i++) {
            const rank_rec *q = d->ranks[i];
            if (!is_fabric(q->network))
                continue;
            int same_host = 0;
            for (size_t j = 0; j < c->nranks_rec && !same_host; j++) {
                char *a = short_host(q->host), *b = short_host(c->ranks[j]->host);
                same_host = strcmp(a, b) == 0;
                free(a);
                free(b);
            }
            if (!same_host)
                continue;
            lb_add_ll(&dr, q->rank);
            if (!dnet)
                dnet = q->network;
        }
        if (!dr.items)
            continue;
        if (!fabric)
            fabric = dnet;
        char item[200];
        snprintf(item, sizeof item, "%s (rank%s %s on %s)", d->short_group, dr.items > 1 ? "s" : "", dr.s, dnet);
        lb_add(&others, item);
    }
    if (!others.items && !failed)
        return;
    char *where = xasprintf("rank%s %s (%s pid %lld%s)", ranks.items > 1 ? "s" : "", ranks.s, first->host,
                            first->pid, ranks.items > 1 ? ", ..." : "");
    char *why = failed ? xasprintf("NCCL logged 'Failed to initialize NET plugin %s' while creating it (rank %lld, "
                                   "%s pid %lld)", failed->net_failed, failed->rank, failed->host, failed->pid)
                       : xasprintf("NCCL did not even try %s for it (in that process the plugin had refused an "
                                   "earlier communicator, or was not loaded)", fabric);
    char *msg;
    if (others.items)
        msg = xasprintf("fell back to Socket on %s: the fabric (%s) was available to other communicators on its "
                        "host, %s, and they likely took its resources (e.g. the NIC's queue pairs); %s",
                        where, fabric, others.s, why);
    else
        msg = xasprintf("fell back to Socket on %s: %s: the plugin refused it (e.g. no queue pairs left)", where, why);
    free(where);
    add(c, msg);
    free(why);
}

static void rule_not_ended(inspect_state *st, communicator *c)
{
    (void)st;
    for (size_t i = 0; i < c->nranks_rec; i++) {
        rank_rec *r = c->ranks[i];
        /* a failed init has nothing to end; the exit record means the shim
         * wrote ends for every live comm, so a missing one was destroyed
         * in a file we were not given */
        if (r->from_log || r->end || (r->result != 0 && r->result != 7) || (r->proc && r->proc->has_exit))
            continue;
        add(c, xasprintf("rank %lld (pid %lld) has no end record: process may have crashed", r->rank,
                         r->pid));
    }
}

static int ll_cmp(const void *a, const void *b)
{
    long long x = *(const long long *)a, y = *(const long long *)b;
    return (x > y) - (x < y);
}

static const char *nccl_result_name(long long r)
{
    static const char *const names[] = {"ncclSuccess", "ncclUnhandledCudaError", "ncclSystemError",
                                        "ncclInternalError", "ncclInvalidArgument", "ncclInvalidUsage",
                                        "ncclRemoteError", "ncclInProgress"};
    return r >= 0 && r < (long long)(sizeof names / sizeof names[0]) ? names[r] : "?";
}

static int is_what(const warning_rec *w, const char *what)
{
    return strcmp(w->what, what) == 0;
}

/* An ipc operation that failed because a peer was gone: the 'ipc peer lost' problem says it. */
static int lost_peer_failure(const communicator *c, const warning_rec *w)
{
    return c->ipc_lost && w->result == 6;
}

/* Who left an ipc communicator while it ran, and who saw it (rule_ipc_peer_lost). */
struct peer_loss {
    list_buf left, died, exited, other; /* ranks that did not end normally, and how they went */
    list_buf saw;                       /* ranks that warned ipc-peer-lost */
    list_buf root_saw;                  /* ranks the root saw leave (ipc_peer_left) */
    list_buf early;                     /* ranks that ended normally before a peer was lost */
    const rank_rec *first_left;
    const peer_left_rec *root_record;   /* the root's first ipc_peer_left */
};

static void gather_peer_loss(const communicator *c, struct peer_loss *p)
{
    double lost_ts = 0;
    for (size_t i = 0; i < c->ipc_warns.n; i++) {
        const warning_rec *w = c->ipc_warns.v[i];
        if (is_what(w, "ipc-peer-lost") && !w->after_end) {
            lb_add_ll(&p->saw, w->rank->rank);
            if (!lost_ts || (w->ts > 0 && w->ts < lost_ts))
                lost_ts = w->ts;
        }
    }
    for (size_t i = 0; i < c->nranks_rec; i++) {
        rank_rec *r = c->ranks[i];
        if (i > 0 && c->ranks[i - 1]->rank == r->rank)
            continue;
        if ((r->result != 0 && r->result != 7) || inspect_ended_normally(r))
            continue;
        lb_add_ll(&p->left, r->rank);
        if (!p->first_left)
            p->first_left = r;
        if (!r->end)
            lb_add_ll(&p->died, r->rank);
        else if (r->end->how && strcmp(r->end->how, "exit") == 0)
            lb_add_ll(&p->exited, r->rank);
        else
            lb_add_ll(&p->other, r->rank);
    }
    for (size_t i = 0; i < c->peer_left.n; i++) {
        if (c->peer_left.v[i]->at_destroy)
            continue;
        lb_add_ll(&p->root_saw, c->peer_left.v[i]->rank);
        if (!p->root_record)
            p->root_record = c->peer_left.v[i];
    }
    /* everyone ended normally, but someone lost a peer before its own end:
     * the ranks that had ended before that went first */
    if (!p->left.items && lost_ts > 0)
        for (size_t i = 0; i < c->nranks_rec; i++) {
            rank_rec *r = c->ranks[i];
            if (inspect_ended_normally(r) && r->end->ts > 0 && r->end->ts <= lost_ts)
                lb_add_ll(&p->early, r->rank);
        }
}

/* The message's first part: which ranks left, and how. */
static char *peer_loss_who(const struct peer_loss *p)
{
    if (p->left.items) {
        /* why each rank left: no end record (died), exit without destroy, or something else */
        static const char *const cause[3] = {"no end record, so %s died or %s killed (the OOM killer, a signal, "
                                             "the job scheduler)",
                                             "%s exited without destroying it (comm_end how exit)",
                                             "ended it some other way"};
        const list_buf *cat[3] = {&p->died, &p->exited, &p->other};
        int ncat = (p->died.items > 0) + (p->exited.items > 0) + (p->other.items > 0), printed = 0;
        char *msg = xasprintf("ipc peer lost: rank%s %s (%s%s pid %lld) left while the communicator ran",
                              p->left.items > 1 ? "s" : "", p->left.s, p->left.items > 1 ? "first: " : "",
                              p->first_left->host, p->first_left->pid);
        for (int k = 0; k < 3; k++) {
            if (!cat[k]->items)
                continue;
            int many = cat[k]->items > 1;
            char *why = k == 0 ? xasprintf(cause[0], many ? "their processes" : "its process", many ? "were" : "was")
                      : k == 1 ? xasprintf(cause[1], many ? "their processes" : "its process")
                               : xstrdup(cause[2]);
            const char *sep = printed++ ? ";" : ":";
            msg = append(msg, ncat > 1 ? xasprintf("%s rank%s %s: %s", sep, many ? "s" : "", cat[k]->s, why)
                                       : xasprintf("%s %s", sep, why));
            free(why);
        }
        return msg;
    }
    if (p->root_saw.items)
        return xasprintf("ipc peer lost: rank%s %s left while the communicator ran", p->root_saw.items > 1 ? "s" : "",
                         p->root_saw.s);
    if (p->early.items)
        return xasprintf("ipc peer lost: rank%s %s destroyed the communicator while other ranks still used it",
                         p->early.items > 1 ? "s" : "", p->early.s);
    return xstrdup("ipc peer lost: a rank left while the communicator ran");
}

/* Who noticed, and what it cost: the operations that failed after it. */
static char *peer_loss_seen(const communicator *c, const struct peer_loss *p, char *msg)
{
    if (p->root_saw.items)
        msg = append(msg, xasprintf("; the root (%s pid %lld) saw rank%s %s leave (ipc_peer_left)",
                                    p->root_record->host, p->root_record->pid, p->root_saw.items > 1 ? "s" : "",
                                    p->root_saw.s));
    if (p->saw.items)
        msg = append(msg, xasprintf("; rank%s %s lost %s peer (ipc-peer-lost)", p->saw.items > 1 ? "s" : "",
                                    p->saw.s, p->saw.items > 1 ? "their" : "its"));
    size_t nfailed = 0;
    const warning_rec *ff = NULL;
    for (size_t i = 0; i < c->ipc_warns.n; i++) {
        const warning_rec *w = c->ipc_warns.v[i];
        if (is_what(w, "ipc") && lost_peer_failure(c, w) && !nfailed++)
            ff = w;
    }
    if (nfailed)
        msg = append(msg, xasprintf(", %zu operation%s failed with ncclRemoteError after that (first: %s on rank %lld)",
                                    nfailed, nfailed == 1 ? "" : "s", ff->fn ? ff->fn : "?", ff->rank->rank));
    return append(msg, xstrdup(": the transfer in flight, and whatever the communicator moved after that, is not "
                               "valid"));
}

/* What to do: the causes' fixes, then going on without the lost rank. */
static char *peer_loss_fixes(const struct peer_loss *p, char *msg)
{
    int fixes = 0;
    if (p->died.items && ++fixes)
        msg = append(msg, xasprintf("; find why %s ended (%s, the kernel log, the scheduler)",
                                    p->died.items > 1 ? "those processes" : "that process",
                                    p->died.items > 1 ? "their logs" : "its log"));
    if (!p->left.items && p->root_saw.items && ++fixes)
        msg = append(msg, xasprintf("; find why %s ended (%s, the kernel log, the scheduler)",
                                    p->root_saw.items > 1 ? "those ranks' processes" : "that rank's process",
                                    p->root_saw.items > 1 ? "their logs" : "its log"));
    if (p->exited.items && ++fixes)
        msg = append(msg, xstrdup("; destroy the communicator on every rank before its process exits"));
    if (p->early.items && ++fixes)
        msg = append(msg, xstrdup("; destroy an ipc communicator only after every rank's last operation on it"));
    return append(msg, xasprintf("; %s destroy or abort the communicator on every surviving rank (their calls "
                                 "returned, with ncclRemoteError), start a process in the lost rank's place, and "
                                 "create a new communicator with a new unique ID to redo the transfer",
                                 fixes ? "then" : "to go on,"));
}

/*
 * A rank of an ipc communicator left while it ran (join.c: join_ipc decides
 * that); say which rank, how it ended, who noticed, and what it cost.
 */
static void rule_ipc_peer_lost(inspect_state *st, communicator *c)
{
    (void)st;
    if (!c->ipc_lost)
        return;
    struct peer_loss p = {0};
    gather_peer_loss(c, &p);
    char *msg = peer_loss_who(&p);
    msg = peer_loss_seen(c, &p, msg);
    msg = peer_loss_fixes(&p, msg);
    add(c, msg);
}

/* The fix for a failed ipc operation, when its reason does not say one. */
static const char *ipc_failure_fix(const warning_rec *w)
{
    const char *why = w->why ? w->why : w->message;
    if (strstr(why, "NCCLSHIM_WEIGHT_UPDATE=passthrough"))
        return "";
    if (strstr(why, "cuStreamWaitValue"))
        return "; a stream wait for a peer timed out: the peers did not issue the matching operation (every rank "
               "must issue the same collectives in the same order, and each Send needs its Recv), or a peer stalled";
    if (strstr(why, "CUresult"))
        return "; a CUDA error: check the GPU and its driver (nvidia-smi, Xid lines in the kernel log); what the "
               "operation moved is not valid";
    if (strstr(why, "did not arrive within"))
        return "; a rank stopped calling NCCL on this communicator, or died: every rank must issue the same "
               "operations in the same order, and destroy it";
    if (w->result == 6)
        return "; a rank of this communicator is gone: look for ipc-peer-lost warnings and the ranks' end records";
    if (w->result == 4)
        return "; the application passed an invalid argument: a bug in the caller";
    return "; the operation did not run and its data is not valid: if the application needs it, pass this "
           "communicator through (NCCLSHIM_WEIGHT_UPDATE=passthrough, or an NCCLSHIM_RULES rule)";
}

/* 'ipc' warnings: one problem per distinct function, result and reason (a
 * loop that keeps failing writes one warning per call: one pass, keyed). */
typedef struct ipc_failure {
    char *key;
    const warning_rec *first;
    size_t times;
    list_buf ranks;
    UT_hash_handle hh;
} ipc_failure;

static void rule_ipc_failed(inspect_state *st, communicator *c)
{
    (void)st;
    ipc_failure *seen = NULL, **order = NULL, *f, *ftmp;
    size_t n = 0;
    for (size_t i = 0; i < c->ipc_warns.n; i++) {
        const warning_rec *w = c->ipc_warns.v[i];
        if (!is_what(w, "ipc") || lost_peer_failure(c, w))
            continue;
        char *key = xasprintf("%s\x1f%lld\x1f%s", w->fn ? w->fn : "", w->result, w->why ? w->why : w->message);
        HASH_FIND_STR(seen, key, f);
        if (f) {
            free(key);
        } else {
            f = xmalloc(sizeof *f);
            memset(f, 0, sizeof *f);
            f->key = key;
            f->first = w;
            HASH_ADD_KEYPTR(hh, seen, f->key, strlen(f->key), f);
            order = xrealloc(order, (n + 1) * sizeof *order);
            order[n++] = f;
        }
        f->times++;
        lb_add_ll(&f->ranks, w->rank->rank);
    }
    for (size_t i = 0; i < n; i++) {
        f = order[i];
        const warning_rec *w = f->first;
        char *what = w->fn ? (w->result >= 0 ? xasprintf("%s returned %lld (%s)", w->fn, w->result,
                                                         nccl_result_name(w->result))
                                             : xstrdup(w->fn))
                           : strncmp(w->message, "destroying", 10) == 0 ? xstrdup("destroying it")
                                                                        : xstrdup("an operation");
        char *reason = str_cut(w->why ? w->why : w->message, 400);
        char *t = f->times > 1 ? xasprintf(", %zu times", f->times) : xstrdup("");
        add(c, xasprintf("ipc operation failed: %s on rank%s %s (%s%s pid %lld)%s: %s%s", what,
                         f->ranks.items > 1 ? "s" : "", f->ranks.s, f->ranks.items > 1 ? "first: " : "", w->host,
                         w->pid, t, reason, ipc_failure_fix(w)));
        free(what);
        free(reason);
        free(t);
    }
    HASH_ITER(hh, seen, f, ftmp) {
        HASH_DEL(seen, f);
        free(f->key);
        free(f);
    }
    free(order);
}

/* 'ipc-comm-call' warnings: the application called what the ipc transport
 * does not have (one warning per function and process); one problem. */
static void rule_ipc_comm_call(inspect_state *st, communicator *c)
{
    (void)st;
    list_buf fns = {0}, ranks = {0};
    strlist seen = {0};
    const warning_rec *first = NULL;
    for (size_t i = 0; i < c->ipc_warns.n; i++) {
        const warning_rec *w = c->ipc_warns.v[i];
        if (!is_what(w, "ipc-comm-call"))
            continue;
        if (!first)
            first = w;
        size_t before = seen.n;
        strlist_add_unique(&seen, w->fn ? w->fn : "?");
        if (seen.n != before)
            lb_add(&fns, seen.v[seen.n - 1]);
    }
    if (!first)
        return;
    /* ranks in rank order (ipc_warns is in input order) */
    long long *rv = xmalloc(c->ipc_warns.n * sizeof *rv);
    size_t nr = 0;
    for (size_t i = 0; i < c->ipc_warns.n; i++)
        if (is_what(c->ipc_warns.v[i], "ipc-comm-call"))
            rv[nr++] = c->ipc_warns.v[i]->rank->rank;
    qsort(rv, nr, sizeof *rv, ll_cmp);
    for (size_t i = 0; i < nr; i++)
        lb_add_ll(&ranks, rv[i]);
    free(rv);
    char *count = fns.full ? xasprintf(" (%zu functions)", fns.items) : xstrdup("");
    add(c, xasprintf("unsupported operation%s on an ipc communicator: %s%s on rank%s %s (%s%s pid %lld) returned "
                     "ncclInvalidUsage: the shim's CUDA IPC transport does Broadcast, Bcast, AllGather, Send, Recv and "
                     "all-reduces up to its staging size only; if the application needs %s on this communicator, pass "
                     "it through: NCCLSHIM_WEIGHT_UPDATE=passthrough, or an NCCLSHIM_RULES rule with action "
                     "passthrough for it", fns.items > 1 ? "s" : "", fns.s, count, ranks.items > 1 ? "s" : "", ranks.s,
                     ranks.items > 1 ? "first: " : "", first->host, first->pid, fns.items > 1 ? "them" : "it"));
    free(count);
    strlist_free(&seen);
}

/* NCCL's WARN lines, or (attn) 2.32's ATTN lines, of every process with a rank of `c`. */
static void nccl_lines(inspect_state *st, communicator *c, int attn)
{
    const char *level = attn ? "ATTN" : "WARN";
    strlist done = {0};
    for (size_t i = 0; i < c->nranks_rec; i++) {
        rank_rec *r = c->ranks[i];
        char *h = short_host(r->host);
        char *key = xasprintf("%s:%lld", h, r->pid);
        free(h);
        size_t before = done.n;
        strlist_add_unique(&done, key);
        nccl_proc *np = NULL;
        if (done.n != before)
            HASH_FIND_STR(st->nccl_procs, key, np);
        free(key);
        if (!np)
            continue;
        char **kept = attn ? np->attns : np->warns;
        int n = attn ? np->nattns : np->nwarns;
        for (int w = 0; w < n && w < INSPECT_MAX_NCCL_WARNS; w++)
            add(c, xasprintf("NCCL %s (%s pid %lld): %s", level, r->host, r->pid, kept[w]));
        if (n > INSPECT_MAX_NCCL_WARNS)
            add(c, xasprintf("NCCL %s (%s pid %lld): ... %d more", level, r->host, r->pid,
                             n - INSPECT_MAX_NCCL_WARNS));
    }
    strlist_free(&done);
}

static void rule_nccl_warn(inspect_state *st, communicator *c)
{
    nccl_lines(st, c, 0);
}

/* NCCL 2.32's ATTN: a configuration fallback or a plugin that failed to
 * initialize, which is what a silent fallback looks like (a rule of its own,
 * so that WARN lines never crowd them out). */
static void rule_nccl_attn(inspect_state *st, communicator *c)
{
    nccl_lines(st, c, 1);
}

/*
 * A weight-update communicator that NCCL made without the redirect its
 * purpose asks for, for a reason that is not the policy's (the shim records
 * why: no rendezvous could decide it, a split of a communicator that was not
 * redirected, ...): the fabric is unprotected and nothing else says so.
 */
static void rule_unprotected(inspect_state *st, communicator *c)
{
    (void)st;
    list_buf b = {0};
    const rank_rec *first = NULL;
    for (size_t i = 0; i < c->nranks_rec; i++) {
        const rank_rec *r = c->ranks[i];
        if (!r->unprotected)
            continue;
        lb_add_ll(&b, r->rank);
        if (!first)
            first = r;
    }
    if (!first)
        return;
    char *why = str_cut(first->unprotected, 400);
    add(c, xasprintf("weight-update communicator not redirected on rank%s %s: %s", b.items > 1 ? "s" : "", b.s, why));
    free(why);
}

/*
 * A group that looks like a weight-update bridge but passes through for want
 * of evidence (issue 43): the root's decision record says so, or, where no
 * rendezvous decided it, an engine worker's comm record.  Both carry the
 * setting that would protect it, printed here as the shim wrote it.
 */
static void rule_unrecognized(inspect_state *st, communicator *c)
{
    (void)st;
    list_buf b = {0};
    const char *why = NULL;
    for (size_t i = 0; i < c->nranks_rec; i++) {
        const rank_rec *r = c->ranks[i];
        const char *u = r->unrecognized ? r->unrecognized : r->decision ? r->decision->unrecognized : NULL;
        if (!u)
            continue;
        lb_add_ll(&b, r->rank);
        if (!why)
            why = u;
    }
    if (!why)
        return;
    char *cut = str_cut(why, 800); /* whole: the setting comes last */
    add(c, xasprintf("weight-update bridge not recognized on rank%s %s: %s", b.items > 1 ? "s" : "", b.s, cut));
    free(cut);
}

static const struct {
    const char *name;
    rule_fn fn;
} rules[] = {
    {"rank missing", rule_rank_missing},
    {"rank out of range", rule_rank_out_of_range},
    {"duplicate rank", rule_duplicate_rank},
    {"init failed", rule_init_failed},
    {"creation failed by policy", rule_failed_by_policy},
    {"nranks disagree", rule_nranks_disagree},
    {"purposes disagree", rule_purposes_disagree},
    {"actions disagree", rule_actions_disagree},
    {"decision fell back", rule_decision_fell_back},
    {"redirect ineffective", rule_redirect_ineffective},
    {"frugal ineffective", rule_frugal_ineffective},
    {"redirect bypassed by the device API", rule_redirect_bypassed},
    {"weight-update communicator not redirected", rule_unprotected},
    {"weight-update bridge not recognized", rule_unrecognized},
    {"dropped communicator carried data", rule_dropped_carried_data},
    {"training communicator on Socket", rule_training_on_socket},
    {"fell back to Socket", rule_fell_back_to_socket},
    {"ipc peer lost", rule_ipc_peer_lost},
    {"ipc operation failed", rule_ipc_failed},
    {"unsupported operation on an ipc communicator", rule_ipc_comm_call},
    {"not ended", rule_not_ended},
    {"NCCL warning", rule_nccl_warn},
    {"NCCL attention", rule_nccl_attn},
};

/*
 * Problems of the input as a whole, for --check (what users put in CI): a
 * malformed setting in any process (the shim failed open: its action may be
 * gone, as NCCLSHIM_RULES='...:explode' drops a one-host refit from ipc to
 * passthrough), no records at all, a records file that is not records.
 */
static void check_input(inspect_state *st)
{
    strlist seen = {0};
    for (size_t i = 0; i < st->warnings.n; i++) {
        const warning_rec *w = &st->warnings.v[i];
        size_t before = seen.n;
        if (strcmp(w->what, "bad-setting") != 0 || (strlist_add_unique(&seen, w->message), seen.n == before))
            continue;
        /* one problem per message, naming every process that has it (a job sets it everywhere) */
        list_buf procs = {0};
        size_t n = 0;
        for (size_t j = i; j < st->warnings.n; j++) {
            const warning_rec *o = &st->warnings.v[j];
            if (strcmp(o->what, "bad-setting") == 0 && strcmp(o->message, w->message) == 0 && n++ < 4) {
                char who[160];
                snprintf(who, sizeof(who), "%.120s pid %lld", o->host, o->pid);
                lb_add(&procs, who);
            }
        }
        char *m = str_cut(w->message, 400);
        /* strict mode is about the policy only: a bad NCCLSHIM_ROLE or mode is ignored either way */
        int policy = strncmp(m, "NCCLSHIM_WEIGHT_UPDATE", 22) == 0 || strncmp(m, "NCCLSHIM_RULES", 14) == 0 ||
                     strncmp(m, "NCCLSHIM_STRICT", 15) == 0;
        strlist_add(&st->problems, xasprintf("malformed setting in %zu process%s (%s%s): %s; the shim failed open with "
                                             "the rest of its settings: fix it%s", n, n == 1 ? "" : "es", procs.s,
                                             n > 4 ? ", ..." : "", m,
                                             policy ? " (NCCLSHIM_STRICT=1 makes it fail the communicator instead)" : ""));
        free(m);
    }
    strlist_free(&seen);
    for (process *p = st->procs; p; p = p->hh.next)
        if (p->other_who)
            strlist_add(&st->problems, xasprintf("two processes recorded as host %s pid %lld (host identity %s; and "
                                                 "%s): containers of one host name in different PID namespaces; "
                                                 "their records are joined as one process's here: read each "
                                                 "container's record files apart", p->host, p->pid, p->who,
                                                 p->other_who));
    if (st->nrecords == 0 && st->nccl_lines == 0)
        strlist_add(&st->problems, xstrdup("no records to check: the inputs hold no ncclshim record and no NCCL log "
                                           "line (an empty records directory?): set NCCLSHIM_LOG_DIR for every "
                                           "process of the job, and check that LD_PRELOAD reaches them"));
    for (size_t i = 0; i < st->errors.n; i++) {
        const input_error *e = &st->errors.v[i];
        /* a file's bad lines: one problem, its summary (their reasons went to stderr once) */
        if ((!e->fatal && e->line > 0) || e->cut_only)
            continue; /* cut_only: a process killed mid-write, the records before it are whole */
        if (e->bad_lines)
            strlist_add(&st->problems, xasprintf("input %s: %ld bad line%s skipped, the first at line %ld", e->file,
                                                 e->bad_lines, e->bad_lines == 1 ? "" : "s", e->first_bad));
        else if (e->line > 0)
            strlist_add(&st->problems, xasprintf("input %s:%ld: %s", e->file, e->line, e->reason));
        else
            strlist_add(&st->problems, xasprintf("input %s: %s", e->file, e->reason));
    }
}

/* Returns the number of communicators with at least one problem, plus one
 * if the input as a whole has any (st->problems). */
size_t inspect_check(inspect_state *st)
{
    size_t bad = 0;
    check_input(st);
    bad += st->problems.n > 0;
    for (size_t i = 0; i < st->ncomms; i++) {
        communicator *c = st->sorted[i];
        for (size_t k = 0; k < sizeof rules / sizeof rules[0]; k++) {
            rule_added = rule_suppressed = 0;
            rules[k].fn(st, c);
            if (rule_suppressed)
                strlist_add(&c->problems, xasprintf("... and %zu more '%s' problems", rule_suppressed,
                                                    rules[k].name));
        }
        bad += c->problems.n > 0;
    }
    return bad;
}
