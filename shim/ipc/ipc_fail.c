/*
 * Failure of an ipc communicator: a peer lost (ipc_monitor.c) or an abort.
 * Every stream of this rank that waits on a counter is released at once by
 * the host, with no driver call (the protocol: ipc_proto.h, "Counters in
 * host memory"), and every later operation fails with the reason.  It owns
 * struct ipc_failure.
 */
#define _GNU_SOURCE
#include "ipc_fail.h"
#include "ipc_core.h"

#include "clock.h"
#include "record.h"

#include <stdio.h>

/* After a failure, the reaper releases the waits again for this long. */
#define RELEASE_REPEAT_US (5ull * 1000 * 1000)

/* Stores RELEASE into every counter this rank's streams may be waiting on:
 * on its own page, and on one GPU two of its neighbours' (ipc_proto.h,
 * "One GPU": the successor's AVAIL, the predecessor's TAKEN; their own waits
 * are released by their failure).  Plain stores into host memory, which the
 * waiting streams poll: no stream is needed, so none can be in the way. */
static void release_waits(struct ipc_comm *c)
{
    if (!c->shared || !c->shared[c->rank])
        return;
    static const int own[] = { F_AVAIL, F_TAKEN, F_DONE, F_TAKEN_MINE };
    for (size_t i = 0; i < sizeof(own) / sizeof(own[0]); i++)
        ipc_write_flag(c, own[i], RELEASE);
    for (int q = 0; q < c->nranks && q < MAX_PEERS; q++) {
        ipc_write_flag(c, F_SENT + 8 * q, RELEASE);
        ipc_write_flag(c, F_RECVD + 8 * q, RELEASE);
    }
    if (c->nranks > 1) {
        int succ = (c->rank + 1) % c->nranks, pred = (c->rank - 1 + c->nranks) % c->nranks;
        if (ipc_same_gpu(c, succ))
            atomic_store(host_flag(c, succ, F_AVAIL), RELEASE);
        if (ipc_same_gpu(c, pred))
            atomic_store(host_flag(c, pred, F_TAKEN), RELEASE);
    }
}

/* A failed communicator's waits are released again and again for
 * RELEASE_REPEAT_US: a neighbour whose own release came a moment later may
 * have written its lower value over this rank's RELEASE, and a wait
 * enqueued further down a stream would then hold (the reaper calls this on
 * each of its turns).  1 while it repeats. */
int ipc_release_again(struct ipc_comm *c)
{
    uint64_t since = atomic_load(&c->fail.since_us);
    if (!since || shim_mono_us() - since > RELEASE_REPEAT_US)
        return 0;
    release_waits(c);
    return 1;
}

/* A peer is gone: no operation may wait for it any more.  The waits are
 * released at once (release_waits), and again by the reaper for a while
 * (ipc_reaper.c): a neighbour's stream, released a moment later, may still
 * write its own lower value over a RELEASE of this rank's page.
 * The data moved after this point is garbage; the error says so. */
void ipc_fail(struct ipc_comm *c, const char *why, int lost)
{
    int expected = 0;
    /* One failure wins and writes its reason, then says `failed` (a release):
     * whoever sees it reads the whole reason, never one that a second failure
     * (the monitor's, beside the application's abort) is writing over. */
    if (!atomic_compare_exchange_strong(&c->fail.failing, &expected, 1))
        return;
    snprintf(c->fail.why, sizeof(c->fail.why), "%s", why);
    atomic_store_explicit(&c->fail.failed, 1, memory_order_release);
    release_waits(c);
    atomic_store(&c->fail.since_us, shim_mono_us());
    if (lost)
        shim_warn("ipc-peer-lost", "ipc communicator %s (rank %d of %d): %s; its operations now fail with "
                  "ncclRemoteError, and the streams waiting on the peer are released (a stream synchronisation "
                  "returns); what they moved since is not valid. Destroy or abort it, and create a new one with a "
                  "new unique ID once the lost rank is replaced", c->group, c->rank, c->nranks, why);
    /* The reaper repeats the release; a host wait looks at `failed` as it polls. */
    if (c->shared && c->shared[c->rank])
        ipc_wake(c, c->rank);
}
