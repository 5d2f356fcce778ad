/* Unit tests of policy/decide.c and policy/rules.c: purpose by consensus, actions,
 * NCCLSHIM_WEIGHT_UPDATE / NCCLSHIM_RULES / NCCLSHIM_STRICT parsing. */
#include "tap.h"
#include "decide.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>


static void diag(const char *label, const char *s)
{
    printf("# %s: %s\n", label, s);
}

/* 8192 ranks: FACTS_MAX_RANKS (65536) of them would take 390 MB here; bench/decide_scale.c times those. */
#define TEST_RANKS 8192
static struct rank_facts F[TEST_RANKS];
static struct rank_text T[TEST_RANKS]; /* F[i]'s text, written here */
static struct policy P;
static struct decision D;
static const struct policy_patterns PP = { 0 };

static void set_rank(int i, enum role role, enum api_family api, const char *host_id, const char *title)
{
    struct rank_facts *f = &F[i];
    struct rank_text *t = &T[i];
    memset(f, 0, sizeof(*f));
    memset(t, 0, sizeof(*t));
    f->text = t;
    f->rank = i;
    f->role = role;
    f->api = api;
    f->cuda_device = -1;
    snprintf(f->host, sizeof(f->host), "%s", host_id);
    snprintf(f->host_id, sizeof(f->host_id), "%s", host_id);
    snprintf(t->title, sizeof(t->title), "%s", title);
    if (role == ROLE_TRAINING)
        snprintf(t->role_reason, sizeof(t->role_reason),
                 "process title '%s' matches training pattern 'ray::*PolicyWorker*'", title);
    else if (role == ROLE_INFERENCE)
        snprintf(t->role_reason, sizeof(t->role_reason), "process title '%s' matches inference pattern 'ray::*Vllm*'",
                 title);
    else
        snprintf(t->role_reason, sizeof(t->role_reason), "title '%s' matches no pattern", title);
}

static void add_frame(int i, const char *frame)
{
    snprintf(T[i].frames[F[i].nframes++], EVIDENCE_FRAME_LEN, "%s", frame);
}

/* The NeMo-RL shape: ranks 0-1 trainer (torch), rank 2 vLLM (ctypes). */
static void nemo_rl(const char *host2)
{
    set_rank(0, ROLE_TRAINING, API_TORCH, "h1", "ray::DTensorPolicyWorker");
    set_rank(1, ROLE_TRAINING, API_TORCH, "h1", "ray::DTensorPolicyWorker");
    set_rank(2, ROLE_INFERENCE, API_CTYPES, host2, "ray::VllmGenerationWorker");
}

static void parse(const char *wu, const char *rules, const char *strict)
{
    policy_parse(&P, wu, rules, strict);
}

static void run(int nranks)
{
    decide(&P, &PP, F, nranks, &D);
}

/* Rules text against the NeMo-RL shape on one host: which rule matched. */
static int rule_for(const char *rules)
{
    parse(NULL, rules, NULL);
    if (!P.ok) {
        diag("unexpected error", P.error);
        return -2;
    }
    nemo_rl("h1");
    run(3);
    return D.rule;
}

static int has(const char *s, const char *sub)
{
    if (strstr(s, sub))
        return 1;
    printf("# '%s' not in '%s'\n", sub, s);
    return 0;
}

/* Parse `rules`, expect an error at `pos` whose text contains `what`. */
static void rules_error(const char *rules, int pos, const char *what, const char *label)
{
    char want[64];
    parse(NULL, rules, NULL);
    snprintf(want, sizeof(want), "NCCLSHIM_RULES: position %d (near '", pos);
    int good = !P.ok && P.nrules == 0 && strncmp(P.error, want, strlen(want)) == 0 && strstr(P.error, what);
    if (!good)
        diag("got", P.error);
    ok(good, "%s", label);
}

static int valid_utf8(const char *s)
{
    const unsigned char *u = (const unsigned char *)s;
    while (*u) {
        int k = *u < 0x80 ? 0 : (*u & 0xE0) == 0xC0 ? 1 : (*u & 0xF0) == 0xE0 ? 2 : (*u & 0xF8) == 0xF0 ? 3 : -1;
        if (k < 0)
            return 0;
        u++;
        for (int j = 0; j < k; j++, u++)
            if ((*u & 0xC0) != 0x80)
                return 0;
    }
    return 1;
}

static int bounded(const char *s, size_t cap)
{
    return memchr(s, '\0', cap) != NULL && valid_utf8(s);
}

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

static void test_names(void)
{
    int good = 1;
    for (int a = 0; a < ACTION_COUNT; a++)
        good &= action_from_name(action_name((enum action)a)) == a;
    ok(good, "action_from_name inverts action_name");
    ok(strcmp(action_name(ACTION_IPC), "ipc") == 0 && strcmp(action_name(ACTION_FAIL), "fail") == 0 &&
           strcmp(action_name(ACTION_COUNT), "auto") == 0,
       "action names");
    ok(action_from_name("SOCKET") == ACTION_SOCKET && action_from_name("bogus") == -1 && action_from_name(NULL) == -1 &&
           action_from_name("auto") == -1,
       "action_from_name: case-insensitive, -1 for unknown names and auto");
}

