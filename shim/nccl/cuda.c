/*
 * The CUDA driver API loaded at run time (see cuda.h; docs/design.md, "CUDA
 * through the driver API"): the table of entry points filled once per
 * process, so that one build of the shim serves CUDA 12 and 13 applications
 * and needs no CUDA to build.
 */
#define _GNU_SOURCE
#include "cuda.h"

#include "loader.h"

#include <dlfcn.h>
#include <pthread.h>
#include <sched.h>
#include <time.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

/* cuGetProcAddress_v2 (CUDA 12+): the version-correct entry point of a base name. */
typedef CUresult (*getproc_v2_t)(const char *, void **, int, unsigned long long, int *);
/* Asked for the behaviour of CUDA 12.0: the oldest the shim supports. */
#define SHIM_CUDA_VERSION 12000

/* Published under g_cuda_lock, read-only once g_cuda_state says CUDA_OK (an
 * acquire load pairs with the release store that publishes it).  While the
 * process has not loaded the driver the state stays CUDA_ABSENT and a later
 * call tries again (the application may load CUDA after its first NCCL call);
 * a driver that lacks something is CUDA_UNUSABLE for good. */
enum { CUDA_ABSENT, CUDA_OK, CUDA_UNUSABLE };
static struct shim_cuda g_cuda;
static atomic_int g_cuda_state;
static char g_cuda_why[256];
static pthread_mutex_t g_cuda_lock = PTHREAD_MUTEX_INITIALIZER;

/* Loads the n functions `names` (cuGetProcAddress at `version`) into the
 * function pointers at `slots`: all of them (1), or none (0). */
static int load_group(getproc_v2_t getproc, int version, const char *const *names, void *const *slots, int n)
{
    void *fn[16];
    int status = 0;
    if (n > (int)(sizeof(fn) / sizeof(*fn)))
        return 0;
    for (int i = 0; i < n; i++)
        if (getproc(names[i], &fn[i], version, 0, &status) != CUDA_SUCCESS || !fn[i])
            return 0;
    for (int i = 0; i < n; i++)
        memcpy(slots[i], &fn[i], sizeof(void *));
    return 1;
}

/* Loads the driver's functions into *out (the reason into why[256] if it
 * cannot): the new state.  Called with no shim lock held (it enters the
 * loader: design.md, "Threads, locks, re-entrancy"). */
