/*
 * One rank (or the root) of a multi-process test of the rendezvous, linked
 * against the fake NCCL like an application against libnccl.  Every line it
 * prints is for the test (tests/t/13-rendezvous.t) to read.
 *
 *   rank_client ids K [hold]
 *       K unique IDs, printed as "ID <hex>" lines; with `hold`, then waits
 *       for stdin to close (the process serves the IDs meanwhile).
 *   rank_client root K NRANKS [options]
 *       K unique IDs, printed, then rank 0 of each (options below).
 *   rank_client rank RANK NRANKS HEX[,HEX...] [options]
 *       rank RANK of each ID's communicator.
 *
 *   options: fn=initrank|config|scalable  delay_ms=N (before the inits)
 *            cfgver=V (fn=config/scalable: the config as NCCL_CONFIG_INITIALIZER
 *            of release V's nccl.h makes it: that release's size and version,
 *            every field it has undefined, blocking=1)
 *            ops=N (AllReduce + Broadcast pairs on each comm)
 *            allapi=1 (call every function that takes a communicator)
 *            suspend=1 (NCCL 2.29's ncclCommSuspend, MemStats and Resume, looked up
 *            with dlsym(RTLD_DEFAULT): "SUSPEND i found=1 persist=<bytes> rc=<r>
 *            suspended=<n> refused=<r> resume=<r> after=<r>")
 *            suspend=2 (suspend cycles, see suspend_cycles: "CYCLES i ...")
 *            cycles=N (of suspend=2, default 1)  midbcast=1  resumefail=1  p2p=1
 *            leaks=1 (print sockets, pipes and threads before and after: "LEAKS ...")
 *            vanish=1 (after init, the process exits at once: a dead peer)
 *            xfer=1 (after init: broadcasts of odd sizes from every root, on
 *            three streams in turn with RANK_CLIENT_CUDA, and all-reduces of
 *            several types, checked: "XFER ok" / "XFER fail <what>")
 *            vmm=forget, vmm=remap, vmm=alias, vmm=fresh (after those:
 *            cuMemCreate buffers given back, their pieces replaced and moved,
 *            one piece mapped twice, a loop of broadcasts from rank 0 into
 *            fresh buffers: see vmm_forget, vmm_remap, vmm_alias and
 *            vmm_fresh; "FORGET ..." / "REMAP ..." / "ALIAS ..." / "FRESH ...")
 *            poke=1 (a bad HELLO to the successor's VMM socket: see poke_main)
 *            hold=1 (before destroy, wait for the sync file "release")
 *            keep=1 (peers' buffers kept mapped across a pause, closed once freed:
 *            see keep_maps; "KEEP ..."), keep=2 (the same with rank 0 the only root)
 *            collcfg=1 (NCCL 2.31's nccl*Config collectives, bound by the dynamic
 *            linker as in a caller built against 2.31 whatever libnccl it loads
 *            (weak references: the fake 2.28.9 it links against lacks them, the
 *            shim's exports have them): see coll_configs; "COLLCFG i ok|fail
 *            <what>", "COLLCFG-RC i <name> <result>" for each call);
 *            collcfg=2 (the same calls, only their results checked: a dropped
 *            communicator moves no data)
 *
 * RANK_CLIENT_MEM=cuda: the broadcast and all-gather buffers come from the
 * fake libcuda's cuMemAlloc (memory a peer can open by cuIpcGetMemHandle, as
 * PyTorch's default allocator's); =vmm: from cuMemCreate'd pieces of 2 MiB,
 * exportable as POSIX file descriptors, mapped back to back in a reservation
 * with the buffer at an offset inside the first (as PyTorch's expandable
 * segments: a buffer may straddle pieces); =vmm-noexport: the same, created
 * with no handle type (as vLLM's sleep-mode allocator: nothing to export);
 * else (=host or unset) from malloc (memory the fake libcuda does not know).
 * With =vmm or =vmm-noexport, xfer=1 also broadcasts a buffer over 2 MiB (two or
 * three pieces); RANK_CLIENT_BIG=1 or =0 says so for every mode (a run mixing vmm
 * ranks with others gives it to all, so that every rank does the same
 * broadcasts).  RANK_CLIENT_HUGE=1: xfer=1 also broadcasts 20 and 60 MiB
 * (more than one step of the chain's own choosing: run without
 * NCCLSHIM_IPC_STEP_BYTES).
 *
 * Several IDs are initialised concurrently, one thread each.  Per
 * communicator: "COMM i rc=<r> count=<n> rank=<r> dev=<d> ops=<r> destroy=<r>".
 */
#define _GNU_SOURCE
#include "client_util.h"
#include "nccl_abi.h"
#include "nccl_decls.h"
#include "reduce.h"
#include "test_bound.h"

#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <poll.h>
#include <stdint.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/un.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define MAX_IDS 16

static int g_rank, g_nranks, g_fn, g_ops, g_allapi, g_xfer, g_vanish, g_suspend, g_cfgver, g_collcfg;
static int g_cycles = 1, g_midbcast, g_resumefail, g_p2p;
static enum { VMMTEST_NONE, VMMTEST_FORGET, VMMTEST_REMAP, VMMTEST_ALIAS, VMMTEST_FRESH } g_vmmtest;
static int g_keep;                      /* keep=1, 2: keep_maps */
static void *g_cuda;                    /* the fake libcuda, if the test gives it */
enum { FN_INITRANK, FN_CONFIG, FN_SCALABLE };
static ncclUniqueId g_ids[MAX_IDS];

/* Sockets and pipes this process holds (what a rendezvous could leak; record
 * and log files opened on first use are not counted). */
static int count_socks(void)
{
    DIR *d = opendir("/proc/self/fd");
    int n = 0;
    if (!d)
        return -1;
    for (struct dirent *e; (e = readdir(d));) {
        char path[300], target[256];
        snprintf(path, sizeof(path), "/proc/self/fd/%s", e->d_name);
        ssize_t len = readlink(path, target, sizeof(target) - 1);
        if (len <= 0)
            continue;
        target[len] = '\0';
        n += strncmp(target, "socket:", 7) == 0 || strncmp(target, "pipe:", 5) == 0;
    }
    closedir(d);
    return n;
}

/* Every function of nccl.h that takes a communicator, with harmless arguments:
 * under the drop action none of them may reach the real NCCL. */
static void call_all(ncclComm_t comm, int idx)
{
    char buf[64] = { 0 };
    int v = -1;
    void *handle = NULL;
    ncclResult_t async = ncclInternalError;
    ncclRedOp_t op;
    float scalar = 1.0f;
#define R(expr) printf("API %d %s %d\n", idx, #expr, (int)(expr))
    R(ncclCommCount(comm, &v));
    R(ncclCommUserRank(comm, &v));
    R(ncclCommCuDevice(comm, &v));
    R(ncclCommGetAsyncError(comm, &async));
    printf("API %d ncclGetLastError \"%s\"\n", idx, ncclGetLastError(comm));
    R(ncclCommRegister(comm, buf, sizeof(buf), &handle));
    R(ncclCommDeregister(comm, handle));
    ncclWindow_t win = NULL;
    R(ncclCommWindowRegister(comm, buf, sizeof(buf), &win, 0));
    R(ncclCommWindowDeregister(comm, win));
    R(ncclRedOpCreatePreMulSum(&op, &scalar, ncclFloat32, ncclScalarHostImmediate, comm));
    R(ncclRedOpDestroy(op, comm));
    R(ncclAllReduce(buf, buf + 16, 2, ncclFloat32, ncclSum, comm, NULL));
    R(ncclBroadcast(buf, buf + 16, 2, ncclFloat32, 0, comm, NULL));
    R(ncclBcast(buf, 2, ncclFloat32, 0, comm, NULL));
    R(ncclReduce(buf, buf + 16, 2, ncclFloat32, ncclSum, 0, comm, NULL));
    R(ncclReduceScatter(buf, buf + 16, 1, ncclFloat32, ncclSum, comm, NULL));
    R(ncclAllGather(buf, buf + 16, 1, ncclFloat32, comm, NULL));
    R(ncclAlltoAll(buf, buf + 16, 1, ncclFloat32, comm, NULL));
    R(ncclGather(buf, buf + 16, 1, ncclFloat32, 0, comm, NULL));
    R(ncclScatter(buf, buf + 16, 1, ncclFloat32, 0, comm, NULL));
    R(ncclGroupStart());
    R(ncclSend(buf, 2, ncclFloat32, 0, comm, NULL));
    R(ncclRecv(buf + 16, 2, ncclFloat32, 0, comm, NULL));
    R(ncclGroupEnd());
    ncclComm_t child = (ncclComm_t)buf;
    R(ncclCommSplit(comm, 0, 0, &child, NULL));
    printf("API %d split-child %s\n", idx, child ? "set" : "NULL");
    int excl = 0;
    R(ncclCommShrink(comm, &excl, 1, &child, NULL, 0));
    R(ncclCommRevoke(comm, 0));
    R(ncclDevCommCreate(comm, NULL, NULL));
    R(ncclDevCommDestroy(comm, NULL));
    R(ncclGinBarrierCreateRequirement(comm, (ncclTeam_t){ 0, 0, 0 }, 0, NULL, NULL));
    R(ncclCommFinalize(comm));
#undef R
}

/* Buffers of the transfers: see RANK_CLIENT_MEM above. */
static int (*g_cu_alloc)(unsigned long long *, size_t);
static int (*g_cu_free)(unsigned long long);
static int g_big; /* xfer=1 broadcasts a buffer of several VMM pieces too */
static int g_huge; /* RANK_CLIENT_HUGE=1: and buffers of 20 and 60 MiB */

