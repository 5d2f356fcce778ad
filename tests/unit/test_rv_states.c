/*
 * The rendezvous protocol's tables (shim/rendezvous/rv_states.c): the entries
 * the safety argument rests on (docs/design.md, "All or nothing"), checked
 * over every state and message type, out-of-range ones included.
 */
#include "rv_session.h"
#include "rv_states.h"
#include "tap.h"

/* Every type the tables index, and one on each side of them. */
#define FIRST_TYPE 0
#define LAST_TYPE (RV_TYPES + 1)

static int root_counts_only(int state, enum rv_type type, enum rv_who who, enum rv_root_do want)
{
    return rv_root_step(state, type, who) == want;
}

static void root(void)
{
    int bad = 0;
    for (int st = -1; st <= RV_ROOT_STATES; st++)
        for (int t = FIRST_TYPE; t <= LAST_TYPE; t++)
            for (int w = 0; w < WHO_COUNT; w++) {
                enum rv_root_do d = rv_root_step(st, (enum rv_type)t, (enum rv_who)w);
                /* A vote counts only during the vote, from a connection that arrived. */
                bad += d == ROOT_VOTE && !(st == ST_WAIT_VOTES && t == RV_VOTE && w != WHO_NEW);
                /* Arrivals only before the verdict, never a second HELLO of a rank. */
                bad += d == ROOT_HELLO && !(st == ST_WAIT_HELLO && t == RV_HELLO && w != WHO_RANK);
                /* The verdict to askers only after it, and only to new connections. */
                bad += d == ROOT_ANSWER && !(st == ST_ANSWER && w == WHO_NEW && (t == RV_HELLO || t == RV_ABORT));
                /* Nothing from out-of-range states or types, nor in MONITOR and DONE. */
                bad += d != ROOT_REJECT && (st < 0 || st >= RV_ROOT_STATES || t <= 0 || t >= RV_TYPES ||
                                            st == ST_MONITOR || st == ST_DONE);
            }
    ok(bad == 0, "the root: votes, arrivals and answers only where the protocol has them (%d wrong)", bad);
    int aborts = 1;
    for (int w = 0; w < WHO_COUNT; w++)
        aborts &= root_counts_only(ST_WAIT_HELLO, RV_ABORT, (enum rv_who)w, ROOT_ABORT) &&
                  root_counts_only(ST_WAIT_VOTES, RV_ABORT, (enum rv_who)w, ROOT_ABORT);
    ok(aborts, "the root: an ABORT from anyone before the verdict ends it for all");
    ok(rv_root_step(ST_WAIT_VOTES, RV_HELLO, WHO_NEW) == ROOT_HELLO_IN_VOTE,
       "the root: a rank connecting again during the vote ends it for all");
    ok(rv_root_step(ST_ANSWER, RV_ABORT, WHO_NEW) == ROOT_ANSWER &&
           rv_root_step(ST_ANSWER, RV_HELLO, WHO_NEW) == ROOT_ANSWER,
       "the root: after its verdict, an ask or a late HELLO is answered");
}

static void leader(void)
{
    int bad = 0;
    for (int st = 0; st < LEADER_STATES; st++)
        for (int t = FIRST_TYPE; t <= LAST_TYPE; t++)
            for (int final = 0; final <= 1; final++) {
                enum rv_leader_do d = rv_leader_step((enum rv_leader_state)st, (enum rv_type)t, final);
                int live = st == LEADER_UP || st == LEADER_ASKED;
                bad += d == LEADER_FINAL && !(live && (t == RV_COMMIT || (t == RV_DECISION && final)));
                bad += d == LEADER_RELAY && !(live && (t == RV_PEERS || (t == RV_DECISION && !final)));
                bad += d == LEADER_FOLLOW && !(live && t == RV_REDIRECT);
            }
    ok(bad == 0, "a leader: only COMMIT or a final DECISION ends it, nothing from above before it connects "
       "(%d wrong)", bad);
    bad = 0;
    for (int t = FIRST_TYPE; t <= LAST_TYPE; t++)
        for (int known = 0; known <= 1; known++)
            for (int kid = 0; kid <= 1; kid++) {
                bad += rv_member_step(LEADER_OVER, (enum rv_type)t, known, kid) != MEMBER_DROP;
                enum rv_member_do d = rv_member_step(LEADER_UP, (enum rv_type)t, known, kid);
                bad += d == MEMBER_VOTE && !(t == RV_VOTE && known);
                bad += d == MEMBER_HELLO && !(t == RV_HELLO && (!known || kid));
                bad += d == MEMBER_ABORT && t != RV_ABORT;
            }
    ok(bad == 0, "a leader: votes only from members that said HELLO, one HELLO a rank, nothing once over (%d wrong)",
       bad);
}

static void rank(void)
{
    int bad = 0;
    for (int st = 0; st < RANK_STATES; st++)
        for (int t = FIRST_TYPE; t <= LAST_TYPE; t++) {
            int take = rv_rank_step((enum rv_rank_state)st, (enum rv_type)t) == RANK_TAKE;
            int want = t == RV_COMMIT || (st == RANK_HELLO && t == RV_DECISION) ||
                       (st == RANK_VOTED_IPC && t == RV_PEERS);
            bad += take != want;
        }
    ok(bad == 0, "a rank: takes the root's word of its round or COMMIT, asks the root on anything else (%d wrong)",
       bad);
    ok(rv_rank_step(RANK_HELLO, RV_ABORT) == RANK_ASK, "a rank: its leader's ABORT makes it ask the root");
}

int main(void)
{
    root();
    leader();
    rank();
    return tap_done();
}