static void test_purpose(void)
{
    parse(NULL, NULL, NULL);
    ok(P.ok && P.nrules == 0 && P.weight_update == WU_AUTO && !P.strict && !P.error[0], "all unset: defaults, ok");

    nemo_rl("h1");
    run(3);
    ok(D.purpose == PURPOSE_WEIGHT_UPDATE, "training + inference ranks -> weight-update");
    ok(has(D.purpose_reason, "ranks 0-1 training (rank 0: process title 'ray::DTensorPolicyWorker' matches") &&
           has(D.purpose_reason, "rank 2 inference (rank 2: process title 'ray::VllmGenerationWorker'") &&
           has(D.purpose_reason, "training and inference ranks in one communicator"),
       "weight-update reason names the ranks, roles and evidence");
    diag("reason", D.purpose_reason);
    ok(D.ntraining == 2 && D.ninference == 1 && D.nunknown == 0 && D.nhosts == 1, "role counts, one host");

    /* rule 1 before rule 2..5: both torch, mixed roles */
    F[2].api = API_TORCH;
    run(3);
    ok(D.purpose == PURPOSE_WEIGHT_UPDATE, "mixed roles win over 'made by torch'");

    for (int i = 0; i < 3; i++)
        set_rank(i, ROLE_INFERENCE, API_CTYPES, "h1", "ray::VllmGenerationWorker");
    run(3);
    ok(D.purpose == PURPOSE_INFERENCE && has(D.purpose_reason, "all 3 ranks inference"), "every rank inference -> inference");
    add_frame(1, "/x/vllm/weight_transfer.py:12 update_weights");
    run(3);
    ok(D.purpose == PURPOSE_WEIGHT_UPDATE && has(D.purpose_reason, "at a weight-update call site"),
       "a weight-update call site wins over every rank inference (trainers load inference code too)");
    ok(D.action == ACTION_PASSTHROUGH && has(D.action_reason, "every rank runs inference"),
       "but auto redirects no group whose every rank runs inference: passthrough");

    for (int i = 0; i < 3; i++)
        set_rank(i, ROLE_UNKNOWN, API_CTYPES, "h1", "python");
    add_frame(1, "/x/pynccl.py:99 __init__");
    add_frame(1, "/x/nemo_rl/vllm_backend.py:120 init_collective");
    add_frame(2, "/x/nemo_rl/vllm_backend.py:120 init_collective");
    run(3);
    ok(D.purpose == PURPOSE_WEIGHT_UPDATE && has(D.purpose_reason, "ranks 1-2 at a weight-update call site") &&
           has(D.purpose_reason, "rank 1: Python frame '/x/nemo_rl/vllm_backend.py:120 init_collective'") &&
           has(D.purpose_reason, "pattern '* init_collective*'"),
       "a weight-update call site on any rank -> weight-update, reason names rank, frame, pattern");
    ok(D.nunknown == 3 && D.ntraining == 0 && D.ninference == 0, "unknown roles counted");

    for (int i = 0; i < 3; i++)
        set_rank(i, ROLE_TRAINING, API_CTYPES, "h1", "ray::DTensorPolicyWorker");
    add_frame(0, "/x/trainer.py:5 update_weights");
    run(3);
    ok(D.purpose == PURPOSE_WEIGHT_UPDATE, "a call site wins over all training");
    struct policy_patterns mine = { .weight_update_callsites = "*my_sync*" };
    decide(&P, &mine, F, 3, &D);
    ok(D.purpose == PURPOSE_TRAINING && has(D.purpose_reason, "all 3 ranks training"),
       "custom call-site patterns replace the defaults; every rank training -> training");
    add_frame(2, "/x/t.py:1 MY_SYNC");
    decide(&P, &mine, F, 3, &D);
    ok(D.purpose == PURPOSE_WEIGHT_UPDATE && has(D.purpose_reason, "rank 2 at a weight-update call site"),
       "custom call-site pattern matches (case-insensitive)");
    decide(&P, NULL, F, 3, &D);
    ok(D.purpose == PURPOSE_WEIGHT_UPDATE && has(D.purpose_reason, "rank 0 at"), "NULL patterns: the defaults");

    for (int i = 0; i < 3; i++)
        set_rank(i, ROLE_UNKNOWN, API_TORCH, "h1", "python train.py");
    F[1].role = ROLE_TRAINING;
    run(3);
    ok(D.purpose == PURPOSE_TRAINING && has(D.purpose_reason, "created through torch on all 3 ranks"),
       "made by torch on every rank -> training");
    F[2].api = API_CUPY;
    run(3);
    ok(D.purpose == PURPOSE_UNKNOWN && has(D.purpose_reason, "rank 2 created through cupy, not torch") &&
           has(D.purpose_reason, "ranks 0,2 of unknown role"),
       "otherwise unknown, reason says why");
    diag("reason", D.purpose_reason);

    F[0].role = (enum role)77;
    run(3);
    ok(D.nunknown == 2 && D.ntraining == 1, "an out-of-range role counts as unknown");

    run(0);
    ok(D.purpose == PURPOSE_UNKNOWN && D.action == ACTION_PASSTHROUGH && D.rule == -1 && D.nhosts == 0,
       "no ranks: unknown, passthrough");
    decide(&P, &PP, NULL, 5, &D);
    ok(D.purpose == PURPOSE_UNKNOWN && D.nunknown == 0, "NULL facts: treated as no ranks");

    set_rank(0, ROLE_TRAINING, API_TORCH, "a", "t");
    set_rank(1, ROLE_TRAINING, API_TORCH, "b", "t");
    set_rank(2, ROLE_TRAINING, API_TORCH, "a", "t");
    set_rank(3, ROLE_TRAINING, API_TORCH, "c", "t");
    run(4);
    ok(D.nhosts == 3, "nhosts: distinct host_id values");
    F[1].host_id[0] = '\0';
    F[3].host_id[0] = '\0';
    run(4);
    ok(D.nhosts == 3, "nhosts: an empty host_id is a host of its own");
    snprintf(F[3].host_id, sizeof(F[3].host_id), "A");
    run(4);
    ok(D.nhosts == 3, "nhosts: host_id compared exactly (case matters)");
}

/*
 * A weight-update group of `ntrain` trainer ranks (torch-made titles, ctypes
 * client), then `ninf` inference ranks, then `nunk` ranks of unknown role;
 * rank r on host "h<host(r)>".  Returns nranks.
 */
static int group_shape(int ntrain, int ninf, int nunk, int (*host)(int))
{
    int n = 0;
    char h[16];
    for (int i = 0; i < ntrain + ninf + nunk; i++, n++) {
        snprintf(h, sizeof(h), "h%d", host ? host(i) : 0);
        set_rank(i, i < ntrain ? ROLE_TRAINING : i < ntrain + ninf ? ROLE_INFERENCE : ROLE_UNKNOWN, API_CTYPES, h,
                 i < ntrain ? "ray::DTensorPolicyWorker" : i < ntrain + ninf ? "ray::VllmGenerationWorker" : "python3");
    }
    return n;
}

static int trainers_apart(int r) { return r < 2 ? 0 : 1; }  /* ranks 0-1 on h0, the rest on h1 */
static int each_apart(int r) { return r; }                  /* every rank a host of its own */
static int one_apart(int r) { return r == 1 ? 1 : 0; }       /* rank 1 alone on h1 */

/* auto for every shape of weight-update group: 1, 2 and 7 inference ranks (a
 * vLLM engine of that tensor-parallel width), on one host and on several, with
 * ranks of unknown role among them. */