/* cuda.h's VMM structures (13.0 layout). */
typedef struct {
    int type, requestedHandleTypes;
    struct {
        int type, id;
    } location;
    void *win32HandleMetaData;
    unsigned char allocFlags[8];
} vmm_prop_t;
typedef struct {
    struct {
        int type, id;
    } location;
    int flags;
} vmm_access_t;
#define VMM_PIECE ((size_t)2 << 20)

static struct {
    int on, handle_types;
    int (*create)(unsigned long long *, size_t, const vmm_prop_t *, unsigned long long);
    int (*release)(unsigned long long);
    int (*reserve)(unsigned long long *, size_t, size_t, unsigned long long, unsigned long long);
    int (*address_free)(unsigned long long, size_t);
    int (*map)(unsigned long long, size_t, size_t, unsigned long long, unsigned long long);
    int (*unmap)(unsigned long long, size_t);
    int (*set_access)(unsigned long long, size_t, const vmm_access_t *, size_t);
} g_vmm;

/* A VMM buffer: its reservation and pieces, found again by its address. */
struct vbuf {
    struct vbuf *next;
    unsigned char *buf;
    unsigned long long base;
    int pieces, mapped;
    unsigned long long handle[];
};
static struct vbuf *g_vbufs;                        /* under g_vbuf_lock */
static pthread_mutex_t g_vbuf_lock = PTHREAD_MUTEX_INITIALIZER;
static unsigned g_vbuf_seq;                         /* under g_vbuf_lock */

/* Unmaps, releases and frees what `v` holds; 0, or the first failure. */
static int vbuf_free(struct vbuf *v)
{
    int rc = 0;
    for (int i = 0; i < v->pieces; i++) {
        int r = i < v->mapped ? g_vmm.unmap(v->base + (unsigned long long)i * VMM_PIECE, VMM_PIECE) : 0;
        int q = v->handle[i] ? g_vmm.release(v->handle[i]) : 0;
        rc = rc ? rc : r ? r : q;
    }
    int r = v->base ? g_vmm.address_free(v->base, (size_t)v->pieces * VMM_PIECE) : 0;
    free(v);
    return rc ? rc : r;
}

/* How this process's pieces are made, and made accessible. */
static void vmm_props(vmm_prop_t *prop, vmm_access_t *acc)
{
    memset(prop, 0, sizeof(*prop));
    prop->type = 1; /* CU_MEM_ALLOCATION_TYPE_PINNED */
    prop->requestedHandleTypes = g_vmm.handle_types;
    prop->location.type = 1; /* CU_MEM_LOCATION_TYPE_DEVICE */
    const char *dev = getenv("FAKE_CUDA_DEVICE");
    prop->location.id = dev ? atoi(dev) : 0;
    *acc = (vmm_access_t){ { 1, prop->location.id }, 3 /* CU_MEM_ACCESS_FLAGS_PROT_READWRITE */ };
}

/* n bytes at an offset inside the first of enough 2 MiB pieces: near its
 * start for one buffer, near its end for the next (so that even a small
 * buffer may straddle two pieces), as PyTorch places blocks in a segment. */
static void *vmm_alloc(size_t n)
{
    pthread_mutex_lock(&g_vbuf_lock);
    unsigned seq = g_vbuf_seq++;
    pthread_mutex_unlock(&g_vbuf_lock);
    size_t off = 512 * (size_t)(1 + seq % 7);
    if (seq % 2)
        off += VMM_PIECE - 65536;
    int pieces = (int)((off + n + VMM_PIECE - 1) / VMM_PIECE);
    struct vbuf *v = calloc(1, sizeof(*v) + (size_t)pieces * sizeof(v->handle[0]));
    if (!v)
        return NULL;
    v->pieces = pieces;
    vmm_prop_t prop;
    vmm_access_t acc;
    vmm_props(&prop, &acc);
    size_t total = (size_t)pieces * VMM_PIECE;
    int bad = g_vmm.reserve(&v->base, total, 0, 0, 0);
    for (int i = 0; i < pieces && !bad; i++) {
        bad = g_vmm.create(&v->handle[i], VMM_PIECE, &prop, 0);
        if (!bad)
            bad = g_vmm.map(v->base + (unsigned long long)i * VMM_PIECE, VMM_PIECE, 0, v->handle[i], 0);
        if (!bad)
            v->mapped++;
    }
    if (!bad)
        bad = g_vmm.set_access(v->base, total, &acc, 1);
    if (bad) {
        fprintf(stderr, "rank_client: a VMM buffer of %zu bytes: CUresult %d\n", n, bad);
        vbuf_free(v);
        return NULL;
    }
    v->buf = (unsigned char *)(uintptr_t)v->base + off;
    pthread_mutex_lock(&g_vbuf_lock);
    v->next = g_vbufs;
    g_vbufs = v;
    pthread_mutex_unlock(&g_vbuf_lock);
    return v->buf;
}

static void vmm_free(void *p)
{
    pthread_mutex_lock(&g_vbuf_lock);
    struct vbuf **pp = &g_vbufs;
    while (*pp && (*pp)->buf != p)
        pp = &(*pp)->next;
    struct vbuf *v = *pp;
    if (v)
        *pp = v->next;
    pthread_mutex_unlock(&g_vbuf_lock);
    int rc = v ? vbuf_free(v) : -1;
    if (rc) /* the test sees it in the fake's exit line too */
        fprintf(stderr, "rank_client: freeing the VMM buffer %p: %d\n", p, rc);
}

static void *xalloc(size_t n)
{
    unsigned long long p = 0;
    if (g_vmm.on)
        return vmm_alloc(n);
    if (!g_cu_alloc)
        return malloc(n);
    return g_cu_alloc(&p, n) == 0 ? (void *)(uintptr_t)p : NULL;
}

static void xfree(void *p)
{
    if (g_vmm.on) {
        if (p)
            vmm_free(p);
    } else if (!g_cu_free) {
        free(p);
    } else if (p) {
        g_cu_free((unsigned long long)(uintptr_t)p);
    }
}

/* 0, or 2 if the fake libcuda lacks a VMM function. */
static int vmm_setup(void *cuda, int handle_types)
{
    *(void **)&g_vmm.create = dlsym(cuda, "cuMemCreate");
    *(void **)&g_vmm.release = dlsym(cuda, "cuMemRelease");
    *(void **)&g_vmm.reserve = dlsym(cuda, "cuMemAddressReserve");
    *(void **)&g_vmm.address_free = dlsym(cuda, "cuMemAddressFree");
    *(void **)&g_vmm.map = dlsym(cuda, "cuMemMap");
    *(void **)&g_vmm.unmap = dlsym(cuda, "cuMemUnmap");
    *(void **)&g_vmm.set_access = dlsym(cuda, "cuMemSetAccess");
    if (!g_vmm.create || !g_vmm.release || !g_vmm.reserve || !g_vmm.address_free || !g_vmm.map ||
        !g_vmm.unmap || !g_vmm.set_access)
        return 2;
    g_vmm.handle_types = handle_types;
    g_vmm.on = 1;
    return 0;
}

/* The streams the broadcasts take in turn: NULL, then two of the fake
 * libcuda's (with it), so that operations change streams as NeMo-RL's
 * packed producer does. */
static void *g_streams[3];

/* The byte at offset i of broadcast number `seq` from `root`. */
static unsigned char pattern(int seq, int root, size_t i)
{
    return (unsigned char)(i * 131 + (size_t)seq * 7 + (size_t)root * 29 + 1);
}

/* Broadcasts of odd sizes from every root, then all-reduces; host memory
 * serves as device memory with the fake libcuda.  Returns a failure or NULL. */

/* A broadcast's buffer of n bytes: the root's holds broadcast `seq`'s pattern,
 * every other rank's 0xee, so that a byte not written shows. */
static unsigned char *bcast_buf(size_t n, int seq, int root)
{
    unsigned char *buf = xalloc(n);
    for (size_t i = 0; buf && i < n; i++)
        buf[i] = g_rank == root ? pattern(seq, root, i) : 0xee;
    return buf;
}

