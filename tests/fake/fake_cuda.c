/*
 * A fake libcuda.so.1 (CUDA driver API) for the CPU tests: enough of the
 * driver for the shim's CUDA IPC transport to run its whole protocol between
 * several processes on a machine without a GPU (docs/design.md, "Fakes of
 * NCCL and CUDA").
 *
 *   - Host pointers are device pointers.  cuMemAlloc maps a POSIX shared
 *     memory object (/fakecuda.<pid>.<n>), so any process can map it too, and
 *     an IPC handle is that object's name (with the size and the maker's pid).
 *   - Streams are synchronous: every "async" operation is done before the
 *     call returns, and a stream wait (cuStreamWaitValue32/64) makes the
 *     CALLING THREAD wait, on atomic loads of the shared memory, until the
 *     condition holds or FAKE_CUDA_WAIT_TIMEOUT_MS (default 20000) passes.
 *   - There is one device and one context, current on every thread until the
 *     thread sets NULL.
 *
 * Environment (read at each call, so a test can change it as it goes):
 *   FAKE_CUDA_DEVICE=<n>        the current device (default 0)
 *   FAKE_CUDA_NO_CONTEXT=1      no current context: cuCtxGetCurrent gives
 *                               NULL, cuCtxGetDevice and the memory and stream
 *                               functions fail with CUDA_ERROR_INVALID_CONTEXT
 *   FAKE_CUDA_NO_MEMOPS=1       attribute 122 (64-bit stream memory
 *                               operations) is 0 and the 64-bit wait/write
 *                               functions fail with CUDA_ERROR_NOT_SUPPORTED
 *   FAKE_CUDA_NO_BATCH_MEMOPS=1 cuStreamBatchMemOp fails with
 *                               CUDA_ERROR_NOT_SUPPORTED (the single calls work)
 *   FAKE_CUDA_CAPTURING=1       cuStreamIsCapturing says every stream is
 *                               capturing (CU_STREAM_CAPTURE_STATUS_ACTIVE)
 *   FAKE_CUDA_WAIT_TIMEOUT_MS=<ms>  bound of a stream wait (default 20000);
 *                               past it the wait prints a line to stderr and
 *                               fails with CUDA_ERROR_LAUNCH_TIMEOUT
 *   FAKE_CUDA_FAIL=<name>[=<code>][,...]  the functions of these BASE names
 *                               (cuMemAlloc, cuStreamWaitValue64, ...) fail at
 *                               once, with <code> or else
 *                               CUDA_ERROR_INVALID_VALUE
 *                               (CUDA_ERROR_OUT_OF_MEMORY for cuMemAlloc)
 *   FAKE_CUDA_PAUSE=<name>:<file>  the function of this BASE name waits, on
 *                               entry, until <file> exists (polled every ms,
 *                               for 20 s at most): a test holds a process at
 *                               a known step (tests/t/13-rendezvous.t holds
 *                               a rank in its ipc connect)
 *   FAKE_CUDA_LOG=<file>        at exit, append "<pid> allocs=<n> ipc_opens=<m> opened=<k>
 *                               vmm_handles=<h> vmm_maps=<p> vmm_reserves=<r> vmm_imports=<i>"
 *                               (what this process still holds: allocations,
 *                               IPC opens, VMM handle references not released,
 *                               cuMemMap'ings, address reservations; and in
 *                               all: IPC handles opened, VMM handles imported)
 *
 * fakeCudaStats(&allocs, &ipc_opens) gives the first two numbers at any time,
 * fakeCudaOpened() the third,
 * fakeCudaWaits() how many threads are in a stream wait ("work queues", below),
 * fakeCudaVmmStats(&handles, &maps, &reserves, &imports) the VMM ones.
 *
 * Virtual memory management (PyTorch's expandable segments): cuMemCreate
 * makes a memfd (granularity 2 MiB), cuMemAddressReserve a PROT_NONE
 * anonymous range, cuMemMap maps the memfd into it (inaccessible until
 * cuMemSetAccess makes it readable or writable), cuMemUnmap puts the range
 * back.  cuMemExportToShareableHandle (POSIX file descriptors only, and only
 * of allocations created with that requestedHandleType, else
 * CUDA_ERROR_INVALID_VALUE as the driver) gives a dup of the memfd, which
 * another process imports (keeping its own dup): the memory lives as long as
 * any handle, descriptor or mapping of it, in any process.  Of an address in
 * a mapping, cuPointerGetAttribute says as the driver: RANGE_START/RANGE_SIZE
 * the whole reservation, MAPPING_BASE/MAPPING_SIZE the mapping, BUFFER_ID one
 * per mapping, MEMORY_BLOCK_ID one per allocation handle of this process (an
 * import gets its own).  Deviations: cuMemAddressFree of a range still mapped
 * is refused (CUDA_ERROR_INVALID_VALUE); the address hint of
 * cuMemAddressReserve is ignored; the VMM functions need no current context;
 * host and NUMA locations are not modelled (CUDA_ERROR_NOT_SUPPORTED).
 *
 * Device memory as the driver keeps it: an allocation lives until its owner
 * frees it AND no other process maps it (legacy IPC; freeing memory another
 * process maps is undefined behaviour in CUDA, and in practice keeps it).
 * Each shared memory object starts with a page (struct alloc_header) that
 * counts the processes mapping it.  cuMemGetInfo says, per process, what its
 * allocations take: the live ones and the freed ones some process still maps
 * (of FAKE_TOTAL_BYTES); fakeCudaFreedMapped() counts this process's
 * cuMemFree calls that found another process still mapping the memory.  A
 * handle of freed memory no longer opens (CUDA_ERROR_INVALID_HANDLE).
 * A forked child starts with empty tables (what its parent allocated or opened
 * is not its own); at exit, the names of the allocations still live are
 * unlinked, as the driver frees a process's memory when it ends.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define EXPORT __attribute__((visibility("default")))
/* Exports the same function under a second name (a plain name of cuda.h). */
#define ALIAS(target) __attribute__((alias(#target), visibility("default")))

typedef int CUresult;
typedef int CUdevice;
typedef unsigned long long CUdeviceptr;
typedef struct CUctx_st *CUcontext;
typedef struct CUstream_st *CUstream;
typedef struct CUipcMemHandle_st {
    char reserved[64];
} CUipcMemHandle;

/* The virtual memory management types, laid out as in cuda.h (13.0). */
typedef unsigned long long CUmemGenericAllocationHandle;
typedef struct {
    int type; /* CUmemLocationType */
    int id;
} CUmemLocation;
typedef struct {
    int type;                 /* CUmemAllocationType */
    int requestedHandleTypes; /* CUmemAllocationHandleType */
    CUmemLocation location;
    void *win32HandleMetaData;
    struct {
        unsigned char compressionType;
        unsigned char gpuDirectRDMACapable;
        unsigned short usage;
        unsigned char reserved[4];
    } allocFlags;
} CUmemAllocationProp;
typedef struct {
    CUmemLocation location;
    int flags; /* CUmemAccess_flags */
} CUmemAccessDesc;
_Static_assert(sizeof(CUmemAllocationProp) == 32 && sizeof(CUmemAccessDesc) == 12, "cuda.h layouts");

#define CUDA_SUCCESS 0
#define CUDA_ERROR_INVALID_VALUE 1
#define CUDA_ERROR_OUT_OF_MEMORY 2
#define CUDA_ERROR_NOT_INITIALIZED 3
#define CUDA_ERROR_DEINITIALIZED 4
#define CUDA_ERROR_NO_DEVICE 100
#define CUDA_ERROR_INVALID_DEVICE 101
#define CUDA_ERROR_INVALID_CONTEXT 201
#define CUDA_ERROR_INVALID_HANDLE 400
#define CUDA_ERROR_NOT_FOUND 500
#define CUDA_ERROR_NOT_READY 600
#define CUDA_ERROR_LAUNCH_TIMEOUT 702
#define CUDA_ERROR_NOT_SUPPORTED 801
#define CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED 900
#define CUDA_ERROR_UNKNOWN 999

#define FAKE_DRIVER_VERSION 12080

#define CU_DEVICE_ATTRIBUTE_CAN_USE_64_BIT_STREAM_MEM_OPS 122
#define CU_DEVICE_ATTRIBUTE_CAN_USE_STREAM_WAIT_VALUE_NOR 123

#define CU_GET_PROC_ADDRESS_SUCCESS 0
#define CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND 1
#define CU_GET_PROC_ADDRESS_FLAGS_MASK 3ULL /* LEGACY_STREAM | PER_THREAD_DEFAULT_STREAM */

#define CU_STREAM_WAIT_VALUE_GEQ 0
#define CU_STREAM_WAIT_VALUE_EQ 1
#define CU_STREAM_WAIT_VALUE_AND 2
#define CU_STREAM_WAIT_VALUE_NOR 3
#define CU_STREAM_WAIT_VALUE_FLUSH (1u << 30)
#define CU_STREAM_WRITE_VALUE_NO_MEMORY_BARRIER 1u
#define CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS 1u
#define CU_STREAM_NON_BLOCKING 1u

#define DEFAULT_WAIT_TIMEOUT_MS 20000L

#define CU_MEM_ALLOCATION_TYPE_PINNED 1
#define CU_MEM_LOCATION_TYPE_DEVICE 1
#define CU_MEM_HANDLE_TYPE_NONE 0
#define CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR 1
#define CU_MEM_HANDLE_TYPE_FABRIC 8
#define CU_MEM_ALLOC_GRANULARITY_RECOMMENDED 1
#define CU_MEM_ACCESS_FLAGS_PROT_NONE 0
#define CU_MEM_ACCESS_FLAGS_PROT_READ 1
#define CU_MEM_ACCESS_FLAGS_PROT_READWRITE 3
#define VMM_GRANULARITY (2ull << 20) /* both the minimum and the recommended, as on H100 */
/* cuMemCreate's backing files carry this name (in /proc/<pid>/fd): an
 * imported descriptor of anything else is not a handle the fake made. */
#define VMM_MEMFD_NAME "fakecuda.vmm"

/* ---------------------------------------------------------------- state */

/* The page in front of every allocation, in its shared memory object. */
struct alloc_header {
    _Atomic int mappers;                /* processes that have it open by IPC */
    _Atomic int freed;                  /* its owner freed it */
};
#define HDR 4096
#define FAKE_TOTAL_BYTES (80ull << 30)

/* One live allocation (ours) or one open IPC mapping (another process's). */
struct mapping {
    struct mapping *next;
    int ipc;          /* 0: cuMemAlloc'ed here; 1: opened by cuIpcOpenMemHandle; 2: freed here, still mapped elsewhere */
    unsigned long long id; /* CU_POINTER_ATTRIBUTE_BUFFER_ID: unique in the process */
    unsigned long long block; /* CU_POINTER_ATTRIBUTE_MEMORY_BLOCK_ID: unique in the process */
    int refs;         /* opens of the same handle not closed yet (ipc only) */
    uintptr_t base;
    size_t size;
    char name[48];
};