static void test_auto_shapes(void)
{
    struct {
        int ntrain, ninf, nunk;
        int (*host)(int);
        enum action want;
        const char *reason;
    } cases[] = {
        { 1, 1, 0, NULL, ACTION_IPC, "1 inference rank (rank 1), all 2 ranks on one host: ipc" },
        { 2, 1, 0, NULL, ACTION_IPC, "1 inference rank (rank 2), all 3 ranks on one host: ipc" },
        { 2, 2, 0, NULL, ACTION_IPC, "2 inference ranks (ranks 2-3), all 4 ranks on one host: ipc" },
        { 1, 7, 0, NULL, ACTION_IPC, "7 inference ranks (ranks 1-7), all 8 ranks on one host: ipc" },
        { 2, 1, 0, trainers_apart, ACTION_SOCKET, "1 inference rank (rank 2), ranks on 2 hosts, fabric not judged (" },
        { 2, 2, 0, trainers_apart, ACTION_SOCKET, "2 inference ranks (ranks 2-3), ranks on 2 hosts, fabric not judged (" },
        { 1, 7, 0, each_apart, ACTION_SOCKET, "7 inference ranks (ranks 1-7), ranks on 8 hosts, fabric not judged (" },
        { 2, 7, 0, one_apart, ACTION_SOCKET, "7 inference ranks (ranks 2-8), ranks on 2 hosts, fabric not judged (" },
        /* unknown roles go with the others */
        { 2, 2, 1, NULL, ACTION_IPC,
          "2 inference ranks (ranks 2-3), rank 4 of unknown role, going with the others, all 5 ranks on one host: ipc" },
        { 1, 7, 2, trainers_apart, ACTION_SOCKET,
          "7 inference ranks (ranks 1-7), ranks 8-9 of unknown role, going with the others, ranks on 2 hosts, fabric not judged (" },
        /* no trainer recognised: the engine and unknown ranks, weight-update by its call site */
        { 0, 2, 1, NULL, ACTION_IPC, "2 inference ranks (ranks 0-1), rank 2 of unknown role" },
        { 0, 1, 1, each_apart, ACTION_SOCKET, "1 inference rank (rank 0), rank 1 of unknown role, going with the "
                                              "others, ranks on 2 hosts, fabric not judged (" },
    };
    for (size_t k = 0; k < sizeof(cases) / sizeof(cases[0]); k++) {
        char what[256];
        parse(NULL, NULL, NULL);
        int nr = group_shape(cases[k].ntrain, cases[k].ninf, cases[k].nunk, cases[k].host);
        if (cases[k].ntrain == 0)
            add_frame(0, "/x/nemo_rl/vllm_backend.py:120 init_collective");
        run(nr);
        snprintf(what, sizeof(what), "auto: %d training, %d inference, %d unknown on %d host(s) -> %s", cases[k].ntrain,
                 cases[k].ninf, cases[k].nunk, D.nhosts, action_name(cases[k].want));
        ok(D.purpose == PURPOSE_WEIGHT_UPDATE && D.action == cases[k].want &&
               has(D.action_reason, "purpose weight-update, NCCLSHIM_WEIGHT_UPDATE=auto: ") &&
               has(D.action_reason, cases[k].reason),
           "%s", what);
    }
    diag("reason", D.action_reason);

    /* More ranks on one host than the ipc chain takes: socket, and the reason says why. */
    parse(NULL, NULL, NULL);
    int nr = group_shape(1, POLICY_IPC_MAX_RANKS, 0, NULL);
    run(nr);
    ok(D.action == ACTION_SOCKET && has(D.action_reason, "all 65 ranks on one host, more than the ipc chain's 64: socket"),
       "auto: 65 ranks on one host, beyond the ipc chain -> socket, reason says why");
    run(POLICY_IPC_MAX_RANKS);
    ok(D.action == ACTION_IPC && has(D.action_reason, "all 64 ranks on one host: ipc"),
       "auto: 64 ranks on one host, the chain's limit -> ipc");

    /* A rank without a host identity is a host of its own: never ipc. */
    group_shape(2, 2, 0, NULL);
    F[3].host_id[0] = '\0';
    run(4);
    ok(D.action == ACTION_SOCKET && has(D.action_reason, "ranks on 2 hosts, fabric not judged ("),
       "auto: an inference rank with no host identity -> socket");

    /* Inference and unknown ranks without a weight-update call site: purpose unknown, auto not consulted. */
    group_shape(0, 2, 1, NULL);
    run(3);
    ok(D.purpose == PURPOSE_UNKNOWN && D.action == ACTION_PASSTHROUGH &&
           has(D.action_reason, "purpose unknown: only weight-update communicators are redirected"),
       "inference + unknown ranks, no call site: purpose unknown, passthrough");
    /* ... but a rule's auto redirects them like any group of inference and other ranks. */
    parse(NULL, "purpose=unknown,inference>0:auto", NULL);
    run(3);
    ok(D.rule == 0 && D.action == ACTION_IPC && has(D.action_reason, "2 inference ranks (ranks 0-1), rank 2 of unknown"),
       "rule auto, inference + unknown ranks on one host -> ipc");
    /* An engine's own group (every rank inference) under a rule's auto: passthrough, at any width. */
    parse(NULL, "*:auto", NULL);
    for (int w = 1; w <= 8; w *= 2) {
        char what[128];
        group_shape(0, w, 0, NULL);
        run(w);
        snprintf(what, sizeof(what), "rule auto, an engine's own group of %d inference rank(s) -> passthrough", w);
        ok(D.purpose == PURPOSE_INFERENCE && D.action == ACTION_PASSTHROUGH &&
               has(D.action_reason, "every rank runs inference"),
           "%s", what);
    }
}

static void test_actions(void)
{
    parse(NULL, NULL, NULL);
    nemo_rl("h1");
    run(3);
    ok(D.action == ACTION_IPC && D.rule == -1 && has(D.action_reason, "NCCLSHIM_WEIGHT_UPDATE=auto") &&
           has(D.action_reason, "1 inference rank (rank 2), all 3 ranks on one host: ipc"),
       "auto: one inference rank on one host -> ipc");
    diag("reason", D.action_reason);
    nemo_rl("h2");
    run(3);
    ok(D.action == ACTION_SOCKET && D.nhosts == 2 && has(D.action_reason, "ranks on 2 hosts, fabric not judged ("),
       "auto: one inference rank, two hosts -> socket");
    for (int i = 0; i < 3; i++)
        set_rank(i, ROLE_TRAINING, API_CTYPES, "h1", "t");
    add_frame(0, "x.py:1 update_weights");
    run(3);
    ok(D.purpose == PURPOSE_WEIGHT_UPDATE && D.action == ACTION_PASSTHROUGH &&
           has(D.action_reason, "no inference rank: auto redirects only a group of inference and other ranks"),
       "auto: no inference rank (weight-update by call site only) -> passthrough");
    test_auto_shapes();
    struct { const char *v; enum wu_policy wu; enum action a; } wus[] = {
        { "ipc", WU_IPC, ACTION_IPC },
        { "socket", WU_SOCKET, ACTION_SOCKET },
        { "frugal", WU_FRUGAL, ACTION_FRUGAL },
        { " DROP ", WU_DROP, ACTION_DROP },
        { "Passthrough", WU_PASSTHROUGH, ACTION_PASSTHROUGH },
        { "auto", WU_AUTO, ACTION_SOCKET },
        { "", WU_AUTO, ACTION_SOCKET },
    };
    for (size_t k = 0; k < sizeof(wus) / sizeof(wus[0]); k++) {
        char what[128];
        parse(wus[k].v, NULL, NULL);
        nemo_rl("h2");
        run(3);
        snprintf(what, sizeof(what), "NCCLSHIM_WEIGHT_UPDATE='%s' -> %s", wus[k].v, action_name(wus[k].a));
        ok(P.ok && P.weight_update == wus[k].wu && D.action == wus[k].a && D.rule == -1, "%s", what);
    }
    parse("drop", NULL, NULL);
    nemo_rl("h1");
    run(3);
    ok(has(D.action_reason, "purpose weight-update, NCCLSHIM_WEIGHT_UPDATE=drop"), "explicit setting named in reason");
    for (int i = 0; i < 3; i++)
        set_rank(i, ROLE_TRAINING, API_TORCH, "h1", "t");
    run(3);
    ok(D.purpose == PURPOSE_TRAINING && D.action == ACTION_PASSTHROUGH &&
           has(D.action_reason, "purpose training: only weight-update communicators are redirected"),
       "training communicator -> passthrough whatever NCCLSHIM_WEIGHT_UPDATE says");
}

