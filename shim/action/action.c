/*
 * The table of what each action does (action.h): one file an action, listed
 * here; and what a plan owns, kept or freed by what its action needs.  A new action is its row in policy/action.c, its file, and its line
 * below (the assertion fails the build until every row has one).
 */
#include "action.h"

#include "comm.h"
#include "ipc.h"
#include "record.h"

#include <stdlib.h>
#include <unistd.h>

extern const struct action_ops action_passthrough, action_socket, action_drop, action_ipc, action_fail,
    action_frugal;

static const struct action_ops *const table[] = {
    [ACTION_PASSTHROUGH] = &action_passthrough,
    [ACTION_SOCKET] = &action_socket,
    [ACTION_DROP] = &action_drop,
    [ACTION_IPC] = &action_ipc,
    [ACTION_FAIL] = &action_fail,
    [ACTION_FRUGAL] = &action_frugal,
};
_Static_assert(sizeof(table) / sizeof(table[0]) == ACTION_COUNT, "every action has its file (shim/action/)");

const struct action_ops *action_ops(enum action a)
{
    return (int)a >= 0 && a < ACTION_COUNT ? table[a] : &action_passthrough;
}


void plan_hold(struct plan *p)
{
    const struct action_ops *o = action_ops(p->action);
    if (!action_has(p->action, ACT_PEERS) && p->ipc) {
        ipc_free(p->ipc);
        p->ipc = NULL;
    }
    if (!action_has(p->action, ACT_SHIM_ONLY) && p->vcomm) {
        shim_comm_free(p->vcomm);
        p->vcomm = NULL;
    }
    if (!plan_configures(p)) {
        free(p->net_config);
        p->net_config = NULL;
    }
    int fd = p->rv.monitor_fd;
    p->rv.monitor_fd = -1;
    int held = !o->hold || o->hold(p, &fd) == 0;
    if (fd >= 0)
        close(fd);
    if (!held) {
        /* Committed without this rank's vote: cannot happen with a correct root. */
        shim_warn("rendezvous", "the root committed %s, which this rank did not set up; passthrough",
                  action_name(p->action));
        p->action = ACTION_PASSTHROUGH;
    }
}

void plan_release(struct plan *p)
{
    if (p->ipc) {
        ipc_free(p->ipc);
        p->ipc = NULL;
    }
    if (p->vcomm) {
        shim_comm_free(p->vcomm);
        p->vcomm = NULL;
    }
    free(p->net_config);
    p->net_config = NULL;
}
