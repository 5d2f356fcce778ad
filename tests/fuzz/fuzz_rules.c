/* libFuzzer harness for policy/rules.c and policy/decide.c: the input holds the
 * three variables NCCLSHIM_WEIGHT_UPDATE, NCCLSHIM_RULES and NCCLSHIM_STRICT,
 * separated by the first two NUL bytes (a missing part is unset).  Each is parsed,
 * then decide() runs on a few fixed communicators; every invariant of the
 * result is checked (a broken one traps).
 *   clang -g -O1 -fsanitize=fuzzer,address,undefined -Ipolicy -o tests/bin/fuzz_rules \
 *     tests/fuzz/fuzz_rules.c policy/decide.c policy/rules.c policy/classify.c policy/pattern.c
 *   tests/bin/fuzz_rules -max_total_time=120 tests/fuzz/corpus/rules */
#include "decide.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define CHECK(c)                                                                                                       \
    do {                                                                                                               \
        if (!(c)) {                                                                                                    \
            fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #c);                                    \
            __builtin_trap();                                                                                          \
        }                                                                                                              \
    } while (0)

#define NSETS 5
static struct rank_facts *sets[NSETS];
static int set_nranks[NSETS] = { 3, 4, 2, 1, 64 };

static void rank(struct rank_facts *f, int i, enum role role, enum api_family api, const char *host, const char *title,
                 const char *frame)
{
    /* Kept for the fuzzer's life, like the sets (reachable through f->text). */
    struct rank_text *t = calloc(1, sizeof(*t));
    CHECK(t != NULL);
    memset(f, 0, sizeof(*f));
    f->text = t;
    f->rank = i;
    f->role = role;
    f->api = api;
    snprintf(f->host_id, sizeof(f->host_id), "%s", host);
    snprintf(t->title, sizeof(t->title), "%s", title);
    snprintf(t->role_reason, sizeof(t->role_reason), "process title '%s' matches a pattern", title);
    if (frame) {
        f->nframes = 2;
        snprintf(t->frames[0], sizeof(t->frames[0]), "/x/pynccl.py:99 __init__");
        snprintf(t->frames[1], sizeof(t->frames[1]), "%s", frame);
    }
}

static void setup(void)
{
    for (int s = 0; s < NSETS; s++)
        sets[s] = calloc((size_t)set_nranks[s], sizeof(struct rank_facts));
    /* NeMo-RL: trainer ranks (torch), one vLLM rank (ctypes) */
    rank(&sets[0][0], 0, ROLE_TRAINING, API_TORCH, "h1", "ray::DTensorPolicyWorker", NULL);
    rank(&sets[0][1], 1, ROLE_TRAINING, API_TORCH, "h1", "ray::DTensorPolicyWorker", NULL);
    rank(&sets[0][2], 2, ROLE_INFERENCE, API_CTYPES, "h2", "ray::VllmGenerationWorker", NULL);
    /* vLLM tensor parallel: every rank inference */
    for (int i = 0; i < 4; i++)
        rank(&sets[1][i], i, ROLE_INFERENCE, API_CTYPES, "h1", "ray::VllmGenerationWorker", NULL);
    /* unknown roles, a weight-update call site */
    rank(&sets[2][0], 0, ROLE_UNKNOWN, API_NCCL4PY, "", "python sync.py", "/x/rl.py:7 update_weights");
    rank(&sets[2][1], 1, ROLE_UNKNOWN, API_CUPY, "", "python sync.py", NULL);
    /* one torch rank */
    rank(&sets[3][0], 0, ROLE_UNKNOWN, API_TORCH, "h1", "python train.py", NULL);
    /* a mixed crowd over 8 hosts, long strings, strict errors */
    for (int i = 0; i < 64; i++) {
        char host[16], title[300];
        snprintf(host, sizeof(host), "host%d", i % 8);
        memset(title, 'a' + i % 26, sizeof(title) - 1);
        title[sizeof(title) - 1] = '\0';
        rank(&sets[4][i], i, (enum role)(i % 4), (enum api_family)(i % 6), host, title,
             i % 5 ? NULL : "/x/model_update.py:1 run");
        sets[4][i].strict_error = i == 63;
    }
}