static void test_rules(void)
{
    parse(NULL, "purpose=weight-update,hosts>1:frugal", NULL);
    nemo_rl("h2");
    run(3);
    ok(P.ok && P.rules[0].action == ACTION_FRUGAL && D.action == ACTION_FRUGAL && D.rule == 0 &&
           has(D.action_reason, "matches: frugal"),
       "a rule may choose frugal");
    parse(NULL, "purpose=weight-update:drop", NULL);
    ok(P.ok && P.nrules == 1 && P.rules[0].ncond == 1 && P.rules[0].action == ACTION_DROP &&
           strcmp(P.rules[0].source, "purpose=weight-update:drop") == 0,
       "one rule parsed, source kept");

    struct { const char *rules; int want; } cases[] = {
        { "purpose=weight-update:drop", 0 },  { "purpose=training:drop", -1 },   { "purpose!=training:drop", 0 },
        { "purpose!=weight-update:drop", -1 }, { "nranks=3:drop", 0 },          { "nranks=4:drop", -1 },
        { "nranks!=4:drop", 0 },             { "nranks!=3:drop", -1 },         { "nranks<4:drop", 0 },
        { "nranks<3:drop", -1 },             { "nranks<=3:drop", 0 },          { "nranks<=2:drop", -1 },
        { "nranks>2:drop", 0 },              { "nranks>3:drop", -1 },          { "nranks>=3:drop", 0 },
        { "nranks>=4:drop", -1 },            { "hosts=1:drop", 0 },            { "hosts>1:drop", -1 },
        { "training=2:drop", 0 },            { "training<2:drop", -1 },        { "inference=1:drop", 0 },
        { "inference>=2:drop", -1 },         { "unknown=0:drop", 0 },          { "unknown>0:drop", -1 },
        { "api=ctypes:drop", 0 },            { "api=torch:drop", 0 },          { "api=cupy:drop", -1 },
        { "api!=cupy:drop", 0 },             { "api!=torch:drop", -1 },        { "api=other:drop", -1 },
        { "title~\"ray::*vllm*\":drop", 0 },  { "title~\"ray::*sglang*\":drop", -1 },
        { "title!~\"*sglang*\":drop", 0 },    { "title!~\"*Policy*\":drop", -1 },
        { "callsite~*init_collective:drop", 0 }, { "callsite~*nothing*:drop", -1 },
        { "callsite!~*nothing*:drop", 0 },   { "callsite!~*INIT_COLLECTIVE:drop", -1 },
        { "nranks>100:drop;nranks>1:socket;*:ipc", 1 }, { "nranks>100:drop;*:ipc;nranks>1:socket", 1 },
        { "*:ipc", 0 },                     { "nranks>2,hosts=1,api=torch:drop", 0 },
        { "nranks>2,hosts=2,api=torch:drop", -1 }, { ";;nranks>100:drop;;nranks=3:socket;", 1 },
        { "", -1 },                          { " ; ; ", -1 },
    };
    for (size_t k = 0; k < sizeof(cases) / sizeof(cases[0]); k++) {
        char what[160];
        snprintf(what, sizeof(what), "rule '%s' -> %d", cases[k].rules, cases[k].want);
        /* the frame for callsite conditions */
        int got = rule_for(cases[k].rules);
        if (strstr(cases[k].rules, "callsite")) {
            add_frame(2, "/x/nemo_rl/vllm_backend.py:120 init_collective");
            run(3);
            got = D.rule;
        }
        ok(got == cases[k].want, "%s", what);
    }

    nemo_rl("h1");
    parse(NULL, "nranks>100:drop;nranks>1:socket;*:ipc", NULL);
    run(3);
    ok(D.action == ACTION_SOCKET && D.rule == 1 &&
           has(D.action_reason, "NCCLSHIM_RULES rule #2 'nranks>1:socket' matches: socket"),
       "first matching rule wins; reason quotes it as rule #2");
    diag("reason", D.action_reason);

    for (int i = 0; i < 3; i++)
        set_rank(i, ROLE_TRAINING, API_TORCH, "h1", "t");
    parse("drop", "purpose=training:socket", NULL);
    run(3);
    ok(D.action == ACTION_SOCKET && D.rule == 0, "a rule applies to any purpose (training -> socket)");

    parse(NULL, "*:auto", NULL);
    ok(P.ok && P.rules[0].action == ACTION_COUNT, "auto stored as ACTION_COUNT");
    /* purpose unknown (no trainer recognised, no call site): the rule's auto still applies */
    set_rank(0, ROLE_UNKNOWN, API_CTYPES, "h1", "python3");
    set_rank(1, ROLE_INFERENCE, API_CTYPES, "h1", "ray::VllmGenerationWorker");
    run(2);
    ok(D.purpose == PURPOSE_UNKNOWN && D.action == ACTION_IPC && D.rule == 0 &&
           has(D.action_reason, "(purpose unknown): auto: 1 inference rank (rank 1)"),
       "rule action auto applies the auto logic regardless of purpose");
    nemo_rl("h2");
    run(3);
    ok(D.action == ACTION_SOCKET, "rule auto, two hosts -> socket");
    parse("drop", "purpose=weight-update,inference>1:auto", NULL);
    nemo_rl("h1");
    set_rank(3, ROLE_INFERENCE, API_CTYPES, "h1", "ray::VllmGenerationWorker");
    run(4);
    ok(D.action == ACTION_IPC && D.rule == 0 && has(D.action_reason, "2 inference ranks (ranks 2-3), all 4 ranks"),
       "rule auto, two inference ranks -> ipc (NCCLSHIM_WEIGHT_UPDATE=drop not consulted)");

    parse(NULL, "  PURPOSE = Weight-Update ,\tNRanks >= 2 :  DROP  ;  ", NULL);
    ok(P.ok && P.nrules == 1 && P.rules[0].ncond == 2 && P.rules[0].action == ACTION_DROP &&
           strcmp(P.rules[0].source, "PURPOSE = Weight-Update , NRanks >= 2 :  DROP") == 0,
       "whitespace around tokens, case-insensitive keys/values/actions, trailing ';'");
    parse(NULL, "title~\"a,b;c:d\\\"e\\\\f\\g\":drop;title~plain value :socket", NULL);
    ok(P.ok && P.nrules == 2 && strcmp(P.rules[0].cond[0].text, "a,b;c:d\"e\\f\\g") == 0 &&
           strcmp(P.rules[1].cond[0].text, "plain value") == 0,
       "quoted values hold , ; : and \\\" \\\\; other backslashes kept; bare values keep inner spaces");
    set_rank(0, ROLE_TRAINING, API_TORCH, "h1", "A,B;C:D\"E\\F\\g");
    run(1);
    ok(D.rule == -1, "a backslash in a glob escapes the next character (fnmatch)");
    snprintf(T[0].title, sizeof(T[0].title), "a,b;c:d\"efg");
    run(1);
    ok(D.rule == 0, "quoted glob matches a title with , ; : \" and \\");
    parse(NULL, "title~\"\":drop", NULL);
    T[0].title[0] = '\0';
    run(1);
    ok(P.ok && D.rule == 0, "an empty quoted glob matches an empty title");
    parse(NULL, "nranks=\"1\":drop", NULL);
    run(1);
    ok(P.ok && D.rule == 0, "a quoted integer");
    parse(NULL, "nranks<=2147483647:drop", NULL);
    ok(P.ok && P.rules[0].cond[0].num == 2147483647, "largest integer accepted");

    char rule[4096], val[300];
    memset(val, 'x', 255);
    val[255] = '\0';
    snprintf(rule, sizeof(rule), "title~%s:drop", val);
    parse(NULL, rule, NULL);
    ok(P.ok && strlen(P.rules[0].cond[0].text) == 255, "a 255-byte value is accepted");
    rule[0] = '\0';
    for (int k = 0; k < POLICY_MAX_CONDS; k++)
        snprintf(rule + strlen(rule), sizeof(rule) - strlen(rule), "title!~%s,", val);
    strcat(rule, "PLACEHOLDER");
    strcpy(strstr(rule, ",PLACEHOLDER"), ":drop");
    parse(NULL, rule, NULL);
    ok(P.ok && P.rules[0].ncond == POLICY_MAX_CONDS && strlen(P.rules[0].source) == POLICY_VALUE_LEN - 1 &&
           strcmp(P.rules[0].source + POLICY_VALUE_LEN - 4, "...") == 0,
       "8 conditions accepted; a long rule's source is cut with '...'");
    rule[0] = '\0';
    for (int k = 0; k < POLICY_MAX_RULES; k++)
        strcat(rule, "*:drop;");
    parse(NULL, rule, NULL);
    ok(P.ok && P.nrules == POLICY_MAX_RULES, "32 rules accepted");
}