struct fake_stream {
    struct fake_stream *next;
    unsigned long long id;              /* cuStreamGetId: never reused */
    unsigned flags;                     /* CU_STREAM_NON_BLOCKING or 0 */
};

/* The layout of a CUipcMemHandle made here. */
struct ipc_handle {
    char magic[4];
    int32_t pid; /* the maker: real CUDA refuses to open a handle in its own process */
    uint64_t size;
    char name[48];
};
_Static_assert(sizeof(struct ipc_handle) == sizeof(CUipcMemHandle), "handle layout");

static const char HANDLE_MAGIC[4] = {'F', 'C', 'U', '1'};

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static struct mapping *maps;     /* under lock */
static struct fake_stream *streams; /* under lock */
static unsigned counter;         /* under lock: the <n> of the shm names */
static unsigned long long buffer_ids; /* under lock: the last BUFFER_ID given */
static unsigned long long opened;     /* under lock: successful cuIpcOpenMemHandle calls */
static int freed_mapped;              /* under lock: cuMemFree of memory another process mapped */
static unsigned long long block_ids;  /* under lock: the last MEMORY_BLOCK_ID given */

/*
 * Virtual memory management (cuMemCreate and friends).  An allocation is a
 * memfd: the kernel keeps its pages while any descriptor or mapping refers to
 * it, so the memory lives exactly as long as some process holds a handle, an
 * exported descriptor or a mapping of it, as the driver's does.
 */
struct vmm_alloc {
    struct vmm_alloc *next;
    CUmemGenericAllocationHandle handle; /* the value the caller holds */
    int fd;                              /* the backing memfd, this process's own */
    size_t size;
    int types;                           /* requestedHandleTypes */
    int device;                          /* prop.location.id */
    int imported;                        /* made by cuMemImportFromShareableHandle */
    unsigned long long block;            /* CU_POINTER_ATTRIBUTE_MEMORY_BLOCK_ID */
    int refs;                            /* create/import/retain not yet released */
    int maps;                            /* cuMemMap'ings of it in this process */
};

struct vmm_range { /* one cuMemAddressReserve */
    struct vmm_range *next;
    uintptr_t base;
    size_t size;
    int maps;
};

struct vmm_map { /* one cuMemMap */
    struct vmm_map *next;
    uintptr_t base;
    size_t size;
    unsigned long long id; /* CU_POINTER_ATTRIBUTE_BUFFER_ID */
    struct vmm_alloc *alloc;
    struct vmm_range *range;
};

static struct vmm_alloc *vmm_allocs;  /* under lock */
static struct vmm_range *vmm_ranges;  /* under lock */
static struct vmm_map *vmm_maps;      /* under lock */
static unsigned long long vmm_handles_made; /* under lock: the <n> of the handle values */
static int vmm_imports;               /* under lock: successful imports, in all */

static struct alloc_header *header_of(const struct mapping *m)
{
    return (struct alloc_header *)(m->base - HDR);
}

/* Unmaps an allocation or mapping (with its header page). */
static void unmap(const struct mapping *m)
{
    munmap((void *)(m->base - HDR), m->size + HDR);
}

static struct CUctx_st {
    int dummy;
} the_context;
static __thread int ctx_cleared; /* this thread did cuCtxSetCurrent(NULL) */

/* ---------------------------------------------------------------- helpers */

static int env_is_1(const char *name)
{
    const char *v = getenv(name);
    return v && v[0] == '1' && v[1] == '\0';
}

/* FAKE_CUDA_PAUSE: if it names <base>, waits until its file exists (bounded). */
static void paused(const char *base)
{
    const char *v = getenv("FAKE_CUDA_PAUSE");
    size_t n = strlen(base);
    if (!v || strncmp(v, base, n) != 0 || v[n] != ':')
        return;
    for (int i = 0; i < 20000 && access(v + n + 1, F_OK) != 0; i++) {
        struct timespec ts = { 0, 1000000 };
        nanosleep(&ts, NULL);
    }
}

/* CUDA_SUCCESS, or the code FAKE_CUDA_FAIL asks of the function <base>
 * (after FAKE_CUDA_PAUSE's wait). */
static CUresult injected(const char *base, CUresult dflt)
{
    paused(base);
    const char *list = getenv("FAKE_CUDA_FAIL");
    if (!list || !*list)
        return CUDA_SUCCESS;
    size_t n = strlen(base);
    const char *p = list;
    while (*p) {
        const char *end = strchr(p, ',');
        size_t len = end ? (size_t)(end - p) : strlen(p);
        const char *eq = memchr(p, '=', len);
        size_t name_len = eq ? (size_t)(eq - p) : len;
        if (name_len == n && memcmp(p, base, n) == 0) {
            if (eq) {
                int code = atoi(eq + 1);
                return code ? code : dflt;
            }
            return dflt;
        }
        if (!end)
            break;
        p = end + 1;
    }
    return CUDA_SUCCESS;
}
#define INJECT(base)                                              \
    do {                                                          \
        CUresult inj_ = injected(base, CUDA_ERROR_INVALID_VALUE); \
        if (inj_)                                                 \
            return inj_;                                          \
    } while (0)

static int have_context(void)
{
    return !env_is_1("FAKE_CUDA_NO_CONTEXT") && !ctx_cleared;
}
#define NEED_CONTEXT()                         \
    do {                                       \
        if (!have_context())                   \
            return CUDA_ERROR_INVALID_CONTEXT; \
    } while (0)

static int no_memops(void)
{
    return env_is_1("FAKE_CUDA_NO_MEMOPS");
}

static struct mapping *find_base(uintptr_t base, int ipc)
{
    for (struct mapping *m = maps; m; m = m->next)
        if (m->base == base && m->ipc == ipc)
            return m;
    return NULL;
}

static void unlink_mapping(struct mapping *m)
{
    for (struct mapping **pp = &maps; *pp; pp = &(*pp)->next)
        if (*pp == m) {
            *pp = m->next;
            return;
        }
}

static void count(int *allocs, int *opens)
{
    int a = 0, o = 0;
    for (struct mapping *m = maps; m; m = m->next) {
        if (m->ipc == 1)
            o += m->refs;
        else if (m->ipc == 0)
            a++;
    }
    *allocs = a;
    *opens = o;
}

/* What this process holds of VMM objects (lock held): handle references not
 * released, mappings, reservations. */
static void vmm_count(int *handles, int *nmaps, int *reserves)
{
    int h = 0, m = 0, r = 0;
    for (struct vmm_alloc *a = vmm_allocs; a; a = a->next)
        h += a->refs;
    for (struct vmm_map *p = vmm_maps; p; p = p->next)
        m++;
    for (struct vmm_range *q = vmm_ranges; q; q = q->next)
        r++;
    *handles = h;
    *nmaps = m;
    *reserves = r;
}

/* ---------------------------------------------------------------- fork, exit */

static void before_fork(void)
{
    pthread_mutex_lock(&lock);
}

static void after_fork_parent(void)
{
    pthread_mutex_unlock(&lock);
}

/* The child owns none of its parent's allocations, mappings or streams: it
 * forgets them (the memory stays mapped, but freeing it is not the child's
 * business, nor is unlinking the parent's names at its exit). */
static void after_fork_child(void)
{
    while (maps) {
        struct mapping *m = maps;
        maps = m->next;
        free(m);
    }
    while (streams) {
        struct fake_stream *s = streams;
        streams = s->next;
        free(s);
    }
    /* Nor the parent's VMM handles: the child closes its copies of their
     * descriptors, so that the memory lives as long as the parent (and
     * whoever it exported to) holds it, not as long as the child runs.  The
     * parent's mappings stay in the child's address space, as its other
     * memory does. */
    while (vmm_allocs) {
        struct vmm_alloc *a = vmm_allocs;
        vmm_allocs = a->next;
        close(a->fd);
        free(a);
    }
    while (vmm_maps) {
        struct vmm_map *m = vmm_maps;
        vmm_maps = m->next;
        free(m);
    }
    while (vmm_ranges) {
        struct vmm_range *r = vmm_ranges;
        vmm_ranges = r->next;
        free(r);
    }
    vmm_imports = 0;
    pthread_mutex_unlock(&lock);
}

/*
 * The driver frees a process's memory when it dies; the fake's shared-memory
 * segments outlive a process that leaves through _exit or a signal (the
 * tests' dead peers do).  At load, the segments of dead processes go, and
 * those named with this pid (a dead predecessor's: this process has made
 * none yet), as a real driver would have freed them.
 */
static void sweep_dead_segments(void)
{
    DIR *d = opendir("/dev/shm");
    if (!d)
        return;
    int me = (int)getpid();
    struct dirent *e;
    while ((e = readdir(d))) {
        int pid;
        if (sscanf(e->d_name, "fakecuda.%d.", &pid) != 1 || pid <= 0)
            continue;
        if (pid == me || (kill(pid, 0) != 0 && errno == ESRCH)) {
            char name[300];
            snprintf(name, sizeof name, "/%s", e->d_name);
            shm_unlink(name);
        }
    }
    closedir(d);
}

__attribute__((constructor)) static void fake_cuda_init(void)
{
    sweep_dead_segments();
    pthread_atfork(before_fork, after_fork_parent, after_fork_child);
}

