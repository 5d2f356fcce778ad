/*
 * The root's policy: NCCLSHIM_WEIGHT_UPDATE, NCCLSHIM_RULES and NCCLSHIM_STRICT
 * parsed into a struct policy, and NCCLSHIM_RULES rules matched against a
 * communicator.  docs/policy.md documents the grammar and every message.
 */
#define _GNU_SOURCE
#include "rules.h"

#include "decide.h"

#include <fnmatch.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

enum rule_key { KEY_PURPOSE, KEY_NRANKS, KEY_HOSTS, KEY_TRAINING, KEY_INFERENCE, KEY_UNKNOWN, KEY_API, KEY_TITLE,
                KEY_CALLSITE, KEY_COUNT };
enum rule_op { OP_EQ, OP_NE, OP_LT, OP_LE, OP_GT, OP_GE, OP_MATCH, OP_NOMATCH, OP_COUNT };

#define OPS_ENUM ((1u << OP_EQ) | (1u << OP_NE))
#define OPS_INT (OPS_ENUM | (1u << OP_LT) | (1u << OP_LE) | (1u << OP_GT) | (1u << OP_GE))
#define OPS_GLOB ((1u << OP_MATCH) | (1u << OP_NOMATCH))

enum value_kind { VAL_ENUM, VAL_INT, VAL_GLOB };

static const struct {
    const char *name;
    enum value_kind kind;
    unsigned ops;
    const char *ops_text;
} keys[KEY_COUNT] = {
    [KEY_PURPOSE] = { "purpose", VAL_ENUM, OPS_ENUM, "= !=" },
    [KEY_NRANKS] = { "nranks", VAL_INT, OPS_INT, "= != < <= > >=" },
    [KEY_HOSTS] = { "hosts", VAL_INT, OPS_INT, "= != < <= > >=" },
    [KEY_TRAINING] = { "training", VAL_INT, OPS_INT, "= != < <= > >=" },
    [KEY_INFERENCE] = { "inference", VAL_INT, OPS_INT, "= != < <= > >=" },
    [KEY_UNKNOWN] = { "unknown", VAL_INT, OPS_INT, "= != < <= > >=" },
    [KEY_API] = { "api", VAL_ENUM, OPS_ENUM, "= !=" },
    [KEY_TITLE] = { "title", VAL_GLOB, OPS_GLOB, "~ !~" },
    [KEY_CALLSITE] = { "callsite", VAL_GLOB, OPS_GLOB, "~ !~" },
};
#define KEYS_TEXT "purpose, nranks, hosts, training, inference, unknown, api, title, callsite"

/* Longest first, so that "<=" is not read as "<". */
static const struct { const char *text; enum rule_op op; } ops[] = {
    { "!=", OP_NE }, { "!~", OP_NOMATCH }, { "<=", OP_LE }, { ">=", OP_GE },
    { "=", OP_EQ }, { "<", OP_LT }, { ">", OP_GT }, { "~", OP_MATCH },
};

static const char *const purposes[] = { [PURPOSE_UNKNOWN] = "unknown", [PURPOSE_TRAINING] = "training",
                                        [PURPOSE_WEIGHT_UPDATE] = "weight-update",
                                        [PURPOSE_INFERENCE] = "inference" };
#define PURPOSES_TEXT "training, weight-update, inference, unknown"
static const char *const apis[] = { [API_OTHER] = "other", [API_TORCH] = "torch", [API_CTYPES] = "ctypes",
                                    [API_NCCL4PY] = "nccl4py", [API_CUPY] = "cupy" };
#define APIS_TEXT "torch, ctypes, nccl4py, cupy, other"
#define ACTIONS_TEXT "passthrough, socket, frugal, drop, ipc, auto"
#define NELEM(a) (sizeof(a) / sizeof((a)[0]))

static int is_space(char c)
{
    return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f';
}

static int is_word(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-';
}

/* Copy at most `max` bytes of s[0..n) into out (size > max), printable: white
 * space becomes ' ', other control bytes '?', and a cut never splits a UTF-8 sequence. */
