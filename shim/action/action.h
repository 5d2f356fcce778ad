/*
 * The table of actions (action.c): what each does (action_ops.h, one file an
 * action in this folder; what it *is*, its name and traits, is its row in
 * policy/action.c), and what a plan holds once its action is committed.
 * The rest of the shim asks this table, never tests for a particular action.
 */
#ifndef NCCLSHIM_ACTION_H
#define NCCLSHIM_ACTION_H

#include "action_ops.h"

/* Never NULL: an action out of range gets passthrough's. */
const struct action_ops *action_ops(enum action a);

/*
 * After the root's commit: what was set up for an action that was not
 * committed is undone, the root's connection (p->rv.monitor_fd) kept where
 * the action watches its peers through it, and an action this rank did not
 * set up refused (passthrough, said on stderr).
 */
void plan_hold(struct plan *p);
/* Frees what the plan still owns. */
void plan_release(struct plan *p);

#endif
