/*
 * decide(): a communicator's purpose by consensus of its ranks' facts, then its
 * action from the root's policy.  docs/policy.md ("Purpose by consensus",
 * "Actions") states the rules this file implements, in the same order.
 */
#define _GNU_SOURCE
#include "decide.h"

#include "defaults.h"
#include "fabric.h"
#include "hosts.h"
#include "pattern.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- reasons: appended pieces, cut cleanly ("...", never inside a UTF-8 sequence) ---- */

struct sb {
    char *p;
    size_t cap, len;
    int full;
};

static void sb_init(struct sb *b, char *p, size_t cap)
{
    b->p = p;
    b->cap = cap;
    b->len = 0;
    b->full = 0;
    p[0] = '\0';
}

/* Where to cut s[0..n) so that no UTF-8 sequence is split. */
static size_t utf8_cut(const char *s, size_t n)
{
    while (n > 0 && ((unsigned char)s[n] & 0xC0) == 0x80)
        n--;
    return n;
}

static void sb_put(struct sb *b, const char *s, size_t n)
{
    if (b->full)
        return;
    if (b->len + n < b->cap) {
        memcpy(b->p + b->len, s, n);
        b->len += n;
        b->p[b->len] = '\0';
        return;
    }
    /* Does not fit: fill, then end with "..." where a character starts. */
    memcpy(b->p + b->len, s, b->cap - 1 - b->len);
    size_t at = utf8_cut(b->p, b->cap - 4);
    memcpy(b->p + at, "...", 4);
    b->len = at + 3;
    b->full = 1;
}

static void sb_add(struct sb *b, const char *s)
{
    sb_put(b, s, strlen(s));
}

