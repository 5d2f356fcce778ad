/*
 * A rank's part in the rendezvous's set-up: what it says in its HELLO of the
 * actions it could carry out, and the callbacks rv_client_run calls to set
 * up the root's decision (round 2) and connect its peers (round 3), each
 * through the action's own hooks (action.h).
 */
#ifndef NCCLSHIM_SETUP_H
#define NCCLSHIM_SETUP_H

#include "plan.h"

struct action_setup {
    const struct plan_input *in;
    struct plan *plan;
    /* An ACT_READY_IN_HELLO action set up before the HELLO: which one (-1:
     * none), with what result and, if it failed, why. */
    int ready_action;
    int ready_ok;
    char ready_why[FACTS_SOCKET_WHY_LEN];
    int prepared;                       /* the action round 2 set up (enum action) */
};

/* Fills the readiness a rank says in its HELLO (socket_ready, frugal_ready)
 * into `f` and their reasons into `t` (f's text), setting up what can be set up before it. */
void action_setup_hello(struct action_setup *s, struct rank_facts *f, struct rank_text *t, int one_round);

/* The callbacks for rv_client_run, working on `s`. */
struct rv_setup action_setup_callbacks(struct action_setup *s);

#endif