static const char *transfers(ncclComm_t comm, char *what, size_t len)
{
    /* The last, with g_big only: over 2 MiB, so two or three VMM pieces
     * (kept to one such size: with 4 KiB chunks, it is most of the run's
     * time). */
    static const size_t base[] = { 1, 4097, 8191, 3 * 4096 + 5, 100000, VMM_PIECE + 4099 };
    size_t nsizes = sizeof(base) / sizeof(base[0]) - !g_big, sizes[8];
    memcpy(sizes, base, nsizes * sizeof(*sizes));
    /* With g_huge, more than one of each of the chain's size-chosen steps
     * (ipc_bcast.c, step_of: 8 MiB up to 32 MiB, 46 MiB above): three of
     * 8 MiB, two of 46 (60 MiB, not more: every byte is filled and checked
     * by a loop, which ASan makes slow; t/13 bounds the run by these bytes). */
    if (g_huge) {
        sizes[nsizes++] = (20u << 20) + 3;
        sizes[nsizes++] = (60u << 20) + 5;
    }
    int seq = 0;
    for (int root = 0; root < g_nranks; root++) {
        for (size_t k = 0; k < nsizes; k++, seq++) {
            size_t n = sizes[k];
            unsigned char *buf = bcast_buf(n, seq, root);
            if (!buf)
                return "malloc";
            void *st = g_streams[seq % 3];
            ncclResult_t r = seq % 2 ? ncclBcast(buf, n, ncclUint8, root, comm, st)
                                     : ncclBroadcast(buf, buf, n, ncclUint8, root, comm, st);
            size_t bad = n;
            for (size_t i = 0; i < n && bad == n; i++)
                if (buf[i] != pattern(seq, root, i))
                    bad = i;
            xfree(buf);
            if (r != ncclSuccess || bad != n) {
                snprintf(what, len, "broadcast of %zu bytes from root %d: result %d, first wrong byte %zd", n, root,
                         (int)r, bad == n ? (ssize_t)-1 : (ssize_t)bad);
                return what;
            }
        }
    }
    /* AllGather, out of place and in place: block r holds rank r's bytes. */
    for (int inplace = 0; inplace < 2; inplace++) {
        size_t per = 5000;
        unsigned char *all = xalloc(per * (size_t)g_nranks), *mine = xalloc(per);
        if (!all || !mine) {
            xfree(all);
            xfree(mine);
            return "malloc";
        }
        memset(all, 0xee, per * (size_t)g_nranks);
        unsigned char *src = inplace ? all + per * (size_t)g_rank : mine;
        for (size_t i = 0; i < per; i++)
            src[i] = pattern(100 + inplace, g_rank, i);
        ncclResult_t r = ncclAllGather(src, all, per, ncclUint8, comm, NULL);
        int bad = r != ncclSuccess;
        for (int q = 0; q < g_nranks && !bad; q++)
            for (size_t i = 0; i < per && !bad; i++)
                bad = all[per * (size_t)q + i] != pattern(100 + inplace, q, i);
        xfree(all);
        xfree(mine);
        if (bad) {
            snprintf(what, len, "allgather (%s place): result %d", inplace ? "in" : "out of", (int)r);
            return what;
        }
    }
    /* Send/Recv in a group around the ring (each rank sends to the next and
     * receives from the previous, both at once: larger than the slots, so
     * neither side can finish before the other starts), then a lone pair. */
    if (g_nranks > 1) {
        size_t nb = 100000;
        unsigned char *out = malloc(nb), *in = malloc(nb);
        if (!out || !in) {
            free(out);
            free(in);
            return "malloc";
        }
        int next = (g_rank + 1) % g_nranks, prev = (g_rank - 1 + g_nranks) % g_nranks;
        for (size_t i = 0; i < nb; i++)
            out[i] = pattern(200, g_rank, i);
        memset(in, 0xee, nb);
        ncclResult_t r1 = ncclGroupStart(), r2 = ncclSend(out, nb, ncclUint8, next, comm, NULL),
                     r3 = ncclRecv(in, nb, ncclUint8, prev, comm, NULL), r4 = ncclGroupEnd();
        int bad = r1 || r2 || r3 || r4;
        for (size_t i = 0; i < nb && !bad; i++)
            bad = in[i] != pattern(200, prev, i);
        if (!bad && g_rank < 2) { /* outside a group: rank 0 sends to rank 1 */
            ncclResult_t r = g_rank == 0 ? ncclSend(out, nb, ncclUint8, 1, comm, NULL)
                                         : ncclRecv(in, nb, ncclUint8, 0, comm, NULL);
            bad = r != ncclSuccess;
            for (size_t i = 0; i < nb && !bad && g_rank == 1; i++)
                bad = in[i] != pattern(200, 0, i);
        }
        free(out);
        free(in);
        if (bad) {
            snprintf(what, len, "send/recv: results %d %d %d %d", (int)r1, (int)r2, (int)r3, (int)r4);
            return what;
        }
    }
    /* Every datatype with every op: each rank's input is bytes derived from
     * its rank, the expected result is computed here with the shim's own host
     * reduction in rank order (its arithmetic is unit-tested on its own):
     * this checks that the transport brings every rank's data, in order. */
    for (int dt = 0; dt < ncclNumTypes; dt++) {
        for (int op = 0; op < ncclNumOps; op++) {
            enum { N = 7 };
            unsigned char mine[N * 8], want[N * 8], theirs[N * 8];
            size_t es = dt == ncclInt8 || dt == ncclUint8 || dt >= ncclFloat8e4m3 ? 1
                        : dt == ncclFloat16 || dt == ncclBfloat16 ? 2
                        : dt == ncclInt64 || dt == ncclUint64 || dt == ncclFloat64 ? 8 : 4;
            for (int r = 0; r < g_nranks; r++) {
                unsigned char *dst = r == 0 ? want : theirs;
                for (size_t i = 0; i < N * es; i++) {
                    /* Small, finite values in every format: low bits only. */
                    size_t byte = i % es;
                    dst[i] = byte == es - 1 && es > 1 ? (unsigned char)(0x3c ^ (r & 1)) : (unsigned char)(r * 3 + i);
                    if (es == 1 && dt >= ncclFloat8e4m3)
                        dst[i] = (unsigned char)(0x30 + ((r + i) & 7));
                }
                if (r == g_rank)
                    memcpy(mine, dst, N * es);
                if (r > 0)
                    host_reduce(want, theirs, N, (ncclDataType_t)dt, op == ncclAvg ? ncclSum : (ncclRedOp_t)op);
            }
            if (op == ncclAvg)
                host_reduce_finish_avg(want, N, (ncclDataType_t)dt, g_nranks);
            ncclResult_t r = ncclAllReduce(mine, mine, N, (ncclDataType_t)dt, (ncclRedOp_t)op, comm, NULL);
            if (r != ncclSuccess || memcmp(mine, want, N * es) != 0) {
                snprintf(what, len, "all-reduce of datatype %d with op %d: result %d, %s", dt, op, (int)r,
                         r == ncclSuccess ? "wrong bytes" : "failed");
                return what;
            }
        }
    }
    /* All-reduce: int32 sum, float max, int8 prod (wraps), double avg. */
    int32_t i32[3] = { g_rank + 1, 10 * g_rank, -g_rank };
    float f32[2] = { (float)g_rank, -(float)g_rank };
    int8_t i8[1] = { 100 };
    double f64[1] = { (double)g_rank };
    int n = g_nranks;
    if (ncclAllReduce(i32, i32, 3, ncclInt32, ncclSum, comm, NULL) != ncclSuccess ||
        i32[0] != n * (n + 1) / 2 || i32[1] != 10 * n * (n - 1) / 2 || i32[2] != -n * (n - 1) / 2) {
        snprintf(what, len, "int32 sum: %d %d %d", i32[0], i32[1], i32[2]);
        return what;
    }
    if (ncclAllReduce(f32, f32, 2, ncclFloat32, ncclMax, comm, NULL) != ncclSuccess || f32[0] != (float)(n - 1) ||
        f32[1] != 0.0f) {
        snprintf(what, len, "float max: %g %g", f32[0], f32[1]);
        return what;
    }
    int8_t want = 100;
    for (int r = 1; r < n; r++)
        want = (int8_t)(uint8_t)((unsigned)(uint8_t)want * 100u);
    if (ncclAllReduce(i8, i8, 1, ncclInt8, ncclProd, comm, NULL) != ncclSuccess || i8[0] != want) {
        snprintf(what, len, "int8 prod: %d, want %d", i8[0], want);
        return what;
    }
    if (ncclAllReduce(f64, f64, 1, ncclFloat64, ncclAvg, comm, NULL) != ncclSuccess || f64[0] != (n - 1) / 2.0) {
        snprintf(what, len, "double avg: %g", f64[0]);
        return what;
    }
    return NULL;
}

/* Looked up, not linked: the fake NCCL this client links against is 2.28. */
static void suspend_resume(ncclComm_t comm, int i)
{
    ncclResult_t (*suspend)(ncclComm_t, int), (*resume)(ncclComm_t);
    ncclResult_t (*stats)(ncclComm_t, ncclCommMemStat_t, uint64_t *);
    *(void **)&suspend = dlsym(RTLD_DEFAULT, "ncclCommSuspend");
    *(void **)&resume = dlsym(RTLD_DEFAULT, "ncclCommResume");
    *(void **)&stats = dlsym(RTLD_DEFAULT, "ncclCommMemStats");
    if (!suspend || !resume || !stats) {
        printf("SUSPEND %d found=0\n", i);
        return;
    }
    uint64_t persist = 0, suspended = 0;
    float data[64] = { 0 };
    stats(comm, ncclStatGpuMemPersist, &persist);
    ncclResult_t rc = suspend(comm, NCCL_SUSPEND_MEM);
    stats(comm, ncclStatGpuMemSuspended, &suspended);
    ncclResult_t again = suspend(comm, NCCL_SUSPEND_MEM); /* NCCL: ncclInvalidUsage */
    ncclResult_t refused = ncclBroadcast(data, data, 64, ncclFloat32, 0, comm, NULL);
    ncclResult_t resumed = resume(comm);
    ncclResult_t after = ncclBroadcast(data, data, 64, ncclFloat32, 0, comm, NULL);
    printf("SUSPEND %d found=1 persist=%llu rc=%d suspended=%llu refused=%d resume=%d after=%d again=%d\n", i,
           (unsigned long long)persist, rc, (unsigned long long)suspended, refused, resumed, after, again);
}

/* --- collcfg=1 --- */

/* The collectives of NCCL 2.31 that move data on every communicator the
 * shim answers (ipc: broadcast, all-gather, all-reduce), checked byte for
 * byte; the other five compared with their plain forms' results; configs
 * NCCL refuses (bad magic, 2.30-sized) refused.  Each call's config is a
 * 2.32 one whose launchCompletionEvent is an event of the fake libcuda, so
 * that the shim records it (FAKE_CUDA_FAIL=cuEventRecord shows it does). */
