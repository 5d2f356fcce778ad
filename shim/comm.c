/*
 * Shim communicator handles: allocation, the registry of live ones (so that
 * their traffic is recorded at exit), and their end records.
 */
#define _GNU_SOURCE
#include "comm.h"

#include "forward.h"
#include "record.h"
#include "ipc.h"
#include "../policy/decide.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

const char *const op_kind_names[OP_COUNT] = {
    [OP_ALLREDUCE] = "AllReduce", [OP_BROADCAST] = "Broadcast", [OP_BCAST] = "Bcast",
    [OP_REDUCE] = "Reduce", [OP_REDUCESCATTER] = "ReduceScatter", [OP_ALLGATHER] = "AllGather",
    [OP_ALLTOALL] = "AlltoAll", [OP_GATHER] = "Gather", [OP_SCATTER] = "Scatter",
    [OP_SEND] = "Send", [OP_RECV] = "Recv",
};

/* Live handles, keyed by address.  Touched only at create, destroy and exit. */
static struct shim_comm *g_registry;
static pthread_mutex_t g_registry_lock = PTHREAD_MUTEX_INITIALIZER;
static unsigned long g_created; /* under g_registry_lock */

struct shim_comm *shim_comm_new(ncclComm_t real, struct shim_slot *slot)
{
    struct shim_comm *h = calloc(1, sizeof(*h));
    if (!h)
        return NULL;
    h->real = real;
    h->slot = slot;
    h->rank = h->nranks = h->cuda_device = -1;
    h->created_ts = shim_now();
    h->magic = real ? SHIM_COMM_MAGIC : SHIM_VCOMM_MAGIC;
    return h;
}

void shim_comm_register(struct shim_comm *h)
{
    pthread_mutex_lock(&g_registry_lock);
    h->key = h;
    HASH_ADD_PTR(g_registry, key, h);
    g_created++;
    pthread_mutex_unlock(&g_registry_lock);
}

int shim_comm_unregister(struct shim_comm *h)
{
    struct shim_comm *found = NULL;
    pthread_mutex_lock(&g_registry_lock);
    HASH_FIND_PTR(g_registry, &h, found);
    if (found == h)
        HASH_DEL(g_registry, h);
    pthread_mutex_unlock(&g_registry_lock);
    return found == h;
}

void shim_comm_free(struct shim_comm *h)
{
    h->magic = 0; /* a stale handle passed later is then forwarded as is, and NCCL rejects it */
    free(h->net_config);
    ipc_free(h->ipc);
    free(h);
}

void shim_comm_record_end(struct shim_comm *h, const char *how, int result)
{
    struct jw w;
    jw_begin(&w, "comm_end");
    jw_ptr(&w, "comm", h->real);
    jw_ptr(&w, "handle", h);
    jw_str(&w, "group", h->group);
    jw_int(&w, "rank", h->rank);
    jw_int(&w, "nranks", h->nranks);
    jw_str(&w, "how", how);
    jw_str(&w, "action", action_name((enum action)h->action));
    if (h->decision_id)
        jw_hex64(&w, "decision_id", h->decision_id);
    if (result >= 0)
        jw_int(&w, "result", result);
    jw_double(&w, "lifetime_s", shim_now() - h->created_ts, 3);
    jw_open(&w, "ops", '{');
    for (int op = 0; op < OP_COUNT; op++) {
        unsigned long long n = atomic_load_explicit(&h->ops[op].count, memory_order_relaxed);
        if (!n)
            continue;
        jw_open(&w, op_kind_names[op], '{');
        jw_u64(&w, "count", n);
        jw_u64(&w, "bytes", atomic_load_explicit(&h->ops[op].bytes, memory_order_relaxed));
        jw_close(&w, '}');
    }
    jw_close(&w, '}');
    if (h->ipc) {
        struct ipc_stats st;
        ipc_get_stats(h->ipc, &st);
        jw_open(&w, "ipc", '{');
        jw_u64(&w, "first", st.first);
        const char *dir[2] = { "in", "out" };
        for (int d = 0; d < 2; d++) {
            jw_open(&w, dir[d], '{');
            for (int k = IPC_HOP_PUSH; k < IPC_HOPS; k++)
                jw_u64(&w, ipc_hop_names[k], d ? st.out[k] : st.in[k]);
            jw_close(&w, '}');
        }
        jw_open(&w, "copy", '{');
        jw_u64(&w, "sm", st.sm);
        jw_u64(&w, "ce", st.ce);
        if (st.copy_note[0])
            jw_str(&w, "note", st.copy_note);
        jw_close(&w, '}');
        jw_close(&w, '}');
    }
    jw_emit(&w);
}

void shim_comm_record_exit(void)
{
    unsigned long alive = 0, created;
    pthread_mutex_lock(&g_registry_lock);
    struct shim_comm *h, *tmp;
    /* Records are written under the lock: at exit nobody else should be creating
     * communicators, and the handles must not be freed while we read them. */
    HASH_ITER(hh, g_registry, h, tmp) {
        shim_comm_record_end(h, "exit", -1);
        alive++;
    }
    created = g_created;
    pthread_mutex_unlock(&g_registry_lock);
    struct jw w;
    jw_begin(&w, "exit");
    jw_u64(&w, "comms_created", created);
    jw_u64(&w, "comms_alive", alive);
    jw_emit(&w);
}

void shim_comm_lock_for_fork(void)
{
    pthread_mutex_lock(&g_registry_lock);
}

void shim_comm_unlock_after_fork(void)
{
    pthread_mutex_unlock(&g_registry_lock);
}

void shim_comm_after_fork_child(void)
{
    /* NCCL communicators do not survive fork: the child starts with none.  The
     * parent's handles stay allocated (the child may still hold pointers). */
    g_registry = NULL;
    g_created = 0;
    pthread_mutex_init(&g_registry_lock, NULL);
}