static void test_errors(void)
{
    rules_error("nrank>2:drop", 1, "unknown key 'nrank' (keys: purpose, nranks, hosts, training, inference, unknown, api, title, callsite)",
                "unknown key");
    ok(has(P.error, "(near 'nrank>2:drop')"), "near shows the text from the position");
    rules_error("nranks>2,color=red:drop", 10, "unknown key 'color'", "unknown key in a second condition");
    rules_error("purpose<training:drop", 8, "operator '<' does not apply to purpose (purpose takes = !=)", "bad op for an enum key");
    rules_error("title=x:drop", 6, "operator '=' does not apply to title (title takes ~ !~)", "bad op for a glob key");
    rules_error("nranks~3:drop", 7, "operator '~' does not apply to nranks (nranks takes = != < <= > >=)", "bad op for an integer key");
    rules_error("nranks 3:drop", 8, "expected an operator after 'nranks'", "missing operator");
    rules_error("nranks==3:drop", 7, "'==': the operator is '='", "'==' explained");
    rules_error("purpose=train:drop", 9, "unknown purpose 'train' (purposes: training, weight-update, inference, unknown)",
                "bad purpose value");
    rules_error("api=torchy:drop", 5, "unknown api 'torchy' (apis: torch, ctypes, nccl4py, cupy, other)", "bad api value");
    rules_error("nranks=2", 9, "missing ':ACTION' after the conditions", "missing ':' at the end");
    ok(has(P.error, "position 9 (near '')"), "error at the end: near ''");
    rules_error("nranks=2;*:drop", 9, "missing ':ACTION'", "missing ':' before ';'");
    rules_error("title~\"x\" y:drop", 11, "unexpected text after a quoted value", "text after a quoted value");
    rules_error("nranks=2:", 10, "missing action after ':' (actions: passthrough, socket, frugal, drop, ipc, auto)", "missing action");
    rules_error("nranks=2: ;*:drop", 11, "missing action after ':'", "missing action before ';'");
    rules_error("nranks=2:explode", 10, "unknown action 'explode' (actions: passthrough, socket, frugal, drop, ipc, auto)",
                "unknown action");
    rules_error("*:fail", 3, "a rule cannot choose 'fail'", "fail is not a rule action");
    rules_error("title~ray::Foo:drop", 11, "a value that contains ':', ',' or ';' must be quoted", "unquoted ':' hints at quoting");
    rules_error("*:drop socket", 8, "unexpected text after the action", "text after the action");
    rules_error("*x:drop", 2, "'*' stands alone", "'*' with more");
    rules_error("nranks=1,*:drop", 10, "'*' stands alone", "'*' in a list of conditions");
    rules_error(":drop", 1, "missing condition", "empty condition list");
    rules_error("nranks=1,,hosts=1:drop", 10, "missing condition", "empty condition");
    rules_error("nranks=:drop", 8, "missing value after 'nranks='", "missing value");
    rules_error("title~a\"b:drop", 8, "inside an unquoted value", "quote inside a bare value");
    rules_error("title~\"abc:drop", 7, "unterminated quoted value", "unterminated quote");
    rules_error("nranks>99999999999999999999:drop", 8, "integer '99999999999999999999' out of range (0..2147483647)",
                "integer overflow");
    rules_error("nranks>2147483648:drop", 8, "out of range", "integer just past INT_MAX");
    rules_error("nranks>-1:drop", 8, "'-1' is not a non-negative decimal integer", "negative integer");
    rules_error("nranks>two:drop", 8, "'two' is not a non-negative decimal integer", "not an integer");
    rules_error("nranks>\"\":drop", 8, "'' is not a non-negative decimal integer", "empty quoted integer");

    char rule[4096], val[300];
    memset(val, 'x', 256);
    val[256] = '\0';
    snprintf(rule, sizeof(rule), "*:drop;title~%s:drop", val);
    rules_error(rule, 14, "value longer than 255 bytes", "overlong bare value");
    snprintf(rule, sizeof(rule), "title~\"%s\":drop", val);
    rules_error(rule, 7, "value longer than 255 bytes", "overlong quoted value");
    rule[0] = '\0';
    for (int k = 0; k <= POLICY_MAX_RULES; k++)
        strcat(rule, "*:drop;");
    rules_error(rule, POLICY_MAX_RULES * 7 + 1, "more than 32 rules", "too many rules");
    rule[0] = '\0';
    for (int k = 0; k <= POLICY_MAX_CONDS; k++)
        strcat(rule, "nranks>0,");
    strcpy(rule + strlen(rule) - 1, ":drop");
    rules_error(rule, POLICY_MAX_CONDS * 9 + 1, "more than 8 conditions in one rule", "too many conditions");

    rules_error("*:drop;bogus=1:drop;nranks=:drop", 8, "unknown key 'bogus'", "the first error is reported");
    ok(!strstr(P.error, "missing value"), "only the first error");
    rules_error("\x01\x02zz:drop", 1, "(near '??zz:drop')", "control bytes shown as '?'");
    rules_error("*:drop;aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa", 8,
                "(near 'aaaaaaaaaaaaaaaaaaaa'): unknown key", "near shows at most 20 bytes");

    /* a malformed policy: passthrough (fail open), with the error */
    parse(NULL, "nrank>2:drop", NULL);
    nemo_rl("h1");
    run(3);
    ok(D.action == ACTION_PASSTHROUGH && D.rule == -1 && D.purpose == PURPOSE_WEIGHT_UPDATE &&
           has(D.action_reason, "policy error, failing open: NCCLSHIM_RULES: position 1"),
       "non-strict error -> passthrough, error in the reason");
    parse(NULL, "nrank>2:drop", "1");
    run(3);
    ok(D.action == ACTION_FAIL && has(D.action_reason, "NCCLSHIM_STRICT=1") &&
           has(D.action_reason, "at the root: NCCLSHIM_RULES: position 1"),
       "strict + error -> fail, reason names the error");
    diag("reason", D.action_reason);
    parse(NULL, "*:drop", "1");
    run(3);
    ok(P.ok && P.strict && D.action == ACTION_DROP, "strict, no error: rules apply");
    F[1].strict_error = 1;
    F[2].strict_error = 1;
    run(3);
    ok(D.action == ACTION_FAIL && has(D.action_reason, "NCCLSHIM_STRICT=1") && has(D.action_reason, "on ranks 1-2"),
       "a rank's strict_error -> fail, reason names the ranks");
    parse(NULL, NULL, NULL);
    run(3);
    ok(D.action == ACTION_FAIL, "a rank's strict_error fails even without strict at the root");
    F[1].strict_error = F[2].strict_error = 0;

    parse("bogus", "*:socket", NULL);
    ok(!P.ok && P.nrules == 1 &&
           has(P.error, "NCCLSHIM_WEIGHT_UPDATE='bogus': not one of auto, ipc, socket, frugal, drop, passthrough"),
       "bad NCCLSHIM_WEIGHT_UPDATE: error names variable, value, allowed values; rules still parsed");
    run(3);
    ok(D.action == ACTION_PASSTHROUGH && has(D.action_reason, "NCCLSHIM_WEIGHT_UPDATE='bogus'"),
       "bad NCCLSHIM_WEIGHT_UPDATE -> passthrough");
    parse("ipc socket", NULL, NULL);
    ok(!P.ok, "NCCLSHIM_WEIGHT_UPDATE with two words is an error");
    parse("bogus", "nrank=1:drop", NULL);
    ok(!P.ok && has(P.error, "NCCLSHIM_WEIGHT_UPDATE") && P.nrules == 0, "two bad variables: the first error is kept");

    struct { const char *v; int strict, ok; } stricts[] = {
        { NULL, 0, 1 }, { "", 0, 1 }, { "0", 0, 1 }, { "1", 1, 1 }, { "yes", 0, 0 }, { "2", 0, 0 }, { " 1", 0, 0 },
    };
    for (size_t k = 0; k < sizeof(stricts) / sizeof(stricts[0]); k++) {
        char what[96];
        parse(NULL, NULL, stricts[k].v);
        snprintf(what, sizeof(what), "NCCLSHIM_STRICT=%s%s%s -> strict %d, %s", stricts[k].v ? "'" : "",
                 stricts[k].v ? stricts[k].v : "(unset)", stricts[k].v ? "'" : "", stricts[k].strict,
                 stricts[k].ok ? "ok" : "error");
        ok(P.strict == stricts[k].strict && P.ok == stricts[k].ok &&
               (stricts[k].ok || has(P.error, "NCCLSHIM_STRICT='")),
           "%s", what);
    }
    parse(NULL, NULL, "yes");
    run(3);
    ok(D.action == ACTION_PASSTHROUGH, "a bad NCCLSHIM_STRICT is an error, not strictness: passthrough");
}