static void sb_addf(struct sb *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void sb_addf(struct sb *b, const char *fmt, ...)
{
    char tmp[EVIDENCE_REASON_LEN];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(tmp, sizeof(tmp), fmt, ap);
    va_end(ap);
    if (n < 0)
        return;
    sb_put(b, tmp, (size_t)n < sizeof(tmp) ? (size_t)n : sizeof(tmp) - 1);
}

/* A fixed-size field (cap bytes, maybe unterminated), at most max bytes of it, cut with "...". */
static void sb_quote(struct sb *b, const char *s, size_t cap, size_t max)
{
    size_t n = strnlen(s, cap);
    if (n <= max) {
        sb_put(b, s, n);
        return;
    }
    sb_put(b, s, utf8_cut(s, max - 3));
    sb_add(b, "...");
}

/* ---- the ranks' facts ---- */

static enum role role_of(const struct rank_facts *f)
{
    return f->role == ROLE_TRAINING || f->role == ROLE_INFERENCE ? f->role : ROLE_UNKNOWN;
}

static int nframes_of(const struct rank_facts *f)
{
    return f->nframes < 0 ? 0 : f->nframes > EVIDENCE_MAX_FRAMES ? EVIDENCE_MAX_FRAMES : f->nframes;
}

/* The frame of rank f that matches a weight-update call-site pattern, or -1. */
static int callsite_frame(const char *sites, const struct rank_facts *f, char *pat, size_t patlen)
{
    for (int k = 0; k < nframes_of(f); k++)
        if (memchr(f->text->frames[k], '\0', sizeof(f->text->frames[k])) &&
            pattern_list_match(sites, f->text->frames[k], pat, patlen) >= 0)
            return k;
    return -1;
}

/* How strongly a rank is an inference engine's worker (docs/policy.md, "Engine evidence"). */
enum { ENG_NONE = 0, ENG_WEAK = 1, ENG_STRONG = 2 };

enum select { SEL_ROLE, SEL_NOT_TORCH, SEL_FLAG, SEL_STRICT, SEL_ENGINE, SEL_NOT_ENGINE, SEL_WEAK };
struct selector {
    enum select what;
    int value;
    const unsigned char *flags; /* SEL_FLAG */
};

static int selected(const struct selector *s, const struct rank_facts *facts, int i)
{
    switch (s->what) {
    case SEL_ROLE: return (int)role_of(&facts[i]) == s->value;
    case SEL_NOT_TORCH: return facts[i].api != API_TORCH;
    case SEL_FLAG: return s->flags[i] != 0;
    case SEL_STRICT: return facts[i].strict_error != 0;
    case SEL_ENGINE: return s->flags[i] == ENG_STRONG;
    case SEL_NOT_ENGINE: return s->flags[i] != ENG_STRONG;
    case SEL_WEAK: return s->flags[i] == ENG_WEAK;
    }
    return 0;
}

/*
 * "rank 3", "ranks 0-3,5" or "all 4 ranks"; a list longer than `max` bytes ends
 * with ",... (N ranks)".  `count` is how many ranks are selected.
 */
static void sb_ranks(struct sb *b, const struct selector *s, const struct rank_facts *facts, int nranks, int count,
                     size_t max)
{
    if (count <= 0) {
        sb_add(b, "no rank");
        return;
    }
    if (count == 1) {
        for (int i = 0; i < nranks; i++)
            if (selected(s, facts, i)) {
                sb_addf(b, "rank %d", i);
                return;
            }
    }
    if (count > 1 && count == nranks) {
        sb_addf(b, "all %d ranks", nranks);
        return;
    }
    char list[EVIDENCE_REASON_LEN];
    size_t len = 0;
    int cut = 0;
    if (max > sizeof(list) - 1)
        max = sizeof(list) - 1;
    list[0] = '\0';
    for (int i = 0; i < nranks && !cut; i++) {
        if (!selected(s, facts, i))
            continue;
        int j = i;
        while (j + 1 < nranks && selected(s, facts, j + 1))
            j++;
        char item[32];
        int n = j == i ? snprintf(item, sizeof(item), "%s%d", len ? "," : "", i)
                       : snprintf(item, sizeof(item), "%s%d-%d", len ? "," : "", i, j);
        if (len + (size_t)n + 4 > max) { /* room for ",..." */
            memcpy(list + len, ",...", 5);
            len += 4;
            cut = 1;
        } else {
            memcpy(list + len, item, (size_t)n + 1);
            len += (size_t)n;
        }
        i = j;
    }
    if (cut)
        sb_addf(b, "ranks %s (%d ranks)", list, count);
    else
        sb_addf(b, "ranks %s", list);
}

/* Distinct host_id values; a rank with an empty host_id counts as a host of its own. */
static int count_hosts(const struct rank_facts *facts, int nranks)
{
    int *host_of = malloc(sizeof(int) * (size_t)(nranks > 0 ? nranks : 1));
    int hosts = host_of ? hosts_group(facts, nranks, host_of) : -1;
    free(host_of);
    return hosts < 0 ? nranks : hosts; /* no memory: every rank a host of its own (never claims "one host") */
}

/* ---- engine evidence (docs/policy.md, "Engine evidence") ---- */

static const char *engine_titles(const struct policy_patterns *pp)
{
    return pp && pp->engine_titles ? pp->engine_titles : DEFAULT_ENGINE_TITLES;
}

static const char *engine_frames(const struct policy_patterns *pp)
{
    return pp && pp->engine_frames ? pp->engine_frames : DEFAULT_ENGINE_FRAMES;
}

/* Whether rank f's title matches the root's engine titles. */
static int engine_title(const struct policy_patterns *pp, const struct rank_facts *f, char *pat, size_t patlen)
{
    return f->text->title[0] && memchr(f->text->title, '\0', sizeof(f->text->title)) &&
           pattern_list_match(engine_titles(pp), f->text->title, pat, patlen) >= 0;
}

/*
 * Strong where the rank says so by its own patterns or the root's read its
 * title and frames so (a rank from before issue 43 says nothing: its title
 * and frames still count); weak where it has only an engine library loaded.
 */
static unsigned char engine_strength(const struct policy_patterns *pp, const struct rank_facts *f)
{
    if ((f->engine & ENGINE_STRONG) || engine_title(pp, f, NULL, 0) || callsite_frame(engine_frames(pp), f, NULL, 0) >= 0)
        return ENG_STRONG;
    return (f->engine & ENGINE_LIB) ? ENG_WEAK : ENG_NONE;
}

/* Every rank's strength; ranks of one job share a few titles and frame sets. */
static void engine_strengths(const struct policy_patterns *pp, const struct rank_facts *facts, int nranks,
                             unsigned char *eng, struct decision *out)
{
    for (int i = 0; i < nranks; i++) {
        const struct rank_facts *f = &facts[i], *prev = i ? &facts[i - 1] : NULL;
        if (prev && prev->engine == f->engine && facts_same_frames(prev, f) &&
            strncmp(prev->text->title, f->text->title, sizeof(f->text->title)) == 0)
            eng[i] = eng[i - 1];
        else
            eng[i] = engine_strength(pp, f);
        out->nengine += eng[i] == ENG_STRONG;
        out->nweak += eng[i] == ENG_WEAK;
    }
}

/* What makes rank f an engine worker, or not, in a few words. */
static void sb_engine_why(struct sb *b, const struct policy_patterns *pp, const struct rank_facts *f)
{
    char pat[256];
    int k;
    if (engine_title(pp, f, pat, sizeof(pat))) {
        sb_add(b, "title '");
        sb_quote(b, f->text->title, sizeof(f->text->title), 100);
        sb_add(b, "' matches engine title pattern '");
        sb_quote(b, pat, sizeof(pat), 60);
        sb_add(b, "'");
    } else if ((k = callsite_frame(engine_frames(pp), f, pat, sizeof(pat))) >= 0) {
        sb_add(b, "Python frame '");
        sb_quote(b, f->text->frames[k], sizeof(f->text->frames[k]), 160);
        sb_add(b, "' matches engine frame pattern '");
        sb_quote(b, pat, sizeof(pat), 60);
        sb_add(b, "'");
    } else if ((f->engine & ENGINE_FRAMES) && f->engine_frame >= 0 && f->engine_frame < nframes_of(f) &&
               memchr(f->text->frames[f->engine_frame], '\0', sizeof(f->text->frames[0]))) {
        sb_add(b, "Python frame '");
        sb_quote(b, f->text->frames[f->engine_frame], sizeof(f->text->frames[0]), 160);
        sb_add(b, "' matches its own NCCLSHIM_ENGINE_FRAMES");
    } else if (f->engine & ENGINE_STRONG) {
        sb_add(b, "the engine's own title by its own NCCLSHIM_ENGINE_TITLES");
    } else if (f->engine & ENGINE_LIB) {
        sb_add(b, "only an engine library loaded, no engine title or frame");
    } else {
        sb_add(b, "no engine title, frame or library");
    }
}

/* "ranks 1-2 carry the engine's own evidence (rank 1: ...), rank 0 does not (rank 0: ...)" */
static void sb_bridge(struct sb *b, const struct policy_patterns *pp, const struct rank_facts *facts, int nranks,
                      const unsigned char *eng, const struct decision *d)
{
    struct selector in = { SEL_ENGINE, 0, eng }, out = { SEL_NOT_ENGINE, 0, eng };
    int first_in = 0, first_out = 0;
    while (first_in < nranks && eng[first_in] != ENG_STRONG)
        first_in++;
    while (first_out < nranks && eng[first_out] == ENG_STRONG)
        first_out++;
    sb_ranks(b, &in, facts, nranks, d->nengine, 48);
    sb_addf(b, " carr%s the engine's own evidence (rank %d: ", d->nengine > 1 ? "y" : "ies", first_in);
    sb_engine_why(b, pp, &facts[first_in]);
    sb_add(b, "), ");
    sb_ranks(b, &out, facts, nranks, nranks - d->nengine, 48);
    sb_addf(b, " do%s not (rank %d: ", nranks - d->nengine > 1 ? "" : "es", first_out);
    sb_engine_why(b, pp, &facts[first_out]);
    sb_add(b, ")");
}

/* Ranks whose inference role rests on an engine library alone, with no
 * engine title or frame: trainers that import the engine. */
static int count_weak_role(const struct rank_facts *facts, int nranks, const unsigned char *eng)
{
    int n = 0;
    for (int i = 0; i < nranks; i++)
        n += role_of(&facts[i]) == ROLE_INFERENCE && (facts[i].engine & ENGINE_ROLE_BY_LIB) && eng[i] != ENG_STRONG;
    return n;
}

/* ---- purpose ---- */

static void role_evidence(struct sb *b, const struct rank_facts *facts, int nranks, enum role role, int count,
                          size_t max)
{
    struct selector s = { SEL_ROLE, role, NULL };
    int first = 0;
    while (first < nranks && role_of(&facts[first]) != role)
        first++;
    sb_ranks(b, &s, facts, nranks, count, 48);
    sb_addf(b, " %s (rank %d: ", role_name(role), first);
    if (facts[first].text->role_reason[0])
        sb_quote(b, facts[first].text->role_reason, sizeof(facts[first].text->role_reason), max);
    else
        sb_add(b, "no reason given");
    sb_add(b, ")");
}

/* The first rank of the selection, or 0. */
static int first_selected(const struct selector *s, const struct rank_facts *facts, int nranks)
{
    for (int i = 0; i < nranks; i++)
        if (selected(s, facts, i))
            return i;
    return 0;
}

/*
 * 3. a bridge: the engine's own evidence (its titles, its frames) on some
 *    ranks and not on others, whatever anyone's names (the engine's own
 *    groups have it on every rank);
 * 4. inference by an engine library alone, no engine worker among the ranks:
 *    trainers that import an engine (TRL, OpenRLHF, verl), their own group.
 * 1 if one applies.
 */
static int purpose_by_structure(const struct policy_patterns *pp, const struct rank_facts *facts, int nranks,
                                const unsigned char *eng, struct decision *out, struct sb *b)
{
    if (out->nengine > 0 && out->nengine < nranks) {
        out->purpose = PURPOSE_WEIGHT_UPDATE;
        sb_bridge(b, pp, facts, nranks, eng, out);
        sb_add(b, ": a bridge between an engine's workers and other processes");
        return 1;
    }
    int nweak_role = count_weak_role(facts, nranks, eng);
    if (out->nengine > 0 || nweak_role == 0 || nweak_role + out->ntraining != nranks)
        return 0;
    struct selector w = { SEL_WEAK, 0, eng };
    int k = first_selected(&w, facts, nranks);
    out->purpose = PURPOSE_TRAINING;
    sb_ranks(b, &w, facts, nranks, out->nweak, 48);
    sb_addf(b, " only loaded an engine library (rank %d: ", k);
    sb_quote(b, facts[k].text->role_reason, sizeof(facts[k].text->role_reason), 200);
    sb_add(b, "), no rank shows an engine's title or frames: trainers that import the engine, their own group");
    return 1;
}

/*
 * 2. a weight-update call site on any rank: before "every rank inference",
 *    since trainers load inference code too (vLLM's weight-transfer API,
 *    OpenRLHF, verl) and an engine's own groups have no such frame.  1 if it applies.
 */
static int purpose_by_callsite(const struct policy_patterns *pp, const struct rank_facts *facts, int nranks,
                               struct decision *out, struct sb *b)
{
    const char *sites = pp && pp->weight_update_callsites ? pp->weight_update_callsites
                                                          : DEFAULT_WEIGHT_UPDATE_CALLSITES;
    /* On the heap: FACTS_MAX_RANKS bytes are too many for a thread's stack. */
    unsigned char *flags = malloc((size_t)(nranks > 0 ? nranks : 1));
    int first = -1, frame = -1, count = 0;
    char pat[256] = "";
    for (int i = 0, k = -1; i < nranks; i++) {
        /* The same frames as the rank before: the same frame matches (or none). */
        if (i == 0 || !facts_same_frames(&facts[i], &facts[i - 1]))
            k = callsite_frame(sites, &facts[i], first < 0 ? pat : NULL, first < 0 ? sizeof(pat) : 0);
        if (k >= 0 && first < 0) {
            first = i;
            frame = k;
        }
        count += k >= 0;
        if (flags)
            flags[i] = k >= 0;
    }
    if (first >= 0) {
        out->purpose = PURPOSE_WEIGHT_UPDATE;
        if (flags) {
            struct selector s = { SEL_FLAG, 0, flags };
            sb_ranks(b, &s, facts, nranks, count, 48);
        } else {
            sb_addf(b, "%d rank%s", count, count > 1 ? "s" : "");
        }
        sb_addf(b, " at a weight-update call site (rank %d: Python frame '", first);
        sb_quote(b, facts[first].text->frames[frame], sizeof(facts[first].text->frames[frame]), 200);
        sb_add(b, "' matches weight-update pattern '");
        sb_quote(b, pat, sizeof(pat), 100);
        sb_add(b, "')");
    }
    free(flags);
    return first >= 0;
}

static void decide_purpose(const struct policy_patterns *pp, const struct rank_facts *facts, int nranks,
                           const unsigned char *eng, struct decision *out)
{
    struct sb b;
    sb_init(&b, out->purpose_reason, sizeof(out->purpose_reason));
    if (nranks <= 0) {
        out->purpose = PURPOSE_UNKNOWN;
        sb_add(&b, "no ranks' facts");
        return;
    }
    /* 1. training and inference ranks together */
    if (out->ntraining > 0 && out->ninference > 0) {
        out->purpose = PURPOSE_WEIGHT_UPDATE;
        role_evidence(&b, facts, nranks, ROLE_TRAINING, out->ntraining, 140);
        sb_add(&b, ", ");
        role_evidence(&b, facts, nranks, ROLE_INFERENCE, out->ninference, 140);
        sb_add(&b, ": training and inference ranks in one communicator");
        return;
    }
    /* 2. a weight-update call site on any rank */
    if (purpose_by_callsite(pp, facts, nranks, out, &b))
        return;
    /* 3-4. the engine's evidence across the ranks */
    if (eng && purpose_by_structure(pp, facts, nranks, eng, out, &b))
        return;
    /* 5. every rank inference */
    if (out->ninference == nranks) {
        out->purpose = PURPOSE_INFERENCE;
        role_evidence(&b, facts, nranks, ROLE_INFERENCE, nranks, 300);
        sb_add(&b, ": every rank runs inference, no weight-update call site");
        return;
    }
    /* 6. every rank training */
    if (out->ntraining == nranks) {
        out->purpose = PURPOSE_TRAINING;
        role_evidence(&b, facts, nranks, ROLE_TRAINING, nranks, 300);
        sb_add(&b, ": every rank trains, no weight-update call site");
        return;
    }
    /* 7. made by torch on every rank */
    int not_torch = 0;
    for (int i = 0; i < nranks; i++)
        not_torch += facts[i].api != API_TORCH;
    if (not_torch == 0) {
        out->purpose = PURPOSE_TRAINING;
        sb_addf(&b, "created through torch on %s%d rank%s (roles: %d training, %d inference, %d unknown), "
                "no weight-update call site",
                nranks > 1 ? "all " : "", nranks, nranks > 1 ? "s" : "", out->ntraining, out->ninference,
                out->nunknown);
        return;
    }
    /* 8. nothing applies */
    out->purpose = PURPOSE_UNKNOWN;
    struct selector unk = { SEL_ROLE, ROLE_UNKNOWN, NULL }, nt = { SEL_NOT_TORCH, 0, NULL };
    sb_add(&b, "no consensus rule applies: ");
    sb_ranks(&b, &unk, facts, nranks, out->nunknown, 48);
    sb_addf(&b, " of unknown role (%d training, %d inference), ", out->ntraining, out->ninference);
    int firstnt = 0;
    while (facts[firstnt].api == API_TORCH)
        firstnt++;
    sb_ranks(&b, &nt, facts, nranks, not_torch, 48);
    if (not_torch == 1)
        sb_addf(&b, " created through %s, not torch", api_family_name(facts[firstnt].api));
    else
        sb_addf(&b, " not created through torch (rank %d: %s)", firstnt, api_family_name(facts[firstnt].api));
    sb_add(&b, ", no weight-update call site");
}

/* ---- action ---- */

/*
 * NCCLSHIM_WEIGHT_UPDATE=auto, also a rule's "auto".  Where the ranks are
 * chooses, not how many inference ranks there are: a weight-update group is a
 * trainer and an engine of any tensor-parallel width.  An inference rank beside
 * ranks that are not inference is what confirms that shape, so that a call-site
 * match alone, or an engine's own group under a rule's auto, is never redirected
 * (their all-reduces would lose NCCL).  Ranks of unknown role go with the others:
 * the action is carried out by every rank, whatever its role, and a rank that
 * cannot carry it out vetoes.
 */
static enum action auto_action(const struct decision *d, const struct rank_facts *facts, int nranks,
                               const unsigned char *eng, struct sb *b)
{
    struct selector inf = { SEL_ROLE, ROLE_INFERENCE, NULL }, unk = { SEL_ROLE, ROLE_UNKNOWN, NULL };
    struct selector engs = { SEL_ENGINE, 0, eng };
    int by_roles = d->ninference > 0 && d->ninference < nranks;
    int by_engine = eng && d->nengine > 0 && d->nengine < nranks;
    if (!by_roles && !by_engine && d->ninference == 0) {
        sb_add(b, "no inference rank: auto redirects only a group of inference and other ranks");
        return ACTION_PASSTHROUGH;
    }
    if (!by_roles && !by_engine) {
        sb_addf(b, "every rank runs inference (%d rank%s), an engine's own group: auto redirects only a group of "
                "inference and other ranks", nranks, nranks > 1 ? "s" : "");
        return ACTION_PASSTHROUGH;
    }
    if (by_roles) {
        sb_addf(b, "%d inference rank%s (", d->ninference, d->ninference > 1 ? "s" : "");
        sb_ranks(b, &inf, facts, nranks, d->ninference, 48);
        sb_add(b, ")");
        if (d->nunknown > 0) {
            sb_add(b, ", ");
            sb_ranks(b, &unk, facts, nranks, d->nunknown, 48);
            sb_add(b, " of unknown role, going with the others");
        }
    } else {
        /* The roles do not show the shape (a trainer that imports the engine
         * reads as inference): the engine's own evidence does. */
        sb_addf(b, "%d engine rank%s (", d->nengine, d->nengine > 1 ? "s" : "");
        sb_ranks(b, &engs, facts, nranks, d->nengine, 48);
        sb_addf(b, ") beside %d other%s", nranks - d->nengine, nranks - d->nengine > 1 ? "s" : "");
    }
    if (d->nhosts != 1) {
        /* Across hosts the fabric decides (policy/fabric.c): passthrough where
         * it is ample, frugal where one channel fits, socket where it is scarce
         * or cannot be judged (as before the fabric was weighed). */
        char why[EVIDENCE_REASON_LEN];
        enum action a = fabric_choose(facts, nranks, why, sizeof(why));
        sb_addf(b, ", ranks on %d hosts, ", d->nhosts);
        sb_add(b, why);
        sb_addf(b, ": %s", action_name(a));
        return a;
    }
    if (nranks > POLICY_IPC_MAX_RANKS) {
        /* Socket rather than passthrough: on one host NCCL keeps its own paths
         * (NVLink, shared memory) either way, and should it take a network it
         * is not the fabric's. */
        sb_addf(b, ", all %d ranks on one host, more than the ipc chain's %d: socket", nranks, POLICY_IPC_MAX_RANKS);
        return ACTION_SOCKET;
    }
    sb_addf(b, ", all %d ranks on one host: ipc", nranks);
    return ACTION_IPC;
}

/* The first rank whose creator needs NCCL's whole API, or -1. */
static int full_api_rank(const struct rank_facts *facts, int nranks)
{
    for (int i = 0; i < nranks; i++)
        if (facts[i].full_api == 1)
            return i;
    return -1;
}

/*
 * A communicator whose creator needs NCCL's whole API (windows, the device
 * API, split: NeMo-RL's nccl_reshard, vLLM's m2n) never gets ipc, whoever
 * chose it: the shim's transport has none of that, and the refit would fail
 * where NCCL alone works.  On one host NCCL keeps the data on NVLink.
 */
static void no_ipc_for_full_api(const struct rank_facts *facts, int nranks, struct decision *out, struct sb *b)
{
    int r = full_api_rank(facts, nranks);
    if (out->action != ACTION_IPC || r < 0)
        return;
    out->action = ACTION_PASSTHROUGH;
    sb_addf(b, "; but rank %d's creator needs NCCL's whole API (", r);
    sb_quote(b, facts[r].text->full_api_why, sizeof(facts[r].text->full_api_why), 160);
    sb_add(b, "), which ipc has not: passthrough");
}

static const char *wu_name(enum wu_policy w)
{
    switch (w) {
    case WU_IPC: return "ipc";
    case WU_SOCKET: return "socket";
    case WU_FRUGAL: return "frugal";
    case WU_DROP: return "drop";
    case WU_PASSTHROUGH: return "passthrough";
    default: return "auto";
    }
}

static void choose_action(const struct policy *p, const struct rank_facts *facts, int nranks,
                          const unsigned char *eng, struct decision *out, struct sb *b)
{
    /* a. strict and a malformed policy anywhere */
    int nstrict = 0;
    for (int i = 0; i < nranks; i++)
        nstrict += facts[i].strict_error != 0;
    int root_strict = !p->ok && p->strict;
    if (nstrict || root_strict) {
        out->action = ACTION_FAIL;
        sb_add(b, "failing the communicator, NCCLSHIM_STRICT=1 and a malformed policy");
        if (nstrict) {
            struct selector s = { SEL_STRICT, 0, NULL };
            sb_add(b, " on ");
            sb_ranks(b, &s, facts, nranks, nstrict, 60);
            sb_add(b, " (their records name the error)");
        }
        if (root_strict) {
            sb_add(b, nstrict ? " and at the root: " : " at the root: ");
            sb_quote(b, p->error, sizeof(p->error), 350);
        }
        return;
    }
    /* b. a malformed policy fails open */
    if (!p->ok) {
        out->action = ACTION_PASSTHROUGH;
        sb_add(b, "policy error, failing open: ");
        sb_quote(b, p->error, sizeof(p->error), sizeof(out->action_reason) - 40);
        return;
    }
    /* c. NCCLSHIM_RULES */
    out->rule = policy_match_rules(p, out, facts, nranks);
    if (out->rule >= 0) {
        const struct rule *r = &p->rules[out->rule];
        sb_addf(b, "NCCLSHIM_RULES rule #%d '", out->rule + 1);
        sb_quote(b, r->source, sizeof(r->source), 200);
        sb_add(b, "' matches");
        if (r->action == ACTION_COUNT) {
            sb_addf(b, " (purpose %s): auto: ", purpose_name(out->purpose));
            out->action = auto_action(out, facts, nranks, eng, b);
        } else {
            out->action = (int)r->action >= 0 && r->action < ACTION_COUNT && r->action != ACTION_FAIL
                              ? r->action
                              : ACTION_PASSTHROUGH;
            sb_addf(b, ": %s", action_name(out->action));
        }
        return;
    }
    /* d. weight-update communicators follow NCCLSHIM_WEIGHT_UPDATE */
    if (out->purpose == PURPOSE_WEIGHT_UPDATE) {
        sb_addf(b, "purpose weight-update, NCCLSHIM_WEIGHT_UPDATE=%s", wu_name(p->weight_update));
        switch (p->weight_update) {
        case WU_IPC: out->action = ACTION_IPC; return;
        case WU_SOCKET: out->action = ACTION_SOCKET; return;
        case WU_FRUGAL: out->action = ACTION_FRUGAL; return;
        case WU_DROP: out->action = ACTION_DROP; return;
        case WU_PASSTHROUGH: out->action = ACTION_PASSTHROUGH; return;
        default:
            sb_add(b, ": ");
            out->action = auto_action(out, facts, nranks, eng, b);
            return;
        }
    }
    /* e. everything else */
    out->action = ACTION_PASSTHROUGH;
    sb_addf(b, "purpose %s: only weight-update communicators are redirected", purpose_name(out->purpose));
}

static void decide_action(const struct policy *p, const struct rank_facts *facts, int nranks,
                          const unsigned char *eng, struct decision *out)
{
    struct sb b;
    sb_init(&b, out->action_reason, sizeof(out->action_reason));
    choose_action(p, facts, nranks, eng, out, &b);
    no_ipc_for_full_api(facts, nranks, out, &b);
}

/* ---- never silent ---- */

/* "; to protect it set NCCLSHIM_ROLE=<role> in <who> (rank r, title 'T'<hint>)" */
static void sb_suggest_role(struct sb *b, const struct rank_facts *facts, int r, enum role role, const char *who,
                            const char *hint)
{
    sb_addf(b, "; to protect it set NCCLSHIM_ROLE=%s in %s (rank %d, title '", role_name(role), who, r);
    sb_quote(b, facts[r].text->title, sizeof(facts[r].text->title), 80);
    sb_addf(b, "'%s)", hint);
}

/*
 * A group that looks like a weight-update bridge but is not redirected for
 * want of evidence: a weight-update call site whose ranks do not show the
 * shape auto needs, or an engine library on some ranks and not on others with
 * no engine title or frame anywhere.  Never a group the policy chose to pass
 * through (a rule, NCCLSHIM_WEIGHT_UPDATE=passthrough, a malformed policy).
 */
static void note_unrecognized(const struct policy *p, const struct rank_facts *facts, int nranks,
                              const unsigned char *eng, struct decision *out)
{
    struct sb b;
    sb_init(&b, out->unrecognized, sizeof(out->unrecognized));
    if (!eng || nranks < 2 || out->action != ACTION_PASSTHROUGH || out->rule >= 0 || !p->ok ||
        p->weight_update != WU_AUTO || full_api_rank(facts, nranks) >= 0)
        return;
    int by_roles = out->ninference > 0 && out->ninference < nranks;
    int by_engine = out->nengine > 0 && out->nengine < nranks;
    if (out->purpose == PURPOSE_WEIGHT_UPDATE && !by_roles && !by_engine) {
        sb_add(&b, "weight-update by its evidence, but no rank shows an engine's side beside others (");
        sb_addf(&b, "%d training, %d inference, %d unknown; %d with the engine's own title or frames): auto cannot "
                "tell the engine's ranks from the trainer's", out->ntraining, out->ninference, out->nunknown,
                out->nengine);
        if (out->ninference == nranks)
            sb_suggest_role(&b, facts, 0, ROLE_TRAINING, "the trainer's processes", ": the ID's maker is usually one");
        else
            sb_suggest_role(&b, facts, nranks - 1, ROLE_INFERENCE, "the engine workers' processes",
                            ": their ranks usually come last");
        return;
    }
    if (out->purpose != PURPOSE_WEIGHT_UPDATE && out->nengine == 0 && out->nweak > 0 && out->nweak < nranks) {
        struct selector w = { SEL_WEAK, 0, eng };
        int r = first_selected(&w, facts, nranks);
        sb_ranks(&b, &w, facts, nranks, out->nweak, 48);
        sb_addf(&b, " loaded an engine library and %d rank%s did not, but no rank shows an engine's own title or "
                "frames: it may be a bridge between an engine and a trainer (purpose %s by its names)", nranks - out->nweak,
                nranks - out->nweak > 1 ? "s" : "", purpose_name(out->purpose));
        sb_suggest_role(&b, facts, r, ROLE_INFERENCE, "the engine's processes", ", if the engine runs there");
    }
}

void decide(const struct policy *p, const struct policy_patterns *pp, const struct rank_facts *facts, int nranks,
            struct decision *out)
{
    memset(out, 0, sizeof(*out));
    out->rule = -1;
    if (!facts || nranks < 0)
        nranks = 0;
    for (int i = 0; i < nranks; i++) {
        switch (role_of(&facts[i])) {
        case ROLE_TRAINING: out->ntraining++; break;
        case ROLE_INFERENCE: out->ninference++; break;
        default: out->nunknown++; break;
        }
    }
    out->nhosts = count_hosts(facts, nranks);
    /* On the heap: FACTS_MAX_RANKS bytes are too many for a thread's stack.
     * Without memory the engine's evidence is not weighed (names decide, as
     * before it was), never guessed. */
    unsigned char *eng = nranks > 0 ? calloc((size_t)nranks, 1) : NULL;
    if (eng)
        engine_strengths(pp, facts, nranks, eng, out);
    decide_purpose(pp, facts, nranks, eng, out);
    decide_action(p, facts, nranks, eng, out);
    note_unrecognized(p, facts, nranks, eng, out);
    free(eng);
}