#pragma weak ncclBroadcastConfig
#pragma weak ncclAllReduceConfig
#pragma weak ncclAllGatherConfig
#pragma weak ncclReduceConfig
#pragma weak ncclReduceScatterConfig
#pragma weak ncclAlltoAllConfig
#pragma weak ncclGatherConfig
#pragma weak ncclScatterConfig

static void coll_config_of(ncclCollConfig_t *c, void *event)
{
    memset(c, 0, sizeof(*c));
    c->size = sizeof(*c);
    c->magic = NCCL_COLLCONFIG_MAGIC;
    c->version = 23203;
    c->minCTAs = c->maxCTAs = c->nvlsCTAs = c->cgaClusterSize = c->CTAPolicy = NCCL_CONFIG_UNDEF_INT;
    c->forceAlgSelection = 1;
    c->userProfilerTag = 42;
    c->launchCompletionEvent = (cudaEvent_t)event;
}

static const char *coll_configs(ncclComm_t comm, int idx, char *what, size_t len)
{
    __typeof__(ncclBroadcastConfig) *bcast = ncclBroadcastConfig;
    __typeof__(ncclAllReduceConfig) *allreduce = ncclAllReduceConfig;
    __typeof__(ncclAllGatherConfig) *allgather = ncclAllGatherConfig;
    __typeof__(ncclReduceConfig) *reduce = ncclReduceConfig;
    __typeof__(ncclReduceScatterConfig) *reducescatter = ncclReduceScatterConfig;
    __typeof__(ncclAlltoAllConfig) *alltoall = ncclAlltoAllConfig;
    __typeof__(ncclGatherConfig) *gather = ncclGatherConfig;
    __typeof__(ncclScatterConfig) *scatter = ncclScatterConfig;
    if (!bcast || !allreduce || !allgather || !reduce || !reducescatter || !alltoall || !gather || !scatter)
        return "an nccl*Config function is missing";
    void *event = NULL;
    int (*event_create)(void **, unsigned) = NULL, (*event_destroy)(void *) = NULL;
    if (g_cuda) {
        *(void **)&event_create = dlsym(g_cuda, "cuEventCreate");
        *(void **)&event_destroy = dlsym(g_cuda, "cuEventDestroy_v2");
        if (!event_create || !event_destroy || event_create(&event, 0) != 0)
            return "cuEventCreate";
    }
    ncclCollConfig_t cfg;
    coll_config_of(&cfg, event);
    const char *bad = NULL;
    ncclResult_t r;
    /* Broadcasts of odd sizes from every root, on the three streams in turn. */
    static const size_t sizes[] = { 1, 4097, 100000 };
    int seq = 500;
    for (int root = 0; root < g_nranks && !bad; root++)
        for (size_t k = 0; k < sizeof(sizes) / sizeof(sizes[0]) && !bad; k++, seq++) {
            size_t n = sizes[k];
            unsigned char *buf = bcast_buf(n, seq, root);
            if (!buf)
                return "malloc";
            r = bcast(buf, buf, n, ncclUint8, root, comm, g_streams[seq % 3], seq % 2 ? &cfg : NULL);
            printf("COLLCFG-RC %d ncclBroadcastConfig %d\n", idx, (int)r);
            size_t wrong = n;
            for (size_t i = 0; i < n && wrong == n && g_collcfg == 1; i++)
                if (buf[i] != pattern(seq, root, i))
                    wrong = i;
            xfree(buf);
            if (r != ncclSuccess || wrong != n) {
                snprintf(what, len, "ncclBroadcastConfig of %zu bytes from root %d: result %d, first wrong byte %zd",
                         n, root, (int)r, wrong == n ? (ssize_t)-1 : (ssize_t)wrong);
                bad = what;
            }
        }
    /* All-gather: block q holds rank q's bytes. */
    size_t per = 3001;
    unsigned char *all = xalloc(per * (size_t)g_nranks), *mine = xalloc(per);
    int32_t sum[64], expect[64];
    if (!bad && all && mine) {
        memset(all, 0xee, per * (size_t)g_nranks);
        for (size_t i = 0; i < per; i++)
            mine[i] = pattern(600, g_rank, i);
        r = allgather(mine, all, per, ncclUint8, comm, NULL, &cfg);
        printf("COLLCFG-RC %d ncclAllGatherConfig %d\n", idx, (int)r);
        int wrong = r != ncclSuccess;
        for (int q = 0; q < g_nranks && !wrong && g_collcfg == 1; q++)
            for (size_t i = 0; i < per && !wrong; i++)
                wrong = all[per * (size_t)q + i] != pattern(600, q, i);
        if (wrong) {
            snprintf(what, len, "ncclAllGatherConfig: result %d", (int)r);
            bad = what;
        }
    } else if (!bad) {
        bad = "malloc";
    }
    xfree(all);
    xfree(mine);
    /* All-reduce (sum of int32): element i is the sum over ranks q of i + 1000 q. */
    if (!bad) {
        for (int i = 0; i < 64; i++) {
            sum[i] = i + 1000 * g_rank;
            expect[i] = g_nranks * i + 1000 * g_nranks * (g_nranks - 1) / 2;
        }
        r = allreduce(sum, sum, 64, ncclInt32, ncclSum, comm, NULL, &cfg);
        printf("COLLCFG-RC %d ncclAllReduceConfig %d\n", idx, (int)r);
        if (r != ncclSuccess || (g_collcfg == 1 && memcmp(sum, expect, sizeof(sum)) != 0)) {
            snprintf(what, len, "ncclAllReduceConfig: result %d, [1] = %d, not %d", (int)r, (int)sum[1],
                     (int)expect[1]);
            bad = what;
        }
    }
    /* The other five answer as their plain forms (the results printed for the test). */
    float a[64] = { 0 }, b[64 * 8] = { 0 };
    printf("COLLCFG-RC %d ncclReduceConfig %d plain %d\n", idx,
           (int)reduce(a, b, 4, ncclFloat32, ncclSum, 0, comm, NULL, &cfg),
           (int)ncclReduce(a, b, 4, ncclFloat32, ncclSum, 0, comm, NULL));
    printf("COLLCFG-RC %d ncclReduceScatterConfig %d plain %d\n", idx,
           (int)reducescatter(a, b, 1, ncclFloat32, ncclSum, comm, NULL, &cfg),
           (int)ncclReduceScatter(a, b, 1, ncclFloat32, ncclSum, comm, NULL));
    printf("COLLCFG-RC %d ncclAlltoAllConfig %d plain %d\n", idx,
           (int)alltoall(a, b, 1, ncclFloat32, comm, NULL, &cfg), (int)ncclAlltoAll(a, b, 1, ncclFloat32, comm, NULL));
    printf("COLLCFG-RC %d ncclGatherConfig %d plain %d\n", idx, (int)gather(a, b, 1, ncclFloat32, 0, comm, NULL, &cfg),
           (int)ncclGather(a, b, 1, ncclFloat32, 0, comm, NULL));
    printf("COLLCFG-RC %d ncclScatterConfig %d plain %d\n", idx,
           (int)scatter(a, b, 1, ncclFloat32, 0, comm, NULL, &cfg), (int)ncclScatter(a, b, 1, ncclFloat32, 0, comm, NULL));
    /* Configs NCCL cannot read: every rank calls, none moves data. */
    ncclCollConfig_t wrong = cfg;
    wrong.magic = 0x12345678u;
    printf("COLLCFG-RC %d badmagic %d\n", idx, (int)allreduce(sum, sum, 64, ncclInt32, ncclSum, comm, NULL, &wrong));
    wrong = cfg;
    wrong.size = NCCL_COLLCONFIG_SIZE_2_31 - 8;
    printf("COLLCFG-RC %d smallsize %d\n", idx, (int)allreduce(sum, sum, 64, ncclInt32, ncclSum, comm, NULL, &wrong));
    if (event && event_destroy(event) != 0 && !bad)
        bad = "cuEventDestroy";
    return bad;
}

/* --- suspend=2 --- */

/* The processes of a test agree through files in RANK_CLIENT_SYNC: one
 * creates a name, the others wait for it (bounded: 20 s). */
static void sync_path(char *out, size_t len, const char *what, int cyc)
{
    snprintf(out, len, "%s/%s.%d", getenv("RANK_CLIENT_SYNC") ? getenv("RANK_CLIENT_SYNC") : "/tmp", what, cyc);
}

static void sync_post(const char *what, int cyc)
{
    char path[512];
    sync_path(path, sizeof(path), what, cyc);
    FILE *f = fopen(path, "w");
    if (f)
        fclose(f);
}

static int sync_wait(const char *what, int cyc)
{
    char path[512];
    sync_path(path, sizeof(path), what, cyc);
    for (long i = 0, n = test_bound(20000); i < n; i++) {
        if (access(path, F_OK) == 0)
            return 0;
        struct timespec ts = { 0, 1000000 };
        nanosleep(&ts, NULL);
    }
    return -1;
}

/* Free device memory as the (fake) driver says: per process with the fake. */
static long long free_mem(void)
{
    int (*info)(size_t *, size_t *) = NULL;
    size_t f = 0, t = 0;
    if (g_cuda)
        *(void **)&info = dlsym(g_cuda, "cuMemGetInfo_v2");
    return info && info(&f, &t) == 0 ? (long long)f : -1;
}

static int freed_mapped(void)
{
    int (*fm)(void) = NULL;
    if (g_cuda)
        *(void **)&fm = dlsym(g_cuda, "fakeCudaFreedMapped");
    return fm ? fm() : -1;
}