/* As much of `big` (2-byte characters) as fits in a field of `cap` bytes, whole characters. */
static void fill(char *field, size_t cap, const char *big)
{
    snprintf(field, cap, "%.*s", (int)((cap - 1) & ~(size_t)1), big);
}

/* Maximal strings, 4096 ranks: reasons stay bounded and valid (the time is printed, not tested). */
static void test_limits(void)
{
    const int N = TEST_RANKS;
    char big[600];
    /* 2-byte UTF-8 characters so that a cut at the wrong byte shows */
    for (size_t k = 0; k + 2 < sizeof(big); k += 2)
        memcpy(big + k, "\xc3\xa9", 2);
    big[sizeof(big) - 2] = big[sizeof(big) - 1] = '\0';
    for (int i = 0; i < N; i++) {
        struct rank_facts *f = &F[i];
        struct rank_text *t = &T[i];
        memset(f, 0, sizeof(*f));
        f->text = t;
        f->rank = i;
        f->role = i % 2 ? ROLE_INFERENCE : ROLE_TRAINING;
        f->api = i % 3 ? API_CTYPES : API_TORCH;
        snprintf(f->host_id, sizeof(f->host_id), "host-%d-%.100s", i / 2, big);
        fill(t->title, sizeof(t->title), big);
        fill(t->role_reason, sizeof(t->role_reason), big);
        f->nframes = EVIDENCE_MAX_FRAMES;
        for (int k = 0; k < EVIDENCE_MAX_FRAMES; k++)
            fill(t->frames[k], sizeof(t->frames[k]), big);
    }
    parse(NULL, NULL, NULL);
    double t0 = now();
    run(N);
    double dt = now() - t0;
    ok(D.purpose == PURPOSE_WEIGHT_UPDATE && D.ntraining == N / 2 && D.ninference == N / 2 && D.nhosts == N / 2,
       "4096 ranks: counts and hosts");
    ok(bounded(D.purpose_reason, sizeof(D.purpose_reason)) && bounded(D.action_reason, sizeof(D.action_reason)),
       "4096 ranks, maximal strings: reasons bounded, valid UTF-8");
    char want[64];
    snprintf(want, sizeof(want), "(%d ranks)", N / 2);
    ok(has(D.purpose_reason, "ranks 0,2,4,") && has(D.purpose_reason, want), "long rank lists are cut with a count");
    diag("reason", D.purpose_reason);

    /* every rank unknown: the call-site scan over every frame of every rank, no match */
    for (int i = 0; i < N; i++)
        F[i].role = ROLE_UNKNOWN;
    snprintf(T[N - 1].frames[EVIDENCE_MAX_FRAMES - 1], EVIDENCE_FRAME_LEN, "%.250s update_weights", big);
    double t1 = now();
    run(N);
    dt += now() - t1;
    snprintf(want, sizeof(want), "rank %d at a weight-update call site", N - 1);
    ok(D.purpose == PURPOSE_WEIGHT_UPDATE && has(D.purpose_reason, want) &&
           bounded(D.purpose_reason, sizeof(D.purpose_reason)),
       "4096 ranks: the call site on the last frame of the last rank is found");
    diag("reason", D.purpose_reason);
    for (int i = 0; i < N; i++)
        F[i].host_id[0] = (char)('a' + i % 26);
    for (int i = 0; i < N; i++)
        F[i].host_id[1] = '\0';
    T[N - 1].frames[EVIDENCE_MAX_FRAMES - 1][0] = '\0';
    t1 = now();
    run(N);
    dt += now() - t1;
    ok(D.purpose == PURPOSE_UNKNOWN && D.nhosts == 26 && bounded(D.purpose_reason, sizeof(D.purpose_reason)),
       "4096 ranks, 26 hosts, no call site: unknown");
    diag("reason", D.purpose_reason);

    /* strict errors on every other rank, the longest root error */
    char rules[1200];
    memset(rules, 'k', 1000);
    memcpy(rules + 1000, "=1:drop", 8);
    parse(NULL, rules, "1");
    for (int i = 0; i < N; i += 2)
        F[i].strict_error = 1;
    t1 = now();
    run(N);
    dt += now() - t1;
    ok(D.action == ACTION_FAIL && bounded(D.action_reason, sizeof(D.action_reason)) &&
           has(D.action_reason, "on ranks 0,2,4"),
       "4096 ranks, strict errors, long root error: fail, reason bounded");
    diag("reason", D.action_reason);
    for (int i = 0; i < N; i++)
        F[i].strict_error = 0;

    /* a long rule source, every condition evaluated over every rank */
    char rule[4096] = "";
    for (int k = 0; k < POLICY_MAX_CONDS - 1; k++)
        snprintf(rule + strlen(rule), sizeof(rule) - strlen(rule), "callsite!~\"*%.200s*\",", "zzz-not-there");
    strcat(rule, "title~\"*\xc3\xa9\":auto");
    parse(NULL, rule, NULL);
    t1 = now();
    run(N);
    dt += now() - t1;
    ok(P.ok && D.rule == 0 && D.action == ACTION_PASSTHROUGH && bounded(D.action_reason, sizeof(D.action_reason)),
       "4096 ranks, 8 conditions scanned: rule matches, auto with no inference rank passes through");
    diag("reason", D.action_reason);
    /* A diagnostic, not a test (no timed assertions: a loaded machine, a
     * sanitizer or valgrind would fail it): bench/decision_cost.c measures. */
    printf("# decide() over 4096 ranks: %.3f s for 5 calls (diagnostic; speed: bench/decision_cost.c)\n", dt);

    /* all hosts distinct, all on one host */
    for (int i = 0; i < N; i++)
        snprintf(F[i].host_id, sizeof(F[i].host_id), "%08x-boot-id", (unsigned)(i * 2654435761u));
    run(N);
    ok(D.nhosts == N, "4096 distinct hosts");
    for (int i = 0; i < N; i++)
        snprintf(F[i].host_id, sizeof(F[i].host_id), "same");
    run(N);
    ok(D.nhosts == 1, "4096 ranks on one host");
    memset(F[7].host_id, 'y', sizeof(F[7].host_id));
    run(N);
    ok(D.nhosts == 2, "an unterminated host_id is compared within its size");
}

