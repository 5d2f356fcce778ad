/*
 * Where a communicator's purpose and action are decided, at the root, from
 * the facts of all its ranks and the root's policy (NCCLSHIM_WEIGHT_UPDATE,
 * NCCLSHIM_RULES, NCCLSHIM_STRICT).  Pure functions: no I/O, no NCCL, no CUDA.
 * docs/policy.md documents every rule.
 */
#ifndef NCCLSHIM_POLICY_DECIDE_H
#define NCCLSHIM_POLICY_DECIDE_H

#include "facts.h"

#include <stddef.h>

enum action { ACTION_PASSTHROUGH = 0, ACTION_SOCKET, ACTION_DROP, ACTION_IPC, ACTION_FAIL, ACTION_COUNT };

/* NCCLSHIM_WEIGHT_UPDATE */
enum wu_policy { WU_AUTO = 0, WU_IPC, WU_SOCKET, WU_DROP, WU_PASSTHROUGH };

/* The most ranks the shim's ipc chain takes (shim/rv_wire.h RV_MAX_PEERS: a
 * counter per peer; shim/rv_server.c asserts they agree).  auto chooses socket
 * for more ranks on one host. */
#define POLICY_IPC_MAX_RANKS 64

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

const char *action_name(enum action a);
/* -1 if `s` names no action. */
int action_from_name(const char *s);

/*
 * Parse the three variables (each may be NULL: unset).  Never fails: a bad
 * value sets p->ok = 0 and p->error; the other variables are still parsed.
 * Error format: "NCCLSHIM_RULES: position 14 (near 'nrank>2'): unknown key 'nrank' (keys: ...)".
 */
void policy_parse(struct policy *p, const char *weight_update, const char *rules, const char *strict);

/* What the root decides for one communicator. */
struct decision {
    enum purpose purpose;
    char purpose_reason[EVIDENCE_REASON_LEN];
    enum action action;
    char action_reason[EVIDENCE_REASON_LEN];
    int rule;                           /* index of the NCCLSHIM_RULES rule that matched, or -1 */
    int ntraining, ninference, nunknown;/* ranks per role */
    int nhosts;                         /* distinct host_id values */
};

/*
 * Purpose from the merged facts, then the action.  `facts` holds nranks
 * entries, index = rank.  `pp` gives the root's patterns (for call sites).
 */
void decide(const struct policy *p, const struct policy_patterns *pp, const struct rank_facts *facts, int nranks,
            struct decision *out);

/*
 * Index of the first NCCLSHIM_RULES rule whose conditions all hold for a
 * communicator, or -1 (also when !p->ok).  `d` gives what decide() has already
 * worked out (purpose, role counts, nhosts); `facts` (nranks entries) answers
 * api, title and callsite conditions.  decide() calls it; exposed for tests.
 */
int policy_match_rules(const struct policy *p, const struct decision *d, const struct rank_facts *facts,
                       int nranks);

#endif