static int terminated(const char *s, size_t cap)
{
    return memchr(s, '\0', cap) != NULL;
}

static void check_policy(const struct policy *p)
{
    CHECK(p->ok == 0 || p->ok == 1);
    CHECK(terminated(p->error, sizeof(p->error)));
    CHECK(p->ok ? p->error[0] == '\0' : p->error[0] != '\0');
    CHECK(p->strict == 0 || p->strict == 1);
    CHECK((int)p->weight_update >= WU_AUTO && p->weight_update <= WU_FRUGAL);
    CHECK(p->nrules >= 0 && p->nrules <= POLICY_MAX_RULES);
    for (int r = 0; r < p->nrules; r++) {
        const struct rule *rule = &p->rules[r];
        CHECK(rule->ncond >= 0 && rule->ncond <= POLICY_MAX_CONDS);
        CHECK(rule->action == ACTION_PASSTHROUGH || rule->action == ACTION_SOCKET || rule->action == ACTION_DROP ||
              rule->action == ACTION_IPC || rule->action == ACTION_FRUGAL || rule->action == ACTION_COUNT);
        CHECK(terminated(rule->source, sizeof(rule->source)) && rule->source[0]);
        for (int c = 0; c < rule->ncond; c++)
            CHECK(terminated(rule->cond[c].text, sizeof(rule->cond[c].text)));
    }
}

static void check_decision(const struct policy *p, const struct decision *d, int nranks)
{
    CHECK((int)d->purpose >= PURPOSE_UNKNOWN && d->purpose <= PURPOSE_INFERENCE);
    CHECK((int)d->action >= 0 && d->action < ACTION_COUNT);
    CHECK(terminated(d->purpose_reason, sizeof(d->purpose_reason)) && d->purpose_reason[0]);
    CHECK(terminated(d->action_reason, sizeof(d->action_reason)) && d->action_reason[0]);
    CHECK(d->rule >= -1 && d->rule < p->nrules);
    CHECK(d->rule < 0 || p->ok);
    CHECK(p->ok || d->action == ACTION_PASSTHROUGH || d->action == ACTION_FAIL);
    CHECK(d->ntraining + d->ninference + d->nunknown == nranks);
    CHECK(d->nhosts >= 1 && d->nhosts <= nranks);
}

static struct policy p1, p2;

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!sets[0])
        setup();
    char *buf = malloc(size + 1);
    if (!buf)
        return 0;
    memcpy(buf, data, size);
    buf[size] = '\0';
    /* up to three NUL-separated parts; a part not there is unset (NULL) */
    const char *part[3] = { NULL, NULL, NULL };
    size_t at = 0;
    for (int k = 0; k < 3 && at <= size; k++) {
        part[k] = buf + at;
        at += strlen(buf + at) + 1;
    }
    policy_parse(&p1, part[0], part[1], part[2]);
    check_policy(&p1);
    policy_parse(&p2, part[0], part[1], part[2]);
    CHECK(memcmp(&p1, &p2, sizeof(p1)) == 0); /* deterministic, every byte written */

    static const struct policy_patterns defaults = { 0 };
    static const struct policy_patterns custom = { .weight_update_callsites = "*sync*,,[a-,*run" };
    struct decision d;
    for (int s = 0; s < NSETS; s++) {
        decide(&p1, s % 2 ? &custom : &defaults, sets[s], set_nranks[s], &d);
        check_decision(&p1, &d, set_nranks[s]);
        if (d.rule >= 0)
            CHECK(policy_match_rules(&p1, &d, sets[s], set_nranks[s]) == d.rule);
    }
    decide(&p1, NULL, NULL, 0, &d); /* no ranks: rules still apply (e.g. '*:drop') */
    CHECK(d.purpose == PURPOSE_UNKNOWN && d.nhosts == 0 && (int)d.action >= 0 && d.action < ACTION_COUNT);
    CHECK(terminated(d.action_reason, sizeof(d.action_reason)) && d.action_reason[0]);
    free(buf);
    return 0;
}