/* A broadcast of 100000 bytes (staged through the sender's slots: malloc'ed
 * memory) from `root`, checked; -1 if it failed or the bytes are wrong. */
static int bcast_checked(ncclComm_t comm, int root, int seq, ncclResult_t *res)
{
    size_t n = 100000;
    unsigned char *buf = malloc(n);
    if (!buf)
        return -1;
    for (size_t i = 0; i < n; i++)
        buf[i] = g_rank == root ? pattern(seq, root, i) : 0xee;
    ncclResult_t r = ncclBroadcast(buf, buf, n, ncclUint8, root, comm, NULL);
    if (res)
        *res = r;
    int bad = r != ncclSuccess;
    for (size_t i = 0; i < n && !bad; i++)
        bad = buf[i] != pattern(seq, root, i);
    free(buf);
    return bad ? -1 : 0;
}

/* `bytes` from `from` to `to` with ncclSend/ncclRecv (other ranks do
 * nothing), checked at `to`; -1 if it failed or the bytes are wrong. */
static int p2p_checked(ncclComm_t comm, int from, int to, int seq, ncclResult_t *res)
{
    size_t n = 100000;
    unsigned char *buf = malloc(n);
    if (!buf)
        return -1;
    for (size_t i = 0; i < n; i++)
        buf[i] = g_rank == from ? pattern(seq, from, i) : 0xee;
    ncclResult_t r = g_rank == from ? ncclSend(buf, n, ncclUint8, to, comm, NULL)
                   : g_rank == to   ? ncclRecv(buf, n, ncclUint8, from, comm, NULL)
                                    : ncclSuccess;
    if (res)
        *res = r;
    int bad = r != ncclSuccess;
    for (size_t i = 0; i < n && !bad && g_rank == to; i++)
        bad = buf[i] != pattern(seq, from, i);
    free(buf);
    return bad ? -1 : 0;
}

/*
 * Colocated RL's sleep between refits, `g_cycles` times, the last rank (S)
 * the inference engine: a refit (broadcast from rank 0), S suspends with
 * NCCL_SUSPEND_MEM and waits (bounded) until its free memory grew by its
 * staging; the others then broadcast from S, which needs S's staging (rank
 * S+1 copies out of it) and so waits for S's resume; S resumes and takes
 * part (with p2p=1: S sends to rank 0 instead, whose Recv copies out of
 * S's staging); then an all-reduce (every rank reads S's new staging);
 * every byte checked.  With midbcast=1 the others start a broadcast
 * from rank 0 before S suspends (S is mid-way in it for them); with
 * resumefail=1 rank 0's broadcast from S fails first (S not resumed within
 * NCCLSHIM_IPC_RESUME_WAIT_MS), then S resumes and it is retried.  At the
 * end S suspends and destroys without resuming.
 *   "CYCLES i rank=<r> cycles=<n> ok=<n> released=<n> held=<n> freed_mapped=<n> refused=<n>
 *    failed_first=<n> leak=<bytes> final=<rc> bad=<first failure or ->"
 */
static void suspend_cycles(ncclComm_t comm, int idx)
{
    ncclResult_t (*suspend)(ncclComm_t, int), (*resume)(ncclComm_t);
    ncclResult_t (*stats)(ncclComm_t, ncclCommMemStat_t, uint64_t *);
    *(void **)&suspend = dlsym(RTLD_DEFAULT, "ncclCommSuspend");
    *(void **)&resume = dlsym(RTLD_DEFAULT, "ncclCommResume");
    *(void **)&stats = dlsym(RTLD_DEFAULT, "ncclCommMemStats");
    int S = g_nranks - 1, okc = 0, released = 0, held = 0, refused = 0, failed_first = 0;
    long long leak = 0, start_free = -1;
    char bad[200] = "-";
    ncclResult_t final = ncclSuccess;
#define BAD(...)                                           \
    do {                                                   \
        if (bad[0] == '-')                                 \
            snprintf(bad, sizeof(bad), __VA_ARGS__);       \
    } while (0)
    if (!suspend || !resume || !stats)
        BAD("no ncclCommSuspend");
    for (int cyc = 0; cyc < g_cycles && bad[0] == '-'; cyc++) {
        if (bcast_checked(comm, 0, 3 * cyc, NULL) != 0) {
            BAD("cycle %d: refit", cyc);
            break;
        }
        if (g_midbcast && g_rank != S) {
            if (g_rank == 0)
                sync_post("started", cyc);
            if (bcast_checked(comm, 0, 3 * cyc + 2, NULL) != 0)
                BAD("cycle %d: broadcast during the suspend", cyc);
        }
        if (g_rank == S) {
            if (g_midbcast && sync_wait("started", cyc) != 0)
                BAD("cycle %d: no start", cyc);
            long long f0 = free_mem();
            if (start_free < 0)
                start_free = f0;
            int fm0 = freed_mapped();
            uint64_t sb = 0, su = 0, total0 = 0, total1 = 0;
            stats(comm, ncclStatGpuMemTotal, &total0);
            ncclResult_t r = suspend(comm, NCCL_SUSPEND_MEM);
            stats(comm, ncclStatGpuMemSuspend, &sb);
            stats(comm, ncclStatGpuMemSuspended, &su);
            stats(comm, ncclStatGpuMemTotal, &total1);
            if (r != ncclSuccess || su != 1 || total1 != total0 || sb == 0)
                BAD("cycle %d: suspend %d, suspended %llu, suspendable %llu, total %llu then %llu", cyc, (int)r,
                    (unsigned long long)su, (unsigned long long)sb, (unsigned long long)total0,
                    (unsigned long long)total1);
            /* The peers' reapers let go within milliseconds. */
            int rel = 0;
            for (long k = 0, n = g_midbcast ? 1 : test_bound(5000); k < n && !rel; k++) {
                rel = free_mem() - f0 >= (long long)sb;
                if (!rel && !g_midbcast) {
                    struct timespec ts = { 0, 1000000 };
                    nanosleep(&ts, NULL);
                }
            }
            released += rel;
            held += !rel;
            if (freed_mapped() != fm0)
                BAD("cycle %d: the staging was freed while a peer mapped it", cyc);
            float x[4] = { 0 };
            refused += ncclBroadcast(x, x, 4, ncclFloat32, 0, comm, NULL) == ncclInvalidUsage;
            if (!g_midbcast)
                sync_post("suspended", cyc);
            if (g_resumefail && sync_wait("peerfailed", cyc) != 0)
                BAD("cycle %d: the peer's broadcast did not fail", cyc);
            r = resume(comm);
            stats(comm, ncclStatGpuMemSuspended, &su);
            if (r != ncclSuccess || su != 0)
                BAD("cycle %d: resume %d, suspended %llu", cyc, (int)r, (unsigned long long)su);
            if (g_midbcast && bcast_checked(comm, 0, 3 * cyc + 2, NULL) != 0)
                BAD("cycle %d: the broadcast it was mid-way in", cyc);
            leak = start_free - free_mem();
        } else if (!g_midbcast && sync_wait("suspended", cyc) != 0) {
            BAD("cycle %d: rank %d never suspended", cyc, S);
        }
        if (g_midbcast)
            continue;
        /* From S: rank S+1 (0) copies out of S's staging (a staged hop, or a Recv). */
        ncclResult_t r = ncclSuccess;
        int got = g_p2p ? p2p_checked(comm, S, 0, 3 * cyc + 1, &r) : bcast_checked(comm, S, 3 * cyc + 1, &r);
        if (got != 0 && g_resumefail && g_rank == 0 && r == ncclInvalidUsage) {
            failed_first++;
            sync_post("peerfailed", cyc);
            got = bcast_checked(comm, S, 3 * cyc + 1, &r);
        }
        if (got != 0) {
            BAD("cycle %d: %s from the suspended rank: result %d", cyc, g_p2p ? "Send/Recv" : "broadcast", (int)r);
            continue;
        }
        /* Every rank reads every rank's slot: S's new staging, mapped anew. */
        int32_t v[5] = { g_rank + 1, g_rank + 1, g_rank + 1, cyc, 1 };
        r = ncclAllReduce(v, v, 5, ncclInt32, ncclSum, comm, NULL);
        int n = g_nranks;
        if (r != ncclSuccess || v[0] != n * (n + 1) / 2 || v[3] != n * cyc || v[4] != n)
            BAD("cycle %d: all-reduce after the resume: result %d, %d", cyc, (int)r, v[0]);
        else
            okc++;
    }
    if (g_midbcast)
        okc = g_cycles;
    if (g_rank == S && suspend)
        final = suspend(comm, NCCL_SUSPEND_MEM);
#undef BAD
    printf("CYCLES %d rank=%d cycles=%d ok=%d released=%d held=%d freed_mapped=%d refused=%d failed_first=%d "
           "leak=%lld final=%d bad=%s\n", idx, g_rank, g_cycles, okc, released, held, freed_mapped(), refused,
           failed_first, leak, (int)final, bad);
}

/* --- vmm=forget, vmm=remap, poke=1, hold=1: shim/ipc/ipc_vmm.c beyond the transfers --- */

static struct vbuf *vbuf_of(const void *p)
{
    pthread_mutex_lock(&g_vbuf_lock);
    struct vbuf *v = g_vbufs;
    while (v && v->buf != p)
        v = v->next;
    pthread_mutex_unlock(&g_vbuf_lock);
    return v;
}

/* What this process holds of VMM objects now, as the fake libcuda counts
 * (handles not released, mappings, reservations; imports in all): -1 each
 * without it. */