/* Issue 32: a communicator whose creator needs NCCL's whole API never gets ipc. */
static void test_full_api(void)
{
    parse(NULL, NULL, NULL);
    nemo_rl("h1");
    F[2].full_api = 1;
    snprintf(T[2].full_api_why, sizeof(T[2].full_api_why), "loaded library '/x/nccl/m2n/libnccl_m2n.so' matches");
    run(3);
    ok(D.purpose == PURPOSE_WEIGHT_UPDATE && D.action == ACTION_PASSTHROUGH &&
           has(D.action_reason, "all 3 ranks on one host: ipc; but rank 2's creator needs NCCL's whole API") &&
           has(D.action_reason, "libnccl_m2n"),
       "auto on one host: ipc undone, passthrough, the reason names the rank and the evidence");
    diag("reason", D.action_reason);
    parse("ipc", NULL, NULL);
    run(3);
    ok(D.action == ACTION_PASSTHROUGH && has(D.action_reason, "whole API"), "NCCLSHIM_WEIGHT_UPDATE=ipc: the same");
    parse(NULL, "purpose=weight-update:ipc", NULL);
    run(3);
    ok(D.action == ACTION_PASSTHROUGH && has(D.action_reason, "whole API"), "a rule's ipc: the same");
    parse(NULL, NULL, NULL);
    nemo_rl("h2");
    F[2].full_api = 1;
    run(3);
    ok(D.action == ACTION_SOCKET, "across hosts: the fabric action as usual (socket: no fabric said)");
    parse("drop", NULL, NULL);
    run(3);
    ok(D.action == ACTION_DROP, "an action that is not ipc is left alone");
}

/* A rank inference by vllm/_C alone (a trainer that imports vLLM, as the shim reports it). */
static void weak_rank(int i, enum api_family api, const char *host_id, const char *title)
{
    set_rank(i, ROLE_INFERENCE, api, host_id, title);
    snprintf(T[i].role_reason, sizeof(T[i].role_reason), "loaded library '/x/vllm/_C.abi3.so' matches inference "
             "pattern '*/vllm/_C*.so' (the title '%s' names no role)", title);
    F[i].engine = ENGINE_LIB | ENGINE_ROLE_BY_LIB;
}

