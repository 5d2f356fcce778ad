/*
 * What each action is, as every layer needs to know it: its name and the
 * traits the decision, the rendezvous and the shim go by (policy/action.c,
 * one row an action).  What an action does is its own file in shim/action/.
 * Pure data: no NCCL, no CUDA.
 */
#ifndef NCCLSHIM_POLICY_ACTION_H
#define NCCLSHIM_POLICY_ACTION_H

/* The values travel in the rendezvous's verdicts: new actions go last, so
 * that a shim of an older release reads the old ones as before (and refuses
 * a newer one as out of range, as its wire check says). */
enum action { ACTION_PASSTHROUGH = 0, ACTION_SOCKET, ACTION_DROP, ACTION_IPC, ACTION_FAIL, ACTION_FRUGAL, ACTION_COUNT };

enum action_trait {
    /* NCCL makes the communicator and the application holds NCCL's own
     * pointer (docs/design.md, "Handles"). */
    ACT_NCCL_MADE = 1u << 0,
    /* No NCCL communicator: the application holds a handle of the shim's,
     * which answers every function on it (docs/design.md, "Handles"). */
    ACT_SHIM_ONLY = 1u << 7,
    /* NCCL gets the shim's copy of the caller's config, not the caller's. */
    ACT_CONFIGURES = 1u << 1,
    /* Every rank sets it up and votes before the root commits it; without
     * this trait a verdict is final as soon as it is decided. */
    ACT_SET_UP = 1u << 2,
    /* Its set-up is local to a rank: each says in its HELLO whether it can,
     * and the root commits in one round when all can. */
    ACT_READY_IN_HELLO = 1u << 3,
    /* Its ranks exchange what they set up (round 3), must share one host,
     * and keep their connection to the root as the watch on their peers. */
    ACT_PEERS = 1u << 4,
    /* A split, shrink or grow of such a communicator takes it too (through
     * the child's config); other actions have no NCCL to split. */
    ACT_INHERITED = 1u << 5,
    /* NCCL's own NCCL_NET is hidden from its init: it would undo the redirect. */
    ACT_HIDES_NCCL_NET = 1u << 6,
};

struct action_info {
    const char *name;                   /* in records, NCCLSHIM_* values and messages */
    unsigned traits;                    /* enum action_trait */
    const char *means;                  /* what carries the data, for messages ("CUDA IPC") */
};

/* The row of `a`; out of range, a row named "unknown" with no traits (and
 * ACTION_COUNT, how NCCLSHIM_RULES stores "auto", is named "auto"). */
const struct action_info *action_info(enum action a);
const char *action_name(enum action a);
/* -1 if `s` names no action. */
int action_from_name(const char *s);

static inline int action_has(enum action a, unsigned trait)
{
    return (action_info(a)->traits & trait) != 0;
}

#endif
