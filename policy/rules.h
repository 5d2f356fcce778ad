/*
 * Where the root's policy is parsed (NCCLSHIM_WEIGHT_UPDATE, NCCLSHIM_RULES,
 * NCCLSHIM_STRICT) and NCCLSHIM_RULES rules are matched: policy/rules.c.
 * Pure: no I/O, no NCCL, no CUDA.  docs/policy.md documents the grammar.
 */
#ifndef NCCLSHIM_POLICY_RULES_H
#define NCCLSHIM_POLICY_RULES_H

#include "action.h"
#include "facts.h"

/* NCCLSHIM_WEIGHT_UPDATE */
enum wu_policy { WU_AUTO = 0, WU_IPC, WU_SOCKET, WU_DROP, WU_PASSTHROUGH, WU_FRUGAL };

#define POLICY_MAX_RULES 32
#define POLICY_MAX_CONDS 8
#define POLICY_VALUE_LEN 256
#define POLICY_ERROR_LEN 512

/* One parsed NCCLSHIM_RULES rule: all conditions must hold (an empty list always does). */
struct rule_cond {
    int key;                            /* enum rule_key in rules.c */
    int op;                             /* enum rule_op in rules.c */
    long num;                           /* integer keys */
    char text[POLICY_VALUE_LEN];        /* enum names and globs */
};
struct rule {
    int ncond;
    struct rule_cond cond[POLICY_MAX_CONDS];
    enum action action;                 /* ACTION_IPC..; "auto" is stored as ACTION_COUNT */
    char source[POLICY_VALUE_LEN];      /* the rule as written, for reasons */
};

struct policy {
    enum wu_policy weight_update;
    int nrules;
    struct rule rules[POLICY_MAX_RULES];
    int strict;                         /* NCCLSHIM_STRICT=1 */
    /* 0 if any variable was malformed; then `error` names the variable, the
     * position and the problem, and decide() passes everything through (or
     * fails it, when strict). */
    int ok;
    char error[POLICY_ERROR_LEN];
};


/*
 * Parse the three variables (each may be NULL: unset).  Never fails: a bad
 * value sets p->ok = 0 and p->error; the other variables are still parsed.
 * Error format: "NCCLSHIM_RULES: position 14 (near 'nrank>2'): unknown key 'nrank' (keys: ...)".
 */
void policy_parse(struct policy *p, const char *weight_update, const char *rules, const char *strict);

struct decision;

/*
 * Index of the first NCCLSHIM_RULES rule whose conditions all hold for a
 * communicator, or -1 (also when !p->ok).  `d` gives what decide() has already
 * worked out (purpose, role counts, nhosts); `facts` (nranks entries) answers
 * api, title and callsite conditions.  decide() calls it; exposed for tests.
 */
int policy_match_rules(const struct policy *p, const struct decision *d, const struct rank_facts *facts,
                       int nranks);

#endif
