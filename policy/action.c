/*
 * The table of actions (policy/action.h): a new action is a row here and its
 * file in shim/action/ (shim/action/action.c lists the files).
 */
#include "action.h"

#include <strings.h>

static const struct action_info rows[ACTION_COUNT] = {
    [ACTION_PASSTHROUGH] = { "passthrough", ACT_NCCL_MADE | ACT_INHERITED, "NCCL, as the application asked" },
    [ACTION_SOCKET] = { "socket",
                        ACT_NCCL_MADE | ACT_CONFIGURES | ACT_SET_UP | ACT_READY_IN_HELLO | ACT_INHERITED |
                            ACT_HIDES_NCCL_NET,
                        "NCCL's Socket network" },
    [ACTION_DROP] = { "drop", ACT_SHIM_ONLY | ACT_SET_UP, "nothing (the operations are counted no-ops)" },
    [ACTION_IPC] = { "ipc", ACT_SHIM_ONLY | ACT_SET_UP | ACT_PEERS, "CUDA IPC" },
    [ACTION_FAIL] = { "fail", 0, "nothing (the init fails)" },
    [ACTION_FRUGAL] = { "frugal", ACT_NCCL_MADE | ACT_CONFIGURES | ACT_SET_UP | ACT_INHERITED,
                        "one channel of the fabric" },
};

const struct action_info *action_info(enum action a)
{
    static const struct action_info automatic = { "auto", 0, "what auto chooses" },
                                    unknown = { "unknown", 0, "an unknown action" };
    if ((int)a >= 0 && a < ACTION_COUNT)
        return &rows[a];
    return a == ACTION_COUNT ? &automatic : &unknown;
}

const char *action_name(enum action a)
{
    return action_info(a)->name;
}

int action_from_name(const char *s)
{
    for (int a = 0; s && a < ACTION_COUNT; a++)
        if (strcasecmp(s, rows[a].name) == 0)
            return a;
    return -1;
}