static void vmm_held(int *handles, int *maps, int *reserves, int *imports)
{
    int (*st)(int *, int *, int *, int *) = NULL;
    *handles = *maps = *reserves = *imports = -1;
    if (g_cuda)
        *(void **)&st = dlsym(g_cuda, "fakeCudaVmmStats");
    if (st)
        st(handles, maps, reserves, imports);
}

static long long mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* A broadcast of the n bytes at buf (in place) from root, checked: 0, or -1. */
static int bcast_into(ncclComm_t comm, unsigned char *buf, size_t n, int root, int seq)
{
    for (size_t i = 0; i < n; i++)
        buf[i] = g_rank == root ? pattern(seq, root, i) : 0xee;
    if (ncclBroadcast(buf, buf, n, ncclUint8, root, comm, NULL) != ncclSuccess)
        return -1;
    for (size_t i = 0; i < n; i++)
        if (buf[i] != pattern(seq, root, i))
            return -1;
    return 0;
}

static unsigned long long ipc_opened(void)
{
    unsigned long long (*op)(void) = NULL;
    if (g_cuda)
        *(void **)&op = dlsym(g_cuda, "fakeCudaOpened");
    return op ? op() : 0;
}

/* IPC handles open in this process now (the fake's count). */
static int ipc_open_now(void)
{
    int (*st)(int *, int *) = NULL;
    int a = -1, o = -1;
    if (g_cuda)
        *(void **)&st = dlsym(g_cuda, "fakeCudaStats");
    if (st)
        st(&a, &o);
    return o;
}

/*
 * keep=1 (RANK_CLIENT_MEM=cuda; run with a long NCCLSHIM_IPC_PUSH_WAIT_US, so
 * that every hop but the first is pushed and which rank maps which buffer
 * does not change): buffers A and B (cuMemAlloc), two rounds of a broadcast
 * into each from every root (each rank maps its neighbour's), a pause longer
 * than the mappings' old idle time (1.5 s: a training step), the same
 * broadcasts again: no buffer opened again.  Then every rank frees A and
 * keeps the communicator: A's memory, which the neighbour's mapping keeps
 * allocated, is given back within 10 s (the neighbour closes its mapping
 * once told A is gone), and the mapping of B stays.  No broadcast after the
 * free: the fake's streams block the calling thread, which would hold the
 * lock the neighbour's reaper needs.
 * keep=2: rank 0 is the only root, so a receiver whose buffers are pushed
 * into exports them and maps nothing of its neighbour's (its reaper must
 * still look at its exports: it slept without a bound while nothing was
 * mapped, and A stayed allocated on the GPU).
 *   "KEEP i opened=<IPC handles opened in the first two rounds> reopened=<in the
 *    third> freed_mapped=<A was mapped elsewhere when freed: 1> back_ms=<until A's
 *    memory was given back, -1: not in 10 s> open=<handles open before the free>/<after>
 *    bad=<first failure or ->"
 */
static void keep_maps(ncclComm_t comm, int idx)
{
    enum { NB = 2, BYTES = 100000 };
    unsigned char *buf[NB] = { NULL };
    char bad[160] = "-";
    for (int k = 0; k < NB; k++)
        if (!(buf[k] = xalloc(BYTES)))
            snprintf(bad, sizeof(bad), "buffer %d not allocated", k);
    unsigned long long o0 = ipc_opened(), o2 = o0, o3 = o0;
    for (int round = 0; round < 3 && bad[0] == '-'; round++) {
        if (round == 2) {
            o2 = ipc_opened();
            struct timespec pause = { 1, 500000000 };
            nanosleep(&pause, NULL);
        }
        for (int root = 0, seq = 500; root < (g_keep == 2 ? 1 : g_nranks) && bad[0] == '-'; root++)
            for (int k = 0; k < NB && bad[0] == '-'; k++, seq++)
                if (bcast_into(comm, buf[k], BYTES, root, seq) != 0)
                    snprintf(bad, sizeof(bad), "round %d: broadcast from root %d into buffer %d", round, root, k);
    }
    o3 = ipc_opened();
    int open0 = ipc_open_now();
    long long before = free_mem(), ms = -1; /* the fake: this process's, its freed memory mapped elsewhere held */
    int fm0 = freed_mapped();
    xfree(buf[0]);
    int fm = freed_mapped() - fm0;
    long long t0 = mono_ms();
    for (;;) {
        if (before >= 0 && free_mem() >= before + BYTES) {
            ms = mono_ms() - t0;
            break;
        }
        if (mono_ms() - t0 > test_bound(10000))
            break;
        struct timespec ts = { 0, 5000000 };
        nanosleep(&ts, NULL);
    }
    /* keep=1: the neighbour's A, mapped here, goes when its reaper says it
     * is gone: its own check, up to half a second after this one's. */
    while (g_keep == 1 && ipc_open_now() >= open0 && mono_ms() - t0 <= test_bound(10000)) {
        struct timespec ts = { 0, 5000000 };
        nanosleep(&ts, NULL);
    }
    int open1 = ipc_open_now();
    xfree(buf[1]);
    printf("KEEP %d opened=%llu reopened=%llu freed_mapped=%d back_ms=%lld open=%d/%d bad=%s\n", idx, o2 - o0,
           o3 - o2, fm, ms, open0, open1, bad);
}

/*
 * vmm=forget (RANK_CLIENT_MEM=vmm): three buffers (one of several pieces),
 * kept, a broadcast into each from every root (so each rank's neighbours
 * import its pieces), then every rank frees them and keeps the communicator:
 * its neighbours are told to forget the pieces (their reapers look once a
 * second) and unmap them, so within 10 s this process holds no VMM handle,
 * mapping or reservation any more, with the communicator still alive.
 *   "FORGET i peer_maps=<pieces of the neighbours mapped here before the free>
 *    imports=<n> left=<handles>/<maps>/<reserves> ms=<until none> bad=<first failure or ->"
 */
static void vmm_forget(ncclComm_t comm, int idx)
{
    static const size_t sizes[] = { 4097, 100000, VMM_PIECE + 4099 };
    enum { NB = sizeof(sizes) / sizeof(sizes[0]) };
    unsigned char *buf[NB] = { NULL };
    char bad[200] = "-";
    int own = 0, h = -1, m = -1, r = -1, imp = -1, peer_maps = -1;
    long long ms = -1;
    for (int k = 0; k < NB && bad[0] == '-'; k++) {
        buf[k] = xalloc(sizes[k]);
        struct vbuf *v = buf[k] ? vbuf_of(buf[k]) : NULL;
        if (v)
            own += v->pieces;
        else
            snprintf(bad, sizeof(bad), "buffer %d: no VMM buffer (RANK_CLIENT_MEM=vmm?)", k);
    }
    for (int root = 0, seq = 400; root < g_nranks && bad[0] == '-'; root++)
        for (int k = 0; k < NB && bad[0] == '-'; k++, seq++)
            if (bcast_into(comm, buf[k], sizes[k], root, seq) != 0)
                snprintf(bad, sizeof(bad), "broadcast of %zu bytes from root %d", sizes[k], root);
    vmm_held(&h, &m, &r, &imp);
    peer_maps = m - own;
    for (int k = 0; k < NB; k++)
        xfree(buf[k]);
    long long t0 = mono_ms();
    for (;;) {
        vmm_held(&h, &m, &r, &imp);
        if ((h == 0 && m == 0 && r == 0) || mono_ms() - t0 > test_bound(10000))
            break;
        struct timespec ts = { 0, 5000000 };
        nanosleep(&ts, NULL);
    }
    if (h == 0 && m == 0 && r == 0)
        ms = mono_ms() - t0;
    printf("FORGET %d peer_maps=%d imports=%d left=%d/%d/%d ms=%lld bad=%s\n", idx, peer_maps, imp, h, m, r, ms, bad);
}

/* Every piece of v unmapped and released, and a new one (another memory
 * block) mapped at its address: what PyTorch does when it gives a piece back
 * and later maps a new one there.  0, or the first failure. */
static int vbuf_replace(struct vbuf *v)
{
    vmm_prop_t prop;
    vmm_access_t acc;
    vmm_props(&prop, &acc);
    for (int i = 0; i < v->pieces; i++) {
        unsigned long long at = v->base + (unsigned long long)i * VMM_PIECE, h = 0;
        int rc = g_vmm.unmap(at, VMM_PIECE);
        if (!rc)
            rc = g_vmm.release(v->handle[i]);
        if (!rc)
            rc = g_vmm.create(&h, VMM_PIECE, &prop, 0);
        if (rc)
            return rc;
        v->handle[i] = h;
        rc = g_vmm.map(at, VMM_PIECE, 0, h, 0);
        if (!rc)
            rc = g_vmm.set_access(at, VMM_PIECE, &acc, 1);
        if (rc)
            return rc;
    }
    return 0;
}

/* Pieces 0 and 1 of v trade places: the same memory blocks, mapped elsewhere. */
static int vbuf_swap(struct vbuf *v)
{
    vmm_prop_t prop;
    vmm_access_t acc;
    vmm_props(&prop, &acc);
    int rc = g_vmm.unmap(v->base, 2 * VMM_PIECE);
    if (!rc)
        rc = g_vmm.map(v->base, VMM_PIECE, 0, v->handle[1], 0);
    if (!rc)
        rc = g_vmm.map(v->base + VMM_PIECE, VMM_PIECE, 0, v->handle[0], 0);
    if (!rc) {
        unsigned long long h = v->handle[0];
        v->handle[0] = v->handle[1];
        v->handle[1] = h;
        rc = g_vmm.set_access(v->base, 2 * VMM_PIECE, &acc, 1);
    }
    return rc;
}