/* Issue 43: the group's structure decides, not the names. */
static void test_structure(void)
{
    parse(NULL, NULL, NULL);
    /* TRL's shape: two vLLM workers (the engine's title), a trainer that imports vLLM */
    set_rank(0, ROLE_INFERENCE, API_CTYPES, "h1", "VLLM::Worker_TP0");
    set_rank(1, ROLE_INFERENCE, API_CTYPES, "h1", "VLLM::Worker_TP1");
    weak_rank(2, API_CTYPES, "h1", "python train.py");
    run(3);
    ok(D.purpose == PURPOSE_WEIGHT_UPDATE && D.nengine == 2 && D.nweak == 1 &&
           has(D.purpose_reason, "ranks 0-1 carry the engine's own evidence (rank 0: title 'VLLM::Worker_TP0' "
               "matches engine title pattern 'VLLM::*'), rank 2 does not (rank 2: only an engine library loaded") &&
           has(D.purpose_reason, "a bridge"),
       "engine titles on some ranks, not on the trainer: weight-update, the reason names the structure");
    diag("reason", D.purpose_reason);
    ok(D.action == ACTION_IPC && has(D.action_reason, "2 engine ranks (ranks 0-1) beside 1 other, all 3 ranks on one "
                                     "host: ipc") && !D.unrecognized[0],
       "auto: every rank reads inference, the engine's evidence shows the shape: ipc");
    diag("reason", D.action_reason);
    F[2].host_id[1] = '2';
    run(3);
    ok(D.action == ACTION_SOCKET, "across hosts: the fabric action (socket: no fabric said)");
    /* the engine's evidence in a frame (vLLM's collective_rpc), a title no pattern names */
    set_rank(0, ROLE_UNKNOWN, API_NCCL4PY, "h1", "ray::Coach.link");
    set_rank(1, ROLE_INFERENCE, API_NCCL4PY, "h1", "ray::Player.link");
    add_frame(1, "/x/nccl/core/communicator.py:441 Communicator.initialize");
    add_frame(1, "/x/heron/ext.py:20 Plug.link");
    add_frame(1, "/x/vllm/v1/serial_utils.py:486 run_method");
    run(2);
    ok(D.purpose == PURPOSE_WEIGHT_UPDATE && has(D.purpose_reason, "rank 1 carries the engine's own evidence (rank 1: "
                                                 "Python frame '/x/vllm/v1/serial_utils.py:486 run_method'"),
       "the engine's frame on one rank: weight-update");
    /* a rank's own patterns said strong (its NCCLSHIM_ENGINE_TITLES), the root's do not */
    set_rank(1, ROLE_INFERENCE, API_NCCL4PY, "h1", "acme-engine 1");
    F[1].engine = ENGINE_TITLE;
    run(2);
    ok(D.purpose == PURPOSE_WEIGHT_UPDATE && has(D.purpose_reason, "by its own NCCLSHIM_ENGINE_TITLES"),
       "the rank's own engine evidence counts");
    F[1].nframes = 0;
    add_frame(1, "/x/acme/engine/worker.py:9 Worker.rpc");
    F[1].engine = ENGINE_FRAMES;
    F[1].engine_frame = 0;
    run(2);
    ok(D.purpose == PURPOSE_WEIGHT_UPDATE &&
           has(D.purpose_reason, "Python frame '/x/acme/engine/worker.py:9 Worker.rpc' matches its own "
               "NCCLSHIM_ENGINE_FRAMES"),
       "the rank's own engine frame is quoted by its index");
    F[1].engine_frame = 5;
    run(2);
    ok(D.purpose == PURPOSE_WEIGHT_UPDATE && has(D.purpose_reason, "NCCLSHIM_ENGINE_TITLES"),
       "an engine_frame past the rank's frames is not read");
    /* controls */
    set_rank(0, ROLE_INFERENCE, API_CTYPES, "h1", "VLLM::Worker_TP0");
    set_rank(1, ROLE_INFERENCE, API_CTYPES, "h1", "VLLM::Worker_TP1");
    run(2);
    ok(D.purpose == PURPOSE_INFERENCE && D.action == ACTION_PASSTHROUGH && D.nengine == 2 && !D.unrecognized[0],
       "an engine's own group (every rank the engine's): inference, passthrough, nothing to say");
    weak_rank(0, API_TORCH, "h1", "python train.py");
    weak_rank(1, API_TORCH, "h1", "python train.py");
    run(2);
    ok(D.purpose == PURPOSE_TRAINING && D.action == ACTION_PASSTHROUGH && !D.unrecognized[0] &&
           has(D.purpose_reason, "all 2 ranks only loaded an engine library") &&
           has(D.purpose_reason, "trainers that import the engine"),
       "a trainer's world group that imports vLLM: training (not inference), passthrough");
    diag("reason", D.purpose_reason);
    weak_rank(0, API_CTYPES, "h1", "ray::Otter.pair");
    weak_rank(1, API_CTYPES, "h1", "ray::Otter.pair");
    run(2);
    ok(D.purpose == PURPOSE_TRAINING && D.action == ACTION_PASSTHROUGH, "a data channel between trainers: training");
    /* a facts from a shim before issue 43 (no engine bits): the root still reads its title */
    set_rank(0, ROLE_TRAINING, API_CTYPES, "h1", "python train.py");
    set_rank(1, ROLE_INFERENCE, API_CTYPES, "h1", "VLLM::EngineCore");
    set_rank(2, ROLE_INFERENCE, API_CTYPES, "h1", "VLLM::EngineCore");
    run(3);
    ok(D.nengine == 2 && D.purpose == PURPOSE_WEIGHT_UPDATE, "an older rank's engine title is read by the root");
}

/* Issue 43: a bridge without the evidence to redirect is loud, with the setting that would protect it. */
static void test_unrecognized(void)
{
    parse(NULL, NULL, NULL);
    /* NeMo-RL's megatron backend: a call site on both sides, no rank looks like inference */
    set_rank(0, ROLE_TRAINING, API_TORCH, "h1", "ray::MegatronPolicyWorker");
    set_rank(1, ROLE_TRAINING, API_TORCH, "h1", "ray::MegatronPolicyWorker");
    add_frame(0, "/x/nemo_rl/megatron_worker.py:10 init_collective_mcore_generation");
    add_frame(1, "/x/nemo_rl/megatron_worker.py:10 init_collective_mcore_generation");
    run(2);
    ok(D.purpose == PURPOSE_WEIGHT_UPDATE && D.action == ACTION_PASSTHROUGH &&
           has(D.unrecognized, "no rank shows an engine's side") &&
           has(D.unrecognized, "set NCCLSHIM_ROLE=inference in the engine workers' processes (rank 1, title "
               "'ray::MegatronPolicyWorker': their ranks usually come last)"),
       "weight-update by call site, no engine side: unrecognized, naming NCCLSHIM_ROLE=inference");
    diag("unrecognized", D.unrecognized);
    /* a call site where every rank reads inference (a trainer that imports vLLM beside an engine
     * that shows nothing of its own) */
    weak_rank(0, API_CTYPES, "h1", "python train.py");
    weak_rank(1, API_CTYPES, "h1", "ray::Zebra.run");
    F[1].engine = 0;
    add_frame(0, "/x/acme/sync.py:5 update_weights");
    run(2);
    ok(D.purpose == PURPOSE_WEIGHT_UPDATE && D.action == ACTION_PASSTHROUGH &&
           has(D.unrecognized, "set NCCLSHIM_ROLE=training in the trainer's processes"),
       "weight-update by call site, every rank inference: unrecognized, naming NCCLSHIM_ROLE=training");
    /* an engine library on some ranks only, no engine title or frame anywhere */
    weak_rank(0, API_CTYPES, "h1", "ray::Owl.run");
    set_rank(1, ROLE_UNKNOWN, API_CTYPES, "h1", "ray::Lark.run");
    run(2);
    ok(D.action == ACTION_PASSTHROUGH && has(D.unrecognized, "rank 0 loaded an engine library and 1 rank did not") &&
           has(D.unrecognized, "NCCLSHIM_ROLE=inference in the engine's processes (rank 0, title 'ray::Owl.run', if "
               "the engine runs there)"),
       "an engine library on one side only: unrecognized");
    diag("unrecognized", D.unrecognized);
    /* the policy's own choices are not unrecognized */
    parse("passthrough", NULL, NULL);
    run(2);
    ok(!D.unrecognized[0], "NCCLSHIM_WEIGHT_UPDATE=passthrough: the user chose it");
    parse(NULL, "nranks=2:passthrough", NULL);
    run(2);
    ok(!D.unrecognized[0], "a rule chose passthrough: nothing to say");
    parse(NULL, NULL, NULL);
    nemo_rl("h1");
    run(3);
    ok(!D.unrecognized[0] && D.action == ACTION_IPC, "a named stack, redirected: nothing to say");
}

int main(void)
{
    test_structure();
    test_unrecognized();
    test_names();
    test_full_api();
    test_purpose();
    test_actions();
    test_rules();
    test_errors();
    test_limits();
    return tap_done();
}