__attribute__((destructor)) static void fake_cuda_fini(void)
{
    pthread_mutex_lock(&lock);
    const char *log = getenv("FAKE_CUDA_LOG");
    if (log && *log) {
        int a, o, vh, vm, vr;
        count(&a, &o);
        vmm_count(&vh, &vm, &vr);
        char line[256];
        int n = snprintf(line, sizeof line,
                         "%d allocs=%d ipc_opens=%d opened=%llu vmm_handles=%d vmm_maps=%d vmm_reserves=%d "
                         "vmm_imports=%d\n",
                         (int)getpid(), a, o, opened, vh, vm, vr, vmm_imports);
        int fd = open(log, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
        if (fd >= 0) {
            if (write(fd, line, (size_t)n) != n) { /* nothing to do about it at exit */
            }
            close(fd);
        }
    }
    /* The process ends: its device memory goes, so do the names (the memory
     * stays mapped: other threads may still be running). */
    while (maps) {
        struct mapping *m = maps;
        maps = m->next;
        if (m->ipc == 1)
            atomic_fetch_sub(&header_of(m)->mappers, 1);
        else
            shm_unlink(m->name);
        free(m);
    }
    while (streams) {
        struct fake_stream *s = streams;
        streams = s->next;
        free(s);
    }
    pthread_mutex_unlock(&lock);
}

/* Freed allocations nobody maps any more are gone (lock held). */
static void reap_freed(void)
{
    for (struct mapping **pp = &maps; *pp;) {
        struct mapping *m = *pp;
        if (m->ipc == 2 && atomic_load(&header_of(m)->mappers) == 0) {
            *pp = m->next;
            unmap(m);
            shm_unlink(m->name);
            free(m);
        } else {
            pp = &m->next;
        }
    }
}

EXPORT int fakeCudaFreedMapped(void)
{
    pthread_mutex_lock(&lock);
    int n = freed_mapped;
    pthread_mutex_unlock(&lock);
    return n;
}

EXPORT CUresult cuMemGetInfo_v2(size_t *free_bytes, size_t *total)
{
    INJECT("cuMemGetInfo");
    NEED_CONTEXT();
    if (!free_bytes || !total)
        return CUDA_ERROR_INVALID_VALUE;
    unsigned long long used = 0;
    pthread_mutex_lock(&lock);
    reap_freed();
    for (struct mapping *m = maps; m; m = m->next)
        if (m->ipc != 1)
            used += m->size;
    for (struct vmm_alloc *a = vmm_allocs; a; a = a->next)
        if (!a->imported)
            used += a->size;
    pthread_mutex_unlock(&lock);
    *total = (size_t)FAKE_TOTAL_BYTES;
    *free_bytes = (size_t)(FAKE_TOTAL_BYTES - used);
    return CUDA_SUCCESS;
}
EXPORT CUresult cuMemGetInfo(size_t *free_bytes, size_t *total) ALIAS(cuMemGetInfo_v2);

/* cuIpcOpenMemHandle calls that succeeded in this process, in all. */
EXPORT unsigned long long fakeCudaOpened(void)
{
    pthread_mutex_lock(&lock);
    unsigned long long n = opened;
    pthread_mutex_unlock(&lock);
    return n;
}

EXPORT int fakeCudaStats(int *allocs, int *ipc_opens)
{
    int a, o;
    pthread_mutex_lock(&lock);
    count(&a, &o);
    pthread_mutex_unlock(&lock);
    if (allocs)
        *allocs = a;
    if (ipc_opens)
        *ipc_opens = o;
    return 0;
}

EXPORT int fakeCudaVmmStats(int *handles, int *nmaps, int *reserves, int *imports)
{
    int h, m, r, i;
    pthread_mutex_lock(&lock);
    vmm_count(&h, &m, &r);
    i = vmm_imports;
    pthread_mutex_unlock(&lock);
    if (handles)
        *handles = h;
    if (nmaps)
        *nmaps = m;
    if (reserves)
        *reserves = r;
    if (imports)
        *imports = i;
    return 0;
}

/* ---------------------------------------------------------------- init, errors */

EXPORT CUresult cuInit(unsigned int flags)
{
    INJECT("cuInit");
    return flags == 0 ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

EXPORT CUresult cuDriverGetVersion(int *version)
{
    INJECT("cuDriverGetVersion");
    if (!version)
        return CUDA_ERROR_INVALID_VALUE;
    *version = FAKE_DRIVER_VERSION;
    return CUDA_SUCCESS;
}

static const struct fake_error {
    CUresult code;
    const char *name, *text;
} errors[] = {
    {CUDA_SUCCESS, "CUDA_SUCCESS", "no error"},
    {CUDA_ERROR_INVALID_VALUE, "CUDA_ERROR_INVALID_VALUE", "invalid argument"},
    {CUDA_ERROR_OUT_OF_MEMORY, "CUDA_ERROR_OUT_OF_MEMORY", "out of memory"},
    {CUDA_ERROR_NOT_INITIALIZED, "CUDA_ERROR_NOT_INITIALIZED", "initialization error"},
    {CUDA_ERROR_DEINITIALIZED, "CUDA_ERROR_DEINITIALIZED", "driver shutting down"},
    {CUDA_ERROR_NO_DEVICE, "CUDA_ERROR_NO_DEVICE", "no CUDA-capable device is detected"},
    {CUDA_ERROR_INVALID_DEVICE, "CUDA_ERROR_INVALID_DEVICE", "invalid device ordinal"},
    {CUDA_ERROR_INVALID_CONTEXT, "CUDA_ERROR_INVALID_CONTEXT", "invalid device context"},
    {CUDA_ERROR_INVALID_HANDLE, "CUDA_ERROR_INVALID_HANDLE", "invalid resource handle"},
    {CUDA_ERROR_NOT_FOUND, "CUDA_ERROR_NOT_FOUND", "named symbol not found"},
    {CUDA_ERROR_NOT_READY, "CUDA_ERROR_NOT_READY", "device not ready"},
    {CUDA_ERROR_LAUNCH_TIMEOUT, "CUDA_ERROR_LAUNCH_TIMEOUT", "the launch timed out and was terminated"},
    {CUDA_ERROR_NOT_SUPPORTED, "CUDA_ERROR_NOT_SUPPORTED", "operation not supported"},
    {CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED, "CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED",
     "operation not permitted when stream is capturing"},
    {CUDA_ERROR_UNKNOWN, "CUDA_ERROR_UNKNOWN", "unknown error"},
};

/* The table's entry for `error`, or NULL. */
static const struct fake_error *find_error(CUresult error)
{
    for (size_t i = 0; i < sizeof errors / sizeof errors[0]; i++)
        if (errors[i].code == error)
            return &errors[i];
    return NULL;
}

EXPORT CUresult cuGetErrorString(CUresult error, const char **str)
{
    const struct fake_error *e = find_error(error);
    if (!str)
        return CUDA_ERROR_INVALID_VALUE;
    *str = e ? e->text : NULL;
    return e ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

EXPORT CUresult cuGetErrorName(CUresult error, const char **str)
{
    const struct fake_error *e = find_error(error);
    if (!str)
        return CUDA_ERROR_INVALID_VALUE;
    *str = e ? e->name : NULL;
    return e ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

/* ---------------------------------------------------------------- context, device */

EXPORT CUresult cuCtxGetCurrent(CUcontext *ctx)
{
    INJECT("cuCtxGetCurrent");
    if (!ctx)
        return CUDA_ERROR_INVALID_VALUE;
    *ctx = have_context() ? &the_context : NULL;
    return CUDA_SUCCESS;
}

EXPORT CUresult cuCtxSetCurrent(CUcontext ctx)
{
    INJECT("cuCtxSetCurrent");
    if (ctx && ctx != &the_context)
        return CUDA_ERROR_INVALID_CONTEXT;
    ctx_cleared = ctx == NULL;
    return CUDA_SUCCESS;
}

EXPORT CUresult cuCtxGetDevice(CUdevice *device)
{
    INJECT("cuCtxGetDevice");
    NEED_CONTEXT();
    if (!device)
        return CUDA_ERROR_INVALID_VALUE;
    const char *d = getenv("FAKE_CUDA_DEVICE");
    *device = d ? atoi(d) : 0;
    return CUDA_SUCCESS;
}

EXPORT CUresult cuDeviceGetAttribute(int *value, int attrib, CUdevice dev)
{
    INJECT("cuDeviceGetAttribute");
    if (!value)
        return CUDA_ERROR_INVALID_VALUE;
    if (dev < 0)
        return CUDA_ERROR_INVALID_DEVICE;
    switch (attrib) {
    case CU_DEVICE_ATTRIBUTE_CAN_USE_64_BIT_STREAM_MEM_OPS:
        *value = !no_memops();
        break;
    case CU_DEVICE_ATTRIBUTE_CAN_USE_STREAM_WAIT_VALUE_NOR:
        *value = 1; /* the fake's waits do NOR, as Hopper's do */
        break;
    default:
        *value = 0;
    }
    return CUDA_SUCCESS;
}

/* ---------------------------------------------------------------- memory */

EXPORT CUresult cuMemAlloc_v2(CUdeviceptr *dptr, size_t size)
{
    CUresult inj = injected("cuMemAlloc", CUDA_ERROR_OUT_OF_MEMORY);
    if (inj)
        return inj;
    NEED_CONTEXT();
    if (!dptr || size == 0)
        return CUDA_ERROR_INVALID_VALUE;
    struct mapping *m = calloc(1, sizeof *m);
    if (!m)
        return CUDA_ERROR_OUT_OF_MEMORY;
    pthread_mutex_lock(&lock);
    int fd = -1;
    for (int tries = 0; tries < 100 && fd < 0; tries++) {
        snprintf(m->name, sizeof m->name, "/fakecuda.%d.%u", (int)getpid(), counter++);
        fd = shm_open(m->name, O_CREAT | O_EXCL | O_RDWR | O_CLOEXEC, 0600);
        if (fd < 0 && errno != EEXIST) /* a stale name of a dead process with our pid: skip it */
            break;
    }
    void *p = MAP_FAILED;
    if (fd >= 0) {
        if (ftruncate(fd, (off_t)(size + HDR)) == 0)
            p = mmap(NULL, size + HDR, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
        close(fd);
        if (p == MAP_FAILED)
            shm_unlink(m->name);
    }
    if (p == MAP_FAILED) {
        pthread_mutex_unlock(&lock);
        free(m);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    p = (char *)p + HDR;
    m->base = (uintptr_t)p;
    m->size = size;
    m->id = ++buffer_ids;
    m->block = ++block_ids;
    m->next = maps;
    maps = m;
    pthread_mutex_unlock(&lock);
    *dptr = (CUdeviceptr)(uintptr_t)p;
    return CUDA_SUCCESS;
}
EXPORT CUresult cuMemAlloc(CUdeviceptr *dptr, size_t size) ALIAS(cuMemAlloc_v2);

EXPORT CUresult cuMemFree_v2(CUdeviceptr dptr)
{
    INJECT("cuMemFree");
    NEED_CONTEXT();
    pthread_mutex_lock(&lock);
    struct mapping *m = find_base((uintptr_t)dptr, 0);
    if (!m) {
        pthread_mutex_unlock(&lock);
        return CUDA_ERROR_INVALID_VALUE;
    }
    struct alloc_header *h = header_of(m);
    atomic_store(&h->freed, 1);
    if (atomic_load(&h->mappers) > 0) {
        /* Another process maps it: it stays, until the last one closes it. */
        freed_mapped++;
        m->ipc = 2;
        pthread_mutex_unlock(&lock);
        return CUDA_SUCCESS;
    }
    unlink_mapping(m);
    unmap(m);
    shm_unlink(m->name);
    pthread_mutex_unlock(&lock);
    free(m);
    return CUDA_SUCCESS;
}
EXPORT CUresult cuMemFree(CUdeviceptr dptr) ALIAS(cuMemFree_v2);

/* ---------------------------------------------------------------- work queues
 *
 * What made the CPU fault tests pass while real GPUs hung (issue 27): on the
 * driver a stream wait holds up more than its own stream.  A synchronous copy
 * or memset (cuMemcpy, cuMemcpyHtoD/DtoH/DtoD, cuMemsetD8) runs on the legacy
 * default stream, which waits for every blocking stream (NULL,
 * CU_STREAM_LEGACY, CU_STREAM_PER_THREAD, or one created without
 * CU_STREAM_NON_BLOCKING); and with CUDA_DEVICE_MAX_CONNECTIONS=1 every
 * stream shares one work queue, so that any stream operation waits behind a
 * wait queued on another stream.  Here a stream wait holds its calling
 * thread, and these counts say how many threads of this process are in one
 * (on a blocking stream; on any): a call that the driver would queue behind
 * them waits until there is none, bounded as a wait, then says the driver
 * would hang there and fails with CUDA_ERROR_LAUNCH_TIMEOUT. */
static atomic_int waits_blocking, waits_all;

/* How many threads of this process are in a stream wait (the tests of the fake). */
EXPORT int fakeCudaWaits(void)
{
    return atomic_load(&waits_all);
}

static long wait_timeout_ms(void)
{
    const char *t = getenv("FAKE_CUDA_WAIT_TIMEOUT_MS");
    if (!t || !*t)
        return DEFAULT_WAIT_TIMEOUT_MS;
    char *end;
    long ms = strtol(t, &end, 10);
    return *end || ms < 0 ? DEFAULT_WAIT_TIMEOUT_MS : ms;
}

static long long now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}


static int stream_blocking(CUstream stream)
{
    if ((uintptr_t)(void *)stream <= 2)
        return 1;
    int blocking = 1;
    pthread_mutex_lock(&lock);
    for (struct fake_stream *s = streams; s; s = s->next)
        if ((void *)s == (void *)stream)
            blocking = !(s->flags & CU_STREAM_NON_BLOCKING);
    pthread_mutex_unlock(&lock);
    return blocking;
}

static int one_work_queue(void)
{
    const char *v = getenv("CUDA_DEVICE_MAX_CONNECTIONS");
    return v && strcmp(v, "1") == 0;
}

/* The legacy stream's turn (legacy) or any stream's (a stream operation):
 * CUDA_SUCCESS once no wait holds it up. */
static CUresult behind_waits(const char *base, int legacy)
{
    atomic_int *held = one_work_queue() ? &waits_all : legacy ? &waits_blocking : NULL;
    if (!held || atomic_load(held) == 0)
        return CUDA_SUCCESS;
    long long deadline = now_ns() + wait_timeout_ms() * 1000000LL;
    while (atomic_load(held) > 0) {
        if (now_ns() >= deadline) {
            fprintf(stderr, "fake libcuda: %s queued behind a stream wait for %ld ms (%s): the driver would hang "
                    "here\n", base, wait_timeout_ms(),
                    held == &waits_all ? "CUDA_DEVICE_MAX_CONNECTIONS=1: one work queue"
                                       : "the legacy default stream waits for the blocking streams");
            return CUDA_ERROR_LAUNCH_TIMEOUT;
        }
        struct timespec ts = {0, 100000};
        nanosleep(&ts, NULL);
    }
    return CUDA_SUCCESS;
}

static CUresult memset8(const char *base, CUdeviceptr dst, unsigned char uc, size_t n)
{
    INJECT(base);
    NEED_CONTEXT();
    CUresult q = behind_waits(base, strcmp(base, "cuMemsetD8") == 0);
    if (q)
        return q;
    if (n == 0)
        return CUDA_SUCCESS;
    if (!dst)
        return CUDA_ERROR_INVALID_VALUE;
    memset((void *)(uintptr_t)dst, uc, n);
    return CUDA_SUCCESS;
}

EXPORT CUresult cuMemsetD8_v2(CUdeviceptr dst, unsigned char uc, size_t n)
{
    return memset8("cuMemsetD8", dst, uc, n);
}
EXPORT CUresult cuMemsetD8(CUdeviceptr dst, unsigned char uc, size_t n) ALIAS(cuMemsetD8_v2);

EXPORT CUresult cuMemsetD8Async(CUdeviceptr dst, unsigned char uc, size_t n, CUstream stream)
{
    (void)stream;
    return memset8("cuMemsetD8Async", dst, uc, n);
}

/* A copy; `base` without "Async" is a synchronous one (the legacy stream). */
static CUresult copy(const char *base, void *dst, const void *src, size_t n)
{
    INJECT(base);
    NEED_CONTEXT();
    CUresult q = behind_waits(base, strstr(base, "Async") == NULL);
    if (q)
        return q;
    if (n == 0)
        return CUDA_SUCCESS;
    if (!dst || !src)
        return CUDA_ERROR_INVALID_VALUE;
    memmove(dst, src, n);
    return CUDA_SUCCESS;
}
#define DP(x) ((void *)(uintptr_t)(x))

EXPORT CUresult cuMemcpy(CUdeviceptr dst, CUdeviceptr src, size_t n)
{
    return copy("cuMemcpy", DP(dst), DP(src), n);
}

EXPORT CUresult cuMemcpyAsync(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream stream)
{
    (void)stream;
    return copy("cuMemcpyAsync", DP(dst), DP(src), n);
}

EXPORT CUresult cuMemcpyDtoD_v2(CUdeviceptr dst, CUdeviceptr src, size_t n)
{
    return copy("cuMemcpyDtoD", DP(dst), DP(src), n);
}
EXPORT CUresult cuMemcpyDtoD(CUdeviceptr dst, CUdeviceptr src, size_t n) ALIAS(cuMemcpyDtoD_v2);

EXPORT CUresult cuMemcpyDtoDAsync_v2(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream stream)
{
    (void)stream;
    return copy("cuMemcpyDtoDAsync", DP(dst), DP(src), n);
}
EXPORT CUresult cuMemcpyDtoDAsync(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream stream)
    ALIAS(cuMemcpyDtoDAsync_v2);

EXPORT CUresult cuMemcpyDtoH_v2(void *dst, CUdeviceptr src, size_t n)
{
    return copy("cuMemcpyDtoH", dst, DP(src), n);
}
EXPORT CUresult cuMemcpyDtoH(void *dst, CUdeviceptr src, size_t n) ALIAS(cuMemcpyDtoH_v2);

EXPORT CUresult cuMemcpyHtoD_v2(CUdeviceptr dst, const void *src, size_t n)
{
    return copy("cuMemcpyHtoD", DP(dst), src, n);
}
EXPORT CUresult cuMemcpyHtoD(CUdeviceptr dst, const void *src, size_t n) ALIAS(cuMemcpyHtoD_v2);

EXPORT CUresult cuMemcpyDtoHAsync_v2(void *dst, CUdeviceptr src, size_t n, CUstream stream)
{
    (void)stream;
    return copy("cuMemcpyDtoHAsync", dst, DP(src), n);
}
EXPORT CUresult cuMemcpyDtoHAsync(void *dst, CUdeviceptr src, size_t n, CUstream stream)
    ALIAS(cuMemcpyDtoHAsync_v2);

EXPORT CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr dst, const void *src, size_t n, CUstream stream)
{
    (void)stream;
    return copy("cuMemcpyHtoDAsync", DP(dst), src, n);
}
EXPORT CUresult cuMemcpyHtoDAsync(CUdeviceptr dst, const void *src, size_t n, CUstream stream)
    ALIAS(cuMemcpyHtoDAsync_v2);

/* ---------------------------------------------------------------- host memory
 * Registered host memory is its own device address (host pointers are device
 * pointers here); the flags are checked as the driver's. */
#define FAKE_HOSTREGISTER_FLAGS 0x0fu /* PORTABLE, DEVICEMAP, IOMEMORY, READ_ONLY */

EXPORT CUresult cuMemHostRegister_v2(void *p, size_t bytes, unsigned int flags)
{
    INJECT("cuMemHostRegister");
    NEED_CONTEXT();
    if (!p || !bytes || (flags & ~FAKE_HOSTREGISTER_FLAGS))
        return CUDA_ERROR_INVALID_VALUE;
    return CUDA_SUCCESS;
}
EXPORT CUresult cuMemHostRegister(void *p, size_t bytes, unsigned int flags) ALIAS(cuMemHostRegister_v2);

EXPORT CUresult cuMemHostUnregister(void *p)
{
    INJECT("cuMemHostUnregister");
    return p ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

EXPORT CUresult cuMemHostGetDevicePointer_v2(CUdeviceptr *dptr, void *p, unsigned int flags)
{
    INJECT("cuMemHostGetDevicePointer");
    NEED_CONTEXT();
    if (!dptr || !p || flags)
        return CUDA_ERROR_INVALID_VALUE;
    *dptr = (CUdeviceptr)(uintptr_t)p;
    return CUDA_SUCCESS;
}
EXPORT CUresult cuMemHostGetDevicePointer(CUdeviceptr *dptr, void *p, unsigned int flags)
    ALIAS(cuMemHostGetDevicePointer_v2);

/* ---------------------------------------------------------------- virtual memory management */

/* The allocation of a handle the caller holds (refs > 0), or NULL (lock held). */
static struct vmm_alloc *vmm_find(CUmemGenericAllocationHandle handle)
{
    for (struct vmm_alloc *a = vmm_allocs; a; a = a->next)
        if (a->handle == handle && a->refs > 0)
            return a;
    return NULL;
}

/* An allocation no handle and no mapping refers to any more is gone from
 * this process (lock held); its memory too, unless another process still
 * holds a descriptor or a mapping of it. */
static void vmm_drop_if_unused(struct vmm_alloc *a)
{
    if (a->refs > 0 || a->maps > 0)
        return;
    for (struct vmm_alloc **pp = &vmm_allocs; *pp; pp = &(*pp)->next)
        if (*pp == a) {
            *pp = a->next;
            break;
        }
    close(a->fd);
    free(a);
}

/* A new allocation of `fd` (which it now owns), with a fresh handle value and
 * block id (lock held), or NULL. */
static struct vmm_alloc *vmm_new(int fd, size_t size, int types, int device, int imported)
{
    struct vmm_alloc *a = calloc(1, sizeof *a);
    if (!a)
        return NULL;
    /* Handle values are opaque in CUDA; these are unlike any pointer or small
     * integer, so that a caller mixing them up is caught. */
    a->handle = 0xfc00000000000000ull | ++vmm_handles_made;
    a->fd = fd;
    a->size = size;
    a->types = types;
    a->device = device;
    a->imported = imported;
    a->block = ++block_ids;
    a->refs = 1;
    a->next = vmm_allocs;
    vmm_allocs = a;
    return a;
}

/* The reservation holding all of [p, p + size), or NULL (lock held). */
static struct vmm_range *vmm_range_of(uintptr_t p, size_t size)
{
    for (struct vmm_range *r = vmm_ranges; r; r = r->next)
        if (p >= r->base && p - r->base <= r->size && size <= r->size - (p - r->base))
            return r;
    return NULL;
}

/* The mapping holding address p, or NULL (lock held). */
static struct vmm_map *vmm_map_at(uintptr_t p)
{
    for (struct vmm_map *m = vmm_maps; m; m = m->next)
        if (p >= m->base && p - m->base < m->size)
            return m;
    return NULL;
}

static int current_device(void)
{
    const char *d = getenv("FAKE_CUDA_DEVICE");
    return d ? atoi(d) : 0;
}

/* The checks cuMemCreate and cuMemGetAllocationGranularity make of a
 * property structure. */
static CUresult check_prop(const CUmemAllocationProp *prop)
{
    if (!prop || prop->type != CU_MEM_ALLOCATION_TYPE_PINNED)
        return CUDA_ERROR_INVALID_VALUE;
    if (prop->location.type != CU_MEM_LOCATION_TYPE_DEVICE)
        return CUDA_ERROR_NOT_SUPPORTED; /* host and NUMA locations: not modelled */
    if (prop->location.id < 0)
        return CUDA_ERROR_INVALID_DEVICE;
    if (prop->requestedHandleTypes & ~CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR)
        return CUDA_ERROR_NOT_SUPPORTED; /* Win32, KMT, fabric: not on this system */
    return CUDA_SUCCESS;
}

EXPORT CUresult cuMemGetAllocationGranularity(size_t *granularity, const CUmemAllocationProp *prop, int option)
{
    INJECT("cuMemGetAllocationGranularity");
    if (!granularity || option < 0 || option > CU_MEM_ALLOC_GRANULARITY_RECOMMENDED)
        return CUDA_ERROR_INVALID_VALUE;
    CUresult rc = check_prop(prop);
    if (rc)
        return rc;
    *granularity = (size_t)VMM_GRANULARITY;
    return CUDA_SUCCESS;
}

EXPORT CUresult cuMemCreate(CUmemGenericAllocationHandle *handle, size_t size, const CUmemAllocationProp *prop,
                            unsigned long long flags)
{
    CUresult rc = injected("cuMemCreate", CUDA_ERROR_OUT_OF_MEMORY);
    if (rc)
        return rc;
    if (!handle || size == 0 || size % VMM_GRANULARITY || flags)
        return CUDA_ERROR_INVALID_VALUE;
    rc = check_prop(prop);
    if (rc)
        return rc;
    int fd = memfd_create(VMM_MEMFD_NAME, MFD_CLOEXEC);
    if (fd < 0)
        return CUDA_ERROR_OUT_OF_MEMORY;
    if (ftruncate(fd, (off_t)size) != 0) {
        close(fd);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    pthread_mutex_lock(&lock);
    struct vmm_alloc *a = vmm_new(fd, size, prop->requestedHandleTypes, prop->location.id, 0);
    if (a)
        *handle = a->handle;
    pthread_mutex_unlock(&lock);
    if (!a) {
        close(fd);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    return CUDA_SUCCESS;
}

EXPORT CUresult cuMemRelease(CUmemGenericAllocationHandle handle)
{
    INJECT("cuMemRelease");
    pthread_mutex_lock(&lock);
    struct vmm_alloc *a = vmm_find(handle);
    if (a) {
        a->refs--;
        vmm_drop_if_unused(a); /* still mapped: it stays until unmapped */
    }
    pthread_mutex_unlock(&lock);
    return a ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

EXPORT CUresult cuMemAddressReserve(CUdeviceptr *ptr, size_t size, size_t alignment, CUdeviceptr addr,
                                    unsigned long long flags)
{
    INJECT("cuMemAddressReserve");
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    if (!ptr || size == 0 || size % page || addr % page || flags || (alignment & (alignment - 1)))
        return CUDA_ERROR_INVALID_VALUE;
    /* The hint is only a hint (the driver's too): the fake ignores it. */
    size_t align = alignment ? alignment : (size_t)VMM_GRANULARITY;
    if (align < page)
        align = page;
    if (size > SIZE_MAX - align)
        return CUDA_ERROR_OUT_OF_MEMORY;
    struct vmm_range *r = calloc(1, sizeof *r);
    if (!r)
        return CUDA_ERROR_OUT_OF_MEMORY;
    /* Reserve size + align, then trim both ends to the aligned range. */
    char *p = mmap(NULL, size + align, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) {
        free(r);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    uintptr_t base = ((uintptr_t)p + align - 1) & ~(uintptr_t)(align - 1);
    size_t head = base - (uintptr_t)p, tail = align - head;
    if (head)
        munmap(p, head);
    if (tail)
        munmap((char *)base + size, tail);
    r->base = base;
    r->size = size;
    pthread_mutex_lock(&lock);
    r->next = vmm_ranges;
    vmm_ranges = r;
    pthread_mutex_unlock(&lock);
    *ptr = (CUdeviceptr)base;
    return CUDA_SUCCESS;
}

/* Stricter than the documentation, which does not say: a range that still
 * has mappings is refused (CUDA_ERROR_INVALID_VALUE), so that a test sees a
 * caller that frees before it unmaps. */
EXPORT CUresult cuMemAddressFree(CUdeviceptr ptr, size_t size)
{
    INJECT("cuMemAddressFree");
    CUresult rc = CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&lock);
    for (struct vmm_range **pp = &vmm_ranges; *pp; pp = &(*pp)->next) {
        struct vmm_range *r = *pp;
        if (r->base == (uintptr_t)ptr && r->size == size && r->maps == 0) {
            *pp = r->next;
            munmap((void *)r->base, r->size);
            free(r);
            rc = CUDA_SUCCESS;
            break;
        }
    }
    pthread_mutex_unlock(&lock);
    return rc;
}

EXPORT CUresult cuMemMap(CUdeviceptr ptr, size_t size, size_t offset, CUmemGenericAllocationHandle handle,
                         unsigned long long flags)
{
    INJECT("cuMemMap");
    if (!ptr || size == 0 || ptr % VMM_GRANULARITY || size % VMM_GRANULARITY || offset || flags)
        return CUDA_ERROR_INVALID_VALUE;
    CUresult rc = CUDA_ERROR_INVALID_VALUE;
    struct vmm_map *m = calloc(1, sizeof *m);
    if (!m)
        return CUDA_ERROR_OUT_OF_MEMORY;
    pthread_mutex_lock(&lock);
    struct vmm_alloc *a = vmm_find(handle);
    struct vmm_range *r = vmm_range_of((uintptr_t)ptr, size);
    if (!a || !r || size > a->size)
        goto out;
    for (struct vmm_map *o = vmm_maps; o; o = o->next)
        if (o->base < (uintptr_t)ptr + size && (uintptr_t)ptr < o->base + o->size)
            goto out; /* only ranges not mapped yet */
    /* Not accessible until cuMemSetAccess, as in CUDA. */
    if (mmap((void *)(uintptr_t)ptr, size, PROT_NONE, MAP_SHARED | MAP_FIXED, a->fd, 0) == MAP_FAILED) {
        rc = CUDA_ERROR_OUT_OF_MEMORY;
        goto out;
    }
    m->base = (uintptr_t)ptr;
    m->size = size;
    m->id = ++buffer_ids;
    m->alloc = a;
    m->range = r;
    a->maps++;
    r->maps++;
    m->next = vmm_maps;
    vmm_maps = m;
    m = NULL;
    rc = CUDA_SUCCESS;
out:
    pthread_mutex_unlock(&lock);
    free(m);
    return rc;
}

/* Whether [p, p + size) is covered by mappings, each wholly inside it when
 * `whole` (lock held). */
static int vmm_covered(uintptr_t p, size_t size, int whole)
{
    uintptr_t at = p, end = p + size;
    while (at < end) {
        struct vmm_map *m = vmm_map_at(at);
        if (!m || (whole && (m->base < p || m->base + m->size > end)))
            return 0;
        at = m->base + m->size;
    }
    return 1;
}

EXPORT CUresult cuMemUnmap(CUdeviceptr ptr, size_t size)
{
    INJECT("cuMemUnmap");
    if (!ptr || size == 0)
        return CUDA_ERROR_INVALID_VALUE;
    CUresult rc = CUDA_ERROR_INVALID_VALUE;
    uintptr_t p = (uintptr_t)ptr, end = p + size;
    pthread_mutex_lock(&lock);
    /* Whole mappings only: a part of one is refused, as in CUDA. */
    if (end < p || !vmm_covered(p, size, 1))
        goto out;
    /* Back to reserved address space. */
    if (mmap((void *)p, size, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED, -1, 0) ==
        MAP_FAILED) {
        rc = CUDA_ERROR_OUT_OF_MEMORY;
        goto out;
    }
    for (struct vmm_map **pp = &vmm_maps; *pp;) {
        struct vmm_map *m = *pp;
        if (m->base >= p && m->base < end) {
            *pp = m->next;
            m->range->maps--;
            m->alloc->maps--;
            vmm_drop_if_unused(m->alloc);
            free(m);
        } else {
            pp = &m->next;
        }
    }
    rc = CUDA_SUCCESS;
out:
    pthread_mutex_unlock(&lock);
    return rc;
}

/* Device locations only: the fake's memory is its one device's, whatever
 * the ordinal; host locations are not modelled (CUDA_ERROR_NOT_SUPPORTED). */
EXPORT CUresult cuMemSetAccess(CUdeviceptr ptr, size_t size, const CUmemAccessDesc *desc, size_t count)
{
    INJECT("cuMemSetAccess");
    if (!ptr || size == 0 || !desc || count == 0)
        return CUDA_ERROR_INVALID_VALUE;
    int prot = -1;
    for (size_t i = 0; i < count; i++) {
        if (desc[i].location.type != CU_MEM_LOCATION_TYPE_DEVICE)
            return desc[i].location.type > 0 && desc[i].location.type <= 4 ? CUDA_ERROR_NOT_SUPPORTED
                                                                           : CUDA_ERROR_INVALID_VALUE;
        if (desc[i].location.id < 0)
            return CUDA_ERROR_INVALID_DEVICE;
        switch (desc[i].flags) {
        case CU_MEM_ACCESS_FLAGS_PROT_NONE:
            prot = PROT_NONE;
            break;
        case CU_MEM_ACCESS_FLAGS_PROT_READ:
            prot = PROT_READ;
            break;
        case CU_MEM_ACCESS_FLAGS_PROT_READWRITE:
            prot = PROT_READ | PROT_WRITE;
            break;
        default:
            return CUDA_ERROR_INVALID_VALUE;
        }
    }
    CUresult rc = CUDA_ERROR_INVALID_VALUE;
    uintptr_t p = (uintptr_t)ptr;
    pthread_mutex_lock(&lock);
    /* The range must be fully mapped (mappings may stick out of it). */
    if (p % (uintptr_t)sysconf(_SC_PAGESIZE) == 0 && p + size > p && vmm_covered(p, size, 0))
        rc = mprotect((void *)p, size, prot) == 0 ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_unlock(&lock);
    return rc;
}

EXPORT CUresult cuMemRetainAllocationHandle(CUmemGenericAllocationHandle *handle, void *addr)
{
    INJECT("cuMemRetainAllocationHandle");
    if (!handle)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&lock);
    struct vmm_map *m = vmm_map_at((uintptr_t)addr);
    if (m) { /* the same value as the one mapped there, one more reference */
        m->alloc->refs++;
        *handle = m->alloc->handle;
    }
    pthread_mutex_unlock(&lock);
    return m ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

EXPORT CUresult cuMemGetAllocationPropertiesFromHandle(CUmemAllocationProp *prop,
                                                       CUmemGenericAllocationHandle handle)
{
    INJECT("cuMemGetAllocationPropertiesFromHandle");
    if (!prop)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&lock);
    struct vmm_alloc *a = vmm_find(handle);
    if (a) {
        memset(prop, 0, sizeof *prop);
        prop->type = CU_MEM_ALLOCATION_TYPE_PINNED;
        prop->requestedHandleTypes = a->types;
        prop->location.type = CU_MEM_LOCATION_TYPE_DEVICE;
        prop->location.id = a->device;
    }
    pthread_mutex_unlock(&lock);
    return a ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

/* POSIX file descriptors only, and only of allocations made to be exported
 * (requestedHandleTypes), as the driver: the descriptor is new (the caller
 * closes it) and refers to the memory itself, whatever becomes of the handle. */
EXPORT CUresult cuMemExportToShareableHandle(void *shareableHandle, CUmemGenericAllocationHandle handle,
                                             int handleType, unsigned long long flags)
{
    INJECT("cuMemExportToShareableHandle");
    if (!shareableHandle || flags || handleType != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR)
        return CUDA_ERROR_INVALID_VALUE;
    CUresult rc = CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&lock);
    struct vmm_alloc *a = vmm_find(handle);
    if (a && (a->types & CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR)) {
        int fd = fcntl(a->fd, F_DUPFD_CLOEXEC, 0);
        if (fd >= 0) {
            *(int *)shareableHandle = fd;
            rc = CUDA_SUCCESS;
        } else {
            rc = CUDA_ERROR_OUT_OF_MEMORY; /* out of descriptors */
        }
    }
    pthread_mutex_unlock(&lock);
    return rc;
}

/* Whether fd is a descriptor of a cuMemCreate'd memfd. */
static int is_vmm_fd(int fd)
{
    char path[64], target[128];
    snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
    ssize_t n = readlink(path, target, sizeof target - 1);
    if (n < 0)
        return 0;
    target[n] = '\0';
    return strncmp(target, "/memfd:" VMM_MEMFD_NAME " ", strlen("/memfd:" VMM_MEMFD_NAME " ")) == 0;
}

/* The importer keeps its own descriptor: the caller may close osHandle at
 * once.  Each import is a new handle with a block id of this process. */
EXPORT CUresult cuMemImportFromShareableHandle(CUmemGenericAllocationHandle *handle, void *osHandle,
                                               int shHandleType)
{
    INJECT("cuMemImportFromShareableHandle");
    if (shHandleType == CU_MEM_HANDLE_TYPE_FABRIC)
        return CUDA_ERROR_NOT_SUPPORTED;
    if (!handle || shHandleType != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR)
        return CUDA_ERROR_INVALID_VALUE;
    intptr_t v = (intptr_t)osHandle;
    struct stat st;
    if (v < 0 || v > INT32_MAX || fstat((int)v, &st) != 0 || !S_ISREG(st.st_mode) || st.st_size <= 0 ||
        (unsigned long long)st.st_size % VMM_GRANULARITY || !is_vmm_fd((int)v))
        return CUDA_ERROR_INVALID_VALUE; /* not a descriptor of cuMemExportToShareableHandle */
    int fd = fcntl((int)v, F_DUPFD_CLOEXEC, 0);
    if (fd < 0)
        return CUDA_ERROR_OUT_OF_MEMORY;
    pthread_mutex_lock(&lock);
    struct vmm_alloc *a =
        vmm_new(fd, (size_t)st.st_size, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, current_device(), 1);
    if (a) {
        vmm_imports++;
        *handle = a->handle;
    }
    pthread_mutex_unlock(&lock);
    if (!a) {
        close(fd);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    return CUDA_SUCCESS;
}

/* ---------------------------------------------------------------- pointer attributes */

#define CU_POINTER_ATTRIBUTE_BUFFER_ID 7
#define CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE 10
#define CU_POINTER_ATTRIBUTE_RANGE_START_ADDR 11
#define CU_POINTER_ATTRIBUTE_RANGE_SIZE 12
#define CU_POINTER_ATTRIBUTE_MAPPED 13
#define CU_POINTER_ATTRIBUTE_MAPPING_SIZE 18
#define CU_POINTER_ATTRIBUTE_MAPPING_BASE_ADDR 19
#define CU_POINTER_ATTRIBUTE_MEMORY_BLOCK_ID 20

/* What cuPointerGetAttribute says of an address (lock held): its range, its
 * mapping, its ids. */
struct ptr_info {
    uintptr_t range_base, map_base;
    size_t range_size, map_size;
    unsigned long long buffer_id, block_id;
    int legacy_ipc;
};

static int ptr_info(uintptr_t p, struct ptr_info *pi)
{
    for (struct mapping *m = maps; m; m = m->next)
        if (m->ipc != 2 && p >= m->base && p - m->base < m->size) {
            /* cuMemAlloc'ed or IPC-opened: one mapping, its own range. */
            pi->range_base = pi->map_base = m->base;
            pi->range_size = pi->map_size = m->size;
            pi->buffer_id = m->id;
            pi->block_id = m->block;
            pi->legacy_ipc = !m->ipc;
            return 1;
        }
    struct vmm_map *v = vmm_map_at(p);
    if (v) {
        /* As the driver says of PyTorch's expandable segments: the range is
         * the whole reservation, the mapping one physical allocation. */
        pi->range_base = v->range->base;
        pi->range_size = v->range->size;
        pi->map_base = v->base;
        pi->map_size = v->size;
        pi->buffer_id = v->id;
        pi->block_id = v->alloc->block;
        pi->legacy_ipc = 0;
        return 1;
    }
    return 0;
}

/* Of memory cuMemAlloc'ed, IPC-opened or cuMemMap'ed here; anything else
 * (malloc'ed host memory in the tests, reserved address space not mapped) is
 * not CUDA memory: CUDA_ERROR_INVALID_VALUE, as the driver says of a pointer
 * it does not know, and the shim treats it as memory it cannot export. */
EXPORT CUresult cuPointerGetAttribute(void *data, int attribute, CUdeviceptr ptr)
{
    INJECT("cuPointerGetAttribute");
    NEED_CONTEXT();
    if (!data)
        return CUDA_ERROR_INVALID_VALUE;
    CUresult rc = CUDA_SUCCESS;
    struct ptr_info pi;
    pthread_mutex_lock(&lock);
    if (!ptr_info((uintptr_t)ptr, &pi))
        rc = CUDA_ERROR_INVALID_VALUE;
    else if (attribute == CU_POINTER_ATTRIBUTE_BUFFER_ID)
        *(unsigned long long *)data = pi.buffer_id;
    else if (attribute == CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE)
        *(int *)data = pi.legacy_ipc;
    else if (attribute == CU_POINTER_ATTRIBUTE_RANGE_START_ADDR)
        *(CUdeviceptr *)data = (CUdeviceptr)pi.range_base;
    else if (attribute == CU_POINTER_ATTRIBUTE_RANGE_SIZE)
        *(size_t *)data = pi.range_size;
    else if (attribute == CU_POINTER_ATTRIBUTE_MAPPED)
        *(int *)data = 1;
    else if (attribute == CU_POINTER_ATTRIBUTE_MAPPING_BASE_ADDR)
        *(void **)data = (void *)pi.map_base;
    else if (attribute == CU_POINTER_ATTRIBUTE_MAPPING_SIZE)
        *(size_t *)data = pi.map_size;
    else if (attribute == CU_POINTER_ATTRIBUTE_MEMORY_BLOCK_ID)
        *(unsigned long long *)data = pi.block_id;
    else
        rc = CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_unlock(&lock);
    return rc;
}

/* ---------------------------------------------------------------- IPC */

EXPORT CUresult cuIpcGetMemHandle(CUipcMemHandle *handle, CUdeviceptr dptr)
{
    INJECT("cuIpcGetMemHandle");
    NEED_CONTEXT();
    if (!handle)
        return CUDA_ERROR_INVALID_VALUE;
    struct ipc_handle h;
    memset(&h, 0, sizeof h);
    pthread_mutex_lock(&lock);
    struct mapping *m = find_base((uintptr_t)dptr, 0);
    if (m) {
        memcpy(h.magic, HANDLE_MAGIC, sizeof h.magic);
        h.pid = (int32_t)getpid();
        h.size = m->size;
        memcpy(h.name, m->name, sizeof h.name);
    }
    pthread_mutex_unlock(&lock);
    if (!m)
        return CUDA_ERROR_INVALID_VALUE;
    memcpy(handle, &h, sizeof h);
    return CUDA_SUCCESS;
}

EXPORT CUresult cuIpcOpenMemHandle_v2(CUdeviceptr *dptr, CUipcMemHandle handle, unsigned int flags)
{
    INJECT("cuIpcOpenMemHandle");
    NEED_CONTEXT();
    if (!dptr || (flags & ~CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS))
        return CUDA_ERROR_INVALID_VALUE;
    struct ipc_handle h;
    memcpy(&h, &handle, sizeof h);
    if (memcmp(h.magic, HANDLE_MAGIC, sizeof h.magic) != 0 || h.size == 0 ||
        memchr(h.name, '\0', sizeof h.name) == NULL)
        return CUDA_ERROR_INVALID_VALUE; /* not a handle of cuIpcGetMemHandle */
    if (h.pid == (int32_t)getpid())
        return CUDA_ERROR_INVALID_VALUE; /* CUDA maps no handle in the process that made it */

    CUresult rc = CUDA_SUCCESS;
    pthread_mutex_lock(&lock);
    struct mapping *m;
    for (m = maps; m; m = m->next)
        if (m->ipc == 1 && strcmp(m->name, h.name) == 0)
            break;
    if (m) { /* opened already: the same address, one more reference */
        m->refs++;
        opened++;
        *dptr = (CUdeviceptr)m->base;
        goto out;
    }
    int fd = shm_open(h.name, O_RDWR | O_CLOEXEC, 0);
    if (fd < 0) {
        rc = errno == ENOENT ? CUDA_ERROR_INVALID_HANDLE : CUDA_ERROR_INVALID_VALUE;
        goto out;
    }
    struct stat st;
    void *p = MAP_FAILED;
    if (fstat(fd, &st) == 0 && (uint64_t)st.st_size >= h.size + HDR)
        p = mmap(NULL, (size_t)h.size + HDR, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (p == MAP_FAILED) {
        rc = CUDA_ERROR_INVALID_HANDLE;
        goto out;
    }
    struct alloc_header *hdr = p;
    atomic_fetch_add(&hdr->mappers, 1);
    if (atomic_load(&hdr->freed)) { /* its owner freed it: the handle is stale */
        atomic_fetch_sub(&hdr->mappers, 1);
        munmap(p, (size_t)h.size + HDR);
        rc = CUDA_ERROR_INVALID_HANDLE;
        goto out;
    }
    p = (char *)p + HDR;
    m = calloc(1, sizeof *m);
    if (!m) {
        atomic_fetch_sub(&hdr->mappers, 1);
        munmap((char *)p - HDR, (size_t)h.size + HDR);
        rc = CUDA_ERROR_OUT_OF_MEMORY;
        goto out;
    }
    m->ipc = 1;
    m->refs = 1;
    m->block = ++block_ids;
    opened++;
    m->base = (uintptr_t)p;
    m->size = (size_t)h.size;
    memcpy(m->name, h.name, sizeof m->name);
    m->next = maps;
    maps = m;
    *dptr = (CUdeviceptr)(uintptr_t)p;
out:
    pthread_mutex_unlock(&lock);
    return rc;
}
EXPORT CUresult cuIpcOpenMemHandle(CUdeviceptr *dptr, CUipcMemHandle handle, unsigned int flags)
    ALIAS(cuIpcOpenMemHandle_v2);

EXPORT CUresult cuIpcCloseMemHandle(CUdeviceptr dptr)
{
    INJECT("cuIpcCloseMemHandle");
    NEED_CONTEXT();
    pthread_mutex_lock(&lock);
    struct mapping *m = find_base((uintptr_t)dptr, 1);
    if (!m) {
        pthread_mutex_unlock(&lock);
        return CUDA_ERROR_INVALID_VALUE;
    }
    if (--m->refs > 0) {
        pthread_mutex_unlock(&lock);
        return CUDA_SUCCESS;
    }
    unlink_mapping(m);
    atomic_fetch_sub(&header_of(m)->mappers, 1);
    unmap(m);
    pthread_mutex_unlock(&lock);
    free(m);
    return CUDA_SUCCESS;
}

/* ---------------------------------------------------------------- stream memory operations */

static int wait_holds(unsigned op, uint64_t cur, uint64_t value, int bits)
{
    switch (op) {
    case CU_STREAM_WAIT_VALUE_GEQ:
        return bits == 64 ? (int64_t)(cur - value) >= 0 : (int32_t)(uint32_t)(cur - value) >= 0;
    case CU_STREAM_WAIT_VALUE_EQ:
        return cur == value;
    case CU_STREAM_WAIT_VALUE_AND:
        return (cur & value) != 0;
    default: /* NOR */
        return bits == 64 ? ~(cur | value) != 0 : (uint32_t)~(cur | value) != 0;
    }
}

static uint64_t load(CUdeviceptr addr, int bits)
{
    if (bits == 64)
        return __atomic_load_n((uint64_t *)(uintptr_t)addr, __ATOMIC_ACQUIRE);
    return __atomic_load_n((uint32_t *)(uintptr_t)addr, __ATOMIC_ACQUIRE);
}

/* The stream is synchronous, so the calling thread is the one that waits; it
 * holds no lock meanwhile. */
static CUresult wait_loop(const char *base, unsigned op, int bits, CUdeviceptr addr, uint64_t value,
                          uint64_t cur);

static CUresult wait_value(const char *base, int bits, CUstream stream, CUdeviceptr addr, uint64_t value,
                           unsigned flags)
{
    INJECT(base);
    NEED_CONTEXT();
    if (bits == 64 && no_memops())
        return CUDA_ERROR_NOT_SUPPORTED;
    unsigned op = flags & 3u;
    if ((flags & ~(3u | CU_STREAM_WAIT_VALUE_FLUSH)) || !addr || addr % (unsigned)(bits / 8))
        return CUDA_ERROR_INVALID_VALUE;
    CUresult q = behind_waits(base, 0);
    if (q)
        return q;
    uint64_t cur = load(addr, bits);
    if (wait_holds(op, cur, value, bits))
        return CUDA_SUCCESS;
    int blocking = stream_blocking(stream);
    atomic_fetch_add(&waits_all, 1);
    if (blocking)
        atomic_fetch_add(&waits_blocking, 1);
    CUresult r = wait_loop(base, op, bits, addr, value, cur);
    if (blocking)
        atomic_fetch_sub(&waits_blocking, 1);
    atomic_fetch_sub(&waits_all, 1);
    return r;
}

/* A wait that did not hold at once: polls until it does, or the bound. */
static CUresult wait_loop(const char *base, unsigned op, int bits, CUdeviceptr addr, uint64_t value, uint64_t cur)
{
    static const char *const op_names[] = {"GEQ", "EQ", "AND", "NOR"};
    long long deadline = now_ns() + wait_timeout_ms() * 1000000LL;
    long sleep_ns = 1000;
    for (unsigned i = 0;; i++) {
        if (i < 200) {
            sched_yield();
        } else {
            struct timespec ts = {0, sleep_ns};
            nanosleep(&ts, NULL);
            if (sleep_ns < 200000)
                sleep_ns *= 2;
        }
        cur = load(addr, bits);
        if (wait_holds(op, cur, value, bits))
            return CUDA_SUCCESS;
        if (now_ns() >= deadline)
            break;
    }
    fprintf(stderr, "fake libcuda: %s timed out: *addr=%llu, want %s %llu\n", base,
            (unsigned long long)cur, op_names[op], (unsigned long long)value);
    return CUDA_ERROR_LAUNCH_TIMEOUT;
}

static CUresult write_value(const char *base, int bits, CUdeviceptr addr, uint64_t value,
                            unsigned flags)
{
    INJECT(base);
    NEED_CONTEXT();
    if (bits == 64 && no_memops())
        return CUDA_ERROR_NOT_SUPPORTED;
    if ((flags & ~CU_STREAM_WRITE_VALUE_NO_MEMORY_BARRIER) || !addr || addr % (unsigned)(bits / 8))
        return CUDA_ERROR_INVALID_VALUE;
    CUresult q = behind_waits(base, 0);
    if (q)
        return q;
    if (bits == 64)
        __atomic_store_n((uint64_t *)(uintptr_t)addr, value, __ATOMIC_RELEASE);
    else
        __atomic_store_n((uint32_t *)(uintptr_t)addr, (uint32_t)value, __ATOMIC_RELEASE);
    return CUDA_SUCCESS;
}

EXPORT CUresult cuStreamWaitValue64_v2(CUstream stream, CUdeviceptr addr, unsigned long long value,
                                       unsigned int flags)
{
    return wait_value("cuStreamWaitValue64", 64, stream, addr, value, flags);
}
EXPORT CUresult cuStreamWaitValue64(CUstream stream, CUdeviceptr addr, unsigned long long value,
                                    unsigned int flags) ALIAS(cuStreamWaitValue64_v2);

EXPORT CUresult cuStreamWriteValue64_v2(CUstream stream, CUdeviceptr addr, unsigned long long value,
                                        unsigned int flags)
{
    (void)stream;
    return write_value("cuStreamWriteValue64", 64, addr, value, flags);
}
EXPORT CUresult cuStreamWriteValue64(CUstream stream, CUdeviceptr addr, unsigned long long value,
                                     unsigned int flags) ALIAS(cuStreamWriteValue64_v2);

/* CUDA 12's CUstreamBatchMemOpParams, the 64-bit wait and write (one layout). */
struct fake_memop {
    unsigned operation;
    unsigned long long address, value64;
    unsigned flags;
    unsigned long long alias, pad;
};
_Static_assert(sizeof(struct fake_memop) == 48, "CUstreamBatchMemOpParams");

/* The operations in the array's order, each as its single call would do it;
 * the whole array checked first (a refused batch enqueues nothing). */
EXPORT CUresult cuStreamBatchMemOp_v2(CUstream stream, unsigned int count, void *params, unsigned int flags)
{
    INJECT("cuStreamBatchMemOp");
    NEED_CONTEXT();
    if (env_is_1("FAKE_CUDA_NO_BATCH_MEMOPS") || no_memops())
        return CUDA_ERROR_NOT_SUPPORTED;
    struct fake_memop *ops = params;
    if (!count || count > 256 || !ops || flags)
        return CUDA_ERROR_INVALID_VALUE;
    for (unsigned i = 0; i < count; i++)
        if (ops[i].operation != 4 && ops[i].operation != 5)
            return CUDA_ERROR_INVALID_VALUE;
    for (unsigned i = 0; i < count; i++) {
        CUresult r = ops[i].operation == 4
                         ? wait_value("cuStreamWaitValue64", 64, stream, ops[i].address, ops[i].value64, ops[i].flags)
                         : write_value("cuStreamWriteValue64", 64, ops[i].address, ops[i].value64, ops[i].flags);
        if (r)
            return r;
    }
    return CUDA_SUCCESS;
}
EXPORT CUresult cuStreamBatchMemOp(CUstream stream, unsigned int count, void *params, unsigned int flags)
    ALIAS(cuStreamBatchMemOp_v2);

EXPORT CUresult cuStreamWaitValue32_v2(CUstream stream, CUdeviceptr addr, unsigned int value,
                                       unsigned int flags)
{
    return wait_value("cuStreamWaitValue32", 32, stream, addr, value, flags);
}
EXPORT CUresult cuStreamWaitValue32(CUstream stream, CUdeviceptr addr, unsigned int value,
                                    unsigned int flags) ALIAS(cuStreamWaitValue32_v2);

EXPORT CUresult cuStreamWriteValue32_v2(CUstream stream, CUdeviceptr addr, unsigned int value,
                                        unsigned int flags)
{
    (void)stream;
    return write_value("cuStreamWriteValue32", 32, addr, value, flags);
}
EXPORT CUresult cuStreamWriteValue32(CUstream stream, CUdeviceptr addr, unsigned int value,
                                     unsigned int flags) ALIAS(cuStreamWriteValue32_v2);

/* ---------------------------------------------------------------- events */

/* Streams are synchronous: an event is complete as soon as it is recorded,
 * and waiting for one waits for nothing.  Events are counted like streams. */
typedef struct CUevent_st *CUevent;
struct fake_event { int magic; };
#define EVENT_MAGIC 0x45564e54

EXPORT CUresult cuEventCreate(CUevent *event, unsigned int flags)
{
    (void)flags;
    INJECT("cuEventCreate");
    NEED_CONTEXT();
    if (!event)
        return CUDA_ERROR_INVALID_VALUE;
    struct fake_event *e = calloc(1, sizeof *e);
    if (!e)
        return CUDA_ERROR_OUT_OF_MEMORY;
    e->magic = EVENT_MAGIC;
    *event = (CUevent)(void *)e;
    return CUDA_SUCCESS;
}

EXPORT CUresult cuEventDestroy_v2(CUevent event)
{
    INJECT("cuEventDestroy");
    struct fake_event *e = (struct fake_event *)(void *)event;
    if (!e || e->magic != EVENT_MAGIC)
        return CUDA_ERROR_INVALID_HANDLE;
    e->magic = 0;
    free(e);
    return CUDA_SUCCESS;
}
EXPORT CUresult cuEventDestroy(CUevent event) ALIAS(cuEventDestroy_v2);

EXPORT CUresult cuEventRecord(CUevent event, CUstream stream)
{
    (void)stream;
    INJECT("cuEventRecord");
    struct fake_event *e = (struct fake_event *)(void *)event;
    return e && e->magic == EVENT_MAGIC ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
}

EXPORT CUresult cuStreamWaitEvent(CUstream stream, CUevent event, unsigned int flags)
{
    (void)stream;
    (void)flags;
    INJECT("cuStreamWaitEvent");
    struct fake_event *e = (struct fake_event *)(void *)event;
    return e && e->magic == EVENT_MAGIC ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
}

/* ---------------------------------------------------------------- streams */

EXPORT CUresult cuStreamCreate(CUstream *stream, unsigned int flags)
{
    INJECT("cuStreamCreate");
    NEED_CONTEXT();
    if (!stream || (flags & ~CU_STREAM_NON_BLOCKING))
        return CUDA_ERROR_INVALID_VALUE;
    struct fake_stream *s = calloc(1, sizeof *s);
    if (!s)
        return CUDA_ERROR_OUT_OF_MEMORY;
    static unsigned long long next_id = 16; /* under lock; below: the special handles' */
    pthread_mutex_lock(&lock);
    s->id = next_id++;
    s->flags = flags;
    s->next = streams;
    streams = s;
    pthread_mutex_unlock(&lock);
    *stream = (CUstream)(void *)s;
    return CUDA_SUCCESS;
}

EXPORT CUresult cuStreamDestroy_v2(CUstream stream)
{
    INJECT("cuStreamDestroy");
    NEED_CONTEXT();
    pthread_mutex_lock(&lock);
    struct fake_stream **pp = &streams;
    while (*pp && (void *)*pp != (void *)stream)
        pp = &(*pp)->next;
    struct fake_stream *s = *pp;
    if (s)
        *pp = s->next;
    pthread_mutex_unlock(&lock);
    if (!s)
        return CUDA_ERROR_INVALID_HANDLE;
    free(s);
    return CUDA_SUCCESS;
}
EXPORT CUresult cuStreamDestroy(CUstream stream) ALIAS(cuStreamDestroy_v2);

/* NULL, CU_STREAM_LEGACY (1) and CU_STREAM_PER_THREAD (2) are ids 0..2. */
EXPORT CUresult cuStreamGetId(CUstream stream, unsigned long long *id)
{
    INJECT("cuStreamGetId");
    NEED_CONTEXT();
    if (!id)
        return CUDA_ERROR_INVALID_VALUE;
    if ((uintptr_t)(void *)stream <= 2) {
        *id = (uintptr_t)(void *)stream;
        return CUDA_SUCCESS;
    }
    CUresult r = CUDA_ERROR_INVALID_HANDLE;
    pthread_mutex_lock(&lock);
    for (struct fake_stream *s = streams; s; s = s->next)
        if ((void *)s == (void *)stream) {
            *id = s->id;
            r = CUDA_SUCCESS;
        }
    pthread_mutex_unlock(&lock);
    return r;
}

EXPORT CUresult cuStreamSynchronize(CUstream stream)
{
    (void)stream;
    INJECT("cuStreamSynchronize");
    NEED_CONTEXT();
    return CUDA_SUCCESS; /* all work is done when it is queued */
}

EXPORT CUresult cuStreamQuery(CUstream stream)
{
    (void)stream;
    INJECT("cuStreamQuery");
    NEED_CONTEXT();
    return CUDA_SUCCESS;
}

EXPORT CUresult cuStreamIsCapturing(CUstream stream, int *status)
{
    (void)stream;
    INJECT("cuStreamIsCapturing");
    NEED_CONTEXT();
    if (!status)
        return CUDA_ERROR_INVALID_VALUE;
    *status = env_is_1("FAKE_CUDA_CAPTURING") ? 1 /* ACTIVE */ : 0 /* NONE */;
    return CUDA_SUCCESS;
}

/* ---------------------------------------------------------------- cuGetProcAddress */

EXPORT CUresult cuGetProcAddress_v2(const char *symbol, void **pfn, int cudaVersion,
                                    unsigned long long flags, int *symbolStatus);
EXPORT CUresult cuGetProcAddress(const char *symbol, void **pfn, int cudaVersion,
                                 unsigned long long flags);

/* BASE name -> the function that name means in CUDA 12 (the newest version). */
static const struct {
    const char *name;
    void *fn;
} procs[] = {
    {"cuInit", (void *)cuInit},
    {"cuDriverGetVersion", (void *)cuDriverGetVersion},
    {"cuGetErrorString", (void *)cuGetErrorString},
    {"cuGetErrorName", (void *)cuGetErrorName},
    {"cuGetProcAddress", (void *)cuGetProcAddress_v2}, /* before 12.0: the 4-argument one */
    {"cuCtxGetCurrent", (void *)cuCtxGetCurrent},
    {"cuCtxSetCurrent", (void *)cuCtxSetCurrent},
    {"cuCtxGetDevice", (void *)cuCtxGetDevice},
    {"cuDeviceGetAttribute", (void *)cuDeviceGetAttribute},
    {"cuMemAlloc", (void *)cuMemAlloc_v2},
    {"cuMemFree", (void *)cuMemFree_v2},
    {"cuMemGetInfo", (void *)cuMemGetInfo_v2},
    {"cuMemsetD8", (void *)cuMemsetD8_v2},
    {"cuMemsetD8Async", (void *)cuMemsetD8Async},
    {"cuMemcpy", (void *)cuMemcpy},
    {"cuMemcpyAsync", (void *)cuMemcpyAsync},
    {"cuMemcpyDtoD", (void *)cuMemcpyDtoD_v2},
    {"cuMemcpyDtoDAsync", (void *)cuMemcpyDtoDAsync_v2},
    {"cuMemcpyDtoH", (void *)cuMemcpyDtoH_v2},
    {"cuMemcpyHtoD", (void *)cuMemcpyHtoD_v2},
    {"cuMemcpyDtoHAsync", (void *)cuMemcpyDtoHAsync_v2},
    {"cuMemcpyHtoDAsync", (void *)cuMemcpyHtoDAsync_v2},
    {"cuIpcGetMemHandle", (void *)cuIpcGetMemHandle},
    {"cuIpcOpenMemHandle", (void *)cuIpcOpenMemHandle_v2},
    {"cuIpcCloseMemHandle", (void *)cuIpcCloseMemHandle},
    {"cuStreamWaitValue32", (void *)cuStreamWaitValue32_v2},
    {"cuStreamWaitValue64", (void *)cuStreamWaitValue64_v2},
    {"cuMemHostRegister", (void *)cuMemHostRegister_v2},
    {"cuMemHostUnregister", (void *)cuMemHostUnregister},
    {"cuMemHostGetDevicePointer", (void *)cuMemHostGetDevicePointer_v2},
    {"cuStreamWriteValue32", (void *)cuStreamWriteValue32_v2},
    {"cuStreamWriteValue64", (void *)cuStreamWriteValue64_v2},
    {"cuStreamBatchMemOp", (void *)cuStreamBatchMemOp_v2},
    {"cuStreamCreate", (void *)cuStreamCreate},
    {"cuEventCreate", (void *)cuEventCreate},
    {"cuEventDestroy", (void *)cuEventDestroy_v2},
    {"cuEventRecord", (void *)cuEventRecord},
    {"cuStreamWaitEvent", (void *)cuStreamWaitEvent},
    {"cuStreamDestroy", (void *)cuStreamDestroy_v2},
    {"cuStreamSynchronize", (void *)cuStreamSynchronize},
    {"cuStreamQuery", (void *)cuStreamQuery},
    {"cuStreamGetId", (void *)cuStreamGetId},
    {"cuStreamIsCapturing", (void *)cuStreamIsCapturing},
    {"cuPointerGetAttribute", (void *)cuPointerGetAttribute},
    {"cuMemGetAllocationGranularity", (void *)cuMemGetAllocationGranularity},
    {"cuMemCreate", (void *)cuMemCreate},
    {"cuMemRelease", (void *)cuMemRelease},
    {"cuMemAddressReserve", (void *)cuMemAddressReserve},
    {"cuMemAddressFree", (void *)cuMemAddressFree},
    {"cuMemMap", (void *)cuMemMap},
    {"cuMemUnmap", (void *)cuMemUnmap},
    {"cuMemSetAccess", (void *)cuMemSetAccess},
    {"cuMemRetainAllocationHandle", (void *)cuMemRetainAllocationHandle},
    {"cuMemGetAllocationPropertiesFromHandle", (void *)cuMemGetAllocationPropertiesFromHandle},
    {"cuMemExportToShareableHandle", (void *)cuMemExportToShareableHandle},
    {"cuMemImportFromShareableHandle", (void *)cuMemImportFromShareableHandle},
};

EXPORT CUresult cuGetProcAddress_v2(const char *symbol, void **pfn, int cudaVersion,
                                    unsigned long long flags, int *symbolStatus)
{
    INJECT("cuGetProcAddress");
    if (!symbol || !pfn || (flags & ~CU_GET_PROC_ADDRESS_FLAGS_MASK))
        return CUDA_ERROR_INVALID_VALUE;
    for (size_t i = 0; i < sizeof procs / sizeof procs[0]; i++)
        if (strcmp(procs[i].name, symbol) == 0) {
            *pfn = procs[i].fn;
            if (procs[i].fn == (void *)cuGetProcAddress_v2 && cudaVersion < 12000)
                *pfn = (void *)cuGetProcAddress;
            if (symbolStatus)
                *symbolStatus = CU_GET_PROC_ADDRESS_SUCCESS;
            return CUDA_SUCCESS;
        }
    *pfn = NULL;
    if (symbolStatus)
        *symbolStatus = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
    return CUDA_ERROR_NOT_FOUND;
}

EXPORT CUresult cuGetProcAddress(const char *symbol, void **pfn, int cudaVersion,
                                 unsigned long long flags)
{
    return cuGetProcAddress_v2(symbol, pfn, cudaVersion, flags, NULL);
}
