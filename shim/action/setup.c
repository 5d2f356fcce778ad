/*
 * The rendezvous's set-up callbacks and the readiness said in the HELLO
 * (setup.h), dispatched to the actions' hooks.
 */
#include "setup.h"

#include "action.h"

#include <stdio.h>
#include <string.h>

void action_setup_hello(struct action_setup *s, struct rank_facts *f, struct rank_text *t, int one_round)
{
    /* What auto across hosts weighs: whether this rank could take frugal
     * (policy/fabric.c). */
    const struct action_ops *frugal = action_ops(ACTION_FRUGAL);
    f->frugal_ready = frugal->possible(s->in, t->frugal_why, sizeof(t->frugal_why)) == 0 ? 1 : 2;
    if (f->frugal_ready == 1)
        t->frugal_why[0] = '\0';
    s->ready_action = -1;
    s->prepared = ACTION_PASSTHROUGH;
    if (!one_round)
        return;
    /* Said in the HELLO: if the root decides socket and every rank is ready,
     * it commits at once, without the vote round (design.md, "Rendezvous");
     * a rank that is not says why, as its veto would. */
    const struct action_ops *socket = action_ops(ACTION_SOCKET);
    int dummy = 0;
    s->ready_action = ACTION_SOCKET;
    s->ready_ok = socket->prepare(s->in, s->plan, NULL, &dummy, s->ready_why, sizeof(s->ready_why)) == 0;
    f->socket_ready = s->ready_ok ? 1 : 2;
    snprintf(t->socket_why, sizeof(t->socket_why), "%s", s->ready_ok ? "" : s->ready_why);
}

/* Round 2: can this rank carry out `action`?  Sets it up if so. */
static int prepare(void *ctx, int action, uint8_t *blob, int *bloblen, char *why, size_t whylen)
{
    struct action_setup *s = ctx;
    *bloblen = 0;
    if (action < 0 || action >= ACTION_COUNT || !action_has((enum action)action, ACT_SET_UP)) {
        snprintf(why, whylen, "action %s cannot be set up by this version of the shim",
                 action_name((enum action)action));
        return -1;
    }
    /* Made before the HELLO (its checks are all local): the same answer,
     * when a root without the one-round path asks in round 2. */
    s->prepared = action;
    if (action == s->ready_action) {
        if (!s->ready_ok)
            snprintf(why, whylen, "%s", s->ready_why);
        return s->ready_ok ? 0 : -1;
    }
    return action_ops((enum action)action)->prepare(s->in, s->plan, blob, bloblen, why, whylen);
}

/* Round 3: open the peers' exports, through the action set up in round 2. */
static int connect_peers(void *ctx, const struct rv_peers *peers, char *why, size_t whylen)
{
    struct action_setup *s = ctx;
    const struct action_ops *o = action_ops((enum action)s->prepared);
    if (!o->connect) {
        snprintf(why, whylen, "%s has no round 3", action_name(o->action));
        return -1;
    }
    return o->connect(s->plan, peers, why, whylen);
}

struct rv_setup action_setup_callbacks(struct action_setup *s)
{
    struct rv_setup setup = { prepare, connect_peers, s };
    return setup;
}
