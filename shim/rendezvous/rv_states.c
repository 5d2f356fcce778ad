/*
 * The rendezvous protocol's tables (rv_states.h): for each role, what a
 * message does in each state.  Everything not listed is out of place.
 */
#define _GNU_SOURCE
#include "rv_states.h"

#include "rv_session.h"

_Static_assert(ST_DONE + 1 == RV_ROOT_STATES, "a row per root state");

/*
 * The root.  Before the verdict (WAIT_HELLO) ranks and leaders arrive; an
 * ABORT from anyone ends it in passthrough for all.  During the vote
 * (WAIT_VOTES) only votes count: a rank connecting again means a broken path,
 * and ends it too.  After the verdict (ANSWER) whoever shows the token, asking
 * (ABORT) or late (HELLO), is answered the verdict.  MONITOR reads no message
 * (a connection that speaks or closes is a rank leaving: rv_admit.c), DONE none.
 */
static const unsigned char g_root[RV_ROOT_STATES][RV_TYPES][WHO_COUNT] = {
    [ST_WAIT_HELLO] = {
        [RV_HELLO] = { [WHO_NEW] = ROOT_HELLO, [WHO_LEADER] = ROOT_HELLO },
        [RV_ABORT] = { ROOT_ABORT, ROOT_ABORT, ROOT_ABORT },
    },
    [ST_WAIT_VOTES] = {
        [RV_HELLO] = { [WHO_NEW] = ROOT_HELLO_IN_VOTE },
        [RV_VOTE] = { [WHO_RANK] = ROOT_VOTE, [WHO_LEADER] = ROOT_VOTE },
        [RV_ABORT] = { ROOT_ABORT, ROOT_ABORT, ROOT_ABORT },
    },
    [ST_ANSWER] = {
        [RV_HELLO] = { [WHO_NEW] = ROOT_ANSWER },
        [RV_ABORT] = { [WHO_NEW] = ROOT_ANSWER },
    },
};

enum rv_root_do rv_root_step(int state, enum rv_type type, enum rv_who who)
{
    if (state < 0 || state >= RV_ROOT_STATES || (int)type <= 0 || (int)type >= RV_TYPES || who >= WHO_COUNT)
        return ROOT_REJECT;
    return (enum rv_root_do)g_root[state][type][who];
}

/*
 * A host's leader, frames from above: it hands the root's words down as they
 * came (every member checks the token), and a final one ends its work.
 * GATHER has no connection above, OVER reads nothing.
 */
enum rv_leader_do rv_leader_step(enum rv_leader_state state, enum rv_type type, int final)
{
    if (state != LEADER_UP && state != LEADER_ASKED)
        return LEADER_BAD;
    switch (type) {
    case RV_DECISION: return final ? LEADER_FINAL : LEADER_RELAY;
    case RV_PEERS: return LEADER_RELAY;
    case RV_COMMIT: return LEADER_FINAL;
    case RV_REDIRECT: return LEADER_FOLLOW;
    default: return LEADER_BAD;
    }
}

/*
 * A host's leader, frames from its members (its host's ranks; other hosts'
 * leaders, `kid`, which say HELLO for each of their ranks): a HELLO once per
 * rank, votes from those that said one, ABORT from anyone.
 */
static const unsigned char g_member[RV_TYPES][2][2] = {
    /* [type][known][kid] */
    [RV_HELLO] = { { MEMBER_HELLO, MEMBER_HELLO }, { MEMBER_DROP, MEMBER_HELLO } },
    [RV_VOTE] = { { MEMBER_DROP, MEMBER_DROP }, { MEMBER_VOTE, MEMBER_VOTE } },
    [RV_ABORT] = { { MEMBER_ABORT, MEMBER_ABORT }, { MEMBER_ABORT, MEMBER_ABORT } },
};

enum rv_member_do rv_member_step(enum rv_leader_state state, enum rv_type type, int known, int kid)
{
    if (state == LEADER_OVER || (int)type <= 0 || (int)type >= RV_TYPES)
        return MEMBER_DROP;
    return (enum rv_member_do)g_member[type][!!known][!!kid];
}

/*
 * A rank, from its HELLO: the root's word of the round, or COMMIT in its
 * place (one round; a veto ends ipc's exchange early).  Anything else, an
 * ABORT of its leader included, is a broken path: it asks the root.
 */
static const unsigned char g_rank[RANK_STATES][RV_TYPES] = {
    [RANK_HELLO] = { [RV_DECISION] = RANK_TAKE, [RV_COMMIT] = RANK_TAKE },
    [RANK_VOTED] = { [RV_COMMIT] = RANK_TAKE },
    [RANK_VOTED_IPC] = { [RV_PEERS] = RANK_TAKE, [RV_COMMIT] = RANK_TAKE },
};

enum rv_rank_do rv_rank_step(enum rv_rank_state state, enum rv_type type)
{
    if (state >= RANK_STATES || (int)type <= 0 || (int)type >= RV_TYPES)
        return RANK_ASK;
    return (enum rv_rank_do)g_rank[state][type];
}