/*
 * vmm=remap (RANK_CLIENT_MEM=vmm): one buffer over two or three pieces, kept
 * in its reservation; a broadcast into it from every root, then every rank
 * replaces each of its pieces in place (new memory at the same address),
 * broadcasts from every root again (other bytes), then swaps its first two
 * pieces (the same memory mapped elsewhere) and broadcasts again: every
 * result exact, so no neighbour wrote into or read from a piece that is no
 * longer mapped where it was.
 *   "REMAP i pieces=<of the buffer> bad=<first failure or ->"
 */
static void vmm_remap(ncclComm_t comm, int idx)
{
    static const char *const phase[] = { "as made", "pieces replaced in place", "pieces swapped" };
    size_t n = VMM_PIECE + 4099;
    unsigned char *buf = xalloc(n);
    struct vbuf *v = buf ? vbuf_of(buf) : NULL;
    char bad[200] = "-";
    if (!v || v->pieces < 2)
        snprintf(bad, sizeof(bad), "no VMM buffer of two pieces (RANK_CLIENT_MEM=vmm?)");
    for (int ph = 0; ph < 3 && bad[0] == '-'; ph++) {
        int rc = ph == 1 ? vbuf_replace(v) : ph == 2 ? vbuf_swap(v) : 0;
        if (rc)
            snprintf(bad, sizeof(bad), "%s: CUresult %d", phase[ph], rc);
        for (int root = 0; root < g_nranks && bad[0] == '-'; root++)
            if (bcast_into(comm, buf, n, root, 300 + 10 * ph + root) != 0)
                snprintf(bad, sizeof(bad), "%s: broadcast from root %d", phase[ph], root);
    }
    printf("REMAP %d pieces=%d bad=%s\n", idx, v ? v->pieces : 0, bad);
    xfree(buf);
}

/*
 * vmm=alias (RANK_CLIENT_MEM=vmm): one piece mapped twice, back to back, in
 * one reservation (CUDA allows it; both mappings say the same memory block
 * id), and a buffer over both: broadcasts into it from every root, checked
 * (the pattern repeats every 256 bytes, so the two views agree).  Such memory
 * cannot be shared piece by piece: staged, never a failure.
 *   "ALIAS i bad=<first failure or ->"
 */
static void vmm_alias(ncclComm_t comm, int idx)
{
    vmm_prop_t prop;
    vmm_access_t acc;
    vmm_props(&prop, &acc);
    char bad[200] = "-";
    unsigned long long base = 0, h = 0;
    int rc = g_vmm.reserve(&base, 2 * VMM_PIECE, 0, 0, 0);
    if (!rc)
        rc = g_vmm.create(&h, VMM_PIECE, &prop, 0);
    int mapped = 0;
    for (; !rc && mapped < 2; mapped++)
        rc = g_vmm.map(base + mapped * VMM_PIECE, VMM_PIECE, 0, h, 0);
    if (!rc)
        rc = g_vmm.set_access(base, 2 * VMM_PIECE, &acc, 1);
    if (rc)
        snprintf(bad, sizeof(bad), "an aliased VMM buffer: CUresult %d", rc);
    size_t off = 4096, n = VMM_PIECE + 8192;
    for (int root = 0; root < g_nranks && bad[0] == '-'; root++)
        if (bcast_into(comm, (unsigned char *)(uintptr_t)base + off, n, root, 500 + root) != 0)
            snprintf(bad, sizeof(bad), "broadcast from root %d", root);
    for (int i = 0; i < mapped; i++)
        g_vmm.unmap(base + i * VMM_PIECE, VMM_PIECE);
    if (h)
        g_vmm.release(h);
    if (base)
        g_vmm.address_free(base, 2 * VMM_PIECE);
    printf("ALIAS %d bad=%s\n", idx, bad);
}

/*
 * vmm=fresh (RANK_CLIENT_MEM=vmm): a loop of broadcasts from rank 0 only, as
 * a refit is: one into a small buffer, then one into each of FRESH_N fresh
 * buffers of two pieces, kept until the end (so every piece is new).  With
 * NCCLSHIM_IPC_PUSH_WAIT_US large, rank 0 finds rank 1 in before it
 * describes each of the fresh ones (rank 1 published the broadcast before),
 * so every hop after the first is pushed, and rank 0 need not share its own
 * buffers' pieces: the test reads that from the records.
 *   "FRESH i n=<buffers> pieces=<of each> bad=<first failure or ->"
 */
enum { FRESH_N = 4 };
static void vmm_fresh(ncclComm_t comm, int idx)
{
    size_t n = VMM_PIECE + 4099;
    unsigned char *small = xalloc(4097), *buf[FRESH_N] = { NULL };
    char bad[200] = "-";
    int pieces = 0;
    if (!small || bcast_into(comm, small, 4097, 0, 600) != 0)
        snprintf(bad, sizeof(bad), "the first broadcast (4097 bytes)");
    for (int k = 0; k < FRESH_N && bad[0] == '-'; k++) {
        buf[k] = xalloc(n);
        struct vbuf *v = buf[k] ? vbuf_of(buf[k]) : NULL;
        if (!v || v->pieces < 2)
            snprintf(bad, sizeof(bad), "buffer %d: no VMM buffer of two pieces (RANK_CLIENT_MEM=vmm?)", k);
        else if (bcast_into(comm, buf[k], n, 0, 601 + k) != 0)
            snprintf(bad, sizeof(bad), "broadcast %d into a fresh buffer", k);
        else
            pieces = v->pieces;
    }
    printf("FRESH %d n=%d pieces=%d bad=%s\n", idx, FRESH_N, pieces, bad);
    for (int k = 0; k < FRESH_N; k++)
        xfree(buf[k]);
    xfree(small);
}

/*
 * poke=1: from this process (the one its successor's socket of
 * shim/ipc/ipc_vmm.c expects its predecessor in), a connection to that
 * socket, whose path the test writes into the sync file "pokepath", with a
 * HELLO that claims the wrong rank; "poked" says it was sent.  Once the
 * communicator is up (before the transfers: the socket's owner accepts its
 * real predecessor in its connect or its reaper, and keeps the connection it
 * accepted until destroy), poke_result says whether it closed this one
 * (rejected), waiting up to 10 s:  "POKE sent=<0|1> closed=<0|1>".  One ID only.
 */
static int g_poke, g_hold;
static int g_poke_fd = -1;
static pthread_t g_poke_thread;

static void *poke_main(void *arg)
{
    (void)arg;
    char file[512], path[sizeof(((struct sockaddr_un *)0)->sun_path)] = "";
    sync_path(file, sizeof(file), "pokepath", 0);
    FILE *f = sync_wait("pokepath", 0) == 0 ? fopen(file, "r") : NULL;
    if (!f || !fgets(path, sizeof(path), f)) {
        if (f)
            fclose(f);
        fprintf(stderr, "rank_client: poke: no path in %s\n", file);
        return NULL;
    }
    fclose(f);
    path[strcspn(path, "\n")] = '\0';
    struct sockaddr_un sa = { .sun_family = AF_UNIX };
    snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", path);
    struct {
        uint32_t magic, kind;
        uint64_t seq;
        int32_t rank;
        uint32_t n;
    } hello = { 0x766d6d73u /* VMM_MAGIC */, 1 /* MSG_HELLO */, 0, g_rank + 1, 0 };
    int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
    if (fd < 0 || connect(fd, (struct sockaddr *)&sa, sizeof(sa)) != 0 ||
        send(fd, &hello, sizeof(hello), MSG_NOSIGNAL) != (ssize_t)sizeof(hello)) {
        fprintf(stderr, "rank_client: poke: %s: %s\n", path, strerror(errno));
        if (fd >= 0)
            close(fd);
        fd = -1;
    }
    g_poke_fd = fd;
    sync_post("poked", 0);
    return NULL;
}

static void poke_result(void)
{
    pthread_join(g_poke_thread, NULL);
    int closed = 0;
    if (g_poke_fd >= 0) {
        struct pollfd p = { g_poke_fd, POLLIN, 0 };
        char c;
        ssize_t k = poll(&p, 1, 10000) == 1 ? recv(g_poke_fd, &c, 1, MSG_DONTWAIT) : 1;
        closed = k == 0 || (k < 0 && errno == ECONNRESET); /* closed, with or without our HELLO read */
        close(g_poke_fd);
    }
    printf("POKE sent=%d closed=%d\n", g_poke_fd >= 0, closed);
}