static void quote_bytes(char *out, const char *s, size_t n, size_t max)
{
    if (n > max) {
        n = max;
        while (n > 0 && ((unsigned char)s[n] & 0xC0) == 0x80)
            n--;
    }
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        out[i] = is_space((char)c) ? ' ' : c < 0x20 || c == 0x7f ? '?' : (char)c;
    }
    out[n] = '\0';
}

static void set_error(struct policy *p, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void set_error(struct policy *p, const char *fmt, ...)
{
    if (!p->ok)
        return; /* the first error is the one reported */
    p->ok = 0;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(p->error, sizeof(p->error), fmt, ap);
    va_end(ap);
}

/* ---- NCCLSHIM_RULES parser ---- */

struct parser {
    const char *s;
    size_t len, i;
    struct policy *p;
    int failed;
};

static int fail_at(struct parser *ps, size_t pos, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int fail_at(struct parser *ps, size_t pos, const char *fmt, ...)
{
    char problem[POLICY_ERROR_LEN], near[64];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(problem, sizeof(problem), fmt, ap);
    va_end(ap);
    if (pos > ps->len)
        pos = ps->len;
    quote_bytes(near, ps->s + pos, ps->len - pos, 20);
    set_error(ps->p, "NCCLSHIM_RULES: position %zu (near '%s'): %s", pos + 1, near, problem);
    ps->failed = 1;
    return -1;
}

static void skip_space(struct parser *ps)
{
    while (ps->i < ps->len && is_space(ps->s[ps->i]))
        ps->i++;
}

static char peek(const struct parser *ps)
{
    return ps->i < ps->len ? ps->s[ps->i] : '\0';
}

/* A word ([A-Za-z0-9_-]+) at the cursor, for messages and lookups. */
static size_t word_len(const struct parser *ps)
{
    size_t n = 0;
    while (ps->i + n < ps->len && is_word(ps->s[ps->i + n]))
        n++;
    return n;
}

static int word_is(const char *w, size_t n, const char *name)
{
    return strlen(name) == n && strncasecmp(w, name, n) == 0;
}

static const char *hint_for(char c)
{
    return c == ':' ? " (a value that contains ':', ',' or ';' must be quoted, e.g. title~\"ray::*\")" : "";
}

/* Reads a value (quoted or bare) into out; returns its length or -1. */
static int parse_value(struct parser *ps, char out[POLICY_VALUE_LEN], const char *key, const char *op)
{
    size_t start = ps->i, n = 0;
    if (peek(ps) == '"') {
        ps->i++;
        for (;;) {
            if (ps->i >= ps->len)
                return fail_at(ps, start, "unterminated quoted value (a '\"' opens it and none closes it)");
            char c = ps->s[ps->i++];
            if (c == '"')
                break;
            if (c == '\\' && ps->i < ps->len && (ps->s[ps->i] == '"' || ps->s[ps->i] == '\\'))
                c = ps->s[ps->i++];
            if (n + 1 >= POLICY_VALUE_LEN)
                return fail_at(ps, start, "value longer than %d bytes", POLICY_VALUE_LEN - 1);
            out[n++] = c;
        }
        out[n] = '\0';
        skip_space(ps);
        char c = peek(ps);
        if (c && c != ',' && c != ':' && c != ';')
            return fail_at(ps, ps->i, "unexpected text after a quoted value (expected ',', ':' or ';')");
        return (int)n;
    }
    size_t end = ps->i;
    while (end < ps->len && ps->s[end] != ',' && ps->s[end] != ':' && ps->s[end] != ';') {
        if (ps->s[end] == '"')
            return fail_at(ps, end, "'\"' inside an unquoted value (quote the whole value)");
        end++;
    }
    size_t stop = end;
    while (stop > start && is_space(ps->s[stop - 1]))
        stop--;
    if (stop == start)
        return fail_at(ps, start, "missing value after '%s%s'", key, op);
    if (stop - start >= POLICY_VALUE_LEN)
        return fail_at(ps, start, "value longer than %d bytes", POLICY_VALUE_LEN - 1);
    memcpy(out, ps->s + start, stop - start);
    out[stop - start] = '\0';
    ps->i = end;
    return (int)(stop - start);
}

static int lookup(const char *const *names, size_t count, const char *v)
{
    for (size_t k = 0; k < count; k++)
        if (names[k] && strcasecmp(v, names[k]) == 0)
            return (int)k;
    return -1;
}

static int parse_cond(struct parser *ps, struct rule_cond *c)
{
    size_t kpos = ps->i;
    size_t n = word_len(ps);
    char shown[64];
    if (n == 0) {
        char ch = peek(ps);
        if (ch == '*')
            return fail_at(ps, kpos, "'*' stands alone: write '*:ACTION'");
        if (!ch || ch == ';' || ch == ',' || ch == ':')
            return fail_at(ps, kpos, "missing condition: expected a key or '*' (keys: " KEYS_TEXT ")");
        return fail_at(ps, kpos, "expected a key or '*' (keys: " KEYS_TEXT ")");
    }
    int key = -1;
    for (int k = 0; k < KEY_COUNT; k++)
        if (word_is(ps->s + kpos, n, keys[k].name))
            key = k;
    if (key < 0) {
        quote_bytes(shown, ps->s + kpos, n, 40);
        return fail_at(ps, kpos, "unknown key '%s' (keys: " KEYS_TEXT ")", shown);
    }
    ps->i += n;
    skip_space(ps);
    size_t opos = ps->i;
    int op = -1;
    const char *optext = "";
    for (size_t k = 0; k < NELEM(ops); k++) {
        size_t ol = strlen(ops[k].text);
        if (ps->len - ps->i >= ol && memcmp(ps->s + ps->i, ops[k].text, ol) == 0) {
            op = ops[k].op;
            optext = ops[k].text;
            break;
        }
    }
    if (op < 0)
        return fail_at(ps, opos, "expected an operator after '%s' (%s takes %s)", keys[key].name, keys[key].name,
                       keys[key].ops_text);
    if (!(keys[key].ops & (1u << op)))
        return fail_at(ps, opos, "operator '%s' does not apply to %s (%s takes %s)", optext, keys[key].name,
                       keys[key].name, keys[key].ops_text);
    ps->i += strlen(optext);
    if (op == OP_EQ && peek(ps) == '=')
        return fail_at(ps, opos, "'==': the operator is '='");
    skip_space(ps);
    size_t vpos = ps->i;
    if (parse_value(ps, c->text, keys[key].name, optext) < 0)
        return -1;
    c->key = key;
    c->op = op;
    c->num = 0;
    quote_bytes(shown, c->text, strlen(c->text), 40);
    switch (keys[key].kind) {
    case VAL_ENUM:
        c->num = key == KEY_PURPOSE ? lookup(purposes, NELEM(purposes), c->text) : lookup(apis, NELEM(apis), c->text);
        if (c->num < 0)
            return fail_at(ps, vpos, key == KEY_PURPOSE ? "unknown purpose '%s' (purposes: " PURPOSES_TEXT ")"
                                                        : "unknown api '%s' (apis: " APIS_TEXT ")",
                           shown);
        /* stored as written in docs and reasons */
        snprintf(c->text, sizeof(c->text), "%s", key == KEY_PURPOSE ? purposes[c->num] : apis[c->num]);
        break;
    case VAL_INT: {
        long v = 0;
        const char *t = c->text;
        if (!*t)
            return fail_at(ps, vpos, "'%s' is not a non-negative decimal integer", shown);
        for (; *t; t++) {
            if (*t < '0' || *t > '9')
                return fail_at(ps, vpos, "'%s' is not a non-negative decimal integer", shown);
            v = v * 10 + (*t - '0');
            if (v > INT_MAX)
                return fail_at(ps, vpos, "integer '%s' out of range (0..%d)", shown, INT_MAX);
        }
        c->num = v;
        break;
    }
    case VAL_GLOB:
        break;
    }
    return 0;
}

/* The rule's text from `from` to `to`, for reasons; cut with "..." if longer than fits. */
static void set_source(struct rule *r, const char *s, size_t n)
{
    if (n < sizeof(r->source)) {
        quote_bytes(r->source, s, n, n);
        return;
    }
    quote_bytes(r->source, s, n, sizeof(r->source) - 4);
    strcat(r->source, "...");
}

static int parse_rule(struct parser *ps, struct rule *r)
{
    size_t start = ps->i;
    memset(r, 0, sizeof(*r));
    if (peek(ps) == '*') {
        ps->i++;
        skip_space(ps);
        if (peek(ps) != ':')
            return fail_at(ps, ps->i, "'*' stands alone: write '*:ACTION'");
    } else {
        for (;;) {
            if (r->ncond == POLICY_MAX_CONDS)
                return fail_at(ps, ps->i, "more than %d conditions in one rule", POLICY_MAX_CONDS);
            if (parse_cond(ps, &r->cond[r->ncond]) < 0)
                return -1;
            r->ncond++;
            skip_space(ps);
            char c = peek(ps);
            if (c == ',') {
                ps->i++;
                skip_space(ps);
                continue;
            }
            if (c == ':')
                break;
            if (!c || c == ';')
                return fail_at(ps, ps->i, "missing ':ACTION' after the conditions (actions: " ACTIONS_TEXT ")");
            return fail_at(ps, ps->i, "expected ',' or ':' after a condition");
        }
    }
    ps->i++; /* ':' */
    skip_space(ps);
    size_t apos = ps->i;
    size_t n = word_len(ps);
    char c = peek(ps);
    if (n == 0) {
        if (!c || c == ';')
            return fail_at(ps, apos, "missing action after ':' (actions: " ACTIONS_TEXT ")");
        return fail_at(ps, apos, "expected an action (actions: " ACTIONS_TEXT ")%s", hint_for(c));
    }
    const char *w = ps->s + apos;
    if (word_is(w, n, "auto"))
        r->action = ACTION_COUNT;
    else if (word_is(w, n, "passthrough"))
        r->action = ACTION_PASSTHROUGH;
    else if (word_is(w, n, "socket"))
        r->action = ACTION_SOCKET;
    else if (word_is(w, n, "frugal"))
        r->action = ACTION_FRUGAL;
    else if (word_is(w, n, "drop"))
        r->action = ACTION_DROP;
    else if (word_is(w, n, "ipc"))
        r->action = ACTION_IPC;
    else if (word_is(w, n, "fail"))
        return fail_at(ps, apos, "a rule cannot choose 'fail' (actions: " ACTIONS_TEXT ")");
    else {
        char shown[64];
        quote_bytes(shown, w, n, 40);
        return fail_at(ps, apos, "unknown action '%s' (actions: " ACTIONS_TEXT ")", shown);
    }
    ps->i += n;
    size_t end = ps->i;
    skip_space(ps);
    c = peek(ps);
    if (c && c != ';')
        return fail_at(ps, ps->i, "unexpected text after the action (rules are separated by ';')%s", hint_for(c));
    set_source(r, ps->s + start, end - start);
    return 0;
}

static void parse_rules(struct policy *p, const char *s)
{
    struct parser ps = { s, strlen(s), 0, p, 0 };
    for (;;) {
        skip_space(&ps);
        char c = peek(&ps);
        if (!c)
            break;
        if (c == ';') { /* empty rule */
            ps.i++;
            continue;
        }
        if (p->nrules == POLICY_MAX_RULES) {
            fail_at(&ps, ps.i, "more than %d rules", POLICY_MAX_RULES);
            break;
        }
        if (parse_rule(&ps, &p->rules[p->nrules]) < 0)
            break;
        p->nrules++;
    }
    if (ps.failed) {
        p->nrules = 0; /* no partial rule set */
        memset(p->rules, 0, sizeof(p->rules));
    }
}

void policy_parse(struct policy *p, const char *weight_update, const char *rules, const char *strict)
{
    memset(p, 0, sizeof(*p));
    p->weight_update = WU_AUTO;
    p->ok = 1;

    if (weight_update && *weight_update) {
        static const char *const names[] = { [WU_AUTO] = "auto", [WU_IPC] = "ipc", [WU_SOCKET] = "socket",
                                             [WU_DROP] = "drop", [WU_PASSTHROUGH] = "passthrough",
                                             [WU_FRUGAL] = "frugal" };
        const char *b = weight_update, *e = weight_update + strlen(weight_update);
        while (b < e && is_space(*b))
            b++;
        while (e > b && is_space(e[-1]))
            e--;
        int found = -1;
        for (size_t k = 0; k < NELEM(names); k++)
            if (word_is(b, (size_t)(e - b), names[k]))
                found = (int)k;
        if (found >= 0) {
            p->weight_update = (enum wu_policy)found;
        } else {
            char shown[80];
            quote_bytes(shown, weight_update, strlen(weight_update), 60);
            set_error(p, "NCCLSHIM_WEIGHT_UPDATE='%s': not one of auto, ipc, socket, frugal, drop, passthrough", shown);
        }
    }
    if (rules)
        parse_rules(p, rules);
    if (strict && *strict && strcmp(strict, "0") != 0) {
        if (strcmp(strict, "1") == 0) {
            p->strict = 1;
        } else {
            char shown[80];
            quote_bytes(shown, strict, strlen(strict), 60);
            set_error(p, "NCCLSHIM_STRICT='%s': not 0 or 1", shown);
        }
    }
}

/* ---- matching ---- */

/* A fixed-size field of the facts, as a string ("" if it is not terminated). */
static const char *field(const char *s, size_t cap)
{
    return memchr(s, '\0', cap) ? s : "";
}

static int compare(long have, int op, long want)
{
    switch (op) {
    case OP_EQ: return have == want;
    case OP_NE: return have != want;
    case OP_LT: return have < want;
    case OP_LE: return have <= want;
    case OP_GT: return have > want;
    case OP_GE: return have >= want;
    default: return 0;
    }
}

static int any_title(const struct rank_facts *facts, int nranks, const char *glob)
{
    for (int i = 0; i < nranks; i++)
        if (fnmatch(glob, field(facts[i].text->title, sizeof(facts[i].text->title)), FNM_CASEFOLD) == 0)
            return 1;
    return 0;
}

static int any_callsite(const struct rank_facts *facts, int nranks, const char *glob)
{
    for (int i = 0; i < nranks; i++) {
        if (i > 0 && facts_same_frames(&facts[i], &facts[i - 1]))
            continue; /* matched nothing as rank i-1 */
        int nf = facts[i].nframes < 0 ? 0 : facts[i].nframes > EVIDENCE_MAX_FRAMES ? EVIDENCE_MAX_FRAMES
                                                                                      : facts[i].nframes;
        for (int f = 0; f < nf; f++)
            if (fnmatch(glob, field(facts[i].text->frames[f], sizeof(facts[i].text->frames[f])), FNM_CASEFOLD) == 0)
                return 1;
    }
    return 0;
}

static int any_api(const struct rank_facts *facts, int nranks, long api)
{
    for (int i = 0; i < nranks; i++)
        if ((long)facts[i].api == api)
            return 1;
    return 0;
}

static int cond_holds(const struct rule_cond *c, const struct decision *d, const struct rank_facts *facts,
                      int nranks)
{
    switch (c->key) {
    case KEY_PURPOSE: return (c->op == OP_EQ) == ((long)d->purpose == c->num);
    case KEY_NRANKS: return compare(nranks, c->op, c->num);
    case KEY_HOSTS: return compare(d->nhosts, c->op, c->num);
    case KEY_TRAINING: return compare(d->ntraining, c->op, c->num);
    case KEY_INFERENCE: return compare(d->ninference, c->op, c->num);
    case KEY_UNKNOWN: return compare(d->nunknown, c->op, c->num);
    case KEY_API: return (c->op == OP_EQ) == any_api(facts, nranks, c->num);
    case KEY_TITLE: return (c->op == OP_MATCH) == any_title(facts, nranks, c->text);
    case KEY_CALLSITE: return (c->op == OP_MATCH) == any_callsite(facts, nranks, c->text);
    default: return 0;
    }
}

int policy_match_rules(const struct policy *p, const struct decision *d, const struct rank_facts *facts,
                       int nranks)
{
    if (!p->ok)
        return -1;
    if (!facts || nranks < 0)
        nranks = 0;
    for (int r = 0; r < p->nrules && r < POLICY_MAX_RULES; r++) {
        const struct rule *rule = &p->rules[r];
        int holds = 1;
        for (int k = 0; holds && k < rule->ncond && k < POLICY_MAX_CONDS; k++)
            holds = cond_holds(&rule->cond[k], d, facts, nranks);
        if (holds)
            return r;
    }
    return -1;
}