static int cuda_load(struct shim_cuda *out, char *why)
{
    /* RTLD_NOLOAD: a CUDA application has loaded the driver already. */
    void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
    if (!h) {
        snprintf(why, 256, "libcuda.so.1 is not loaded in this process (no CUDA application?)");
        return CUDA_ABSENT;
    }
    dlsym_fn_t real_dlsym = shim_real_dlsym();
    getproc_v2_t getproc = (getproc_v2_t)real_dlsym(h, "cuGetProcAddress_v2");
    if (!getproc) {
        snprintf(why, 256, "libcuda.so.1 has no cuGetProcAddress_v2 (a driver older than CUDA 12)");
        return CUDA_UNUSABLE;
    }
#define X(name, params)                                                                                  \
    {                                                                                                    \
        void *fn = NULL;                                                                                 \
        int status = 0;                                                                                  \
        CUresult r = getproc(#name, &fn, SHIM_CUDA_VERSION, 0, &status);                                 \
        if (r != CUDA_SUCCESS || !fn) {                                                                  \
            snprintf(why, 256, "cuGetProcAddress(%s) failed: CUresult %d, status %d", \
                     #name, r, status);                                                                  \
            return CUDA_UNUSABLE;                                                                        \
        }                                                                                                \
        memcpy(&out->name, &fn, sizeof(fn));                                                           \
    }
    SHIM_CUDA_FUNCTIONS(X)
#undef X
    load_group(getproc, 12080, (const char *const[]){ "cuMemcpyBatchAsync" }, (void *[]){ &out->cuMemcpyBatchAsync },
               1);
#define NAME(name, params) #name,
#define SLOT(name, params) &out->name,
    {
        const char *const names[] = { SHIM_CUDA_OPTIONAL(NAME) };
        void *slots[] = { SHIM_CUDA_OPTIONAL(SLOT) };
        for (size_t i = 0; i < sizeof(names) / sizeof(*names); i++) /* each alone */
            load_group(getproc, SHIM_CUDA_VERSION, &names[i], &slots[i], 1);
    }
    {
        const char *const names[] = { SHIM_CUDA_KERNEL(NAME) };
        void *slots[] = { SHIM_CUDA_KERNEL(SLOT) };
        load_group(getproc, SHIM_CUDA_VERSION, names, slots, (int)(sizeof(names) / sizeof(*names)));
    }
    {
        const char *const names[] = { SHIM_CUDA_VMM(NAME) };
        void *slots[] = { SHIM_CUDA_VMM(SLOT) };
        out->vmm_ok = load_group(getproc, SHIM_CUDA_VERSION, names, slots, (int)(sizeof(names) / sizeof(*names)));
    }
#undef NAME
#undef SLOT
    /* The handle stays open: the functions must outlive this call. */
    return CUDA_OK;
}

/* Shim threads inside the loader (cuda_load), and a fork in progress: a
 * fork must not happen while a shim thread is in dlopen (the child would
 * inherit the loader's half-changed state: children crashed in their first
 * dlopen), and no shim lock may be held across dlopen (a constructor run by
 * another thread's dlopen, which holds the loader's lock, may call NCCL).
 * So the prepare handler says it forks, then waits (bounded) until no shim
 * thread is in the loader; a thread about to enter waits while a fork is in
 * progress.  Sequentially consistent: each side writes its word, then reads
 * the other's, so at least one sees the other. */
static atomic_int g_in_loader, g_forking;

static void loader_enter(void)
{
    for (;;) {
        while (atomic_load(&g_forking))
            sched_yield();
        atomic_fetch_add(&g_in_loader, 1);
        if (!atomic_load(&g_forking))
            return;
        atomic_fetch_sub(&g_in_loader, 1);
    }
}

static void loader_leave(void)
{
    atomic_fetch_sub(&g_in_loader, 1);
}

const struct shim_cuda *shim_cuda(char *why, size_t whylen)
{
    int state = atomic_load_explicit(&g_cuda_state, memory_order_acquire);
    if (state == CUDA_ABSENT) {
        /* Loaded aside with no lock held; the first to finish publishes
         * (g_cuda is written only while the state is CUDA_ABSENT, and read
         * only once it is CUDA_OK). */
        struct shim_cuda fresh;
        char fresh_why[256] = "";
        memset(&fresh, 0, sizeof(fresh));
        loader_enter();
        int got = cuda_load(&fresh, fresh_why);
        loader_leave();
        pthread_mutex_lock(&g_cuda_lock);
        state = atomic_load_explicit(&g_cuda_state, memory_order_relaxed);
        if (state == CUDA_ABSENT) {
            if (got == CUDA_OK)
                g_cuda = fresh;
            snprintf(g_cuda_why, sizeof(g_cuda_why), "%s", fresh_why);
            state = got;
            atomic_store_explicit(&g_cuda_state, state, memory_order_release);
        }
        pthread_mutex_unlock(&g_cuda_lock);
    }
    if (state != CUDA_OK && why) {
        pthread_mutex_lock(&g_cuda_lock);
        snprintf(why, whylen, "%s", g_cuda_why);
        pthread_mutex_unlock(&g_cuda_lock);
    }
    return state == CUDA_OK ? &g_cuda : NULL;
}

int shim_cuda_current_device(void)
{
    const struct shim_cuda *cu = shim_cuda(NULL, 0);
    CUdevice dev = -1;
    /* No current context is an error: unknown, as without CUDA. */
    if (!cu || cu->cuCtxGetDevice(&dev) != CUDA_SUCCESS)
        return -1;
    return dev;
}

const char *shim_cuda_error(const char *fn, CUresult r, char *buf, size_t len)
{
    const char *s = NULL;
    if (atomic_load_explicit(&g_cuda_state, memory_order_acquire) == CUDA_OK && g_cuda.cuGetErrorString)
        g_cuda.cuGetErrorString(r, &s);
    snprintf(buf, len, "%s: CUresult %d (%s)", fn, r, s ? s : "unknown");
    return buf;
}

/* Whether before_fork got g_cuda_lock: only the forking thread touches it,
 * between its prepare and parent handlers. */
static int g_cuda_locked_for_fork;

void shim_cuda_lock_for_fork(void)
{
    /* Bounded: a fork from a constructor, inside dlopen, while another shim
     * thread waits in cuda_load for the loader's lock would otherwise wait
     * for ever.  After the bound the fork goes on, as it did before the shim
     * took this care. */
    atomic_store(&g_forking, 1);
    struct timespec until, now, nap = { 0, 100000 };
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += 1;
    for (;;) {
        if (!atomic_load(&g_in_loader))
            break;
        clock_gettime(CLOCK_REALTIME, &now);
        if (now.tv_sec > until.tv_sec || (now.tv_sec == until.tv_sec && now.tv_nsec >= until.tv_nsec))
            break;
        nanosleep(&nap, NULL);
    }
    /* Held only for a few stores now: taken so the child finds it free. */
    g_cuda_locked_for_fork = pthread_mutex_timedlock(&g_cuda_lock, &until) == 0;
}

void shim_cuda_unlock_after_fork(void)
{
    if (g_cuda_locked_for_fork)
        pthread_mutex_unlock(&g_cuda_lock);
    g_cuda_locked_for_fork = 0;
    atomic_store(&g_forking, 0);
}

void shim_cuda_after_fork_child(void)
{
    /* The state is published only once loaded: a reset lock is enough; the
     * child has no other thread, in the loader or not. */
    g_cuda_locked_for_fork = 0;
    pthread_mutex_init(&g_cuda_lock, NULL);
    atomic_store(&g_in_loader, 0);
    atomic_store(&g_forking, 0);
}