static void *run_one(void *arg)
{
    int i = (int)(intptr_t)arg;
    ncclComm_t comm = NULL;
    ncclResult_t rc;
    ncclConfig_t cfg;
    client_config(&cfg, 1);
    if (g_cfgver)
        client_config_of(&cfg, (unsigned)g_cfgver);
    if (g_fn == FN_CONFIG)
        rc = ncclCommInitRankConfig(&comm, g_nranks, g_ids[i], g_rank, &cfg);
    else if (g_fn == FN_SCALABLE)
        rc = ncclCommInitRankScalable(&comm, g_nranks, g_rank, 1, &g_ids[i], &cfg);
    else
        rc = ncclCommInitRank(&comm, g_nranks, g_ids[i], g_rank);
    int count = -1, rank = -1, dev = -1;
    ncclResult_t ops = ncclSuccess, destroy = ncclSuccess;
    if (rc == ncclSuccess) {
        ncclCommCount(comm, &count);
        ncclCommUserRank(comm, &rank);
        ncclCommCuDevice(comm, &dev);
        float data[256];
        for (int k = 0; k < 256; k++)
            data[k] = (float)k;
        for (int k = 0; k < g_ops && ops == ncclSuccess; k++) {
            ops = ncclAllReduce(data, data, 256, ncclFloat32, ncclSum, comm, NULL);
            if (ops == ncclSuccess)
                ops = ncclBroadcast(data, data, 256, ncclFloat32, 0, comm, NULL);
        }
        if (g_vanish)
            _exit(0);
        if (g_poke)
            poke_result();
        if (g_xfer) {
            char what[256];
            const char *bad = transfers(comm, what, sizeof(what));
            printf("XFER %d %s%s\n", i, bad ? "fail " : "ok", bad ? bad : "");
            ncclResult_t ae = ncclInternalError;
            ncclCommGetAsyncError(comm, &ae);
            printf("ASYNC %d %d\n", i, (int)ae);
        }
        if (g_allapi)
            call_all(comm, i);
        if (g_collcfg) {
            char what[256];
            const char *bad = coll_configs(comm, i, what, sizeof(what));
            printf("COLLCFG %d %s%s\n", i, bad ? "fail " : "ok", bad ? bad : "");
        }
        if (g_suspend == 1)
            suspend_resume(comm, i);
        else if (g_suspend == 2)
            suspend_cycles(comm, i);
        if (g_keep)
            keep_maps(comm, i);
        if (g_vmmtest == VMMTEST_FORGET)
            vmm_forget(comm, i);
        else if (g_vmmtest == VMMTEST_REMAP)
            vmm_remap(comm, i);
        else if (g_vmmtest == VMMTEST_ALIAS)
            vmm_alias(comm, i);
        else if (g_vmmtest == VMMTEST_FRESH)
            vmm_fresh(comm, i);
        if (g_hold && sync_wait("release", 0) != 0)
            fprintf(stderr, "rank_client: hold=1: no release within 20 s\n");
        destroy = ncclCommDestroy(comm);
    }
    printf("COMM %d rc=%d count=%d rank=%d dev=%d ops=%d destroy=%d\n", i, rc, count, rank, dev, ops, destroy);
    return NULL;
}

static void opt(int argc, char **argv, int from, int *delay_ms, int *leaks)
{
    for (int i = from; i < argc; i++) {
        if (strncmp(argv[i], "fn=", 3) == 0)
            g_fn = strcmp(argv[i] + 3, "config") == 0 ? FN_CONFIG
                 : strcmp(argv[i] + 3, "scalable") == 0 ? FN_SCALABLE : FN_INITRANK;
        else if (strncmp(argv[i], "cfgver=", 7) == 0)
            g_cfgver = atoi(argv[i] + 7);
        else if (strncmp(argv[i], "delay_ms=", 9) == 0)
            *delay_ms = atoi(argv[i] + 9);
        else if (strncmp(argv[i], "ops=", 4) == 0)
            g_ops = atoi(argv[i] + 4);
        else if (strncmp(argv[i], "vanish=", 7) == 0)
            g_vanish = atoi(argv[i] + 7);
        else if (strncmp(argv[i], "xfer=", 5) == 0)
            g_xfer = atoi(argv[i] + 5);
        else if (strncmp(argv[i], "allapi=", 7) == 0)
            g_allapi = atoi(argv[i] + 7);
        else if (strncmp(argv[i], "suspend=", 8) == 0)
            g_suspend = atoi(argv[i] + 8);
        else if (strncmp(argv[i], "cycles=", 7) == 0)
            g_cycles = atoi(argv[i] + 7);
        else if (strncmp(argv[i], "midbcast=", 9) == 0)
            g_midbcast = atoi(argv[i] + 9);
        else if (strncmp(argv[i], "p2p=", 4) == 0)
            g_p2p = atoi(argv[i] + 4);
        else if (strncmp(argv[i], "resumefail=", 11) == 0)
            g_resumefail = atoi(argv[i] + 11);
        else if (strncmp(argv[i], "leaks=", 6) == 0)
            *leaks = atoi(argv[i] + 6);
        else if (strcmp(argv[i], "vmm=forget") == 0)
            g_vmmtest = VMMTEST_FORGET;
        else if (strcmp(argv[i], "vmm=remap") == 0)
            g_vmmtest = VMMTEST_REMAP;
        else if (strcmp(argv[i], "vmm=alias") == 0)
            g_vmmtest = VMMTEST_ALIAS;
        else if (strcmp(argv[i], "vmm=fresh") == 0)
            g_vmmtest = VMMTEST_FRESH;
        else if (strncmp(argv[i], "poke=", 5) == 0)
            g_poke = atoi(argv[i] + 5);
        else if (strncmp(argv[i], "hold=", 5) == 0)
            g_hold = atoi(argv[i] + 5);
        else if (strncmp(argv[i], "keep=", 5) == 0)
            g_keep = atoi(argv[i] + 5);
        else if (strncmp(argv[i], "collcfg=", 8) == 0)
            g_collcfg = atoi(argv[i] + 8);
    }
}

int main(int argc, char **argv)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    /* The fake libcuda, when the test provides it, is loaded like an
     * application's CUDA runtime loads the driver. */
    void *cuda = getenv("RANK_CLIENT_CUDA") ? dlopen(getenv("RANK_CLIENT_CUDA"), RTLD_NOW | RTLD_GLOBAL) : NULL;
    g_cuda = cuda;
    if (cuda) {
        int (*create)(void **, unsigned int) = NULL;
        *(void **)&create = dlsym(cuda, "cuStreamCreate");
        if (!create || create(&g_streams[1], 0) != 0 || create(&g_streams[2], 0) != 0)
            return 2;
    }
    const char *mem = getenv("RANK_CLIENT_MEM");
    if (cuda && mem && strcmp(mem, "cuda") == 0) {
        *(void **)&g_cu_alloc = dlsym(cuda, "cuMemAlloc_v2");
        *(void **)&g_cu_free = dlsym(cuda, "cuMemFree_v2");
        if (!g_cu_alloc || !g_cu_free)
            return 2;
    } else if (mem && (strcmp(mem, "vmm") == 0 || strcmp(mem, "vmm-noexport") == 0)) {
        if (!cuda || vmm_setup(cuda, strcmp(mem, "vmm") == 0 /* CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR */))
            return 2;
    }
    g_big = getenv("RANK_CLIENT_BIG") ? atoi(getenv("RANK_CLIENT_BIG")) != 0 : g_vmm.on;
    g_huge = getenv("RANK_CLIENT_HUGE") && atoi(getenv("RANK_CLIENT_HUGE")) != 0;
    if (argc < 3) {
        fprintf(stderr, "usage: see the comment at the top of rank_client.c\n");
        return 2;
    }
    int nids = 0, delay_ms = 0, leaks = 0;
    int fds0 = count_socks(), tasks0 = count_dir("/proc/self/task");
    if (strcmp(argv[1], "ids") == 0 || strcmp(argv[1], "root") == 0) {
        nids = atoi(argv[2]);
        if (nids < 1 || nids > MAX_IDS)
            return 2;
        for (int i = 0; i < nids; i++) {
            if (ncclGetUniqueId(&g_ids[i]) != ncclSuccess) {
                printf("GETID failed\n");
                return 1;
            }
            id_print(&g_ids[i]);
        }
        if (strcmp(argv[1], "ids") == 0) {
            if (argc > 3 && strcmp(argv[3], "hold") == 0) {
                char line[64];
                while (fgets(line, sizeof(line), stdin))
                    ;
            }
            return 0;
        }
        if (argc < 4)
            return 2;
        g_rank = 0;
        g_nranks = atoi(argv[3]);
        opt(argc, argv, 4, &delay_ms, &leaks);
    } else if (strcmp(argv[1], "rank") == 0 && argc >= 5) {
        g_rank = atoi(argv[2]);
        g_nranks = atoi(argv[3]);
        char *list = argv[4], *save = NULL;
        for (char *t = strtok_r(list, ",", &save); t && nids < MAX_IDS; t = strtok_r(NULL, ",", &save))
            if (id_from_hex(t, &g_ids[nids++]) != 0)
                return 2;
        opt(argc, argv, 5, &delay_ms, &leaks);
    } else {
        return 2;
    }
    if (delay_ms > 0) {
        /* A slow rank: the delay is the behaviour under test, not synchronisation. */
        struct timespec ts = { delay_ms / 1000, (delay_ms % 1000) * 1000000L };
        nanosleep(&ts, NULL);
    }
    if (g_poke && pthread_create(&g_poke_thread, NULL, poke_main, NULL) != 0)
        return 2;
    pthread_t t[MAX_IDS];
    for (int i = 0; i < nids; i++)
        pthread_create(&t[i], NULL, run_one, (void *)(intptr_t)i);
    for (int i = 0; i < nids; i++)
        pthread_join(t[i], NULL);
    if (leaks) {
        /* The shim's serving thread ends once the last ID is decided; it may
         * still be closing.  Bounded wait for the condition, then report. */
        int tasks = 0, fds = 0;
        for (long tries = 0, n = test_bound(2000); tries < n; tries++) {
            tasks = count_dir("/proc/self/task");
            fds = count_socks();
            if (tasks <= tasks0 && fds <= fds0)
                break;
            struct timespec ts = { 0, 1000000L };
            nanosleep(&ts, NULL);
        }
        printf("LEAKS sockets+pipes %d->%d threads %d->%d\n", fds0, fds, tasks0, tasks);
    }
    return 0;
}
