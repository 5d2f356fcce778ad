/*
 * Time running out on a rendezvous session (rv_deadlines.h): a stranger's
 * token, the first rank's idle wait, the ranks' arrival, the votes, the
 * answers after a fall-back at a limit.
 */
#define _GNU_SOURCE
#include "rv_deadlines.h"

#include "config.h"
#include "random.h"
#include "rv_admit.h"
#include "rv_decide.h"
#include "rv_io.h"
#include "rv_server_record.h"

#include <stdio.h>

/* Closes the anonymous connections past their HELLO deadline, each read
 * first: a token that came while this thread was not running (its process
 * stopped, starved) is not missing.  Lowers *next to the nearest deadline
 * left (or the listener's pause). */
static void expire_anonymous(struct rv_session *s, uint64_t now, uint64_t *next)
{
    /* Backwards: a removal moves the last entry into the one removed; a
     * decision (the token made a rank) may close them all. */
    for (int i = s->nanon - 1; i >= 0; i--) {
        if (i >= s->nanon)
            continue;
        struct rv_conn *c = &s->conns[s->anon[i]];
        uint64_t d = c->accepted_us + HELLO_DEADLINE_US;
        if (now >= d) {
            rv_on_readable(s, c);
            if (c->fd >= 0 && c->anon_slot >= 0 && s->state != ST_DONE)
                rv_reject(s, c, REJ_NO_HELLO, "no token within 1 s of connecting");
        } else if (d < *next) {
            *next = d;
        }
    }
    if (s->accept_paused_until > now && s->accept_paused_until < *next)
        *next = s->accept_paused_until;
}

/*
 * Before a deadline ends anything: what is already waiting (connections in
 * the listener's backlog, frames in the sockets) is taken in, as if this
 * thread had been running all along.  A root whose process stalled (a GC
 * pause, a busy host) for less than the timeout then loses nothing.
 * Returns 1 if that changed the session's state (the deadline is moot).
 */
static int catch_up(struct rv_session *s)
{
    int state = s->state;
    if (s->lfd >= 0 && s->state == ST_WAIT_HELLO)
        rv_on_acceptable(s);
    for (int i = 0; i < s->nconns && s->state == state; i++)
        if (s->conns[i].fd >= 0)
            rv_on_readable(s, &s->conns[i]);
    return s->state != state;
}

int rv_check_deadlines(struct rv_session *s, uint64_t now)
{
    const struct shim_config *cfg = shim_config();
    uint64_t deadline;
    char why[RV_REASON_LEN];
    if (s->state == ST_MONITOR)
        return 60000; /* no deadline: it lasts as long as the communicator */
    if (s->state == ST_ANSWER) {
        deadline = (s->first_us ? s->first_us : s->created_us) + (uint64_t)cfg->rendezvous_timeout_ms * 1000;
        if (deadline < s->answer_until)
            deadline = s->answer_until;
        if (now >= deadline) {
            rv_finish(s);
            return 0;
        }
        uint64_t wake = deadline;
        expire_anonymous(s, now, &wake);
        uint64_t ms = (wake - now + 999) / 1000;
        return ms > 60000 ? 60000 : (int)ms;
    }
    uint64_t next = UINT64_MAX; /* the nearest admission deadline */
    if (s->state == ST_WAIT_HELLO || s->state == ST_WAIT_VOTES)
        expire_anonymous(s, now, &next);
    if (s->state == ST_WAIT_HELLO && s->nranks == 0) {
        deadline = s->created_us + (uint64_t)cfg->rendezvous_idle_ms * 1000;
        if (now >= deadline) {
            rv_record_expired(s, cfg->rendezvous_idle_ms);
            rv_finish(s);
            return 0;
        }
    } else if (s->state == ST_WAIT_HELLO) {
        deadline = s->first_us + (uint64_t)cfg->rendezvous_timeout_ms * 1000;
        if (now >= deadline && catch_up(s))
            return 0;
        if (now >= deadline) {
            char missing[200];
            rv_rank_list(s, 0, missing, sizeof(missing));
            snprintf(why, sizeof(why),
                     "rendezvous timed out after %d ms (NCCLSHIM_RENDEZVOUS_TIMEOUT_MS) with %d of %d ranks; "
                     "missing: %s (a rank without the shim, one that has not called init yet, or one that cannot "
                     "reach %s): passthrough for all",
                     cfg->rendezvous_timeout_ms, s->arrived, s->nranks, missing, s->addr);
            s->verdict.purpose = PURPOSE_UNKNOWN;
            snprintf(s->verdict.purpose_reason, sizeof(s->verdict.purpose_reason),
                     "not decided: not every rank arrived");
            if (s->verdict.decision_id == 0)
                (void)shim_random(&s->verdict.decision_id, sizeof(s->verdict.decision_id));
            rv_fall_back(s, RV_DECISION, why);
            return 0;
        }
    } else if (s->state == ST_WAIT_VOTES) {
        deadline = s->decided_us + (uint64_t)cfg->rendezvous_timeout_ms * 1000;
        if (now >= deadline && catch_up(s))
            return 0;
        if (now >= deadline) {
            snprintf(why, sizeof(why), "%d of %d votes within %d ms: passthrough for all", s->votes, s->nranks,
                     cfg->rendezvous_timeout_ms);
            rv_fall_back(s, RV_COMMIT, why);
            return 0;
        }
    } else {
        return 0;
    }
    if (next < deadline)
        deadline = next;
    uint64_t ms = (deadline - now + 999) / 1000;
    return ms > 60000 ? 60000 : (int)ms;
}
